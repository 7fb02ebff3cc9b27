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
"""The points of one nova release only (``release_points``), and the
places whose code moved between releases.  The releases supported
are ``instrument.version``'s (``TESTED_NOVA``, ``NOVA_VERSIONS``); the
test metadata of each is ``tests/releases.py``."""

from instrument.patching import points as points_mod
from instrument.targets.nova import threads

THREAD_HOOK = 'nova.thread_pool_factory:spawn_on'
SPAWN_N = 'nova.utils:spawn_n'


def _major(found: str | None) -> int | None:
    try:
        return int((found or '').split('.', 1)[0])
    except ValueError:
        return None


def release_points(found: str | None) -> list:
    """Points of the nova release ``found`` only: nova 29 to 31 start
    the build thread with ``nova.utils.spawn_n`` (removed in 32 by
    "Replace utils.spawn_n with spawn"), the other threads with
    ``spawn`` (the thread hook's alternative)."""
    major = _major(found)
    if major is not None and major < 32:
        module, target = SPAWN_N.split(':')
        return [
            points_mod.PatchPoint(
                module,
                target,
                'thread.spawn',
                kind=points_mod.HOOK,
                on_enter=threads.hook(),
            )
        ]
    return []
