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
"""oslo.concurrency locks: one ``lock.wait`` per acquisition.

``oslo_concurrency.lockutils.lock`` is the one place every named lock
goes through: ``synchronized`` (and nova's ``utils.synchronized``, a
partial of it) looks it up at each call, and ``lock_with_prefix``
partials made after it is patched hold the patched one.  It makes the
internal lock (a semaphore per name, or a fasteners reader/writer lock
for ``fair=True``), takes it, then the file lock when ``external``.

The replacement calls the original ``lock`` once and times the context
manager it returns: entering it is the wait (internal and external lock
together), from there to the end of its exit the hold.  At release one
``lock.wait`` record (``instrument.waits``) is written: the wait as the
record's duration, ``attrs``: ``lock`` (the name), ``held_us``,
``call`` (the enclosing span's event), ``fair`` / ``external`` when
set.  An acquisition that fails (``blocking=False``) is written with
status ``error``.  Every acquisition is recorded, contended or not:
the cost is that of one span (bench/bench_locks.py).

The module is patched by a post-import hook: nothing is imported
before the process imports it.  Installed when ``[instrument]
wait_timing`` is on.
"""

import functools

import wrapt

from instrument import schema
from instrument.targets import base
from instrument import waits

MODULE = 'oslo_concurrency.lockutils'
EV = schema.EV_LOCK_WAIT
A_LOCK = schema.ATTR_LOCK
A_HELD = schema.ATTR_HELD_US
A_FAIR = schema.ATTR_FAIR
A_EXTERNAL = schema.ATTR_EXTERNAL
# lockutils.lock(name, lock_file_prefix, external, ...): the position
# of ``external`` after the name (synchronized passes it by position).
EXTERNAL_POS = 1

clock = waits.clock


def lock_name(name) -> str:
    """A lock's name as recorded: nova 29's scheduler locks a host
    state by the tuple ``(host, nodename)``, recorded as
    ``host,nodename``."""
    if type(name) is str:
        return name
    if isinstance(name, (tuple, list)):
        return ','.join(str(part) for part in name)
    return str(name)


def timed_lock(original, record, faults):
    """The replacement of ``lockutils.lock``: ``original`` called once
    per call, its context manager wrapped in ``_Timed``."""

    class _Timed:
        """Times one acquisition of the lock ``cm`` takes."""

        __slots__ = ('cm', 'name', 'args', 'kwargs', 't0', 't1')

        def __init__(self, cm, name, args, kwargs) -> None:
            self.cm = cm
            self.name = name
            self.args = args
            self.kwargs = kwargs

        def __call__(self, func):
            # used as a decorator (contextlib's ContextDecorator): a
            # fresh lock context per call of ``func``
            name, args, kwargs = self.name, self.args, self.kwargs

            @functools.wraps(func)
            def locked(*a, **kw):
                with lock(name, *args, **kwargs):
                    return func(*a, **kw)
            return locked

        def __enter__(self):
            self.t0 = clock()
            try:
                value = self.cm.__enter__()
            except BaseException as exc:
                t1 = clock()
                self._record(t1, t1, waits.error_of(exc))
                raise
            self.t1 = clock()
            return value

        def __exit__(self, exc_type, exc, tb):
            try:
                return self.cm.__exit__(exc_type, exc, tb)
            finally:
                self._record(self.t1, clock(), None)

        def _record(self, t1: int, t2: int, err) -> None:
            try:
                attrs = {A_LOCK: lock_name(self.name),
                         A_HELD: (t2 - t1) // 1000}
                kwargs = self.kwargs
                if kwargs:
                    if kwargs.get('fair'):
                        attrs[A_FAIR] = True
                    if kwargs.get('external'):
                        attrs[A_EXTERNAL] = True
                args = self.args
                if len(args) > EXTERNAL_POS and args[EXTERNAL_POS]:
                    attrs[A_EXTERNAL] = True
                record(EV, self.t0, t1, attrs, err)
            except Exception as fault:  # noqa: BLE001 - counted
                faults(fault)

    @functools.wraps(original)
    def lock(name, *args, **kwargs):
        cm = original(name, *args, **kwargs)
        if not faults.active:
            return cm
        return _Timed(cm, name, args, kwargs)

    lock.__wrapped__ = original  # type: ignore[attr-defined]
    lock._instrument_timed = True  # type: ignore[attr-defined]
    return lock


class OsloConcurrencyTarget(base.Target):
    """``lock.wait`` records of oslo.concurrency's named locks."""

    name = 'oslo_concurrency'
    requires = {'oslo.concurrency': ''}
    surveyed = {'oslo.concurrency': ('7.6.1',)}

    def __init__(self) -> None:
        super().__init__()
        self.waits: waits.WaitRecorder | None = None
        self._module = None
        self._original = None
        self._active = False

    def check(self, conf) -> str | None:
        if not conf.instrument.wait_timing:
            return '[instrument] wait_timing is off'
        return super().check(conf)

    def install(self, ctx: base.Context) -> None:
        self.waits = waits.WaitRecorder(ctx.recorder, 'the lock timing')
        self._active = True
        # Called at once if the module is imported already.  A hook
        # cannot be unregistered: after remove() it does nothing.
        wrapt.register_post_import_hook(self._patch, MODULE)

    def _patch(self, module) -> None:
        if not self._active or self._module is not None:
            return
        original = getattr(module, 'lock', None)
        if original is None or getattr(original, '_instrument_timed', False):
            return
        assert self.waits is not None  # noqa: S101 - set by install
        module.lock = timed_lock(original, self.waits.record,
                                 self.waits.faults)
        self._module = module
        self._original = original

    @property
    def patched(self) -> bool:
        return self._module is not None

    def remove(self) -> None:
        self._active = False
        module, self._module = self._module, None
        if module is not None:
            if getattr(module.lock, '__wrapped__', None) is self._original:
                module.lock = self._original
        self._original = None

    def banner(self) -> dict | None:
        name = '%s:lock' % MODULE
        if self._module is not None:
            return {'patched': [name]}
        if self._active:
            return {'pending': [name]}
        return None
