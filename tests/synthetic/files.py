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
"""Writing the synthetic cloud's records as span files.

One file per process, named as the ``file`` sink names them
(``instrument.sinks.file.file_name``); computes with an odd index are
gzip-compressed (rotated files), one api process writes through the
``log`` sink into a service log, between nova's own log lines.  Records
leave a process in the order they became visible (an ``X`` record when
its span ended), numbered by ``seq``, encoded from the runtime's tuples
by ``instrument.runtime.record.to_dict``.

With ``bad_input`` the conductor's file gets a duplicate line, a
malformed line, a record of an unknown schema version, one without its
host and a gap of 5 in ``seq``; a killed api worker's last line is cut
short.  Each one is noted in the truth.
"""

import gzip
import heapq
import json
import os

from instrument.runtime import record
from instrument.sinks import file as file_sink
from tests.synthetic import procs


class SpanFiles:
    """The files of a ``Cloud``'s processes in ``directory``."""

    def __init__(self, cloud, directory: str) -> None:
        self.cloud = cloud
        self.directory = directory

    def open(self, proc: procs.Proc, t: int) -> None:
        started = (t + proc.skew) / 1e6
        name = file_sink.file_name(proc.host, proc.service, proc.pid, started)
        if proc.fmt == 'log':
            name = '%s_%s_%d.log' % (proc.host, proc.service, proc.pid)
        if proc.gz:
            name += '.gz'
        proc.path = os.path.join(self.directory, name)
        proc.fh = (
            gzip.open(proc.path, 'wt', encoding='utf-8')
            if proc.gz
            else open(proc.path, 'w', encoding='utf-8')
        )
        self.cloud.truth.files.append(name)
        proc.put(
            t,
            record.meta(
                'process.start',
                proc.host,
                proc.svc,
                proc.raw(t),
                {
                    'service': proc.service,
                    'version': 'synthetic',
                    'mode': 'threads',
                    'points': {
                        'patched': [],
                        'pending': [],
                        'missing': [],
                        'failed': [],
                    },
                },
            ),
        )

    _dumps = json.JSONEncoder(
        separators=(',', ':'), ensure_ascii=False, default=str
    ).encode

    def _write_line(self, proc: procs.Proc, text: str, kind=None) -> None:
        if proc.fmt == 'log':
            if proc.lines % 3 == 0:
                proc.fh.write(
                    '2023-11-14 22:13:20.000 %d INFO '
                    'nova.api.openstack.requestlog [-] GET '
                    '/v2.1/servers status: 200\n' % proc.pid
                )
                proc.lines += 1
            text = (
                '2023-11-14 22:13:20.000 %d INFO instrument.spans [-] '
                '%s' % (proc.pid, text)
            )
        proc.fh.write(text + '\n')
        proc.lines += 1
        if kind:
            self.cloud.truth.bad_lines.append(
                (os.path.basename(proc.path), proc.lines, kind)
            )

    def flush(self, until: int) -> None:
        for proc in self.cloud.procs:
            pending = proc.pending
            while pending and pending[0][0] <= until:
                _when, _n, rec = heapq.heappop(pending)
                self._emit(proc, rec)

    def _emit(self, proc: procs.Proc, rec: tuple) -> None:
        data = record.to_dict(rec, proc.seq, proc.pid)
        proc.seq += 1
        text = self._dumps(data)
        self.cloud.truth.events += 1
        self._write_line(proc, text)
        if not self.cloud.bad_input or proc is not self.cloud.conductor:
            return
        # Bad input, injected around known records of the conductor.
        if data['seq'] == 40:
            self._write_line(proc, text, 'duplicate')
        elif data['seq'] == 60:
            self._write_line(proc, '{"v":1,"ph":"X","seq":', 'malformed')
        elif data['seq'] == 80:
            bad = dict(data, v=2)
            self._write_line(proc, self._dumps(bad), 'unknown_version')
        elif data['seq'] == 100:
            bad = dict(data)
            del bad['host']
            self._write_line(proc, self._dumps(bad), 'invalid')
        elif data['seq'] == 120:
            proc.seq += 5
            self.cloud.truth.seq_missing[os.path.basename(proc.path)] = 5

    def finish(self, t: int) -> None:
        # sink.drops from one compute: events lost in its buffer
        lost = self.cloud.buffer_drops
        if lost:
            proc = self.cloud.computes[0]
            proc.put(
                t + 3_600_000_000,
                record.counter(
                    'sink.drops',
                    proc.host,
                    proc.svc,
                    proc.raw(t + 3_600_000_000),
                    {'buffer_full': lost, 'file': 0},
                ),
            )
            self.cloud.truth.drops[os.path.basename(proc.path)] = lost
        self.flush(1 << 62)
        for proc in self.cloud.procs:
            if proc is self.cloud.killed:
                # killed mid-write: the last line is cut short
                text = self._dumps(
                    record.to_dict(
                        record.meta(
                            'process.points',
                            proc.host,
                            proc.svc,
                            proc.raw(t),
                            {'patched': ['x'], 'missing': []},
                        ),
                        proc.seq,
                        proc.pid,
                    )
                )
                proc.fh.write(text[: len(text) // 2])
                proc.lines += 1
                self.cloud.truth.bad_lines.append(
                    (os.path.basename(proc.path), proc.lines, 'truncated')
                )
            proc.fh.close()
