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
``lock.wait`` record (``instrument.runtime.waits``) is written: the wait as the
record's duration, ``attrs``: ``lock`` (the name), ``held_us``,
``call`` (the enclosing span's event), ``fair`` / ``external`` when
set.  An acquisition that fails (``blocking=False``) is written with
status ``error``.  Every acquisition is recorded, contended or not:
the cost is that of one span (bench/bench_locks.py).

``lock`` is a REPLACE point of the target's patcher
(``instrument.patching.patcher``): patched on its post-import hook, nothing is
imported before the process imports it; in the start-up banner.
Installed when ``[instrument] wait_timing`` is on.  ``remove()`` puts
the original back, and switches off the replacement wherever it is
still held (a function decorated with ``lockutils.lock(...)``, a
``lock_with_prefix`` partial, made while it was patched): those calls
then take the lock unrecorded.
"""

import functools

from instrument import schema
from instrument.patching import points as points_mod
from instrument.runtime import waits
from instrument.targets import base

MODULE = 'oslo_concurrency.lockutils'
POINT = '%s:lock' % MODULE
EV = schema.EV_LOCK_WAIT
A_LOCK = schema.ATTR_LOCK
A_HELD = schema.ATTR_HELD_US
A_FAIR = schema.ATTR_FAIR
A_EXTERNAL = schema.ATTR_EXTERNAL
# lockutils.lock(name, lock_file_prefix, external, ..., fair, ...):
# ``external`` and ``fair``, read by keyword or (synchronized passes
# ``external`` so) at their positions in the signature of the lock
# replaced.
EXTERNAL = points_mod.Arg('external')
FAIR = points_mod.Arg('fair')

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


class Switch:
    """Whether a replacement still records (``remove()`` turns it off:
    it may be held where the original cannot be put back).  The
    patcher's point state is one (``active``)."""

    __slots__ = ('active',)

    def __init__(self) -> None:
        self.active = True


def _after_name(pos: int | None) -> int:
    """A position in ``lock``'s signature as an index into the
    arguments after ``name`` (-1: none)."""
    return pos - 1 if pos is not None and pos > 0 else -1


def timed_lock(original, record, faults, switch=None):
    """The replacement of ``lockutils.lock``: ``original`` called once
    per call, its context manager wrapped in ``_Timed`` while
    ``switch`` is on.

    Nothing of the timing reaches nova: the clock reads, the record
    and the decorator's set-up are each guarded (a fault is counted by
    ``faults`` and the acquisition goes on unrecorded); the lock's own
    ``__enter__`` and ``__exit__`` are called exactly once, outside any
    guarded block, and their result, or the exception they or the
    locked body raise, goes back unchanged.
    """

    # where ``external`` and ``fair`` are among the arguments after the
    # name (-1: keyword only, or a signature that cannot be read)
    external_pos = _after_name(EXTERNAL.position(original))
    fair_pos = _after_name(FAIR.position(original))

    class _Timed:
        """Times one acquisition of the lock ``cm`` takes."""

        __slots__ = ('cm', 'name', 'args', 'kwargs', 't0', 't1')
        # None: this acquisition is not recorded
        t0: int | None

        def __init__(self, cm, name, args, kwargs) -> None:
            self.cm = cm
            self.name = name
            self.args = args
            self.kwargs = kwargs

        def __call__(self, func):
            # used as a decorator (contextlib's ContextDecorator): a
            # fresh lock context per call of ``func``
            try:
                name, args, kwargs = self.name, self.args, self.kwargs

                @functools.wraps(func)
                def locked(*a, **kw):
                    with lock(name, *args, **kwargs):
                        return func(*a, **kw)

                return locked
            except Exception as fault:  # noqa: BLE001 - counted
                faults(fault)
            # the lock's own decorator: the calls go unrecorded
            return self.cm(func)

        def __enter__(self):
            try:
                self.t0 = clock()
            except Exception as fault:  # noqa: BLE001 - counted
                self.t0 = None  # this acquisition is not recorded
                faults(fault)
            try:
                value = self.cm.__enter__()
            except BaseException as exc:
                if self.t0 is not None:
                    self._failed(exc)
                raise
            try:
                self.t1 = clock()
            except Exception as fault:  # noqa: BLE001 - counted
                self.t0 = None
                faults(fault)
            return value

        def __exit__(self, exc_type, exc, tb):
            try:
                return self.cm.__exit__(exc_type, exc, tb)
            finally:
                # the lock is released: the record of the wait and the
                # hold (guarded here, not in a call of its own: this is
                # every acquisition's path)
                try:
                    if self.t0 is not None:
                        self._record(self.t1, clock(), None)
                except Exception as fault:  # noqa: BLE001 - counted
                    faults(fault)

        def _failed(self, exc) -> None:
            """The acquisition failed (``blocking=False``): an error
            record, no hold.  Never raises."""
            try:
                t1 = clock()
                self._record(t1, t1, waits.error_of(exc))
            except Exception as fault:  # noqa: BLE001 - counted
                faults(fault)

        def _record(self, t1: int, t2: int, err) -> None:
            attrs = {A_LOCK: lock_name(self.name), A_HELD: (t2 - t1) // 1000}
            kwargs = self.kwargs
            if kwargs:
                if kwargs.get('fair'):
                    attrs[A_FAIR] = True
                if kwargs.get('external'):
                    attrs[A_EXTERNAL] = True
            args = self.args
            if -1 < external_pos < len(args) and args[external_pos]:
                attrs[A_EXTERNAL] = True
            if -1 < fair_pos < len(args) and args[fair_pos]:
                attrs[A_FAIR] = True
            record(EV, self.t0, t1, attrs, err)

    if switch is None:
        switch = Switch()

    @functools.wraps(original)
    def lock(name, *args, **kwargs):
        cm = original(name, *args, **kwargs)
        try:
            if switch.active and faults.active:
                return _Timed(cm, name, args, kwargs)
        except Exception as fault:  # noqa: BLE001 - counted
            faults(fault)
        return cm

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

    def check(self, conf) -> str | None:
        if not conf.instrument.wait_timing:
            return '[instrument] wait_timing is off'
        return super().check(conf)

    def points(self, ctx: base.Context) -> list:
        return [
            points_mod.replace(
                MODULE,
                'lock',
                self._replacement,
                replace_reads=(EXTERNAL, FAIR),
            )
        ]

    def _replacement(self, original, state, module):
        assert self.waits is not None  # noqa: S101 - set by install
        # state: the point's, inactive once removed (see Switch)
        return timed_lock(
            original, self.waits.record, self.waits.faults, state
        )

    def install(self, ctx: base.Context) -> None:
        self.waits = waits.WaitRecorder(ctx.recorder, 'the lock timing')
        super().install(ctx)

    @property
    def patched(self) -> bool:
        return (
            self.patcher is not None
            and self.patcher.status(POINT) == 'patched'
        )
