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
"""nova's patch points (nova 29 to 34, see ``tests/releases.py``):
``instrument.targets``.

``NovaTarget`` records the lifecycle of nova's operations in api,
conductor, scheduler and compute.  What each operation's steps are
(event, place, service) is the operation catalogue's
(``instrument.catalogue``), from which ``steps`` generates the span
points; what each one records is documented in doc/source/events.rst.
Arguments are read by name, resolved against each target's signature
at patch time, so callers passing arguments by position or by keyword
are both understood (nova does both for the same method on different
hops).  Where code moved between releases, ``alternatives`` name the
older places.  The RPC hops between the services are
``instrument.targets.oslo_messaging``'s; this target names the
services of nova's RPC endpoints for it.

The package, one job a module:

==============  =========================================================
``steps``       the span points of the catalogue's steps, and what each
                reads besides its instance and host (``READS``)
``extract``     the attrs the steps read from nova's calls
``threads``     the hook that carries the current span into nova's
                threads (the build thread, network allocation, cell
                scatter-gather), which do not inherit context variables
``frames``      running a function inside a span's frame
``cells``       nova-api across cells: the scatter-gather and each
                cell's query
``driver``      the hook on ``load_compute_driver`` that adds a point
                for the concrete driver's ``spawn``, through the
                target's patcher
``releases``    the points of one release (the releases supported are
                ``instrument.version``'s)
``pools``       the ``nova_pools`` target (an entry point of its own):
                waits for a slot of nova's semaphores and thread pools
==============  =========================================================
"""

from instrument import version
from instrument.targets import base
from instrument.targets.nova import cells
from instrument.targets.nova import driver
from instrument.targets.nova import releases
from instrument.targets.nova import steps
from instrument.targets.nova import threads

# What other modules and the tests read of the target.
EV_SCATTER_GATHER = cells.EV_SCATTER_GATHER
EV_CELL_QUERY = cells.EV_CELL_QUERY
THREAD_HOOK = releases.THREAD_HOOK
SPAWN_N = releases.SPAWN_N
release_points = releases.release_points

# The services of nova's RPC endpoints, by module of the endpoint class
# (read by the oslo_messaging target for rpc.dispatch).
ENDPOINT_SERVICES = {
    'nova.compute.manager': 'compute',
    'nova.conductor.manager': 'conductor',
    'nova.scheduler.manager': 'scheduler',
}


def points(patcher=None) -> list:
    """Every patch point of nova; ``patcher`` (the target's) gets the
    point of the compute driver's spawn once it is known."""
    return (
        [threads.point(patcher)]
        + steps.points()
        + [driver.point(patcher), steps.action_point()]
        + cells.points()
    )


class NovaTarget(base.Target):
    """Spans of nova's api, conductor, scheduler and compute."""

    name = 'nova'
    requires = {'nova': version.NOVA_VERSIONS}
    surveyed = {'nova': version.TESTED_NOVA}
    rpc_endpoint_services = ENDPOINT_SERVICES

    def points(self, ctx: base.Context) -> list:
        return points(ctx.patcher) + release_points(
            base.distribution_version('nova')
        )
