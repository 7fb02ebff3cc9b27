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
"""Finding and opening span files.

Inputs are files, directories (searched recursively) and glob patterns;
files may be gzip-compressed.  In a directory or a glob, span files are
recognised by name (``*.jsonl``, ``*.log`` ...) and by a span record
near their start (anywhere in a service log); other files, such as a
JSON report, are skipped and named in the problems (``discover``).  A
line is a span record when it starts
with ``{``, or, in a service log written by the ``log`` sink, when it
contains ``{"v":`` (the record starts there).  Other lines of a service
log are counted, not reported.

``SpanFile`` reads one file in chunks of lines; a file whose end cannot
be read (a cut gzip stream, a read error) gives every line before it,
and says why the rest is lost (``unreadable``).  A file whose records
run backwards (``runs_backwards``: the ``seq`` of each process going
down from line to line, a file reversed by a tool) is read from its
end, so that both passes see its records in the order they were
written, in bounded memory: a plain file by blocks from its end, a
compressed one decompressed first into a temporary file
(``Backwards``).  Decoding the lines is ``codec``'s, counting what was
lost ``losses``'.
"""

import glob
import gzip
import io
import os
import re
import tempfile
import typing
import zlib

SPAN_SUFFIXES = ('.jsonl', '.json', '.log', '.txt')
# service logs: the ``log`` sink's records may start anywhere in them
LOG_SUFFIXES = ('.log', '.txt')
# how much of a file ``sniff`` reads to find a span record
SNIFF_BYTES = 1 << 16
LOG_MARKER = b'{"v":'
# how a JSON report written by ``instrument-report --json`` starts
REPORT_MARKER = b'{"report_version"'
# compressed bytes read at once by ``SpanFile._salvage``
SALVAGE_BYTES = 1 << 16
_TS = re.compile(rb'"ts":\s*(\d+)')
_HOST = re.compile(rb'"host":\s*"([^"\\]*)"')
_SEQ = re.compile(rb'"seq":\s*(\d+)')
_PID = re.compile(rb'"pid":\s*(\d+)')
# how many of a file's first lines ``runs_backwards`` looks at, and how
# many steps down a process's ``seq`` must take there (and four times
# as many as up) for the file to be read from its end
BACKWARDS_LINES = 1024
BACKWARDS_STEPS = 8
# bytes read at once from the end of a file read backwards
BACKWARDS_BYTES = 1 << 18
# what ``runs_backwards`` said of each file's first lines, by (path,
# size, mtime, inode): pass 1 looks, pass 2 (and its forked workers) reuse it
# (``backwards_seen``, ``remember_backwards``); at most this many
MAX_SNIFFED = 4096
_SNIFFED: dict = {}


class InputError(Exception):
    """No input could be read at all."""


def is_span_file(name: str) -> bool:
    if name.startswith('.'):
        return False
    if name.endswith('.gz'):
        name = name[:-3]
    return name.endswith(SPAN_SUFFIXES)


def is_log_name(name: str) -> bool:
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
    opener: typing.Callable[..., typing.Any] = (
        gzip.open if path.endswith('.gz') else open
    )
    try:
        with opener(path, 'rb') as f:
            head = f.read(SNIFF_BYTES)
            if head.lstrip().startswith(REPORT_MARKER):
                return 'report'
            if LOG_MARKER in head:
                return 'spans'
            if not is_log_name(os.path.basename(path)):
                return 'empty' if not head.strip() else 'other'
            empty = not head.strip()
            tail = head[-len(LOG_MARKER) :]
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    return 'empty' if empty else 'other'
                if LOG_MARKER in tail + chunk:
                    return 'spans'
                empty = empty and not chunk.strip()
                tail = chunk[-len(LOG_MARKER) :]
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
        out.append(
            'skipped %s: a JSON report of instrument-report, not a '
            'span file (compare two runs with "instrument-report '
            'compare RUN_A RUN_B")' % path
        )
    if others:
        out.append(
            'skipped %d file%s holding no span record: %s'
            % (len(others), '' if len(others) == 1 else 's', _names(others))
        )
    if unnamed:
        out.append(
            'skipped %d file%s not named like span files (%s '
            'or *%s, optionally followed by .gz): %s'
            % (
                len(unnamed),
                '' if len(unnamed) == 1 else 's',
                ', '.join('*' + s for s in SPAN_SUFFIXES[:-1]),
                SPAN_SUFFIXES[-1],
                _names(unnamed),
            )
        )
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
        if not named and not is_span_file(os.path.basename(path)):
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
        name,
        error,
        lines,
    )


