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
"""Waits for a slot of nova's semaphores and thread pools
(``instrument.targets``).

Semaphores.  Under eventlet, nova-compute limits concurrent builds and
snapshots with semaphores it makes in ``ComputeManager.__init__``
(``_build_semaphore``: ``[DEFAULT] max_concurrent_builds``,
``_snapshot_semaphore``: ``max_concurrent_snapshots``); a build takes
its slot in the build thread, holding the instance's lock, before
``_do_build_and_run_instance`` starts.  A HOOK point on ``__init__``
puts a proxy in front of each semaphore that writes one ``pool.wait``
record (``instrument.runtime.waits``) per acquisition, attrs ``pool`` (the
option's name) and ``size``.  Under native threads nova neuters the
semaphores (``UnlimitedSemaphore``): those are left alone.

Thread pools.  nova hands work to executors (futurist thread or
greenthread pools) whose queue is a wait of its own: the live-migration
executor (``max_concurrent_live_migrations``, 1 by default: a second
live migration from a host waits for the first), and in nova 34 every
pool of ``nova.thread_pool_factory`` (``long_task``: builds and
snapshots under native threads, where the pool's size is the limit;
``live_migration``, ``default``, ``cell_worker``, ``sync_power_state``,
``update_resources``, ``cache_images``).  The executor's ``submit`` is
wrapped on the executor object itself (an instance attribute, undone
at removal): a task submitted is timed from its submission to the
moment it starts in a worker, and that time is written there as one
``pool.wait`` under the span that submitted it (attrs ``pool``: the
pool's name, ``size``: its workers, ``queued``: true); the task then
runs inside that span, so the work's spans are its children (nova 29
to 31 submit live migrations to their executor directly, where no
``spawn`` carries the span).  nova 34's pools
are found as ``ThreadPoolFactory`` makes them (a HOOK point on
``_new_executor``), the live-migration executor of nova 29 to 33 in
``ComputeManager.__init__``.  Installed when ``[instrument]
wait_timing`` is on.

Each semaphore and each executor's ``submit`` is a ``per_object``
REPLACE point of the target's patcher (``instrument.patching.patcher``),
patched on each manager or executor made: in the start-up banner, undone by its
``remove()``.
"""

import wrapt

from instrument import schema
from instrument import version
from instrument.patching import points as points_mod
from instrument.runtime import faults as faults_mod
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import waits
from instrument.targets import base

EV = schema.EV_POOL_WAIT
A_POOL = schema.ATTR_POOL
A_SIZE = schema.ATTR_SIZE
A_QUEUED = schema.ATTR_QUEUED
# attribute of ComputeManager: the option that sizes it
SEMAPHORES = (
    ('_build_semaphore', 'max_concurrent_builds'),
    ('_snapshot_semaphore', 'max_concurrent_snapshots'),
)
# executors of ComputeManager (nova 29 to 33): the pool's name
EXECUTORS = (('_live_migration_executor', 'live_migration'),)

MODULE = 'nova.compute.manager'
POINTS = tuple(
    '%s:ComputeManager.%s' % (MODULE, attr) for attr, _pool in SEMAPHORES
)
# each executor's submit (nova 34's pools, the live-migration executor)
POINT_SUBMIT = 'futurist:Executor.submit'

clock = waits.clock
# Faults of a proxy that outlived its target's removal.
_FAULTS = faults_mod.Faults(
    'the build slot timing', what='the semaphore is unaffected'
)


class TimedSemaphore(wrapt.ObjectProxy):
    """A semaphore whose ``with`` acquisitions are recorded."""

    def __init__(self, wrapped, pool: str, size, owner) -> None:
        super().__init__(wrapped)
        self._self_pool = pool
        self._self_size = size
        self._self_owner = owner

    def __enter__(self):
        # The semaphore's own __enter__ runs once, unguarded; the
        # timing around it is guarded (a fault is counted, the slot
        # is taken unrecorded).
        owner = self._self_owner
        t0 = None
        try:
            if owner.active:
                t0 = clock()
        except Exception as fault:  # noqa: BLE001 - counted
            owner.fault(fault)
        value = self.__wrapped__.__enter__()
        if t0 is not None:
            try:
                owner.record(
                    EV,
                    t0,
                    clock(),
                    {A_POOL: self._self_pool, A_SIZE: self._self_size},
                )
            except Exception as fault:  # noqa: BLE001 - counted
                owner.fault(fault)
        return value

    def __exit__(self, exc_type, exc, tb):
        return self.__wrapped__.__exit__(exc_type, exc, tb)


def _timed_submit(owner, submit, pool: str, size):
    """``submit`` of an executor whose tasks' waits for a worker are
    recorded by ``owner`` (a ``NovaPoolsTarget``)."""

    def timed(fn, *args, **kwargs):
        t0 = None
        try:
            if owner.active:
                t0 = clock()
                run = _started(
                    owner, fn, pool, size, t0, recorder_mod.current_frame()
                )
        except Exception as fault:  # noqa: BLE001 - counted
            owner.fault(fault)
            t0 = None
        # the executor's own submit runs once, unguarded
        if t0 is None:
            return submit(fn, *args, **kwargs)
        return submit(run, *args, **kwargs)

    # mypy does not model an attribute set on a function (its issue
    # 2087): the marker that this submit is ours, and what it wraps
    timed.instrument_submit = submit  # type: ignore[attr-defined]
    return timed


