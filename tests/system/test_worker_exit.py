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
"""A forked worker that only runs SQL, then ends: nothing is lost.

oslo.service and cotyledon end their workers with ``os._exit()``, which
skips ``atexit``; the runtime hooks ``os._exit`` to write first.  The
launchers themselves are exercised in
``tests/functional/nova/test_worker_exit.py``; here a bare ``fork``.
"""

import json
import os

from tests.unit import base

# argv: span dir, database file, statements, threshold (ms), flush
# interval (s), how the child ends: "exit" (os._exit) or "kill" (SIGKILL
# after 1 s: only the writer can have written anything).
FORKED_SQL_WORKER = '''
import json
import os
import signal
import sys
import time

from oslo_config import cfg
from oslo_db.sqlalchemy import engines
import sqlalchemy

import instrument
from instrument import opts

out, db, count, threshold, interval, ending = sys.argv[1:]
conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in (('enabled', True), ('output_dir', out),
                   ('flush_interval', float(interval)),
                   ('slow_query_threshold', float(threshold)),
                   ('sql_aggregate_interval', 3600.0)):
    conf.set_override(key, value, 'instrument')
# As nova's services: set up in the parent, before the workers fork.
instrument.setup(conf, 'nova-conductor', points=[])
pid = os.fork()
if pid == 0:
    engine = engines.create_engine('sqlite:///' + db)
    with engine.connect() as conn:
        for n in range(int(count)):
            conn.execute(sqlalchemy.text('SELECT %d AS probe' % n))
    if ending == 'kill':
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(json.dumps({'child': pid, 'status': status}))
'''


def probe_counts(records: list) -> tuple:
    """(one-by-one records, aggregated count) of the probe statement."""
    fps = {
        r['attrs']['fp']
        for r in records
        if r['ev'] == 'sql.fingerprint' and 'probe' in r['attrs']['text']
    }
    single = [
        r
        for r in records
        if r['ev'] == 'sql.query' and r['attrs']['fp'] in fps
    ]
    aggregated = sum(
        r['attrs']['count']
        for r in records
        if r['ev'] == 'sql.agg' and r['attrs']['fp'] in fps
    )
    return len(single), aggregated


class ForkedSqlWorkerTest(base.TestCase):
    def _run(
        self, threshold: float, interval: float, ending: str, count: int = 300
    ) -> list:
        out = os.path.join(self.tmp, 'spans')
        proc = self.run_script(
            FORKED_SQL_WORKER,
            out,
            os.path.join(self.tmp, 'test.db'),
            str(count),
            str(threshold),
            str(interval),
            ending,
        )
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        child = json.loads(proc.stdout)['child']
        files = base.read_span_files(out) if os.path.isdir(out) else {}
        mine = [name for name in files if '_%d_' % child in name]
        self.assertEqual(
            1, len(mine), 'no span file of the child: %s' % sorted(files)
        )
        return files[mine[0]]

    def test_every_statement_written_at_os_exit(self):
        records = self._run(threshold=0, interval=60.0, ending='exit')
        self.assertEqual((300, 0), probe_counts(records))

    def test_every_aggregate_written_at_os_exit(self):
        # 1 s: every statement is aggregated, in an interval of an hour
        # that is still open when the child exits.
        records = self._run(threshold=1000, interval=60.0, ending='exit')
        self.assertEqual((0, 300), probe_counts(records))

    def test_sql_alone_starts_the_writer_of_a_forked_child(self):
        records = self._run(threshold=0, interval=0.05, ending='kill')
        self.assertEqual((300, 0), probe_counts(records))


# argv: span dir, database file, statements, threshold (ms), children.
# Each child runs the statements, then two of its threads call
# ``os._exit`` about 1 ms apart (as two shutdown sequences of one
# worker do); the parent waits for each child before forking the next.
TWO_EXITING_THREADS = '''
import json
import os
import sys
import threading
import time

from oslo_config import cfg
from oslo_db.sqlalchemy import engines
import sqlalchemy

import instrument
from instrument import opts

out, db, count, threshold, children = sys.argv[1:]
conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in (('enabled', True), ('output_dir', out),
                   ('flush_interval', 60.0),
                   ('slow_query_threshold', float(threshold)),
                   ('sql_aggregate_interval', 3600.0)):
    conf.set_override(key, value, 'instrument')
instrument.setup(conf, 'nova-conductor', points=[])
engine = engines.create_engine('sqlite:///' + db)
pids = []
for _ in range(int(children)):
    pid = os.fork()
    if pid == 0:
        engine.dispose(close=False)
        with engine.connect() as conn:
            for n in range(int(count)):
                conn.execute(sqlalchemy.text('SELECT %d AS probe' % n))
        first = threading.Thread(target=os._exit, args=(0,))
        second = threading.Thread(target=os._exit, args=(0,))
        first.start()
        time.sleep(0.001)
        second.start()
        time.sleep(60)
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    pids.append((pid, status))
print(json.dumps(pids))
'''


class ConcurrentExitTest(base.TestCase):
    """Two threads of one worker call ``os._exit`` about 1 ms apart:
    the first flushes, the second waits for that flush."""

    STATEMENTS = 5000
    CHILDREN = 4

    def _check(self, threshold: float) -> None:
        out = os.path.join(self.tmp, 'spans')
        proc = self.run_script(
            TWO_EXITING_THREADS,
            out,
            os.path.join(self.tmp, 'test.db'),
            str(self.STATEMENTS),
            str(threshold),
            str(self.CHILDREN),
        )
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        files = base.read_span_files(out) if os.path.isdir(out) else {}
        for pid, status in json.loads(proc.stdout):
            self.assertEqual(0, status)
            mine = [name for name in files if '_%d_' % pid in name]
            self.assertEqual(
                1,
                len(mine),
                'no span file of child %d: %s' % (pid, sorted(files)),
            )
            records = files[mine[0]]
            self.assertEqual(
                self.STATEMENTS, sum(probe_counts(records)), 'child %d' % pid
            )
            self.assertEqual(
                1, sum(1 for r in records if r['ev'] == 'process.end')
            )

    def test_every_statement_written_one_by_one(self):
        self._check(threshold=0)

    def test_every_statement_aggregated(self):
        self._check(threshold=1000)
