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
"""``instrument-report follow``: span files read as they grow.

``Follower.poll`` reads what was appended to the span files of its
inputs since the last poll (``Tailed``: a file followed by its inode,
from where it was, complete lines only) and hands it to the batch
report's own reader and request model: ``ingest.reader.PartReader``
(validation, ``seq`` tracking, bad lines counted, not fatal) and
``model.requests.Assembler`` (a request's assembly, finalisation and
classification), with the ``failures`` and ``retries`` sections.  The
files of one poll are read in step by time (``stream.chunks``), as the
batch report reads them.

A request is finalised behind a *watermark*: the newest (corrected)
time read minus ``lag`` (and, while a poll reads, no later than the
time every file with lines to read has reached), then, as in the batch
report, once it was quiet for ``idle`` with an outcome, or for ``hung``
without one (a process killed before its end record).  The finished
request is folded into ``exposition.Totals`` and dropped; at most
``max_open`` requests stay open (the least recently active beyond that
are dropped unfinished and counted).  Events of a request finalised
before they were read are counted as ``late``.

The clock offsets, process starts and request-id aliases are those of
the batch report's pass 1 (``ingest.clockpass``), read once over the
files found at the start; the RPC spans read after it keep feeding its
matcher, and the offsets are solved again after a poll that found new
hops.  ``finish`` finalises every request left (``--once``: read what
is there, finish: the figures of the batch report on the same files).

Files: a directory is searched recursively for span files (by name,
``spanfiles.is_span_file``).  A file renamed by a rotation keeps being
read under its new name until it disappears (then what is left in it
is read); a new file at the old name is read from its start; a file
that shrank (``copytruncate``) is read again from its start.  A copy
of records already read (a rotated copy) is recognised by the records'
``seq`` (counted as duplicate lines, not read twice).  Compressed files
are read once; one that appears after the start (a compressed
rotation, records already read) is left out, and so is a file that
holds something other than span records (a JSON report:
``spanfiles.sniff``).
"""

import glob
import gzip
import itertools
import os
import re
import statistics
import time
import typing
import zlib

from instrument.analysis import exposition
from instrument.analysis import livefindings
from instrument.analysis import pipeline
from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import reader as reader_mod
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from instrument.analysis.model import classify
from instrument.analysis.model import clocks
from instrument.analysis.model import damage
from instrument.analysis.model import requests
from instrument.analysis.model import spans as spans_mod
from instrument.analysis.sections import base
from instrument.analysis.sections import failures
from instrument.analysis.sections import retries

S_DUR = spans_mod.S_DUR
_TS = re.compile(rb'"ts":\s*(\d+)')
_HOST = re.compile(rb'"host":\s*"([^"\\]*)"')
# bytes read from one file at once
CHUNK_BYTES = stream.CHUNK_BYTES
# bytes kept of what was read last, to tell a file rewritten in place
TAIL_BYTES = 64
# request ids of finalised requests remembered (their events read
# later counted as late, not opened again)
RECENT = 100_000
# how long the windows of a loss folded away (``Follower._prune``) are
# kept for the requests still open: a request open that long after a
# loss is not marked by it
KEEP_WINDOWS_US = 24 * 3600 * 1_000_000
# what is counted of the processes done with (``Follower.losses``)
LOSS_COUNTS = ('records', 'missing', 'lost')


