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
"""Rule 8 (``service_saturation``) on nova's services in their own
processes.

In-process (tests/functional) every nova service is a thread of one
process, whose CPU cannot say which service burns it: the rule is only
proven silent there.  Here nova-scheduler is its own process
(``[scheduler] workers = 1``, the cloud's controller configuration),
started by ``busy_scheduler.py``: nova's console script whose
``select_destinations`` first computes ``BURN_S`` CPU seconds without
releasing the interpreter (a scheduler weighing many hosts, one
interpreter's worth).  ``CALM`` boots one at a time (the scheduler's
first messages do not queue: the rule compares the queue's peak with
its start), then a burst of ``SERVERS`` boots, all posted at once,
makes the conductor call it faster than it answers: its messages queue
while the process runs a core.  The analyser must name
``[scheduler] workers`` with the value the scheduler ran with; the same
cloud and load with a scheduler that does not burn (the launcher with
``BURN_S`` 0) must stay silent.

One plain compute, no skew; resources sampled every
``SAMPLE_INTERVAL_S`` (the default, 5 s, is longer than the burst).
Each class starts its own cloud (about a minute on two cores).
Knobs: ``INSTRUMENT_IT_LOG_DIR`` (work directories
``saturation-busy``, ``saturation-calm``), ``CI`` (as
``test_deployment``).
"""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest

import testtools

from instrument.analysis import pipeline
from instrument.analysis.render import json as report_json
from instrument.analysis.render import text as report_text
from tests.integration import backends
from tests.integration import cloud
from tests.integration import load
from tests.integration import moves as moves_mod
from tests.integration import test_deployment

HERE = os.path.dirname(os.path.abspath(__file__))
COMPUTES = [cloud.Compute('compute-1', 'fake.FakeDriver', 0.0)]
BURN_S = 1.0
SERVERS = 12
CALM = 4
SAMPLE_INTERVAL_S = 0.25
SETTLE_TIMEOUT_S = 120


