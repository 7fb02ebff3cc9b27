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
"""The process itself: nothing measured is lost at ``os._exit``.

oslo.service (both backends) and cotyledon end a worker process with
``os._exit()``, which skips ``atexit``.  A HOOK point on ``os._exit``
writes what every buffer holds, the current SQL aggregates included,
before the process goes (``instrument.runtime.buffer.flush_before_exit``).  It
runs whatever the points given to ``setup()``.
"""

from instrument.patching import points as points_mod
from instrument.runtime import buffer as buffer_mod
from instrument.targets import base


def _flush_before_exit(instance, args, kwargs) -> None:
    """HOOK on ``os._exit``: write everything before the process ends."""
    buffer_mod.flush_before_exit()


EXIT_POINTS = (
    points_mod.PatchPoint(
        'os',
        '_exit',
        'process.exit',
        None,
        context=None,
        kind=points_mod.HOOK,
        on_enter=_flush_before_exit,
    ),
)


class ProcessTarget(base.Target):
    """The flush before ``os._exit``."""

    name = 'process'
    process_wide = True

    def points(self, ctx: base.Context) -> list:
        return list(EXIT_POINTS)
