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
"""SQL timing: what ``[instrument] sql_timing`` switches on.

``install(recorder, conf)`` attaches the SQLAlchemy engine listeners
(``listeners``; their queue is processed by the buffer's writer thread
before each drain), the per-interval aggregator of the statements not
written one by one (``aggregate``) and the ``wrap_db_retry`` recorder
(``retries``), and returns a handle whose ``remove()`` undoes all of it
and writes what is left, last aggregates included.  Every place they
patch or listen to is a point of one ``instrument.patching.patcher.Patcher``
(the target's): in the start-up banner and the start record, undone
by its ``remove()``.
"""

from oslo_log import log as logging

from instrument.patching import patcher as patcher_mod
from instrument.runtime import threads
from instrument.targets.sqlalchemy import aggregate
from instrument.targets.sqlalchemy import fingerprint
from instrument.targets.sqlalchemy import listeners as listeners_mod
from instrument.targets.sqlalchemy import retries

# Used from the writer's OS thread: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))

# Rounds of processing and writing at removal, each as much as the
# buffer has room for.
REMOVE_ROUNDS = 1024
# Longest wait for the buffer's drain lock there (a writer stuck on a
# hung disk).
DRAIN_TIMEOUT = 2.0


class SqlTiming:
    """The installed SQL instrumentation of a process."""

    def __init__(
        self,
        recorder,
        slow_query_threshold_ms: float = 0.0,
        aggregate_interval_s: float = 10.0,
        max_pending: int = listeners_mod.MAX_PENDING,
        patcher=None,
    ) -> None:
        self.recorder = recorder
        # Where every listener and replacement is a point.
        self.patcher = (
            patcher
            if patcher is not None
            else patcher_mod.Patcher([], recorder, 'SQLAlchemy')
        )
        self.memo = fingerprint.Memo()
        self.aggregator = aggregate.Aggregator(recorder, aggregate_interval_s)
        self.listeners = listeners_mod.SqlListeners(
            recorder,
            self.aggregator,
            self.memo,
            slow_query_threshold_ms,
            max_pending,
            self.patcher,
        )
        self.retries = retries.RetryRecorder(recorder, self.patcher, self.memo)
        self._buffer = getattr(recorder, 'buffer', None)
        self._installed = False

    def install(self) -> 'SqlTiming':
        if self._installed:
            return self
        self._installed = True
        self.listeners.install()
        self.retries.install()
        self.patcher.apply()
        add_periodic = getattr(self._buffer, 'add_periodic', None)
        if add_periodic is not None:
            add_periodic(self.listeners.process)
        return self

    def process(self, final: bool = False) -> None:
        """Turn what is queued into records now (the buffer's writer
        does it before each drain)."""
        self.listeners.process(final)

    def remove(self) -> None:
        """Detach listeners and retry recorder; write the last
        aggregates (idempotent)."""
        if not self._installed:
            return
        self._installed = False
        # Every listener and replacement at once, then what they leave.
        self.patcher.remove()
        self.listeners.remove()
        self.retries.remove()
        remove_periodic = getattr(self._buffer, 'remove_periodic', None)
        if remove_periodic is not None:
            remove_periodic(self.listeners.process)
        try:
            # What the buffer has no room for waits for its next write.
            drain = getattr(self._buffer, 'drain', None)
            for _ in range(REMOVE_ROUNDS):
                if (
                    not self.listeners.process(final=True)
                    or drain is None
                    or not drain(timeout=DRAIN_TIMEOUT)
                ):
                    break
        except Exception:
            LOG.exception('instrument: writing the last SQL records')


def install(recorder, conf, patcher=None) -> SqlTiming:
    """Attach SQL timing as configured in ``conf.instrument``, recording
    through ``recorder`` (``instrument.runtime.recorder.Recorder``), its points
    applied by ``patcher`` (one of its own when None); returns the
    handle (``remove()``)."""
    group = conf.instrument
    # The statements waiting for the writer are bounded like the buffer.
    return SqlTiming(
        recorder,
        group.slow_query_threshold,
        group.sql_aggregate_interval,
        group.buffer_size,
        patcher,
    ).install()
