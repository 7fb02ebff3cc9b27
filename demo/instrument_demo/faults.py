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
"""A fake virt driver that fails a chosen share of spawns and moves.

``FaultyDriver`` is nova's ``FakeDriver`` (room for any number of
instances) whose ``spawn`` raises, for the servers the plan names (an
exact share of them, see ``configure``), either
``BuildAbortException`` (the build fails for good) or, on the first
attempt only, ``ComputeResourcesUnavailable`` (nova
reschedules to another host, as ``FakeRescheduleDriver`` does).  The
shares are set with ``configure`` before the computes start.

For the servers ``configure_moves`` names, the source's
``migrate_disk_and_power_off`` raises ``ResizeError`` (the resize errors
out on the source: ERROR) and the destination's ``pre_live_migration``
raises ``MigrationError`` (nova rolls the live migration back: the
server stays ACTIVE where it was).
"""

import random
import sys
import threading
import typing

from nova import exception
from nova.virt import fake

from instrument_demo import boots

_PLAN = {}
_RESCHEDULED = set()
# server names whose resize / live migration fails
_MOVE_FAILS = {'resize': set(), 'live_migrate': set()}
_LOCK = threading.Lock()

NAME_FORMAT = boots.NAME_FORMAT


def configure(
    fail: float, reschedule: float, count: int, seed: int = 0
) -> dict:
    """Choose which of the ``count`` servers (named ``NAME_FORMAT``)
    fail and which reschedule once: exactly ``round(count * share)`` of
    each, picked by ``seed``.  Returns the plan {name: fate}."""
    names = [NAME_FORMAT % n for n in range(count)]
    random.Random(seed).shuffle(names)
    failing = int(round(count * fail))
    rescheduled = int(round(count * reschedule))
    plan = {name: 'fail' for name in names[:failing]}
    plan.update(
        (name, 'reschedule') for name in names[failing : failing + rescheduled]
    )
    with _LOCK:
        _PLAN.clear()
        _PLAN.update(plan)
        _RESCHEDULED.clear()
    return dict(plan)


def configure_moves(
    resize_fails: typing.Iterable[str] = (),
    live_fails: typing.Iterable[str] = (),
) -> None:
    """The servers (names) whose resize or live migration fails."""
    with _LOCK:
        _MOVE_FAILS['resize'] = set(resize_fails)
        _MOVE_FAILS['live_migrate'] = set(live_fails)


def move_fails(kind: str, name: str) -> bool:
    return name in _MOVE_FAILS.get(kind, ())


def register() -> str:
    """Make the driver loadable by nova; returns its compute_driver."""
    sys.modules.setdefault('nova.virt.instrument_demo', sys.modules[__name__])
    return 'instrument_demo.FaultyDriver'


def fate(name: str) -> str:
    """What happens to the spawns of the server ``name``: ok, fail or
    reschedule."""
    return _PLAN.get(name, 'ok')


class FaultyDriver(fake.FakeDriver):
    """FakeDriver with injected spawn failures and reschedules."""

    def spawn(
        self,
        context,
        instance,
        image_meta,
        injected_files,
        admin_password,
        allocations,
        network_info=None,
        block_device_info=None,
        power_on=True,
        accel_info=None,
    ):
        what = fate(instance.display_name)
        if what == 'fail':
            raise exception.BuildAbortException(
                instance_uuid=instance.uuid,
                reason='injected spawn failure (instrument-demo)',
            )
        if what == 'reschedule':
            with _LOCK:
                first = instance.uuid not in _RESCHEDULED
                _RESCHEDULED.add(instance.uuid)
            if first:
                raise exception.ComputeResourcesUnavailable(
                    reason='injected reschedule (instrument-demo)'
                )
        return super().spawn(
            context,
            instance,
            image_meta,
            injected_files,
            admin_password,
            allocations,
            network_info=network_info,
            block_device_info=block_device_info,
            power_on=power_on,
            accel_info=accel_info,
        )

    def migrate_disk_and_power_off(
        self,
        context,
        instance,
        dest,
        flavor,
        network_info,
        block_device_info=None,
        timeout=0,
        retry_interval=0,
    ):
        if move_fails('resize', instance.display_name):
            raise exception.ResizeError(
                reason='injected disk migration failure (instrument-demo)'
            )
        return super().migrate_disk_and_power_off(
            context,
            instance,
            dest,
            flavor,
            network_info,
            block_device_info=block_device_info,
            timeout=timeout,
            retry_interval=retry_interval,
        )

    def pre_live_migration(
        self,
        context,
        instance,
        block_device_info,
        network_info,
        disk_info,
        migrate_data,
    ):
        if move_fails('live_migrate', instance.display_name):
            raise exception.MigrationError(
                reason='injected pre-live-migration failure (instrument-demo)'
            )
        return super().pre_live_migration(
            context,
            instance,
            block_device_info,
            network_info,
            disk_info,
            migrate_data,
        )
