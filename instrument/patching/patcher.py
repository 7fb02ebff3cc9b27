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
"""The one patch engine: points applied on post-import hooks, removed.

``Patcher.apply()`` patches the points (``instrument.patching.points``) whose
module is already imported and registers post-import hooks for the
others, so nothing is imported that the process was not importing
anyway; ``add_points`` adds more at run time.  ``remove()`` restores
every original (a callable put back as the very object it was, a
listener detached); both are idempotent.  Each point's status
(patched, pending, missing, failed) is kept for the start-up banner
and the start record, and late changes are announced in the span log
(``process.points``).

The kinds of point (``instrument.patching.points``): SPAN and HOOK, whose
replacement is built by ``instrument.runtime.wrappers``, bound to the
patcher's ``Recorder``; REPLACE, whose replacement the point's
factory builds; LISTEN, an SQLAlchemy event listener.  A
``per_object`` point is patched on the objects handed to
``patch_object`` (a dialect, a compute manager), each undone by
``remove()`` too.  Each point has a ``_PointState`` (its fault
counter, and ``active``, which switches a replacement to
pass-through).

Its post-import hooks go through the process's one registry
(``instrument.patching.hooks``): one callback that hands an imported
module to every patcher.
"""

import sys
import threading
import typing
import weakref

from oslo_log import log as logging
import wrapt

from instrument import schema
from instrument.patching import hooks
from instrument.patching import points as points_mod
from instrument.runtime import faults as faults_mod
from instrument.runtime import wrappers

LOG = logging.getLogger(__name__)

FAULT_LIMIT = 10

PATCHED = 'patched'
PENDING = 'pending'
MISSING = 'missing'
FAILED = 'failed'
REMOVED = 'removed'

# The description language, where points are written against the
# patcher (instrument.patching.points owns it).
Arg = points_mod.Arg
SelfAttr = points_mod.SelfAttr
PatchPoint = points_mod.PatchPoint
Reads = points_mod.Reads
arg = points_mod.arg
reads = points_mod.reads
replace = points_mod.replace
listen = points_mod.listen
self_attr = points_mod.self_attr
uuids = points_mod.uuids
CONTEXT = points_mod.CONTEXT
SPAN = points_mod.SPAN
HOOK = points_mod.HOOK
REPLACE = points_mod.REPLACE
LISTEN = points_mod.LISTEN


class _PointState(faults_mod.Faults):
    """Mutable per-point state: fault count, and ``active``, which the
    wrapper reads on every call: True while the point is applied and
    not disabled by its faults."""

    __slots__ = ('point', 'used', 'applied')

    def __init__(self, point: PatchPoint) -> None:
        super().__init__('point %s' % point.name, FAULT_LIMIT)
        self.point = point
        self.used: typing.Optional[str] = None
        self.applied = False
        self.active = False

    @property
    def faults(self) -> int:
        return self.count

    fault = faults_mod.Faults.__call__

    def switch(self, applied: bool) -> None:
        """Applied or removed: a wrapper that outlives its removal (a
        reference kept somewhere) passes calls through; a point that
        its faults disabled stays disabled."""
        self.applied = applied
        self.active = applied and (
            self.limit is None or self.count < self.limit
        )

    def reset(self) -> None:
        """Count afresh (``faults.reset``, at teardown)."""
        self.count = 0
        self.active = self.applied


# -- post-import hook dispatch (instrument.patching.hooks) ----------------

_PATCHERS = weakref.WeakSet()


def _on_import(module) -> None:
    # An exception here would fail nova's import: never let one out.
    for patcher in list(_PATCHERS):
        try:
            patcher._module_imported(module.__name__)
        except Exception:
            LOG.exception('instrument: patching %s failed', module.__name__)


def _hook(module_name: str) -> None:
    hooks.when_imported(module_name, _on_import)


