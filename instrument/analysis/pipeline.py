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
"""The analysis of a set of span files, from bytes to a report dict.

Pass 1 (``clock_pass``, module ``clockpass``) reads only the RPC lines
(a substring test skips the rest undecoded), matches each dispatch with
its send on another host within a horizon, and solves the clock
offsets; with ``jobs`` > 1 its workers split the files.

Pass 2 (``run_part``, a ``PartReader`` per worker) reads everything on
corrected clocks: validates each line, tracks ``seq`` per process, and
hands each record by phase to the request assembler and the SQL
digest; the records of the other side's work for a periodic task
run's RPC calls (pass 1 found the dispatches) are read under the run's
id (``PartReader.periodic_run``).  With ``jobs`` > 1 the requests are
partitioned by a hash of their request id: every worker reads all
files but decodes only
its own lines (lines without a request id, and process metadata, go to
worker 0; metadata is seen by all), so the partial results add up.
Duplicate lines hash alike, so each worker still sees its own
duplicates.

``analyse`` runs both passes and merges the parts into one JSON-ready
report dict, the input of every writer (text, JSON, HTML) and of
``compare``.
"""

import collections
import gc
import heapq
import multiprocessing
import os
import time
import typing
import zlib

from instrument.analysis import breakdown
from instrument.analysis import classify
from instrument.analysis import clockpass
from instrument.analysis import clocks
from instrument.analysis import load
from instrument.analysis import opstats
from instrument.analysis import periodic
from instrument.analysis import requests
from instrument.analysis import releases as releases_mod
from instrument.analysis import resources
from instrument.analysis import services
from instrument.analysis import sqldigest
from instrument.analysis import stream
from instrument.analysis import waits
from instrument.analysis import window
from instrument import schema

REPORT_VERSION = 1
WAIT_EVENTS = schema.WAIT_EVENTS
PERIODIC = schema.PERIODIC_REQ_PREFIX
KEEP_SLOWEST = 12
KEEP_PER_STATE = 40


class Options:
    """What the command line chose; plain values, picklable.

    ``progress`` is None (nothing reported) or a callable
    ``progress(stage, bytes_done, bytes_total)``, called as the passes
    read: stage ``'clocks'`` (pass 1), ``'spans'`` (pass 2), then once
    ``'done'``.  The command line draws its progress line with it
    (``instrument.cmd.progress``); the analysis itself never writes to
    a terminal.
    """

    def __init__(self, jobs: int = 1, idle_s: float = 30.0,
                 hung_s: float = 600.0, clock_horizon_s: float = 600.0,
                 since: typing.Union[None, int, str] = None,
                 until: typing.Union[None, int, str] = None,
                 group_by: str = 'fingerprint',
                 order_by: str = 'sum', limit: int = 20,
                 all_lifecycles: bool = False,
                 progress: typing.Optional[
                     typing.Callable[[str, int, int], None]] = None,
                 fast_decode: bool = True, engine: str = 'python',
                 memory_limit: str = '1GB') -> None:
        self.jobs = jobs
        # the SQL digest's engine: 'python' (pass 2) or 'duckdb'
        # (columnar.digest_of, from the same files)
        self.engine = engine
        # DuckDB's memory limit (``columnar.connect``)
        self.memory_limit = memory_limit
        self.idle_us = int(idle_s * 1e6)
        self.hung_us = int(hung_s * 1e6)
        self.clock_horizon_us = int(clock_horizon_s * 1e6)
        self.since = since
        self.until = until
        self.group_by = group_by
        self.order_by = order_by
        self.limit = limit
        self.all_lifecycles = all_lifecycles
        self.progress = progress
        # msgspec when installed (False: the reference decoder only)
        self.fast_decode = fast_decode
        # (host, pid, ts) of every process.start (pass 1 finds them)
        self.process_starts: typing.Collection[tuple] = ()
        # {request id: the id its records are read under} (pass 1's
        # ClockResult.aliases: api.request spans begun with another id
        # than they ended with)
        self.aliases: dict = {}
        # ClockResult.periodic_hops and periodic_contexts: the other
        # side's work for periodic runs' RPC sends
        self.periodic_hops: dict = {}
        self.periodic_contexts: dict = {}


# -- pass 1 ----------------------------------------------------------------

