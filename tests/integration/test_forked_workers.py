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
"""The metrics of forked nova workers, summed, none lost at an exit.

nova-api runs nova's WSGI application (``nova.wsgi.osapi_compute``)
under gunicorn, a pre-forking server: the master loads the application
(``--preload``, as uwsgi does by default: nova's notifier driver starts
the instrumentation there), then forks ``API_WORKERS`` sync workers,
each of which exits after ``MAX_REQUESTS`` requests (gunicorn's
``--max-requests``) and is replaced by a new fork.  nova-conductor runs
with ``[conductor] workers = 2`` (oslo.service forks them); one of its
workers is killed with SIGTERM once the metrics show its RPC
dispatches (after its flush), and its launcher forks another.  Every
service writes its state file into ``[instrument] metrics_dir``; the
api-paste.ini carries the ``instrument`` filter, as README says.

The test sends ``requests`` it counts itself (flavors, boots, the
settle polls; no readiness probe: the cloud waits for nova-api's port
only), and the exposition of ``instrument-metrics dump`` (parsed with
prometheus_client's parser) must count exactly as many ``api.request``
spans, summed over every nova-api process, the exited workers
included; the conductor's ``conductor.schedule_and_build_instances``
exactly one per boot, the killed worker's included; and the counts
never go down between two scrapes while workers come and go.

No compute: every boot is buried in cell0 (NoValidHost), so the
conductor's only RPC work is the boots.  Two to three minutes on two
cores (most of it the databases made by nova-manage).
"""

import concurrent.futures
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

from prometheus_client import parser as prom_parser
import testtools

from tests.integration import backends
from tests.integration import cloud
from tests.integration import load
from tests.integration import procs
from tests.integration import test_deployment

HERE = os.path.dirname(os.path.abspath(__file__))
API_WORKERS = 2
MAX_REQUESTS = 6
CONDUCTOR_WORKERS = 2
BOOTS_BEFORE_KILL = 4
BOOTS_AFTER_KILL = 4
GETS = 24
CONCURRENCY = 4
SETTLE_TIMEOUT_S = 120
SPAN_COUNT = 'instrument_span_duration_seconds_count'
API_EVENT = ('api', 'api.request')
CONDUCTOR_EVENT = ('conductor', 'conductor.schedule_and_build_instances')


def work_dir() -> str:
    base = os.environ.get('INSTRUMENT_IT_LOG_DIR')
    if not base:
        return tempfile.mkdtemp(prefix='instrument-it-forked-')
    path = os.path.join(base, 'forked-workers')
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def gunicorn_argv(port: int) -> list:
    return [
        sys.executable,
        '-m',
        'gunicorn',
        '--preload',
        '--workers',
        str(API_WORKERS),
        '--worker-class',
        'sync',
        '--max-requests',
        str(MAX_REQUESTS),
        '--max-requests-jitter',
        '0',
        '--graceful-timeout',
        '10',
        '--bind',
        '127.0.0.1:%d' % port,
        '--pythonpath',
        HERE,
        "wsgi_server:gunicorn_app('nova.wsgi.osapi_compute')",
    ]