class Tailed:
    """One span file followed: its handle, position, partial last line
    and latest time.  Duck-types ``spanfiles.SpanFile`` for the reader
    and ``stream.chunks``."""

    def __init__(self, path: str, index: int, offsets: dict) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.index = index
        self.offsets = offsets
        self.lineno = 0
        self.lines = 0
        self.time: typing.Optional[int] = None
        self.done = False
        self.error: typing.Optional[str] = None
        self.backwards = None
        self.compressed = path.endswith('.gz')
        self.partial = b''
        # the last bytes read (``rewritten``)
        self.tail = b''
        # read what is left when the file ends (``--once``, a file
        # that disappeared): its last line, even without its newline
        self.flush = False
        self.host: typing.Optional[str] = None
        self.pos = 0
        self._raw = open(path, 'rb')
        st = os.fstat(self._raw.fileno())
        self.ident = (st.st_dev, st.st_ino)
        self._f: typing.Any = (
            gzip.GzipFile(fileobj=self._raw, mode='rb')
            if self.compressed
            else self._raw
        )

    def line_of(self, n: int) -> int:
        return n

    def position(self) -> int:
        return self.pos

    def size_read(self) -> int:
        """Bytes of the file on disk consumed so far."""
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return 0

    def rewritten(self) -> bool:
        """Do the bytes before the position still hold what was read
        last (a plain file)?  Not: it was truncated (``copytruncate``),
        and may have grown again since."""
        if self.compressed or self.done or not self.tail:
            return False
        at = self.size_read() - len(self.tail)
        try:
            return (
                os.pread(self._raw.fileno(), len(self.tail), at) != self.tail
            )
        except OSError:
            return True

    def truncated(self) -> list:
        """The file was truncated (``copytruncate``): read it from its
        start from now on.  Returns the lines written after the last
        read and before the copy, from the copy (a file beside it whose
        name starts with this one's and holds what was read at the same
        place), if one is found."""
        missed = self._from_copy()
        self._raw.seek(0)
        self.partial = b''
        self.tail = b''
        self.pos = 0
        return missed

    def _from_copy(self) -> list:
        directory = os.path.dirname(self.path) or '.'
        at = self.size_read()
        tail = self.tail
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return []
        for name in names:
            if (
                name == self.name
                or not name.startswith(self.name)
                or name[len(self.name)] not in '.-_'
            ):
                continue
            path = os.path.join(directory, name)
            opener: typing.Any = gzip.open if name.endswith('.gz') else open
            try:
                with opener(path, 'rb') as src:
                    src.seek(at - len(tail))
                    if src.read(len(tail)) != tail:
                        continue
                    rest = self.partial + src.read()
            except (OSError, EOFError, ValueError, zlib.error):
                continue
            lines = [p + b'\n' for p in rest.split(b'\n')[:-1]]
            self.lines += len(lines)
            return lines
        return []

    def read_chunk(self, hint: int = CHUNK_BYTES) -> list:
        """The next complete lines (newline kept); [] when none."""
        if self.done:
            return []
        data = self.partial
        self.partial = b''
        eof = False
        while True:
            try:
                more = self._f.read(hint)
            except (OSError, EOFError, ValueError, zlib.error) as exc:
                self.error = '%s: %s' % (exc.__class__.__name__, exc)
                more = b''
                self.flush = True
                self.close()
            if not more:
                eof = True
                break
            self.pos += len(more)
            data += more
            self.tail = (self.tail + more)[-TAIL_BYTES:]
            if b'\n' in more or len(data) >= hint:
                break
        if eof and self.compressed and not self.done:
            self.close()
        cut = data.rfind(b'\n')
        if cut < 0:
            rest, data = data, b''
        else:
            rest, data = data[cut + 1 :], data[: cut + 1]
        lines = [p + b'\n' for p in data.split(b'\n')[:-1]] if data else []
        if rest:
            if eof and (self.flush or self.done):
                lines.append(rest)
            else:
                self.partial = rest
        if not lines:
            return []
        self.lines += len(lines)
        self._note_time(lines)
        return lines

    def _note_time(self, lines: list) -> None:
        for raw in (lines[-1], lines[0]):
            match = _TS.search(raw)
            if match is None:
                continue
            if self.host is None:
                found = _HOST.search(raw)
                if found is not None:
                    self.host = found.group(1).decode('utf-8', 'replace')
            ts = int(match.group(1)) + self.offsets.get(self.host, 0)
            if self.time is None or ts > self.time:
                self.time = ts
            return

    def close(self) -> None:
        self.done = True
        try:
            if self._f is not self._raw:
                self._f.close()
            self._raw.close()
        except OSError:
            pass


