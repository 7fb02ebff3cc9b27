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
workload and then each at nova's own interval (its ``spacing``: the
resource audit every 60 s, ``[DEFAULT] update_resources_interval``;
the power state sync every 600 s, ``sync_power_state_interval``), or,
with an explicit ``interval``, all of them every ``interval`` seconds
(shorter than nova's: more audits in a short run, and more contention
for ``compute_resources`` than a deployment has), in a thread of its
own (a greenthread under eventlet), as a compute's service timer would.
Only those tasks are made due; the others wait for their own spacing as
in a deployment, pushed past the run so that the demo's outcomes do not
depend on them.
"""

import logging
import threading
import time

from nova import context as nova_context
from oslo_service import periodic_task

LOG = logging.getLogger(__name__)

TASKS = ('update_available_resource', '_sync_power_states')
# The interval of the demo's --periodic-interval before it defaulted to
# nova's own intervals.
SHORT_INTERVAL_S = 5.0


def spacing(manager, task: str) -> float:
    """nova's interval of ``task`` (seconds; its ``spacing``, the
    default periodic interval when it has none)."""
    value = getattr(manager, '_periodic_spacing', {}).get(task)
    return (
        float(value) if value and value > 0 else periodic_task.DEFAULT_INTERVAL
    )


class PeriodicLoop:
    """Runs ``tasks`` of each compute manager at nova's intervals
    (``interval`` None), or every ``interval`` s."""

    def __init__(
        self, managers: list, interval: float | None, tasks: tuple = TASKS
    ) -> None:
        self.managers = list(managers)
        self.interval = interval
        self.tasks = tasks
        self.runs = 0
        self._stop = threading.Event()
        self._thread = None

    def intervals(self) -> dict:
        """``{task: seconds between its runs}``."""
        if self.interval is not None:
            return {task: self.interval for task in self.tasks}
        return {
            task: min(
                (spacing(m, task) for m in self.managers),
                default=periodic_task.DEFAULT_INTERVAL,
            )
            for task in self.tasks
        }

    def run_once(self, tasks: tuple | None = None) -> None:
        """Every compute runs ``tasks`` (default: all of ``self.tasks``)
        now (made due), and only them."""
        tasks = self.tasks if tasks is None else tasks
        context = nova_context.get_admin_context()
        for manager in self.managers:
            if self._stop.is_set():
                return
            last = manager._periodic_last_run
            now = periodic_task.now()
            for name in last:
                last[name] = None if name in tasks else now
            try:
                manager.run_periodic_tasks(context)
            except Exception:  # noqa: BLE001 - a task's own failure
                LOG.exception(
                    'periodic tasks of %s failed',
                    getattr(manager, 'host', '?'),
                )
        self.runs += 1

    def _loop(self) -> None:
        every = self.intervals()
        clock = time.monotonic
        due = dict.fromkeys(every, clock())
        while not self._stop.is_set():
            now = clock()
            tasks = tuple(t for t in self.tasks if due[t] <= now)
            if tasks:
                self.run_once(tasks)
                for t in tasks:
                    due[t] = now + every[t]
            if self._stop.wait(max(0.0, min(due.values()) - clock())):
                return

    def start(self) -> None:
        if (
            self.interval is not None and self.interval <= 0
        ) or not self.managers:
            return
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name='demo-periodic'
        )
        self._thread.start()

    def stop(self) -> None:
        """No new run; waits for the one under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            self._thread = None
