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

A fault is counted in the thread that had it, usually one of nova's,
and logged from another (``threads.defer``: the hub under eventlet, the
watchdog thread otherwise): a log call can block on a slow disk or a
hanging log handler, and nova's call must not wait for it.  Even the
traceback is formatted there.

``totals()`` is what the runtime writes into the span log as
``instrument.faults`` counter records; ``reset()`` (``teardown``)
starts every counter of the process afresh.  ``changes()`` tells the
writer whether ``totals()`` can have changed since it last looked: it
walks every counter (one per patch point, hundreds in nova), and the
writer asks every flush interval.
"""

import os
import traceback
import weakref

from oslo_log import log as logging

from instrument import schema
from instrument.runtime import errors
from instrument.runtime import threads

# Called through threads.defer only, never from the faulting thread.
LOG = logging.getLogger(__name__)

EVENT = schema.EV_FAULTS

_LIVE = weakref.WeakSet()
# Bumped after any counter's count is set (a fault, a reset, a new
# counter): see ``changes``.
_changes = 0


def changes() -> tuple:
    """A value that differs from every earlier one once a count was
    set or a counter was made or freed since: while it stays the same,
    ``totals()`` does too."""
    return _changes, len(_LIVE)


class Faults:
    """Counts the faults of one hook; logs the first; disables at
    ``limit`` (None: never)."""

    __slots__ = (
        'name',
        'limit',
        '_count',
        'active',
        'what',
        'logged',
        '__weakref__',
    )

    def __init__(
        self,
        name: str,
        limit: int | None = None,
        what: str = 'the nova call is unaffected',
    ) -> None:
        self.name = name
        self.limit = limit
        self.what = what
        self.count = 0
        self.active = True
        # True once the first fault's log line is handed over
        self.logged = False
        _LIVE.add(self)

    @property
    def count(self) -> int:
        """Faults counted so far."""
        return self._count

    @count.setter
    def count(self, value: int) -> None:
        global _changes
        # The count first: whoever sees the new ``changes()`` sees it.
        self._count = value
        _changes += 1

    def __call__(self, exc: BaseException) -> None:
        """Count ``exc``, a fault of this hook; never raises, never
        logs in the calling thread (it hands the log call over)."""
        try:
            self.count += 1
            if not self.logged:
                self.logged = True
                # Not handed over (too much waiting): the next fault
                # is logged instead.
                try:
                    self.logged = threads.defer(
                        _log_fault, self.name, self.what, exc
                    )
                except Exception:
                    self.logged = False
            if (
                self.limit is not None
                and self.count >= self.limit
                and self.active
            ):
                self.active = False
                threads.defer(
                    LOG.error,
                    'instrument: %s disabled after %d faults',
                    self.name,
                    self.count,
                )
        except Exception:  # noqa: S110 - a fault handler must not fail
            pass

    def reset(self) -> None:
        self.count = 0
        self.active = True
        self.logged = False


def _log_fault(name: str, what: str, exc: BaseException) -> None:
    """The first fault of a counter, with its traceback (deferred)."""
    try:
        kind = errors.error_class(exc)
    except Exception:
        kind = '?'
    LOG.warning(
        'instrument: fault in %s (%s: %s); %s, further faults are '
        'counted in instrument.faults records, not logged\n%s',
        name,
        kind,
        errors.short_message(exc),
        what,
        _where(exc),
    )


def _where(exc: BaseException) -> str:
    """The traceback, without the message: that is logged cut as span
    errors are (never an SQL statement or its parameters)."""
    try:
        return (
            'Traceback (most recent call last):\n'
            + ''.join(traceback.format_tb(exc.__traceback__)).rstrip()
        )
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
        counter.logged = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def reset() -> None:
    """Start every counter of the process afresh (at ``teardown``)."""
    for counter in list(_LIVE):
        counter.reset()
