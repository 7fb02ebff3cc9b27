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
"""A worker's stop loses nothing it measured, under every launcher.

oslo.service's ``ProcessLauncher`` (eventlet backend: ``_start_child``
ends the child with ``os._exit``; threading backend: cotyledon's
worker ends with ``os._exit``) and a bare cotyledon ``ServiceManager``
run one forked worker that only runs SQL (sqlite through oslo.db), in
its start and in its stop.  The launcher is stopped the way systemd does
(SIGTERM); every statement must be in the worker's span file, one by one
or in ``sql.agg`` aggregates of an interval that was still open.  The
versions are nova 34's (``constraints/nova-34.txt``); on releases whose
oslo.service has no threading backend (nova 29, 31) only the eventlet
launcher runs (oslo.service 3 without ``backend``: eventlet only).
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import fixtures
import testtools

START_STATEMENTS = 200
STOP_STATEMENTS = 50

# argv: launcher, span dir, database file, ready file, threshold (ms),
# statements in start, statements in stop.
LAUNCHER = '''
import sys
if sys.argv[1] == 'oslo.service-eventlet':
    import eventlet
    eventlet.monkey_patch()

import os
import threading

from oslo_config import cfg

import instrument
from instrument import opts

launcher_name, out, db, ready, threshold = sys.argv[1:6]
START, STOP = int(sys.argv[6]), int(sys.argv[7])

conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in (('enabled', True), ('output_dir', out),
                   ('flush_interval', 60.0),
                   ('slow_query_threshold', float(threshold)),
                   ('sql_aggregate_interval', 3600.0)):
    conf.set_override(key, value, 'instrument')
# As nova's services (the notifier driver): in the parent, before fork.
instrument.setup(conf, 'nova-conductor', points=[])

_engine = []


def run_sql(count):
    from oslo_db.sqlalchemy import engines
    import sqlalchemy
    if not _engine:
        _engine.append(engines.create_engine('sqlite:///' + db))
    with _engine[0].connect() as conn:
        for n in range(count):
            conn.execute(sqlalchemy.text('SELECT %d AS probe' % n))


def announce():
    with open(ready + '.tmp', 'w') as f:
        f.write(str(os.getpid()))
    os.rename(ready + '.tmp', ready)


if launcher_name.startswith('oslo.service'):
    try:
        from oslo_service import backend
    except ImportError:  # before oslo.service 4 (nova 29, 31): eventlet
        backend = None
    if backend is not None:
        backend.init_backend(backend.BackendType.EVENTLET
                             if launcher_name.endswith('eventlet')
                             else backend.BackendType.THREADING)
    from oslo_service import service

    class Worker(service.Service):
        def start(self):
            super().start()
            run_sql(START)
            announce()

        def stop(self, graceful=False):
            run_sql(STOP)
            super().stop(graceful)

    launcher = service.ProcessLauncher(conf)
    launcher.launch_service(Worker(), workers=1)
    launcher.wait()
else:
    import cotyledon

    class Worker(cotyledon.Service):
        def __init__(self, worker_id):
            super().__init__(worker_id)
            self._stopped = threading.Event()

        def run(self):
            run_sql(START)
            announce()
            self._stopped.wait()

        def terminate(self):
            run_sql(STOP)
            self._stopped.set()

    manager = cotyledon.ServiceManager()
    manager.add(Worker, workers=1)
    manager.run()
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


def _threading_backend() -> bool:
    """oslo.service has its threading backend (cotyledon's), as with
    nova 33 and 34; older releases' have eventlet only."""
    try:
        from oslo_service import backend
    except ImportError:  # oslo.service 3 (nova 29): eventlet only
        return False
    # oslo.service 4.1 (nova 31) names THREADING but has no module for it
    # (backend/eventlet only); from 4.2 on it is backend/_threading.
    directory = os.path.dirname(backend.__file__)
    return (
        os.path.isdir(os.path.join(directory, '_threading'))
        and importlib.util.find_spec('cotyledon') is not None
    )


class WorkerExitTest(testtools.TestCase):
    def _run(self, launcher: str, threshold: float) -> list:
        tmp = self.useFixture(fixtures.TempDir()).path
        out = os.path.join(tmp, 'spans')
        ready = os.path.join(tmp, 'ready')
        script = os.path.join(tmp, 'launcher.py')
        with open(script, 'w') as f:
            f.write(textwrap.dedent(LAUNCHER))
        log = open(os.path.join(tmp, 'launcher.log'), 'w+')
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [
                sys.executable,
                script,
                launcher,
                out,
                os.path.join(tmp, 'test.db'),
                ready,
                str(threshold),
                str(START_STATEMENTS),
                str(STOP_STATEMENTS),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.addCleanup(self._reap, proc)
        deadline = time.monotonic() + 120
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.fail('the worker did not start:\n' + self._log(log))
            time.sleep(0.05)
        with open(ready) as f:
            worker = int(f.read())
        proc.send_signal(signal.SIGTERM)  # systemd's stop
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            self.fail('the launcher did not stop:\n' + self._log(log))
        files = sorted(os.listdir(out))
        mine = [name for name in files if '_%d_' % worker in name]
        self.assertEqual(
            1,
            len(mine),
            'no span file of worker %d in %s:\n'
            '%s' % (worker, files, self._log(log)),
        )
        with open(os.path.join(out, mine[0]), encoding='utf-8') as f:
            return [json.loads(line) for line in f]

    @staticmethod
    def _log(log) -> str:
        log.flush()
        log.seek(0)
        return log.read()[-4000:]

    @staticmethod
    def _reap(proc) -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def _check(self, launcher: str) -> None:
        total = START_STATEMENTS + STOP_STATEMENTS
        # Every statement one by one...
        self.assertEqual((total, 0), probe_counts(self._run(launcher, 0)))
        # ...and, at 5 ms (the deployment), in the aggregates of
        # the interval still open when the worker ended (a statement
        # slowed down by a busy machine is written one by one).
        single, aggregated = probe_counts(self._run(launcher, 5))
        self.assertEqual(total, single + aggregated)
        self.assertGreater(aggregated, total // 2)

    def test_oslo_service_eventlet_backend(self):
        self._check('oslo.service-eventlet')

    @testtools.skipUnless(
        _threading_backend(),
        'no threading backend in this oslo.service (nova 29, 31)',
    )
    def test_oslo_service_threading_backend(self):
        self._check('oslo.service-threading')

    @testtools.skipUnless(
        _threading_backend(),
        'no cotyledon with this oslo.service (nova 29, 31)',
    )
    def test_cotyledon(self):
        self._check('cotyledon')
