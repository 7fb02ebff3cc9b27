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
"""A deployed compute's periodic run that reaches its database through
nova-conductor: the conductor's work for the run's RPC calls, recorded
under the request id of nova's admin context, is charged to the run
(span files of two processes)."""

import functools
import json
import os

import fixtures
import testtools

from instrument import schema
from instrument.analysis import pipeline

T0 = 1_700_000_000_000_000
MS = 1000
UAR = 'ComputeManager.update_available_resource'
SYNC = 'ComputeManager._sync_power_states'
# the writer's compact form (pass 1 finds RPC lines by substring)
_dumps = functools.partial(json.dumps, separators=(',', ':'))
ADMIN = 'req-0b1c2d3e-0000-4000-8000-00000000a0a0'
LONE = 'req-0b1c2d3e-0000-4000-8000-00000000b0b0'


class _Log:
    def __init__(self, host, svc, pid) -> None:
        self.host = host
        self.svc = svc
        self.pid = pid
        self.n = 0
        self.lines = [
            _dumps(
                {
                    'v': 1,
                    'ph': 'M',
                    'seq': 0,
                    'ts': T0,
                    'host': host,
                    'svc': svc,
                    'pid': pid,
                    'ev': 'process.start',
                    'attrs': {'service': 'nova-' + svc},
                }
            )
        ]

    def add(
        self, ev, start, dur, req, parent=None, attrs=None, ph='X', span=None
    ):
        self.n += 1
        sid = span or '%016x' % (self.pid << 32 | self.n)
        rec = {
            'v': 1,
            'ph': ph,
            'seq': self.n,
            'ts': T0 + start,
            'host': self.host,
            'svc': self.svc,
            'pid': self.pid,
            'ev': ev,
            'span': sid,
            'req': req,
        }
        if ph == 'X':
            rec.update(dur_us=dur, st='ok')
        if parent:
            rec['parent'] = parent
        if attrs:
            rec['attrs'] = attrs
        self.lines.append(_dumps(rec))
        return sid

    def sql(self, start, dur, req, parent, call='rpc.dispatch'):
        self.n += 1
        self.lines.append(
            _dumps(
                {
                    'v': 1,
                    'ph': 'X',
                    'seq': self.n,
                    'ts': T0 + start,
                    'dur_us': dur,
                    'host': self.host,
                    'svc': self.svc,
                    'pid': self.pid,
                    'ev': 'sql.query',
                    'span': '%016x' % (self.pid << 32 | self.n),
                    'parent': parent,
                    'req': req,
                    'st': 'ok',
                    'attrs': {
                        'fp': 'f%d' % self.n,
                        'db': 'nova_cell1',
                        'kind': 'SELECT',
                        'call': call,
                    },
                }
            )
        )

    def write(self, path):
        with open(os.path.join(path, '%s.jsonl' % self.host), 'w') as f:
            f.write('\n'.join(self.lines) + '\n')


def _run(compute, task, start, token, dur=100 * MS):
    req = schema.periodic_req(task, token * 32)
    sid = compute.add('periodic.task', start, dur, req, attrs={'task': task})
    return req, sid


def _send(
    compute,
    req,
    parent,
    start,
    dur,
    ctx=ADMIN,
    method='object_class_action_versions',
    ph='X',
):
    """An RPC call of a periodic run to the conductor: the run's id,
    the context's beside it."""
    return compute.add(
        'rpc.call',
        start,
        dur,
        req,
        parent,
        {'method': method, 'topic': 'conductor', schema.ATTR_CONTEXT_REQ: ctx},
        ph=ph,
    )


class ConductorWorkOfPeriodicRunsTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        compute = _Log('cmp-1', 'compute', 9)
        conductor = _Log('ctl-1', 'conductor', 11)
        # one run_periodic_tasks call: two tasks, one admin context
        self.uar, uar_span = _run(compute, UAR, 0, 'a')
        self.sync, sync_span = _run(compute, SYNC, 200 * MS, 'b')
        compute.sql(1 * MS, 1 * MS, self.uar, uar_span, call='periodic.task')
        send1 = _send(compute, self.uar, uar_span, 10 * MS, 20 * MS)
        send2 = _send(
            compute,
            self.uar,
            uar_span,
            40 * MS,
            20 * MS,
            method='object_action',
        )
        send3 = _send(compute, self.sync, sync_span, 210 * MS, 20 * MS)
        # the conductor answers under the admin context's id
        d1 = conductor.add(
            'rpc.dispatch',
            12 * MS,
            16 * MS,
            ADMIN,
            send1,
            {'method': 'object_class_action_versions'},
        )
        conductor.sql(13 * MS, 3 * MS, ADMIN, d1)
        conductor.sql(17 * MS, 5 * MS, ADMIN, d1)
        # a span under the dispatch, begun before its statement (its B
        # read first), and a statement under it
        d2 = '%016x' % (11 << 32 | 900)
        inner = '%016x' % (11 << 32 | 901)
        conductor.add(
            'rpc.dispatch',
            42 * MS,
            None,
            ADMIN,
            send2,
            {'method': 'object_action'},
            ph='B',
            span=d2,
        )
        conductor.add(
            'conductor.step', 43 * MS, None, ADMIN, d2, ph='B', span=inner
        )
        conductor.sql(44 * MS, 7 * MS, ADMIN, inner, call='conductor.step')
        conductor.add(
            'conductor.step', 43 * MS, 10 * MS, ADMIN, d2, span=inner
        )
        conductor.add(
            'rpc.dispatch',
            42 * MS,
            16 * MS,
            ADMIN,
            send2,
            {'method': 'object_action'},
            span=d2,
        )
        d3 = conductor.add(
            'rpc.dispatch',
            212 * MS,
            16 * MS,
            ADMIN,
            send3,
            {'method': 'object_class_action_versions'},
        )
        conductor.sql(213 * MS, 11 * MS, ADMIN, d3)
        # a call whose end was never written (its process stopped
        # during it), then a statement of its context with no span of
        # the hops above it: the run that sent that id
        lone_run, lone_span = _run(compute, SYNC, 400 * MS, 'c', 90 * MS)
        self.lone = lone_run
        send4 = _send(
            compute, lone_run, lone_span, 410 * MS, None, ctx=LONE, ph='B'
        )
        conductor.add(
            'rpc.dispatch',
            412 * MS,
            16 * MS,
            LONE,
            send4,
            {'method': 'object_action'},
        )
        conductor.sql(413 * MS, 13 * MS, LONE, 'ffffffffffffffff')
        # a user request on the same conductor stays a request
        conductor.add(
            'conductor.schedule_and_build_instances',
            500 * MS,
            10 * MS,
            'req-user',
        )
        conductor.sql(501 * MS, 2 * MS, 'req-user', None)
        compute.write(self.dir)
        conductor.write(self.dir)

    def analyse(self, jobs=1):
        return pipeline.analyse([self.dir], pipeline.Options(jobs=jobs))

    def test_conductor_sql_is_the_runs(self):
        report = self.analyse()
        tasks = {r['task']: r for r in report['periodic']['tasks']}
        # update_available_resource: its own statement, and the
        # conductor's under both of its calls (the second one's through
        # a span under the dispatch)
        uar = tasks[UAR]
        self.assertEqual(
            (4, (1 + 3 + 5 + 7) * MS), (uar['sql_count'], uar['sql_us'])
        )
        # _sync_power_states: the conductor's for its call (same admin
        # context, charged by the hop, not by the id), and the lone
        # statement of the other context
        sync = tasks[SYNC]
        self.assertEqual((2, 24 * MS), (sync['sql_count'], sync['sql_us']))
        self.assertEqual(3, sync['runs'] + uar['runs'])

    def test_no_request_of_the_admin_context(self):
        report = self.analyse()
        reqs = [r['req'] for r in report['requests']]
        self.assertEqual(['req-user'], reqs)
        self.assertNotIn(ADMIN, json.dumps(report['operations']))
        self.assertNotIn(ADMIN, json.dumps(report['summary']))

    def test_workers_agree(self):
        one = self.analyse()
        two = self.analyse(jobs=2)
        for rep in (one, two):
            for row in rep['periodic']['tasks']:
                row['runs_e_g'].sort()
        self.assertEqual(one['periodic'], two['periodic'])
        self.assertEqual(
            [r['req'] for r in one['requests']],
            [r['req'] for r in two['requests']],
        )
