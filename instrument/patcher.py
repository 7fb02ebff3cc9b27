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
"""Patch points as data, applied lazily with wrapt post-import hooks.

A ``PatchPoint`` names a target (module + ``Class.method``), the event it
records, the component that owns it, and small functions that pick the
request context, instance uuid(s), host and attributes out of a call.
``Patcher.apply()`` patches targets whose module is already imported and
registers post-import hooks for the others, so nothing is imported that
the process was not importing anyway.  ``remove()`` restores the
originals; both are idempotent.  Each point's status (patched, pending,
missing, failed) is reported in a start-up banner.

Wrappers isolate faults: the wrapped callable is called exactly once,
outside any guarded block, and its result or exception is handed back
as the same object.  An exception raised by instrumentation code (never
one of nova's) is counted and logged once (``instrument.faults``), and
after ``FAULT_LIMIT`` faults the point stops recording.
"""

import dataclasses
import functools
import inspect
import sys
import threading
import time
import typing
import weakref

from oslo_log import log as logging
import wrapt

from instrument import faults as faults_mod
from instrument import record
from instrument import tracer as tracing

LOG = logging.getLogger(__name__)

FAULT_LIMIT = 10

PATCHED = 'patched'
PENDING = 'pending'
MISSING = 'missing'
FAILED = 'failed'
REMOVED = 'removed'

Extractor = typing.Callable[[object, tuple, dict], object] | object

_MISSING = object()


# -- extractors ------------------------------------------------------------

class Arg:
    """Argument ``name`` of the call, by keyword or by position.

    The position (not counting ``self``) is found from the target's
    signature when the point is applied, so callers that pass it either
    way are both understood.  ``then`` post-processes a found value (an
    attribute chain, uuids of objects ...).  The wrapper looks the
    argument up inline; only ``then`` costs a call.
    """

    __slots__ = ('name', 'pos', 'then')

    def __init__(self, name: str, pos: int | None = None, then=None):
        self.name = name
        self.pos = pos
        self.then = then

    def position(self, func) -> int | None:
        """Index of the argument in ``func``'s positional parameters,
        ``self``/``cls`` excluded; -1 when it can only be a keyword."""
        if self.pos is not None:
            return self.pos
        try:
            params = list(inspect.signature(func).parameters.values())
        except (TypeError, ValueError):
            return None
        if params and params[0].name in ('self', 'cls'):
            params = params[1:]
        for n, param in enumerate(params):
            if param.kind in (param.VAR_POSITIONAL, param.KEYWORD_ONLY,
                              param.VAR_KEYWORD):
                break
            if param.name == self.name:
                return n
        return -1


class SelfAttr:
    """An attribute (chain) of the patched object, e.g. ``self.host``."""

    __slots__ = ('attrs',)

    def __init__(self, attrs) -> None:
        self.attrs = tuple(attrs)


def _chain(attrs):
    def follow(value):
        for attr in attrs:
            if value is None:
                return None
            if value.__class__ is dict:
                value = value.get(attr)
            else:
                value = getattr(value, attr, None)
        return value
    return follow


def arg(name: str, pos: int | None = None, *attrs: str) -> Arg:
    """Argument ``name`` (``pos``: its index without ``self``, found from
    the signature when omitted), then following ``attrs`` (attribute or
    dict key)."""
    return Arg(name, pos, _chain(attrs) if attrs else None)


def self_attr(*attrs: str) -> SelfAttr:
    """An attribute (chain) of the patched object, e.g. ``self.host``."""
    return SelfAttr(attrs)


def _uuid_list(attr: str):
    def convert(value):
        if value.__class__ is str:
            return [value]
        if isinstance(value, (list, tuple)):
            out = []
            for item in value:
                if item.__class__ is not str:
                    item = getattr(item, attr, None)
                if item is not None:
                    out.append(item)
            return out or None
        value = getattr(value, attr, None)
        return [value] if value is not None else None
    convert.attr = attr
    return convert


