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

Pass 1 (``clock_pass``, module ``ingest.clockpass``) reads only the
RPC lines (a substring test skips the rest undecoded), matches each
dispatch with its send on another host within a horizon, and solves the
clock offsets; with ``jobs`` > 1 its workers split the files.

Pass 2 (``run_part``: an ``ingest.reader.PartReader`` per worker) reads
everything on corrected clocks: validates each line, tracks ``seq`` per
process, and hands each record to the consumers whose routes take it:
the request model (``model.requests.Assembler``, which hands each
request it finalises to the sections that read finished requests) and
every section of the ``registry``.  The records of the other side's
work for a periodic task run's RPC calls (pass 1 found the dispatches)
are read under the run's id.  With ``jobs`` > 1 the requests are
partitioned by a hash of their request id, partition 0 read by this
process and each other one by a forked worker: every worker reads all
files but decodes only its own lines (lines without a request id, and
process metadata, go to worker 0; metadata is seen by all), so the
partial results add up.  Pass 1 noted the hash of each line's request
id (``clockpass.request_hashes``); ``line_parts`` turns them into each
line's partition, so a worker skips the others' lines without looking
into them.  Duplicate lines hash alike, so each worker
still sees its own duplicates.

``merge`` adds the workers' parts up, section by section; the report
dict holds each section's value (``base.Section.report``) under its
key, in the registry's order (``build_report``): the input of every
writer (text, JSON, HTML) and of ``compare``.  With ``jobs`` > 1 a
forked process makes a few sections' values (``ELSEWHERE``) while this
one makes the others.  ``analyse(inputs, Options())`` does all of it.
"""

import collections
import gc
import multiprocessing
import os
import time
import typing
import zlib

import numpy

from instrument import schema
from instrument.analysis import registry
from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import losses
from instrument.analysis.ingest import reader as reader_mod
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from instrument.analysis.ingest import window
from instrument.analysis.model import classify
from instrument.analysis.model import clocks
from instrument.analysis.model import damage
from instrument.analysis.model import requests
from instrument.analysis.sections import base

REPORT_VERSION = 1


class Options:
    """What the command line chose; plain values, picklable.

    ``progress`` is None (nothing reported) or a callable
    ``progress(stage, bytes_done, bytes_total)``, called as the passes
    read: stage ``'clocks'`` (pass 1), ``'spans'`` (pass 2), then once
    ``'done'``.  The command line draws its progress line with it
    (``instrument.cmd.progress``); the analysis itself never writes to
    a terminal.
    """

    def __init__(
        self,
        jobs: int = 1,
        idle_s: float = 30.0,
        hung_s: float = 600.0,
        clock_horizon_s: float = 600.0,
        since: typing.Union[None, int, str] = None,
        until: typing.Union[None, int, str] = None,
        group_by: str = 'fingerprint',
        order_by: str = 'sum',
        limit: int = 20,
        all_lifecycles: bool = False,
        progress: typing.Optional[
            typing.Callable[[str, int, int], None]
        ] = None,
        fast_decode: bool = True,
        accepted_dir: typing.Optional[str] = None,
    ) -> None:
        self.jobs = jobs
        # where pass 2 writes the records it accepted (``accepted``:
        # the Parquet export's input), None: nowhere
        self.accepted_dir = accepted_dir
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


def clock_pass(
    paths: list,
    opts: Options,
    report: typing.Optional[stream.Progress] = None,
    jobs: int = 1,
) -> tuple:
    """``(ClockResult, {file index: host}, first ts, hop stats)``; see
    ``clockpass``.  With ``jobs`` > 1 the result's ``line_hashes`` are
    pass 2's (``line_parts``)."""
    return clockpass.clock_pass(
        paths,
        opts.clock_horizon_us,
        jobs,
        opts.fast_decode,
        report,
        hashes=jobs > 1,
    )


def line_parts(line_hashes: dict, nparts: int, aliases: dict) -> dict:
    """``{file index: bytes}``: the partition of each line of the file
    (``crc32`` of its request id modulo ``nparts``), or
    ``reader.UNDECIDED`` where the reader must look at the line itself:
    no request id found, or one whose hash is that of a request id read
    under another (``aliases``: its partition is its alias's)."""
    aliased = numpy.array(
        sorted({clockpass.NO_REQ} | {zlib.crc32(a.encode()) for a in aliases}),
        dtype=numpy.uint32,
    )
    out = {}
    for fi, crcs in line_hashes.items():
        h = numpy.frombuffer(crcs, dtype=numpy.uint32)
        parts = (h % nparts).astype(numpy.uint8)
        parts[numpy.isin(h, aliased)] = reader_mod.UNDECIDED
        out[fi] = parts.tobytes()
    return out


