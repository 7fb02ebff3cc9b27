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

Wrappers isolate faults: an exception raised by instrumentation code is
counted, logged once, and after ``FAULT_LIMIT`` faults the point stops
recording; the wrapped call's result and exceptions are never changed.
"""

import dataclasses
import sys
import threading
import time
import typing
import weakref

from oslo_log import log as logging
import wrapt

from instrument import record
from instrument import tracer as tracing

LOG = logging.getLogger(__name__)

FAULT_LIMIT = 10

PATCHED = 'patched'
PENDING = 'pending'
MISSING = 'missing'
FAILED = 'failed'
REMOVED = 'removed'

Extractor = typing.Callable[[object, tuple, dict], object]

_MISSING = object()


# -- extractors ------------------------------------------------------------

def _lookup(instance, args, kwargs, name, pos):
    if kwargs and name in kwargs:
        return kwargs[name]
    if pos is not None and pos < len(args):
        return args[pos]
    return None


def arg(name: str, pos: int | None = None, *attrs: str) -> Extractor:
    """Value of argument ``name`` (or positional ``pos``, not counting
    ``self``), then following ``attrs`` (attribute or dict key)."""
    def get(instance, args, kwargs):
        value = _lookup(instance, args, kwargs, name, pos)
        for attr in attrs:
            if value is None:
                return None
            if isinstance(value, dict):
                value = value.get(attr)
            else:
                value = getattr(value, attr, None)
        return value
    return get


def self_attr(*attrs: str) -> Extractor:
    """An attribute (chain) of the patched object, e.g. ``self.host``."""
    def get(instance, args, kwargs):
        value = instance
        for attr in attrs:
            value = getattr(value, attr, None)
            if value is None:
                return None
        return value
    return get


def uuids(name: str, pos: int | None = None, attr: str = 'uuid'
          ) -> Extractor:
    """Instance uuid(s) from an argument holding an object, a list of
    objects, a uuid string or a list of uuid strings."""
    def get(instance, args, kwargs):
        value = _lookup(instance, args, kwargs, name, pos)
        if value is None:
            return None
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)):
            out = []
            for item in value:
                if isinstance(item, str):
                    out.append(item)
                else:
                    item = getattr(item, attr, None)
                    if item is not None:
                        out.append(item)
            return out or None
        value = getattr(value, attr, None)
        return [value] if value is not None else None
    return get


CONTEXT = arg('context', 0)


@dataclasses.dataclass(frozen=True)
class PatchPoint:
    """One instrumented callable, described as data."""

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
    detail: bool = False
    alternatives: tuple = ()

    @property
    def name(self) -> str:
        return '%s:%s' % (self.module, self.target)

    def candidates(self) -> list:
        return [(self.module, self.target)] + list(self.alternatives)


class _PointState:
    """Mutable per-point state: active flag and fault count."""

    __slots__ = ('point', 'active', 'faults', 'used')

    def __init__(self, point: PatchPoint) -> None:
        self.point = point
        self.active = True
        self.faults = 0
        self.used = None

    def fault(self, exc: BaseException) -> None:
        self.faults += 1
        if self.faults == 1:
            LOG.warning('instrument: fault in point %s (%s: %s); the nova '
                        'call is unaffected', self.point.name,
                        exc.__class__.__name__, exc,
                        exc_info=(type(exc), exc, exc.__traceback__))
        if self.faults >= FAULT_LIMIT and self.active:
            self.active = False
            LOG.error('instrument: point %s disabled after %d faults',
                      self.point.name, self.faults)


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
            wrapper = wrapt.FunctionWrapper(
                original, self._wrapper_for(point))
            setattr(owner, attr, wrapper)
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

    def _wrapper_for(self, point: PatchPoint):
        state = self._states[point.name]
        patcher = self
        ev = point.event
        svc = point.service
        ctx_of = point.context
        inst_of = point.instances
        host_of = point.host
        on_enter = point.on_enter
        on_exit = point.on_exit
        on_error = point.on_error
        remote_of = point.remote_parent
        detail = point.detail
        ST_OK = tracing.ST_OK
        ST_ERROR = tracing.ST_ERROR
        error_of = tracing.error_of
        current_frame = tracing.current_frame

        def wrapper(wrapped, instance, args, kwargs):
            tracer = patcher.tracer
            if tracer is None or not state.active:
                return wrapped(*args, **kwargs)
            try:
                ctx = ctx_of(instance, args, kwargs) if ctx_of else None
                if detail:
                    req = getattr(ctx, 'request_id', None)
                    if req is None:
                        frame = current_frame()
                        req = frame[1] if frame is not None else None
                    if not tracer.sampled(req):
                        return wrapped(*args, **kwargs)
                span = tracer.begin(
                    ev, svc,
                    host_of(instance, args, kwargs) if host_of else None,
                    ctx,
                    inst_of(instance, args, kwargs) if inst_of else None,
                    on_enter(instance, args, kwargs) if on_enter else None,
                    remote_of(instance, args, kwargs) if remote_of else None)
            except Exception as exc:
                state.fault(exc)
                return wrapped(*args, **kwargs)
            try:
                result = wrapped(*args, **kwargs)
            except BaseException as exc:
                attrs = None
                if on_error is not None:
                    try:
                        attrs = on_error(instance, args, kwargs, exc)
                    except Exception as fault:
                        state.fault(fault)
                try:
                    tracer.end(span, ST_ERROR, error_of(exc), attrs)
                except Exception as fault:
                    state.fault(fault)
                raise
            attrs = None
            if on_exit is not None:
                try:
                    attrs = on_exit(instance, args, kwargs, result)
                except Exception as fault:
                    state.fault(fault)
            try:
                tracer.end(span, ST_OK, None, attrs)
            except Exception as fault:
                state.fault(fault)
            return result

        return wrapper
