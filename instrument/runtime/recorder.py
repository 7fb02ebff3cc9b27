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
"""The hot path: the one place where events are made and queued.

A ``Recorder`` (one per process, built by
``instrument.runtime.lifecycle``) owns what every recorded call has in common:

* span ids: a random per-process prefix and a counter, renewed in a
  forked child;
* the wall-clock anchor: a span's ``ts`` comes from the same monotonic
  reading as its duration, shifted by an offset that the buffer's
  writer refreshes;
* the current span of a thread or greenthread (the "frame", a
  ``ContextVar``), which nested spans and SQL statements inherit;
* the record layout: it builds span records (``begin``/``end``) and has
  ``instrument.runtime.record`` build every other event tuple;
* the enqueue: ``EventBuffer.emit`` (bounded, drops counted, writer
  started), bound once.

Its users bind it once and call it positionally: the patch point
wrappers (``instrument.runtime.wrappers``), ``Tracer.begin``/``end`` and
``Span`` (``instrument.runtime.tracer``), the paste filter through the tracer,
and the SQL listeners on both sides of their queue.
"""

import contextvars
import hashlib
import itertools
import os
import threading
import time
import typing
import zlib

from instrument import schema
from instrument.runtime import record

PH_B = schema.PH_BEGIN
PH_X = schema.PH_COMPLETE
ST_OK = schema.ST_OK
ST_ERROR = schema.ST_ERROR

I_PH = record.I_PH
I_DUR = record.I_DUR
I_REQ = record.I_REQ
I_INST = record.I_INST
I_ST = record.I_ST
I_ERR = record.I_ERR
I_ATTRS = record.I_ATTRS
I_T0 = record.I_T0
I_TS = record.I_TS
I_TOKEN = record.I_TOKEN

# -- the current span ---------------------------------------------------------

# Frame: (span, req, greq, inst, svc, host, ev).  Per thread under native
# threads, per greenthread under eventlet (greenlet gives each greenlet
# its own context).
F_SPAN, F_REQ, F_GREQ, F_INST, F_SVC, F_HOST, F_EV = range(7)
_CURRENT: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    'instrument_frame', default=None
)
current_frame = _CURRENT.get
# A frame of no span and no request: made current around a call that
# must not take oslo.context's current request (see PatchPoint
# ``request_outside_spans``); spans begun under it have no parent.
NO_FRAME = (None, None, None, None, None, None, None)
# Make a frame current (a span carried into another thread); returns the
# token for ``reset_frame``.  The ContextVar's own method: no Python call.
set_frame = _CURRENT.set


def reset_frame(token) -> None:
    """Undo ``set_frame``; a token of another context (a span ended
    elsewhere than it began) or one used already is ignored.  Never
    raises: it runs on the exit path of nova's calls."""
    try:
        _CURRENT.reset(token)
    except Exception:  # noqa: S110 - ValueError, RuntimeError: ignored
        pass


def _current_oslo_context():
    try:
        from oslo_context import context
    except ImportError:  # pragma: no cover - oslo.context is a dependency
        return None
    return context.get_current()


def current_request() -> tuple:
    """(req, greq) of oslo.context's current context, or (None, None):
    the fallback of a call that has no context argument and no enclosing
    span."""
    octx = _current_oslo_context()
    if octx is None:
        return None, None
    return (
        getattr(octx, 'request_id', None),
        getattr(octx, 'global_request_id', None),
    )


def request_id(ctx, frame):
    """The request id a call with context ``ctx`` (an object, a
    serialised dict or None) records: its own, else the enclosing
    span's, else oslo.context's current one."""
    req = None
    if ctx is not None:
        if ctx.__class__ is dict:  # a serialised context (RPC)
            req = ctx.get('request_id')
        else:
            req = getattr(ctx, 'request_id', None)
    if req is None:
        if frame is not None:
            return frame[F_REQ]
        return current_request()[0]
    return req


# -- ids ----------------------------------------------------------------------


def _new_prefix() -> int:
    return (int.from_bytes(os.urandom(4), 'big') | 1) << 32