class Patcher:
    """Applies and removes a set of patch points, recording through
    ``recorder`` (an ``instrument.runtime.recorder.Recorder``).  ``release``
    names what the points were surveyed on (``nova``) in the warnings
    about points missing in the installed release."""

    def __init__(self, points, recorder, release: str | None = None) -> None:
        self.points = list(points)
        self.recorder = recorder
        self.release = release
        self._states = {p.name: _PointState(p) for p in self.points}
        self._status = {p.name: PENDING for p in self.points}
        # name -> (owner, attr, stored original, own, replacement) of a
        # replaced callable, or (LISTEN, target, event, fn) of a listener
        self._installed = {}
        # name -> [(weak or strong ref to the object, attr or LISTEN,
        #           original or event, own or fn, replacement)]
        self._objects = {}
        self._applied = False
        # Set by the runtime before it reads the banner for the start
        # record: points added from then on are announced
        # (process.points), the others are in the start record.
        self.headed = False
        self._lock = threading.RLock()
        _PATCHERS.add(self)

    # -- public ---------------------------------------------------------------

    @property
    def applied(self) -> bool:
        return self._applied

    def apply(self) -> dict:
        """Patch what is imported, hook the rest; returns the banner."""
        with self._lock:
            if self._applied:
                return self.banner()
            self._applied = True
            for state in self._states.values():
                state.switch(True)
            modules = []
            for point in self.points:
                if point.per_object:
                    continue
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
                self._states[point.name] = state = _PointState(point)
                self._status[point.name] = PENDING
                if self._applied:
                    state.switch(True)
            if not self._applied:
                return
            for point in new:
                if point.per_object:
                    continue
                for module, _target in point.candidates():
                    if module in sys.modules:
                        # after the start record: a change to announce
                        self._module_imported(module, announce=self.headed)
                    else:
                        _hook(module)

    def remove(self) -> None:
        """Restore every original; safe to call twice."""
        with self._lock:
            if not self._applied:
                return
            self._applied = False
            for state in self._states.values():
                state.switch(False)
            # The last patched first: a place patched twice (by two
            # points) gets its original back.
            for name in reversed(list(self._installed)):
                self._undo(name)
            for name in list(self._objects):
                self._undo(name)
            for name, status in self._status.items():
                if status == PENDING:
                    self._status[name] = REMOVED

    def discard(self, names) -> None:
        """Undo points ``names`` and forget them (a component removed
        on its own, its patcher staying applied for the others)."""
        names = set(names)
        with self._lock:
            for name in names:
                self._undo(name)
                self._states.pop(name, None)
                self._status.pop(name, None)
            self.points = [p for p in self.points if p.name not in names]

    def _undo(self, name: str) -> None:
        """Restore what point ``name`` patched (never raises)."""
        installed = self._installed.pop(name, None)
        objects = self._objects.pop(name, ())
        if installed is None and not objects:
            return
        if installed is not None:
            try:
                if installed[0] is LISTEN:
                    _unlisten(*installed[1:])
                else:
                    _restore_object(*installed)
            except Exception as exc:
                LOG.warning('instrument: could not restore %s: %s', name, exc)
        for ref, attr, original, own, new in reversed(objects):
            obj = ref()
            if obj is None:
                continue
            try:
                _restore_object(obj, attr, original, own, new)
            except Exception as exc:
                LOG.warning('instrument: could not restore %s: %s', name, exc)
        self._status[name] = REMOVED

    def banner(self) -> dict:
        """Point names by status: patched, pending, missing, failed."""
        out = {PATCHED: [], PENDING: [], MISSING: [], FAILED: []}
        for name, status in self._status.items():
            key = status.split(':', 1)[0]
            if key in out:
                out[key].append(
                    name
                    if key != FAILED
                    else '%s (%s)' % (name, status[7:].strip())
                )
        return out

    def log_banner(self, totals: bool = True) -> None:
        """Log the banner: the counts (unless ``totals`` is False: the
        runtime logs one line for all its patchers), then each point
        that is missing or failed."""
        banner = self.banner()
        if totals:
            log_totals(banner)
        for key in (MISSING, FAILED):
            for name in banner[key]:
                LOG.warning(
                    'instrument: point %s %s (%s); not recorded',
                    name,
                    key,
                    self._other_release(),
                )
        for name in banner[PENDING]:
            LOG.debug('instrument: point %s pending', name)

    def _other_release(self) -> str:
        if self.release:
            return 'other %s release?' % self.release
        return 'other release?'

    def status(self, name: str) -> str:
        return self._status[name]

    def original(self, name: str):
        """What point ``name`` replaced (a callable, as it was in its
        owner's ``__dict__``), or None when it is not patched."""
        installed = self._installed.get(name)
        if installed is None or installed[0] is LISTEN:
            return None
        return installed[2]

    def patch_object(self, name: str, obj, *args) -> bool:
        """Apply ``per_object`` point ``name`` to ``obj`` (a REPLACE:
        its attribute, an instance attribute shadowing the class's,
        made by ``factory(original, state, obj, *args)``; a LISTEN: an
        event listener on it); ``remove()`` undoes it.
        False when the patcher is not applied, or the point failed
        (counted as the point's fault, never raised)."""
        with self._lock:
            if not self._applied:
                return False
            state = self._states[name]
            point = state.point
            try:
                if point.kind == LISTEN:
                    ev, fn, kwargs = _listen_spec(point)
                    _listen(obj, ev, fn, kwargs)
                    entry = (_ref(obj), LISTEN, ev, fn, None)
                else:
                    attr = point.target.rsplit('.', 1)[-1]
                    own = attr in vars(obj)
                    original = getattr(obj, attr)
                    new = _factory(point)(original, state, obj, *args)
                    setattr(obj, attr, new)
                    entry = (_ref(obj), attr, original, own, new)
            except Exception as exc:
                state.fault(exc)
                return False
            self._objects.setdefault(name, []).append(entry)
            if self._status[name] != PATCHED:
                self._status[name] = PATCHED
                state.used = '%s:%s' % (point.module, point.target)
            return True

    def state(self, name: str) -> _PointState:
        return self._states[name]

    # -- patching -------------------------------------------------------------

    def _module_imported(self, module_name: str, announce=True) -> None:
        changed = []
        with self._lock:
            if not self._applied:
                return
            for point in self.points:
                if point.name in self._installed or point.per_object:
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
        state = self._states[point.name]
        try:
            if point.kind == LISTEN:
                ev, fn, kwargs = _listen_spec(point)
                _listen(original, ev, fn, kwargs)
                self._installed[point.name] = (LISTEN, original, ev, fn)
            else:
                own = attr in vars(owner)
                stored = vars(owner)[attr] if own else original
                if point.kind == REPLACE:
                    new = _factory(point)(stored, state, owner)
                else:
                    new = wrappers.replacement(
                        point, state, self.recorder, owner, original
                    )
                setattr(owner, attr, new)
                self._installed[point.name] = (owner, attr, stored, own, new)
        except Exception as exc:
            self._status[point.name] = 'failed: %s' % exc
            return FAILED
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
                LOG.warning(
                    'instrument: point %s %s (%s)',
                    name,
                    result,
                    self._other_release(),
                )
        attrs = {}
        for name, result in changed:
            attrs.setdefault(result, []).append(name)
        self.recorder.meta(schema.EV_PROCESS_POINTS, attrs)


