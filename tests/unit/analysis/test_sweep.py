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
"""The sweep (``analysis.sweep``) on hand-made runs with known figures.

Each run is a report holding boot request rows whose critical path per
component, start and end are planted, so its throughput, rates and
stack are known; four loads where the throughput grows, then flattens
while the scheduler's share grows, must give the saturation point at
the flat step, named with the scheduler.
"""

import contextlib
import io
import json
import os
import shutil
import tempfile

import fixtures
import jsonschema
import testtools

from instrument.analysis import pipeline
from instrument.analysis import sweep
from instrument.analysis.render import sweep as sweep_html
from instrument.cmd import report as report_cmd
from tests.synthetic import cloud as synthetic_cloud
from tests.synthetic import nova as synthetic_nova

S = 1_000_000


def request(
    i: int,
    start: int,
    cp: dict,
    state: str = 'success',
    attempts: int = 1,
    kind: str = 'boot',
) -> dict:
    latency = sum(cp.values())
    return {
        'req': 'req-%d' % i,
        'kind': kind,
        'state': state,
        'start_us': start,
        'end_us': start + latency,
        'latency_us': latency,
        'instances': [
            {'inst': 'i-%d' % i, 'state': state, 'attempts': attempts}
        ],
        'critical_path_us': dict(cp),
        'components_us': dict(cp),
        'attempts': attempts,
        'db_retries': 0,
        'lost_ends': 0,
    }


def run_report(
    rps: float,
    scheduler_s: float,
    n: int = 20,
    failed: int = 0,
    retried: int = 0,
    services: bool = True,
) -> dict:
    """``n`` boots finishing at ``rps`` per second, each with a
    critical path of 0.2 s api, 0.3 s conductor, ``scheduler_s``
    scheduler and 1 s compute; the first ``failed`` fail, the next
    ``retried`` succeed after a reschedule."""
    cp = {
        'api': int(0.2 * S),
        'conductor': int(0.3 * S),
        'scheduler': int(scheduler_s * S),
        'compute': 1 * S,
    }
    latency = sum(cp.values())
    window = n / rps * S
    step = (window - latency) / (n - 1)
    rows = []
    for i in range(n):
        state, attempts = 'success', 1
        if i < failed:
            state = 'error'
        elif i < failed + retried:
            state, attempts = 'rescheduled_success', 2
        rows.append(request(i, int(i * step), cp, state, attempts))
    res = {}
    if services:
        res = {
            'services': {
                'nova-scheduler': {
                    'processes': 1,
                    'hosts': ['h'],
                    'library': {
                        'writer_cpu_s': 0.5,
                        'process_cpu_s': 10.0,
                        'processes': 1,
                    },
                    'phases': {
                        'load': {
                            'cpu_cores': {
                                'mean': scheduler_s,
                                'peak': 2 * scheduler_s,
                            },
                            'rss_mb': {'mean': 100.0, 'peak': 120.0},
                        }
                    },
                }
            }
        }
    return {
        'report_version': pipeline.REPORT_VERSION,
        'inputs': {'files': ['x'], 'records': 100, 'lines': 100},
        'summary': {},
        'sql': {'calls': 0},
        'requests': rows,
        'releases': [{'nova': '34.0.0', 'mode': 'threads'}],
        'resources': res,
    }


# concurrency: (throughput, scheduler seconds)
PLAN = {5: (1.0, 0.1), 20: (3.0, 0.12), 50: (5.0, 0.15), 100: (5.1, 2.0)}


def planted(plan: dict = PLAN) -> list:
    return [
        ('c%d' % c, {'concurrency': str(c)}, run_report(*fig))
        for c, fig in reversed(list(plan.items()))
    ]


