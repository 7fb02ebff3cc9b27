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
"""The ``otlp`` sink: spans exported to an OpenTelemetry collector.

Owns the queue between the buffer's writer thread and the export, the
exporter thread, drop counting, fork and close.  The mapping of events
onto OTLP spans is ``spans``; the SDK exporters are ``exporters``.

Nothing of OpenTelemetry is imported by this module; the SDK is loaded
when the sink is built (that is, only when ``otlp`` is in ``[instrument]
sinks``), and grpcio only for ``otlp_protocol = grpc``.

``write`` (the buffer's writer thread) only filters records into a
bounded deque and wakes the exporter: it never waits for the network.
The exporter is a real OS thread, also under eventlet (see
``instrument.runtime.threads``), that builds the SDK exporter itself, so every
socket, lock and event the SDK creates belongs to that thread; under
eventlet its green sockets wait on that thread's own hub, never on the
service's.  Spans that do not fit in the queue, and spans of a failed
export (collector down, slow or refusing), are counted in ``dropped``.

close() waits for the last export at most ``CLOSE_TIMEOUT``; an export
still stuck then is given up on (what it holds is counted), and under
eventlet the thread is thrown out of its hub and ended
(``interrupt``): a thread left inside its hub crashes the process with
SIGSEGV if it wakes while the interpreter finalizes.
"""

import collections
import time
import typing

from oslo_log import log as logging

from instrument import opts
from instrument import schema
from instrument import sinks as sink
from instrument import version
from instrument.runtime import record
from instrument.runtime import threads
from instrument.sinks.otlp import exporters
from instrument.sinks.otlp import interrupt

# Used from the writer's OS thread: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))

# Spans per OTLP request (the SDK batch processor's default).
EXPORT_BATCH = 512
# Longest idle wait of the exporter thread between two looks at the queue.
EXPORT_INTERVAL = 1.0
# Longest wait in close() for the last export (never when it is failing).
CLOSE_TIMEOUT = 2.0
# Longest further wait in close(), under eventlet, for the exporter thread
# to leave an export close() gave up on and end (see ``interrupt``); it
# takes milliseconds when the export waits on the network.
INTERRUPT_TIMEOUT = 1.0
# Longest wait of a span without request id for its parent (see spans).
HOLD_SECONDS = 60.0

_PH_X = schema.PH_COMPLETE
_PH_I = schema.PH_INSTANT
_PH_B = schema.PH_BEGIN
_PH_M = schema.PH_META
_META_KEPT = frozenset(('process.start', 'sql.fingerprint'))
_COUNTED = frozenset((_PH_X, _PH_I))
_EV_SQL_TXN = schema.EV_SQL_TXN


def _spans_of(rec) -> int:
    """The spans record ``rec`` becomes: one, and one more per round
    trip an ``sql.txn`` carries (its COMMIT/ROLLBACK, the pool's reset):
    what is counted accepted, exported and lost."""
    if rec[record.I_EV] != _EV_SQL_TXN:
        return 1
    attrs = rec[record.I_ATTRS]
    if not attrs:
        return 1
    return 1 + sum(1 for key in schema.FOLDED if attrs.get(key))