class Options:
    """What ``follow`` was told: seconds, as the command line takes
    them."""

    def __init__(
        self,
        lag_s: float = 30.0,
        idle_s: float = 30.0,
        hung_s: float = 600.0,
        max_open: int = 100_000,
        clock_horizon_s: float = 600.0,
        fast_decode: bool = True,
        findings_window_s: float = 600.0,
        findings_every_s: float = 30.0,
        findings_max_requests: int = 50_000,
        fold_margin_s: typing.Optional[float] = None,
    ) -> None:
        self.lag_us = int(lag_s * 1e6)
        # how far behind the watermark the records of a page of a
        # process's seq numbers, and a process's end, are before they
        # are folded (``Follower._prune``; None: ``hung_s``)
        self.fold_margin_us = int(
            (hung_s if fold_margin_s is None else fold_margin_s) * 1e6
        )
        # the advisor's window (0: no findings), how often its rules
        # run (seconds of wall time; 0: every poll) and its requests
        # at most (``livefindings``)
        self.findings_window_us = int(findings_window_s * 1e6)
        self.findings_every_s = findings_every_s
        self.findings_max_requests = findings_max_requests
        self.idle_s = idle_s
        self.hung_s = hung_s
        self.max_open = max_open
        self.clock_horizon_s = clock_horizon_s
        self.fast_decode = fast_decode


