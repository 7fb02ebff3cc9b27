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
"""Work vs wait and the top waits table, from span files with known
waits."""

import json
import os

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.model import durations
from instrument.analysis.model import waits as request_waits
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.sections import waits

T0 = 1_700_000_000_000_000
MS = 1000


class _Log:
    def __init__(self) -> None:
        self.lines = []
        self.n = 0

    def add(
        self,
        ev,
        start,
        dur,
        req=None,
        parent=None,
        attrs=None,
        svc='compute',
        host='cmp-1',
    ):
        self.n += 1
        sid = '%016x' % self.n
        rec = {
            'v': 1,
            'ph': 'X',
            'seq': self.n,
            'ts': T0 + start,
            'dur_us': dur,
            'host': host,
            'svc': svc,
            'pid': 9,
            'ev': ev,
            'span': sid,
            'st': 'ok',
        }
        if req:
            rec['req'] = req
        if parent:
            rec['parent'] = parent
        if attrs:
            rec['attrs'] = attrs
        self.lines.append(json.dumps(rec))
        return sid

    def write(self, path):
        with open(path, 'w') as f:
            f.write('\n'.join(self.lines) + '\n')


def _lock(name, held, call='compute.claim'):
    return {'lock': name, 'held_us': held, 'call': call, 'fair': True}


class WaitsReportTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        log = _Log()
        # A takes compute_resources at once and holds it 100 ms
        a = log.add('compute.build_and_run_instance', 0, 120 * MS, 'req-a')
        ca = log.add('compute.claim', 0, 101 * MS, 'req-a', a)
        log.add(
            'lock.wait',
            0,
            10,
            'req-a',
            ca,
            _lock('compute_resources', 100 * MS),
        )
        # B waits 100 ms for it, then holds it 5 ms
        b = log.add(
            'compute.build_and_run_instance', 1 * MS, 130 * MS, 'req-b'
        )
        cb = log.add('compute.claim', 1 * MS, 105 * MS, 'req-b', b)
        log.add(
            'lock.wait',
            1 * MS,
            100 * MS,
            'req-b',
            cb,
            _lock('compute_resources', 5 * MS),
        )
        log.add(
            'db.pool.wait',
            110 * MS,
            7 * MS,
            'req-b',
            b,
            {
                'db': 'nova_cell1',
                'size': 1,
                'call': 'compute.build_and_run_instance',
            },
        )
        # the periodic audit, no request, held it 300 ms
        log.add(
            'lock.wait',
            200 * MS,
            2 * MS,
            None,
            None,
            _lock(
                'compute_resources',
                300 * MS,
                'compute.update_available_resource',
            ),
        )
        log.write(os.path.join(self.dir, 'cmp-1.jsonl'))

    def analyse(self, jobs=1):
        return pipeline.analyse([self.dir], pipeline.Options(jobs=jobs))

    def test_top_waits(self):
        report = self.analyse()
        top = report['waits']['top']
        lock = top[0]
        self.assertEqual(
            ('lock', 'compute_resources', 3),
            (lock['kind'], lock['name'], lock['count']),
        )
        self.assertEqual(10 + 100 * MS + 2 * MS, lock['total_us'])
        self.assertEqual(100 * MS, lock['max_us'])
        self.assertEqual(2 * MS, lock['p50_us'])
        self.assertEqual(100 * MS, lock['p95_us'])
        self.assertEqual('req-b', lock['longest_wait_request'])
        hold = lock['longest_hold']
        self.assertEqual(300 * MS, hold['held_us'])
        self.assertEqual('compute.update_available_resource', hold['call'])
        self.assertIsNone(hold['request'])
        self.assertEqual('cmp-1', hold['host'])
        pool = top[1]
        self.assertEqual(
            ('db_pool', 'nova_cell1', 1, 7 * MS),
            (pool['kind'], pool['name'], pool['count'], pool['total_us']),
        )

    def test_work_vs_wait_per_component(self):
        report = self.analyse()
        rows = {
            (r['op'], r['component']): r
            for r in report['waits']['work_vs_wait']
        }
        claim = rows[('boot', 'compute.claim')]
        self.assertEqual(2, claim['requests'])
        self.assertEqual(2, claim['waited'])
        # exclusive claim time: A 101 ms - 10 us, B 105 ms - 100 ms
        self.assertEqual((101 * MS - 10 + 5 * MS) / 2, claim['work_mean_us'])
        self.assertEqual((10 + 100 * MS) / 2, claim['wait_mean_us'])
        [lock] = claim['waits']
        self.assertEqual(
            ('lock', 'compute_resources'), (lock['kind'], lock['name'])
        )
        self.assertEqual(['req-b', 'req-a'], lock['requests'])
        build = rows[('boot', 'compute')]
        self.assertEqual(7 * MS / 2, build['wait_mean_us'])
        # A: 120 - 101 ms, B: 130 - 105 - 7 ms of its own
        self.assertEqual((19 * MS + 18 * MS) / 2, build['work_mean_us'])
        self.assertEqual(1, build['waited'])
        self.assertEqual('db_pool', build['waits'][0]['kind'])

    def test_request_rows_split_claim_time(self):
        report = self.analyse()
        b = [r for r in report['requests'] if r['req'] == 'req-b'][0]
        self.assertEqual(5 * MS, b['components_us']['compute.claim'])
        self.assertEqual(100 * MS, b['components_us']['wait.lock'])
        by_name = {w['name']: w for w in b['waits']}
        lock = by_name['compute_resources']
        self.assertEqual('compute.claim', lock['in'])
        self.assertEqual(100 * MS, lock['wait_us'])
        # B's claim is on its critical path: so is all of its wait
        self.assertEqual(100 * MS, lock['critical_us'])
        self.assertEqual(100 * MS, b['critical_path_us']['wait.lock'])
        # work + wait of the claim is the claim's exclusive time
        self.assertEqual(
            105 * MS, b['components_us']['compute.claim'] + lock['wait_us']
        )

    def test_workers_agree(self):
        one = self.analyse(1)['waits']
        two = self.analyse(2)['waits']
        self.assertEqual(one['top'], two['top'])
        self.assertEqual(one['work_vs_wait'], two['work_vs_wait'])

    def test_writers(self):
        report = self.analyse()
        text = report_text.render(report)
        self.assertIn('Waits: locks, DB pool, worker pools', text)
        self.assertIn('compute_resources', text)
        self.assertIn('compute.update_available_resource', text)
        # table cells may break at '_' and '.' (<wbr>)
        page = report_html.render(report).replace('<wbr>', '')
        self.assertIn('<h3>Top waits</h3>', page)
        self.assertIn('compute_resources', page)
        self.assertIn('<h3>Work vs wait</h3>', page)

    def test_instance_locks_are_one_row(self):
        self.assertEqual(
            '{uuid}',
            request_waits.wait_name(
                'lock', {'lock': '0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77'}
            ),
        )
        self.assertEqual(
            'refresh_cache-{uuid}',
            request_waits.wait_name(
                'lock',
                {'lock': 'refresh_cache-0B6C3A52-3F8F-4BD9-8A53-9D3A8BBF1A77'},
            ),
        )
        self.assertEqual(
            'compute_resources',
            request_waits.wait_name('lock', {'lock': 'compute_resources'}),
        )
        self.assertEqual(
            'nova_cell1',
            request_waits.wait_name('db_pool', {'db': 'nova_cell1'}),
        )
        self.assertEqual('?', request_waits.wait_name('lock', {}))

    def test_no_waits_no_section(self):
        self.assertEqual([], waits.text_lines({'top': [], 'work_vs_wait': []}))
        self.assertEqual('', waits.html_section(None, None))