# -- pass 2 ----------------------------------------------------------------


class Part:
    """What one worker of pass 2 found (or all, merged): each section's
    state (``sections``, by key), the finished requests
    (``summaries``), the input's bad lines (``issues``) and losses
    (``loss``), and the counts of the reader and the request model."""

    def __init__(self, sections: dict) -> None:
        self.sections = sections
        self.summaries: list = []
        self.issues = losses.Issues()
        self.loss = losses.FileLoss()
        # event: records of no request (the request model's)
        self.no_request: collections.Counter = collections.Counter()
        # requests left out: they started outside --since/--until
        self.outside = 0
        self.records = 0
        self.lines = 0
        # spans read twice: counted by the reader, and again by the
        # request model (each is counted twice in the report's
        # ``load.duplicate_spans``, as it always was)
        self.duplicate_spans = 0
        # hosts of the valid records read
        self.hosts: set = set()
        # request ids of the records repaired (a field taken from the
        # records around them: ``ingest.reader``)
        self.repaired: set = set()


_PROGRESS = None
# line_parts of the run, set before pass 2's workers fork (inherited,
# not pickled)
_LINE_PARTS: typing.Optional[dict] = None


def _set_progress(shared) -> None:
    global _PROGRESS
    _PROGRESS = shared


def run_part(
    paths: list,
    offsets: dict,
    file_offsets: dict,
    part: int,
    nparts: int,
    opts: Options,
    hosts: typing.Iterable[str] = (),
    progress: typing.Optional[stream.Progress] = None,
    parts_of_lines: typing.Optional[dict] = None,
) -> Part:
    """Pass 2 over the requests of partition ``part``; ``progress`` is
    called with the bytes read so far (in a worker process, they are
    written to the parent's shared array instead); ``parts_of_lines``:
    ``line_parts`` (None: in a worker, those its parent set)."""
    if parts_of_lines is None:
        parts_of_lines = _LINE_PARTS
    if _PROGRESS is not None:
        shared = _PROGRESS

        def progress(done):
            shared[part] = done

    # analyse() resolved --since/--until to microseconds
    since = typing.cast(typing.Optional[int], opts.since)
    until = typing.cast(typing.Optional[int], opts.until)
    out = Part(registry.new_sections(base.Context(since, until, opts)))
    span = window.Window(since, until)
    model = requests.Assembler(
        opts.idle_us,
        opts.hung_us,
        classify.Normaliser(hosts),
        hooks=[
            s.finished
            for s in out.sections.values()
            if base.defines(s, 'finished')
        ],
        window=span if span else None,
    )
    reader = reader_mod.PartReader(
        offsets,
        part,
        nparts,
        opts,
        (model,) + tuple(out.sections.values()),
        parts_of_lines,
    )
    reader.read(stream.open_files(paths, file_offsets, offsets), progress)
    if model.late:
        reader.issues.counts['late'] += model.late
    out.summaries = model.summaries
    out.issues = reader.issues
    out.loss = reader.loss
    out.no_request = model.no_request
    out.outside = model.outside
    # every record counted is counted once in its process's seq entry
    out.records = reader.records()
    out.lines = reader.lines if part == 0 else 0
    out.duplicate_spans = reader.duplicate_spans + model.duplicates
    out.hosts = reader.hosts
    out.repaired = reader.repaired
    return out


def _run_part_star(args):
    return run_part(*args)


def merge(parts: list, ctx: base.Context) -> Part:
    """The workers' ``parts`` added up into one, section by section
    (``ctx``: the sections' context)."""
    out = Part(registry.new_sections(ctx))
    for i, p in enumerate(parts):
        if i > 0:  # unpickled from a worker (the first is this process's)
            for s in p.summaries:
                s.intern()
        out.summaries.extend(p.summaries)
        for key, section in out.sections.items():
            section.merge(p.sections[key])
        out.issues.merge(p.issues)
        out.loss.merge(p.loss)
        out.no_request.update(p.no_request)
        out.outside += p.outside
        out.records += p.records
        out.lines += p.lines
        out.duplicate_spans += p.duplicate_spans
        out.hosts |= p.hosts
        out.repaired |= p.repaired
    out.summaries.sort(key=lambda s: (s.start, s.req))
    return out


