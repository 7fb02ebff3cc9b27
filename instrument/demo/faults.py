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
"""A fake virt driver that fails a chosen share of spawns.

``FaultyDriver`` is nova's ``FakeDriver`` (room for any number of
instances) whose ``spawn`` raises, for a deterministic share of instance
uuids, either ``BuildAbortException`` (the build fails for good) or, on
the first attempt only, ``ComputeResourcesUnavailable`` (nova
reschedules to another host, as ``FakeRescheduleDriver`` does).  The
shares are set with ``configure`` before the computes start.
"""

import sys
import threading
import zlib

from nova import exception
from nova.virt import fake

_SETTINGS = {'fail': 0.0, 'reschedule': 0.0, 'seed': 0}
_RESCHEDULED = set()
_LOCK = threading.Lock()


def configure(fail: float, reschedule: float, seed: int = 0) -> None:
    """Share of spawns that fail, and of first spawns that reschedule."""
    _SETTINGS.update(fail=fail, reschedule=reschedule, seed=seed)
    with _LOCK:
        _RESCHEDULED.clear()


def register() -> str:
    """Make the driver loadable by nova; returns its compute_driver."""
    sys.modules.setdefault('nova.virt.instrument_demo', sys.modules[__name__])
    return 'instrument_demo.FaultyDriver'


def fate(uuid: str) -> str:
    """What happens to the spawns of ``uuid``: ok, fail or reschedule."""
    draw = zlib.crc32(('%d:%s' % (_SETTINGS['seed'], uuid)).encode())
    share = (draw % 10000) / 10000.0
    if share < _SETTINGS['fail']:
        return 'fail'
    if share < _SETTINGS['fail'] + _SETTINGS['reschedule']:
        return 'reschedule'
    return 'ok'


class FaultyDriver(fake.FakeDriver):
    """FakeDriver with injected spawn failures and reschedules."""

    def spawn(self, context, instance, image_meta, injected_files,
              admin_password, allocations, network_info=None,
              block_device_info=None, power_on=True, accel_info=None):
        what = fate(instance.uuid)
        if what == 'fail':
            raise exception.BuildAbortException(
                instance_uuid=instance.uuid,
                reason='injected spawn failure (instrument-demo)')
        if what == 'reschedule':
            with _LOCK:
                first = instance.uuid not in _RESCHEDULED
                _RESCHEDULED.add(instance.uuid)
            if first:
                raise exception.ComputeResourcesUnavailable(
                    reason='injected reschedule (instrument-demo)')
        return super().spawn(
            context, instance, image_meta, injected_files, admin_password,
            allocations, network_info=network_info,
            block_device_info=block_device_info, power_on=power_on,
            accel_info=accel_info)
