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
"""Waits for a slot of nova-compute's semaphores (``instrument.targets``).

Under eventlet, nova-compute limits concurrent builds and snapshots
with semaphores it makes in ``ComputeManager.__init__``
(``_build_semaphore``: ``[DEFAULT] max_concurrent_builds``,
``_snapshot_semaphore``: ``max_concurrent_snapshots``); a build takes
its slot in the build thread, holding the instance's lock, before
``_do_build_and_run_instance`` starts.  A HOOK point on ``__init__``
puts a proxy in front of each semaphore that writes one ``pool.wait``
record (``instrument.waits``) per acquisition, attrs ``pool`` (the
option's name) and ``size``.  Under native threads nova neuters the
semaphores (``UnlimitedSemaphore``) and the executor's queue limits
builds instead: those are left alone (not measured).  Installed when
``[instrument] wait_timing`` is on.
"""

import weakref

import wrapt

from instrument import points as points_mod
from instrument import schema
from instrument.targets import base
from instrument.targets import nova as nova_target
from instrument import waits

EV = schema.EV_POOL_WAIT
A_POOL = schema.ATTR_POOL
A_SIZE = schema.ATTR_SIZE
# attribute of ComputeManager: the option that sizes it
SEMAPHORES = (('_build_semaphore', 'max_concurrent_builds'),
              ('_snapshot_semaphore', 'max_concurrent_snapshots'))

clock = waits.clock


class TimedSemaphore(wrapt.ObjectProxy):
    """A semaphore whose ``with`` acquisitions are recorded."""

    def __init__(self, wrapped, pool: str, size, owner) -> None:
        super().__init__(wrapped)
        self._self_pool = pool
        self._self_size = size
        self._self_owner = owner

    def __enter__(self):
        owner = self._self_owner
        if not owner.active:
            return self.__wrapped__.__enter__()
        t0 = clock()
        value = self.__wrapped__.__enter__()
        owner.record(EV, t0, clock(), {A_POOL: self._self_pool,
                                       A_SIZE: self._self_size})
        return value

    def __exit__(self, exc_type, exc, tb):
        return self.__wrapped__.__exit__(exc_type, exc, tb)


def _size(sem):
    value = getattr(sem, '_value', None)
    return value if isinstance(value, int) else None


class NovaPoolsTarget(base.Target):
    """``pool.wait`` records of nova-compute's build/snapshot slots."""

    name = 'nova_pools'
    requires = {'nova': nova_target.NOVA_VERSIONS}
    surveyed = {'nova': nova_target.TESTED_NOVA}

    def __init__(self) -> None:
        super().__init__()
        self.waits: waits.WaitRecorder | None = None
        self.record = None
        self.managers: weakref.WeakSet = weakref.WeakSet()

    @property
    def active(self) -> bool:
        return self.waits is not None and self.waits.faults.active

    def check(self, conf) -> str | None:
        if not conf.instrument.wait_timing:
            return '[instrument] wait_timing is off'
        return super().check(conf)

    def points(self, ctx: base.Context) -> list:
        return [points_mod.PatchPoint(
            'nova.compute.manager', 'ComputeManager.__init__',
            'compute.manager.init', 'compute', context=None,
            kind=points_mod.HOOK, on_exit=self._manager_made)]

    def install(self, ctx: base.Context) -> None:
        self.waits = waits.WaitRecorder(ctx.recorder,
                                        'the build slot timing')
        self.record = self.waits.record
        super().install(ctx)

    def _manager_made(self, manager, args, kwargs, result) -> None:
        """HOOK after ``ComputeManager.__init__``: proxy its
        semaphores (the real ones; not the unlimited ones)."""
        for attr, pool in SEMAPHORES:
            sem = getattr(manager, attr, None)
            if sem is None or isinstance(sem, TimedSemaphore) or \
                    type(sem).__name__ == 'UnlimitedSemaphore':
                continue
            setattr(manager, attr, TimedSemaphore(sem, pool, _size(sem),
                                                  self))
            self.managers.add(manager)

    def remove(self) -> None:
        for manager in list(self.managers):
            for attr, _pool in SEMAPHORES:
                sem = getattr(manager, attr, None)
                if isinstance(sem, TimedSemaphore):
                    setattr(manager, attr, sem.__wrapped__)
        self.managers = weakref.WeakSet()
        self.waits = None
        super().remove()