def _listen_spec(point: PatchPoint) -> tuple:
    if point.listen is None:
        raise TypeError('a LISTEN point without its listener')
    return point.listen


def _factory(point: PatchPoint) -> typing.Callable:
    if point.replace is None:
        raise TypeError('a REPLACE point without its factory')
    return point.replace


def _listen(target, ev: str, fn, kwargs: dict) -> None:
    # sqlalchemy is imported: the module the point names was.
    from sqlalchemy import event

    event.listen(target, ev, fn, **kwargs)


def _unlisten(target, ev: str, fn) -> None:
    from sqlalchemy import event

    if event.contains(target, ev, fn):
        event.remove(target, ev, fn)


def _ref(obj):
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _restore_object(obj, attr, original, own, new) -> None:
    if attr is LISTEN:
        _unlisten(obj, original, own)
        return
    if vars(obj).get(attr) is not new:
        # Replaced since by someone else: theirs stays (and puts ours
        # back when it goes: ours passes calls through by then).
        return
    if own:
        setattr(obj, attr, original)
    else:
        delattr(obj, attr)


def log_totals(banner: dict) -> None:
    """The banner's one line: points patched, pending, missing, failed."""
    LOG.info(
        'instrument: %d points patched, %d pending (module not '
        'imported yet), %d missing, %d failed',
        len(banner[PATCHED]),
        len(banner[PENDING]),
        len(banner[MISSING]),
        len(banner[FAILED]),
    )


def merge_banners(banners) -> dict:
    """One banner of several patchers' (the process's)."""
    out = {PATCHED: [], PENDING: [], MISSING: [], FAILED: []}
    for banner in banners:
        for key, names in banner.items():
            out.setdefault(key, []).extend(names)
    return out
