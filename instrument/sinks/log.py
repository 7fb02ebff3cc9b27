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
"""The ``log`` sink: each event as one line of the service log.

Uses the logger ``instrument.spans`` at INFO, so oslo.log's handlers,
formatters and log rotation apply.  Useful where only the service log is
collected; the analyser reads these lines out of a nova log too.

Every line the service log does not take is counted in ``dropped``: a
handler that raises loses that line, not the batch.  Under eventlet the
lines are logged later by the hub (``instrument.runtime.threads``); what it
fails to log is counted there and folded into ``dropped`` by
``settle``, which the buffer calls before each drop report.  Before the
last report (``flush``) and at close the sink waits for the hub, so the
final counts are exact; a hub that does not log them within
``CLOSE_TIMEOUT`` seconds (blocked) has them counted as lost, and they
are never logged after that.
"""

import logging

from instrument import sinks as sink
from instrument.runtime import record
from instrument.runtime import threads

SPAN_LOG = logging.getLogger('instrument.spans')
# Records waiting for the hub when no configuration says otherwise.
DEFAULT_MAX_WAITING = 50000
# Longest wait, before the last drop report and at close, for the hub
# to log what it was handed.
CLOSE_TIMEOUT = 1.0


def _log_lines(data: str) -> tuple:
    """Log each line; (lines not logged, the last error)."""
    failed = 0
    error = None
    for line in data.splitlines():
        try:
            SPAN_LOG.info('%s', line)
        except Exception as exc:  # a handler failed: that line is lost
            failed += 1
            error = exc
    return failed, error


def _describe(error: BaseException) -> str:
    try:
        return 'the service log did not take a line: %s: %s' % (
            error.__class__.__name__,
            error,
        )
    except Exception:  # pragma: no cover - an unprintable exception
        return 'the service log did not take a line'


class LogSink(sink.Sink):
    """Logs encoded events, one line per event.

    Under eventlet the lines are logged from a greenthread of the hub,
    not from the writer's OS thread (logging handlers take green locks;
    see ``instrument.runtime.threads``).  The records waiting for the hub are
    bounded by ``[instrument] buffer_size``; beyond it they are dropped
    and counted.
    """

    name = 'log'
    # close(), and flush() before the last report
    close_timeout = 2 * CLOSE_TIMEOUT

    def __init__(self, conf, identity) -> None:
        super().__init__(conf, identity)
        group = getattr(conf, 'instrument', None)
        self.max_waiting = (
            getattr(group, 'buffer_size', None) or DEFAULT_MAX_WAITING
        )
        self._init_counts()

    def _init_counts(self) -> None:
        # Records handed to the hub, and those it has logged or failed
        # to log since.  The writer writes ``_handed``, ``dropped`` and
        # ``_folded``; the hub (or close, giving up on it) the others,
        # under ``_lock``.
        self._lock = threads.os_lock()
        self._handed = 0
        self._logged = 0
        self._failed = 0
        self._folded = 0
        self._error = None
        self._abandoned = False

    def waiting(self) -> int:
        """Records handed to the hub and not logged yet."""
        return self._handed - self._logged

    def write(self, batch: list, first_seq: int, pid: int) -> None:
        data, lost = record.encode_lines(batch, first_seq, pid)
        if lost:
            self.dropped += lost
        count = len(batch) - lost
        text = data.decode('utf-8')
        if threads.eventlet_patched() and threads.in_os_worker():
            if self._abandoned:
                self.dropped += count
                self.last_error = 'written after the sink was closed'
                return
            if (
                self.waiting() + count > self.max_waiting
                or not threads.defer_to_hub(self._log_handed, text, count)
            ):
                self.dropped += count
                self.last_error = (
                    'the lines waiting for the eventlet hub reached '
                    '[instrument] buffer_size (%d): the hub is busy or '
                    'blocked' % self.max_waiting
                )
                return
            self._handed += count
            return
        if self._handed != self._logged and threads.in_hub_thread():
            # what the writer handed the hub goes first: the log keeps
            # the records' order
            threads.run_deferred()
        failed, error = _log_lines(text)
        if failed:
            self.dropped += failed
            self.last_error = _describe(error)

    def _log_handed(self, text: str, count: int) -> None:
        """In the hub: log what the writer handed over, count what the
        service log did not take."""
        with self._lock:
            if self._abandoned:  # counted as lost by close already
                return
        # Not logged unless ``_log_lines`` returns: all lost.
        failed, error = count, None
        try:
            failed, error = _log_lines(text)
        finally:
            with self._lock:
                if not self._abandoned:
                    self._logged += count
                    self._failed += failed
                    if error is not None:
                        self._error = error

    def settle(self) -> None:
        """Writer: fold into ``dropped`` the lines the hub failed to log
        since the last call."""
        with self._lock:
            failed = self._failed - self._folded
            self._folded = self._failed
            error, self._error = self._error, None
        if failed:
            self.dropped += failed
        if error is not None:
            self.last_error = _describe(error)

    def _delivered(self) -> bool:
        return self._logged >= self._handed

    def flush(self) -> None:
        """Wait at most ``CLOSE_TIMEOUT`` for the hub to log what it was
        handed (its failures are then in ``dropped``)."""
        if self._handed != self._logged:
            threads.wait_until(self._delivered, CLOSE_TIMEOUT)
        self.settle()

    def close(self) -> None:
        """What the hub has not logged within ``CLOSE_TIMEOUT`` is
        counted as lost, and is not logged after."""
        if self._handed != self._logged and not threads.wait_until(
            self._delivered, CLOSE_TIMEOUT
        ):
            with self._lock:
                self._abandoned = True
                self._failed += self._handed - self._logged
                self._logged = self._handed
                self._error = None
            self.last_error = (
                'the eventlet hub did not log the lines it '
                'was handed before the exit'
            )
        with self._lock:
            self._abandoned = True
        self.settle()

    def after_fork(self) -> None:
        self.dropped = 0
        self._init_counts()
