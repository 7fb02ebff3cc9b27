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
"""Bounded, non-blocking event buffer and its background writer.

Callers (nova's threads or greenthreads) only ``emit()``: one length
check and one ``deque.append``.  A span is queued once, when it starts,
as a list its end completes in place; at write time an ended span is
written once (``X``), a running one as its start (``B``) and kept aside
until it ends, so every call that outlives a flush interval has its
start on disk.  A daemon OS thread (a real one even
under eventlet, see ``instrument.runtime.threads``) drains the deque every
``flush_interval`` seconds and hands each batch to the sinks.  When the
deque is full new events are dropped and counted, never waited for.

Nothing is lost silently, even when the writer is stuck in a write that
never returns: the first event dropped is reported by the side that
drops it (through ``threads.defer``, never blocking the caller), and a
drain that has not finished after ``STALL_AFTER`` seconds is reported by
the watchdog thread (``threads.watch``).  Drop counts are written as
``sink.drops`` counter records whenever they change, so the analyser
can tell what is missing; a queue of its own in front of the buffer
(the SQL listeners') is a drop source whose ``sql.dropped`` record the
writer writes the same way, outside the bounded queue, again until a
sink takes it.  The writer logs drops per cause (the full buffer,
running spans forgotten, each sink, each drop source) with the advice
that fits it, at most once per cause every ``DROP_WARN_INTERVAL``
seconds, with the count since the cause's last warning; at close, each
cause's total once more, and what was never written.

The buffer is fork-safe: in a child process it starts empty (the parent
writes what it had), with fresh locks, a fresh writer thread and sinks
that open their own files.  It drains once more at interpreter exit, and
before ``os._exit`` (``flush_before_exit``, hooked by
``instrument.runtime.lifecycle``): the way oslo.service and cotyledon end their
workers, which skips ``atexit``.  Whoever closes first writes; a second
exiting thread waits for it.  A writer stuck in a write that never
returns is waited for once (the exit timeout); then every sink but the
one it is stuck in is closed all the same (an OTLP sink ends its
exporter thread, see ``instrument.sinks.otlp.interrupt``).
"""

import atexit
import collections
import itertools
import operator
import os
import time
import typing
import weakref

from oslo_log import log as logging

from instrument import _native
from instrument import schema
from instrument.runtime import faults as faults_mod
from instrument.runtime import record
from instrument.runtime import threads

PH_BEGIN = schema.PH_BEGIN
# The writer's per-record steps done in C (see ``_write_queue``).
_popleft = collections.deque.popleft
_phase = operator.itemgetter(record.I_PH)


def _first_running_py(batch: list, begin: str = PH_BEGIN) -> int:
    """The index of the first span still running in ``batch`` (a list
    record whose phase is ``begin``), or ``len(batch)``.  Most batches
    hold none: one C-level scan of the phases (``in`` over ``map``)
    says so with no bytecode per record; only a batch with a ``B``
    takes the loop.  The pure-Python twin of
    ``instrument._native._lines.running``."""
    if begin in map(_phase, batch):
        for n, rec in enumerate(batch):
            if rec.__class__ is list and rec[record.I_PH] == begin:
                return n
    return len(batch)


# The same answer in one C pass (instrument/_native/lines.c), when the
# extension is built and INSTRUMENT_PURE_PYTHON is not set.
_first_running = (
    getattr(_native.load('_lines'), 'running', None) or _first_running_py
)

# Used from the writer's OS thread: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))
# Called through threads.defer only (from the emitting side).
_DEFERRED_LOG = logging.getLogger(__name__)

# Records written per sink call; bounds the memory of one encoded batch.
MAX_BATCH = 5000
# Running spans whose start was written and whose end is awaited are
# bounded by the buffer's size (``buffer_size``); beyond it the oldest
# are forgotten (their end is then lost, and counted).
# Longest wait at exit for a writer stuck on a hung disk.
EXIT_TIMEOUT = 2.0
# Longest wait at close for the log lines handed to another thread (a
# log handler that hangs).
LOG_TIMEOUT = 1.0
# A drain still running after this many seconds is reported as stuck.
STALL_AFTER = 10.0
# Drops of one cause are logged at most once per this many seconds.
DROP_WARN_INTERVAL = 300.0
# The causes of drops other than a sink (keys of ``counts()``).
BUFFER_FULL = 'buffer_full'
OPEN_UNTRACKED = 'open_untracked'
# Faults of one periodic callback after which it is no longer run.
PERIODIC_FAULT_LIMIT = 10
# Rounds of periodic callbacks and writes in one drain, when a callback
# asks to run again once the queue is written (it stopped for room).
PERIODIC_ROUNDS = 64
# The same at close, where what is left would be lost.
FINAL_ROUNDS = 4096