class CountingApi(load.Api):
    """The compute API client of the load, counting every request it
    sends (each one is one ``api.request`` span of nova-api)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.sent = 0
        self._lock = threading.Lock()

    def call(self, method, path, body=None, ok=(200, 201, 202, 204)):
        with self._lock:
            self.sent += 1
        return super().call(method, path, body, ok)


def dump(metrics_dir: str) -> str:
    """``instrument-metrics dump`` of the directory (this tree's)."""
    return subprocess.run(
        [sys.executable, '-m', 'instrument.cmd.metrics', 'dump', metrics_dir],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


def span_counts(text: str) -> dict:
    """``{(component, event): count}`` summed over every service of the
    exposition, as prometheus_client's parser reads it."""
    out: dict = {}
    for family in prom_parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != SPAN_COUNT:
                continue
            key = (sample.labels['component'], sample.labels['event'])
            out[key] = out.get(key, 0) + int(sample.value)
    return out


def state_files(metrics_dir: str, svc: str) -> list:
    """The state files of the processes of a service (``svc``: api,
    conductor ...; the file is named by the program, nova-api's by its
    WSGI application's, ``nova-api-os-compute``)."""
    out = []
    for path in glob.glob(os.path.join(metrics_dir, '*.json')):
        with open(path) as f:
            doc = json.load(f)
        if doc.get('svc') == svc:
            out.append(doc)
    return out


def file_count(doc: dict, key: tuple) -> int:
    for row in doc['families'].get('instrument_span_duration_seconds', []):
        if tuple(row[:2]) == key:
            return sum(row[-1][:-1])
    return 0


def children(pid: int) -> list:
    out = []
    for stat in glob.glob('/proc/[0-9]*/stat'):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.split('/')[2]))
    return sorted(out)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Run:
    """What the run saw."""

    def __init__(self) -> None:
        self.work_dir = None
        self.metrics_dir = None
        self.sent = 0
        self.boots = []
        self.scrapes = []  # span_counts() while the run went on
        self.killed_conductor = None
        self.api_exited = []  # nova-api state files of workers gone
        self.conductor_files = []
        self.final = None  # the exposition after every service stopped
        self.problems = []


def wait_for_count(run: Run, key: tuple, want: int, services) -> None:
    def ready():
        counts = span_counts(dump(run.metrics_dir))
        run.scrapes.append(counts)
        return counts.get(key, 0) >= want

    procs.wait_for(
        '%d %s in the metrics' % (want, key[1]), ready, services, 60, 0.5
    )


def boot_and_settle(api: CountingApi, boots: list) -> None:
    api.boot_all(boots, CONCURRENCY)
    api.settle(boots, SETTLE_TIMEOUT_S)