class OtlpSink(sink.Sink):
    """Exports complete spans over OTLP (HTTP/protobuf or gRPC)."""

    name = 'otlp'
    close_timeout = CLOSE_TIMEOUT + INTERRUPT_TIMEOUT

    def __init__(self, conf, identity) -> None:
        self._lock = threads.os_lock()
        self._dropped = 0
        self._export_drops = 0
        self._export_folded = 0
        super().__init__(conf, identity)
        group = conf.instrument
        self.protocol = group.otlp_protocol
        self.endpoint = exporters.endpoint_for(
            self.protocol, group.otlp_endpoint
        )
        self.timeout = group.otlp_timeout
        self.queue_size = group.otlp_queue_size
        self._check_installed()
        self._closed = False
        self._init_process_state()

    def _check_installed(self) -> None:
        try:
            from instrument.sinks.otlp import spans  # noqa: F401

            exporters.exporter_class(self.protocol)
        except ImportError as exc:
            raise opts.InvalidOption(
                'sinks',
                'the "otlp" sink needs the OpenTelemetry SDK and '
                'its OTLP exporters: pip install '
                '"openstack-instrument[otlp]" (%s)' % exc,
            ) from exc

    def _init_process_state(self) -> None:
        self._queue = collections.deque()
        self._wake = threads.os_event()
        self._thread = None
        self._interrupt = None
        self._stopping = False
        self._abandoned = False
        self._broken = False
        self._failing: typing.Optional[str] = None
        self._pid: typing.Optional[int] = None
        # Span and instant records queued, and those exported or counted
        # as dropped since: equal when nothing is pending.
        self._accepted = 0
        self._settled = 0
        self._held = 0
        self.exported = 0
        self.attempts = 0

    # -- drop accounting ---------------------------------------------------
    #
    # The buffer reads and sets ``dropped`` from the writer thread; the
    # exporter thread only adds to ``_export_drops``, which the getter
    # folds in.  So a buffer's read-then-restore of ``dropped`` never
    # loses a drop the exporter counted meanwhile.

    @property
    def dropped(self) -> int:
        with self._lock:
            pending = self._export_drops - self._export_folded
            self._export_folded += pending
            self._dropped += pending
            return self._dropped

    @dropped.setter
    def dropped(self, value: int) -> None:
        with self._lock:
            self._dropped = value

    def _count_writer_drops(self, n: int) -> None:
        with self._lock:
            self._dropped += n

    def _settle(self, exported: int, lost: int) -> None:
        """Exporter thread: records delivered / lost.  Nothing after
        close() gave up on the thread (it counted them already)."""
        with self._lock:
            if self._abandoned:
                return
            self.exported += exported
            self._export_drops += lost
            self._settled += exported + lost

    # -- writer thread -----------------------------------------------------

    def write(self, batch: list, first_seq: int, pid: int) -> None:
        """Queue what the export needs; never waits for the network."""
        self._pid = pid
        queue = self._queue
        room = self.queue_size - len(queue)
        lost = 0
        queued = 0
        broken = self._broken or self._closed
        for rec in batch:
            ph = rec[record.I_PH]
            if ph == _PH_X or ph == _PH_I:
                if room > 0 and not broken:
                    queue.append(rec)
                    room -= 1
                    queued += _spans_of(rec) if ph == _PH_X else 1
                else:
                    lost += _spans_of(rec) if ph == _PH_X else 1
            elif (
                room > 0
                and not broken
                and (
                    (ph == _PH_B and rec[record.I_REQ] is None)
                    or (ph == _PH_M and rec[record.I_EV] in _META_KEPT)
                )
            ):
                # Read for trace roots, resource and SQL text; a span of
                # its own never, so losing one is not a lost event.
                queue.append(rec)
                room -= 1
        if lost:
            if not broken:
                self.last_error = (
                    'the export queue of %d spans ([instrument] '
                    'otlp_queue_size) is full: exports to %s are slow or '
                    'failing' % (self.queue_size, self.endpoint)
                )
            self._count_writer_drops(lost)
        if queued:
            self._accepted += queued
            if self._thread is None:
                self._interrupt = interrupt.GreenInterrupt.create()
                self._thread = threads.start_os_thread(
                    self._run, 'instrument-otlp'
                )
            self._wake.set()

    # -- exporter thread ---------------------------------------------------

    def _run(self) -> None:
        armed = None
        if self._interrupt is not None:
            try:
                armed = self._interrupt.arm()
            except Exception:  # an unusual hub: close() cannot end it early
                self._interrupt.close()
                self._interrupt = None
        try:
            self._serve()
        except interrupt.Interrupted:
            pass  # close() gave up on this export and counted its spans
        finally:
            if armed is not None:
                interrupt.GreenInterrupt.disarm(armed)

    def _serve(self) -> None:
        try:
            from instrument.sinks.otlp import spans

            builder = spans.SpanBuilder(self.identity, version.version())
            with exporters.quiet_logs():
                exporter = exporters.make_exporter(
                    self.protocol, self.endpoint, self.timeout
                )
        except Exception as exc:
            self._broken = True
            self.last_error = 'cannot export to %s over %s: %s' % (
                self.endpoint,
                self.protocol,
                exc,
            )
            LOG.error(
                'instrument: cannot export spans to %s over %s (%s); '
                'the service keeps running, spans are dropped and '
                'counted in sink.drops records',
                self.endpoint,
                self.protocol,
                exc,
            )
            self._drop_queue()
            return
        success = spans.EXPORT_SUCCESS
        wake = self._wake
        while True:
            wake.wait(EXPORT_INTERVAL)
            wake.clear()
            stopping = self._stopping
            self._export_queued(builder, exporter, success, stopping)
            if stopping:
                break
        if self._abandoned:
            return  # close() is waiting for this thread to end
        try:
            with exporters.quiet_logs():
                exporter.shutdown()
        except Exception:  # best effort at exit
            pass

    def _drop_queue(self, builder=None) -> None:
        """Empty the queue, counting the records that were events; the
        others (trace roots, resource, SQL text) still go to ``builder``
        so that later spans lack nothing."""
        queue = self._queue
        pid = self._pid
        lost = 0
        none = []
        while queue:
            try:
                rec = queue.popleft()
            except IndexError:  # pragma: no cover - raced the exporter
                break
            if rec[record.I_PH] in _COUNTED:
                lost += _spans_of(rec) if rec[record.I_PH] == _PH_X else 1
            elif builder is not None:
                try:
                    builder.add(rec, pid, none)
                except Exception:
                    pass
        self._settle(0, lost)

    def _export_queued(
        self, builder, exporter, success, final: bool = False
    ) -> None:
        """Export everything queued, in batches.  Spans held for a parent
        that did not come go out once stale, or all when ``final``.

        After a failed export (the SDK retried until ``otlp_timeout``)
        the rest of the queue is dropped, not converted: a dead collector
        costs one batch's conversion per attempt, not one per span.
        """
        queue = self._queue
        pid = self._pid
        stale = (
            None
            if final
            else (time.time_ns() // 1000 - int(HOLD_SECONDS * 1000000))
        )
        while not self._abandoned:
            batch = []
            broken = 0
            while queue and len(batch) < EXPORT_BATCH:
                try:
                    rec = queue.popleft()
                except IndexError:  # pragma: no cover - raced close()
                    break
                try:
                    builder.add(rec, pid, batch)
                except Exception as exc:
                    if rec[record.I_PH] in _COUNTED:
                        broken += _spans_of(rec)
                    LOG.debug(
                        'instrument: record %r not exported: %s',
                        rec[record.I_EV],
                        exc,
                    )
            if not queue and builder.held:
                builder.release(stale, pid, batch)
            self._held = builder.held
            exported = 0
            failed = False
            if batch:
                self.attempts += 1
                if self._export(exporter, batch, success):
                    exported = len(batch)
                else:
                    broken += len(batch)
                    failed = True
            if exported or broken:
                self._settle(exported, broken)
            if failed:
                self._drop_queue(builder)
            if not queue:
                return

    def _export(self, exporter, batch: list, success) -> bool:
        with exporters.quiet_logs() as last_line:
            try:
                ok = exporter.export(batch) == success
                cause = None if ok else last_line()
            except Exception as exc:  # the SDK must not kill the thread
                ok = False
                cause = '%s: %s' % (exc.__class__.__name__, exc)
        if ok:
            if self._failing is not None:
                LOG.warning(
                    'instrument: exporting spans to %s again', self.endpoint
                )
                self._failing = None
            return True
        if self._failing is None:
            LOG.error(
                'instrument: cannot export spans to %s over %s (%s); '
                'the service keeps running, lost spans are counted '
                'in sink.drops records and this is logged once until '
                'export works again',
                self.endpoint,
                self.protocol,
                cause or 'export failed',
            )
        self._failing = cause or 'export failed'
        self.last_error = 'export to %s failed: %s' % (
            self.endpoint,
            self._failing,
        )
        return False

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Export what is queued, waiting at most ``CLOSE_TIMEOUT`` (not
        at all while exports are failing); what is left is counted.
        Under eventlet, an export given up on is then interrupted and
        the thread waited for at most ``INTERRUPT_TIMEOUT`` more."""
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        thread = self._thread
        if thread is None:
            return
        self._wake.set()
        thread.join(0 if self._failing is not None else CLOSE_TIMEOUT)
        if thread.is_alive():
            # Stuck in an export: count what it holds and what is
            # queued, and give up on it.
            with self._lock:
                self._abandoned = True
                lost = self._accepted - self._settled
                self._export_drops += lost
                self._settled = self._accepted
            self._queue.clear()
            if lost:
                LOG.warning(
                    'instrument: %d spans not exported to %s at '
                    'exit (export failing or slow); counted as '
                    'dropped',
                    lost,
                    self.endpoint,
                )
            if self._interrupt is not None:
                # Under eventlet the thread must not be left in its hub
                # (see ``interrupt``): throw it out and let it end.
                self._interrupt.fire()
                thread.join(INTERRUPT_TIMEOUT)
            # One blocked in C (native threads, gRPC's blocking call) is
            # left behind, a daemon thread: that is harmless at exit.
        if self._interrupt is not None and not thread.is_alive():
            self._interrupt.close()

    def after_fork(self) -> None:
        """In a forked child: an empty queue, new thread and exporter
        (the parent's connection is never used by the child)."""
        if self._interrupt is not None:
            self._interrupt.close()  # the parent's copies
        self._lock = threads.os_lock()
        self._dropped = 0
        self._export_drops = 0
        self._export_folded = 0
        self._closed = False
        self._init_process_state()

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything queued was exported or dropped (tests,
        tools); False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self._accepted != self._settled + self._held:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True
