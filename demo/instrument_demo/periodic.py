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
"""The computes' periodic tasks, during the workload.

nova's functional fixtures start services with their periodic tasks
off.  ``PeriodicLoop`` runs a few of the compute manager's own tasks
(``TASKS``: the resource audit, which takes the ``compute_resources``
lock the boots' claims take, and the power state sync) on every compute
through nova's own ``run_periodic_tasks``, once at the start of the
workload and then every ``interval`` seconds, in a thread of its own (a
greenthread under eventlet), as a compute's service timer would.  Only
those tasks are made due; the others wait for their own spacing as in a
deployment, pushed past the run so that the demo's outcomes do not
depend on them.
"""

import logging
import threading

from nova import context as nova_context
from oslo_service import periodic_task

LOG = logging.getLogger(__name__)

TASKS = ('update_available_resource', '_sync_power_states')
DEFAULT_INTERVAL_S = 5.0


class PeriodicLoop:
    """Runs ``tasks`` of each compute manager every ``interval`` s."""

    def __init__(self, managers: list, interval: float,
                 tasks: tuple = TASKS) -> None:
        self.managers = list(managers)
        self.interval = interval
        self.tasks = tasks
        self.runs = 0
        self._stop = threading.Event()
        self._thread = None

    def run_once(self) -> None:
        """Every compute runs the tasks now (made due), and only them."""
        context = nova_context.get_admin_context()
        for manager in self.managers:
            if self._stop.is_set():
                return
            last = manager._periodic_last_run
            now = periodic_task.now()
            for name in last:
                last[name] = None if name in self.tasks else now
            try:
                manager.run_periodic_tasks(context)
            except Exception:  # noqa: BLE001 - a task's own failure
                LOG.exception('periodic tasks of %s failed',
                              getattr(manager, 'host', '?'))
        self.runs += 1

    def _loop(self) -> None:
        self.run_once()
        while not self._stop.wait(self.interval):
            self.run_once()

    def start(self) -> None:
        if self.interval <= 0 or not self.managers:
            return
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name='demo-periodic')
        self._thread.start()

    def stop(self) -> None:
        """No new run; waits for the one under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            self._thread = None
