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
"""Spans: ids, the current span of a thread or greenthread, begin/end.

The current span lives in a ``contextvars.ContextVar`` holding a small
"frame" tuple, so it is per thread under native threads and per
greenthread under eventlet (greenlet gives each greenlet its own
context).  Nested spans, and SQL statements, inherit the request id,
instance, service and host of the enclosing frame.

Everything here runs on the hot path: it builds tuples and hands them to
``EventBuffer.emit``; nothing is formatted except an exception's short
message on the error path.
"""

import ast
import contextvars
import hashlib
import itertools
import os
import re
import threading
import time
import zlib

from instrument import record
from instrument import schema

PH_B = schema.PH_BEGIN
PH_X = schema.PH_COMPLETE
PH_I = schema.PH_INSTANT
ST_OK = schema.ST_OK
ST_ERROR = schema.ST_ERROR

# Positions in a span record (a list; see ``begin``); 0-14 are
# ``instrument.record``'s, 15-16 only live in memory.
I_PH = record.I_PH
I_DUR = record.I_DUR
I_REQ = record.I_REQ
I_INST = record.I_INST
I_ST = record.I_ST
I_ERR = record.I_ERR
I_ATTRS = record.I_ATTRS
I_T0 = record.SIZE
I_TOKEN = record.SIZE + 1

# Frame: (span, req, greq, inst, svc, host, ev)
F_SPAN, F_REQ, F_GREQ, F_INST, F_SVC, F_HOST, F_EV = range(7)
_CURRENT = contextvars.ContextVar('instrument_frame', default=None)
current_frame = _CURRENT.get


# Make a frame current (a span carried into another thread); returns the
# token for ``reset_frame``.  The ContextVar's own method: no Python call.
set_frame = _CURRENT.set
# The ContextVar's reset, for the wrappers that inline Tracer.end.
reset_frame_strict = _CURRENT.reset


def reset_frame(token) -> None:
    """Undo ``set_frame``; a token of another context is ignored (a
    span ended elsewhere than it began)."""
    try:
        _CURRENT.reset(token)
    except ValueError:
        pass

MAX_MESSAGE = 200
# oslo.db / SQLAlchemy messages carry the statement and its bound
# parameters after these markers; they never reach a span file.
_SECRET_MARKERS = ('[SQL:', '[parameters:', '(Background on this error')

# Drivers put bound values in their own messages too (MySQL's
# "Duplicate entry 'x' for key 'k'", PostgreSQL's "Key (k)=(x)"):
# ``scrub_message`` turns them into ``?``.  First the message templates
# whose value may hold quotes of its own (the server does not escape
# it): the value runs to the template's fixed tail.
_VALUE_TEMPLATES = tuple((re.compile(pattern, re.DOTALL), repl) for
                         pattern, repl in (
    # MySQL/MariaDB
    (r"(Duplicate entry )'.*'( for key '[^']*')$", r'\1?\2'),
    (r"(value: )'.*'( for column .*? at row \d+)$", r'\1?\2'),
    (r"( near )'.*'( at line \d+)$", r'\1?\2'),
    (r"(Cannot convert string )'.*'( from \S+ to \S+)$", r'\1?\2'),
    (r"(to the value of )'.*'$", r'\1?'),
    # MySQL "value: '...'", PostgreSQL 'for type integer: "..."'
    (r"(: )'.*'$", r'\1?'),
    (r'(: )".*"$', r'\1?'),
    # PostgreSQL DETAIL lines
    (r'(\bKey \(.*?\)=)\(.*\)', r'\1(?)'),
    (r'(\bFailing row contains )\(.*\)', r'\1(?)'),
))
# Any other quoted literal ('...', "...", x'..', N'..', _utf8'..') is a
# value unless a word that names an object precedes it (MySQL quotes
# key and column names, PostgreSQL relations and constraints; both the
# server a connection failed to reach).  Backquoted names are never
# touched.
_QUOTED = re.compile(
    r"""(?<!\w)(?:[xXbBnN]|_[A-Za-z0-9]+)?"""
    r"""(?:'(?:[^'\\]|\\.|'')*(?:'|$)|"(?:[^"\\]|\\.|"")*(?:"|$))""",
    re.DOTALL)
_NAME_BEFORE = re.compile(
    r'\b(?:key|column|constraint|relation|table|index|sequence|schema|'
    r'database|encoding|type|view|trigger|function|collation|savepoint|'
    r'role|user|server on|server at)\s+$', re.IGNORECASE)