def _started(owner, fn, pool: str, size, t0: int, frame):
    """``fn`` that, when a worker starts it, first writes its wait
    since ``t0`` under ``frame`` (the span that submitted it), then
    runs inside that span: the work's spans are its children, as the
    threads of nova's ``spawn`` are (``instrument.targets.nova``).
    nova 29 to 31 hand a live migration to the executor by its
    ``submit`` (through ``nova.utils.pass_context``), which nothing
    else carries the span across; nova 32 and later by ``spawn_on``,
    whose function carries it again (the same frame)."""

    def run(*args, **kwargs):
        token = None
        try:
            t1 = clock()
            if owner.active:
                token = recorder_mod.set_frame(frame)
                owner.record(
                    EV, t0, t1, {A_POOL: pool, A_SIZE: size, A_QUEUED: True}
                )
        except Exception as fault:  # noqa: BLE001 - counted
            owner.fault(fault)
        if token is not None and frame is None:
            # submitted outside any span: the work runs as it would
            recorder_mod.reset_frame(token)
            token = None
        try:
            return fn(*args, **kwargs)
        finally:
            if token is not None:
                recorder_mod.reset_frame(token)

    return run


def _workers(executor):
    """The number of workers of a futurist executor, None if unknown."""
    value = getattr(executor, '_max_workers', None)
    if not isinstance(value, int):
        value = getattr(getattr(executor, '_pool', None), 'size', None)
    return value if isinstance(value, int) else None


def _size(sem):
    value = getattr(sem, '_value', None)
    return value if isinstance(value, int) else None


class NovaPoolsTarget(base.Target):
    """``pool.wait`` records of nova-compute's build/snapshot slots."""

    name = 'nova_pools'
    requires = {'nova': version.NOVA_VERSIONS}
    surveyed = {'nova': version.TESTED_NOVA}

    def __init__(self) -> None:
        super().__init__()
        self.waits: waits.WaitRecorder | None = None
        self.record = None

    @property
    def active(self) -> bool:
        return self.waits is not None and self.waits.faults.active

    def fault(self, exc: BaseException) -> None:
        """Count a fault of the timing (never raises)."""
        waits_ = self.waits
        (waits_.faults if waits_ is not None else _FAULTS)(exc)

    def check(self, conf) -> str | None:
        if not conf.instrument.wait_timing:
            return '[instrument] wait_timing is off'
        return super().check(conf)

    def points(self, ctx: base.Context) -> list:
        return (
            [
                points_mod.PatchPoint(
                    MODULE,
                    'ComputeManager.__init__',
                    'compute.manager.init',
                    'compute',
                    context=None,
                    kind=points_mod.HOOK,
                    on_exit=self._manager_made,
                ),
                # nova 34: every pool, as the factory makes it
                points_mod.PatchPoint(
                    'nova.thread_pool_factory',
                    'ThreadPoolFactory._new_executor',
                    'thread.pool.new',
                    None,
                    context=None,
                    kind=points_mod.HOOK,
                    on_exit=points_mod.reads(self._executor_made, 'name'),
                ),
            ]
            + [
                points_mod.replace(
                    MODULE,
                    'ComputeManager.' + attr,
                    self._proxy(pool),
                    per_object=True,
                )
                for attr, pool in SEMAPHORES
            ]
            + [
                points_mod.replace(
                    'futurist',
                    'Executor.submit',
                    self._submit,
                    per_object=True,
                )
            ]
        )

    def _proxy(self, pool: str):
        def factory(sem, state, manager):
            return TimedSemaphore(sem, pool, _size(sem), self)

        return factory

    def _submit(self, submit, state, executor, pool: str):
        return _timed_submit(self, submit, pool, _workers(executor))

    def install(self, ctx: base.Context) -> None:
        self.waits = waits.WaitRecorder(ctx.recorder, 'the build slot timing')
        self.record = self.waits.record
        super().install(ctx)

    def _manager_made(self, manager, args, kwargs, result) -> None:
        """HOOK after ``ComputeManager.__init__``: proxy its
        semaphores (the real ones; not the unlimited ones) and time
        its executors."""
        patcher = self.patcher
        if patcher is None:  # not installed
            return
        for (attr, _pool), name in zip(SEMAPHORES, POINTS, strict=True):
            sem = getattr(manager, attr, None)
            if (
                sem is None
                or isinstance(sem, TimedSemaphore)
                or type(sem).__name__ == 'UnlimitedSemaphore'
            ):
                continue
            patcher.patch_object(name, manager)
        for attr, pool in EXECUTORS:
            self._time_executor(getattr(manager, attr, None), pool)

    def _executor_made(self, factory, name, result) -> None:
        """HOOK after ``ThreadPoolFactory._new_executor(max_workers,
        name)`` (nova 34): time the new pool's queue."""
        self._time_executor(result, name if isinstance(name, str) else None)

    def _time_executor(self, executor, pool) -> None:
        submit = getattr(executor, 'submit', None)
        if (
            submit is None
            or pool is None
            or self.patcher is None
            or hasattr(submit, 'instrument_submit')
        ):
            return
        self.patcher.patch_object(POINT_SUBMIT, executor, pool)

    def remove(self) -> None:
        self.waits = None
        super().remove()