def uuids(name: str, pos: int | None = None, attr: str = 'uuid') -> Arg:
    """Instance uuid(s) from an argument holding an object, a list of
    objects, a uuid string or a list of uuid strings."""
    return Arg(name, pos, _uuid_list(attr))


def _compile(spec, func, offset: int):
    """(kind, name, absolute position, then-or-callable) for the wrapper:
    kind 0 nothing, 1 argument, 2 attribute of self, 3 plain callable
    ``(instance, args, kwargs)``."""
    if spec is None:
        return 0, None, -1, None
    if isinstance(spec, Arg):
        pos = spec.position(func) if func is not None else spec.pos
        absolute = -1 if pos is None or pos < 0 else pos + offset
        return 1, spec.name, absolute, spec.then
    if isinstance(spec, SelfAttr):
        if len(spec.attrs) == 1:
            return 2, spec.attrs[0], -1, None
        first, rest = spec.attrs[0], spec.attrs[1:]
        return 2, first, -1, _chain(rest)
    return 3, None, -1, spec


def _pick(spec, instance, args, kwargs, offset: int):
    """The value a compiled spec names in this call (see ``_compile``).

    The wrapper inlines the same lookups for the context and instances,
    the values every point wants; the others come through here.
    """
    kind, name, pos, fn = spec
    if kind == 1:
        if name in kwargs:
            value = kwargs[name]
        elif -1 < pos < len(args):
            value = args[pos]
        else:
            return None
        return fn(value) if fn is not None and value is not None else value
    if kind == 2:
        value = getattr(instance, name, None)
        return fn(value) if fn is not None and value is not None else value
    if kind:
        return fn(instance, args[offset:], kwargs)
    return None


CONTEXT = arg('context', 0)


SPAN = 'span'
HOOK = 'hook'


@dataclasses.dataclass(frozen=True)
class PatchPoint:
    """One instrumented callable, described as data.

    ``kind`` SPAN (the default) records a span named ``event``:
    ``context``, ``instances``, ``host``, ``service_from`` and
    ``remote_parent`` pick values out of the call (``Arg``/``SelfAttr``
    specs or ``(instance, args, kwargs)`` callables, ``args`` without
    ``self``); ``on_enter``/``on_exit``/``on_error`` return small attrs
    dicts; ``result_instances`` takes the instance uuids from the result.
    ``kind`` HOOK records nothing: ``on_enter`` may return ``(args,
    kwargs)`` to call the target with instead, ``on_exit`` sees the
    result.  ``alternatives`` are other ``(module, target)`` places of
    the same code in other releases.
    """

    module: str
    target: str
    event: str
    service: str | None = None
    context: Extractor | None = CONTEXT
    instances: Extractor | None = None
    host: Extractor | None = None
    on_enter: typing.Callable | None = None
    on_exit: typing.Callable | None = None
    on_error: typing.Callable | None = None
    remote_parent: Extractor | None = None
    service_from: Extractor | None = None
    result_instances: typing.Callable | None = None
    detail: bool = False
    alternatives: tuple = ()
    kind: str = SPAN

    @property
    def name(self) -> str:
        return '%s:%s' % (self.module, self.target)

    def candidates(self) -> list:
        return [(self.module, self.target)] + list(self.alternatives)


class _PointState(faults_mod.Faults):
    """Mutable per-point state: active flag and fault count."""

    __slots__ = ('point', 'used')

    def __init__(self, point: PatchPoint) -> None:
        super().__init__('point %s' % point.name, FAULT_LIMIT)
        self.point = point
        self.used = None

    @property
    def faults(self) -> int:
        return self.count

    fault = faults_mod.Faults.__call__


# -- post-import hook dispatch (hooks cannot be unregistered in wrapt) ----

_PATCHERS = weakref.WeakSet()
_HOOKED = set()
_HOOK_LOCK = threading.Lock()


