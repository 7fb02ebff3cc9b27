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
"""A task's wait for a worker of one of nova's thread pools (issue 32,
item 3): timed from its submission to its start, written under the
span that submitted it, the task run inside that span; the executor is
as it was after removal."""

import concurrent.futures
import threading

import testtools

from instrument.patching import patcher as patcher_mod
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import waits as waits_mod
from instrument.targets.nova import pools as nova_pools
from tests.unit import base


class ExecutorQueueTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer, self.rec = base.list_recorder()
        self.target = nova_pools.NovaPoolsTarget()
        self.target.waits = waits_mod.WaitRecorder(self.rec, 'pools')
        self.target.record = self.target.waits.record
        # the target's patcher, as install gives it (nova not imported:
        # its class points stay pending)
        self.target.patcher = patcher_mod.Patcher(
            self.target.points(None), self.rec
        )
        self.target.patcher.apply()
        self.addCleanup(self.target.patcher.remove)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.addCleanup(self.pool.shutdown)
        self.original = self.pool.submit

    def test_queued_task_waits_under_the_submitting_span(self):
        self.target._time_executor(self.pool, 'live_migration')
        release = threading.Event()
        # the first task holds the only worker; the second queues
        span = self.rec.begin(
            'rpc.dispatch',
            'compute',
            'cmp-1',
            {'request_id': 'req-1'},
            ['i-1'],
            None,
            {},
        )
        first = self.pool.submit(release.wait, 5)
        second = self.pool.submit(lambda: 'done')
        self.rec.end(span, self.rec.clock())
        release.set()
        self.assertTrue(first.result(5))
        self.assertEqual('done', second.result(5))
        waits = [d for d in self.buffer.dicts() if d['ev'] == 'pool.wait']
        self.assertEqual(2, len(waits))
        dispatch = [
            d
            for d in self.buffer.dicts()
            if d['ev'] == 'rpc.dispatch' and d['ph'] == 'X'
        ][0]
        for w in waits:
            self.assertEqual(
                {
                    'pool': 'live_migration',
                    'size': 1,
                    'queued': True,
                    'call': 'rpc.dispatch',
                },
                w['attrs'],
            )
            self.assertEqual(dispatch['span'], w['parent'])
            self.assertEqual('req-1', w['req'])
        # the second waited for the first to release the worker
        self.assertGreater(max(w['dur_us'] for w in waits), 0)

    def test_task_runs_inside_the_submitting_span(self):
        # nova 29-31: ComputeManager.live_migration submits
        # _do_live_migration (compute.live_migration) to the executor
        # itself; its span is a child of the dispatch that queued it
        self.target._time_executor(self.pool, 'live_migration')

        def work():
            inner = self.rec.begin(
                'compute.live_migration',
                'compute',
                'cmp-1',
                None,
                ['i-1'],
                None,
                {},
            )
            self.rec.end(inner, self.rec.clock())
            return recorder_mod.current_frame()

        span = self.rec.begin(
            'rpc.dispatch',
            'compute',
            'cmp-1',
            {'request_id': 'req-1'},
            ['i-1'],
            None,
            {},
        )
        future = self.pool.submit(work)
        self.rec.end(span, self.rec.clock())
        self.assertIsNotNone(future.result(5))
        done = {d['ev']: d for d in self.buffer.dicts() if d['ph'] == 'X'}
        dispatch = done['rpc.dispatch']
        self.assertEqual(
            dispatch['span'], done['compute.live_migration']['parent']
        )
        self.assertEqual('req-1', done['compute.live_migration']['req'])
        self.assertEqual(dispatch['span'], done['pool.wait']['parent'])
        # the worker's frame is restored once the task is done
        self.assertIsNone(
            self.pool.submit(recorder_mod.current_frame).result(5)
        )

    def test_task_submitted_outside_a_span_runs_outside_one(self):
        self.target._time_executor(self.pool, 'default')
        self.assertIsNone(
            self.pool.submit(recorder_mod.current_frame).result(5)
        )
        [wait] = [d for d in self.buffer.dicts() if d['ev'] == 'pool.wait']
        self.assertIsNone(wait.get('parent'))

    def test_removal_restores_the_executor(self):
        self.target._time_executor(self.pool, 'default')
        self.assertIn('submit', vars(self.pool))
        self.target._time_executor(self.pool, 'default')  # idempotent
        self.assertEqual(self.original, self.pool.submit.instrument_submit)
        self.target.remove()
        self.assertNotIn('submit', vars(self.pool))
        self.assertEqual(3, self.pool.submit(lambda: 3).result(5))
        self.assertEqual(
            [], [d for d in self.buffer.dicts() if d['ev'] == 'pool.wait']
        )

    def test_inactive_target_records_nothing(self):
        self.target._time_executor(self.pool, 'default')
        self.target.waits.faults.active = False
        self.assertEqual(4, self.pool.submit(lambda: 4).result(5))
        self.assertEqual([], self.buffer.events)