_HEX = re.compile(r'\b0x[0-9a-fA-F]+(?:\s+0x[0-9a-fA-F]+)*')
# PyMySQL's and mysqlclient's ``(1062, "Duplicate entry ...")``: the
# server's message as a Python string literal.
_DRIVER_TUPLE = re.compile(
    r"""\((\d+), ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\)""")

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
_wall_offset_ns = _wall_minus_perf()[0]
# A refresh whose paired reads were all stalled longer than this keeps
# the previous anchor (the next flush tries again).
_MAX_ANCHOR_GAP_NS = 100_000


def refresh_wall_clock(final: bool = False) -> None:
    """Re-anchor span timestamps to the wall clock (a buffer periodic:
    ``final`` is set at close)."""
    global _wall_offset_ns
    offset, gap = _wall_minus_perf()
    if gap <= _MAX_ANCHOR_GAP_NS:
        _wall_offset_ns = offset


def _new_prefix() -> int:
    return (int.from_bytes(os.urandom(4), 'big') | 1) << 32


_prefix = _new_prefix()
_ids = itertools.count(1)


def _reseed_after_fork() -> None:
    global _prefix, _ids
    _prefix = _new_prefix()
    _ids = itertools.count(1)


os.register_at_fork(after_in_child=_reseed_after_fork)


def new_span_id() -> int:
    """A 64-bit span id: random per-process prefix + counter."""
    return _prefix | (next(_ids) & 0xFFFFFFFF)


def trace_id_hex(req: str) -> str:
    """The trace id of a request: MD5 of its request id, 32 hex digits.

    Derived, not carried, so every host computes the same id.
    """
    return hashlib.md5(req.encode('utf-8'),
                       usedforsecurity=False).hexdigest()


def error_class(exc: BaseException) -> str:
    """``nova.exception.NoValidHost``; builtins without a module."""
    cls = exc.__class__
    module = cls.__module__
    if module == 'builtins':
        return cls.__qualname__
    return module + '.' + cls.__qualname__


def _keep_name(match) -> str:
    text = match.string
    start = match.start()
    if _NAME_BEFORE.search(text, max(0, start - 24), start):
        return match.group(0)
    return '?'


def _scrub_plain(text: str) -> str:
    for pattern, repl in _VALUE_TEMPLATES:
        text = pattern.sub(repl, text)
    if "'" in text or '"' in text:
        text = _QUOTED.sub(_keep_name, text)
    return _HEX.sub('?', text)


def _driver_message(match) -> str:
    try:
        message = ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError):
        return '(%s, ?)' % match.group(1)
    return '(%s, %r)' % (match.group(1), _scrub_plain(str(message)))


def scrub_message(text: str) -> str:
    """``text`` with the values a statement or its parameters may have
    put in it replaced by ``?``: quoted literals (but the names of keys,
    columns, constraints... and backquoted names), hex literals,
    PostgreSQL's ``Key (name)=(value)``; error codes stay.

    ``(1062, "Duplicate entry 'a@b.org' for key 'name'")`` becomes
    ``(1062, "Duplicate entry ? for key 'name'")``.
    """
    out = []
    pos = 0
    for match in _DRIVER_TUPLE.finditer(text):
        out.append(_scrub_plain(text[pos:match.start()]))
        out.append(_driver_message(match))
        pos = match.end()
    out.append(_scrub_plain(text[pos:]))
    return ''.join(out)


def short_message(exc: BaseException) -> str:
    """First line of the message, without SQL, its parameters or any
    value the driver quoted in it (``scrub_message``), capped.

    Only called on the error path.
    """
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not break the call
        return ''
    for marker in _SECRET_MARKERS:
        cut = text.find(marker)
        if cut >= 0:
            text = text[:cut]
    text = text.strip().split('\n', 1)[0]
    try:
        text = scrub_message(text)
    except Exception:  # never let the scrubbing break the call
        return '?'
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE - 3] + '...'
    return text