def clock_pass(paths: list, opts: Options,
               report: typing.Optional[stream.Progress] = None,
               jobs: int = 1) -> tuple:
    """``(ClockResult, {file index: host}, first ts, hop stats)``; see
    ``clockpass``."""
    return clockpass.clock_pass(paths, opts.clock_horizon_us, jobs,
                                opts.fast_decode, report)


# -- pass 2 ----------------------------------------------------------------

class Partial:
    """The result of one worker (or of all, merged)."""

    def __init__(self, digest: sqldigest.SqlDigest) -> None:
        self.summaries: list = []
        # (operation, svc, ev, cls, message): [count, [request ids],
        # final, {how recovered: count}] (requests.Assembler.failures)
        self.failures: dict = {}
        self.retries: collections.Counter = collections.Counter()
        self.digest = digest
        # lock / DB pool / worker pool waits (waits.py)
        self.waits = waits.WaitTable(digest.since, digest.until)
        self.issues = load.Issues()
        self.loss = load.FileLoss()
        self.causality: dict[str, typing.Any] = {
            'checked': 0, 'violations': 0, 'examples': []}
        self.no_request = collections.Counter()
        # requests left out: they started outside --since/--until
        self.outside = 0
        self.processes = []
        self.records = 0
        self.lines = 0
        self.duplicate_spans = 0
        self.txns = 0
        # hosts of the valid records read
        self.hosts: set = set()
        # issue 21: calls to other services, resource samples
        self.services = services.ServiceCalls()
        self.samples = resources.Samples()
        # periodic task runs: their own ids, never requests
        self.periodic = periodic.PeriodicTable(digest.since, digest.until)


_PROGRESS = None


def _set_progress(shared) -> None:
    global _PROGRESS
    _PROGRESS = shared


class _Keeper:
    """Chooses the requests whose lifecycle is kept for timelines.

    Called with each finished request's summary before its lifecycle is
    made; returns whether to make it (and drops the lifecycle of a
    request it stops keeping).
    """

    def __init__(self, keep_all: bool) -> None:
        self.keep_all = keep_all
        self.slowest: dict = {}
        self.per_state = collections.Counter()

    def __call__(self, summary, r, tree) -> bool:
        if self.keep_all:
            return True
        if summary.state not in classify.GOOD_STATES:
            self.per_state[summary.state] += 1
            return self.per_state[summary.state] <= KEEP_PER_STATE
        if summary.kind == 'other':
            return False
        # the slowest successful requests of each operation and good
        # state (a slow first-attempt success is kept even when every
        # rescheduled one is slower)
        slowest = self.slowest.setdefault((summary.kind, summary.state),
                                          [])
        item = (summary.latency, id(summary), summary)
        if len(slowest) < KEEP_SLOWEST:
            heapq.heappush(slowest, item)
            return True
        if item[0] > slowest[0][0]:
            _lat, _id, dropped = heapq.heapreplace(slowest, item)
            dropped.lifecycle = None
            return True
        return False