class Follower:
    """The span files of ``inputs`` (files, directories, globs), read as
    they grow (module doc)."""

    def __init__(
        self,
        inputs: typing.Sequence[str],
        opts: typing.Optional[Options] = None,
    ) -> None:
        self.inputs = list(inputs)
        self.opts = opts or Options()
        self.totals = exposition.Totals()
        # {(dev, inode): Tailed}
        self.files: dict = {}
        self.next_index = 0
        self.started = False
        self.newest: typing.Optional[int] = None
        self.watermark: typing.Optional[int] = None
        self.dropped = 0
        self.rotations = {'renamed': 0, 'truncated': 0}
        # paths left out (a compressed file found after the start, a
        # file that holds no span record)
        self.skipped_compressed: set = set()
        self.offsets: dict = {}
        # the hosts a solve placed (their offset known from hops), and
        # of them those placed before their hops passed the clock
        # horizon (``_place``)
        self.placed: set = set()
        self.provisional: set = set()
        # the hosts of files that appeared after the start, not placed
        # (on their own clock: their times do not move the watermark),
        # and the index of the first such file
        self.unplaced: set = set()
        self.later_files = 0
        self.popts = pipeline.Options(
            idle_s=self.opts.idle_s,
            hung_s=self.opts.hung_s,
            clock_horizon_s=self.opts.clock_horizon_s,
            fast_decode=self.opts.fast_decode,
        )
        self.matcher = clockpass.HopMatcher(self.popts.clock_horizon_us)
        self.decode = clockpass.rpc_span_decoder(self.opts.fast_decode)
        self.begun: dict = {}
        self.hops = 0
        # request-id pairs and periodic runs' dispatches of pass 1 known
        # (``_learn``)
        self.pairs = 0
        self.periodic = 0
        self.polls = 0
        # fold the finished requests only at the end (``once``: the
        # losses of the whole input known when they are marked, as
        # the batch report marks them; memory as the batch report's)
        self.defer = False
        self._windows: typing.Optional[dict] = None
        self.reader: typing.Any = None
        self.model: typing.Any = None
        self.failures: typing.Any = None
        self.retries: typing.Any = None
        # the advisor's rules over a window (``livefindings``), None:
        # off; when they last ran (monotonic seconds)
        self.findings: typing.Optional[livefindings.Window] = None
        self.evaluated: typing.Optional[float] = None
        # the processes done with (``_prune``): their counts summed
        # (``LOSS_COUNTS``, ``processes``), and the windows of their
        # losses ({key: (windows, hosts)}) kept for the requests open
        self.retired: dict = dict.fromkeys(LOSS_COUNTS + ('processes',), 0)
        self.retired_windows: dict = {}

    # -- files -------------------------------------------------------------

    def discover(self) -> dict:
        """``{(dev, inode): path}`` of the span files of the inputs now."""
        paths = []
        for arg in self.inputs:
            if any(c in arg for c in '*?['):
                for match in sorted(glob.glob(arg, recursive=True)):
                    paths.extend(self._under(match))
            elif os.path.isdir(arg):
                paths.extend(self._under(arg))
            elif os.path.isfile(arg):
                paths.append(arg)
        out: dict = {}
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            out.setdefault((st.st_dev, st.st_ino), (path, st.st_size))
        return out

    @staticmethod
    def _under(path: str) -> list:
        if not os.path.isdir(path):
            return (
                [path]
                if spanfiles.is_span_file(os.path.basename(path))
                else []
            )
        out = []
        for root, dirs, names in os.walk(path, followlinks=True):
            dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
            out.extend(
                os.path.join(root, n)
                for n in sorted(names)
                if spanfiles.is_span_file(n)
            )
        return out

    def _open(self, path: str) -> typing.Optional[Tailed]:
        try:
            f = Tailed(path, self.next_index, self.offsets)
        except OSError:
            return None
        self.next_index += 1
        self.files[f.ident] = f
        return f

    def _refresh(self) -> list:
        """Open the new files, mark those gone or rotated; the files to
        read this poll."""
        found = self.discover()
        gone = []
        for ident, f in self.files.items():
            if ident not in found:
                # moved away or removed: what is left, then closed
                f.flush = True
                gone.append(f)
                self.rotations['renamed'] += 1
                continue
            path, size = found[ident]
            if path != f.path:
                f.path = path
                self.rotations['renamed'] += 1
            if not f.compressed and (size < f.size_read() or f.rewritten()):
                missed = f.truncated()
                if missed:
                    self.reader.chunk(f, missed, f.lineno)
                    f.lineno += len(missed)
                self.rotations['truncated'] += 1
        for ident, (path, _size) in sorted(
            found.items(), key=lambda kv: kv[1][0]
        ):
            if ident in self.files or path in self.skipped_compressed:
                continue
            if self.started and path.endswith('.gz'):
                self.skipped_compressed.add(path)
                continue
            if not spanfiles.is_log_name(
                os.path.basename(path)
            ) and spanfiles.sniff(path) in ('report', 'other'):
                # a JSON report, the demo's servers.json: not spans
                self.skipped_compressed.add(path)
                continue
            self._open(path)
        return gone

    # -- the batch report's pass 1, then its reader ------------------------

    def _start(self) -> None:
        """Pass 1 over the files there now (``clockpass``), then the
        reader and the request model with what it found."""
        paths = [
            f.path for f in sorted(self.files.values(), key=lambda f: f.index)
        ]
        matcher = self.matcher
        found = set()
        for f, lines, first, watermark in stream.chunks(
            stream.open_files(paths)
        ):
            if f.index not in found:
                host = clockpass.file_host(lines)
                if host is not None:
                    found.add(f.index)
                    matcher.hosts.add(host)
            matcher.add(
                f.name,
                clockpass.rpc_spans(
                    lines,
                    first,
                    self.decode,
                    self.begun.setdefault(('start', f.index), {}),
                ),
                watermark,
            )
        matcher.finish()
        self.begun.clear()
        result = clocks.solve(matcher.collector, matcher.hosts)
        self.hops = matcher.counts['hops']
        self._solved(result)
        # the hosts of the files there at the start: as the batch
        # report places them
        self.placed |= matcher.hosts
        self.later_files = self.next_index
        popts = self.popts
        popts.process_starts = sorted(matcher.starts)
        popts.aliases = matcher.aliases_of()
        popts.periodic_hops = matcher.periodic_hops
        popts.periodic_contexts = matcher.periodic_contexts
        ctx = base.Context(None, None, popts)
        self.failures = failures.Failures(ctx)
        self.retries = retries.Retries(ctx)
        hooks: list = [self.failures.finished]
        consumers: tuple = ()
        if self.opts.findings_window_us > 0:
            self.findings = livefindings.Window(
                self.opts.findings_window_us,
                popts,
                self.opts.findings_max_requests,
                sliding=not self.defer,
            )
            hooks.append(self.findings.finished)
            consumers = self.findings.consumers
        self.model = requests.Assembler(
            popts.idle_us,
            popts.hung_us,
            classify.Normaliser(sorted(result.hosts)),
            hooks=hooks,
            keep_lifecycles=False,
        )
        self.reader = reader_mod.PartReader(
            self.offsets,
            0,
            1,
            popts,
            (self.model, self.failures, self.retries) + consumers,
        )
        self.started = True

    def _learn(self) -> None:
        """What the RPC spans read since the start say: new offsets
        (solved again when new hops were matched), process starts,
        aliases, the dispatches of periodic runs."""
        matcher = self.matcher
        reader = self.reader
        for host, pid, ts in matcher.starts:
            mine = reader.starts.setdefault(pid, [])
            if (ts, host) not in mine:
                mine.append((ts, host))
                mine.sort()
                reader.start_hosts.add(host)
        if len(matcher.rejoin.pairs) != self.pairs:
            self.pairs = len(matcher.rejoin.pairs)
            aliases = matcher.aliases_of()
            new = {
                a: b for a, b in aliases.items() if reader.aliases.get(a) != b
            }
            reader.aliases.update(aliases)
            for began, req in new.items():
                self._rejoin(began, req)
            # the oldest pairs forgotten past RECENT (their requests
            # are long finalised)
            pairs = matcher.rejoin.pairs
            for began in list(
                itertools.islice(pairs, max(0, len(pairs) - RECENT))
            ):
                del pairs[began]
                reader.aliases.pop(began, None)
            self.pairs = len(pairs)
        if len(matcher.periodic_hops) != self.periodic:
            self.periodic = len(matcher.periodic_hops)
            for sid, run in matcher.periodic_hops.items():
                if len(reader.periodic_spans) >= clockpass.MAX_PERIODIC_HOPS:
                    break
                reader.periodic_spans.setdefault(sid, run)
        if matcher.counts['hops'] != self.hops:
            self.hops = matcher.counts['hops']
            result = clocks.solve(matcher.collector, matcher.hosts)
            self._solved(result)

    def _solved(self, result: clocks.ClockResult) -> None:
        """The offsets of a solve (``clocks.solve``) taken: those of
        the hosts it placed, and 0 for the others but those ``_place``
        placed (kept until a solve places them)."""
        for host, info in result.hosts.items():
            if info['status'] != 'uncorrected':
                self.offsets[host] = info['offset_us']
                self.placed.add(host)
                self.provisional.discard(host)
            elif host not in self.provisional:
                self.offsets[host] = info['offset_us']

    def _place(self, reads: list) -> None:
        """Place the hosts of ``reads`` (a poll's chunks, pass 1 read)
        that no solve placed yet (a host whose files appeared after the
        start) before pass 2 reads them, as the batch report's pass 1
        would: the hops matched so far and those of the sends and
        dispatches read but not yet past the clock horizon
        (``clockpass.HopMatcher.entries``) solved, each such host's
        offset taken relative to the hosts already placed (the median
        of their differences: the solve's reference may be another).
        The files' times read on its own clock are moved with it."""
        self.unplaced |= {
            f.host
            for f, _lines, _first, _w in reads
            if f.index >= self.later_files
            and f.host is not None
            and f.host not in self.placed
        }
        self.unplaced -= self.placed
        hosts = self.unplaced
        if not hosts:
            return
        matcher = self.matcher
        collector = clocks.PairCollector(matcher.collector.keep)
        collector.merge(matcher.collector)
        found = False
        for e in matcher.entries.values():
            p_host, p_start, p_end, sync, kids = e[:5]
            if p_host is None or not kids:
                continue
            for c_host, c_start, c_end, origin in kids.values():
                if p_host in hosts or c_host in hosts:
                    found = True
                    collector.add_hop(
                        p_host,
                        p_start,
                        p_end,
                        c_host,
                        c_start,
                        c_end,
                        sync,
                        origin,
                    )
        if not found:
            return
        result = clocks.solve(collector, matcher.hosts)
        for host in sorted(hosts):
            info = result.hosts.get(host)
            if info is None or info['status'] == 'uncorrected':
                continue
            shifts = [
                self.offsets[other] - other_info['offset_us']
                for other, other_info in result.hosts.items()
                if other in self.placed
                and other_info['group'] == info['group']
                and other in self.offsets
            ]
            if not shifts:
                continue
            offset = info['offset_us'] + int(statistics.median(shifts))
            moved = offset - self.offsets.get(host, 0)
            self.offsets[host] = offset
            self.placed.add(host)
            self.provisional.add(host)
            self.unplaced.discard(host)
            for f in self.files.values():
                if f.host == host and f.time is not None:
                    f.time += moved

    def _rejoin(self, began: str, req: str) -> None:
        """Records read under ``began`` before pass 1 said they are
        request ``req``'s (an ``api.request`` span whose start and end
        came in different polls): moved to ``req``'s open request, as
        if read under it (``model.requests.Assembler``'s rules: the
        start and the end of one span are one span)."""
        model = self.model
        r = model.open.pop(began, None)
        if r is None:
            return
        into = model.open.get(req)
        if into is None:
            r.req = req
            model.open[req] = r
            return
        spans = into.spans
        for sid, s in r.spans.items():
            have = spans.get(sid)
            if have is None:
                spans[sid] = s
                if s[S_DUR] is None:
                    into.open += 1
                continue
            if have[S_DUR] is None and s[S_DUR] is not None:
                # its end replaces its start
                spans[sid] = s
                into.open -= 1
            elif have[S_DUR] is not None and s[S_DUR] is None:
                pass  # its start, its end read
            else:
                model.duplicates += 1
                continue
            if into.begun is None:
                into.begun = set()
            into.begun.add(sid)
        for parent, entry in r.sql.items():
            mine = into.sql.get(parent)
            if mine is None:
                into.sql[parent] = entry
            else:
                mine[0] += entry[0]
                mine[1] += entry[1]
        into.sql_errors.extend(r.sql_errors)
        into.instants.extend(r.instants)
        into.events += r.events
        if r.last > into.last:
            into.last = r.last
        if r.begun:
            into.begun = (into.begun or set()) | r.begun

    # -- reading -----------------------------------------------------------

    def poll(self) -> int:
        """Read what was appended since the last poll; finalise what
        the watermark passed.  Returns the lines read."""
        gone = self._refresh()
        if not self.started:
            if not self.files:
                # nothing yet: pass 1 waits for the first files
                return 0
            self._start()
        self.polls += 1
        self._windows = None
        before = self.reader.lines
        lag = self.opts.lag_us
        files = [f for f in self.files.values() if not f.done]
        reads: typing.Iterable = stream.chunks(files)
        if self.polls > 1:
            # pass 1 over what was appended, then pass 2 (the start
            # of a request read under the id it ended with, even when
            # its end is read in this poll); pass 1 read the first
            # poll's
            reads = list(reads)
            for f, lines, first, watermark in reads:
                self.matcher.add(
                    f.name,
                    clockpass.rpc_spans(
                        lines,
                        first,
                        self.decode,
                        self.begun.setdefault(f.index, {}),
                    ),
                    self.newest if watermark is None else watermark,
                )
            if self.newest is not None:
                # every file read to its end: the hops the horizon
                # passed matched (a file of no time yet, a service
                # log's, holds the chunks' watermark back)
                self.matcher.add('', [], self.newest)
            self._learn()
            self._place(reads)
        for f, lines, first, watermark in reads:
            self.reader.chunk(f, lines, first)
            if (
                f.time is not None
                and (self.newest is None or f.time > self.newest)
                and f.host not in self.unplaced
            ):
                # (not a host on its own clock: ``_place``)
                self.newest = f.time
            if self.newest is not None:
                cut = self.newest - lag
                self._sweep(cut if watermark is None else min(watermark, cut))
        for f in gone:
            f.close()
            self.files.pop(f.ident, None)
        self._learn()
        if self.newest is not None:
            self._sweep(self.newest - lag)
        self._bound()
        if not self.defer:
            self._fold()
            self._prune()
            self._evaluate(force=False)
        return self.reader.lines - before

    def _evaluate(self, force: bool) -> None:
        """Run the advisor's rules over the window, when due
        (``findings_every_s``) or ``force``."""
        if self.findings is None:
            return
        now = time.monotonic()
        if (
            not force
            and self.evaluated is not None
            and now - self.evaluated < self.opts.findings_every_s
        ):
            return
        self.findings.evaluate()
        self.evaluated = now

    def _sweep(self, watermark: int) -> None:
        self.model.sweep(watermark)
        self.watermark = watermark
        if self.findings is not None:
            self.findings.advance(watermark)
        if len(self.model.summaries) >= 1024 and not self.defer:
            self._fold()

    def _bound(self) -> None:
        """At most ``max_open`` requests open: the least recently active
        beyond that dropped unfinished (counted)."""
        model = self.model
        excess = len(model.open) - self.opts.max_open
        if excess <= 0:
            return
        oldest = sorted(model.open.items(), key=lambda kv: kv[1].last)
        for req, _r in oldest[:excess]:
            del model.open[req]
            model.recent[req] = None
        self.dropped += excess
        self._trim_recent()

    def _trim_recent(self) -> None:
        recent = self.model.recent
        while len(recent) > RECENT:
            recent.popitem(last=False)

    def _fold(self) -> None:
        """Fold the requests finalised since the last fold into the
        totals, and drop them."""
        model = self.model
        done = model.summaries
        if not done:
            return
        model.summaries = []
        loss = self.reader.loss
        if self._windows is None:
            # when each process lost records (once a poll), those done
            # with too
            windows = {
                key: found for key, (found, _h) in self.retired_windows.items()
            }
            windows.update(loss.windows())
            self._windows = windows
        windows = self._windows
        damage.mark(
            done,
            windows,
            {
                key: (
                    loss.seqs[key].hosts
                    if key in loss.seqs
                    else self.retired_windows[key][1]
                )
                for key in windows
            },
            self.reader.repaired,
            self.popts.hung_us,
        )
        for s in done:
            self.totals.fold(s)
            if self.findings is not None:
                self.findings.request(s)
            # remembered as a request id only (its late events counted)
            model.recent[s.req] = None
        self._trim_recent()

    def _prune(self) -> None:
        """Bounded memory on a long run (not ``once``: its losses are
        the batch report's): what the watermark passed by the fold
        margin (``Options.fold_margin_us``) is folded into counts.

        A process that ended before is done with
        (``losses.FileLoss.retire``: its counts summed in ``retired``,
        the windows of its losses kept ``KEEP_WINDOWS_US``); of the
        others, the pages of ``seq`` numbers below the highest whose
        records are all older are folded (``losses.SeqSet.fold``: their
        counts, the windows of their losses and their holes kept; a
        record of them read later is a duplicate, or late when it is
        one of the holes, never read again).  Then what is held per
        file of the files closed."""
        if self.watermark is None:
            return
        loss = self.reader.loss
        horizon = self.watermark - self.opts.fold_margin_us
        forget = self.watermark - KEEP_WINDOWS_US
        for key in [
            key for key, s in loss.seqs.items() if s.ended and s.last < horizon
        ]:
            hosts = set(loss.seqs[key].hosts)
            row, found = loss.retire(key)
            for name in LOSS_COUNTS:
                self.retired[name] += row[name]
            self.retired['processes'] += 1
            if found:
                self.retired_windows[key] = (found, hosts)
        for key, (found, hosts) in list(self.retired_windows.items()):
            found = [w for w in found if w[1] >= forget]
            if found and key in loss.retired:
                self.retired_windows[key] = (found, hosts)
            else:
                del self.retired_windows[key]
        for s in loss.seqs.values():
            floor = s.floor
            for pageno in sorted(s.pages)[:-1]:
                if s.latest(pageno) >= horizon:
                    break
                floor = pageno + 1
            s.fold(floor)
            if s.folded_windows:
                s.forget(forget)
        # what is held per file, of the files closed
        reader = self.reader
        indexes = {f.index for f in self.files.values()}
        names = {f.name for f in self.files.values()}
        for fi_pid in [k for k in reader.current if k[0] not in indexes]:
            del reader.current[fi_pid]
        for held in (loss.duplicates, loss.read, reader.issues.per_file):
            for name in [n for n in held if n not in names]:
                del held[name]

    def losses(self) -> dict:
        """``{records, missing, lost, processes, retired}``: the valid
        records read, the ``seq`` numbers never read, the records lost
        (``losses.FileLoss.per_process``), of every process read
        (``retired``: of them, those done with)."""
        out = dict.fromkeys(LOSS_COUNTS, 0)
        if self.reader is not None:
            for row in self.reader.loss.per_process().values():
                for name in LOSS_COUNTS:
                    out[name] += row[name]
            out['processes'] = len(self.reader.loss.seqs)
        for name in LOSS_COUNTS:
            out[name] += self.retired[name]
        out['retired'] = self.retired['processes']
        out['processes'] = out.get('processes', 0) + out['retired']
        return out

    def finish(self) -> None:
        """Finalise every request still open (the end of the input)."""
        if not self.started:
            return
        for f in self.files.values():
            f.flush = True
        self.poll()
        self.model.finish()
        self._windows = None
        self._fold()
        self._evaluate(force=True)
        for f in self.files.values():
            f.close()

    # -- the figures -------------------------------------------------------

    def series(self) -> dict:
        """``{family: {labels: value}}`` of everything exported."""
        out = self.totals.export()
        if self.failures is not None:
            out[exposition.FAILURES] = exposition.capped(
                exposition.failure_series(self.failures.table)
            )
            out[exposition.DB_RETRIES] = exposition.capped(
                {
                    (str(func), str(cls)): n
                    for (func, cls), n in self.retries.counts.items()
                }
            )
        reader = self.reader
        out[exposition.LINES] = {(): reader.lines if reader else 0}
        if reader is not None:
            bad = dict(reader.issues.counts)
            if self.model is not None:
                # (as the batch report counts them)
                bad['late'] = bad.get('late', 0) + self.model.late
            out[exposition.BAD] = {
                (kind,): n for kind, n in sorted(bad.items())
            }
        model = self.model
        out[exposition.OPEN] = {(): len(model.open) if model else 0}
        out[exposition.DROPPED] = {(): self.dropped}
        out[exposition.LATE] = {(): model.late if model else 0}
        if self.watermark is not None:
            out[exposition.WATERMARK] = {(): self.watermark / 1e6}
        out[exposition.FILES] = {
            (): sum(1 for f in self.files.values() if not f.done)
        }
        out[exposition.ROTATIONS] = {
            (how,): n for how, n in self.rotations.items()
        }
        if self.findings is not None:
            out.update(self.findings.series())
        return out

    def exposition(self) -> str:
        """The Prometheus text of ``series``."""
        return exposition.render(self.series())


def once(
    inputs: typing.Sequence[str], opts: typing.Optional[Options] = None
) -> Follower:
    """Read what ``inputs`` hold now, finalise everything."""
    follower = Follower(inputs, opts)
    follower.defer = True
    follower.poll()
    follower.finish()
    return follower