def run_cloud() -> Run:
    out = Run()
    out.work_dir = work_dir()
    out.metrics_dir = os.path.join(out.work_dir, 'metrics')
    the_cloud = cloud.Cloud(
        [],
        out.work_dir,
        controller={
            'instrument': {'metrics_dir': out.metrics_dir},
            'conductor': {'workers': CONDUCTOR_WORKERS},
        },
        api=gunicorn_argv,
    )
    the_cloud.start()
    try:
        conductor = next(
            s for s in the_cloud.services if s.name == 'nova-conductor'
        )
        api = CountingApi(the_cloud.api_url)
        tiny = api.create_flavor('it.tiny', 1, 64, 1)
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            for future in [
                pool.submit(api.call, 'GET', '/flavors')
                for _ in range(GETS // 2)
            ]:
                future.result()
        first = [
            load.Boot('forked-%02d' % n, tiny, cloud.standins.IMAGE_ID)
            for n in range(BOOTS_BEFORE_KILL)
        ]
        boot_and_settle(api, first)
        out.boots.extend(first)
        # one conductor worker goes, once the metrics hold what the
        # workers did (its state file flushed)
        wait_for_count(out, CONDUCTOR_EVENT, len(first), [conductor])
        workers = children(conductor.pid)
        if len(workers) < CONDUCTOR_WORKERS:
            raise AssertionError(
                'nova-conductor forked %s, not %d workers'
                % (workers, CONDUCTOR_WORKERS)
            )
        # the worker that dispatched boots (RabbitMQ spreads them over
        # both consumers of the queue; either may have had them all)
        files = {
            doc['pid']: file_count(doc, CONDUCTOR_EVENT)
            for doc in state_files(out.metrics_dir, 'conductor')
        }
        out.killed_conductor = max(workers, key=lambda p: files.get(p, 0))
        os.kill(out.killed_conductor, signal.SIGTERM)
        procs.wait_for(
            'conductor worker %d to exit' % out.killed_conductor,
            lambda: not alive(out.killed_conductor),
            [conductor],
            60,
        )
        procs.wait_for(
            'the conductor launcher to fork a new worker',
            lambda: len(children(conductor.pid)) >= CONDUCTOR_WORKERS,
            [conductor],
            60,
        )
        out.scrapes.append(span_counts(dump(out.metrics_dir)))
        second = [
            load.Boot('forked-%02d' % n, tiny, cloud.standins.IMAGE_ID)
            for n in range(
                BOOTS_BEFORE_KILL, BOOTS_BEFORE_KILL + BOOTS_AFTER_KILL
            )
        ]
        boot_and_settle(api, second)
        out.boots.extend(second)
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            for future in [
                pool.submit(api.call, 'GET', '/flavors')
                for _ in range(GETS - GETS // 2)
            ]:
                future.result()
        out.scrapes.append(span_counts(dump(out.metrics_dir)))
        # the nova-api workers that exited while the cloud ran
        # (--max-requests), before the cloud stops
        out.api_exited = [
            doc
            for doc in state_files(out.metrics_dir, 'api')
            if not alive(doc['pid'])
        ]
        out.sent = api.sent
    finally:
        out.problems.extend(the_cloud.stop())
    out.conductor_files = state_files(out.metrics_dir, 'conductor')
    out.final = dump(out.metrics_dir)
    with open(os.path.join(out.work_dir, 'metrics.prom'), 'w') as f:
        f.write(out.final)
    return out


class ForkedWorkersTest(testtools.TestCase):
    cloud_run = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            backends.require()
        except backends.Unavailable as exc:
            if test_deployment._in_ci():
                raise RuntimeError(
                    'integration back ends missing under CI=true: %s' % exc
                ) from exc
            raise unittest.SkipTest(
                'integration back ends missing: %s' % exc
            ) from exc
        try:
            import gunicorn  # noqa: F401
        except ImportError as exc:
            if test_deployment._in_ci():
                raise
            raise unittest.SkipTest('gunicorn is not installed') from exc
        cls.cloud_run = run_cloud()

    def setUp(self):
        super().setUp()
        self.addDetail(
            'exposition',
            testtools.content.text_content(self.cloud_run.final or ''),
        )

    def test_every_api_request_counted_once(self):
        counts = span_counts(self.cloud_run.final)
        self.assertEqual(self.cloud_run.sent, counts.get(API_EVENT))
        # more requests than the workers serve before they exit: some
        # were served by workers that exited while the cloud ran
        self.assertGreater(self.cloud_run.sent, API_WORKERS * MAX_REQUESTS)
        self.assertTrue(self.cloud_run.api_exited)
        for doc in self.cloud_run.api_exited:
            self.assertTrue(doc['final'], doc['pid'])
        self.assertGreater(
            sum(file_count(d, API_EVENT) for d in self.cloud_run.api_exited), 0
        )

    def test_every_boot_dispatched_once(self):
        counts = span_counts(self.cloud_run.final)
        self.assertEqual(
            len(self.cloud_run.boots), counts.get(CONDUCTOR_EVENT)
        )
        # the killed worker's file keeps its dispatches in the sum
        [killed] = [
            d
            for d in self.cloud_run.conductor_files
            if d['pid'] == self.cloud_run.killed_conductor
        ]
        self.assertGreater(file_count(killed, CONDUCTOR_EVENT), 0)
        # SIGTERM: oslo.service's worker exits gracefully, its writer
        # writes the last state
        self.assertTrue(killed['final'])
        # one file per process: the launcher, two workers, the new one
        self.assertGreaterEqual(
            len(self.cloud_run.conductor_files), CONDUCTOR_WORKERS + 2
        )

    def test_counts_never_go_down(self):
        scrapes = self.cloud_run.scrapes + [span_counts(self.cloud_run.final)]
        for key in (API_EVENT, CONDUCTOR_EVENT):
            seen = [s.get(key, 0) for s in scrapes]
            self.assertEqual(sorted(seen), seen, key)

    def test_clean_stop(self):
        self.assertEqual([], self.cloud_run.problems)