class PartReader:
    """Pass 2 of one partition of the requests: a consumer of lines.

    ``read`` feeds it the chunks of every file (``stream.chunks``);
    ``chunk`` keeps the lines of this partition, decodes them, follows
    each process's ``seq`` (duplicates, restarts, gaps) and hands each
    record by phase to ``complete`` (``X``), ``begin`` (``B``), the
    assembler (``I``), ``counter`` (``C``) and ``metadata`` (``M``).
    ``finish`` returns the ``Partial`` of this worker.

    With ``nparts`` > 1 a line belongs to partition ``crc32(request id)
    % nparts``; lines without a request id belong to partition 0, and
    process metadata is read by every partition (the SQL fingerprints
    each needs) but counted by partition 0 only.
    """

    def __init__(self, offsets: dict, part: int, nparts: int,
                 opts: Options, hosts: typing.Iterable[str] = ()) -> None:
        self.offsets = offsets
        self.part = part
        self.nparts = nparts
        # analyse() resolved --since/--until to microseconds
        self.digest = sqldigest.SqlDigest(
            typing.cast(typing.Optional[int], opts.since),
            typing.cast(typing.Optional[int], opts.until))
        self.out = out = Partial(self.digest)
        self.issues = out.issues
        self.loss = out.loss
        span = window.Window(
            typing.cast(typing.Optional[int], opts.since),
            typing.cast(typing.Optional[int], opts.until))
        self.asm = requests.Assembler(
            opts.idle_us, opts.hung_us, classify.Normaliser(hosts),
            on_summary=_Keeper(opts.all_lifecycles),
            window=span if span else None)
        self.asm.on_summary = self.out.services.tap(self.asm.on_summary)
        self.decoder = load.RecordDecoder(opts.fast_decode)
        # (file index, pid): the SeqSet of the process its records
        # belong to there (the last process.start read in that file)
        self.current = {}
        # pid: [(ts, host)] of the process.start records of pass 1
        self.starts: dict = {}
        for host, pid, ts in sorted(opts.process_starts):
            self.starts.setdefault(pid, []).append((ts, host))
        self.start_hosts = {host for host, _p, _t in opts.process_starts}
        self.aliases = opts.aliases
        self.raw_aliases = {a.encode(): b.encode()
                            for a, b in opts.aliases.items()}
        # request ids nova sent with periodic runs' RPC: their records
        # are the runs' (``periodic_run``); span id: run, grown by the
        # spans read under the dispatches
        self.periodic_contexts = opts.periodic_contexts
        self.periodic_spans = dict(opts.periodic_hops)
        self.lines = 0

    def read(self, files: list,
             progress: typing.Optional[stream.Progress] = None) -> Partial:
        """Consume every chunk of ``files``; ``progress(bytes_done)``
        after each."""
        sweep = self.asm.sweep
        for f, lines, first, watermark in stream.chunks(files, progress):
            self.chunk(f, lines, first)
            if watermark is not None:
                sweep(watermark)
        return self.finish(files)

    def chunk(self, f: load.SpanFile, lines: list, first: int) -> None:
        """The lines ``first + 1``... of the span file ``f``."""
        part = self.part
        nparts = self.nparts
        issues = self.issues
        loss = self.loss
        decoder = self.decoder
        decode = decoder.decode
        current = self.current
        track = self.track
        dups = loss.duplicates
        read = loss.read
        get_offset = self.offsets.get
        crc32 = zlib.crc32
        marker = load.LOG_MARKER
        aliases = self.aliases
        raw_aliases = self.raw_aliases
        periodic_contexts = self.periodic_contexts
        complete = self.complete
        begin = self.begin
        instant = self.asm.instant
        fi = f.index
        fname = f.name
        log_file = load._is_log_name(fname)
        self.lines += len(lines)
        # a file is mostly one process on one host: remember the last
        # (its seq bitmap page, and its latest time, kept in locals)
        c_pid = None
        c_seq: typing.Any = None
        c_pages: dict = {}
        c_pageno = -1
        c_page: typing.Any = bytearray()
        c_last = 0
        c_host = None
        c_off = 0
        nread = 0
        for lineno, raw in enumerate(lines, first + 1):
            if raw[0] != 123:  # not '{': a service log line?
                j = raw.find(marker)
                if j < 0:
                    if part == 0:
                        issues.no_record(fname, lineno, raw, log_file)
                    continue
                raw = raw[j:]
            meta = False
            if nparts > 1:
                i = raw.find(b'"req":"')
                if i < 0:
                    meta = b'"ph":"M"' in raw[:24]
                    if part != 0 and not meta:
                        continue
                else:
                    # the request id, up to its closing quote (nova's
                    # are 40 characters long)
                    i += 7
                    j = raw.find(b'"', i, i + 256)
                    key = raw[i:j if j > 0 else i + 40]
                    if raw_aliases:
                        key = raw_aliases.get(key, key)
                    if crc32(key) % nparts != part:
                        continue
            rec = decode(raw)
            if rec is None:
                if part == 0 or not meta:
                    kind, reason = decoder.error or ('invalid', '')
                    issues.add(kind, fname, lineno, reason)
                    self.bad_line(raw, fi, fname, c_seq)
                continue
            if aliases:
                # the start of an api.request span written with the id
                # of the WSGI environ: read under the id it ended with
                req = aliases.get(rec.req)
                if req is not None:
                    rec.req = req
            if periodic_contexts and rec.req in periodic_contexts:
                rec.req = self.periodic_run(rec)
            pid = rec.pid
            seq = rec.seq
            ph = rec.ph
            if ph == 'M' and rec.ev == 'process.start' or pid != c_pid:
                if c_seq is not None and c_last > c_seq.last:
                    c_seq.last = c_last
                if ph == 'M' and rec.ev == 'process.start':
                    # a process (a new one, or one read before: a
                    # replay)
                    c_seq = current[(fi, pid)] = track(
                        (rec.host, pid, rec.ts), fi, fname)
                else:
                    c_seq = current.get((fi, pid))
                    if c_seq is None:
                        # no process.start before it in this file
                        c_seq = current[(fi, pid)] = track(
                            self.process_of(rec.host, pid, rec.ts), fi,
                            fname)
                c_pid = pid
                c_pages = c_seq.pages
                c_pageno = -1
                c_last = c_seq.last
                c_host = None
            if meta and part != 0:
                # metadata is read by every worker, counted by worker 0
                self.shared_metadata(rec)
                continue
            nread += 1
            # has this process's seq been read (here or in any file)?
            if seq >> 16 != c_pageno:
                c_pageno = seq >> 16
                c_page = c_pages.get(c_pageno)
                if c_page is None:
                    c_page = c_pages[c_pageno] = bytearray(8192)
            i = seq & 0xFFFF
            j = i >> 3
            bit = 1 << (i & 7)
            byte = c_page[j]
            if byte & bit:
                issues.add('duplicate', fname, lineno,
                           'seq %d of %s read before' % (
                               seq, load.process_label(c_seq.key)))
                dups[fname] = dups.get(fname, 0) + 1
                continue
            c_page[j] = byte | bit
            host = rec.host
            if host != c_host:
                c_host = host
                c_off = get_offset(host, 0)
                self.out.hosts.add(host)
                c_seq.hosts.add(host)
            ts = rec.ts + c_off
            if ts > c_last:
                c_last = ts
            if ph == 'X':
                complete(rec, ts)
            elif ph == 'B':
                begin(rec, ts)
            elif ph == 'I':
                if rec.ev[:8] == 'db.pool.':
                    self.out.waits.instant(rec)
                instant(rec, ts)
            elif ph == 'C':
                self.counter(rec, ts, c_seq.key)
            else:
                if rec.ev == 'process.end':
                    c_seq.ended = True
                self.metadata(rec, host, fname)
        if c_seq is not None and c_last > c_seq.last:
            c_seq.last = c_last
        if nread:
            read[fname] = read.get(fname, 0) + nread

    def periodic_run(self, rec: typing.Any) -> str:
        """The periodic run a record of a request id nova sent with a
        periodic run's RPC belongs to: the run whose send its span, or
        its parent's, answered (the dispatch, then what ran under it,
        read after its parent's start), else the first run that sent
        that id (nova's admin context of a run is shared by the tasks
        of that run)."""
        spans = self.periodic_spans
        run = spans.get(rec.span)
        if run is None:
            run = spans.get(rec.parent)
            if run is not None and rec.span is not None and \
                    len(spans) < clockpass.MAX_PERIODIC_HOPS:
                spans[rec.span] = run
        if run is None:
            run = self.periodic_contexts[rec.req]
        return run

    def bad_line(self, raw: bytes, fi: int, fname: str,
                 near: typing.Optional[load.SeqSet]) -> None:
        """Charge a line that is not a valid record to its process:
        the one it names when it names one (its ``seq`` is then not
        also reported missing), else the process of the lines around
        it."""
        try:
            rec = load.loads(raw)
        except ValueError:
            rec = None
        if rec.__class__ is dict:
            host, pid, seq = rec.get('host'), rec.get('pid'), rec.get('seq')
            if host.__class__ is str and pid.__class__ is int and \
                    seq.__class__ is int:
                s = self.current.get((fi, pid))
                if s is None:
                    s = self.current[(fi, pid)] = self.track(
                        self.process_of(host, pid, rec.get('ts') or 0),
                        fi, fname)
                if s.add(seq):
                    s.invalid += 1
                self.loss.bad[s.key] = self.loss.bad.get(s.key, 0) + 1
                return
        if near is not None:
            self.loss.bad[near.key] = self.loss.bad.get(near.key, 0) + 1

    def process_of(self, host: str, pid: int, ts: int) -> tuple:
        """The process ``(host, pid, start)`` that wrote a record of
        ``host`` and ``pid`` at ``ts`` read before any ``process.start``
        of its file (a log rotated away from its start): the latest
        start of that pid on that host before ``ts`` (pass 1 read every
        start); a process of another host only when it is the one
        process of that pid and ``host`` started none (one process
        writing for several hosts, as the demo does); else a process of
        unknown start."""
        starts = self.starts.get(pid)
        if not starts:
            return (host, pid, None)
        mine = [t for t, h in starts if h == host]
        if mine:
            before = [t for t in mine if t <= ts]
            return (host, pid, max(before) if before else min(mine))
        if len(starts) == 1 and host not in self.start_hosts:
            t, h = starts[0]
            return (h, pid, t)
        return (host, pid, None)

    def track(self, key: tuple, fi: int, fname: str) -> load.SeqSet:
        """The ``seq`` numbers of process ``key`` (host, pid, start)
        read so far, wherever read."""
        s = self.loss.seqs.get(key)
        if s is None:
            s = self.loss.seqs[key] = load.SeqSet((fi, fname), key)
        return s

    def complete(self, rec: typing.Any, ts: int) -> None:
        """An ``X`` record: a statement, a transaction or a span."""
        ev = rec.ev
        if ev == 'sql.query':
            attrs = rec.attrs or {}
            dur = rec.dur_us
            error = rec.st == 'error'
            self.digest.add(ts, dur, attrs.get('fp'), rec.svc,
                            attrs.get('db'), attrs.get('call'),
                            attrs.get('rows'), error, attrs.get('kind'))
            req = rec.req
            if req is not None:
                if req.startswith(PERIODIC):
                    self.out.periodic.sql(rec, ts, dur, error)
                else:
                    self.asm.sql(req, rec.parent, dur, ts + dur, rec,
                                 error)
        elif ev == 'sql.txn':
            self.out.txns += 1
        elif rec.req is not None and rec.req.startswith(PERIODIC):
            self.periodic_span(rec, ts, True)
        else:
            if ev in services.EVENTS and rec.req is None:
                self.out.services.add_orphan(rec)
            elif ev == schema.EV_PERIODIC_TASK:
                self.out.samples.periodic(rec, ts)
            if not self.asm.span(rec, ts, True):
                self.out.duplicate_spans += 1
            elif ev in WAIT_EVENTS:
                self.out.waits.add(rec, ts)
                self.out.periodic.request_wait(rec, ts, self.process_of)

    def periodic_span(self, rec: typing.Any, ts: int,
                      complete: bool) -> None:
        """A span of a periodic task run (``periodic.PeriodicTable``):
        never a request's."""
        ev = rec.ev
        self.out.periodic.span(rec, ts, complete, self.process_of)
        if not complete:
            return
        if ev == schema.EV_PERIODIC_TASK:
            self.out.samples.periodic(rec, ts)
        elif ev in WAIT_EVENTS:
            self.out.waits.add(rec, ts)
        elif ev in services.EVENTS:
            self.out.services.add_orphan(rec)

    def begin(self, rec: typing.Any, ts: int) -> None:
        """A ``B`` record: a span started."""
        if rec.req is not None and rec.req.startswith(PERIODIC):
            self.periodic_span(rec, ts, False)
        elif not self.asm.span(rec, ts, False):
            self.out.duplicate_spans += 1

    def counter(self, rec: typing.Any, ts: int, process: tuple) -> None:
        """A ``C`` record: SQL aggregates or the sink's drop counts."""
        ev = rec.ev
        attrs = rec.attrs or {}
        if ev == 'sql.agg':
            self.digest.add_agg(ts, rec.svc, attrs)
        elif ev == schema.EV_PROCESS_SAMPLE:
            self.out.samples.add(rec, ts)
        elif ev == 'sink.drops':
            mine = self.loss.drops.setdefault(process, {})
            for sink, n in attrs.items():
                if isinstance(n, int) and n > mine.get(sink, 0):
                    mine[sink] = n

    def metadata(self, rec: typing.Any, host: str, fname: str) -> None:
        """An ``M`` record (or an unknown phase): SQL fingerprints,
        process starts, and the host it names."""
        ev = rec.ev
        attrs = rec.attrs or {}
        if ev == 'sql.fingerprint':
            self.digest.fingerprint(attrs.get('fp'), attrs.get('text'),
                                    attrs.get('kind'))
        elif ev == 'process.start':
            self.out.processes.append({
                'file': fname, 'host': host,
                'svc': rec.svc, 'pid': rec.pid,
                'service': attrs.get('service'),
                'version': attrs.get('version'),
                'releases': attrs.get('releases') or {},
                'mode': attrs.get('mode'),
                'points': _point_counts(attrs.get('points'))})
        self.asm.normalise.add_hosts((host,))

    def shared_metadata(self, rec: typing.Any) -> None:
        """Metadata another partition counts: only the fingerprints."""
        if rec.ev == 'sql.fingerprint':
            attrs = rec.attrs or {}
            self.digest.fingerprint(attrs.get('fp'), attrs.get('text'),
                                    attrs.get('kind'))

    def finish(self, files: list) -> Partial:
        """Finalise the open requests; the result of this partition."""
        out = self.out
        issues = self.issues
        asm = self.asm
        for f in files:
            if f.error:
                if self.part == 0:
                    issues.problems.append(load.unreadable(
                        f.name, f.error, f.lines))
                self.loss.unreadable[f.name] = [
                    f.lines, f.error, set().union(*(
                        s.hosts for (fi, _pid), s in self.current.items()
                        if fi == f.index))]
        asm.finish()
        if asm.late:
            issues.counts['late'] += asm.late
        out.summaries = asm.summaries
        out.failures = asm.failures
        out.retries = asm.retries
        out.causality = asm.causality
        out.no_request = asm.no_request
        out.outside = asm.outside
        # every record counted is counted once in its process's seq entry
        out.records = self.loss.records()
        out.lines = self.lines if self.part == 0 else 0
        out.duplicate_spans += asm.duplicates
        return out


