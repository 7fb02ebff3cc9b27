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
under eventlet, see ``instrument.threads``) drains the deque every
``flush_interval`` seconds and hands each batch to the sinks.  When the
deque is full new events are dropped and counted, never waited for.

Nothing is lost silently, even when the writer is stuck in a write that
never returns: the first event dropped is reported by the side that
drops it (through ``threads.defer``, never blocking the caller), and a
drain that has not finished after ``STALL_AFTER`` seconds is reported by
the watchdog thread (``threads.watch``).  Drop counts are written as
``sink.drops`` counter records whenever they change, so the analyser
can tell what is missing.  The writer logs drops per cause (the full
buffer, running spans forgotten, each sink) with the advice that fits
it, at most once per cause every ``DROP_WARN_INTERVAL`` seconds, with
the count since the cause's last warning.

The buffer is fork-safe: in a child process it starts empty (the parent
writes what it had), with fresh locks, a fresh writer thread and sinks
that open their own files.  It drains once more at interpreter exit, and
before ``os._exit`` (``flush_before_exit``, hooked by
``instrument.runtime``): the way oslo.service and cotyledon end their
workers, which skips ``atexit``.
"""

import atexit
import collections
import os
import time
import weakref

from oslo_log import log as logging

from instrument import record
from instrument import schema
from instrument import threads

PH_BEGIN = schema.PH_BEGIN

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
# A drain still running after this many seconds is reported as stuck.
STALL_AFTER = 10.0
# Drops of one cause are logged at most once per this many seconds.
DROP_WARN_INTERVAL = 300.0
# The causes of drops other than a sink (keys of ``counts()``).
BUFFER_FULL = 'buffer_full'
OPEN_UNTRACKED = 'open_untracked'

_LIVE = weakref.WeakSet()


def _after_fork_in_child():
    for buf in list(_LIVE):
        buf._reset_after_fork()


def flush_before_exit(timeout: float = EXIT_TIMEOUT) -> bool:
    """Write what every buffer of this process holds (SQL aggregates of
    the current interval included) and close it, before the process
    exits.  Buffers of a process that recorded nothing are left alone.

    The writing runs in a helper thread that is waited for at most
    about ``2 * timeout`` seconds (the drain lock, then the sinks'
    close), so a write that never returns cannot keep the process from
    exiting.  Returns False when it did not finish in time.
    """
    live = [buf for buf in list(_LIVE) if not buf._closed and (
        buf.writer is not None or buf.queue)]
    if not live:
        return True

    def close_all():
        for buf in live:
            buf.close(timeout=timeout)

    done = threads.run_bounded(close_all, 2 * timeout + 1.0,
                               'instrument-exit')
    if not threads.in_os_worker():
        threads.run_deferred()
    return done


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

    def __init__(self, sinks, max_records: int, flush_interval: float,
                 identity=None, header=None) -> None:
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
        self._held = False
        self._periodic = []
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
        self._wake = None
        self.writer = None
        self._seq = 1
        self._headed = False
        self.dropped_full = 0
        self.dropped_open = 0
        self._open = collections.deque()
        self._reported = None
        # {cause: (monotonic time, its count)} of the last warning.
        self._warned = {}
        # Writer progress, read by the watchdog: monotonic start of the
        # drain under way (None between drains), the sink it is in, and
        # whether the drain was reported as stuck.
        self._busy_since = None
        self._busy_in = None
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
            library (``instrument.recorder`` binds it).

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
                'logged at most every %s.', self.max_records,
                ', '.join(self._sink_names()),
                _duration(self.warn_interval)):
            self._warned.pop(BUFFER_FULL, None)

    def _sink_names(self) -> list:
        return [getattr(sink, 'path', None) or sink.name
                for sink in self.sinks]

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
            self._wake = threads.os_event()
            generation = self._generation
            self.writer = threads.start_os_thread(
                lambda: self._run(generation), 'instrument-writer')
        threads.watch(_watch_all)

    def _run(self, generation: int) -> None:
        wake = self._wake
        failed = False
        while generation == self._generation:
            wake.wait(self.flush_interval)
            if generation != self._generation:
                return
            try:
                self.drain()
            except Exception:  # the writer must outlive any bug
                if not failed:
                    failed = True
                    LOG.exception('instrument: the writer failed; it '
                                  'keeps running')
            if self._closed:
                return

    def _check_stall(self, now: float) -> None:
        """From the watchdog: report a drain that does not finish."""
        since = self._busy_since
        if since is None or self._stalled or \
                now - since < self.stall_after:
            return
        self._stalled = True
        sink = self._busy_in
        LOG.warning('instrument: the writer has been stuck for %.0f s '
                    'writing to %s; events wait in memory up to '
                    '[instrument] buffer_size (%d), then are dropped and '
                    'counted', now - since,
                    (getattr(sink, 'path', None) or sink.name)
                    if sink is not None else 'its sinks', self.max_records)

    def add_periodic(self, fn) -> None:
        """Run ``fn(final)`` in the writer before each drain (``final``
        is True on the last one, at close); ``fn`` may ``emit``.  Starts
        the writer so that ``fn`` runs even when nothing else is emitted.
        """
        if fn not in self._periodic:
            self._periodic.append(fn)
        if self.writer is None:
            self.start()

    def remove_periodic(self, fn) -> None:
        """Stop running ``fn``; no error when it was not added."""
        try:
            self._periodic.remove(fn)
        except ValueError:
            pass

    def _run_periodic(self) -> None:
        for fn in list(self._periodic):
            try:
                fn(self._closed)
            except Exception:  # a callback must never kill the writer
                LOG.exception('instrument: periodic callback %r failed', fn)

    def pending(self) -> int:
        """Events queued and not yet handed to the sinks."""
        return len(self.queue)

    def counts(self) -> dict:
        """Cumulative drop counts: buffer full, and per sink."""
        out = {'buffer_full': self.dropped_full}
        if self.dropped_open:
            out['open_untracked'] = self.dropped_open
        for sink in self.sinks:
            out[sink.name] = sink.dropped
        return out

    def drain(self, timeout: float = -1) -> bool:
        """Hand everything queued to the sinks.  Returns False when the
        drain lock could not be had within ``timeout`` seconds."""
        if not self._drain_lock.acquire(timeout=timeout):
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
            if self._periodic:
                self._run_periodic()
            if self._open:
                self._write_ended(pid)
            queue = self.queue
            while queue:
                batch = []
                popleft = queue.popleft
                try:
                    for _ in range(min(len(queue), MAX_BATCH)):
                        batch.append(popleft())
                except IndexError:  # pragma: no cover - raced a reset
                    pass
                self._write(self._split_running(batch), pid)
            self._report_drops(pid)
            return True
        finally:
            since = self._busy_since
            self._busy_since = None
            self._busy_in = None
            if self._stalled and since is not None:
                self._stalled = False
                LOG.warning('instrument: the writer is writing again after '
                            '%.0f s', time.monotonic() - since)
            self._drain_lock.release()

    def _split_running(self, batch: list) -> list:
        """Spans still running go out as a ``B`` now; they are kept and
        written as ``X`` at the first drain after they end."""
        out = batch
        for n, rec in enumerate(batch):
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

    def _write(self, batch: list, pid: int, counted: bool = True) -> None:
        first = self._seq
        self._seq += len(batch)
        for sink in self.sinks:
            self._busy_in = sink
            try:
                sink.write(batch, first, pid)
            except Exception as exc:  # a sink must never kill the writer
                if counted:
                    sink.dropped += len(batch)
                try:
                    sink.last_error = '%s: %s' % (exc.__class__.__name__,
                                                  exc)
                except Exception:  # pragma: no cover - a frozen sink
                    pass
                if not getattr(sink, '_instrument_failed', False):
                    sink._instrument_failed = True
                    LOG.exception('instrument: sink %s failed; its lost '
                                  'events are counted in sink.drops '
                                  'records, further failures are not '
                                  'logged', sink.name)

    def _report_drops(self, pid: int) -> None:
        counts = self.counts()
        self._warn_drops(counts)
        if counts == self._reported or not any(counts.values()):
            return
        ident = self.identity
        host = ident.host if ident is not None else ''
        svc = ident.svc if ident is not None else ''
        rec = record.counter(schema.EV_SINK_DROPS, host, svc,
                             time.time_ns() // 1000, dict(counts))
        # Losing the drop report itself is not a lost event; a report
        # that could not be written is tried again at the next drain.
        before = [sink.dropped for sink in self.sinks]
        self._write([rec], pid, counted=False)
        failed = False
        for sink, dropped in zip(self.sinks, before, strict=True):
            failed = failed or sink.dropped != dropped
            sink.dropped = dropped
        if not failed:
            self._reported = counts

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
            what, advice = self._drop_cause(cause)
            LOG.warning('instrument: events are being dropped: %d %s %s '
                        '(%d in all); %s.  Drops are counted in sink.drops '
                        'records; this cause is logged at most every %s.',
                        new, what, since, count, advice,
                        _duration(self.warn_interval))

    def _drop_cause(self, cause: str) -> tuple:
        """(what was lost, the advice) for a key of ``counts()``."""
        if cause == BUFFER_FULL:
            return ('lost to a full buffer of %d events' % self.max_records,
                    'the writer does not keep up with what is recorded: '
                    'raise [instrument] buffer_size, or record less with '
                    '[instrument] slow_query_threshold or '
                    'detail_sample_rate')
        if cause == OPEN_UNTRACKED:
            return ('span ends lost (more than %d spans ran at once)'
                    % self.max_open, 'raise [instrument] buffer_size')
        for sink in self.sinks:
            if sink.name == cause:
                error = getattr(sink, 'last_error', None)
                where = getattr(sink, 'path', None) or \
                    getattr(sink, 'directory', None)
                return ('lost by the %s sink%s' % (
                    cause, ' (%s)' % where if where else ''),
                    'the sink\'s error: %s' % error if error else
                    'see the errors the sink logged')
        return 'lost (%s)' % cause, 'see the errors logged before'

    # -- lifecycle ---------------------------------------------------------

    def close(self, timeout: float = EXIT_TIMEOUT) -> None:
        """Write what is queued and stop the writer (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._wake is not None:
            self._wake.set()
        if self._headed or self.queue:
            # a clean stop says so: a process whose output has no end
            # record was killed (its last flush interval is lost)
            self.queue.append(self._end_record())
        self.drain(timeout=timeout)
        # The sinks close under the drain lock: the writer thread, woken
        # above, may be draining still, and a file closed under its
        # write loses the batch (EBADF).  A writer stuck longer keeps
        # its sinks open; the process's exit closes them.
        if self._drain_lock.acquire(timeout=timeout):
            try:
                self._sinks_closed = True
                for sink in self.sinks:
                    try:
                        sink.close()
                    except Exception:
                        LOG.exception('instrument: closing sink %s',
                                      sink.name)
            finally:
                self._drain_lock.release()
        if not threads.in_os_worker():
            threads.run_deferred()
        _LIVE.discard(self)

    def _end_record(self) -> tuple:
        """The ``process.end`` record of a clean stop."""
        ident = self.identity
        return record.meta(schema.EV_PROCESS_END,
                           ident.host if ident is not None else '',
                           ident.svc if ident is not None else '',
                           time.time_ns() // 1000, {})

    def _reset_after_fork(self) -> None:
        """In a forked child: start empty, with new locks and thread."""
        self._init_process_state()
        for sink in self.sinks:
            after_fork = getattr(sink, 'after_fork', None)
            if after_fork is not None:
                after_fork()


def _duration(seconds: float) -> str:
    """``5 minutes``, ``90 s``: a warning's time span."""
    if seconds >= 120 and seconds % 60 < 1:
        return '%d minutes' % (seconds // 60)
    return '%.0f s' % seconds