# Public: the span wrappers and the wait recorder read them (and the
# wall clock anchor below) per call, as module attributes, to make
# span ids and timestamps inline; a fork renews them.
span_prefix = _new_prefix()
span_counter = itertools.count(1)


def _reseed_after_fork() -> None:
    global span_prefix, span_counter
    span_prefix = _new_prefix()
    span_counter = itertools.count(1)


os.register_at_fork(after_in_child=_reseed_after_fork)


def new_span_id() -> int:
    """A 64-bit span id: random per-process prefix + counter."""
    return span_prefix | (next(span_counter) & 0xFFFFFFFF)


def trace_id_hex(req: str) -> str:
    """The trace id of a request: MD5 of its request id, 32 hex digits.

    Derived, not carried, so every host computes the same id.
    """
    return hashlib.md5(req.encode('utf-8'), usedforsecurity=False).hexdigest()


# -- the wall-clock anchor ----------------------------------------------------

_time_ns = time.time_ns
_perf_ns = time.perf_counter_ns


def _wall_minus_perf() -> tuple:
    """``(wall clock minus monotonic clock, uncertainty)`` in ns, from
    the tightest of a few paired reads."""
    best_gap = best = None
    for _ in range(5):
        p0 = _perf_ns()
        wall = _time_ns()
        p1 = _perf_ns()
        if best_gap is None or p1 - p0 < best_gap:
            best_gap = p1 - p0
            best = wall - (p0 + p1) // 2
    return best, best_gap


# A span's ts is derived from the same monotonic reading as its duration:
# two separate reads can be a preemption (or a GIL switch) apart, and a
# span whose ts is early by that much seems to end before its remote
# child does.  Refreshed by the buffer's writer (wall clock steps).
wall_offset_ns = _wall_minus_perf()[0]
# A refresh whose paired reads were all stalled longer than this keeps
# the previous anchor (the next flush tries again).
_MAX_ANCHOR_GAP_NS = 100_000


def refresh_wall_clock(final: bool = False) -> None:
    """Re-anchor timestamps to the wall clock (a buffer periodic:
    ``final`` is set at close)."""
    global wall_offset_ns
    offset, gap = _wall_minus_perf()
    if gap <= _MAX_ANCHOR_GAP_NS:
        wall_offset_ns = offset


def wall_us(perf_ns: int) -> int:
    """The wall-clock time, in microseconds, of a monotonic reading."""
    return (perf_ns + wall_offset_ns) // 1000


# -- span records that cannot be ended normally -------------------------------


def release(rec: list) -> None:
    """Make the frame a span record set current no longer current
    (a span given up before it was queued).  Never raises."""
    try:
        token, rec[I_TOKEN] = rec[I_TOKEN], None
        if token is not None:
            reset_frame(token)
    except Exception:  # noqa: S110 - only ever called on a fault
        pass


def abandon(rec: list, st: str = ST_OK, t1: int | None = None) -> None:
    """End a span whose end failed half-way (a fault in an ``on_exit``,
    say): its frame released, its duration and status set, so that the
    writer does not wait for it forever.  Never raises.

    The span ends whatever the clock does: when the monotonic clock
    fails (it may be what failed the end), its duration is read on the
    wall clock, and is 0 when that fails too."""
    release(rec)
    try:
        if rec[I_PH] != PH_B:
            return
        rec[I_DUR] = _abandoned_duration(rec, t1)
        rec[I_ST] = st
        rec[I_PH] = PH_X
    except Exception:  # noqa: S110 - only ever called on a fault
        pass


