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
"""A compute's periodic task holding a lock while a boot lands there.

nova's ``update_available_resource`` audit runs, in a thread of its own
(a greenthread under eventlet) through nova's own
``run_periodic_tasks``, and takes the resource tracker's
``compute_resources`` lock.  Inside it, the virt driver's
``update_provider_tree`` is held until a boot's claim
(``ResourceTracker.instance_claim``, same lock) is queued behind it on
that lock (the fair lock's own ``has_pending_writers``), then a little
longer.  The order is made by the real lock, nothing asserted is
mocked: the report must show the periodic task's span with its SQL and
the lock it held, and the boot's claim waiting on that lock with the
periodic task named as the holder, never the task as a request.
"""

import threading
import time

from nova import context as nova_context
from oslo_concurrency import lockutils
from oslo_service import periodic_task

from instrument import schema
from instrument.analysis import pipeline
from instrument.analysis.render import text as report_text
from tests.functional.nova import base

TASK = 'ComputeManager.update_available_resource'
LOCK = 'compute_resources'
# How long the audit keeps the lock once the claim is queued behind it.
HOLD_S = 0.2


class PeriodicHoldsTheClaimTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def _hold_the_audit(self):
        """The audit's ``update_provider_tree`` (inside the lock) waits
        for ``release``; returns (holding, release, periodic thread)."""
        driver = self.compute.manager.driver
        original = driver.update_provider_tree
        holding = threading.Event()
        release = threading.Event()
        me = {}

        def update_provider_tree(*args, **kwargs):
            # the first call once the audit started is the audit's
            # (nova 34 runs it in its update_resources pool): nothing
            # else runs then
            if me and not holding.is_set():
                holding.set()
                release.wait(60)
            return original(*args, **kwargs)

        driver.update_provider_tree = update_provider_tree
        self.addCleanup(setattr, driver, 'update_provider_tree', original)

        manager = self.compute.manager

        def audit():
            me['armed'] = True
            # only the audit is due
            manager._periodic_last_run = {
                name: None
                if name == 'update_available_resource'
                else periodic_task.now()
                for name in manager._periodic_last_run
            }
            manager.run_periodic_tasks(nova_context.get_admin_context())

        thread = threading.Thread(target=audit, daemon=True)
        return holding, release, thread

    def _wait_for_a_queued_claim(self):
        lock = lockutils.internal_fair_lock(LOCK)
        deadline = time.monotonic() + 30
        while not lock.has_pending_writers:
            if time.monotonic() > deadline:
                self.fail('no claim queued on %s' % LOCK)
            time.sleep(0.01)

    def test_boot_claim_waits_for_the_periodic_audit(self):
        holding, release, thread = self._hold_the_audit()
        thread.start()
        self.addCleanup(release.set)
        self.assertTrue(holding.wait(30), 'the audit never took the lock')
        server = self.api.post_server(
            {'server': self._build_server(networks='none')}
        )
        self._wait_for_a_queued_claim()
        time.sleep(HOLD_S)
        release.set()
        thread.join(60)
        self.assertFalse(thread.is_alive())
        uuid = server['id']
        self._wait_for_state_change(server, 'ACTIVE')
        spans = self.spans(
            until=lambda s: (
                s.done('compute.build', inst=uuid) and s.done('periodic.task')
            )
        )

        # the runtime: the audit's own request id, its SQL and its lock
        [run] = [
            r
            for r in spans.done('periodic.task')
            if r['attrs']['task'] == TASK
        ]
        req = run['req']
        self.assertTrue(req.startswith('periodic-%s-' % TASK), run)
        self.assertEqual('host1', run['host'])
        sql = spans.done('sql.query', req=req)
        self.assertTrue(sql, 'no SQL statement under %s' % req)
        # (it takes the lock more than once: the held one is the
        # longest hold)
        holds = [
            r
            for r in spans.done('lock.wait', req=req)
            if r['attrs']['lock'] == LOCK
        ]
        held = max(holds, key=lambda r: r['attrs']['held_us'])
        self.assertGreaterEqual(held['attrs']['held_us'], HOLD_S * 1e6)
        [create] = spans.done('api.compute.create', inst=uuid)
        boot_req = create['req']
        [claim] = spans.done('compute.claim', inst=uuid)
        [wait] = [
            r
            for r in spans.done('lock.wait', req=boot_req)
            if r['parent'] == claim['span']
        ]
        self.assertEqual(LOCK, wait['attrs']['lock'])
        hold_start = held['ts'] + held['dur_us']
        hold_end = hold_start + held['attrs']['held_us']
        wait_end = wait['ts'] + wait['dur_us']
        # the claim queued while the audit held the lock, and got it
        # when the audit let it go
        self.assertLess(hold_start, wait['ts'])
        self.assertLess(wait['ts'], hold_end)
        # (µs roundings of three figures apart)
        self.assertGreaterEqual(wait_end + 3, hold_end)

        # the analyser
        report = pipeline.analyse([self.span_dir], pipeline.Options())
        self.assertFalse(
            [
                r['req']
                for r in report['requests']
                if r['req'].startswith(schema.PERIODIC_REQ_PREFIX)
            ]
        )
        self.assertEqual(
            ['boot'],
            [r['kind'] for r in report['requests'] if r['req'] == boot_req],
        )
        tasks = {r['task']: r for r in report['periodic']['tasks']}
        audit = tasks[TASK]
        self.assertEqual(1, audit['runs'])
        self.assertEqual(len(sql), audit['sql_count'])
        self.assertEqual(sum(r['dur_us'] for r in sql), audit['sql_us'])
        locks = {x['lock']: x for x in audit['locks']}
        self.assertEqual(
            (len(holds), sum(r['attrs']['held_us'] for r in holds)),
            (locks[LOCK]['acquisitions'], locks[LOCK]['held_us']),
        )
        [delayed] = [
            r
            for r in report['periodic']['delayed']
            if r['task'] == TASK and r['lock'] == LOCK
        ]
        self.assertEqual({'boot': 1}, delayed['operations'])
        self.assertEqual([boot_req], delayed['examples'])
        covered = min(wait_end, hold_end) - max(wait['ts'], hold_start)
        self.assertEqual(covered, delayed['wait_us'])
        self.assertGreaterEqual(covered, HOLD_S * 1e6)
        self.assertEqual(
            (1, covered), (audit['delayed_requests'], audit['delayed_wait_us'])
        )
        [row] = [r for r in report['requests'] if r['req'] == boot_req]
        self.assertEqual(
            [{'task': TASK, 'lock': LOCK, 'wait_us': covered}],
            row['held_by_periodic'],
        )
        # the top waits table names the longest holder of the lock as
        # the span files have it: the audit's run by its task (under a
        # loaded machine the compute's start-up audit, no periodic run,
        # may hold it longer: then no task is named)
        [top] = [r for r in report['waits']['top'] if r['name'] == LOCK]
        longest = max(
            (r for r in spans.done('lock.wait') if r['attrs']['lock'] == LOCK),
            key=lambda r: r['attrs'].get('held_us', 0),
        )
        self.assertEqual(
            (longest['attrs']['held_us'], longest.get('req')),
            (top['longest_hold']['held_us'], top['longest_hold']['request']),
        )
        self.assertEqual(
            TASK if longest.get('req') == req else None,
            top['longest_hold']['periodic_task'],
        )
        text = report_text.render(report)
        # the text says the same holder as the JSON (the CI runs of
        # 2026-11-27 failed here twice under native threads: the
        # start-up audit held the lock longest, 1.21 s, as said above)
        if longest.get('req') == req:
            self.assertIn('periodic.task %s' % TASK, text)
        else:
            self.assertNotIn('periodic.task %s' % TASK, text)
        self.assertIn(TASK, text.split('Periodic tasks (not requests)')[1])
        self.assertIn('Periodic tasks (not requests)', text)
