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
"""The findings: each rule fires on span files with its cause and is
silent on the same requests without it; the setting names the value
each affected service ran with; text, HTML, JSON and ``compare``."""

import glob
import json
import os
import re
import typing

import fixtures
import testtools

from instrument.analysis import compare
from instrument.analysis import pipeline
from instrument.analysis import rules
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from tests.unit.analysis import test_periodic
from tests.unit.analysis import test_waits

MS = test_waits.MS
T0 = test_waits.T0
DATA = os.path.join(os.path.dirname(__file__), '..', '..', 'data')


def start(log, host, svc, settings, mode='threads'):
    log.lines.append(
        json.dumps(
            {
                'v': 1,
                'ph': 'M',
                'seq': 0,
                'ts': T0,
                'host': host,
                'svc': svc,
                'pid': 9,
                'ev': 'process.start',
                'attrs': {
                    'service': 'nova-' + svc,
                    'settings': settings,
                    'mode': mode,
                },
            }
        )
    )


def boots(
    log,
    n,
    wait_ev=None,
    wait_us=0,
    wait_attrs=None,
    st='ok',
    svc='conductor',
    host='ctl-1',
):
    """``n`` boots of 200 ms, one after the other; each waits
    ``wait_us`` in ``wait_ev`` at its start (on its critical path)."""
    for i in range(n):
        req = 'req-%d' % i
        t = i * 300 * MS
        top = log.add(
            'compute.build_and_run_instance', t, 200 * MS, req, host='cmp-1'
        )
        if wait_ev:
            log.lines.append(
                json.dumps(
                    {
                        'v': 1,
                        'ph': 'X',
                        'seq': log.n + 1,
                        'ts': T0 + t,
                        'dur_us': wait_us + i * MS,
                        'host': host,
                        'svc': svc,
                        'pid': 9,
                        'ev': wait_ev,
                        'span': 'w%015x' % i,
                        'parent': top,
                        'req': req,
                        'st': 'error' if st == 'error' and i == 0 else 'ok',
                        'attrs': wait_attrs,
                    }
                )
            )
            log.n += 1


class RuleTestCase(testtools.TestCase):
    run_with: typing.Callable

    def analyse(self, *logs):
        path = self.useFixture(fixtures.TempDir()).path
        for i, log in enumerate(logs):
            log.write(os.path.join(path, 'h%d.jsonl' % i))
        return pipeline.analyse([path])

    def fired(self, report, rule):
        return [f for f in report['findings']['findings'] if f['rule'] == rule]


class DbPoolRun(RuleTestCase):
    def run_with(self, waits, st='ok', n=6):
        log = test_waits._Log()
        start(
            log,
            'ctl-1',
            'conductor',
            {
                'api_database': {
                    'max_pool_size': 1,
                    'max_overflow': 0,
                    'pool_timeout': None,
                },
                'database': {'max_pool_size': 5},
            },
        )
        start(
            log, 'ctl-2', 'conductor', {'api_database': {'max_pool_size': 7}}
        )
        boots(
            log,
            n,
            'db.pool.wait' if waits else None,
            50 * MS,
            {'db': 'nova_api', 'size': 1},
            st=st,
        )
        return self.analyse(log)


class DbPoolRuleTest(DbPoolRun):
    def test_fires_naming_the_database_knob_and_values(self):
        report = self.run_with(True)
        [f] = self.fired(report, 'db_pool_exhaustion')
        self.assertEqual('db_pool_exhaustion:nova_api', f['key'])
        self.assertEqual(6, f['figures']['waits'])
        self.assertEqual(6, f['figures']['requests'])
        self.assertEqual(6, f['figures']['requests_waited'])
        # slowest first
        self.assertEqual(
            ['req-5', 'req-4', 'req-3', 'req-2', 'req-1'], f['requests']
        )
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        pool = knobs[('api_database', 'max_pool_size')]
        self.assertEqual(
            [
                {
                    'host': 'ctl-1',
                    'svc': 'conductor',
                    'value': 1,
                    'recorded': True,
                }
            ],
            pool['values'],
        )
        self.assertEqual('raise', pool['direction'])
        self.assertEqual(
            0, knobs[('api_database', 'max_overflow')]['values'][0]['value']
        )
        # the share of the requests' critical path it explains
        cp = sum(50 * MS + i * MS for i in range(6))
        self.assertAlmostEqual(cp / (6 * 200 * MS), f['sure']['share'])
        self.assertIn(
            'max_pool_size -> raise: 1 on conductor@ctl-1',
            report_text.render(report),
        )

    def test_silent_without_waits(self):
        report = self.run_with(False)
        self.assertEqual([], report['findings']['findings'])
        text = report_text.render(report)
        self.assertIn(
            'Findings: none (%d rules checked' % len(rules.RULES), text
        )

    def test_a_few_short_waits_are_not_a_finding(self):
        # 3 waits (a spike): under DB_POOL_MIN_WAITS
        report = self.run_with(True, n=3)
        self.assertEqual([], self.fired(report, 'db_pool_exhaustion'))

    def test_one_timeout_is(self):
        report = self.run_with(True, st='error', n=1)
        [f] = self.fired(report, 'db_pool_exhaustion')
        self.assertEqual(1, f['figures']['timeouts'])


