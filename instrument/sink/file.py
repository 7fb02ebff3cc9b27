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
"""The ``file`` sink: one JSON-lines span file per process.

The file is ``<output_dir>/<host>_<service>_<pid>_<start>.jsonl``, opened
with ``O_APPEND`` and written with ``os.write`` (no user-space buffer
that a fork could duplicate).  A forked child opens its own file.  If the
directory cannot be created or written, or the disk is full, the batch
is counted as dropped, the problem is logged once, and the next batch
tries again (a freed disk resumes writing).
"""

import datetime
import errno
import os
import re

from oslo_log import log as logging

from instrument import record
from instrument import sink
from instrument import threads

# Used from the writer's OS thread: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))

_UNSAFE = re.compile(r'[^A-Za-z0-9._-]+')


def file_name(host: str, service: str, pid: int, started: float) -> str:
    """The span file name for one process."""
    stamp = datetime.datetime.fromtimestamp(
        started, datetime.UTC).strftime('%Y%m%dT%H%M%S')
    parts = (_UNSAFE.sub('-', host), _UNSAFE.sub('-', service), str(pid),
             stamp)
    return '_'.join(parts) + '.jsonl'


class FileSink(sink.Sink):
    """Appends encoded batches to this process's span file."""

    name = 'file'
    # The write primitive; tests replace it to simulate a full disk.
    _os_write = staticmethod(os.write)

    def __init__(self, conf, identity) -> None:
        super().__init__(conf, identity)
        self.directory = conf.instrument.output_dir
        self._fd = None
        self._fd_pid = None
        self.path = None
        self._failing = None

    def _open(self, pid: int) -> int:
        if self._fd is not None:
            if self._fd_pid == pid:
                return self._fd
            # Inherited from the parent across fork: ours to close only.
            self._close_fd()
        os.makedirs(self.directory, exist_ok=True)
        self.path = os.path.join(self.directory, file_name(
            self.identity.host, self.identity.service, pid,
            self.identity.started))
        self._fd = os.open(self.path,
                           os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        self._fd_pid = pid
        return self._fd

    def write(self, batch: list, first_seq: int, pid: int) -> None:
        data, lost = record.encode_lines(batch, first_seq, pid)
        if lost:
            self.dropped += lost
        try:
            fd = self._open(pid)
            view = memoryview(data)
            while view:
                written = self._os_write(fd, view)
                view = view[written:]
        except OSError as exc:
            self.dropped += len(batch) - lost
            self._report_failure(exc)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                self._close_fd()
            return
        if self._failing is not None:
            LOG.warning('instrument: writing span file %s again', self.path)
            self._failing = None

    def _report_failure(self, exc: OSError) -> None:
        key = (exc.errno, exc.filename)
        if self._failing == key:
            return
        self._failing = key
        LOG.error('instrument: cannot write span events to %s (%s); the '
                  'service keeps running, lost events are counted in '
                  'sink.drops records and this is logged once per cause',
                  self.path or self.directory, exc)

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._fd_pid = None

    def after_fork(self) -> None:
        self._close_fd()
        self._failing = None
        self.dropped = 0

    def close(self) -> None:
        self._close_fd()