def runs_backwards(lines: list) -> bool:
    """Do the records in ``lines`` (a file's first) run backwards: the
    ``seq`` of their processes going down from one record of a process
    to its next, at least ``BACKWARDS_STEPS`` times, and more than four
    times as often as up?  (A few records out of order, a file holding
    its records twice, a restarted process: no.)"""
    last: dict = {}
    up = down = 0
    for raw in lines[:BACKWARDS_LINES]:
        seq = _SEQ.search(raw)
        pid = _PID.search(raw)
        if seq is None or pid is None:
            continue
        n = int(seq.group(1))
        prev = last.get(pid.group(1))
        if prev is not None:
            if n > prev:
                up += 1
            elif n < prev:
                down += 1
        last[pid.group(1)] = n
    return down >= BACKWARDS_STEPS and down > 4 * up


def _file_key(path: str) -> typing.Optional[tuple]:
    """``(path, size, mtime, inode)`` of a file (None: it cannot be
    read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_size, st.st_mtime_ns, st.st_ino)


def backwards_seen(path: str) -> typing.Optional[bool]:
    """What ``runs_backwards`` said of this version of the file, when a
    ``SpanFile`` of this process (or one that sent it here:
    ``remember_backwards``) looked; None: not looked at."""
    key = _file_key(path)
    return None if key is None else _SNIFFED.get(key)


def remember_backwards(
    path: str, backwards: bool, key: typing.Optional[tuple] = None
) -> None:
    """Note what ``runs_backwards`` said of the file ``path`` (as it is
    now), for the next ``SpanFile`` of it not to read its start again."""
    if key is None:
        key = _file_key(path)
    if key is None:
        return
    if len(_SNIFFED) >= MAX_SNIFFED:
        _SNIFFED.clear()
    _SNIFFED[key] = backwards


class Backwards:
    """The lines of a binary file (seekable), from its last to its
    first, read in blocks from its end: bounded memory."""

    def __init__(self, f: typing.BinaryIO, size: int) -> None:
        self.f = f
        self.size = size
        # where the part not read yet ends
        self.pos = size
        # the start of a line whose beginning is in the part not read
        self.tail = b''

    def readlines(self, hint: int) -> list:
        """The next lines (newline kept, as ``readlines``), at least
        ``hint`` bytes of them unless the start is reached; [] there."""
        out: list = []
        n = 0
        while n < hint and (self.pos > 0 or self.tail):
            if self.pos == 0:
                out.append(self.tail)
                self.tail = b''
                break
            start = max(0, self.pos - BACKWARDS_BYTES)
            self.f.seek(start)
            data = self.f.read(self.pos - start) + self.tail
            self.pos = start
            parts = data.split(b'\n')
            lines = [p + b'\n' for p in parts[:-1]]
            if parts[-1]:  # the file's last line, without a newline
                lines.append(parts[-1])
            if start > 0 and lines:
                self.tail = lines.pop(0)
            else:
                self.tail = b''
            lines.reverse()
            out.extend(lines)
            n += len(data) - len(self.tail)
        return out


def inflate(
    path: str, damage: typing.Optional[list] = None
) -> typing.Iterator[bytes]:
    """The bytes of ``path``, decompressed (gzip members one after the
    other) by a ``zlib`` object that gives what it has, as far as the
    file can be read; ``damage`` (a list) gets why it stopped short."""
    d = zlib.decompressobj(31) if path.endswith('.gz') else None
    try:
        with open(path, 'rb') as raw:
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
                    except zlib.error as exc:
                        # damaged: what decompresses before it
                        text = _up_to_error(before, data)
                        end = True
                        if damage is not None:
                            damage.append(
                                '%s: %s' % (exc.__class__.__name__, exc)
                            )
                yield text
            if d is not None and not d.eof and not end and damage is not None:
                damage.append(
                    'EOFError: Compressed file ended before the '
                    'end-of-stream marker was reached'
                )
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        # as far as it can be read
        if damage is not None:
            damage.append('%s: %s' % (exc.__class__.__name__, exc))


def _up_to_error(d: typing.Any, data: bytes) -> bytes:
    """What the decompressor ``d`` gives of ``data`` before the byte
    it fails on (fed byte by byte: a failing call gives nothing)."""
    out = []
    try:
        for i in range(len(data)):
            out.append(d.decompress(data[i : i + 1]))
    except zlib.error:
        pass
    return b''.join(out)


class SpanFile:
    """One input file read in chunks of lines, with its position."""

    def __init__(
        self,
        path: str,
        index: int,
        offset: int = 0,
        host_offsets: typing.Optional[dict] = None,
    ) -> None:
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
        # read from its end (``runs_backwards``): its lines, counted
        # (None: read from its start)
        self.backwards: typing.Optional[int] = None
        self._back: typing.Optional[Backwards] = None
        self._tmp: typing.Optional[typing.BinaryIO] = None
        self._raw = open(path, 'rb')
        self._f: typing.BinaryIO
        if path.endswith('.gz'):
            self._f = typing.cast(
                typing.BinaryIO, gzip.GzipFile(fileobj=self._raw, mode='rb')
            )
        else:
            self._f = self._raw

    def read_chunk(self, hint: int = 1 << 18) -> list:
        """The next lines (bytes, newline kept); [] at the end."""
        if self.done:
            return []
        if (
            self._back is None
            and self.lineno == 0
            and self.lines == 0
            and self._runs_backwards()
        ):
            self._start_backwards()
        if self._back is not None:
            lines = self._back.readlines(hint)
        else:
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
        fails): the file read again from its start (``inflate``); the
        last line has no newline when the file ends in it."""
        skip = self.lines
        out = []
        for text in inflate(self.path):
            if skip:
                n = text.count(b'\n')
                if n < skip:
                    skip -= n
                    continue
                at = -1
                for _ in range(skip):
                    at = text.index(b'\n', at + 1)
                text = text[at + 1 :]
                skip = 0
            out.append(text)
        if skip:
            return []
        lines = [line + b'\n' for line in b''.join(out).split(b'\n')]
        last = lines.pop()
        if last != b'\n':
            lines.append(last[:-1])
        return lines

    def _runs_backwards(self) -> bool:
        """Do the records of the file's first lines run backwards
        (``runs_backwards``)?  (Read apart, as far as they can be; once
        per file and version of it: ``backwards_seen``.)"""
        key = _file_key(self.path)
        found = _SNIFFED.get(key) if key is not None else None
        if found is not None:
            return found
        head = b''
        for text in inflate(self.path):
            head += text
            if len(head) >= SNIFF_BYTES * 4:
                break
        found = runs_backwards(head.split(b'\n')[:-1])
        remember_backwards(self.path, found, key)
        return found

    def _start_backwards(self) -> None:
        """Read the file from its end from now on (``Backwards``; a
        compressed file decompressed into a temporary file first, as far
        as it can be)."""
        if self.path.endswith('.gz'):
            damage: list = []
            tmp = self._tmp = typing.cast(
                typing.BinaryIO, tempfile.TemporaryFile()
            )
            newlines = 0
            last = b''
            for text in inflate(self.path, damage):
                if text:
                    tmp.write(text)
                    newlines += text.count(b'\n')
                    last = text[-1:]
            if damage:
                self.error = damage[0]
            size = tmp.tell()
            source = tmp
        else:
            self._raw.seek(0)
            newlines = 0
            last = b''
            while True:
                block = self._raw.read(1 << 20)
                if not block:
                    break
                newlines += block.count(b'\n')
                last = block[-1:]
            size = self._raw.tell()
            source = self._raw
        self.backwards = newlines + (1 if last not in (b'', b'\n') else 0)
        # every line that can be read (before the damage, if any)
        self.lines = self.backwards
        try:
            if self._f is not self._raw:
                self._f.close()
        except (OSError, EOFError, ValueError, zlib.error):
            pass
        self._f = source
        self._back = Backwards(source, size)

    def line_of(self, n: int) -> int:
        """The line number in the file of the ``n``-th line read."""
        return n if self.backwards is None else self.backwards + 1 - n

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
        back = self._back
        if back is not None and not self.done:
            return self.size - self.size * back.pos // max(back.size, 1)
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
        if self._tmp is not None:
            try:
                self._tmp.close()
            except OSError:
                pass
