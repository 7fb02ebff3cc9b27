# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Finding, opening and decoding span files; what was lost on the way.

Inputs are files, directories (searched recursively) and glob patterns;
files may be gzip-compressed.  In a directory or a glob, span files are
recognised by name (``*.jsonl``, ``*.log`` ...) and by a span record
near their start (anywhere in a service log); other files, such as a
JSON report, are skipped and named in the problems (``discover``).  A
line is a span record when it starts
with ``{``, or, in a service log written by the ``log`` sink, when it
contains ``{"v":`` (the record starts there).  Other lines of a service
log are counted, not reported.

Bad lines never stop the analysis: each is counted under one kind and
the first few of each kind are kept with file and line number:

``malformed``        not JSON, or not a JSON object
``truncated``        the last line of a file, cut short (a killed process)
``unknown_version``  ``v`` is not the schema version this analyser reads
``invalid``          fails ``instrument.schema.validate``
``duplicate``        the same process's ``seq`` seen again, in this
                     file or any other (``FileLoss``)
``late``             a record of a request already finalised

``FileLoss`` adds, per file and process, the ``seq`` numbers missing and
the events the runtime itself reported lost (``sink.drops``), and the
files whose end could not be read (a cut gzip stream, a read error):
every line before is read (``SpanFile``), the rest is named, not
counted.

``RecordDecoder`` turns a line into a record object whose attributes
are the schema's fields (``None`` when absent).  With msgspec installed
it decodes and type-checks in one step; whatever msgspec refuses is
decoded again by the reference path (``loads`` and
``schema.validate``), which alone decides what is bad and why, so both
paths accept and reject the same lines.
"""

import glob
import gzip
import io
import os
import re
import typing
import zlib

from instrument import schema

loads: typing.Callable[[bytes], typing.Any]
try:  # an optional accelerator (the ``report`` extra installs it)
    import orjson
    loads = orjson.loads
except ImportError:  # pragma: no cover - exercised without orjson
    import json
    loads = json.loads
try:  # decodes and type-checks a record in one go (``report`` extra)
    import msgspec
except ImportError:  # pragma: no cover - exercised without msgspec
    msgspec = None  # type: ignore[assignment]

SPAN_SUFFIXES = ('.jsonl', '.json', '.log', '.txt')
# service logs: the ``log`` sink's records may start anywhere in them
LOG_SUFFIXES = ('.log', '.txt')
# how much of a file ``sniff`` reads to find a span record
SNIFF_BYTES = 1 << 16
KINDS = ('malformed', 'truncated', 'unknown_version', 'invalid',
         'duplicate', 'late')
MAX_SAMPLES = 20
LOG_MARKER = b'{"v":'
# how a JSON report written by ``instrument-report --json`` starts
REPORT_MARKER = b'{"report_version"'
# compressed bytes read at once by ``SpanFile._salvage``
SALVAGE_BYTES = 1 << 16
_TS = re.compile(rb'"ts":\s*(\d+)')
_HOST = re.compile(rb'"host":\s*"([^"\\]*)"')


class InputError(Exception):
    """No input could be read at all."""


def _is_span_file(name: str) -> bool:
    if name.startswith('.'):
        return False
    if name.endswith('.gz'):
        name = name[:-3]
    return name.endswith(SPAN_SUFFIXES)


def _is_log_name(name: str) -> bool:
    if name.endswith('.gz'):
        name = name[:-3]
    return name.endswith(LOG_SUFFIXES)


def sniff(path: str) -> str:
    """What ``path`` holds, from its name and its first bytes.

    ``'spans'``: a span record in the first ``SNIFF_BYTES`` (for a
    service log, ``*.log`` or ``*.txt``, anywhere in the file: the
    ``log`` sink's lines may start late in it); ``'report'``: a JSON
    report of ``instrument-report``; ``'empty'``: nothing but
    whitespace; ``'other'``: anything else.  A file that cannot be
    read here counts as ``'spans'``: the reader says what is wrong.
    """
    opener: typing.Callable[..., typing.Any] = \
        gzip.open if path.endswith('.gz') else open
    try:
        with opener(path, 'rb') as f:
            head = f.read(SNIFF_BYTES)
            if head.lstrip().startswith(REPORT_MARKER):
                return 'report'
            if LOG_MARKER in head:
                return 'spans'
            if not _is_log_name(os.path.basename(path)):
                return 'empty' if not head.strip() else 'other'
            empty = not head.strip()
            tail = head[-len(LOG_MARKER):]
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    return 'empty' if empty else 'other'
                if LOG_MARKER in tail + chunk:
                    return 'spans'
                empty = empty and not chunk.strip()
                tail = chunk[-len(LOG_MARKER):]
    except (OSError, EOFError, ValueError, zlib.error):
        return 'spans'


def _names(paths: list, limit: int = 5) -> str:
    names = list(paths[:limit])
    if len(paths) > limit:
        names.append('and %d more' % (len(paths) - limit))
    return ', '.join(names)


def _skipped(reports: list, others: list, unnamed: list) -> list:
    """The lines that mention the files discovery left out."""
    out = []
    for path in reports:
        out.append('skipped %s: a JSON report of instrument-report, not a '
                   'span file (compare two runs with "instrument-report '
                   'compare RUN_A RUN_B")' % path)
    if others:
        out.append('skipped %d file%s holding no span record: %s' % (
            len(others), '' if len(others) == 1 else 's', _names(others)))
    if unnamed:
        out.append('skipped %d file%s not named like span files (%s '
                   'or *%s, optionally followed by .gz): %s' % (
                       len(unnamed), '' if len(unnamed) == 1 else 's',
                       ', '.join('*' + s for s in SPAN_SUFFIXES[:-1]),
                       SPAN_SUFFIXES[-1], _names(unnamed)))
    return out


def discover(paths: list) -> tuple:
    """Expand ``paths`` into a sorted list of span files.

    Returns ``(files, problems)``; ``problems`` names paths that matched
    nothing or could not be read, and the files left out.

    A file named on the command line is read unless it is a JSON report
    (``sniff``).  Files found in a directory or by a glob are read when
    their name is a span file's (``SPAN_SUFFIXES``, ``.gz`` too) and
    ``sniff`` finds span records in them (or nothing at all); the others
    (the demo's ``report.json``, ``servers.json`` and ``report.txt``,
    a service log without span records ...) are left out and mentioned.
    """
    found = []
    problems = []
    reports: list = []
    others: list = []
    unnamed: list = []

    def found_file(path: str, named: bool) -> None:
        if not named and not _is_span_file(os.path.basename(path)):
            if not os.path.basename(path).startswith('.'):
                unnamed.append(path)
            return
        if not os.access(path, os.R_OK):
            found.append(path)  # reported as not readable below
            return
        kind = sniff(path)
        if kind == 'report':
            reports.append(path)
        elif kind == 'other' and not named:
            others.append(path)
        else:
            found.append(path)

    for path in paths:
        if any(c in path for c in '*?['):
            matches = sorted(glob.glob(path, recursive=True))
            if not matches:
                problems.append('%s: no file matches' % path)
            for match in matches:
                if os.path.isdir(match):
                    for name in _walk(match):
                        found_file(name, False)
                else:
                    found_file(match, False)
        elif os.path.isdir(path):
            files = _walk(path)
            if not files:
                problems.append('%s: no files in this directory' % path)
            for name in files:
                found_file(name, False)
        elif os.path.isfile(path):
            found_file(path, True)
        else:
            problems.append('%s: no such file or directory' % path)
    problems.extend(_skipped(reports, others, unnamed))
    unique = []
    seen = set()
    for path in found:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        if not os.access(path, os.R_OK):
            problems.append('%s: not readable' % path)
            continue
        unique.append(path)
    return unique, problems


def _walk(directory: str) -> list:
    """Every file under ``directory``, hidden ones and those in hidden
    directories left out, sorted; symbolic links to directories are
    followed, each directory once."""
    out = []
    seen = set()
    for root, dirs, files in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
        for name in sorted(files):
            if not name.startswith('.'):
                out.append(os.path.join(root, name))
    return out


def unreadable(name: str, error: str, lines: int) -> str:
    """The problem of a file whose end could not be read."""
    return '%s: %s (the rest of the file after line %d is unreadable)' % (
        name, error, lines)


def _up_to_error(d: typing.Any, data: bytes) -> bytes:
    """What the decompressor ``d`` gives of ``data`` before the byte
    it fails on (fed byte by byte: a failing call gives nothing)."""
    out = []
    try:
        for i in range(len(data)):
            out.append(d.decompress(data[i:i + 1]))
    except zlib.error:
        pass
    return b''.join(out)


class SpanFile:
    """One input file read in chunks of lines, with its position."""

    def __init__(self, path: str, index: int, offset: int = 0,
                 host_offsets: typing.Optional[dict] = None) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.index = index
        # clock correction of the file's host, for the merge order; a
        # record of another host (a file several hosts wrote) takes
        # that host's (``host_offsets``: host name to offset)
        self.offset = offset
        self.host_offsets = host_offsets or {}
        self._by_raw_host: dict = {}
        self.size = os.path.getsize(path)
        self.lineno = 0
        # the latest (corrected) time seen, None before the first
        self.time: typing.Optional[int] = None
        self.done = False
        # why the rest of the file could not be read, and the lines read
        # (the last one cut short when it has no newline): the rest of
        # the file after line ``lines`` is lost
        self.error: typing.Optional[str] = None
        self.lines = 0
        self._raw = open(path, 'rb')
        self._f: typing.BinaryIO
        if path.endswith('.gz'):
            self._f = typing.cast(typing.BinaryIO, gzip.GzipFile(
                fileobj=self._raw, mode='rb'))
        else:
            self._f = self._raw

    def read_chunk(self, hint: int = 1 << 18) -> list:
        """The next lines (bytes, newline kept); [] at the end."""
        if self.done:
            return []
        try:
            lines = self._f.readlines(hint)
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            # a cut gzip stream, or a read error: keep what was read
            self.error = '%s: %s' % (exc.__class__.__name__, exc)
            lines = self._salvage()
            try:
                self._f.close()
            except (OSError, EOFError, ValueError, zlib.error):
                pass
            # the next read is the last, and yields nothing
            self._f = io.BytesIO()
        self.lines += len(lines)
        if not lines:
            self.close()
            return []
        last = lines[-1]
        match = _TS.search(last) if last.endswith(b'\n') else None
        if match is None and len(lines) > 1:
            match = _TS.search(lines[-2])
            if match is not None:
                last = lines[-2]
        if match is not None:
            ts = int(match.group(1)) + self._offset_of(last)
            if self.time is None or ts > self.time:
                self.time = ts
        return lines

    def _salvage(self) -> list:
        """The lines after the ``self.lines`` read, as far as the file
        can be read (``readlines`` drops the lines it read when it
        fails): the file read again from its start, decompressed by a
        ``zlib`` object that returns what it has, gzip members one
        after the other; the last line has no newline when the file
        ends in it."""
        skip = self.lines
        out = []
        d = zlib.decompressobj(31) if self.path.endswith('.gz') else None
        try:
            with open(self.path, 'rb') as raw:
                data = b''
                end = False
                while not end:
                    if not data:
                        data = raw.read(SALVAGE_BYTES)
                        if not data:
                            break
                    if d is None:
                        text, data = data, b''
                    else:
                        if d.eof:  # the next member of the file
                            if len(data) < 2:
                                data += raw.read(SALVAGE_BYTES)
                            if not data.startswith(b'\x1f\x8b'):
                                break
                            d = zlib.decompressobj(31)
                        before = d.copy()
                        try:
                            text = d.decompress(data)
                            data = d.unused_data if d.eof else b''
                        except zlib.error:
                            # damaged: what decompresses before it
                            text = _up_to_error(before, data)
                            end = True
                    if skip:
                        n = text.count(b'\n')
                        if n < skip:
                            skip -= n
                            continue
                        at = -1
                        for _ in range(skip):
                            at = text.index(b'\n', at + 1)
                        text = text[at + 1:]
                        skip = 0
                    out.append(text)
        except (OSError, EOFError, ValueError, zlib.error):
            pass  # as far as it can be read
        if skip:
            return []
        lines = [line + b'\n' for line in b''.join(out).split(b'\n')]
        last = lines.pop()
        if last != b'\n':
            lines.append(last[:-1])
        return lines

    def _offset_of(self, raw: bytes) -> int:
        """The clock correction of the host that wrote line ``raw``."""
        if not self.host_offsets:
            return self.offset
        match = _HOST.search(raw)
        if match is None:
            return self.offset
        name = match.group(1)
        off = self._by_raw_host.get(name)
        if off is None:
            try:
                host = name.decode('utf-8')
            except UnicodeDecodeError:
                host = None
            off = self.host_offsets.get(host, self.offset)
            if len(self._by_raw_host) < 4096:
                self._by_raw_host[name] = off
        return off

    def position(self) -> int:
        """Bytes of the (possibly compressed) file consumed so far."""
        try:
            return self._raw.tell() if not self._raw.closed else self.size
        except (OSError, ValueError):
            return self.size

    def close(self) -> None:
        self.done = True
        try:
            if self._f is not self._raw:
                self._f.close()
            self._raw.close()
        except OSError:
            pass


class Issues:
    """Counts and first examples of bad lines, per kind and per file."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(KINDS, 0)
        self.samples = {kind: [] for kind in KINDS}
        self.per_file = {}
        self.other_lines = 0
        self.files = []
        self.problems = []

    def add(self, kind: str, fname: str, lineno: int, reason: str) -> None:
        self.counts[kind] += 1
        per = self.per_file.setdefault(fname, dict.fromkeys(KINDS, 0))
        per[kind] += 1
        samples = self.samples[kind]
        if len(samples) < MAX_SAMPLES:
            samples.append((fname, lineno, reason[:200]))

    def no_record(self, fname: str, lineno: int, raw: bytes,
                  log_file: bool) -> None:
        """A non-blank line without a span record: a service log's own
        line (counted), or garbage in a span file (a bad line)."""
        if not raw.strip():
            return
        if log_file:
            self.other_lines += 1
        else:
            self.add('malformed', fname, lineno,
                     'not a span record: %r' % raw[:60])

    def merge(self, other: 'Issues') -> None:
        for kind in KINDS:
            self.counts[kind] += other.counts[kind]
            room = MAX_SAMPLES - len(self.samples[kind])
            if room > 0:
                self.samples[kind].extend(other.samples[kind][:room])
        for fname, per in other.per_file.items():
            mine = self.per_file.setdefault(fname, dict.fromkeys(KINDS, 0))
            for kind, n in per.items():
                mine[kind] += n
        self.other_lines += other.other_lines
        for problem in other.problems:
            if problem not in self.problems:
                self.problems.append(problem)

    def total(self) -> int:
        return sum(self.counts.values())


class SeqSet:
    """The ``seq`` numbers of one process (one incarnation: host, pid
    and start) read so far, in any order: a bitmap in pages of 64 Ki
    numbers (``pages``: page number to 8 KiB), so memory follows the
    range of numbers, not the records.  The reader of pass 2 sets the
    bits itself (its hot loop); ``add`` does the same.

    ``invalid`` counts the numbers of lines read but rejected (their
    bits are set: not missing, not records), ``first`` is the ``(file
    index, file name)`` where the process was first read, ``key`` its
    ``(host, pid, start)``, ``last`` the latest (corrected) time of its
    records, ``ended`` whether its ``process.end`` was read, ``hosts``
    the hosts of its records (one process may write for several: the
    demo's).
    """

    __slots__ = ('pages', 'invalid', 'first', 'key', 'last', 'ended',
                 'hosts')

    def __init__(self, first: tuple, key: tuple = ()) -> None:
        self.pages: dict = {}
        self.invalid = 0
        self.first = first
        self.key = key
        self.last = 0
        self.ended = False
        self.hosts: set = set(key[:1])

    def add(self, seq: int) -> bool:
        """Mark ``seq`` read; False when it was read before."""
        page = self.pages.get(seq >> 16)
        if page is None:
            page = self.pages[seq >> 16] = bytearray(8192)
        i = seq & 0xFFFF
        bit = 1 << (i & 7)
        byte = page[i >> 3]
        if byte & bit:
            return False
        page[i >> 3] = byte | bit
        return True

    def __contains__(self, seq: int) -> bool:
        page = self.pages.get(seq >> 16)
        i = seq & 0xFFFF
        return page is not None and bool(page[i >> 3] & (1 << (i & 7)))

    def span(self) -> tuple:
        """``(numbers read, lowest, highest)``; lowest and highest None
        when none."""
        n = 0
        lo = hi = None
        for pageno in sorted(self.pages):
            value = int.from_bytes(self.pages[pageno], 'little')
            if not value:
                continue
            n += value.bit_count()
            base = pageno << 16
            if lo is None:
                lo = base + (value & -value).bit_length() - 1
            hi = base + value.bit_length() - 1
        return n, lo, hi

    def row(self) -> list:
        """``[count, lo, hi, first, invalid, last, ended, hosts]``
        (``count``: the valid records; what ``FileLoss.merge`` adds)."""
        n, lo, hi = self.span()
        return [n - self.invalid, lo, hi, self.first, self.invalid,
                self.last, self.ended, set(self.hosts)]


def process_label(key: tuple) -> str:
    """``pid P on H (started at ts T)`` for a process key ``(host, pid,
    start)``."""
    host, pid, start = key
    if start is None:
        return 'pid %s on %s' % (pid, host)
    return 'pid %s on %s (started at ts %d)' % (pid, host, start)


class FileLoss:
    """Per process: ``seq`` numbers read, and what was lost.

    A process is ``(host, pid, start)``: the host and ``ts`` of its
    ``process.start`` record (``start`` None for records read before
    any, as in a file rotated away from its start, when pass 1 found no
    start of that pid), whatever file its records are found in: a
    record of a process already read is a duplicate wherever it is
    found (a copied file, a file holding its records twice), and a
    process that restarts (same pid) has a new ``process.start``.
    """

    def __init__(self) -> None:
        # process key: SeqSet (merged: its ``row()``)
        self.seqs = {}
        # process key: {sink: cumulative count} (sink.drops)
        self.drops = {}
        # process key: lines of it that were not valid records
        self.bad = {}
        # file name: records left out as duplicates, and records read
        self.duplicates = {}
        self.read = {}
        # file name: [lines read, why the rest is unreadable, hosts of
        # its records] of the files whose end could not be read (a cut
        # gzip stream): what was lost after is not known
        self.unreadable = {}

    def merge(self, other: 'FileLoss') -> None:
        for key, s in other.seqs.items():
            n, lo, hi, first, invalid, last, ended, hosts = _seq_row(s)
            mine = self.seqs.get(key)
            if mine is None:
                self.seqs[key] = _seq_row(s)
                continue
            mine = self.seqs[key] = _seq_row(mine)
            mine[0] += n
            mine[4] += invalid
            mine[5] = max(mine[5], last)
            mine[6] = mine[6] or ended
            mine[7] = mine[7] | hosts
            for i, pick in ((1, min), (2, max)):
                vals = [v for v in (mine[i], (lo, hi)[i - 1])
                        if v is not None]
                mine[i] = pick(vals) if vals else None
            mine[3] = min(mine[3], first)
        for key, counts in other.drops.items():
            mine = self.drops.setdefault(key, {})
            for sink, n in counts.items():
                if n > mine.get(sink, 0):
                    mine[sink] = n
        for attr in ('bad', 'duplicates', 'read'):
            mine = getattr(self, attr)
            for key, n in getattr(other, attr).items():
                mine[key] = mine.get(key, 0) + n
        for fname, (line, error, hosts) in other.unreadable.items():
            row = self.unreadable.setdefault(fname, [line, error, set()])
            row[2] = row[2] | hosts

    def records(self) -> int:
        return sum(_seq_row(s)[0] for s in self.seqs.values())

    def per_process(self) -> dict:
        """``{key: {file, host, pid, records, missing, dropped,
        invalid, last_us, ended, hosts}}`` of every process."""
        rows = {}
        for key, s in self.seqs.items():
            n, lo, hi, first, invalid, last, ended, hosts = _seq_row(s)
            host, pid, _start = key
            missing = 0
            if lo is not None and hi is not None:
                missing = max(0, hi - lo + 1 - n - invalid)
            rows[key] = {'file': first[1], 'host': host, 'pid': pid,
                         'records': n, 'missing': missing, 'dropped': 0,
                         'invalid': self.bad.get(key, 0), 'last_us': last,
                         'ended': ended, 'hosts': sorted(hosts)}
        for key, counts in self.drops.items():
            row = rows.get(key)
            if row is not None:
                row['dropped'] += sum(counts.values())
        return rows

    def summary(self) -> list:
        """Rows ``{file, host, pid, records, missing, dropped}`` of the
        processes that lost records (``file``: where each was first
        read)."""
        return sorted(({k: r[k] for k in ('file', 'host', 'pid', 'records',
                                          'missing', 'dropped')}
                       for r in self.per_process().values()
                       if r['missing'] or r['dropped']),
                      key=lambda r: (r['file'], r['pid'], r['host']))

    def lossy(self) -> list:
        """Rows of ``per_process`` with any loss (missing, dropped or
        bad lines)."""
        return sorted((r for r in self.per_process().values()
                       if r['missing'] or r['dropped'] or r['invalid']),
                      key=lambda r: (r['host'], r['pid'], r['file']))

    def unended(self) -> list:
        """Rows ``{file, host, pid, last_us}`` of the processes read
        without a ``process.end`` record: killed (``kill -9``, the OOM
        killer), or still running when collected."""
        return sorted(({k: r[k] for k in ('file', 'host', 'pid', 'last_us')}
                       for r in self.per_process().values()
                       if not r['ended'] and r['records']),
                      key=lambda r: (r['host'], r['pid'], r['file']))

    def duplicate_files(self) -> list:
        """Rows ``{file, duplicates, records}`` of the files holding
        records already read (``records``: all the valid records read
        from the file, duplicates included)."""
        return sorted(({'file': f, 'duplicates': n,
                        'records': self.read.get(f, n)}
                       for f, n in self.duplicates.items() if n),
                      key=lambda r: r['file'])


def _seq_row(s) -> list:
    if isinstance(s, SeqSet):
        return s.row()
    return list(s)


def decode_error(raw: bytes, at_eof: bool) -> tuple:
    """``(kind, reason)`` of a line that did not decode to a record."""
    try:
        rec = loads(raw)
    except ValueError as exc:
        if at_eof and not raw.endswith(b'\n'):
            return 'truncated', 'last line cut short (%s)' % exc
        return 'malformed', 'not JSON: %s' % exc
    return check_error(rec)


def check_error(rec: typing.Any) -> tuple:
    """``(kind, reason)`` for a decoded value that is not a valid record,
    ``(None, None)`` when it is valid."""
    if not isinstance(rec, dict):
        return 'malformed', 'not a JSON object'
    if rec.get('v') != schema.SCHEMA_VERSION:
        return 'unknown_version', 'schema version %r (this analyser ' \
            'reads %d)' % (rec.get('v'), schema.SCHEMA_VERSION)
    try:
        schema.validate(rec)
    except schema.SchemaError as exc:
        return 'invalid', str(exc)
    return None, None


class Validator:
    """``schema.validate`` with a cache of record shapes known good.

    The type checks of the schema depend only on the phase, the field
    names and the value types, so a shape validated once is accepted by
    a signature lookup; the value checks (version, span id, duration,
    status, error class) are made on every record.
    """

    def __init__(self) -> None:
        self._good = set()

    def ok(self, rec: typing.Any) -> bool:
        if rec.__class__ is not dict:
            return False
        try:
            sig = (rec['ph'], tuple(rec), tuple(map(type, rec.values())))
        except (KeyError, TypeError):
            return False
        if sig not in self._good:
            if check_error(rec)[0] is not None:
                return False
            if len(self._good) < 4096:
                self._good.add(sig)
            return True
        if rec['v'] != 1:
            return False
        ph = rec['ph']
        if ph == 'X':
            if not rec['span'] or rec['dur_us'] < 0 or \
                    rec['st'] not in ('ok', 'error'):
                return False
        elif ph == 'B' and not rec['span']:
            return False
        err = rec.get('err')
        if err is not None and err.get('cls').__class__ is not str:
            return False
        return True


class SlowRecord:
    """A record decoded by the reference path: the fields of
    ``schema.FIELDS`` as attributes."""

    __slots__ = schema.FIELDS

    def __init__(self, rec: dict) -> None:
        for name in schema.FIELDS:
            setattr(self, name, rec.get(name))


def _record_type():
    """The msgspec struct of a record: the types of ``schema._TYPES``,
    the fields of ``schema.REQUIRED`` required and not null; integers
    limited to 64 bits (larger ones take the reference path); ``v`` and
    ``ph`` limited to the known values."""
    int64 = typing.Annotated[int, msgspec.Meta(ge=-(1 << 63),
                                               le=(1 << 63) - 1)]
    special = {'v': typing.Literal[schema.SCHEMA_VERSION],
               'ph': typing.Literal[tuple(sorted(schema.PHASES))]}
    fields = []
    for name in schema.FIELDS:
        kind = schema._TYPES[name]
        kind = special.get(name, int64 if kind is int else kind)
        if name in schema.REQUIRED:
            fields.append((name, kind))
        else:
            fields.append((name, typing.Optional[kind], None))
    return msgspec.defstruct('Record', fields, kw_only=True,
                             forbid_unknown_fields=True, gc=False)


Record = _record_type() if msgspec is not None else None


class RecordDecoder:
    """Lines to valid records; why a line is not one.

    ``decode(raw)`` returns the record, or ``None`` and sets ``error``
    to ``(kind, reason)`` (a kind of ``KINDS``).  ``fast`` False forces
    the reference path (tests compare the two).
    """

    def __init__(self, fast: bool = True) -> None:
        self.validator = Validator()
        self.error: typing.Optional[tuple[str, str]] = None
        if fast and msgspec is not None:
            self.decode = self._fast_decoder()
        else:
            self.decode = self.slow

    def _fast_decoder(self):
        fast = msgspec.json.Decoder(Record).decode
        slow = self.slow

        def decode(raw: bytes):
            try:
                rec = fast(raw)
            except Exception:  # noqa: BLE001 - the reference path says why
                return slow(raw)
            # the value checks of schema.validate that types do not make
            ph = rec.ph
            if ph == 'X':
                st = rec.st
                if not rec.span or rec.dur_us is None or rec.dur_us < 0 \
                        or st != 'ok' and st != 'error':
                    return slow(raw)
            elif ph == 'B' and not rec.span:
                return slow(raw)
            err = rec.err
            if err is not None and err.get('cls').__class__ is not str:
                return slow(raw)
            return rec
        return decode

    def slow(self, raw: bytes) -> typing.Optional['SlowRecord']:
        """The reference path: ``loads`` and the schema's validator."""
        try:
            rec = loads(raw)
        except ValueError as exc:
            if not raw.endswith(b'\n'):
                self.error = ('truncated', 'last line cut short (%s)' % exc)
            else:
                self.error = ('malformed', 'not JSON: %s' % exc)
            return None
        if self.validator.ok(rec):
            return SlowRecord(rec)
        kind, reason = check_error(rec)
        self.error = (kind or 'invalid', reason or 'invalid record')
        return None