class TestSweep(testtools.TestCase):
    def test_throughput_and_rates_per_run(self):
        result = sweep.sweep(planted())
        self.assertEqual('concurrency', result['key'])
        self.assertEqual([5, 20, 50, 100], [r['load'] for r in result['runs']])
        for run, (rps, sched) in zip(
            result['runs'], PLAN.values(), strict=True
        ):
            f = run['operations']['boot']
            self.assertAlmostEqual(rps, f['throughput_rps'], places=3)
            self.assertEqual(1.0, f['success_rate'])
            self.assertAlmostEqual(
                sched * S, f['components']['scheduler']['median_us'], delta=1
            )
            self.assertAlmostEqual(
                sched / (1.5 + sched),
                f['components']['scheduler']['share'],
                places=4,
            )
            self.assertEqual(
                {
                    'cpu_mean': sched,
                    'cpu_peak': 2 * sched,
                    'rss_mean_mb': 100.0,
                    'rss_peak_mb': 120.0,
                    'processes': 1,
                    'library_share': 0.05,
                },
                run['resources']['nova-scheduler'],
            )
            self.assertEqual(['34.0.0 (threads)'], run['releases'])

    def test_saturation_where_throughput_flattens(self):
        sat = sweep.sweep(planted())['saturation']['boot']
        self.assertEqual(100, sat['load'])
        self.assertEqual(50, sat['after'])
        self.assertEqual('throughput', sat['why'])
        self.assertAlmostEqual(0.02, sat['growth'], places=3)
        self.assertEqual('scheduler', sat['component'])
        text = sweep.saturation_text('boot', sat, 'concurrency')
        self.assertIn('boot saturates at concurrency=100', text)
        self.assertIn('scheduler grew from 9% to 57%', text)

    def test_saturation_where_a_share_jumps(self):
        # throughput still grows 40 % at 50, but the scheduler's share
        # jumps there
        plan = {
            5: (1.0, 0.1),
            20: (3.0, 0.12),
            50: (4.2, 1.0),
            100: (8.0, 1.0),
        }
        sat = sweep.sweep(planted(plan))['saturation']['boot']
        self.assertEqual(
            (50, 'share', 'scheduler'),
            (sat['load'], sat['why'], sat['component']),
        )

    def test_no_saturation(self):
        plan = {5: (1.0, 0.1), 20: (3.0, 0.1), 50: (6.0, 0.1)}
        result = sweep.sweep(planted(plan))
        self.assertIsNone(result['saturation']['boot'])
        self.assertIn('no saturation', sweep.render(result))

    def test_failed_and_retried_apart(self):
        runs = [
            (
                'a',
                {'concurrency': '1'},
                run_report(1.0, 0.5, n=10, failed=2, retried=3),
            ),
            ('b', {'concurrency': '2'}, run_report(2.0, 0.5, n=10)),
        ]
        f = sweep.sweep(runs)['runs'][0]['operations']['boot']
        self.assertEqual(
            (0.8, 0.2, 0.3),
            (f['success_rate'], f['failure_rate'], f['retry_rate']),
        )
        latency = 2.0 * S
        stack = f['stack_us']
        # 2 of 10 failed, 3 succeeded on a retry (success too): the
        # whole latency of both apart
        self.assertAlmostEqual(0.2 * latency, stack['failed'], delta=1)
        self.assertAlmostEqual(0.3 * latency, stack['retried'], delta=1)
        self.assertAlmostEqual(0.5 * 0.5 * S, stack['scheduler'], delta=1)
        self.assertAlmostEqual(latency, sum(stack.values()), delta=5)
        self.assertEqual(
            ['compute', 'scheduler', 'conductor', 'api', 'retried', 'failed'],
            sweep.stack_order(sweep.sweep(runs), 'boot'),
        )

    def test_bad_input(self):
        one = planted()[:1]
        self.assertRaisesRegex(
            sweep.SweepError, 'two runs or more', sweep.sweep, one
        )
        nolabel = planted()
        nolabel[1] = ('c50', {}, nolabel[1][2])
        self.assertRaisesRegex(
            sweep.SweepError, 'c50: no label', sweep.sweep, nolabel
        )
        same = [(n, {'concurrency': '5'}, r) for n, _l, r in planted()]
        self.assertRaisesRegex(
            sweep.SweepError,
            'no label that is a number and differs',
            sweep.sweep,
            same,
        )
        unfinished = planted()
        for row in unfinished[0][2]['requests']:
            row['state'] = 'incomplete'
        self.assertRaisesRegex(
            sweep.SweepError,
            'c100: no finished request',
            sweep.sweep,
            unfinished,
        )
        apart = planted()[:2]
        for row in apart[0][2]['requests']:
            row['kind'] = 'resize'
        self.assertRaisesRegex(
            sweep.SweepError,
            r'no operation is in two runs or more '
            r'\(c50: boot; c100: resize\)',
            sweep.sweep,
            apart,
        )
        two = [
            (n, {'scheduler': v, 'cells': v}, r)
            for (n, _l, r), v in zip(
                planted()[:2], ('caching', 'default'), strict=True
            )
        ]
        self.assertRaisesRegex(
            sweep.SweepError,
            r'more than one that is not \(scheduler, '
            r'cells\).*name it with --by',
            sweep.sweep,
            two,
        )
        self.assertRaisesRegex(
            sweep.SweepError,
            "run 1 has no label 'schedulers'",
            sweep.sweep,
            planted(),
            by='schedulers',
        )

    def test_categorical_labels(self):
        runs = [
            (n, {'scheduler': v, 'concurrency': '8'}, r)
            for (n, _l, r), v in zip(
                planted(),
                ('default', 'caching', 'caching-2', 'x'),
                strict=True,
            )
        ]
        # the only label that differs, though not a number
        for by in (None, 'scheduler'):
            result = sweep.sweep(runs, by=by)
            self.assertEqual(
                ('scheduler', True), (result['key'], result['categorical'])
            )
            # in the order given, each shown by its value
            self.assertEqual(
                ['default', 'caching', 'caching-2', 'x'],
                [r['value'] for r in result['runs']],
            )
            self.assertEqual([None] * 4, [r['load'] for r in result['runs']])
            self.assertEqual({'boot': None}, result['saturation'])
        jsonschema.validate(json.loads(json.dumps(result)), sweep.SCHEMA)
        text = sweep.render(result)
        self.assertIn('# scheduler=caching: c50', text)
        self.assertIn(
            'boot: scheduler is not a number: the runs in the '
            'order given, no saturation point',
            text,
        )
        self.assertRegex(text, r'\nnova-scheduler library +5\.0% +5\.0% ')
        self.assertRegex(text, r'\ncaching-2 +20 +20 +3\.00 ')
        page = sweep_html.render(result)
        # the stack, no throughput line against a categorical key
        self.assertEqual(1, page.count('<svg'))
        self.assertIn('>caching-2</td>', page)
        # a numeric key named: ordered by its numbers
        result = sweep.sweep(planted(), by='concurrency')
        self.assertEqual(
            ([5.0, 20.0, 50.0, 100.0], False),
            ([r['load'] for r in result['runs']], result['categorical']),
        )

    def test_mixed_operations_and_releases(self):
        runs = planted()
        runs[0][2]['requests'].append(
            request(99, 0, {'api': S}, kind='resize')
        )
        runs[0][2]['releases'] = [{'nova': '33.0.0', 'mode': 'eventlet'}]
        result = sweep.sweep(runs)
        self.assertEqual(['boot', 'resize'], result['operations'])
        self.assertEqual({'resize': ['c5', 'c20', 'c50']}, result['missing'])
        self.assertEqual(['33.0.0 (eventlet)'], result['runs'][-1]['releases'])
        text = sweep.render(result)
        self.assertIn('! not in: c5, c20, c50', text)
        self.assertIn('nova 33.0.0 (eventlet)', text)

    def test_an_operation_without_states_has_no_rates(self):
        runs = planted()
        for _n, _l, report in runs:
            report['requests'].append(
                request(99, 0, {'api': S}, state='other', kind='other')
            )
        f = sweep.sweep(runs)['runs'][0]['operations']['other']
        self.assertEqual(
            (None, None, 1, 0),
            (
                f['success_rate'],
                f['failure_rate'],
                f['successful'],
                f['failed'],
            ),
        )
        self.assertEqual({'api': S}, f['stack_us'])

    def test_json_and_html(self):
        result = sweep.sweep(planted())
        back = json.loads(json.dumps(result))
        self.assertEqual(
            {
                'sweep_version',
                'key',
                'categorical',
                'thresholds',
                'runs',
                'operations',
                'missing',
                'saturation',
            },
            set(back),
        )
        self.assertEqual(
            {
                'name',
                'label',
                'value',
                'load',
                'releases',
                'waves',
                'operations',
                'resources',
            },
            set(back['runs'][0]),
        )
        self.assertEqual(
            {
                'requests',
                'finished',
                'successful',
                'failed',
                'retried',
                'busy_s',
                'throughput_rps',
                'success_rps',
                'success_rate',
                'failure_rate',
                'retry_rate',
                'latency_median_us',
                'timed',
                'components',
                'stack_us',
            },
            set(back['runs'][0]['operations']['boot']),
        )
        jsonschema.validate(back, sweep.SCHEMA)
        back['runs'][0]['operations']['boot']['throughput_rps'] = 'fast'
        self.assertRaises(
            jsonschema.ValidationError, jsonschema.validate, back, sweep.SCHEMA
        )
        page = sweep_html.render(result)
        self.assertEqual(2, page.count('<svg'))
        # one bar segment per component and run
        self.assertEqual(16, page.count('<rect x='))
        self.assertIn('boot saturates at concurrency=100', page)
        self.assertIn('nova-scheduler CPU (cores)', page)


