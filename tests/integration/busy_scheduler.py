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
"""Run nova-scheduler with a CPU-bound ``select_destinations`` (test only).

::

    INSTRUMENT_IT_BURN_S=0.5 python busy_scheduler.py --config-file x.conf

Each ``SchedulerManager.select_destinations`` first computes for
``INSTRUMENT_IT_BURN_S`` CPU seconds (0 or unset: not at all) in one C
call that never releases the interpreter's lock (``sum`` over a
``range``), then does nova's work.  The process is then what a
saturated scheduler is: its one interpreter busy, every other message
waiting until the computation in hand ends, as under eventlet a loop
that never yields holds the hub.  (A pure-Python loop would not do it
under native threads: the interpreter hands its lock to the other
dispatch threads every 5 ms, so the messages would not queue, each
would only take longer.)  The size of the sum that takes the wanted
time is measured once at start, in CPU time of this thread.

The launcher also raises the process's scheduling priority, with or
without the burn: nice ``PRIORITY`` for the process and for its
session's autogroup (``/proc/self/autogroup``: with the kernel's
autogroups the CPU is shared between sessions first, and every service
of the cloud runs in a session of its own), where it may (as root;
else it stays as it is).  On a shared two-core test host the other
services and jobs would take part of its core, and a process its host
starves is rightly not called saturated by the rule (its CPU stays
under ``rules.SAT_CPU``).  A controller with a core for its scheduler
is what the test stages.

This lives in the tests: the library never burns anything.  The
scheduler is otherwise nova's own ``nova-scheduler`` console script,
configured and instrumented as every other service of the cloud.
"""

import importlib.metadata
import os
import sys
import time

CALIBRATION_N = 2_000_000
PRIORITY = -20
AUTOGROUP = '/proc/self/autogroup'


def terms_for(seconds: float) -> int:
    """How many terms ``sum(range(n))`` adds in ``seconds`` of CPU."""
    best = None
    for _ in range(3):
        t = time.thread_time()
        sum(range(CALIBRATION_N))
        spent = time.thread_time() - t
        if spent > 0 and (best is None or spent < best):
            best = spent
    return int(CALIBRATION_N * seconds / (best or 1e-3))


def burner(seconds: float):
    """A function that computes ``seconds`` of CPU in one call, the
    interpreter's lock held throughout."""
    terms = terms_for(seconds)

    def burn() -> int:
        return sum(range(terms))

    return burn


def install(seconds: float) -> None:
    """Make ``select_destinations`` burn ``seconds`` of CPU first."""
    from nova.scheduler import manager

    burn = burner(seconds)
    select = manager.SchedulerManager.select_destinations

    def select_destinations(self, *args, **kwargs):
        burn()
        return select(self, *args, **kwargs)

    select_destinations.__wrapped__ = select
    manager.SchedulerManager.select_destinations = select_destinations


def prioritise() -> None:
    """Nice ``PRIORITY`` for this process (and the workers it forks) and
    its autogroup, where permitted."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, PRIORITY)
        if os.path.exists(AUTOGROUP):
            with open(AUTOGROUP, 'w') as f:
                f.write('%d\n' % PRIORITY)
    except OSError as exc:
        print(
            'busy_scheduler.py: priority unchanged: %s' % exc, file=sys.stderr
        )


def main() -> int:
    prioritise()
    entry = next(
        ep
        for ep in importlib.metadata.entry_points(group='console_scripts')
        if ep.name == 'nova-scheduler'
    )
    # nova.cmd.scheduler chooses threads or eventlet when imported,
    # before anything else of nova is.
    run = entry.load()
    seconds = float(os.environ.get('INSTRUMENT_IT_BURN_S') or 0)
    if seconds > 0:
        install(seconds)
    sys.argv = ['nova-scheduler'] + sys.argv[1:]
    return run()


if __name__ == '__main__':
    sys.exit(main())
