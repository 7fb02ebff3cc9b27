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
that a fork could duplicate).  A forked child opens its own file.

Rotation works as with ``logging.handlers.WatchedFileHandler``: before
each write the path is compared (``stat``) with the open file
(``fstat``); when the file was renamed or deleted, or its directory was
deleted, the file is opened again at the same path (the directory
created again), so logrotate's default rename and ``copytruncate`` are
both safe (``O_APPEND`` writes land at the end of a truncated file).

If the directory cannot be created or written, or the disk is full, what
was not written is counted as dropped, the problem is logged once, and
the next batch tries again (a freed disk resumes writing).  A write cut
short (a disk that fills up in the middle of a batch) counts only the
records it did not write in full, and the next write starts on a new
line, so the cut record is the only one lost.
"""

import datetime
import errno
import os
import re
import typing

from oslo_log import log as logging

from instrument import sinks as sink
from instrument.runtime import record
from instrument.runtime import threads

# Used from the writer's OS thread: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))

_UNSAFE = re.compile(r'[^A-Za-z0-9._-]+')


def file_name(host: str, service: str, pid: int, started: float) -> str:
    """The span file name for one process."""
    stamp = datetime.datetime.fromtimestamp(started, datetime.UTC).strftime(
        '%Y%m%dT%H%M%S'
    )
    parts = (
        _UNSAFE.sub('-', host),
        _UNSAFE.sub('-', service),
        str(pid),
        stamp,
    )
    return '_'.join(parts) + '.jsonl'


_NL = 0x0A


class FileSink(sink.Sink):
    """Appends encoded batches to this process's span file."""

    name = 'file'
    # The write primitive; tests replace it to simulate a full disk.
    _os_write = staticmethod(os.write)

    def __init__(self, conf, identity) -> None:
        super().__init__(conf, identity)
        self.directory = conf.instrument.output_dir
        self._fd: typing.Optional[int] = None
        self._fd_pid: typing.Optional[int] = None
        # (st_dev, st_ino) of the open file, and of a file whose last
        # line was cut short by a failed write (None when none is).
        self._file_id: typing.Optional[tuple] = None
        self._cut: typing.Optional[tuple] = None
        self.path: typing.Any = None  # str once opened
        self._failing: typing.Optional[tuple] = None

    def _open(self, pid: int) -> int:
        if self._fd is not None:
            if self._fd_pid != pid:
                # Inherited from the parent across fork: ours to close
                # only.
                self._close_fd()
            elif self._still_in_place():
                return self._fd
            else:
                self._close_fd()
        path = os.path.join(
            self.directory,
            file_name(
                self.identity.host,
                self.identity.service,
                pid,
                self.identity.started,
            ),
        )
        if self.path == path and not os.path.isdir(self.directory):
            LOG.warning(
                'instrument: span directory %s was deleted; creating it again',
                self.directory,
            )
        os.makedirs(self.directory, exist_ok=True)
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self._fd_pid = pid
        self._file_id = (st.st_dev, st.st_ino)
        return fd

    def _still_in_place(self) -> bool:
        """Is the open file still the one at ``path``?  (Log rotation
        renames or deletes it; so does deleting the directory.)"""
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            what = 'deleted'
        except OSError:
            return True  # cannot tell: the write reports its own error
        else:
            if (st.st_dev, st.st_ino) == self._file_id:
                return True
            what = 'replaced'
        LOG.info(
            'instrument: span file %s was moved or %s (log '
            'rotation?); writing to a new file at that path',
            self.path,
            what,
        )
        return False

    def write(self, batch: list, first_seq: int, pid: int) -> None:
        data, lost = record.encode_lines(batch, first_seq, pid)
        if lost:
            self.dropped += lost
        if not data:
            return
        try:
            fd = self._open(pid)
        except OSError as exc:
            self.dropped += data.count(b'\n')
            self._report_failure(exc)
            return
        lead = 0
        if self._cut is not None and self._cut == self._file_id:
            # The last write stopped inside a line: end that line, so
            # that only its record is lost.
            data = b'\n' + data
            lead = 1
        done = 0
        try:
            with memoryview(data) as view:
                while done < len(data):
                    written = self._os_write(fd, view[done:])
                    if written <= 0:
                        raise OSError(
                            errno.EIO, 'write returned %r' % (written,)
                        )
                    done += written
        except OSError as exc:
            # Only the records whose line was not written in full are
            # lost (the one cut short among them).
            self.dropped += data.count(b'\n', max(done, lead))
            if done:
                self._cut = None if data[done - 1] == _NL else self._file_id
            self._report_failure(exc)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                self._close_fd()
            return
        self._cut = None
        if self._failing is not None:
            LOG.warning('instrument: writing span file %s again', self.path)
            self._failing = None

    def _report_failure(self, exc: OSError) -> None:
        self.last_error = str(exc)
        key = (exc.errno, exc.filename)
        if self._failing == key:
            return
        self._failing = key
        LOG.error(
            'instrument: cannot write span events to %s (%s); the '
            'service keeps running, lost events are counted in '
            'sink.drops records and this is logged once per cause',
            self.path or self.directory,
            exc,
        )

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