def default_jobs(total_bytes: int) -> int:
    """The workers of a run not told how many: one for an input under
    32 MB, else one per idle CPU (the CPUs this process may use, less
    the load average of the last minute, rounded), at most 4.  (On two
    CPUs ``-j 2`` costs about 20 % more CPU than ``-j 1`` and takes
    about 0.7 of its time when both CPUs are idle, and longer than one
    process when other work keeps them busy: ``doc/source/engines.rst``.)
    """
    cpus = (
        len(os.sched_getaffinity(0))
        if hasattr(os, 'sched_getaffinity')
        else (os.cpu_count() or 1)
    )
    if total_bytes < (32 << 20) or cpus < 2:
        return 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return max(1, min(cpus, 4, int(cpus - load + 0.5)))


def analyse(inputs: list, opts: typing.Optional[Options] = None) -> dict:
    """Both passes over ``inputs`` (files, directories, globs): the
    report dict."""
    return run(inputs, opts).report


class Analysis:
    """What ``run`` made: the ``report`` dict, and each section's merged
    state it was made from (``sections``, by key: the export writes the
    SQL digest's classes, ``sections['sql'].digest``)."""

    def __init__(self, report: dict, sections: dict) -> None:
        self.report = report
        self.sections = sections


def run(inputs: list, opts: typing.Optional[Options] = None) -> Analysis:
    """Both passes over ``inputs``; ``analyse`` keeps the report."""
    # The passes keep many small objects alive and make no reference
    # cycles: the cyclic collector would only rescan them (x3 cost).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyse(inputs, opts or Options())
    finally:
        if enabled:
            gc.enable()


def _analyse(inputs: list, opts: Options) -> Analysis:
    started = time.monotonic()
    paths, problems = spanfiles.discover(inputs)
    if not paths:
        raise spanfiles.InputError(
            'no span files to read: '
            + '; '.join(problems or ['no input given'])
        )
    total = sum(os.path.getsize(p) for p in paths)
    jobs = opts.jobs or default_jobs(total)
    clock, file_host, first_ts, hops = clock_pass(
        paths, opts, _stage(opts.progress, 'clocks', total), jobs
    )
    offsets = clock.offsets()
    file_offsets = {i: offsets.get(h, 0) for i, h in file_host.items()}
    # the first request's start (or RPC span's), corrected: what
    # --since +10m counts from
    first_ts = (
        clock.first_us()
        if clock.first_of_host
        else (
            None
            if first_ts is None
            else first_ts + min(offsets.values(), default=0)
        )
    )
    try:
        span = window.resolve(opts.since, opts.until, first_ts)
    except ValueError as exc:
        raise spanfiles.InputError(str(exc)) from None
    part_opts = Options(
        jobs=opts.jobs,
        since=span.since,
        until=span.until,
        all_lifecycles=opts.all_lifecycles,
        fast_decode=opts.fast_decode,
        accepted_dir=opts.accepted_dir,
    )
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
        parts = [
            run_part(
                paths, offsets, file_offsets, 0, 1, part_opts, hosts, show
            )
        ]
    else:
        global _LINE_PARTS
        _LINE_PARTS = line_parts(clock.line_hashes, jobs, clock.aliases)
        clock.line_hashes = {}
        try:
            parts = _run_parallel(
                paths, offsets, file_offsets, jobs, part_opts, hosts, show
            )
        finally:
            _LINE_PARTS = None
    if opts.progress is not None:
        opts.progress('done', total, total)
    merged = merge(parts, base.Context(span.since, span.until, part_opts))
    merged.issues.problems[:0] = problems
    view = make_view(merged, clock, hops, opts, paths, total, first_ts, span)
    report = build_report(view, ELSEWHERE if jobs > 1 else ())
    report['run'] = {
        'seconds': time.monotonic() - started,
        'clock_pass_seconds': clock_s,
        'jobs': jobs,
    }
    return Analysis(report, merged.sections)


def _stage(progress, stage: str, total: int):
    """``progress(stage, bytes_done, total)`` as a ``f(bytes_done)``."""
    if progress is None:
        return None

    def report(done: int) -> None:
        progress(stage, done, total)

    return report


def _run_parallel(
    paths, offsets, file_offsets, jobs, opts, hosts, show
) -> list:
    """The ``jobs`` partitions of pass 2: partition 0 in this process,
    the others in ``jobs - 1`` forked workers (one fewer process, and
    partition 0's part is neither pickled nor unpickled)."""
    ctx = multiprocessing.get_context('fork')
    shared = ctx.Array('q', jobs, lock=False)
    with ctx.Pool(
        jobs - 1, initializer=_set_progress, initargs=(shared,)
    ) as pool:
        pending = pool.map_async(
            _run_part_star,
            [
                (paths, offsets, file_offsets, part, jobs, opts, hosts)
                for part in range(1, jobs)
            ],
        )

        def mine(done: int) -> None:
            shared[0] = done
            if show is not None:
                show(min(shared[:]))

        first = run_part(
            paths, offsets, file_offsets, 0, jobs, opts, hosts, mine
        )
        while not pending.ready():
            pending.wait(0.5)
            if show is not None:
                show(min(shared[:]) if shared else 0)
        return [first] + pending.get()