class TestSweepCommand(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name: str, report: dict, meta=None) -> str:
        path = os.path.join(self.dir, name)
        os.makedirs(path)
        with open(os.path.join(path, 'report.json'), 'w') as f:
            json.dump(report, f)
        if meta is not None:
            with open(os.path.join(path, 'run.json'), 'w') as f:
                json.dump(meta, f)
        return path

    def main(self, argv: list) -> tuple:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = report_cmd.main(argv)
            except SystemExit as exc:
                status = exc.code
        return status, out.getvalue(), err.getvalue()

    def test_labels_from_run_json(self):
        paths = [
            self.write(
                'c%d' % c,
                run_report(*fig),
                {'servers': 20, 'concurrency': c, 'mode': 'threads'},
            )
            for c, fig in PLAN.items()
        ]
        out_json = os.path.join(self.dir, 'sweep.json')
        out_html = os.path.join(self.dir, 'sweep.html')
        status, out, err = self.main(
            ['sweep', '--no-progress']
            + paths
            + ['--json', out_json, '--html', out_html]
        )
        self.assertEqual((0, ''), (status, err))
        self.assertIn('boot saturates at concurrency=100', out)
        with open(out_json) as f:
            result = json.load(f)
        self.assertEqual(
            'scheduler', result['saturation']['boot']['component']
        )
        self.assertEqual(
            {'servers': '20', 'concurrency': '5', 'mode': 'threads'},
            result['runs'][0]['label'],
        )
        with open(out_html) as f:
            self.assertIn('<svg', f.read())

    def test_labels_on_the_command_line(self):
        args = []
        for c, fig in PLAN.items():
            path = self.write('r%d' % c, run_report(*fig))
            args.append('schedulers=%d,nova=34:%s' % (c, path))
        status, out, err = self.main(
            ['sweep', '--no-progress', '--json', '-'] + args
        )
        self.assertEqual((0, ''), (status, err))
        result = json.loads(out)
        self.assertEqual('schedulers', result['key'])
        self.assertEqual(
            {'schedulers': '5', 'nova': '34'}, result['runs'][0]['label']
        )

    def test_errors_are_one_line(self):
        path = self.write('c5', run_report(1.0, 0.1))
        status, out, err = self.main(['sweep', '--no-progress', path])
        self.assertEqual(2, status)
        self.assertEqual(
            'instrument-report: error: a sweep needs two '
            'runs or more, got 1\n',
            err,
        )
        other = self.write('c6', run_report(1.0, 0.1))
        status, out, err = self.main(
            ['sweep', '--no-progress', 'concurrency=1:' + path, other]
        )
        self.assertEqual(2, status)
        self.assertIn('%s: no label' % other, err)
        self.assertEqual(1, err.count('\n'))

    def test_categorical_labels_on_the_command_line(self):
        args = []
        for name, (_c, fig) in zip(
            ('default', 'caching'), PLAN.items(), strict=False
        ):
            path = self.write(name, run_report(*fig), {'concurrency': 8})
            args.append('scheduler=%s:%s' % (name, path))
        status, out, err = self.main(
            ['sweep', '--no-progress', '--by', 'scheduler'] + args
        )
        self.assertEqual((0, ''), (status, err))
        self.assertIn('# sweep of 2 runs by scheduler', out)
        self.assertIn('# every run: concurrency=8', out)
        self.assertIn('# scheduler=caching: ', out)
        status, out, err = self.main(
            ['sweep', '--no-progress', '--by', 'cells'] + args
        )
        self.assertEqual(2, status)
        self.assertIn("error: run 1 has no label 'cells'", err)

    def test_the_demos_waves(self):
        paths = []
        for waves, (c, fig) in zip((1, 2), PLAN.items(), strict=False):
            path = self.write(
                'w%d' % waves,
                run_report(*fig),
                {'waves': waves, 'concurrency': c},
            )
            with open(os.path.join(path, 'servers.json'), 'w') as f:
                json.dump(
                    {
                        'servers': [],
                        'waves': [
                            {
                                'wave': n + 1,
                                'servers': waves,
                                'started': 0.0,
                                'finished': 2.0,
                                'duration_s': 2.0 * (n + 1),
                                'boots_per_s': waves / (2.0 * (n + 1)),
                                'counts': {'ACTIVE': waves},
                            }
                            for n in range(2)
                        ],
                    },
                    f,
                )
            paths.append(path)
        status, out, err = self.main(
            ['sweep', '--no-progress', '--by', 'waves', '--json', '-'] + paths
        )
        self.assertEqual((0, ''), (status, err))
        result = json.loads(out)
        jsonschema.validate(result, sweep.SCHEMA)
        self.assertEqual(
            [
                {
                    'wave': 1,
                    'servers': 2,
                    'duration_s': 2.0,
                    'boots_per_s': 1.0,
                },
                {
                    'wave': 2,
                    'servers': 2,
                    'duration_s': 4.0,
                    'boots_per_s': 0.5,
                },
            ],
            result['runs'][1]['waves'],
        )
        status, out, err = self.main(
            ['sweep', '--no-progress', '--by', 'waves'] + paths
        )
        self.assertIn("## waves (the demo's --waves", out)
        self.assertIn('\n2          1: 1.00 2: 0.50\n', out)

    def test_bad_runs_are_one_line_and_status_2(self):
        good = self.write('c5', run_report(1.0, 0.1), {'concurrency': 5})
        unfinished = run_report(3.0, 0.1)
        for row in unfinished['requests']:
            row['state'] = 'incomplete'
        bad = self.write('c20', unfinished, {'concurrency': 20})
        resizes = run_report(3.0, 0.1)
        for row in resizes['requests']:
            row['kind'] = 'resize'
        other = self.write('c50', resizes, {'concurrency': 50})
        same = self.write('again', run_report(3.0, 0.1), {'concurrency': 5})
        for argv, message in (
            (
                [good, bad],
                '%s: no finished request (20 requests, '
                'none with an outcome)' % bad,
            ),
            ([good, other], 'no operation is in two runs or more'),
            (
                [good, same],
                'no label that is a number and differs between the runs',
            ),
        ):
            status, out, err = self.main(['sweep', '--no-progress'] + argv)
            self.assertEqual((2, ''), (status, out), argv)
            self.assertTrue(err.startswith('instrument-report: error: '), err)
            self.assertIn(message, err)
            self.assertEqual(1, err.count('\n'), err)

    def test_every_run_checked_before_any_is_analysed(self):
        spans = os.path.join(self.dir, 'spans')
        SlowSchedulerCloud(seed=3, skew_us=0).generate(spans, requests=5)
        missing = os.path.join(self.dir, 'missing')
        analysed = []
        real = pipeline.analyse
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.pipeline.analyse',
                lambda *a, **kw: analysed.append(a) or real(*a, **kw),
            )
        )
        status, out, err = self.main(
            [
                'sweep',
                '--no-progress',
                'concurrency=1:' + spans,
                'concurrency=2:' + missing,
            ]
        )
        self.assertEqual(2, status)
        self.assertIn('RUN %s: no span files to read' % missing, err)
        self.assertEqual([], analysed)
        # and a good pair is analysed, once each
        status, out, err = self.main(
            [
                'sweep',
                '--no-progress',
                'concurrency=1:' + spans,
                'concurrency=2:' + spans,
            ]
        )
        self.assertEqual((0, 2), (status, len(analysed)))