_LIVE = weakref.WeakSet()
# A fault of the exit path itself (closing a buffer, at exit): counted,
# logged once; never raised into the thread that exits.
_EXIT_FAULTS = faults_mod.Faults(
    'the flush at exit',
    what='the process exits as it would without the instrumentation',
)


def _after_fork_in_child():
    for buf in list(_LIVE):
        buf._reset_after_fork()


def flush_before_exit(timeout: float = EXIT_TIMEOUT) -> bool:
    """Write what every buffer of this process holds (SQL aggregates of
    the current interval included) and close it, before the process
    exits.  Buffers of a process that recorded nothing are left alone.

    Whoever gets here first closes the buffers; a second caller (two
    threads of one worker calling ``os._exit`` a millisecond apart, or
    ``atexit`` while a worker thread exits) waits for that close: it
    must not end the process under the first one's writes.

    The writing runs in a helper thread that is waited for at most
    about ``2 * timeout`` seconds (the drain lock, then the sinks'
    close) and what the sinks' close may take (``close_bound``), so a
    write that never returns cannot keep the process from exiting.
    Nothing raises from here.  Returns False when it did not finish in
    time.
    """
    try:
        live = [
            buf
            for buf in list(_LIVE)
            if not buf._close_finished()
            and (buf._closed or buf.writer is not None or buf.queue)
        ]
        if not live:
            if not threads.in_os_worker():
                # a fault's line handed over (a start that failed)
                threads.finish_deferred(LOG_TIMEOUT)
            return True

        def close_all():
            for buf in live:
                try:
                    buf.close(timeout=timeout)
                except Exception as exc:  # nothing escapes the exit
                    _EXIT_FAULTS(exc)

        done = threads.run_bounded(
            close_all,
            sum(buf.close_bound(timeout) for buf in live),
            'instrument-exit',
        )
        if not threads.in_os_worker():
            # what was handed over to be logged is logged before the
            # process goes
            threads.finish_deferred(LOG_TIMEOUT)
        return done
    except Exception as exc:  # nothing escapes the exit
        _EXIT_FAULTS(exc)
        return False


def _flush_all_at_exit():
    flush_before_exit()


def _watch_all():
    now = time.monotonic()
    for buf in list(_LIVE):
        buf._check_stall(now)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_flush_all_at_exit)


