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
"""End to end against a synthetic cloud of mixed operations.

Boots, resizes, live migrations (pre-check failures, roll-backs, moves
that never end), deletes and lists across cells, on skewed clocks: the
analyser must name every request's operation, find each operation's
final states and causes, the failure table, the component times, and
how the cells were queried; boot figures must count boots only.
"""

import collections
import shutil
import tempfile

import testtools

from instrument.analysis import compare
from instrument.analysis import pipeline
from instrument.analysis.model import breakdown
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.sections import operations as opstats
from tests import synthetic


class MixedOperationsTest(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix='instrument-ops-')
        cls.truth = synthetic.generate(
            cls.dir, seed=5, requests=300, p_ops=0.5, skew_us=2_000_000
        )
        cls.report = pipeline.analyse([cls.dir], pipeline.Options(jobs=1))
        cls.rows = {r['req']: r for r in cls.report['requests']}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def test_every_request_has_its_operation(self):
        self.assertEqual(len(self.truth.requests), len(self.rows))
        for req, rt in self.truth.requests.items():
            self.assertEqual(rt.kind, self.rows[req]['kind'], req)

    def test_every_final_state_cause_and_stop(self):
        for req, rt in self.truth.requests.items():
            if rt.kind == 'other':
                continue
            row = self.rows[req]
            self.assertEqual(
                rt.states,
                {i['inst']: i['state'] for i in row['instances']},
                req,
            )
            self.assertEqual(
                rt.causes,
                {
                    i['inst']: (i['cause'] or {}).get('cls')
                    for i in row['instances']
                },
                req,
            )
            for inst in row['instances']:
                if inst['state'] == 'incomplete':
                    self.assertEqual(
                        rt.stopped[inst['inst']],
                        (inst['stopped']['ev'], inst['stopped']['host']),
                    )

    def test_states_per_operation(self):
        want = collections.defaultdict(collections.Counter)
        for rt in self.truth.requests.values():
            for state in rt.states.values():
                want[rt.kind][state] += 1
        ops = self.report['operations']
        for op, counts in want.items():
            self.assertEqual(dict(counts), ops[op]['states'], op)
        # the generator injected each operation's failures
        self.assertIn('precheck_failure', ops['live_migrate']['states'])
        self.assertIn('rolled_back', ops['live_migrate']['states'])
        self.assertIn('incomplete', ops['live_migrate']['states'])
        self.assertIn('scheduling_failure', ops['resize']['states'])
        self.assertIn('failed_on_source', ops['resize']['states'])
        self.assertIn('compute_failure', ops['delete']['states'])
        self.assertIn('partial', ops['list']['states'])
        lm = ops['live_migrate']
        n = sum(lm['states'].values())
        self.assertAlmostEqual(lm['states']['success'] / n, lm['success_rate'])
        stopped = {(s['ev'], s['host']) for s in lm['stopped']}
        self.assertEqual(
            {'compute.live_migration'}, {ev for ev, _host in stopped}
        )

    def test_boot_figures_count_boots_only(self):
        s = self.report['summary']
        boots = [
            rt for rt in self.truth.requests.values() if rt.kind == 'boot'
        ]
        self.assertEqual(len(boots), s['boots'])
        states = collections.Counter(
            st for rt in boots for st in rt.states.values()
        )
        self.assertEqual(dict(states), s['states'])
        self.assertEqual(
            len(boots), self.report['operations']['boot']['requests']
        )

    def test_failure_table_with_operations(self):
        got = collections.Counter()
        for f in self.report['failures']:
            got[(f['component'], f['ev'], f['cls'], f['message'])] += f[
                'count'
            ]
            for req in f['requests']:
                self.assertEqual(f['operation'], self.rows[req]['kind'])
        self.assertEqual(self.truth.failures, got)
        # (one operation per key here) which ended an instance, which
        # were recovered
        final = collections.Counter()
        recovered = collections.Counter()
        for f in self.report['failures']:
            key = (f['component'], f['ev'], f['cls'], f['message'])
            final[key] += f['final']
            for how, n in f['recovered_by'].items():
                recovered[(key, how)] += n
        self.assertEqual(+self.truth.final, +final)
        self.assertEqual(+self.truth.recovered, +recovered)
        lm = self.report['operations']['live_migrate']['failures']
        self.assertIn('compute.pre_live_migration', {f['ev'] for f in lm})

    def test_component_times_within_1pct(self):
        got = collections.Counter()
        want = collections.Counter()
        for req, rt in self.truth.requests.items():
            row = self.rows[req]
            if row['state'] == 'incomplete':
                continue
            got.update(row['components_us'])
            want.update(rt.comp)
        for name in (
            'api',
            'api.cells',
            'conductor',
            'scheduler',
            'compute',
            'rpc',
        ):
            self.assertGreater(want[name], 0, name)
            self.assertLess(
                abs(got[name] - want[name]), want[name] * 0.01, name
            )

    def test_cells_parallel_and_the_slow_cell(self):
        cells = self.report['operations']['list']['cells']
        lists = sum(
            1 for rt in self.truth.requests.values() if rt.kind == 'list'
        )
        self.assertEqual({'parallel': lists}, cells['modes'])
        self.assertEqual('cell1', cells['slow_cell'])
        self.assertEqual({'cell0', 'cell1', 'cell2'}, set(cells['cells']))
        self.assertEqual('nova_cell1', cells['cells']['cell1']['db'])
        self.assertGreater(cells['cells']['cell2']['errors'], 0)

    def test_concurrency_counts_the_same_operation(self):
        ops = self.report['operations']
        for op, fig in ops.items():
            reqs = [r for r in self.report['requests'] if r['kind'] == op]
            self.assertLessEqual(fig['concurrency']['max'], len(reqs), op)
            self.assertIn('same operation', fig['concurrency']['counted'])
        # boots in flight never include the other operations
        boots = [r for r in self.report['requests'] if r['kind'] == 'boot']
        for lv in self.report['summary']['levels']:
            self.assertLessEqual(int(lv['level'].split('-')[0]), len(boots))
        self.assertIn('boot', self.report['summary']['concurrency']['counted'])

    def test_reports_have_a_section_per_operation(self):
        text = report_text.render(self.report)
        html = report_html.render(self.report)
        for op in ('resize', 'live_migrate', 'delete', 'list'):
            self.assertIn('Operation: %s' % op, text)
            self.assertIn('id="op-%s"' % op, html)
        self.assertIn('cells queried: parallel', text)
        self.assertIn('slow cell: cell1', text)

    def test_compare_per_operation(self):
        cmp = compare.compare(self.report, self.report)
        ops = {o['operation']: o for o in cmp['operations']}
        self.assertEqual(set(self.report['operations']) - {'other'}, set(ops))
        lm = ops['live_migrate']
        self.assertEqual(lm['requests_a'], lm['requests_b'])
        e2e = lm['latency'][0]
        self.assertEqual('end to end', e2e['component'])
        self.assertFalse(e2e['significant'])
        self.assertIn('live_migrate', compare.render(cmp))


