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
"""The nova releases the points are verified on: release test metadata.

``RELEASES`` names, for each nova release, its series, the tox env that
verifies it, the concurrency modes verified and the places patched where
code moved.  README.rst's support matrix is made from it
(tests/unit/targets/test_releases.py checks it); the functional and
integration tiers check the banner against it.  It is test metadata,
not runtime code: ``instrument.targets.nova`` patches whatever release
is installed.
"""

import dataclasses

from instrument.targets.nova import SPAWN_N
from instrument.targets.nova import THREAD_HOOK


@dataclasses.dataclass(frozen=True)
class Release:
    """A nova release the points are verified on: its functional tier
    (``tox_env``) boots, reschedules and fails servers on it in each of
    ``modes`` and checks the banner (tests/functional/nova/
    test_releases.py): no point missing or failed, and each point of
    ``used`` patched at that place.  README.rst's support matrix is made
    from these (tests/unit/targets/test_releases.py checks it)."""

    version: str
    series: str
    tox_env: str
    #: Concurrency modes verified.
    modes: tuple
    #: {point name: the place (module:target) patched in this release},
    #: for the points whose code moved.
    used: dict
    #: {mode: why it is not verified} for the other modes.
    unverified: dict
    #: Points whose code this release does not have (the banner's
    #: "missing", checked by the release's functional tier).
    missing: tuple = ()
    #: {mode: tox env} for a mode verified by another env than
    #: ``tox_env`` (the integration tier: separate nova processes).
    mode_envs: dict = dataclasses.field(default_factory=dict)

    def env_of(self, mode: str) -> str:
        """The tox env that verifies ``mode`` (one of ``modes``)."""
        return self.mode_envs.get(mode, self.tox_env)


_NO_THREADS = 'none: eventlet-only release'

RELEASES = (
    # Every service defaults to native threads.
    Release(
        '34.0.0',
        '2026.2',
        'functional',
        ('eventlet', 'threads'),
        {THREAD_HOOK: THREAD_HOOK},
        {},
    ),
    # api and scheduler default to threads, conductor and compute to
    # eventlet; threads start with nova.utils.spawn_on (spawn calls it).
    # That default (threads) is verified by the integration tier: nova
    # 33's in-process test fixtures fail under threads
    # (doc/source/releases.rst).
    Release(
        '33.0.2',
        '2026.1',
        'functional-nova33',
        ('eventlet', 'threads'),
        {THREAD_HOOK: 'nova.utils:spawn_on'},
        {},
        mode_envs={'threads': 'integration-nova33'},
    ),
    # eventlet only; threads start with nova.utils.spawn and (the build
    # thread) spawn_n.
    Release(
        '31.3.1',
        '2025.1',
        'functional-nova31',
        ('eventlet',),
        {THREAD_HOOK: 'nova.utils:spawn', SPAWN_N: SPAWN_N},
        {'threads': _NO_THREADS},
    ),
    # As 31, on SQLAlchemy 1.4 (1.4.51).
    Release(
        '29.4.0',
        '2024.1',
        'functional-nova29',
        ('eventlet',),
        {THREAD_HOOK: 'nova.utils:spawn', SPAWN_N: SPAWN_N},
        {'threads': _NO_THREADS},
    ),
)


def release_of(found: str | None) -> Release | None:
    """The entry of RELEASES of the same major version as ``found``."""
    major = (found or '').split('.', 1)[0]
    for release in RELEASES:
        if release.version.split('.', 1)[0] == major:
            return release
    return None