def _abandoned_duration(rec: list, t1: int | None) -> int:
    """The duration, in microseconds, of a span given up on."""
    try:
        return max(0, ((_perf_ns() if t1 is None else t1) - rec[I_T0]) // 1000)
    except Exception:  # noqa: S110 - the fallback follows
        pass
    try:
        return max(0, _time_ns() // 1000 - rec[I_TS])
    except Exception:
        return 0


class SpanSteps(typing.NamedTuple):
    """What a span's start and end call besides building a list and a
    tuple: C functions and bound methods in production (no Python
    call), made once per recorder (``Recorder._span_steps``).

    ``Recorder.begin`` and ``end`` close over them, and carry them as
    ``begin.steps`` and ``end.steps``: a span wrapper
    (``instrument.runtime.wrappers``) given a recorder's own ``begin``
    does its steps itself with these parts, and ``end``'s for a call
    that ended well with no ``on_exit`` and no ``result_instances``; a
    ``begin`` or ``end`` without ``steps`` (a test's, a stand-in) is
    called.  A fault put in one of the parts (the fault matrix puts
    its recorder faults in ``append`` and ``reset_frame``) is reached
    by the span's start or end whichever of the two runs it.
    """

    #: the monotonic clock of the span's start (``Recorder.clock``)
    clock: typing.Callable[[], int]
    get_ident: typing.Callable[[], int]
    #: the current frame's ContextVar: get, set (returns the token),
    #: reset (raises ValueError for a token of another context)
    get_frame: typing.Callable[[], typing.Any]
    set_frame: typing.Callable[[typing.Any], typing.Any]
    reset_frame: typing.Callable[[typing.Any], typing.Any]
    #: oslo.context's current (req, greq): a start outside any span
    #: that has no context of its own
    request: typing.Callable[[], tuple]
    #: the enqueue: ``emit`` is called when ``append`` is None, else
    #: its steps are done inline: the length check against ``limit``,
    #: ``buf.start()`` when it has no writer, ``append`` or
    #: ``buf.drop()`` (``EventBuffer.emit``)
    emit: typing.Callable[[typing.Any], typing.Any]
    append: typing.Callable[[typing.Any], typing.Any] | None
    queue: typing.Any
    limit: typing.Any
    buf: typing.Any
    #: what a span that names none and has no enclosing span gets
    process_svc: typing.Any
    process_host: typing.Any


# The parts of a begin that has none (it is called): all None.
NO_STEPS = SpanSteps._make([None] * len(SpanSteps._fields))


class Recorder:
    """Makes the events of one process and queues them in its buffer.

    ``host`` and ``svc`` (from the process identity) fill in what a call
    does not name.  Nothing here formats a value or takes a lock held
    across I/O.  ``begin`` and ``end`` are closures over their
    ``SpanSteps`` (``begin.steps``, ``end.steps``); the patch point
    wrappers do their steps themselves with the same parts
    (``instrument.runtime.wrappers``): a span's path has no Python call
    but nova's, and a change of the record layout here is one there
    too (``tests/unit/test_wrapper_end.py`` compares them).
    """

    def __init__(
        self, buffer, identity, detail_sample_rate: float = 1.0
    ) -> None:
        self.buffer = buffer
        # The enqueue, bound once (see EventBuffer.emit).
        self.emit = buffer.emit
        # Looked up now, after eventlet (if any) has patched threading.
        self.get_ident = threading.get_ident
        # The monotonic clock of span starts and ends; callers that take
        # an end time themselves (the wrappers) read this one.
        self.clock = _perf_ns
        self.host = identity.host
        self.svc = identity.svc
        self.detail_sample_rate = detail_sample_rate
        self._sample_cut = int(detail_sample_rate * 10000)
        # The hot path: begin(ev, svc, host, ctx, inst, remote_parent,
        # attrs) -> record, and end(record, t1, st, err, attrs, req, inst).
        self.begin, self.end = self._span_functions()
        add_periodic = getattr(buffer, 'add_periodic', None)
        if add_periodic is not None:
            add_periodic(refresh_wall_clock)

    # -- sampling -------------------------------------------------------------

    def sampled(self, req) -> bool:
        """Full detail for this request?  Same answer on every host."""
        cut = self._sample_cut
        if cut >= 10000:
            return True
        if cut <= 0 or req is None:
            return cut > 0
        return zlib.crc32(req.encode()) % 10000 < cut

    def wants(self, ctx) -> bool:
        """Full detail for a call with context ``ctx``?  (A detail
        point asks before it extracts anything else.)"""
        if self._sample_cut >= 10000:
            return True
        return self.sampled(request_id(ctx, _CURRENT.get()))

    # -- spans ----------------------------------------------------------------

    def _span_steps(self) -> 'SpanSteps':
        """The parts ``begin`` and ``end`` run (see ``SpanSteps``), read
        from this recorder when its span functions are made."""
        emit = self.emit
        # The buffer's own enqueue (EventBuffer.emit) is done inline:
        # one Python call less per span.  Any other emit (a test's
        # list, a buffer whose emit was replaced) is called.
        inline = getattr(emit, 'inline', None)
        if inline is not None:
            queue, limit, buf = inline
            append = queue.append
        else:
            queue = limit = buf = append = None
        return SpanSteps(
            clock=self.clock,
            get_ident=self.get_ident,
            get_frame=_CURRENT.get,
            set_frame=_CURRENT.set,
            reset_frame=_CURRENT.reset,
            request=current_request,
            emit=emit,
            append=append,
            queue=queue,
            limit=limit,
            buf=buf,
            process_svc=self.svc,
            process_host=self.host,
        )

    def _span_functions(self) -> tuple:
        """``begin`` and ``end``, made once per recorder as closures over
        what they use (an attribute lookup per use would cost a tenth of
        the per-call budget), each carrying its ``SpanSteps`` as
        ``steps``: the span wrappers then do their steps themselves."""
        steps = self._span_steps()
        (
            clock,
            get_ident,
            get_frame,
            set_frame_,
            reset_frame_,
            oslo_request,
            emit,
            append,
            queue,
            limit,
            buf,
            process_svc,
            process_host,
        ) = steps

        def begin(ev: str, svc, host, ctx, inst, remote_parent, attrs) -> list:
            """Start a span and queue it; returns its record for ``end``.

            ``ctx`` is the call's request context (an object, a
            serialised dict or None).  What is None is inherited from
            the enclosing span (request, instance, service, host; it
            becomes the parent unless ``remote_parent`` names one), then
            the request from oslo.context's current context, service and
            host from the process.

            The record is queued at once, as a list in phase ``B``;
            ``end`` fills in duration and status and flips it to ``X``
            in place.  The writer writes it once as ``X`` if it has ended
            by then, or as a ``B`` now and an ``X`` later if it is still
            running (see ``instrument.runtime.buffer``): one queue entry per
            call, and a start on disk for every call that outlives a
            flush interval.  When the enqueue fails the span is given up
            (its frame released) and the exception raised.
            """
            frame = get_frame()
            req = greq = None
            if ctx is not None:
                if ctx.__class__ is dict:  # a serialised context (RPC)
                    req = ctx.get('request_id')
                    greq = ctx.get('global_request_id')
                else:
                    req = getattr(ctx, 'request_id', None)
                    greq = getattr(ctx, 'global_request_id', None)
            if frame is not None:
                if req is None:
                    req = frame[F_REQ]
                    greq = frame[F_GREQ]
                if inst is None:
                    inst = frame[F_INST]
                if svc is None:
                    svc = frame[F_SVC]
                if host is None:
                    host = frame[F_HOST]
                parent = (
                    frame[F_SPAN] if remote_parent is None else remote_parent
                )
            else:
                parent = remote_parent
                if req is None:
                    req, greq = oslo_request()
            if svc is None:
                svc = process_svc
            if host is None:
                host = process_host
            # Module attributes, read per call: a fork renews the span id
            # prefix, the writer the wall clock anchor.
            span = span_prefix | (next(span_counter) & 0xFFFFFFFF)
            t0 = clock()
            # The layout of instrument.runtime.record (I_*, then I_T0 and
            # I_TOKEN); the frame is set last (a fault before leaves
            # none).
            rec = [
                PH_B,
                (t0 + wall_offset_ns) // 1000,
                None,
                host,
                svc,
                get_ident(),
                ev,
                span,
                parent,
                req,
                greq,
                inst,
                None,
                None,
                attrs,
                t0,
                set_frame_((span, req, greq, inst, svc, host, ev)),
            ]
            try:
                if append is None:
                    emit(rec)
                # EventBuffer.emit, its steps inline (see there)
                elif len(queue) < limit:
                    if buf.writer is None:
                        buf.start()
                    append(rec)
                else:
                    buf.drop()
            except BaseException:
                release(rec)  # not queued: the caller runs unrecorded
                raise
            return rec

        def end(
            rec: list,
            t1: int,
            st: str = ST_OK,
            err=None,
            attrs=None,
            req=None,
            inst=None,
        ) -> None:
            """Finish the span ``begin`` returned, at monotonic time
            ``t1`` (``clock()``): ``attrs`` are merged into the start's,
            ``req`` and ``inst`` correct what was known at the start."""
            token = rec[I_TOKEN]
            if token is not None:
                try:
                    reset_frame_(token)
                except ValueError:
                    # Ended in another context than it began (rare; a
                    # generator finished elsewhere): leave that alone.
                    pass
                # After the reset: when it fails otherwise, ``abandon``
                # (the caller's fault path) still has the token.
                rec[I_TOKEN] = None
            if attrs:
                battrs = rec[I_ATTRS]
                if battrs:
                    battrs = dict(battrs)
                    battrs.update(attrs)
                    attrs = battrs
                rec[I_ATTRS] = attrs
            if req is not None:
                rec[I_REQ] = req
            if inst is not None:
                rec[I_INST] = inst
            rec[I_DUR] = (t1 - rec[I_T0]) // 1000
            rec[I_ST] = st
            rec[I_ERR] = err
            rec[I_PH] = PH_X  # last: the writer may read it any time

        begin.steps = end.steps = steps  # type: ignore[attr-defined]
        return begin, end

    # -- other events ---------------------------------------------------------

    def now_us(self) -> int:
        """Wall-clock now, in microseconds, on the spans' anchor."""
        return (self.clock() + wall_offset_ns) // 1000

    def instant(
        self, ev: str, attrs=None, svc=None, host=None, req=None, inst=None
    ) -> None:
        """A point-in-time event inside the current span."""
        frame = _CURRENT.get()
        parent = greq = None
        if frame is not None:
            parent = frame[F_SPAN]
            req = req or frame[F_REQ]
            greq = frame[F_GREQ]
            inst = inst or frame[F_INST]
            svc = svc or frame[F_SVC]
            host = host or frame[F_HOST]
        self.emit(
            record.instant(
                self.now_us(),
                host or self.host,
                svc or self.svc,
                self.get_ident(),
                ev,
                parent,
                req,
                greq,
                inst,
                attrs,
            )
        )

    def complete(
        self,
        ev: str,
        t0: int,
        t1: int,
        span,
        parent,
        req,
        greq,
        inst,
        svc,
        host,
        st: str,
        err,
        attrs,
    ) -> None:
        """A span measured elsewhere (an SQL statement, timed on the
        calling thread and recorded by the writer): ``t0``/``t1`` are
        monotonic readings; ``span`` None gets a new id."""
        self.emit(
            record.complete(
                (t0 + wall_offset_ns) // 1000,
                (t1 - t0) // 1000,
                host or self.host,
                svc or self.svc,
                ev,
                new_span_id() if span is None else span,
                parent,
                req,
                greq,
                inst,
                st,
                err,
                attrs,
            )
        )

    def meta(self, ev: str, attrs: dict) -> None:
        """A process-metadata (``M``) event."""
        self.emit(record.meta(ev, self.host, self.svc, self.now_us(), attrs))

    def counter(
        self, ev: str, attrs: dict, ts: int | None = None, req=None
    ) -> None:
        """A counter / aggregate (``C``) event, at ``ts`` (µs) or now."""
        self.emit(
            record.counter(
                ev,
                self.host,
                self.svc,
                self.now_us() if ts is None else ts,
                attrs,
                req,
            )
        )