class EventBuffer:
    """The one queue between instrumented calls and the sinks."""

    def __init__(
        self,
        sinks,
        max_records: int,
        flush_interval: float,
        identity=None,
        header=None,
    ) -> None:
        """``sinks``: objects with ``write(batch, first_seq, pid)``,
        ``name``, ``dropped`` and ``close()``.  ``identity``: the
        ``ProcessIdentity`` (host and service of drop records).
        ``header``: a callable returning the event tuples that open the
        output of each process (its ``process.start`` record).
        """
        self.sinks = list(sinks)
        self.identity = identity
        self.max_records = max_records
        self.max_open = max_records
        self.flush_interval = flush_interval
        self.stall_after = STALL_AFTER
        self.warn_interval = DROP_WARN_INTERVAL
        self._header = header
        self._closed = False
        # Set when the first ``close`` is over (None before it began).
        self._close_done = None
        self._held = False
        self._periodic = []
        # {callback: its Faults counter}
        self._periodic_faults = {}
        # Drop counters other than the buffer's and the sinks' (the SQL
        # listeners' queue), see ``add_drop_source``; those removed,
        # kept until their last count is written.
        self._sources = []
        self._retired = []
        # What sees every batch written and the end of each drain (the
        # metrics aggregates), see ``add_observer``.
        self._observers = []
        self._observer_faults = faults_mod.Faults(
            'an observer of the writer (the metrics)',
            PERIODIC_FAULT_LIMIT,
            what='the writer runs on',
        )
        # One deque for the life of the buffer (a forked child empties
        # it): ``emit`` closes over it.
        self.queue = collections.deque()
        self._init_process_state()
        self.emit = self._enqueue()
        _LIVE.add(self)

    def _init_process_state(self) -> None:
        self.queue.clear()
        self._drop_lock = threads.os_lock()
        self._start_lock = threads.os_lock()
        self._drain_lock = threads.os_lock()
        self._sinks_closed = False
        # The writer's alarm clock once started: an OS lock it waits on,
        # held while it sleeps; released to wake it (at close).  A bare
        # lock, not an Event: a wait on an Event costs its Condition's
        # Python besides the sleep, at every flush interval.
        self._wake: typing.Any = None
        self.writer = None
        self._seq = 1
        self._headed = False
        self.dropped_full = 0
        self.dropped_open = 0
        self._open = collections.deque()
        self._reported: typing.Optional[dict] = None
        # {drop source: its count last written}
        self._source_reported = {}
        self._final_logged = False
        self._end_pending = False
        # {cause: (monotonic time, its count)} of the last warning.
        self._warned = {}
        # Writer progress, read by the watchdog: monotonic start of the
        # drain under way (None between drains), the sink it is in, and
        # whether the drain was reported as stuck.
        self._busy_since: typing.Optional[float] = None
        self._busy_in = None
        self._busy_count = 0
        self._stalled = False
        self._generation = getattr(self, '_generation', 0) + 1

    # -- hot path ----------------------------------------------------------

    def _enqueue(self):
        """Make ``emit``, a closure over the deque and its bound (it is
        on every recorded call's path: attribute lookups would cost a
        tenth of it)."""
        queue = self.queue
        append = queue.append
        limit = self.max_records
        buf = self

        def emit(rec) -> None:
            """Queue one event (a tuple, or a span's list); never
            blocks, drops and counts when full.  The one enqueue of the
            library (``instrument.runtime.recorder`` binds it).

            The writer is started before the append: an event that is
            queued is never given up, so a failure to start (no thread
            left) raises before anything is queued.
            """
            if len(queue) < limit:
                if buf.writer is None:
                    buf.start()
                append(rec)
            else:
                buf.drop()

        # What ``emit`` closes over, for a caller that does its steps
        # inline (``Recorder.begin``, see ``inline_emit``).
        emit.inline = (queue, limit, buf)  # type: ignore[attr-defined]
        return emit

    def drop(self) -> None:
        """Count one event lost to a full buffer; the first one is
        reported at once, from here (the writer may be the one stuck)."""
        with self._drop_lock:
            self.dropped_full += 1
            first = self.dropped_full == 1
        if first:
            self._report_first_drop()

    def _report_first_drop(self) -> None:
        if BUFFER_FULL in self._warned:
            return
        self._warned[BUFFER_FULL] = (time.monotonic(), 1)
        # Never logged from here: a log call can block nova's thread on
        # a slow disk; the hub or the watchdog thread logs it.  Not
        # deferred (too much waiting): the writer warns instead.
        if not threads.defer(
            _DEFERRED_LOG.warning,
            'instrument: events are being dropped: the buffer of %d '
            'events ([instrument] buffer_size) is full, the writer '
            'does not keep up or is stuck writing to %s.  Raise '
            '[instrument] buffer_size, or record less with '
            '[instrument] slow_query_threshold or detail_sample_rate.  '
            'Drops are counted in sink.drops records; more are '
            'logged at most every %s.',
            self.max_records,
            ', '.join(self._sink_names()),
            _duration(self.warn_interval),
        ):
            self._warned.pop(BUFFER_FULL, None)

    def _sink_names(self) -> list:
        return [
            getattr(sink, 'path', None) or sink.name for sink in self.sinks
        ]

    # -- writer ------------------------------------------------------------

    def hold(self) -> None:
        """Keep the writer from starting until ``release`` (the runtime
        holds it while it sets up, so that the first drain, which writes
        the header, sees every point applied).  Events queue meanwhile.
        """
        self._held = True

    def release(self) -> None:
        """Undo ``hold``; starts the writer if anything is waiting."""
        self._held = False
        if self.writer is None and (self.queue or self._periodic):
            self.start()

    def start(self) -> None:
        """Start the writer thread (once per process)."""
        with self._start_lock:
            if self.writer is not None or self._closed or self._held:
                return
            wake = threads.os_lock()
            wake.acquire()
            self._wake = wake
            generation = self._generation
            self.writer = threads.start_os_thread(
                lambda: self._run(generation), 'instrument-writer'
            )
        threads.watch(_watch_all)

    def _run(self, generation: int) -> None:
        sleep = self._wake.acquire
        failed = False
        while generation == self._generation:
            sleep(True, self.flush_interval)
            if generation != self._generation:
                return
            try:
                self.drain()
            except Exception:  # the writer must outlive any bug
                if not failed:
                    failed = True
                    LOG.exception(
                        'instrument: the writer failed; it keeps running'
                    )
            if self._closed:
                return

    def _check_stall(self, now: float) -> None:
        """From the watchdog: report a drain that does not finish."""
        since = self._busy_since
        if since is None or self._stalled or now - since < self.stall_after:
            return
        self._stalled = True
        sink = self._busy_in
        LOG.warning(
            'instrument: the writer has been stuck for %.0f s '
            'writing to %s; events wait in memory up to '
            '[instrument] buffer_size (%d), then are dropped and '
            'counted',
            now - since,
            (getattr(sink, 'path', None) or sink.name)
            if sink is not None
            else 'its sinks',
            self.max_records,
        )

    def add_periodic(self, fn) -> None:
        """Run ``fn(final)`` in the writer before each drain (``final``
        is True on the last one, at close); ``fn`` may ``emit``.  Starts
        the writer so that ``fn`` runs even when nothing else is emitted.

        ``fn`` may return True to be run again, in the same drain, once
        what is queued is written (it stopped for want of room in the
        buffer).  A callback that raises is counted
        (``instrument.faults`` records), its first fault logged
        with its traceback; after ``PERIODIC_FAULT_LIMIT`` faults it is no
        longer run, and that is logged once.
        """
        if fn not in self._periodic:
            self._periodic.append(fn)
        if fn not in self._periodic_faults:
            self._periodic_faults[fn] = faults_mod.Faults(
                'the periodic callback %s of the writer' % _name_of(fn),
                PERIODIC_FAULT_LIMIT,
                what='the writer runs on',
            )
        if self.writer is None:
            self.start()

    def add_observer(self, observer) -> None:
        """Show ``observer`` every batch the writer hands to the sinks
        (``observer.observe(batch)``, before the sinks, whether they
        take it or not) and the end of each drain
        (``observer.tick(monotonic now, final)``), on the writer's
        thread only.  A fault is counted like a periodic callback's."""
        if observer not in self._observers:
            self._observers.append(observer)

    def _tick_observers(self) -> None:
        counter = self._observer_faults
        if not counter.active:
            return
        now = time.monotonic()
        for observer in self._observers:
            try:
                observer.tick(now, self._closed)
            except Exception as exc:  # never the writer's fault
                counter(exc)

    def remove_periodic(self, fn) -> None:
        """Stop running ``fn``; no error when it was not added."""
        try:
            self._periodic.remove(fn)
        except ValueError:
            pass

    def _run_periodic(self) -> bool:
        """Run the callbacks; True when one asked to run again."""
        again = False
        final = self._closed
        for fn in list(self._periodic):
            counter = self._periodic_faults.get(fn)
            if counter is not None and not counter.active:
                continue
            try:
                if fn(final) is True:
                    again = True
            except Exception as exc:  # a callback must never kill the writer
                if counter is None:
                    counter = self._periodic_faults[fn] = faults_mod.Faults(
                        'the periodic callback %s of the writer'
                        % _name_of(fn),
                        PERIODIC_FAULT_LIMIT,
                        what='the writer runs on',
                    )
                counter(exc)
        return again

    def pending(self) -> int:
        """Events queued and not yet handed to the sinks."""
        return len(self.queue)

    def counts(self) -> dict:
        """Cumulative drop counts: buffer full, and per sink."""
        out = {'buffer_full': self.dropped_full}
        if self.dropped_open:
            out['open_untracked'] = self.dropped_open
        for sink in self.sinks:
            settle = getattr(sink, 'settle', None)
            if settle is not None:
                settle()  # what it lost in another thread
            out[sink.name] = sink.dropped
        return out

    def drain(self, timeout: float = -1) -> bool:
        """Hand everything queued to the sinks.  Returns False when the
        drain lock could not be had within ``timeout`` seconds."""
        if not threads.acquire(self._drain_lock, timeout):
            return False
        if self._sinks_closed:  # after close: nothing is written
            self._drain_lock.release()
            return False
        self._busy_since = time.monotonic()
        try:
            pid = os.getpid()
            if not self._headed:
                self._headed = True
                if self._header is not None:
                    for rec in reversed(self._header()):
                        self.queue.appendleft(rec)
            again = self._run_periodic() if self._periodic else False
            if self._open:
                self._write_ended(pid)
            self._write_queue(pid)
            rounds = 1
            while again and (
                rounds < PERIODIC_ROUNDS
                or self._closed
                and rounds < FINAL_ROUNDS
            ):
                # a callback stopped for room: it goes on now that the
                # queue is written
                rounds += 1
                again = self._run_periodic()
                self._write_queue(pid)
            if self._end_pending:
                # before the last drop report, which counts it if lost
                self._end_pending = False
                try:
                    self._write([self._end_record()], pid)
                except Exception as exc:
                    _EXIT_FAULTS(exc)
                # what a sink delivers in another thread is delivered or
                # counted now, so that the last report has its count
                self._flush_sinks()
            self._report_drops(pid)
            if self._observers:
                self._tick_observers()
            return True
        finally:
            since = self._busy_since
            self._busy_since = None
            self._busy_in = None
            if self._stalled and since is not None:
                self._stalled = False
                LOG.warning(
                    'instrument: the writer is writing again after %.0f s',
                    time.monotonic() - since,
                )
            self._drain_lock.release()

    def _flush_sinks(self) -> None:
        for sink in self.sinks:
            flush = getattr(sink, 'flush', None)
            if flush is not None:
                try:
                    flush()
                except Exception as exc:
                    _EXIT_FAULTS(exc)

    def _write_queue(self, pid: int) -> None:
        queue = self.queue
        while queue:
            # One C-level loop per batch (``map`` calls ``popleft``
            # itself), no bytecode per record.  Only the writer pops,
            # under the drain lock, so the deque holds at least that
            # many; should it not (raced a reset), ``extend`` keeps
            # what was taken before the IndexError.
            batch: list = []
            try:
                batch.extend(
                    map(
                        _popleft,
                        itertools.repeat(queue, min(len(queue), MAX_BATCH)),
                    )
                )
            except IndexError:  # pragma: no cover - raced a reset
                pass
            self._write(self._split_running(batch), pid)

    def _split_running(self, batch: list) -> list:
        """Spans still running go out as a ``B`` now; they are kept and
        written as ``X`` at the first drain after they end."""
        size = len(batch)
        first = _first_running(batch, PH_BEGIN)
        if first >= size:  # most batches: no span running
            return batch
        out = batch
        for n in range(first, size):
            rec = batch[n]
            if rec.__class__ is list and rec[record.I_PH] == PH_BEGIN:
                if out is batch:
                    out = list(batch)
                out[n] = record.begin_snapshot(rec)
                if len(self._open) >= self.max_open:
                    self._open.popleft()
                    self.dropped_open += 1
                self._open.append(rec)
        return out

    def _write_ended(self, pid: int) -> None:
        running = collections.deque()
        ended = []
        for rec in self._open:
            if rec[record.I_PH] == PH_BEGIN:
                running.append(rec)
            else:
                ended.append(rec)
        self._open = running
        if ended:
            self._write(ended, pid)

    def _write(self, batch: list, pid: int, counted: bool = True) -> bool:
        """Hand ``batch`` to every sink; True when each took all of it.
        What a sink fails to write counts as dropped, with one
        exception: a drop report (``counted`` False) that no sink took
        is not a lost record: it gives its ``seq`` number back (a number
        missing from a span file is always one a count explains) and is
        written anew at the next drain.  One that some sink took is
        counted by the sinks that did not (their files miss its
        number)."""
        first = self._seq
        self._seq += len(batch)
        whole = True
        # the sinks that did not take an uncounted batch, and their
        # counts before it
        missed = []
        # what a write that never returns holds (logged at close)
        self._busy_count = len(batch)
        if self._observers and self._observer_faults.active:
            for observer in self._observers:
                try:
                    observer.observe(batch)
                except Exception as exc:  # never the writer's fault
                    self._observer_faults(exc)
        for sink in self.sinks:
            self._busy_in = sink
            before = sink.dropped
            try:
                sink.write(batch, first, pid)
            except Exception as exc:  # a sink must never kill the writer
                whole = False
                if not counted:
                    missed.append((sink, sink.dropped))
                sink.dropped += len(batch)
                try:
                    sink.last_error = '%s: %s' % (exc.__class__.__name__, exc)
                except Exception:  # pragma: no cover - a frozen sink
                    pass
                if not getattr(sink, '_instrument_failed', False):
                    sink._instrument_failed = True
                    LOG.exception(
                        'instrument: sink %s failed; its lost '
                        'events are counted in sink.drops '
                        'records, further failures are not '
                        'logged',
                        sink.name,
                    )
            else:
                if sink.dropped != before:
                    whole = False
                    if not counted:
                        missed.append((sink, before))
        self._busy_count = 0
        if missed and len(missed) == len(self.sinks):
            # no sink took it: not a record, not a loss
            self._seq = first
            for sink, before in missed:
                sink.dropped = before
        return whole

    # -- what was lost -----------------------------------------------------

    def add_drop_source(self, source) -> None:
        """Report the drops of ``source`` too, a queue of its own in
        front of this buffer (the SQL listeners' statements).  It has:
        ``dropped`` (its cumulative count), ``drops_event`` (the event
        of its counter record, attrs ``count``, written whenever the
        count changed, again until every sink took it, and at close),
        ``drops_cause`` (its name in the logs and in ``drop_counts``),
        ``drops_what()`` (what it lost, e.g. ``SQL statements dropped
        (more than 50000 waited for the writer)``), ``drops_advice``,
        ``waiting()`` (what it holds for the writer, lost if the writer
        never takes it) and ``drops_unit`` (what that is).  Its drops
        are logged as the buffer's are, and at close."""
        if source in self._retired:
            self._retired.remove(source)
        if source not in self._sources:
            self._sources.append(source)

    def remove_drop_source(self, source) -> None:
        """``source`` is removed (its count no longer changes): its last
        count is still written, and logged at close."""
        if source in self._sources:
            self._sources.remove(source)
            if source not in self._retired:
                self._retired.append(source)

    def drop_counts(self) -> dict:
        """Every cause's cumulative count: ``counts()`` (the buffer's
        and the sinks') and the drop sources' (``sql_queue``)."""
        return self._drop_counts(self.counts())

    def _drop_counts(self, counts: dict) -> dict:
        out = dict(counts)
        for source in self._sources + self._retired:
            cause = source.drops_cause
            out[cause] = out.get(cause, 0) + source.dropped
        return out

    def _report_drops(self, pid: int) -> None:
        counts = self.counts()
        self._warn_drops(self._drop_counts(counts))
        ident = self.identity
        host = ident.host if ident is not None else ''
        svc = ident.svc if ident is not None else ''
        now = time.time_ns() // 1000
        # A report no sink could take is not a lost record: it is
        # written anew at the next drain (``_write``).
        if counts != self._reported and any(counts.values()):
            rec = record.counter(
                schema.EV_SINK_DROPS, host, svc, now, dict(counts)
            )
            if self._write([rec], pid, counted=False):
                self._reported = counts
        for source in self._sources + self._retired:
            count = source.dropped
            if count != self._source_reported.get(source, 0):
                rec = record.counter(
                    source.drops_event,
                    host,
                    svc,
                    now,
                    {schema.ATTR_COUNT: count},
                )
                if self._write([rec], pid, counted=False):
                    self._source_reported[source] = count

    def _warn_drops(self, counts: dict) -> None:
        """Writer: log the drops of each cause whose count grew, at
        most once per cause every ``warn_interval`` seconds."""
        now = time.monotonic()
        for cause, count in counts.items():
            last = self._warned.get(cause)
            if last is None:
                if not count:
                    continue
                new, since = count, 'since the start'
            else:
                when, before = last
                if count <= before or now - when < self.warn_interval:
                    continue
                new = count - before
                since = 'in the last %s' % _duration(now - when)
            self._warned[cause] = (now, count)
            what, advice, event = self._drop_cause(cause)
            LOG.warning(
                'instrument: events are being dropped: %d %s %s '
                '(%d in all); %s.  Drops are counted in %s '
                'records; this cause is logged at most every %s, '
                'and at close.',
                new,
                what,
                since,
                count,
                advice,
                event,
                _duration(self.warn_interval),
            )

    def _source(self, cause: str):
        for source in self._sources + self._retired:
            if source.drops_cause == cause:
                return source
        return None

    def _drop_cause(self, cause: str) -> tuple:
        """(what was lost, the advice, the event of its counter records)
        for a key of ``drop_counts()``."""
        drops = schema.EV_SINK_DROPS
        if cause == BUFFER_FULL:
            return (
                'lost to a full buffer of %d events' % self.max_records,
                'the writer does not keep up with what is recorded: '
                'raise [instrument] buffer_size, or record less with '
                '[instrument] slow_query_threshold or '
                'detail_sample_rate',
                drops,
            )
        if cause == OPEN_UNTRACKED:
            return (
                'span ends lost (more than %d spans ran at once)'
                % self.max_open,
                'raise [instrument] buffer_size',
                drops,
            )
        for sink in self.sinks:
            if sink.name == cause:
                error = getattr(sink, 'last_error', None)
                where = getattr(sink, 'path', None) or getattr(
                    sink, 'directory', None
                )
                return (
                    'lost by the %s sink%s'
                    % (cause, ' (%s)' % where if where else ''),
                    'the sink\'s error: %s' % error
                    if error
                    else 'see the errors the sink logged',
                    drops,
                )
        source = self._source(cause)
        if source is not None:
            return source.drops_what(), source.drops_advice, source.drops_event
        return 'lost (%s)' % cause, 'see the errors logged before', drops

    # -- lifecycle ---------------------------------------------------------

    def close(self, timeout: float = EXIT_TIMEOUT) -> None:
        """Write what is queued, stop the writer and close the sinks
        (idempotent); log the final count of every cause of loss.

        The first caller closes; one that comes while it does (a second
        thread calling ``os._exit``) waits for it, at most
        ``close_bound(timeout)`` seconds: it must not end the process
        under the first one's writes.  Never raises: a fault is counted
        and logged once, and the other steps still run.
        """
        with self._start_lock:
            done = self._close_done
            first = done is None
            if done is None:
                done = self._close_done = threads.os_event()
                self._closed = True
        if not first:
            done.wait(self.close_bound(timeout))
            return
        try:
            self._close(timeout)
        finally:
            done.set()
            _LIVE.discard(self)

    def close_bound(self, timeout: float) -> float:
        """About the longest ``close(timeout)`` takes: the drain lock
        twice at most, and what each sink's close may take (its
        ``close_timeout``: an OTLP sink waits for its last export)."""
        budget = 2 * timeout + 1.0
        for sink in self.sinks:
            try:
                budget += float(getattr(sink, 'close_timeout', 0.0))
            except Exception:  # noqa: S110 - a sink's odd attribute
                pass
        return budget

    def _close_finished(self) -> bool:
        done = self._close_done
        return done is not None and done.is_set()

    def _close(self, timeout: float) -> None:
        drained = None
        # A clean stop says so, after everything but the last drop
        # report (the last drain writes it): a process whose output has
        # no end record was killed (its last flush interval is lost).
        self._end_pending = True
        try:
            wake = self._wake
            if wake is not None:
                try:
                    wake.release()
                except RuntimeError:  # not held: the writer is awake
                    pass
        except Exception as exc:
            _EXIT_FAULTS(exc)
        try:
            drained = self.drain(timeout=timeout)
        except Exception as exc:
            _EXIT_FAULTS(exc)
        # The sinks close under the drain lock: the writer thread, woken
        # above, may be draining still, and a file closed under its
        # write loses the batch (EBADF).  A writer that held it through
        # the whole drain timeout is stuck (a write that never returns):
        # it is not waited for again, and every sink but the one it is
        # stuck in is closed all the same: an OTLP sink's close ends its
        # exporter thread, which must not outlive the interpreter inside
        # its eventlet hub (see ``instrument.sinks.otlp.interrupt``).  The
        # sink the writer is in stays open; the process's exit closes it.
        try:
            if threads.acquire(
                self._drain_lock, 0 if drained is False else timeout
            ):
                try:
                    self._close_sinks(self.sinks)
                finally:
                    self._drain_lock.release()
            else:
                stuck = self._busy_in
                self._close_sinks(
                    [sink for sink in self.sinks if sink is not stuck]
                )
        except Exception as exc:
            _EXIT_FAULTS(exc)
        self.log_final_counts(drained)
        if not threads.in_os_worker():
            threads.finish_deferred(LOG_TIMEOUT)

    def _close_sinks(self, sinks: list) -> None:
        self._sinks_closed = True
        for sink in sinks:
            try:
                sink.close()
            except Exception:
                LOG.exception('instrument: closing sink %s', sink.name)

    def log_final_counts(self, drained=True) -> None:
        """At close (once): a line per cause of loss with its count
        since the start and since its last warning, and one for what
        was never written (``drained``: False when the last drain could
        not run, the writer being stuck; None when it failed).  Never
        raises."""
        try:
            if self._final_logged:
                return
            self._final_logged = True
            counts = self.drop_counts()
            for cause, count in counts.items():
                if count:
                    self._log_final_count(cause, count)
            self._log_unwritten(drained)
        except Exception as exc:
            _EXIT_FAULTS(exc)

    def _log_final_count(self, cause: str, count: int) -> None:
        last = self._warned.get(cause)
        since = count - last[1] if last is not None else count
        what, _advice, event = self._drop_cause(cause)
        source = self._source(cause)
        if source is not None:
            written = self._source_reported.get(source, 0) == count
        else:
            reported: dict = self._reported or {}
            written = reported.get(cause) == count
        LOG.warning(
            'instrument: at close, %d %s since the start, %d of '
            'them since the last warning; counted in %s '
            'records%s',
            count,
            what,
            since,
            event,
            ''
            if written
            else ' (the last one could not be '
            'written: this line is the only record of the total)',
        )

    def _log_unwritten(self, drained) -> None:
        events = len(self.queue) + sum(
            1 for rec in self._open if rec[record.I_PH] != PH_BEGIN
        )
        stuck = self._busy_count if drained is False else 0
        waiting = [
            (source.waiting(), source.drops_unit)
            for source in self._sources + self._retired
        ]
        waiting = [(n, unit) for n, unit in waiting if n]
        if not events and not stuck and not waiting:
            return
        if drained is False:
            sink = self._busy_in
            why = (
                'the writer did not finish writing to %s within the '
                'exit timeout'
                % (
                    (getattr(sink, 'path', None) or sink.name)
                    if sink is not None
                    else 'its sinks'
                )
            )
        elif drained is None:
            why = 'the last write failed (see the fault logged)'
        else:
            why = 'recorded after the last write'
        LOG.warning(
            'instrument: at close, %d events%s%s were never written: %s',
            events + stuck,
            ' (%d of them in the write that did not return)' % stuck
            if stuck
            else '',
            ''.join(' and %d %s' % item for item in waiting),
            why,
        )

    def _end_record(self) -> tuple:
        """The ``process.end`` record of a clean stop."""
        ident = self.identity
        return record.meta(
            schema.EV_PROCESS_END,
            ident.host if ident is not None else '',
            ident.svc if ident is not None else '',
            time.time_ns() // 1000,
            {},
        )

    def _reset_after_fork(self) -> None:
        """In a forked child: start empty, with new locks and thread."""
        self._init_process_state()
        done = self._close_done
        if done is not None and not done.is_set():
            # forked while a thread of the parent closed it: closed here
            done = self._close_done = threads.os_event()
            done.set()
        for sink in self.sinks:
            after_fork = getattr(sink, 'after_fork', None)
            if after_fork is not None:
                after_fork()


def _name_of(fn) -> str:
    """A callback's name for a log line (``SqlListeners.process``)."""
    return (
        getattr(fn, '__qualname__', None)
        or getattr(fn, '__name__', None)
        or fn.__class__.__name__
    )


def _duration(seconds: float) -> str:
    """``5 minutes``, ``90 s``: a warning's time span."""
    if seconds >= 120 and seconds % 60 < 1:
        return '%d minutes' % (seconds // 60)
    return '%.0f s' % seconds