def run_part(paths: list, offsets: dict, file_offsets: dict, part: int,
             nparts: int, opts: Options, hosts: typing.Iterable[str] = (),
             progress: typing.Optional[stream.Progress] = None) -> Partial:
    """Pass 2 over the requests of partition ``part``; ``progress`` is
    called with the bytes read so far (in a worker process, they are
    written to the parent's shared array instead)."""
    if _PROGRESS is not None:
        shared = _PROGRESS

        def progress(done):
            shared[part] = done
    reader = PartReader(offsets, part, nparts, opts, hosts)
    return reader.read(stream.open_files(paths, file_offsets, offsets),
                       progress)


def _point_counts(points) -> dict:
    if not isinstance(points, dict):
        return {}
    return {k: len(v) for k, v in points.items() if isinstance(v, list)}


def _run_part_star(args):
    return run_part(*args)


def _merge(parts: list) -> Partial:
    out = Partial(sqldigest.SqlDigest())
    for p in parts:
        if len(parts) > 1:  # unpickled from a worker
            for s in p.summaries:
                s.intern()
        out.summaries.extend(p.summaries)
        for key, (n, reqs, final, recovered) in p.failures.items():
            row = out.failures.setdefault(key, [0, [], 0, {}])
            row[0] += n
            row[1].extend(r for r in reqs if len(row[1]) < 5)
            row[2] += final
            for how, k in recovered.items():
                row[3][how] = row[3].get(how, 0) + k
        out.retries.update(p.retries)
        out.digest.merge(p.digest)
        out.waits.merge(p.waits)
        out.digest.since = p.digest.since
        out.digest.until = p.digest.until
        out.issues.merge(p.issues)
        out.issues.counts['late'] += 0
        out.loss.merge(p.loss)
        out.causality['checked'] += p.causality['checked']
        out.causality['violations'] += p.causality['violations']
        out.causality['examples'].extend(
            p.causality['examples'][:10 - len(out.causality['examples'])])
        out.no_request.update(p.no_request)
        out.outside += p.outside
        out.processes.extend(p.processes)
        out.records += p.records
        out.lines += p.lines
        out.duplicate_spans += p.duplicate_spans
        out.txns += p.txns
        out.hosts |= p.hosts
        out.services.merge(p.services)
        out.samples.merge(p.samples)
        out.periodic.merge(p.periodic)
    out.summaries.sort(key=lambda s: (s.start, s.req))
    return out