class SlowScheduler(synthetic_nova.NovaRequests):
    """The synthetic boots, the scheduler's work ``scheduler_load``
    times slower."""

    def scheduler_body(self, *args, **kwargs):
        load = self.cloud.load
        self.cloud.load = load * self.cloud.scheduler_load
        try:
            return super().scheduler_body(*args, **kwargs)
        finally:
            self.cloud.load = load


class SlowSchedulerCloud(synthetic_cloud.Cloud):
    def __init__(self, scheduler_load: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scheduler_load = scheduler_load
        self.nova = SlowScheduler(self, self.spans)


# concurrency: (arrival rate per second, scheduler slowdown); the same
# seed, so the same draws: at 100 the arrivals are those of 50, and
# only the scheduler is slower
GOOD = ('success', 'rescheduled_success')
SYNTHETIC = {5: (1.0, 1.0), 20: (2.0, 1.0), 50: (4.0, 1.0), 100: (4.0, 40.0)}


class TestSweepSynthetic(testtools.TestCase):
    """Four synthetic runs analysed as usual: the sweep's throughput
    and scheduler time against the generator's truth, and the planted
    saturation found."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix='instrument-sweep-')
        cls.truths = {}
        runs = []
        for c, (rate, slow) in SYNTHETIC.items():
            where = os.path.join(cls.dir, 'c%d' % c)
            cls.truths[c] = SlowSchedulerCloud(
                seed=7,
                skew_us=0,
                scheduler_load=slow,
                p_hang=0,
                buffer_drops=0,
            ).generate(where, requests=60, rate=rate, phases=1)
            runs.append(
                (
                    'c%d' % c,
                    {'concurrency': str(c)},
                    pipeline.analyse([where], pipeline.Options(jobs=1)),
                )
            )
        cls.result = sweep.sweep(runs)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def test_throughput_as_generated(self):
        for run in self.result['runs']:
            boots = [
                r
                for r in self.truths[run['load']].requests.values()
                if r.kind == 'boot'
            ]
            window = max(r.end for r in boots) - min(r.start for r in boots)
            self.assertAlmostEqual(
                len(boots) / (window / 1e6),
                run['operations']['boot']['throughput_rps'],
                places=3,
            )

    def test_scheduler_time_as_generated(self):
        for run in self.result['runs']:
            truth = self.truths[run['load']]
            good = [
                r
                for r in truth.requests.values()
                if r.kind == 'boot' and set(r.states.values()) <= set(GOOD)
            ]
            # its exclusive time and SQL time (the critical path
            # counts the SQL a component ran as its own)
            generated = sum(
                us
                for r in good
                for n, us in (r.comp + r.sql_in).items()
                if n.split('.')[0] == 'scheduler'
            ) / len(good)
            found = sum(
                c['mean_us']
                for n, c in run['operations']['boot']['components'].items()
                if n.split('.')[0] == 'scheduler'
            )
            # the critical path's scheduler time, against the time
            # generated (within 2 %: what overlaps is not on the path)
            self.assertAlmostEqual(
                1.0, found / generated, delta=0.02, msg=run['load']
            )

    def test_the_json_shape(self):
        jsonschema.validate(json.loads(json.dumps(self.result)), sweep.SCHEMA)

    def test_the_planted_saturation(self):
        sat = self.result['saturation']['boot']
        self.assertEqual(
            (100, 50, 'throughput', 'scheduler'),
            (sat['load'], sat['after'], sat['why'], sat['group']),
        )
        self.assertLess(sat['group_share_before'], 0.01)
        self.assertGreater(sat['group_share'], 0.05)
        self.assertIsNone(sweep.saturation(self.result['runs'][:3], 'boot'))
