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
"""Periodic task runs in the analyser: per task figures, never
requests, and the periodic task named as the holder of a lock a
request waited for (span files with known runs and waits)."""

import json
import os

import fixtures
import testtools

from instrument import schema
from instrument.analysis import pipeline
from instrument.analysis.render import fmt
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.sections import periodic

T0 = 1_700_000_000_000_000
MS = 1000
UAR = 'ComputeManager.update_available_resource'
HEAL = 'ComputeManager._heal_instance_info_cache'


class _Log:
    def __init__(self, pid=9) -> None:
        self.lines = []
        self.n = 0
        self.pid = pid

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
        ph='X',
        st='ok',
    ):
        self.n += 1
        sid = '%016x' % (self.pid << 32 | self.n)
        rec = {
            'v': 1,
            'ph': ph,
            'seq': self.n,
            'ts': T0 + start,
            'host': host,
            'svc': svc,
            'pid': self.pid,
            'ev': ev,
            'span': sid,
        }
        if ph == 'X':
            rec.update(dur_us=dur, st=st)
        if req:
            rec['req'] = req
        if parent:
            rec['parent'] = parent
        if attrs:
            rec['attrs'] = attrs
        self.lines.append(json.dumps(rec))
        return sid

    def sql(self, start, dur, req, parent, host='cmp-1'):
        self.n += 1
        self.lines.append(
            json.dumps(
                {
                    'v': 1,
                    'ph': 'X',
                    'seq': self.n,
                    'ts': T0 + start,
                    'dur_us': dur,
                    'host': host,
                    'svc': 'compute',
                    'pid': self.pid,
                    'ev': 'sql.query',
                    'span': '%016x' % (self.pid << 32 | self.n),
                    'parent': parent,
                    'req': req,
                    'st': 'ok',
                    'attrs': {
                        'fp': 'f1',
                        'db': 'nova_cell1',
                        'kind': 'SELECT',
                        'call': 'periodic.task',
                    },
                }
            )
        )

    def write(self, path):
        with open(path, 'w') as f:
            f.write('\n'.join(self.lines) + '\n')


def _lock(held, call='compute.claim', name='compute_resources'):
    return {'lock': name, 'held_us': held, 'call': call, 'fair': True}


def _boot(log, req, start, wait, held=2 * MS, host='cmp-1'):
    """A boot whose claim waited ``wait`` us for compute_resources."""
    b = log.add(
        'compute.build_and_run_instance', start, wait + 20 * MS, req, host=host
    )
    c = log.add('compute.claim', start + MS, wait + 5 * MS, req, b, host=host)
    log.add('lock.wait', start + MS, wait, req, c, _lock(held), host=host)


def _periodic_run(
    log, task, start, dur, hold_at=None, held=0, sql=(), st='ok'
):
    """A periodic run; it takes compute_resources at ``hold_at`` for
    ``held`` us when given."""
    req = schema.periodic_req(task, os.urandom(16).hex())
    sid = log.add(
        'periodic.task', start, dur, req, attrs={'task': task}, st=st
    )
    if hold_at is not None:
        log.add(
            'lock.wait', hold_at, 10, req, sid, _lock(held, 'periodic.task')
        )
    for at, d in sql:
        log.sql(at, d, req, sid)
    return req


class PeriodicReportTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.base = self.useFixture(fixtures.TempDir()).path
        log = _Log()
        # the audit holds compute_resources from 100 ms to 400 ms
        self.uar = _periodic_run(
            log,
            UAR,
            90 * MS,
            320 * MS,
            hold_at=100 * MS - 10,
            held=300 * MS,
            sql=((95 * MS, 4 * MS), (120 * MS, 6 * MS)),
        )
        # req-a's claim waits from 150 ms to 400 ms: 250 ms covered
        # req-b's from 300 ms to 450 ms: 100 ms covered (then req-a
        # held it)
        # req-c's 1 s later: not covered
        self.boots = log.n
        # a second run, later, that errs and takes no lock
        self.uar2 = _periodic_run(
            log,
            UAR,
            2000 * MS,
            50 * MS,
            sql=((2001 * MS, 1 * MS),),
            st='error',
        )
        self.heal = _periodic_run(log, HEAL, 2100 * MS, 10 * MS)
        # a run still going at the end of the files
        log.add(
            'periodic.task',
            2200 * MS,
            None,
            schema.periodic_req(HEAL, 'ff' * 16),
            attrs={'task': HEAL},
            ph='B',
        )
        periodic_lines = list(log.lines)
        boots = _Log()
        boots.n = log.n
        _boot(boots, 'req-a', 149 * MS, 250 * MS)
        _boot(boots, 'req-b', 299 * MS, 150 * MS)
        _boot(boots, 'req-c', 1399 * MS, 3 * MS)
        # same lock name, same pid, another host with its own process:
        # not the audit's lock
        other = _Log()
        other.n = 0
        self.add_start(other, 'cmp-2')
        _boot(other, 'req-d', 149 * MS, 200 * MS, host='cmp-2')
        mine = _Log()
        self.add_start(mine, 'cmp-1')
        mine.lines += periodic_lines + boots.lines
        mine.write(os.path.join(self.dir, 'cmp-1.jsonl'))
        other.write(os.path.join(self.dir, 'cmp-2.jsonl'))
        # the same run without any periodic record (numbered without
        # them: a file with seq gaps lost records)
        base = _Log()
        self.add_start(base, 'cmp-1')
        for n, line in enumerate(boots.lines, 1):
            base.lines.append(json.dumps(dict(json.loads(line), seq=n)))
        base.write(os.path.join(self.base, 'cmp-1.jsonl'))
        other.write(os.path.join(self.base, 'cmp-2.jsonl'))

    @staticmethod
    def add_start(log, host):
        log.lines.append(
            json.dumps(
                {
                    'v': 1,
                    'ph': 'M',
                    'seq': 0,
                    'ts': T0,
                    'host': host,
                    'svc': 'compute',
                    'pid': log.pid,
                    'ev': 'process.start',
                    'attrs': {'service': 'nova-compute'},
                }
            )
        )

    def analyse(self, path=None, jobs=1):
        return pipeline.analyse(
            [path or self.dir], pipeline.Options(jobs=jobs)
        )

    def test_runs_are_never_requests(self):
        report = self.analyse()
        without = self.analyse(self.base)
        self.assertEqual(
            ['req-a', 'req-b', 'req-c', 'req-d'],
            sorted(r['req'] for r in report['requests']),
        )
        for row in report['requests']:
            row.pop('held_by_periodic', None)
        for key in ('operations', 'summary', 'failures', 'requests'):
            self.assertEqual(without[key], report[key], key)
        self.assertEqual({}, without['periodic'])

    def test_per_task_figures(self):
        tasks = {r['task']: r for r in self.analyse()['periodic']['tasks']}
        self.assertEqual({UAR, HEAL}, set(tasks))
        uar = tasks[UAR]
        self.assertEqual(
            (2, 1, 0), (uar['runs'], uar['errors'], uar['unfinished'])
        )
        self.assertEqual(50 * MS, uar['p50_us'])
        self.assertEqual(320 * MS, uar['p95_us'])
        self.assertEqual(320 * MS, uar['max_us'])
        self.assertEqual(self.uar, uar['longest_run'])
        self.assertEqual((3, 11 * MS), (uar['sql_count'], uar['sql_us']))
        self.assertEqual(
            [
                {
                    'lock': 'compute_resources',
                    'acquisitions': 1,
                    'wait_us': 10,
                    'held_us': 300 * MS,
                }
            ],
            uar['locks'],
        )
        self.assertEqual(
            (10, 300 * MS), (uar['lock_wait_us'], uar['lock_held_us'])
        )
        self.assertEqual(['compute'], uar['services'])
        # two requests held up, 250 + 100 ms of their waits
        self.assertEqual(
            (2, 350 * MS), (uar['delayed_requests'], uar['delayed_wait_us'])
        )
        heal = tasks[HEAL]
        self.assertEqual(
            (1, 1, 0, 0),
            (
                heal['runs'],
                heal['unfinished'],
                heal['sql_count'],
                heal['delayed_requests'],
            ),
        )

    def test_the_periodic_task_is_named_as_the_holder(self):
        report = self.analyse()
        [row] = report['periodic']['delayed']
        self.assertEqual(
            {
                'task': UAR,
                'lock': 'compute_resources',
                'hosts': ['cmp-1'],
                'requests': 2,
                'waits': 2,
                'wait_us': 350 * MS,
                'max_us': 250 * MS,
                'operations': {'boot': 2},
                'examples': ['req-a', 'req-b'],
            },
            row,
        )
        # and each request row names it
        rows = {r['req']: r for r in report['requests']}
        self.assertEqual(
            [{'task': UAR, 'lock': 'compute_resources', 'wait_us': 250 * MS}],
            rows['req-a']['held_by_periodic'],
        )
        self.assertEqual(
            100 * MS, rows['req-b']['held_by_periodic'][0]['wait_us']
        )
        self.assertNotIn('held_by_periodic', rows['req-c'])
        self.assertNotIn('held_by_periodic', rows['req-d'])
        # the top waits table names it too
        [lock] = report['waits']['top']
        hold = lock['longest_hold']
        self.assertEqual(
            (300 * MS, UAR, self.uar),
            (hold['held_us'], hold['periodic_task'], hold['request']),
        )
        # and the periodic lock wait counts among every wait record
        self.assertEqual(5, lock['count'])

    def test_workers_agree(self):
        one = self.analyse()['periodic']
        two = self.analyse(jobs=2)['periodic']
        for row in one['tasks'] + two['tasks']:
            row['runs_e_g'].sort()
        self.assertEqual(one, two)

    def test_text_and_html_carry_the_same_numbers(self):
        report = self.analyse()
        text = report_text.render(report)
        # (the HTML breaks long names with <wbr>)
        html = report_html.render(report).replace('<wbr>', '')
        us = fmt.fmt_us
        for out in (text, html):
            self.assertIn('Periodic tasks', out)
            self.assertIn(UAR, out)
            for figure in (
                us(300 * MS),
                us(350 * MS),
                us(250 * MS),
                us(320 * MS),
                us(11 * MS),
            ):
                self.assertIn(figure, out)
            self.assertIn('2 (%s)' % us(350 * MS), out)
            self.assertIn('periodic.task %s' % UAR, out)
            self.assertIn(
                'not ended in the files (not in the figures '
                'above): %s 1' % HEAL,
                out,
            )
        self.assertIn('compute_resources 1x held 300ms', text)
        # the held-up request's timeline says so
        self.assertIn(
            'waited %s for lock compute_resources held by '
            'periodic task %s' % (us(250 * MS), UAR),
            html,
        )


class HeldUpTest(testtools.TestCase):
    """The join of holds and waits, on its own."""

    def test_only_overlapping_waits_on_the_same_lock_and_process(self):
        table = periodic.PeriodicTable()
        table.holds = [
            ('L', 'p1', 100, 200, 'T1', 'periodic-T1-1', 'h'),
            ('L', 'p1', 200, 300, 'T2', 'periodic-T2-1', 'h'),
            ('M', 'p1', 0, 1000, 'T3', 'periodic-T3-1', 'h'),
            ('L', 'p2', 0, 1000, 'T4', 'periodic-T4-1', 'h'),
        ]
        table.waits = [
            ('L', 'p1', 150, 250, 'req-1'),
            ('L', 'p1', 300, 400, 'req-2'),
            ('L', 'p1', 50, 100, 'req-3'),
        ]
        self.assertEqual(
            sorted(
                [('T1', 'L', 'req-1', 50, 'h'), ('T2', 'L', 'req-1', 50, 'h')]
            ),
            sorted(table.held_up()),
        )