def default_jobs(total_bytes: int) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(
        os, 'sched_getaffinity') else (os.cpu_count() or 1)
    if total_bytes < (32 << 20) or cpus <= 2:
        # (on 2 CPUs, workers that each read every file were measured
        # 1.1 to 1.65 times slower than one process)
        return 1
    return max(1, min(cpus, 4))


def analyse(inputs: list, opts: Options = None) -> dict:
    """Both passes over ``inputs`` (files, directories, globs)."""
    # The passes keep many small objects alive and make no reference
    # cycles: the cyclic collector would only rescan them (x3 cost).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyse(inputs, opts or Options())
    finally:
        if enabled:
            gc.enable()


def _analyse(inputs: list, opts: Options) -> dict:
    started = time.monotonic()
    paths, problems = load.discover(inputs)
    if not paths:
        raise load.InputError('no span files to read: ' +
                              '; '.join(problems or ['no input given']))
    total = sum(os.path.getsize(p) for p in paths)
    jobs = opts.jobs or default_jobs(total)
    clock, file_host, first_ts, hops = clock_pass(
        paths, opts, _stage(opts.progress, 'clocks', total), jobs)
    offsets = clock.offsets()
    file_offsets = {i: offsets.get(h, 0) for i, h in file_host.items()}
    if first_ts is not None:
        first_ts += min(offsets.values(), default=0)
    try:
        span = window.resolve(opts.since, opts.until, first_ts)
    except ValueError as exc:
        raise load.InputError(str(exc)) from None
    part_opts = Options(jobs=opts.jobs, since=span.since, until=span.until,
                        all_lifecycles=opts.all_lifecycles,
                        fast_decode=opts.fast_decode)
    part_opts.idle_us = opts.idle_us
    part_opts.hung_us = opts.hung_us
    part_opts.process_starts = sorted(clock.starts)
    part_opts.aliases = clock.aliases
    part_opts.periodic_hops = clock.periodic_hops
    part_opts.periodic_contexts = clock.periodic_contexts
    show = _stage(opts.progress, 'spans', total)
    clock_s = time.monotonic() - started
    hosts = sorted(clock.hosts)
    if jobs <= 1:
        parts = [run_part(paths, offsets, file_offsets, 0, 1, part_opts,
                          hosts, show)]
    else:
        parts = _run_parallel(paths, offsets, file_offsets, jobs,
                              part_opts, hosts, show)
    if opts.progress is not None:
        opts.progress('done', total, total)
    merged = _merge(parts)
    merged.issues.problems[:0] = problems
    if opts.engine == 'duckdb':
        from instrument.analysis import columnar
        merged.digest = columnar.digest_of(
            paths, offsets, span.since, span.until,
            _stage(opts.progress, 'load', total),
            opts.memory_limit, opts.jobs or None)
        if opts.progress is not None:
            opts.progress('done', total, total)
    report = build_report(merged, clock, hops, opts, paths, total)
    # what the input spans, corrected: from its first RPC span (which
    # ``+10m`` counts from) to its last record
    report['inputs']['first_us'] = first_ts
    report['inputs']['last_us'] = max(
        (r['last_us'] for r in merged.loss.per_process().values()
         if r['last_us']), default=None)
    report['run'] = {'seconds': time.monotonic() - started,
                     'clock_pass_seconds': clock_s, 'jobs': jobs}
    return report


