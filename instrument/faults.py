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
"""What happens when the instrumentation itself fails: fault counters.

Every hook the library puts into nova's path (each patch point, the
paste filter, the notifier driver's start-up) runs its own code under a
``Faults`` counter.  An exception raised by that code is counted; the
first one of a counter is logged with its traceback, later ones are not
logged; a counter with a ``limit`` switches itself off when it reaches
it (the hook then stops recording) and says so once.  Nothing here ever
raises: a fault handler that could fail would be a fault of its own.

``totals()`` is what the runtime writes into the span log as
``instrument.faults`` counter records; ``reset()`` (``teardown``) starts
every counter of the process afresh.
"""

import os
import traceback
import weakref

from oslo_log import log as logging

from instrument import schema
from instrument import threads
from instrument import tracer as tracing

# A fault may be counted in an OS thread: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))

EVENT = schema.EV_FAULTS

_LIVE = weakref.WeakSet()


class Faults:
    """Counts the faults of one hook; logs the first; disables at
    ``limit`` (None: never)."""

    __slots__ = ('name', 'limit', 'count', 'active', 'what', '__weakref__')

    def __init__(self, name: str, limit: int | None = None,
                 what: str = 'the nova call is unaffected') -> None:
        self.name = name
        self.limit = limit
        self.what = what
        self.count = 0
        self.active = True
        _LIVE.add(self)

    def __call__(self, exc: BaseException) -> None:
        """Count ``exc``, a fault of this hook; never raises."""
        try:
            self.count += 1
            if self.count == 1:
                LOG.warning('instrument: fault in %s (%s: %s); %s, further '
                            'faults are counted in instrument.faults '
                            'records, not logged\n%s', self.name,
                            tracing.error_class(exc),
                            tracing.short_message(exc), self.what,
                            _where(exc))
            if self.limit is not None and self.count >= self.limit \
                    and self.active:
                self.active = False
                LOG.error('instrument: %s disabled after %d faults',
                          self.name, self.count)
        except Exception:  # noqa: S110 - a fault handler must not fail
            pass

    def reset(self) -> None:
        self.count = 0
        self.active = True


def _where(exc: BaseException) -> str:
    """The traceback, without the message: that is logged cut as span
    errors are (never an SQL statement or its parameters)."""
    try:
        return 'Traceback (most recent call last):\n' + ''.join(
            traceback.format_tb(exc.__traceback__)).rstrip()
    except Exception:
        return ''


def totals() -> dict:
    """``{hook name: faults}`` of every counter with faults."""
    out = {}
    for counter in list(_LIVE):
        if counter.count:
            out[counter.name] = out.get(counter.name, 0) + counter.count
    return out


def _after_fork_in_child() -> None:
    # A worker counts (and logs) its own faults; a hook the parent
    # disabled stays disabled.
    for counter in list(_LIVE):
        counter.count = 0


os.register_at_fork(after_in_child=_after_fork_in_child)


def reset() -> None:
    """Start every counter of the process afresh (at ``teardown``)."""
    for counter in list(_LIVE):
        counter.reset()