def work_dir(name: str) -> str:
    base = os.environ.get('INSTRUMENT_IT_LOG_DIR')
    if not base:
        return tempfile.mkdtemp(prefix='instrument-it-%s-' % name)
    path = os.path.join(base, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


class Run:
    """What one burst produced."""

    def __init__(self) -> None:
        self.work_dir = None
        self.span_dir = None
        self.boots = []
        self.report = None
        self.problems = []
        self.timings = {}


def run_burst(name: str, burn_s: float) -> Run:
    out = Run()
    out.work_dir = work_dir(name)
    started = time.monotonic()
    the_cloud = cloud.Cloud(
        COMPUTES,
        out.work_dir,
        scheduler=[sys.executable, os.path.join(HERE, 'busy_scheduler.py')],
        scheduler_env={'INSTRUMENT_IT_BURN_S': str(burn_s)},
        controller={
            'instrument': {'resource_sample_interval': SAMPLE_INTERVAL_S}
        },
    )
    the_cloud.start()
    try:
        api = load.Api(the_cloud.api_url)
        tiny = api.create_flavor('it.tiny', 1, 64, 1)
        # the cloud at ease first: boots one at a time, each ACTIVE
        # before the next (the scheduler's first messages do not queue)
        t = time.monotonic()
        for n in range(CALM):
            boot = api.boot(
                load.Boot('calm-%02d' % n, tiny, cloud.standins.IMAGE_ID)
            )
            api.settle([boot], SETTLE_TIMEOUT_S)
            out.boots.append(boot)
        out.timings['calm_s'] = round(time.monotonic() - t, 1)
        burst = [
            load.Boot('burst-%02d' % n, tiny, cloud.standins.IMAGE_ID)
            for n in range(SERVERS)
        ]
        out.boots.extend(burst)
        out.timings['post_s'] = round(api.boot_all(burst, SERVERS), 1)
        out.timings['settle_s'] = round(api.settle(burst, SETTLE_TIMEOUT_S), 1)
    finally:
        out.problems.extend(the_cloud.stop())
    out.timings.update(the_cloud.timings)
    out.span_dir = the_cloud.span_dir
    out.report = pipeline.analyse(
        [the_cloud.span_dir], pipeline.Options(jobs=1)
    )
    out.timings['total_s'] = round(time.monotonic() - started, 1)
    report_json.write(out.report, os.path.join(out.work_dir, 'report.json'))
    with open(os.path.join(out.work_dir, 'report.txt'), 'w') as f:
        f.write(report_text.render(out.report))
    return out


def scheduler_pids(report: dict) -> set:
    return {p['pid'] for p in report['processes'] if p['svc'] == 'scheduler'}


def measured(run: Run) -> str:
    """The scheduler's queue waits and its CPU rates, from the span
    files (for a failure's message)."""
    spans = moves_mod.read_spans(run.span_dir)
    senders = {
        r['span']: r for r in spans if r['ev'] in ('rpc.call', 'rpc.cast')
    }
    waits = []
    for r in sorted(
        (
            r
            for r in spans
            if r['ev'] == 'rpc.dispatch' and r.get('svc') == 'scheduler'
        ),
        key=lambda r: r['ts'],
    ):
        sender = senders.get(r.get('parent'))
        if sender is not None:
            waits.append(
                '%s %.2f'
                % (
                    (r.get('attrs') or {}).get('method'),
                    (r['ts'] - sender['ts']) / 1e6,
                )
            )
    return 'timings %s; scheduler queue waits (s): %s; cpu rates: %s' % (
        run.timings,
        ', '.join(waits),
        cpu_rates(run),
    )


def cpu_rates(run: Run) -> dict:
    samples: dict = {}
    for name in sorted(os.listdir(run.span_dir)):
        with open(os.path.join(run.span_dir, name)) as f:
            for line in f:
                if '"process.sample"' not in line:
                    continue
                rec = json.loads(line)
                if rec.get('svc') == 'scheduler':
                    attrs = rec['attrs']
                    samples.setdefault(rec['pid'], []).append(
                        (rec['ts'], attrs['cpu_user_s'] + attrs['cpu_sys_s'])
                    )
    out = {}
    for pid, rows in samples.items():
        rows.sort()
        out[pid] = [
            '%.2f' % ((c1 - c0) / ((t1 - t0) / 1e6))
            for (t0, c0), (t1, c1) in zip(rows, rows[1:], strict=False)
            if t1 > t0 and c1 > c0
        ]
    return out


class _Burst(testtools.TestCase):
    name = None
    burn_s = 0.0
    burst = None

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
        cls.burst = run_burst(cls.name, cls.burn_s)
        # the figures of the run, also on the console of tox -e
        # integration
        sys.stderr.write(
            '%s (burn %.1f s): %s\n'
            % (cls.name, cls.burn_s, measured(cls.burst))
        )
        sys.stderr.flush()

    def setUp(self):
        super().setUp()
        self.addDetail(
            'measured', testtools.content.text_content(measured(self.burst))
        )

    def fired(self) -> list:
        return [
            f
            for f in self.burst.report['findings']['findings']
            if f['rule'] == 'service_saturation'
        ]


class _Served:
    """The checks of both bursts (a mixin: ``_Burst`` itself has no
    test, so no cloud of its own)."""

    def test_every_boot_went_through(self):
        # the burst is a test of the rule only if the scheduler served it
        self.assertEqual([], self.burst.problems)
        self.assertEqual(
            ['ACTIVE'] * (CALM + SERVERS), [b.status for b in self.burst.boots]
        )


class SaturatedSchedulerTest(_Served, _Burst):
    name = 'saturation-busy'
    burn_s = BURN_S

    def test_names_the_schedulers_workers(self):
        [f] = self.fired()
        self.assertEqual('service_saturation:scheduler', f['key'])
        [knob] = f['settings']
        self.assertEqual(
            ('scheduler', 'workers'), (knob['section'], knob['option'])
        )
        # the value nova-scheduler ran with (the cloud's nova.conf)
        self.assertEqual(
            [
                {
                    'host': cloud.CONTROLLER,
                    'svc': 'scheduler',
                    'value': 1,
                    'recorded': True,
                }
            ],
            knob['values'],
        )
        # the process named is the scheduler's own, near a core
        [cpu] = f['figures']['cpu']
        self.assertIn(cpu['pid'], scheduler_pids(self.burst.report))
        self.assertGreaterEqual(cpu['mean_cores'], 0.8)
        self.assertIn('conductor', f['figures']['callers'])
        q = f['figures']['queue']
        self.assertGreaterEqual(q['calls'], SERVERS)
        self.assertGreaterEqual(q['peak_mean_us'], 2 * q['first_mean_us'])
        # the requests it shows are boots of the burst
        ids = {b.request_id for b in self.burst.boots}
        self.assertTrue(f['requests'])
        self.assertLessEqual(set(f['requests']), ids)


class SchedulerAtEaseTest(_Served, _Burst):
    name = 'saturation-calm'
    burn_s = 0.0

    def test_silent(self):
        self.assertEqual([], self.fired())