class SerialCellsTest(testtools.TestCase):
    def test_cells_queried_one_after_another(self):
        directory = tempfile.mkdtemp(prefix='instrument-cells-')
        self.addCleanup(shutil.rmtree, directory, True)
        truth = synthetic.generate(
            directory, seed=8, requests=60, p_ops=1.0, parallel_cells=False
        )
        report = pipeline.analyse([directory])
        lists = sum(1 for rt in truth.requests.values() if rt.kind == 'list')
        self.assertGreater(lists, 0)
        cells = report['operations']['list']['cells']
        self.assertEqual({'serial': lists}, cells['modes'])
        self.assertEqual('cell1', cells['slow_cell'])


def _summary(req, kind, start, end, state='success'):
    s = breakdown.RequestSummary()
    s.req, s.kind, s.state = req, kind, state
    s.instances = (
        []
        if kind == 'other'
        else [
            {
                'inst': req,
                'state': state,
                'cause': None,
                'stopped': None,
                'attempts': 1,
            }
        ]
    )
    s.start, s.end = start, end
    s.comp = {'api': end - start}
    s.sql_in = {}
    s.cp = {'api': end - start}
    s.sql_us = s.sql_n = s.db_retries = s.errors = s.events = 0
    s.attempts = 1
    s.hosts = []
    s.lifecycle = s.critical = s.cells = None
    return s


class ConcurrencyLevelsTest(testtools.TestCase):
    """Issue 13: the levels count requests of the same operation."""

    def test_status_polls_do_not_count_towards_boots(self):
        boots = [
            _summary('b%d' % i, 'boot', i * 10, 1000 + i * 10)
            for i in range(3)
        ]
        polls = [_summary('p%d' % i, 'show', 5 + i, 6 + i) for i in range(40)]
        agg = breakdown.aggregate(boots + polls)
        self.assertEqual(3, agg['concurrency']['max'])
        self.assertEqual(['1', '2-3'], [lv['level'] for lv in agg['levels']])
        self.assertEqual(3, sum(lv['requests'] for lv in agg['levels']))
        ops = opstats.summarise(boots + polls, [])
        self.assertEqual(3, ops['boot']['concurrency']['max'])
        self.assertEqual(1, ops['show']['concurrency']['max'])
        self.assertEqual(40, ops['show']['requests'])
