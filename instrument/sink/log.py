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
"""

import logging

from instrument import record
from instrument import sink
from instrument import threads

SPAN_LOG = logging.getLogger('instrument.spans')
# Records waiting for the hub when no configuration says otherwise.
DEFAULT_MAX_WAITING = 50000


def _log_lines(data: str) -> None:
    for line in data.splitlines():
        SPAN_LOG.info('%s', line)


class LogSink(sink.Sink):
    """Logs encoded events, one line per event.

    Under eventlet the lines are logged from a greenthread of the hub,
    not from the writer's OS thread (logging handlers take green locks;
    see ``instrument.threads``).  The records waiting for the hub are
    bounded by ``[instrument] buffer_size``; beyond it they are dropped
    and counted.
    """

    name = 'log'

    def __init__(self, conf, identity) -> None:
        super().__init__(conf, identity)
        group = getattr(conf, 'instrument', None)
        self.max_waiting = getattr(group, 'buffer_size', None) or \
            DEFAULT_MAX_WAITING
        self._init_counts()

    def _init_counts(self) -> None:
        # Records handed to the hub, and those it has logged since: each
        # is written by one thread only (the writer, the hub).
        self._handed = 0
        self._logged = 0

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
            if self.waiting() + count > self.max_waiting or \
                    not threads.defer_to_hub(self._log_handed, text, count):
                self.dropped += count
                self.last_error = (
                    'the lines waiting for the eventlet hub reached '
                    '[instrument] buffer_size (%d): the hub is busy or '
                    'blocked' % self.max_waiting)
                return
            self._handed += count
            return
        _log_lines(text)

    def _log_handed(self, text: str, count: int) -> None:
        try:
            _log_lines(text)
        finally:
            self._logged += count

    def after_fork(self) -> None:
        self.dropped = 0
        self._init_counts()