def _stage(progress, stage: str, total: int):
    """``progress(stage, bytes_done, total)`` as a ``f(bytes_done)``."""
    if progress is None:
        return None

    def report(done: int) -> None:
        progress(stage, done, total)
    return report


def _run_parallel(paths, offsets, file_offsets, jobs, opts, hosts,
                  show) -> list:
    ctx = multiprocessing.get_context('fork')
    shared = ctx.Array('q', jobs, lock=False)
    with ctx.Pool(jobs, initializer=_set_progress,
                  initargs=(shared,)) as pool:
        pending = pool.map_async(_run_part_star, [
            (paths, offsets, file_offsets, part, jobs, opts, hosts)
            for part in range(jobs)])
        while not pending.ready():
            pending.wait(0.5)
            if show is not None:
                show(min(shared[:]) if shared else 0)
        return pending.get()


def build_report(merged: Partial, clock: clocks.ClockResult, hops: dict,
                 opts: Options, paths: list, total_bytes: int) -> dict:
    """The JSON-ready report of a merged pass 2."""
    summaries = merged.summaries
    agg = breakdown.aggregate(summaries)
    # count: times raised; final: of those, the final cause of an
    # instance or request (summary.causes counts the instances);
    # recovered: retried (oslo.db, a reschedule) or the instance still
    # succeeded (requests.Fates)
    failures = [
        {'operation': op, 'component': svc, 'ev': ev, 'cls': cls,
         'message': msg, 'count': n, 'requests': reqs, 'final': final,
         'recovered': sum(recovered.values()),
         'recovered_by': dict(sorted(recovered.items()))}
        for (op, svc, ev, cls, msg), (n, reqs, final, recovered)
        in merged.failures.items()]
    failures.sort(key=lambda r: (-r['count'], r['operation'],
                                 r['component'], r['cls'], r['message']))
    retries = [{'func': func, 'cls': cls, 'count': n}
               for (func, cls), n in merged.retries.most_common()]
    issues = merged.issues
    timelines = merged.periodic.annotate(
        [s.to_dict() for s in summaries if s.lifecycle is not None])
    clock_table = clock.to_dict()
    rejected = sorted(h for h in clock_table['hosts']
                      if h not in merged.hosts)
    if rejected and merged.records:
        clock_table['hosts'] = {h: i for h, i in clock_table['hosts'].items()
                                if h in merged.hosts}
        issues.problems.append(
            'host%s %s: no valid record (every one rejected), left out '
            'of the clock offsets' % ('' if len(rejected) == 1 else 's',
                                      ', '.join(rejected)))
    return {
        'report_version': REPORT_VERSION,
        'schema_version': schema.SCHEMA_VERSION,
        'inputs': {'files': [os.path.basename(p) for p in paths],
                   'paths': paths, 'bytes': total_bytes,
                   'lines': merged.lines, 'records': merged.records},
        'clocks': dict(clock_table, hops=hops),
        'load': {'counts': issues.counts, 'samples': issues.samples,
                 'per_file': issues.per_file,
                 'other_lines': issues.other_lines,
                 'problems': issues.problems,
                 'loss': merged.loss.summary(),
                 'duplicate_spans': merged.duplicate_spans,
                 # records of a process already read (another copy of
                 # a file, a file holding them twice), per file
                 'duplicates': merged.loss.duplicate_files(),
                 # processes without a process.end record (killed?)
                 'unended': merged.loss.unended(),
                 'records_without_request': dict(merged.no_request)},
        'processes': sorted(merged.processes,
                            key=lambda p: (p['host'], p['svc'], p['pid'])),
        # nova release x mode of the processes (a cloud mid-upgrade)
        'releases': releases_mod.summarise(merged.processes),
        'summary': agg,
        'quality': quality(merged.loss, summaries),
        # per operation that occurred (opstats): states, rates, times
        'operations': opstats.summarise(summaries, failures),
        'failures': failures,
        'retries': retries,
        'sql': merged.digest.profile(opts.group_by, opts.order_by,
                                     opts.limit),
        'causality': merged.causality,
        # --since/--until (window.py): what they left out
        'window': {'since_us': merged.digest.since,
                   'until_us': merged.digest.until,
                   'requests_outside': merged.outside,
                   'sql_outside': merged.digest.filtered},
        'requests': merged.periodic.annotate(
            [_request_row(s) for s in summaries]),
        'timelines': timelines,
        'waits': waits.report(merged.waits, summaries),
        'services': merged.services.report(),
        'resources': resources.report(merged.samples, summaries),
        'periodic': merged.periodic.report(summaries),
    }