# -- the report ------------------------------------------------------------


def make_view(
    merged: Part,
    clock: clocks.ClockResult,
    hops: dict,
    opts: Options,
    paths: list,
    total_bytes: int,
    first_us: typing.Optional[int],
    span: window.Window,
) -> base.View:
    """What every section's ``report`` reads (``base.View``) of a
    merged pass 2 and pass 1's clocks.  A host none of whose records
    was valid is left out of the clock table, and named in the input
    problems."""
    issues = merged.issues
    clock_table = clock.to_dict()
    rejected = sorted(h for h in clock_table['hosts'] if h not in merged.hosts)
    if rejected and merged.records:
        clock_table['hosts'] = {
            h: i for h, i in clock_table['hosts'].items() if h in merged.hosts
        }
        issues.problems.append(
            'host%s %s: no valid record (every one rejected), left out '
            'of the clock offsets'
            % ('' if len(rejected) == 1 else 's', ', '.join(rejected))
        )
    # when each process lost records, and the requests that may miss
    # them (marked, left out of the times)
    windows = merged.loss.windows()
    marked = damage.mark(
        merged.summaries,
        windows,
        {key: merged.loss.seqs[key].hosts for key in windows},
        merged.repaired,
        opts.hung_us,
    )
    return base.View(
        merged.sections,
        summaries=merged.summaries,
        loss=merged.loss,
        issues=issues,
        opts=opts,
        clock_table=clock_table,
        hops=hops,
        paths=paths,
        total_bytes=total_bytes,
        lines=merged.lines,
        records=merged.records,
        first_us=first_us,
        since=span.since,
        until=span.until,
        outside=merged.outside,
        duplicate_spans=merged.duplicate_spans,
        no_request=merged.no_request,
        windows=windows,
        marked=marked,
    )


def build_report(view: base.View, elsewhere: typing.Iterable = ()) -> dict:
    """The JSON-ready report: each section's value under its key, in
    the registry's order.  The sections ``elsewhere`` are made by a
    forked process (``made_elsewhere``) while this one makes the
    others (one of which that reads the value of one of ``elsewhere``
    waits for it)."""
    report: dict = {
        'report_version': REPORT_VERSION,
        'schema_version': schema.SCHEMA_VERSION,
    }
    keys = registry.keys()
    elsewhere = [k for k in keys if k in frozenset(elsewhere)]
    if elsewhere:
        view.elsewhere(elsewhere, made_elsewhere(view, elsewhere))
        for key in keys:
            if key not in elsewhere:
                view[key]
    for key in keys:
        report[key] = view[key]
    return report


# The sections made by a forked process with -j > 1, while the parent
# makes the others: each reads ``view.summaries``, the finished
# requests, and returns a small value (the pickle back is cheap), and
# no section made by the parent reads their values.
ELSEWHERE = ('summary', 'operations', 'waits')


def made_elsewhere(view: base.View, keys: list) -> typing.Callable[[], dict]:
    """Fork a process that makes the values of sections ``keys`` of
    ``view``; return the ``fetch`` of ``View.elsewhere``: it waits for
    them (``{}`` if the process failed: they are then made here)."""
    ctx = multiprocessing.get_context('fork')
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_make_sections, args=(view, keys, send), daemon=True
    )
    proc.start()
    send.close()
    started = time.process_time()

    def fetch() -> dict:
        try:
            return received(recv, time.process_time() - started)[0]
        finally:
            recv.close()
            proc.join()

    return fetch


def received(conn: typing.Any, here_s: float) -> tuple:
    """``(values, CPU s of the process that made them)`` from
    ``_make_sections`` (``({}, 0.0)`` if it failed); ``here_s``: this
    process's CPU since the fork (the bench's critical path reads
    both)."""
    try:
        got = conn.recv()
    except (EOFError, OSError):
        return {}, 0.0
    if got[0] != 'ok':
        return {}, 0.0
    return got[1], got[2]


def _make_sections(view: base.View, keys: list, conn: typing.Any) -> None:
    """In the forked process: ``view[key]`` of each of ``keys``, sent
    back with this process's CPU."""
    try:
        values = {key: view[key] for key in keys}
        conn.send(('ok', values, time.process_time()))
    except BaseException:  # noqa: BLE001 - made again by the parent
        conn.send(('failed',))
    finally:
        conn.close()