def _on_import(module) -> None:
    # An exception here would fail nova's import: never let one out.
    for patcher in list(_PATCHERS):
        try:
            patcher._module_imported(module.__name__)
        except Exception:
            LOG.exception('instrument: patching %s failed', module.__name__)


def _hook(module_name: str) -> None:
    with _HOOK_LOCK:
        if module_name in _HOOKED:
            return
        _HOOKED.add(module_name)
    wrapt.register_post_import_hook(_on_import, module_name)


class Patcher:
    """Applies and removes a set of patch points."""

    def __init__(self, points, tracer=None) -> None:
        self.points = list(points)
        self.tracer = tracer
        self._states = {p.name: _PointState(p) for p in self.points}
        self._status = {p.name: PENDING for p in self.points}
        self._installed = {}
        self._applied = False
        self._lock = threading.RLock()
        _PATCHERS.add(self)

    # -- public ------------------------------------------------------------

    @property
    def applied(self) -> bool:
        return self._applied

    def apply(self) -> dict:
        """Patch what is imported, hook the rest; returns the banner."""
        with self._lock:
            if self._applied:
                return self.banner()
            self._applied = True
            modules = []
            for point in self.points:
                for module, _target in point.candidates():
                    if module not in modules:
                        modules.append(module)
            for module in modules:
                if module in sys.modules:
                    self._module_imported(module, announce=False)
                else:
                    _hook(module)
        return self.banner()

    def add_points(self, points) -> None:
        """Add points at run time (e.g. for a class only known once an
        object of it exists); applied at once if the patcher is."""
        with self._lock:
            new = [p for p in points if p.name not in self._states]
            for point in new:
                self.points.append(point)
                self._states[point.name] = _PointState(point)
                self._status[point.name] = PENDING
            if not self._applied:
                return
            for point in new:
                for module, _target in point.candidates():
                    if module in sys.modules:
                        self._module_imported(module, announce=False)
                    else:
                        _hook(module)

    def remove(self) -> None:
        """Restore every original; safe to call twice."""
        with self._lock:
            if not self._applied:
                return
            self._applied = False
            for name, (owner, attr, original, own) in list(
                    self._installed.items()):
                try:
                    if own:
                        setattr(owner, attr, original)
                    else:
                        delattr(owner, attr)
                except (AttributeError, TypeError) as exc:
                    LOG.warning('instrument: could not restore %s: %s',
                                name, exc)
                self._status[name] = REMOVED
            self._installed.clear()
            for name, status in self._status.items():
                if status == PENDING:
                    self._status[name] = REMOVED

    def banner(self) -> dict:
        """Point names by status: patched, pending, missing, failed."""
        out = {PATCHED: [], PENDING: [], MISSING: [], FAILED: []}
        for name, status in self._status.items():
            key = status.split(':', 1)[0]
            if key in out:
                out[key].append(name if key != FAILED else
                                '%s (%s)' % (name, status[7:].strip()))
        return out

    def log_banner(self) -> None:
        banner = self.banner()
        LOG.info('instrument: %d points patched, %d pending (module not '
                 'imported yet), %d missing, %d failed',
                 len(banner[PATCHED]), len(banner[PENDING]),
                 len(banner[MISSING]), len(banner[FAILED]))
        for key in (MISSING, FAILED):
            for name in banner[key]:
                LOG.warning('instrument: point %s %s (other nova '
                            'release?); not recorded', name, key)
        for name in banner[PENDING]:
            LOG.debug('instrument: point %s pending', name)

    def status(self, name: str) -> str:
        return self._status[name]

    def state(self, name: str) -> _PointState:
        return self._states[name]

    # -- patching ----------------------------------------------------------

    def _module_imported(self, module_name: str, announce=True) -> None:
        changed = []
        with self._lock:
            if not self._applied:
                return
            for point in self.points:
                if point.name in self._installed:
                    continue
                for module, target in point.candidates():
                    if module != module_name:
                        continue
                    result = self._patch(point, module, target)
                    if result is not None:
                        changed.append((point.name, result))
                        if result == PATCHED:
                            break
        if announce and changed:
            self._announce(changed)

    def _patch(self, point: PatchPoint, module_name: str, target: str):
        module = sys.modules.get(module_name)
        if module is None:
            return None
        try:
            owner, attr, original = wrapt.resolve_path(module, target)
        except AttributeError:  # wrapt's PathResolutionError too
            return self._set_missing(point)
        except Exception as exc:
            self._status[point.name] = 'failed: %s' % exc
            return FAILED
        try:
            own = attr in vars(owner)
            stored = vars(owner)[attr] if own else original
            setattr(owner, attr, self._replacement(point, owner, original))
        except Exception as exc:
            self._status[point.name] = 'failed: %s' % exc
            return FAILED
        self._installed[point.name] = (owner, attr, stored, own)
        self._states[point.name].used = '%s:%s' % (module_name, target)
        self._status[point.name] = PATCHED
        return PATCHED

    def _set_missing(self, point: PatchPoint):
        # Missing only once every candidate's module is imported and none
        # has the attribute; otherwise another candidate may still come.
        for module, _target in point.candidates():
            if module not in sys.modules:
                return None
        self._status[point.name] = MISSING
        return MISSING

    def _announce(self, changed: list) -> None:
        for name, result in changed:
            if result == PATCHED:
                LOG.debug('instrument: patched %s', name)
            else:
                LOG.warning('instrument: point %s %s (other nova release?)',
                            name, result)
        tracer = self.tracer
        if tracer is not None:
            attrs = {}
            for name, result in changed:
                attrs.setdefault(result, []).append(name)
            tracer.emit(record.meta('process.points', tracer.host,
                                    tracer.svc, time.time_ns() // 1000,
                                    attrs))

    # -- the wrapper ---------------------------------------------------------

    def _replacement(self, point: PatchPoint, owner, original):
        """What replaces ``original``: a plain closure where possible.

        wrapt's ``FunctionWrapper`` costs about 1 us per call on a 2-core
        VM (8-10 times a plain closure; see bench/), half of the per-call
        budget, so plain functions, static and class methods get a
        closure with ``functools.update_wrapper`` (``__wrapped__`` keeps
        introspection working).  Other callables keep wrapt's proxy,
        which handles any descriptor correctly.
        """
        in_class = inspect.isclass(owner)
        if isinstance(original, staticmethod):
            return staticmethod(self._closure(point, original.__func__,
                                              False))
        if isinstance(original, classmethod):
            return classmethod(self._closure(point, original.__func__,
                                             True))
        if inspect.isfunction(original):
            return self._closure(point, original, in_class)
        patched = self._closure(point, None, False)
        return wrapt.FunctionWrapper(
            original, lambda wrapped, instance, args, kwargs: patched(
                *args, _instrument_call=wrapped, _instrument_self=instance,
                **kwargs))

    def _closure(self, point: PatchPoint, original, is_method: bool):
        if point.kind == HOOK:
            return self._hook_closure(point, original, is_method)
        state = self._states[point.name]
        patcher = self
        ev = point.event
        svc = point.service
        # Argument lookups are resolved against the signature now, and
        # done inline below: a call per lookup would double the cost.
        offset = 1 if is_method else 0
        c_kind, c_name, c_pos, c_fn = _compile(point.context, original,
                                               offset)
        i_kind, i_name, i_pos, i_fn = _compile(point.instances, original,
                                               offset)
        h_spec = _compile(point.host, original, offset)
        h_kind, h_name, _h_pos, h_fn = h_spec
        r_spec = _compile(point.remote_parent, original, offset)
        r_kind = r_spec[0]
        s_spec = _compile(point.service_from, original, offset)
        s_kind = s_spec[0]
        result_instances = point.result_instances
        on_enter = point.on_enter
        on_exit = point.on_exit
        on_error = point.on_error
        detail = point.detail
        # An instances converter that reads one attribute (uuids()): its
        # common case, an object with that attribute, is done inline.
        i_attr = getattr(i_fn, 'attr', None)
        ST_OK = tracing.ST_OK
        ST_ERROR = tracing.ST_ERROR
        PH_B = tracing.PH_B
        PH_X = tracing.PH_X
        error_of = tracing.error_of
        get_frame = tracing.current_frame
        set_frame = tracing.set_frame
        reset_frame = tracing.reset_frame_strict
        perf_ns = time.perf_counter_ns

        # The body below is Tracer.begin and Tracer.end, inlined and
        # specialised for this point: two calls and their argument
        # passing would be a third of the cost.  Keep the three alike;
        # tests check that a point and a Tracer.span give the same record.
        def patched(*args, **kwargs):
            call = original
            if call is None:  # behind wrapt's proxy (see _replacement)
                call = kwargs.pop('_instrument_call')
                instance = kwargs.pop('_instrument_self')
            elif is_method:
                instance = args[0]
            else:
                instance = None
            tracer = patcher.tracer
            if tracer is None or not state.active:
                return call(*args, **kwargs)
            # Starting the span is guarded; nova's call never is: it
            # runs exactly once, below, whatever happened here, and its
            # result or exception goes back as it came.
            rec = None
            try:
                ctx = None
                if c_kind == 1:
                    if c_name in kwargs:
                        ctx = kwargs[c_name]
                    elif -1 < c_pos < len(args):
                        ctx = args[c_pos]
                elif c_kind:
                    ctx = c_fn(instance, args[offset:], kwargs)
                frame = get_frame()
                if ctx is None:
                    req = greq = None
                elif ctx.__class__ is dict:  # a serialised context (RPC)
                    req = ctx.get('request_id')
                    greq = ctx.get('global_request_id')
                else:
                    req = getattr(ctx, 'request_id', None)
                    greq = getattr(ctx, 'global_request_id', None)
                if req is None:
                    if frame is not None:
                        req = frame[1]
                        greq = frame[2]
                    else:
                        req, greq = tracing.current_request()
                if not detail or tracer.sampled(req):
                    inst = None
                    if i_kind == 1:
                        if i_name in kwargs:
                            inst = kwargs[i_name]
                        elif -1 < i_pos < len(args):
                            inst = args[i_pos]
                        if inst is not None and i_fn is not None:
                            uuid = getattr(inst, i_attr, None) if i_attr \
                                else None
                            inst = [uuid] if uuid.__class__ is str \
                                else i_fn(inst)
                    elif i_kind:
                        inst = i_fn(instance, args[offset:], kwargs)
                    if h_kind == 2:  # self.host, the usual case: inline
                        host = getattr(instance, h_name, None)
                        if h_fn is not None and host is not None:
                            host = h_fn(host)
                    elif h_kind:
                        host = _pick(h_spec, instance, args, kwargs, offset)
                    else:
                        host = None
                    remote = _pick(r_spec, instance, args, kwargs,
                                   offset) if r_kind else None
                    span_svc = (_pick(s_spec, instance, args, kwargs,
                                      offset) or svc) if s_kind else svc
                    if frame is not None:
                        if inst is None:
                            inst = frame[3]
                        if span_svc is None:
                            span_svc = frame[4]
                        if host is None:
                            host = frame[5]
                        parent = frame[0] if remote is None else remote
                    else:
                        parent = remote
                    if span_svc is None:
                        span_svc = tracer.svc
                    if host is None:
                        host = tracer.host
                    # Module attributes, read per call: a fork renews the
                    # span id prefix, the writer the wall clock anchor.
                    span = tracing._prefix | (next(tracing._ids) &
                                              0xFFFFFFFF)
                    t0 = perf_ns()
                    # The frame is set last (a fault before leaves none).
                    rec = [PH_B, (t0 + tracing._wall_offset_ns) // 1000,
                           None, host, span_svc, tracer.get_ident(), ev,
                           span, parent, req, greq, inst, None, None,
                           on_enter(instance, args[offset:], kwargs)
                           if on_enter else None, t0,
                           set_frame((span, req, greq, inst, span_svc,
                                      host, ev))]
                    # EventBuffer.emit, with the writer started before
                    # the append: once queued, the span is never given up.
                    buf = tracer.buffer
                    queue = buf.queue
                    if len(queue) < buf.max_records:
                        if buf.writer is None:
                            buf.start()
                        queue.append(rec)
                    else:
                        buf.drop()
            except Exception as exc:
                if rec is not None:  # not queued: give it up
                    tracing.release(rec)
                    rec = None
                state.fault(exc)
            if rec is None:  # a detail point's unsampled request, a fault
                return call(*args, **kwargs)
            try:
                result = call(*args, **kwargs)
            except BaseException as exc:
                t1 = perf_ns()
                try:
                    reset_frame(rec[16])
                    rec[16] = None
                    attrs = None
                    if on_error is not None:
                        attrs = on_error(instance, args[offset:], kwargs,
                                         exc)
                    if attrs:
                        rec[14] = dict(rec[14], **attrs) if rec[14] \
                            else attrs
                    rec[2] = (t1 - t0) // 1000
                    rec[12] = ST_ERROR
                    rec[13] = error_of(exc)
                    rec[0] = PH_X  # last: the writer may read it any time
                except Exception as fault:
                    tracing.abandon(rec, ST_ERROR, t1)
                    state.fault(fault)
                raise
            t1 = perf_ns()
            try:
                reset_frame(rec[16])
                rec[16] = None
                if on_exit is not None:
                    attrs = on_exit(instance, args[offset:], kwargs, result)
                    if attrs:
                        rec[14] = dict(rec[14], **attrs) if rec[14] \
                            else attrs
                if result_instances is not None:
                    found = result_instances(result)
                    if found is not None:
                        rec[11] = found
                rec[2] = (t1 - t0) // 1000
                rec[12] = ST_OK
                rec[0] = PH_X  # last: the writer may read it any time
            except Exception as fault:
                tracing.abandon(rec, ST_OK, t1)
                state.fault(fault)
            return result

        return self._finish(patched, point, original)

    def _hook_closure(self, point: PatchPoint, original, is_method: bool):
        state = self._states[point.name]
        patcher = self
        before = point.on_enter
        after = point.on_exit
        offset = 1 if is_method else 0

        def patched(*args, **kwargs):
            call = original
            if call is None:  # behind wrapt's proxy (see _replacement)
                call = kwargs.pop('_instrument_call')
                instance = kwargs.pop('_instrument_self')
            else:
                instance = args[0] if is_method else None
            if patcher.tracer is None or not state.active:
                return call(*args, **kwargs)
            if before is not None:
                try:
                    changed = before(instance, args[offset:], kwargs)
                    if changed is not None:
                        # Both or neither: a half-applied change would
                        # call nova with arguments nobody meant.
                        new_args, new_kwargs = changed
                        new_args = args[:offset] + tuple(new_args)
                        if not isinstance(new_kwargs, dict):
                            raise TypeError('on_enter of a hook returned '
                                            'keywords of type %s' %
                                            type(new_kwargs).__name__)
                        args, kwargs = new_args, new_kwargs
                except Exception as fault:
                    state.fault(fault)
            # Outside any guarded block: called once, passed through.
            result = call(*args, **kwargs)
            if after is not None:
                try:
                    after(instance, args[offset:], kwargs, result)
                except Exception as fault:
                    state.fault(fault)
            return result

        return self._finish(patched, point, original)

    @staticmethod
    def _finish(patched, point: PatchPoint, original):
        if original is not None:
            functools.update_wrapper(patched, original)
        patched.__instrument_point__ = point.name
        return patched