def quality(loss: load.FileLoss, summaries: list) -> dict:
    """What the figures stand on: the processes that lost records
    (seq gaps, ``sink.drops``, lines not valid), the files whose end
    could not be read (``unreadable``: what they lost is not counted;
    later files of their processes show it as seq gaps), and the
    requests with events on their hosts, whose figures may miss some of
    them."""
    lossy = loss.lossy()
    hosts = {h for r in lossy for h in r['hosts']}
    # files whose end could not be read: what they lost is not known
    for _line, _error, file_hosts in loss.unreadable.values():
        hosts.update(file_hosts)
    # (a request of SQL statements only names no host: it may be one)
    affected = [s for s in summaries
                if not s.hosts or hosts.intersection(s.hosts)] \
        if hosts else []
    return {
        'lost_records': sum(r['missing'] + r['dropped'] + r['invalid']
                            for r in lossy),
        'processes': [{k: r[k] for k in ('host', 'pid', 'file', 'records',
                                         'missing', 'dropped', 'invalid')}
                      for r in lossy],
        'unreadable': [{'file': f, 'after_line': row[0], 'error': row[1]}
                       for f, row in sorted(loss.unreadable.items())],
        'hosts': sorted(hosts),
        'requests': len(summaries),
        'requests_affected': len(affected),
        'boots_affected': sum(1 for s in affected if s.kind == 'boot'),
        'examples': [s.req for s in affected[:10]],
    }


def _request_row(s) -> dict:
    row = s.to_dict()
    if s.lifecycle is None:
        row.pop('lifecycle', None)
    return row
