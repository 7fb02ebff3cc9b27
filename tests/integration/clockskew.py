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
"""Run a console script on a skewed wall clock (libfaketime).

The parent sets ``LD_PRELOAD`` to libfaketime with ``FAKETIME=+1.5``
(a constant offset of the wall clock, for C and Python alike) and
``FAKETIME_DONT_FAKE_MONOTONIC=1`` (timeouts and durations keep the
real monotonic clock; faking it too makes Python's lock waits hang,
libfaketime issue 390)::

    python clockskew.py nova-compute --config-file compute-1.conf

libfaketime 0.9.10 (Debian 12) breaks ``clock_nanosleep`` with
``TIMER_ABSTIME`` on the monotonic clock when the monotonic clock is not
faked (issue 426: ``time.sleep`` fails with EINVAL from Python 3.11 on).
This launcher replaces ``time.sleep`` with a ``select``-based sleep
(relative timeout, untouched by libfaketime) before anything else is
imported, then runs the console script's entry point.

eventlet's hubs do not see that replacement: they sleep (when no file
descriptor is registered) with ``eventlet.patcher.original('time')``, a
fresh import of ``time`` with the C ``sleep``, which oslo.service wraps
too.  An eventlet nova-compute (nova 33 and older) then died at start-up
with EINVAL.  The launcher hands eventlet a copy of ``time`` with the
replaced ``sleep`` as that original module; that ``sleep`` keeps the C
``select`` (eventlet's monkey patching makes ``select.select`` green,
which its hub must not call).
"""

import importlib.metadata
import os
import select
import sys
import time
import types

# Where eventlet.patcher.original() keeps the module it re-imported.
_EVENTLET_ORIGINAL_TIME = '__original_module_time'
# Taken before eventlet's monkey patching makes select.select green (its
# hub sleeps with _sleep and must block).
_select = select.select


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError('sleep length must be non-negative')
    _select([], [], [], seconds)


def install() -> None:
    """Replace ``time.sleep`` for this process when libfaketime is
    preloaded, in ``time`` and in eventlet's original ``time``."""
    if 'faketime' not in os.environ.get('LD_PRELOAD', ''):
        return
    time.sleep = _sleep
    # A copy, not ``time`` itself: eventlet's monkey patching puts the
    # green sleep into ``time``, and its hub must keep a blocking one.
    original = types.ModuleType('time', time.__doc__)
    original.__dict__.update(vars(time))
    sys.modules.setdefault(_EVENTLET_ORIGINAL_TIME, original)


def main() -> int:
    if len(sys.argv) < 2:
        print('usage: clockskew.py CONSOLE_SCRIPT [ARGS...]', file=sys.stderr)
        return 2
    install()
    name = sys.argv[1]
    entry = next(
        (
            ep
            for ep in importlib.metadata.entry_points(group='console_scripts')
            if ep.name == name
        ),
        None,
    )
    if entry is None:
        print('clockskew.py: no console script %r' % name, file=sys.stderr)
        return 2
    sys.argv = [name] + sys.argv[2:]
    return entry.load()()


if __name__ == '__main__':
    sys.exit(main())