def error_of(exc: BaseException) -> tuple:
    """``(class, short message)`` of an exception, looking through
    oslo.messaging's ExpectedException to the exception it carries."""
    if exc.__class__.__name__ == 'ExpectedException':
        info = getattr(exc, 'exc_info', None)
        if info and isinstance(info[1], BaseException):
            exc = info[1]
    return (error_class(exc), short_message(exc))


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
    return (getattr(octx, 'request_id', None),
            getattr(octx, 'global_request_id', None))


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
    writer does not wait for it forever.  Never raises."""
    release(rec)
    try:
        if rec[I_PH] == PH_B:
            rec[I_DUR] = ((_perf_ns() if t1 is None else t1) -
                          rec[I_T0]) // 1000
            rec[I_ST] = st
            rec[I_PH] = PH_X
    except Exception:  # noqa: S110 - only ever called on a fault
        pass


class Tracer:
    """Builds span events for one process and hands them to the buffer."""

    def __init__(self, buffer, identity, detail_sample_rate: float = 1.0):
        self.buffer = buffer
        self.emit = buffer.emit
        # Looked up now, after eventlet (if any) has patched threading.
        self.get_ident = threading.get_ident
        self.host = identity.host
        self.svc = identity.svc
        self.detail_sample_rate = detail_sample_rate
        self._sample_cut = int(detail_sample_rate * 10000)
        add_periodic = getattr(buffer, 'add_periodic', None)
        if add_periodic is not None:
            add_periodic(refresh_wall_clock)

    def sampled(self, req) -> bool:
        """Full detail for this request?  Same answer on every host."""
        cut = self._sample_cut
        if cut >= 10000:
            return True
        if cut <= 0 or req is None:
            return cut > 0
        return zlib.crc32(req.encode()) % 10000 < cut

    def begin(self, ev: str, svc=None, host=None, ctx=None, inst=None,
              attrs=None, remote_parent=None) -> list:
        """Start a span; returns its record, which ``end`` completes.

        The record is queued at once, as a list in phase ``B``; ``end``
        fills in duration and status and flips it to ``X`` in place.  The
        writer writes it once as ``X`` if it has ended by then, or as a
        ``B`` now and an ``X`` later if it is still running (see
        ``instrument.buffer``): one queue entry per call, and a start on
        disk for every call that outlives a flush interval.
        """
        frame = _CURRENT.get()
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
            parent = frame[F_SPAN] if remote_parent is None \
                else remote_parent
        else:
            parent = remote_parent
            if req is None:
                octx = _current_oslo_context()
                if octx is not None:
                    req = getattr(octx, 'request_id', None)
                    greq = getattr(octx, 'global_request_id', None)
        if svc is None:
            svc = self.svc
        if host is None:
            host = self.host
        span = _prefix | (next(_ids) & 0xFFFFFFFF)
        t0 = _perf_ns()
        rec = [PH_B, (t0 + _wall_offset_ns) // 1000, None, host, svc,
               self.get_ident(), ev, span, parent, req, greq, inst, None,
               None, attrs, t0,
               _CURRENT.set((span, req, greq, inst, svc, host, ev))]
        try:
            # EventBuffer.emit, inlined, with the writer started before
            # the append: a span that is queued is never given up.
            buf = self.buffer
            queue = buf.queue
            if len(queue) < buf.max_records:
                if buf.writer is None:
                    buf.start()
                queue.append(rec)
            else:
                buf.drop()
        except BaseException:
            release(rec)  # not queued: the caller runs unrecorded
            raise
        return rec

    def end(self, rec: list, st: str = ST_OK, err=None, attrs=None,
            req=None, inst=None) -> None:
        """Finish the span ``begin`` returned (``req`` and ``inst`` may
        correct what was known at the start)."""
        t1 = _perf_ns()
        token = rec[I_TOKEN]
        rec[I_TOKEN] = None
        try:
            _CURRENT.reset(token)
        except ValueError:
            # Ended in another context than it began (rare; e.g. a
            # generator finished elsewhere): leave that context alone.
            pass
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
        rec[I_PH] = PH_X  # last: the writer may read the record any time

    def instant(self, ev: str, attrs=None, svc=None, host=None,
                req=None, inst=None) -> None:
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
        self.emit((PH_I, _time_ns() // 1000, None, host or self.host,
                   svc or self.svc, threading.get_ident(), ev, None, parent,
                   req, greq, inst, None, None, attrs))

    def span(self, ev: str, **kwargs) -> 'Span':
        """A context manager for a span around arbitrary code."""
        return Span(self, ev, kwargs)


class Span:
    """``with tracer.span('api.request', attrs={...}) as s:`` ...

    ``s.attrs`` may be updated before the block ends, ``s.req`` corrects
    the request id; an exception leaving the block is recorded and
    re-raised.
    """

    __slots__ = ('_tracer', '_ev', '_kwargs', '_state', 'attrs', 'error',
                 'req')

    def __init__(self, tracer: Tracer, ev: str, kwargs: dict) -> None:
        self._tracer = tracer
        self._ev = ev
        self._kwargs = kwargs
        self._state = None
        self.attrs = {}
        self.error = None
        self.req = None

    def __enter__(self) -> 'Span':
        self._state = self._tracer.begin(self._ev, **self._kwargs)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            st, err = ST_ERROR, error_of(exc)
        elif self.error is not None:
            st, err = ST_ERROR, self.error
        else:
            st, err = ST_OK, None
        self._tracer.end(self._state, st, err, self.attrs or None,
                         self.req)
        return False