class BuildQueueRuleTest(RuleTestCase):
    def run_with(self, wait_us, pool='max_concurrent_builds', mode='eventlet'):
        log = test_waits._Log()
        start(
            log,
            'cmp-1',
            'compute',
            {'DEFAULT': {'max_concurrent_builds': 1}},
            mode,
        )
        boots(
            log,
            4,
            'pool.wait',
            wait_us,
            {'pool': pool, 'size': 1, 'queued': pool == 'long_task'},
            svc='compute',
            host='cmp-1',
        )
        return self.analyse(log)

    def test_long_task_pool_is_the_limit_under_native_threads(self):
        report = self.run_with(100 * MS, 'long_task', 'threads')
        [f] = self.fired(report, 'build_queueing')
        self.assertEqual('long_task', f['figures']['per_service'][0]['pool'])

    def test_long_task_waits_under_eventlet_are_the_hub(self):
        # the semaphore is eventlet's limit: a greenthread waiting to be
        # scheduled is not a build slot wait
        report = self.run_with(100 * MS, 'long_task', 'eventlet')
        self.assertEqual([], report['findings']['findings'])

    def test_fires_on_queued_builds(self):
        report = self.run_with(100 * MS)
        [f] = self.fired(report, 'build_queueing')
        [knob] = f['settings']
        self.assertEqual(
            ('DEFAULT', 'max_concurrent_builds'),
            (knob['section'], knob['option']),
        )
        self.assertEqual(
            [
                {
                    'host': 'cmp-1',
                    'svc': 'compute',
                    'value': 1,
                    'recorded': True,
                }
            ],
            knob['values'],
        )
        self.assertEqual(4, f['figures']['queued'])
        self.assertEqual('req-3', f['requests'][0])

    def test_silent_when_a_slot_is_free(self):
        report = self.run_with(200)
        self.assertEqual([], report['findings']['findings'])


