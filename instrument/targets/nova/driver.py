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
"""The compute driver's ``spawn``: patched on the concrete driver class
once ``load_compute_driver`` returned it."""

from instrument.patching import points as points_mod


def patch_driver_spawn(patcher, driver):
    """After ``load_compute_driver``: time the real driver's spawn,
    through ``patcher`` (the nova target's)."""
    if patcher is None or driver is None:
        return
    cls = type(driver)
    if 'spawn' not in vars(cls):
        for base in cls.__mro__[1:]:
            if 'spawn' in vars(base):
                cls = base
                break
    patcher.add_points(
        [
            points_mod.PatchPoint(
                cls.__module__,
                cls.__qualname__ + '.spawn',
                'compute.spawn',
                'compute',
                instances=points_mod.uuids('instance'),
            )
        ]
    )


def driver_loaded(patcher):
    """The HOOK's ``on_exit`` on ``load_compute_driver``."""

    def on_exit(instance, args, kwargs, driver):
        patch_driver_spawn(patcher, driver)

    return on_exit


def point(patcher=None) -> points_mod.PatchPoint:
    """The HOOK on ``load_compute_driver``."""
    return points_mod.PatchPoint(
        'nova.virt.driver',
        'load_compute_driver',
        'compute.driver',
        kind=points_mod.HOOK,
        on_exit=driver_loaded(patcher),
    )