class PercentileTest(testtools.TestCase):
    def test_histogram_beyond_exact_values(self):
        table = waits.WaitTable()

        class Rec:
            ev = 'lock.wait'
            st = 'ok'
            req = None
            host = 'h'
            svc = 'compute'

        for us in range(1, durations.EXACT_MAX + 2001):
            rec = Rec()
            rec.dur_us = us
            rec.attrs = {'lock': 'x'}
            table.add(rec, 0)
        [row] = table.top()
        self.assertFalse(row['exact'])
        n = durations.EXACT_MAX + 2000
        self.assertLess(abs(row['p50_us'] - n / 2) / (n / 2), 0.05)
        self.assertLess(abs(row['p95_us'] - n * 0.95) / (n * 0.95), 0.05)


class SetupCaveatTest(testtools.TestCase):
    """Issue 32, item 6: a run whose computes share one process (one
    process-wide ``compute_resources``) or ran their periodic tasks
    more often than nova does says so beside its lock figures, from
    its start record; a deployment's report says nothing."""

    def _report(self, setup):
        from instrument.runtime import process
        from instrument.runtime import record

        d = self.useFixture(fixtures.TempDir()).path
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.process.SETUP', setup)
        )
        ident = process.ProcessIdentity.create('instrument-demo', 'demo')
        start = record.to_dict(ident.start_record({'mode': 'threads'}), 0, 9)
        start['ts'] = T0 - 1000
        start = json.dumps(start)
        log = _Log()
        b = log.add('compute.build_and_run_instance', 0, 130 * MS, 'req-b')
        cb = log.add('compute.claim', 0, 105 * MS, 'req-b', b)
        log.add(
            'lock.wait',
            0,
            100 * MS,
            'req-b',
            cb,
            _lock('compute_resources', 5 * MS),
        )
        log.lines.insert(0, start)
        log.write(os.path.join(d, 'demo.jsonl'))
        return pipeline.analyse([d], pipeline.Options(jobs=1))

    def test_demo_setup_is_said_beside_the_lock_figures(self):
        report = self._report({'computes': 3, 'periodic_interval_s': 5.0})
        [proc] = report['processes']
        self.assertEqual(
            {'computes': 3, 'periodic_interval_s': 5.0}, proc['setup']
        )
        text = report_text.render(report)
        waits_part = text[text.index('Waits: locks') :]
        self.assertIn('3 compute services ran in one process', waits_part)
        self.assertIn('ran every 5s, not at nova\'s intervals', waits_part)
        page = report_html.render(report)
        self.assertIn('3 compute services ran in one process', page)

    def test_nova_intervals_say_only_the_shared_process(self):
        report = self._report({'computes': 2})
        text = report_text.render(report)
        self.assertIn('2 compute services ran in one process', text)
        self.assertNotIn('not at nova\'s intervals', text)

    def test_deployment_has_no_caveat(self):
        report = self._report({})
        self.assertNotIn('setup', report['processes'][0])
        self.assertNotIn('caveat', report_text.render(report))