class AuditRuleTest(test_periodic.PeriodicReportTest):
    """The periodic tests' run: the audit holds compute_resources while
    two claims wait (the periodic tests run again here)."""

    def test_audit_collision_fires(self):
        report = self.analyse()
        [f] = [
            f
            for f in report['findings']['findings']
            if f['rule'] == 'audit_collision'
        ]
        self.assertEqual(['req-a', 'req-b'], f['requests'])
        self.assertEqual(2, f['figures']['requests_held'])
        self.assertEqual(350 * MS, f['figures']['wait_us'])
        [knob] = f['settings']
        self.assertEqual('update_resources_interval', knob['option'])
        self.assertEqual(
            [
                {
                    'host': 'cmp-1',
                    'svc': 'compute',
                    'value': None,
                    'recorded': False,
                }
            ],
            knob['values'],
        )

    def with_interval(self, seconds):
        path = os.path.join(self.dir, 'cmp-1.jsonl')
        with open(path) as f:
            lines = f.read().splitlines()
        first = json.loads(lines[0])
        first['attrs']['settings'] = {
            'DEFAULT': {'update_resources_interval': seconds}
        }
        lines[0] = json.dumps(first)
        with open(path, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        return [
            f
            for f in self.analyse()['findings']['findings']
            if f['rule'] == 'audit_collision'
        ]

    def test_names_the_shortened_interval_it_ran_with(self):
        [f] = self.with_interval(5)
        self.assertEqual(
            [
                {
                    'host': 'cmp-1',
                    'svc': 'compute',
                    'value': 5,
                    'recorded': True,
                }
            ],
            f['settings'][0]['values'],
        )

    def test_silent_at_novas_default_interval(self):
        # the same collision, the audit at nova's interval: its length,
        # not its interval, held the claims up
        self.assertEqual([], self.with_interval(0))
        self.assertEqual([], self.with_interval(60))

    def test_audit_collision_silent_when_the_audit_is_rare(self):
        # the same collision in a run of 100 s: one audit of 370 ms
        # over the run is not an interval to raise
        later = test_periodic._Log(pid=77)
        self.add_start(later, 'cmp-3')
        test_periodic._boot(later, 'req-z', 100_000 * MS, 2 * MS, host='cmp-3')
        later.write(os.path.join(self.dir, 'cmp-3.jsonl'))
        report = self.analyse()
        self.assertEqual(2, report['periodic']['delayed'][0]['requests'])
        self.assertEqual(
            [],
            [
                f
                for f in report['findings']['findings']
                if f['rule'] == 'audit_collision'
            ],
        )

    def test_audit_collision_silent_without_the_audit(self):
        report = self.analyse(self.base)
        self.assertEqual([], report['findings']['findings'])


class FormsTest(DbPoolRun):
    def test_first_in_every_form_and_compare(self):
        bad = self.run_with(True)
        good = self.run_with(False)
        self.assertEqual(
            'findings',
            [k for k in bad if k not in ('report_version', 'schema_version')][
                0
            ],
        )
        text = report_text.render(bad)
        self.assertTrue(text.lstrip().startswith('Findings: 1'), text[:200])
        page = report_html.render(bad)
        first = page.index('<h2>')
        self.assertEqual(first, page.index('<h2>Findings'))
        # a request drawn on the page links to its lifecycle (the one
        # timeline of these incomplete boots: req-0's), the others not
        page = report_html.render(self.run_with(True, n=5))
        links = re.findall(r'href="#req-([^"]+)"', page)
        self.assertEqual(['req-0'], links)
        for req in links:
            self.assertIn('<a id="req-%s"></a>' % req, page)
        cmp = compare.compare(bad, good)
        self.assertEqual(
            ['db_pool_exhaustion:nova_api'],
            [f['key'] for f in cmp['findings']['resolved']],
        )
        self.assertEqual([], cmp['findings']['new'])
        lines = compare.render(cmp)
        self.assertIn('resolved:  DB connection pool exhausted', lines)
        back = compare.compare(good, bad)
        self.assertEqual(
            ['db_pool_exhaustion:nova_api'],
            [f['key'] for f in back['findings']['new']],
        )
        same = compare.compare(bad, bad)
        self.assertEqual(1, len(same['findings']['unchanged']))


class NoFalseFindingTest(testtools.TestCase):
    def test_checked_in_span_files(self):
        # the demo's fidelity runs and the recorded operations (not
        # tests/data/findings: the demo's injected causes)
        files = sorted(
            glob.glob(os.path.join(DATA, 'fidelity', '*.jsonl.gz'))
            + glob.glob(os.path.join(DATA, 'operations', '*.jsonl.gz'))
        )
        self.assertGreaterEqual(len(files), 18)
        for path in files:
            report = pipeline.analyse([path])
            self.assertEqual([], report['findings']['findings'], path)


class RpcTimeoutRuleTest(RuleTestCase):
    def run_with(self, timed_out, wait_us=1000 * MS):
        log = test_waits._Log()
        start(
            log,
            'ctl-1',
            'conductor',
            {'DEFAULT': {'long_rpc_timeout': 1, 'rpc_response_timeout': 60}},
        )
        for i in range(3):
            req = 'req-%d' % i
            t = i * 3000 * MS
            log.add(
                'compute.build_and_run_instance',
                t,
                100 * MS,
                req,
                host='cmp-1',
            )
            rec = {
                'v': 1,
                'ph': 'X',
                'seq': log.n + 1,
                'ts': T0 + t,
                'dur_us': wait_us + i,
                'host': 'ctl-1',
                'svc': 'conductor',
                'pid': 9,
                'ev': 'rpc.call',
                'span': 'c%015x' % i,
                'req': req,
                'st': 'ok',
                'attrs': {
                    'method': 'select_destinations',
                    'topic': 'scheduler',
                },
            }
            if timed_out and i:
                rec['st'] = 'error'
                rec['err'] = {
                    'cls': 'oslo_messaging.exceptions.MessagingTimeout',
                    'msg': 'Timed out waiting for a reply',
                }
            log.lines.append(json.dumps(rec))
            log.n += 1
            log.add(
                'rpc.dispatch',
                t + 10,
                2000 * MS,
                req,
                parent='c%015x' % i,
                attrs={'method': 'select_destinations'},
                svc='scheduler',
                host='ctl-2',
            )
        return self.analyse(log)

    def test_fires_naming_long_rpc_timeout(self):
        report = self.run_with(True)
        [f] = self.fired(report, 'rpc_timeouts')
        self.assertEqual(
            'rpc_timeouts:scheduler.select_destinations', f['key']
        )
        self.assertEqual(
            (3, 2), (f['figures']['calls'], f['figures']['timeouts'])
        )
        self.assertEqual(2000 * MS, f['figures']['dispatch_max_us'])
        self.assertAlmostEqual(2 / 3, f['sure']['share'])
        self.assertEqual(['req-2', 'req-1'], f['requests'])
        [knob] = f['settings']
        self.assertEqual(
            ('DEFAULT', 'long_rpc_timeout'), (knob['section'], knob['option'])
        )
        self.assertEqual(
            [
                {
                    'host': 'ctl-1',
                    'svc': 'conductor',
                    'value': 1,
                    'recorded': True,
                }
            ],
            knob['values'],
        )

    def test_silent_when_no_call_timed_out_or_waited_long(self):
        # replies in 400 ms: under half of long_rpc_timeout (1 s)
        report = self.run_with(False, 400 * MS)
        self.assertEqual([], self.fired(report, 'rpc_timeouts'))

    def test_long_waits_against_the_time_out(self):
        # no time-out, every reply 1 s against long_rpc_timeout 1 s
        report = self.run_with(False)
        [f] = self.fired(report, 'rpc_timeouts')
        self.assertEqual(
            'rpc_timeouts:scheduler.select_destinations', f['key']
        )
        self.assertEqual(
            (3, 0, 3, 1),
            (
                f['figures']['calls'],
                f['figures']['timeouts'],
                f['figures']['long'],
                f['figures']['timeout_s'],
            ),
        )
        self.assertEqual(['req-2', 'req-1', 'req-0'], f['requests'])
        [knob] = f['settings']
        self.assertEqual(
            ('DEFAULT', 'long_rpc_timeout'), (knob['section'], knob['option'])
        )
        self.assertEqual(
            [
                {
                    'host': 'ctl-1',
                    'svc': 'conductor',
                    'value': 1,
                    'recorded': True,
                }
            ],
            knob['values'],
        )
        self.assertIn('replies wait long against long_rpc_timeout', f['title'])

    def test_one_long_wait_is_not_a_finding(self):
        report = self.run_with(False, 300 * MS)
        self.assertEqual([], self.fired(report, 'rpc_timeouts'))


class CollisionRuleTest(RuleTestCase):
    """Two schedulers selecting the same host: the second's placement
    claim is refused, its build goes to another host."""

    def run_with(self, lost=True, subset=1, schedulers=2):
        log = test_waits._Log()
        for i in range(schedulers):
            start(
                log,
                'ctl-%d' % i,
                'scheduler',
                {
                    'filter_scheduler': {'host_subset_size': subset},
                    'scheduler': {'max_attempts': 3},
                },
            )
        for i in range(4):
            req = 'req-%d' % i
            t = i * 300 * MS
            log.add(
                'compute.build_and_run_instance',
                t,
                200 * MS,
                req,
                host='cmp-1',
            )
            log.add(
                'scheduler.select_destinations',
                t,
                50 * MS + i,
                req,
                svc='scheduler',
                host='ctl-%d' % (i % schedulers),
                attrs={'selected': ['cmp-1']},
            )
            log.add(
                'scheduler.claim',
                t + 10,
                10 * MS + i,
                req,
                svc='scheduler',
                host='ctl-%d' % (i % schedulers),
                attrs={'claimed': not (lost and i % 2)},
            )
        return self.analyse(log)

    def test_fires_naming_host_subset_size(self):
        report = self.run_with()
        [f] = self.fired(report, 'scheduling_collisions')
        self.assertEqual(
            (2, 4, 2),
            (
                f['figures']['schedulers'],
                f['figures']['claims'],
                f['figures']['claims_lost'],
            ),
        )
        self.assertEqual(['cmp-1'], f['figures']['shared_hosts'])
        self.assertAlmostEqual(0.5, f['sure']['share'])
        self.assertEqual(['req-3', 'req-1'], f['requests'])
        subset, attempts = f['settings']
        self.assertEqual(
            ('filter_scheduler', 'host_subset_size'),
            (subset['section'], subset['option']),
        )
        self.assertEqual(
            [
                {
                    'host': 'ctl-0',
                    'svc': 'scheduler',
                    'value': 1,
                    'recorded': True,
                },
                {
                    'host': 'ctl-1',
                    'svc': 'scheduler',
                    'value': 1,
                    'recorded': True,
                },
            ],
            subset['values'],
        )
        self.assertIn('2', subset['direction'])
        self.assertEqual(
            ('scheduler', 'max_attempts'),
            (attempts['section'], attempts['option']),
        )
        self.assertEqual({3}, {v['value'] for v in attempts['values']})

    def test_silent_without_lost_claims(self):
        self.assertEqual(
            [], self.fired(self.run_with(lost=False), 'scheduling_collisions')
        )

    def test_silent_with_the_subset_above_the_schedulers(self):
        self.assertEqual(
            [], self.fired(self.run_with(subset=3), 'scheduling_collisions')
        )

    def test_silent_with_one_scheduler(self):
        self.assertEqual(
            [],
            self.fired(self.run_with(schedulers=1), 'scheduling_collisions'),
        )


DEADLOCK = 'oslo_db.exception.DBDeadlock'


class DeadlockRuleTest(RuleTestCase):
    """Boots whose quota update deadlocks (as on a multi-writer Galera
    cluster): oslo.db retries it; the last one ran out of retries."""

    def run_with(self, deadlocks=3, exhausted=True, func='quota_reserve'):
        log = test_waits._Log()
        start(log, 'ctl-1', 'conductor', {'database': {'db_max_retries': 20}})
        for i in range(6):
            req = 'req-%d' % i
            t = i * 300 * MS
            top = log.add(
                'compute.build_and_run_instance',
                t,
                200 * MS,
                req,
                host='cmp-1',
            )
            if i >= deadlocks:
                continue
            log.lines.append(
                json.dumps(
                    {
                        'v': 1,
                        'ph': 'X',
                        'seq': log.n + 1,
                        'ts': T0 + t + 10,
                        'dur_us': 3 * MS + i,
                        'host': 'ctl-1',
                        'svc': 'conductor',
                        'pid': 9,
                        'ev': 'sql.query',
                        'span': 'q%015x' % i,
                        'parent': top,
                        'req': req,
                        'st': 'error',
                        'err': {'cls': DEADLOCK, 'msg': 'Deadlock found'},
                        'attrs': {
                            'fp': 'a' * 32,
                            'db': 'nova_cell1',
                            'kind': 'UPDATE',
                            'call': 'conductor.build',
                        },
                    }
                )
            )
            log.lines.append(
                json.dumps(
                    {
                        'v': 1,
                        'ph': 'I',
                        'seq': log.n + 2,
                        'ts': T0 + t + 20,
                        'host': 'ctl-1',
                        'svc': 'conductor',
                        'pid': 9,
                        'ev': 'db.retry',
                        'parent': top,
                        'req': req,
                        'attrs': {
                            'attempt': 1,
                            'func': func,
                            'cls': DEADLOCK,
                            'exhausted': exhausted and i == 0,
                        },
                    }
                )
            )
            log.n += 2
        return self.analyse(log)

    def test_fires_naming_the_function_query_and_single_writer(self):
        report = self.run_with()
        [f] = self.fired(report, 'db_deadlocks')
        self.assertEqual('db_deadlocks:quota_reserve', f['key'])
        figures = f['figures']
        self.assertEqual(
            (3, {'DBDeadlock': 3}, 1, 3),
            (
                figures['retries'],
                figures['classes'],
                figures['exhausted'],
                figures['requests_retried'],
            ),
        )
        self.assertEqual(['req-0'], figures['failed_requests'])
        [query] = figures['deadlocked_queries']
        self.assertEqual(
            ('a' * 32, 'nova_cell1', 'conductor.build', 3),
            (query['fp'], query['db'], query['call'], query['count']),
        )
        self.assertEqual({'boot': 3}, figures['operations'])
        self.assertAlmostEqual(0.5, f['sure']['share'])
        # the failed request first, then the slowest deadlocks
        self.assertEqual(['req-0', 'req-2', 'req-1'], f['requests'])
        connection, retries = f['settings']
        self.assertEqual(
            ('database', 'connection'),
            (connection['section'], connection['option']),
        )
        self.assertIn('single node', connection['direction'])
        self.assertEqual(
            ('database', 'db_max_retries'),
            (retries['section'], retries['option']),
        )
        self.assertEqual(
            [
                {
                    'host': 'ctl-1',
                    'svc': 'conductor',
                    'value': 20,
                    'recorded': True,
                }
            ],
            retries['values'],
        )
        self.assertIn('raise', retries['direction'])

    def test_recovered_retries_leave_the_retry_count(self):
        report = self.run_with(exhausted=False)
        [f] = self.fired(report, 'db_deadlocks')
        self.assertIn('leave', f['settings'][1]['direction'])
        self.assertEqual([], f['figures']['failed_requests'])

    def test_a_few_recovered_retries_are_not_a_finding(self):
        report = self.run_with(deadlocks=2, exhausted=False)
        self.assertEqual([], self.fired(report, 'db_deadlocks'))

    def test_silent_without_retries(self):
        report = self.run_with(deadlocks=0)
        self.assertEqual([], self.fired(report, 'db_deadlocks'))


def sample(log, t, host, svc, pid, cpu_s):
    log.n += 1
    log.lines.append(
        json.dumps(
            {
                'v': 1,
                'ph': 'C',
                'seq': log.n,
                'ts': T0 + t,
                'host': host,
                'svc': svc,
                'pid': pid,
                'ev': 'process.sample',
                'attrs': {'cpu_user_s': cpu_s, 'cpu_sys_s': 0.0},
            }
        )
    )


def span(log, ev, t, dur, req, host, svc, pid, parent=None, attrs=None):
    log.n += 1
    sid = 's%015x' % log.n
    rec = {
        'v': 1,
        'ph': 'X',
        'seq': log.n,
        'ts': T0 + t,
        'dur_us': dur,
        'host': host,
        'svc': svc,
        'pid': pid,
        'ev': ev,
        'span': sid,
        'req': req,
        'st': 'ok',
    }
    if parent:
        rec['parent'] = parent
    if attrs:
        rec['attrs'] = attrs
    log.lines.append(json.dumps(rec))
    return sid


class SaturationRuleTest(RuleTestCase):
    """Nine builds 100 ms apart; the conductor calls
    ``select_destinations`` on one scheduler process that answers one
    at a time in 500 ms: its queue grows by 400 ms a message."""

    def run_with(
        self,
        cores=0.95,
        serial=True,
        n=9,
        conductor=False,
        drained=0,
        sampled_as=('ctl-2', 'scheduler'),
    ):
        log = test_waits._Log()
        start(log, 'ctl-1', 'conductor', {'DEFAULT': {'long_rpc_timeout': 5}})
        log.lines.append(
            json.dumps(
                {
                    'v': 1,
                    'ph': 'M',
                    'seq': 0,
                    'ts': T0,
                    'host': 'ctl-2',
                    'svc': 'scheduler',
                    'pid': 20,
                    'ev': 'process.start',
                    'attrs': {
                        'service': 'nova-scheduler',
                        'mode': 'eventlet',
                        'settings': {'scheduler': {'workers': 1}},
                    },
                }
            )
        )
        free = 0
        for i in range(n):
            req = 'req-%d' % i
            t = i * 100 * MS
            begin = max(t, free) if serial else t
            free = begin + 500 * MS
            top = span(
                log,
                'conductor.schedule_and_build_instances',
                t,
                free - t + 10 * MS,
                req,
                'ctl-1',
                'conductor',
                10,
            )
            if conductor:
                # a compute's call the conductor dispatched i x 300 ms
                # after it was sent
                sent = span(
                    log,
                    'rpc.call',
                    t - i * 300 * MS,
                    free - t + i * 300 * MS,
                    req,
                    'cmp-1',
                    'compute',
                    30,
                    None,
                    {'method': 'build_instances', 'topic': 'conductor'},
                )
                span(
                    log,
                    'rpc.dispatch',
                    t,
                    free - t,
                    req,
                    'ctl-1',
                    'conductor',
                    10,
                    sent,
                    {'method': 'build_instances'},
                )
            call = span(
                log,
                'rpc.call',
                t,
                free - t,
                req,
                'ctl-1',
                'conductor',
                10,
                top,
                {'method': 'select_destinations', 'topic': 'scheduler'},
            )
            span(
                log,
                'rpc.dispatch',
                begin,
                500 * MS,
                req,
                'ctl-2',
                'scheduler',
                20,
                call,
                {'method': 'select_destinations'},
            )
        for i in range(drained):
            # casts from a compute, sent and dispatched after the burst
            t = free + (i + 1) * 100 * MS
            cast = span(
                log,
                'rpc.cast',
                t,
                MS,
                None,
                'cmp-1',
                'compute',
                30,
                None,
                {'method': 'update_instance_info', 'topic': 'scheduler'},
            )
            span(
                log,
                'rpc.dispatch',
                t + 2 * MS,
                MS,
                None,
                'ctl-2',
                'scheduler',
                20,
                cast,
                {'method': 'update_instance_info'},
            )
        for k in range(0, 12):
            sample(
                log,
                k * 500 * MS,
                sampled_as[0],
                sampled_as[1],
                20,
                k * 0.5 * cores,
            )
            if conductor:
                sample(
                    log, k * 500 * MS, 'ctl-1', 'conductor', 10, k * 0.5 * 0.9
                )
        return self.analyse(log)

    def test_a_process_shared_by_services_is_never_named(self):
        # the in-process demo cloud: one process samples itself under
        # its own name while its threads record as every nova service;
        # its CPU says nothing of which service burns it (the default
        # demo under native threads made this false finding)
        report = self.run_with(sampled_as=('fake-mini', '__main__'))
        self.assertEqual([], self.fired(report, 'service_saturation'))

    def test_fires_naming_the_schedulers_workers(self):
        report = self.run_with()
        [f] = self.fired(report, 'service_saturation')
        self.assertEqual('service_saturation:scheduler', f['key'])
        q = f['figures']['queue']
        self.assertEqual((9, 9, 2), (q['dispatches'], q['calls'], q['window']))
        # queue waits 0, 400 ... 3200 ms: the first two 200 on average,
        # the longest two 3000
        self.assertEqual(200 * MS, q['first_mean_us'])
        self.assertEqual(3000 * MS, q['peak_mean_us'])
        [cpu] = f['figures']['cpu']
        self.assertEqual(('ctl-2', 20), (cpu['host'], cpu['pid']))
        self.assertAlmostEqual(0.95, cpu['mean_cores'])
        self.assertTrue(cpu['samples'])
        self.assertEqual(['conductor'], f['figures']['callers'])
        self.assertEqual(
            ['req-8', 'req-7', 'req-6', 'req-5', 'req-4'], f['requests']
        )
        [knob] = f['settings']
        self.assertEqual(
            ('scheduler', 'workers'), (knob['section'], knob['option'])
        )
        self.assertEqual(
            [
                {
                    'host': 'ctl-2',
                    'svc': 'scheduler',
                    'value': 1,
                    'recorded': True,
                }
            ],
            knob['values'],
        )
        # rule 3: the replies waited long against long_rpc_timeout (5 s:
        # 4 of them 2.5 s or more), the scheduler's workers named first
        [r] = self.fired(report, 'rpc_timeouts')
        self.assertEqual(4, r['figures']['long'])
        self.assertEqual(['scheduler'], r['figures']['saturated'])
        self.assertEqual(
            [('scheduler', 'workers'), ('DEFAULT', 'long_rpc_timeout')],
            [(s['section'], s['option']) for s in r['settings']],
        )

    def test_silent_when_the_cpu_is_idle(self):
        # the queue grows, the process does not compute: not its workers
        report = self.run_with(cores=0.1)
        self.assertEqual([], self.fired(report, 'service_saturation'))
        [r] = self.fired(report, 'rpc_timeouts')
        self.assertEqual([], r['figures']['saturated'])

    def test_silent_when_the_queue_does_not_grow(self):
        report = self.run_with(serial=False)
        self.assertEqual([], self.fired(report, 'service_saturation'))

    def test_the_queue_draining_after_the_burst_still_counts(self):
        # three more messages after the burst, dispatched at once: the
        # queue's end is short, its peak is the measure
        report = self.run_with(n=9, drained=3)
        [f] = self.fired(report, 'service_saturation')
        self.assertEqual(12, f['figures']['queue']['dispatches'])
        self.assertEqual(3, f['figures']['queue']['window'])

    def test_the_cpu_is_read_while_the_messages_queued(self):
        # as measured on the integration tier (SaturatedSchedulerTest
        # there): the scheduler served a compute's cast a minute before
        # the burst and idled since, and each select_destinations, after
        # its 500 ms of computing, waits 2 s more on placement and the
        # database; the process ran 0.95 cores while the messages
        # queued, far less from its first dispatch to the end of the
        # longest waits' dispatches (the window the rule once read)
        log = test_waits._Log()
        start(log, 'ctl-1', 'conductor', {})
        log.lines.append(
            json.dumps(
                {
                    'v': 1,
                    'ph': 'M',
                    'seq': 0,
                    'ts': T0,
                    'host': 'ctl-2',
                    'svc': 'scheduler',
                    'pid': 20,
                    'ev': 'process.start',
                    'attrs': {
                        'service': 'nova-scheduler',
                        'mode': 'threads',
                        'settings': {'scheduler': {'workers': 1}},
                    },
                }
            )
        )
        cast = span(
            log,
            'rpc.cast',
            0,
            MS,
            None,
            'cmp-1',
            'compute',
            30,
            None,
            {'method': 'update_instance_info', 'topic': 'scheduler'},
        )
        span(
            log,
            'rpc.dispatch',
            2 * MS,
            MS,
            None,
            'ctl-2',
            'scheduler',
            20,
            cast,
            {'method': 'update_instance_info'},
        )
        burst = 60_000 * MS
        free = burst
        for i in range(9):
            t = burst + i * 100 * MS
            begin = max(t, free)
            free = begin + 500 * MS
            call = span(
                log,
                'rpc.call',
                t,
                free + 2000 * MS - t,
                'req-%d' % i,
                'ctl-1',
                'conductor',
                10,
                None,
                {'method': 'select_destinations', 'topic': 'scheduler'},
            )
            span(
                log,
                'rpc.dispatch',
                begin,
                2500 * MS,
                'req-%d' % i,
                'ctl-2',
                'scheduler',
                20,
                call,
                {'method': 'select_destinations'},
            )
        cpu = 0.0
        for k in range(0, 140):
            t = k * 500 * MS
            sample(log, t, 'ctl-2', 'scheduler', 20, cpu)
            if burst <= t < free:
                cpu += 0.5 * 0.95
        report = self.analyse(log)
        [f] = self.fired(report, 'service_saturation')
        q = f['figures']['queue']
        # the two longest waits (calls 7 and 8): sent at 700 and 800 ms
        # of the burst, dispatched at 3500 and 4000 ms
        self.assertEqual((10, 2), (q['dispatches'], q['window']))
        self.assertEqual(3300 * MS, q['window_us'])
        [usage] = f['figures']['cpu']
        self.assertAlmostEqual(0.95, usage['mean_cores'])

    def test_a_waiting_caller_is_the_victim_not_the_cause(self):
        # the conductor near one core, its queue growing too, waits on
        # the scheduler: the scheduler is named, not the conductor
        report = self.run_with(conductor=True)
        self.assertEqual(
            ['service_saturation:scheduler'],
            [f['key'] for f in self.fired(report, 'service_saturation')],
        )
        # without the scheduler's saturation, the conductor is
        report = self.run_with(conductor=True, cores=0.1)
        self.assertEqual(
            ['service_saturation:conductor'],
            [f['key'] for f in self.fired(report, 'service_saturation')],
        )


class WindowMeansTest(testtools.TestCase):
    """The saturation rule's running means of the queue waits: the
    same floats as the mean of each slice (the report must not change
    in its last digits), integers by a running sum."""

    def test_same_as_slices(self):
        import random

        rnd = random.Random(7)
        for case in range(500):
            n = rnd.randint(2, 200)
            k = rnd.randint(2, n)
            values = [rnd.randint(0, 10**12) for _ in range(n)]
            if case % 5 == 0:
                values[rnd.randrange(n)] = rnd.random() * 1e6
            self.assertEqual(
                [rules._mean(values[i : i + k]) for i in range(n - k + 1)],
                rules._window_means(values, k),
            )


class CellDominanceRuleTest(RuleTestCase):
    """Lists of servers over three cells; cell2's queries slow."""

    def run_with(self, slow_ms=300, n=4, cell1=True):
        log = test_waits._Log()
        start(
            log,
            'api-1',
            'api',
            {
                'api': {
                    'instance_list_per_project_cells': False,
                    'instance_list_cells_batch_strategy': 'distributed',
                }
            },
        )
        for i in range(n):
            req = 'req-%d' % i
            t = i * 1000 * MS
            cells = [
                (rules.CELL0, 'cell0', 1),
                ('c1', 'cell1', 10),
                ('c2', 'cell2', slow_ms + i),
            ]
            if not cell1:
                del cells[1]
            top = span(
                log,
                'api.compute.get_all',
                t,
                sum(ms for _c, _n, ms in cells) * MS + 5 * MS,
                req,
                'api-1',
                'api',
                9,
            )
            at = t
            for cell, name, ms in cells:
                span(
                    log,
                    'api.cells.query',
                    at,
                    ms * MS,
                    req,
                    'api-1',
                    'api',
                    9,
                    top,
                    {'cell': cell, 'cell_name': name, 'db': 'nova_' + name},
                )
                at += ms * MS
        return self.analyse(log)

    def test_fires_naming_the_cell_and_the_list_settings(self):
        report = self.run_with()
        [f] = self.fired(report, 'cell_list_dominance')
        self.assertEqual('cell_list_dominance:c2', f['key'])
        self.assertEqual(
            ('cell2', 'nova_cell2', 4, 4),
            (
                f['figures']['cell_name'],
                f['figures']['db'],
                f['figures']['lists'],
                f['figures']['dominated'],
            ),
        )
        self.assertEqual(
            sum(290 + i for i in range(4)) * MS, f['figures']['excess_us']
        )
        self.assertEqual(['req-3', 'req-2', 'req-1', 'req-0'], f['requests'])
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        self.assertEqual(
            [
                {
                    'host': 'api-1',
                    'svc': 'api',
                    'value': False,
                    'recorded': True,
                }
            ],
            knobs[('api', 'instance_list_per_project_cells')]['values'],
        )
        self.assertIn(('api', 'instance_list_cells_batch_fixed_size'), knobs)
        self.assertIn('cell2', report_text.render(report))

    def test_cell0_is_not_compared(self):
        # one cell besides cell0: cell2 would dominate cell0 alone
        report = self.run_with(cell1=False)
        self.assertEqual([], self.fired(report, 'cell_list_dominance'))

    def test_silent_when_the_cells_answer_alike(self):
        report = self.run_with(slow_ms=12)
        self.assertEqual([], self.fired(report, 'cell_list_dominance'))

    def test_a_few_lists_are_not_a_finding(self):
        report = self.run_with(n=CELL_LISTS_BELOW)
        self.assertEqual([], self.fired(report, 'cell_list_dominance'))


CELL_LISTS_BELOW = rules.CELL_MIN_LISTS - 1


class SaturationMeasuredTest(RuleTestCase):
    """The queue waits measured on nova (``SaturatedSchedulerTest``, a
    run on a free core): six ``select_destinations`` one after another,
    then six casts dispatched as the queue drained."""

    WAITS_MS = (30, 700, 1400, 1550, 2450, 3330, 1090, 190, 60, 20, 60, 20)

    def test_the_peak_stretch_fires(self):
        log = test_waits._Log()
        t = 0
        for i, wait in enumerate(self.WAITS_MS):
            req = 'req-%d' % i
            sync = i < 6
            if i == 6:
                # the casts, sent as the last call was dispatched
                t = 5400 * MS
            sent = span(
                log,
                'rpc.call' if sync else 'rpc.cast',
                t,
                (wait + 500) * MS if sync else MS,
                req,
                'ctl-1' if sync else 'cmp-1',
                'conductor' if sync else 'compute',
                10 if sync else 30,
                None,
                {
                    'method': 'select_destinations'
                    if sync
                    else 'update_instance_info',
                    'topic': 'scheduler',
                },
            )
            span(
                log,
                'rpc.dispatch',
                t + wait * MS,
                500 * MS,
                req,
                'ctl-2',
                'scheduler',
                20,
                sent,
                {
                    'method': 'select_destinations'
                    if sync
                    else 'update_instance_info'
                },
            )
            t += 400 * MS
        for k in range(0, 20):
            sample(log, k * 500 * MS, 'ctl-2', 'scheduler', 20, k * 0.5 * 0.97)
        report = self.analyse(log)
        [f] = self.fired(report, 'service_saturation')
        q = f['figures']['queue']
        self.assertEqual((12, 3), (q['dispatches'], q['window']))
        self.assertEqual(710 * MS, q['first_mean_us'])
        self.assertEqual(2443333, q['peak_mean_us'])


class ApiSaturationTest(RuleTestCase):
    """Rule 8 on nova-api: its requests' wait before the paste filter
    (``api.request`` ``queue_us``, from the front server's arrival
    time) replayed in the shape the scheduler's dispatch queue was
    measured in on nova (``SaturationMeasuredTest``): six requests 400
    ms apart on one API process answering one at a time, then six more
    sent as the queue drained."""

    WAITS_MS = SaturationMeasuredTest.WAITS_MS

    def run_with(self, waits_ms=WAITS_MS, cores=0.97, front=None):
        log = test_waits._Log()
        settings = {'DEFAULT': {'osapi_compute_workers': 1}}
        if front:
            settings['wsgi'] = front
        log.lines.append(
            json.dumps(
                {
                    'v': 1,
                    'ph': 'M',
                    'seq': 0,
                    'ts': T0,
                    'host': 'api-1',
                    'svc': 'api',
                    'pid': 40,
                    'ev': 'process.start',
                    'attrs': {
                        'service': 'nova-api',
                        'mode': 'eventlet',
                        'settings': settings,
                    },
                }
            )
        )
        t = 0
        for i, wait in enumerate(waits_ms):
            if i == 6:
                t = 5400 * MS
            # the span starts when the paste filter is called: after
            # its wait in the front server
            span(
                log,
                'api.request',
                t + wait * MS,
                500 * MS,
                'req-%d' % i,
                'api-1',
                'api',
                40,
                None,
                {
                    'method': 'GET',
                    'route': '/v2.1/servers/detail',
                    'status': 200,
                    'queue_us': wait * MS,
                },
            )
            t += 400 * MS
        for k in range(0, 20):
            sample(log, k * 500 * MS, 'api-1', 'api', 40, k * 0.5 * cores)
        return self.analyse(log)

    def test_fires_naming_osapi_compute_workers(self):
        report = self.run_with()
        [f] = self.fired(report, 'service_saturation')
        self.assertEqual('service_saturation:api', f['key'])
        q = f['figures']['queue']
        self.assertEqual((12, 3), (q['dispatches'], q['window']))
        self.assertEqual(710 * MS, q['first_mean_us'])
        self.assertEqual(2443333, q['peak_mean_us'])
        self.assertEqual(['HTTP clients'], f['figures']['callers'])
        self.assertIn('requests to nova-api', f['seen'])
        self.assertIn('before the paste filter', f['seen'])
        [knob] = f['settings']
        self.assertEqual(
            ('DEFAULT', 'osapi_compute_workers'),
            (knob['section'], knob['option']),
        )
        self.assertEqual(
            [{'host': 'api-1', 'svc': 'api', 'value': 1, 'recorded': True}],
            knob['values'],
        )
        # no front server recorded: both servers' knobs named
        self.assertIn('uWSGI `processes`', knob['direction'])
        self.assertIn('WSGIDaemonProcess', knob['direction'])
        # the wait is on top of the request's own time: a share <= 1
        self.assertLessEqual(f['sure']['share'], 1.0)

    def test_names_the_front_servers_recorded_processes(self):
        report = self.run_with(
            front={
                'server': 'mod_wsgi',
                'process_group': 'nova-api',
                'processes': 2,
                'threads': 1,
            }
        )
        [f] = self.fired(report, 'service_saturation')
        [knob] = f['settings']
        self.assertIn(
            'mod_wsgi on api-1: WSGIDaemonProcess nova-api '
            'processes=2 threads=1',
            knob['direction'],
        )
        report = self.run_with(
            front={'server': 'uwsgi', 'processes': 4, 'threads': 2}
        )
        [f] = self.fired(report, 'service_saturation')
        self.assertIn(
            'uWSGI on api-1: processes = 4, threads = 2',
            f['settings'][0]['direction'],
        )

    def test_silent_on_a_flat_queue(self):
        report = self.run_with(waits_ms=(30, 40, 20) * 4)
        self.assertEqual([], self.fired(report, 'service_saturation'))

    def test_silent_with_the_cpu_idle(self):
        # a queue that grows while the API idles is not its workers'
        report = self.run_with(cores=0.2)
        self.assertEqual([], self.fired(report, 'service_saturation'))
