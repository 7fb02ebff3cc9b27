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
"""Concurrent boots on one compute contend for ``compute_resources``:
the claims' lock waits are recorded and reported by the analyser.

Three instances of one request are built on the only compute at once.
The claim that takes ``compute_resources`` first holds it (inside
nova's ``instance_claim``) until the other two claims have been called
and then a little longer, so each of them must wait at least that
long: the test makes the contention, nova's own lock does the rest.
"""

import importlib.util
import threading
import time

import fixtures

from instrument.analysis import pipeline
from instrument.runtime import threads
from tests.functional.nova import base

# nova's own pools (nova 32 and later), timed as pool.wait by
# instrument.targets.nova.pools
HAS_POOL_FACTORY = (
    importlib.util.find_spec('nova.thread_pool_factory') is not None
)

INSTANCES = 3
HOLD_S = 0.3


class ClaimContentionTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def setUp(self):
        super().setUp()
        from nova.compute import resource_tracker

        rt_cls = resource_tracker.ResourceTracker
        arrived = []
        all_here = threading.Event()
        claim = rt_cls.instance_claim  # nova's, under the compute.claim span

        def counting_claim(rt, *args, **kwargs):
            arrived.append(1)
            if len(arrived) >= INSTANCES:
                all_here.set()
            return claim(rt, *args, **kwargs)

        set_host = rt_cls._set_instance_host_and_node
        held = []

        def slow_set_host(rt, *args, **kwargs):
            # under compute_resources (instance_claim holds it)
            if not held:
                held.append(1)
                all_here.wait(30)
                time.sleep(HOLD_S)
            return set_host(rt, *args, **kwargs)

        self.useFixture(
            fixtures.MonkeyPatch(
                'nova.compute.resource_tracker.ResourceTracker.instance_claim',
                counting_claim,
            )
        )
        self.useFixture(
            fixtures.MonkeyPatch(
                'nova.compute.resource_tracker.ResourceTracker.'
                '_set_instance_host_and_node',
                slow_set_host,
            )
        )

    def _boot_many(self) -> list:
        server = self._build_server(networks='none')
        server['min_count'] = INSTANCES
        server['return_reservation_id'] = True
        resv = self.api.post_server({'server': server})['reservation_id']
        servers = self.api.get_servers(
            detail=True, search_opts={'reservation_id': resv}
        )
        self.assertEqual(INSTANCES, len(servers))
        return [self._wait_for_state_change(s, 'ACTIVE') for s in servers]

    def test_claim_waits_on_compute_resources(self):
        servers = self._boot_many()
        uuids = {s['id'] for s in servers}

        def claims_done(spans):
            return (
                len(
                    [
                        r
                        for r in spans.done('compute.claim')
                        if set(r.get('inst') or ()) & uuids
                    ]
                )
                >= INSTANCES
            )

        spans = self.spans(until=claims_done)
        claims = {
            r['span']: r
            for r in spans.done('compute.claim')
            if set(r.get('inst') or ()) & uuids
        }
        self.assertEqual(INSTANCES, len(claims))
        waits = [
            r
            for r in spans.done('lock.wait')
            if r['attrs']['lock'] == 'compute_resources'
            and r.get('parent') in claims
        ]
        # one acquisition per claim, inside it, same request
        self.assertEqual(INSTANCES, len(waits), waits)
        req = {c['req'] for c in claims.values()}
        self.assertEqual(1, len(req))
        for w in waits:
            claim = claims[w['parent']]
            self.assertEqual(claim['req'], w['req'])
            self.assertEqual(claim['inst'], w['inst'])
            self.assertEqual('compute.claim', w['attrs']['call'])
            self.assertTrue(w['attrs']['fair'])
            self.assertEqual('host1', w['host'])
            # the lock is taken and released inside the claim
            self.assertGreaterEqual(
                claim['dur_us'], w['dur_us'] + w['attrs']['held_us']
            )
            self.assertGreaterEqual(w['ts'], claim['ts'])
        # two claims were called while the first held the lock, which
        # it kept HOLD_S longer: they waited at least that
        waited = sorted(w['dur_us'] for w in waits)
        self.assertGreaterEqual(waited[-1], HOLD_S * 1e6)
        self.assertGreaterEqual(waited[-2], HOLD_S * 1e6)
        # the wait and the hold account for the waiting claims' time:
        # what is left is nova's work outside the lock
        for w in waits:
            if w['dur_us'] >= HOLD_S * 1e6:
                claim = claims[w['parent']]
                covered = w['dur_us'] + w['attrs']['held_us']
                self.assertGreater(covered / claim['dur_us'], 0.8, (w, claim))

        # the instance-uuid lock of each build shows up too
        uuid_locks = [
            r for r in spans.done('lock.wait') if r['attrs']['lock'] in uuids
        ]
        self.assertEqual(uuids, {r['attrs']['lock'] for r in uuid_locks})
        for r in uuid_locks:
            self.assertEqual(
                'compute.build_and_run_instance', r['attrs']['call']
            )
        # eventlet: the build slot (max_concurrent_builds) is timed;
        # under native threads nova has no semaphore there
        slots = [
            r
            for r in spans.done('pool.wait')
            if set(r.get('inst') or ()) & uuids
            and not r['attrs'].get('queued')
        ]
        if threads.eventlet_patched():
            self.assertEqual(INSTANCES, len(slots))
            self.assertEqual(
                {'max_concurrent_builds'}, {r['attrs']['pool'] for r in slots}
            )
        else:
            self.assertEqual([], slots)
        # issue 32: the build thread's wait for a worker of nova's
        # long_task pool (the limit of builds under native threads), in
        # both modes, under the RPC method that handed the build over;
        # nova before 32 has no such pool (nova.thread_pool_factory)
        handed = [
            r
            for r in spans.done('pool.wait')
            if set(r.get('inst') or ()) & uuids
            and r['attrs'].get('queued')
            and r['attrs']['pool'] == 'long_task'
        ]
        if not HAS_POOL_FACTORY:
            self.assertEqual([], handed)
            return
        self.assertEqual(INSTANCES, len(handed), handed)
        self.assertEqual({'long_task'}, {r['attrs']['pool'] for r in handed})
        self.assertEqual(
            {'compute.build_and_run_instance'},
            {r['attrs']['call'] for r in handed},
        )

        # the analyser reports it, from the span files alone
        report = pipeline.analyse([self.span_dir])
        top = {(r['kind'], r['name']): r for r in report['waits']['top']}
        lock = top[('lock', 'compute_resources')]
        self.assertGreaterEqual(lock['count'], INSTANCES)
        self.assertEqual(waited[-1], lock['max_us'])
        self.assertIn(
            lock['longest_hold']['call'],
            ('compute.claim', 'compute.update_available_resource', None),
        )
        rows = {
            (r['op'], r['component']): r
            for r in report['waits']['work_vs_wait']
        }
        claim_row = rows[('boot', 'compute.claim')]
        names = {(w['kind'], w['name']): w for w in claim_row['waits']}
        wait_row = names[('lock', 'compute_resources')]
        [request] = [r for r in report['requests'] if r['req'] in req]
        in_claim = [
            w
            for w in request['waits']
            if w['in'] == 'compute.claim' and w['name'] == 'compute_resources'
        ]
        # what the analyser charges is what the claims waited
        self.assertEqual(
            sum(w['dur_us'] for w in waits), in_claim[0]['wait_us']
        )
        self.assertEqual(
            in_claim[0]['wait_us'] / claim_row['requests'], wait_row['mean_us']
        )
        # taken out of the claims' exclusive time, into wait.lock
        self.assertGreaterEqual(
            request['components_us']['wait.lock'], in_claim[0]['wait_us']
        )
        self.assertLess(
            request['components_us']['compute.claim'],
            sum(c['dur_us'] for c in claims.values())
            - in_claim[0]['wait_us']
            + 1,
        )
        # the last claim's wait is on the request's critical path
        self.assertGreaterEqual(in_claim[0]['critical_us'], HOLD_S * 1e6)


MIGRATION_S = 0.6


class LiveMigrationQueueTest(base.InstrumentedCloud):
    """Issue 32, item 3: nova queues live migrations in its executor
    (``max_concurrent_live_migrations``, 1 by default).  Two servers on
    one host are live-migrated at once, each migration taking
    ``MIGRATION_S``: the second waits for the first in nova's queue.
    The wait is a ``pool.wait`` under the dispatch that queued it, and
    the analyser charges it to ``wait.pool``, not to ``rpc.queue``."""

    settings = base.cloud.Settings(
        computes=('host1', 'host2'), flush_interval=0.05
    )

    def setUp(self):
        super().setUp()
        from nova.virt import fake

        migrate = fake.FakeDriver.live_migration

        def slow_migration(driver, *args, **kwargs):
            time.sleep(MIGRATION_S)
            return migrate(driver, *args, **kwargs)

        self.useFixture(
            fixtures.MonkeyPatch(
                'nova.virt.fake.FakeDriver.live_migration', slow_migration
            )
        )

    def test_second_migration_waits_in_nova_queue(self):
        servers = [
            self._create_server(networks='none', host='host1')
            for _ in range(2)
        ]
        for server in servers:
            self.api.post_server_action(
                server['id'],
                {
                    'os-migrateLive': {
                        'host': 'host2',
                        'block_migration': 'auto',
                    }
                },
            )
        for server in servers:
            self._wait_for_migration_status(server, ['completed'])
        uuids = {s['id'] for s in servers}

        def migrated(spans):
            return (
                len(
                    [
                        r
                        for r in spans.done('compute.live_migration')
                        if set(r.get('inst') or ()) & uuids
                    ]
                )
                >= 2
            )

        spans = self.spans(until=migrated)
        whole = {
            r['inst'][0]: r
            for r in spans.done('compute.live_migration')
            if set(r['inst']) & uuids
        }
        dispatches = {m['parent']: m for m in whole.values()}
        queued = [
            r
            for r in spans.done('pool.wait')
            if r['attrs']['pool'] == 'live_migration'
            and r.get('parent') in dispatches
        ]
        # one wait per migration, under the dispatch that queued it, in
        # its request, on the source
        self.assertEqual(2, len(queued), queued)
        for w in queued:
            self.assertTrue(w['attrs']['queued'])
            self.assertEqual(1, w['attrs']['size'])
            self.assertEqual('host1', w['host'])
            self.assertEqual('rpc.dispatch', w['attrs']['call'])
            m = dispatches[w['parent']]
            self.assertEqual(m['req'], w['req'])
            self.assertEqual(m['parent'], w['parent'])
            # it ends as the migration starts
            self.assertLessEqual(w['ts'] + w['dur_us'], m['ts'] + 1000)
        longest = max(queued, key=lambda r: r['dur_us'])
        self.assertGreaterEqual(longest['dur_us'], MIGRATION_S * 0.8e6)

        report = pipeline.analyse([self.span_dir])
        [row] = [
            r
            for r in report['requests']
            if r['kind'] == 'live_migrate' and r['req'] == longest['req']
        ]
        cp = row['critical_path_us']
        self.assertGreaterEqual(cp['wait.pool'], MIGRATION_S * 0.8e6)
        self.assertLess(cp.get('rpc.queue', 0), MIGRATION_S * 0.5e6)
        self.assertLess(cp.get('gap', 0), MIGRATION_S * 0.5e6)
        [wait] = [w for w in row['waits'] if w['name'] == 'live_migration']
        self.assertEqual(longest['dur_us'], wait['wait_us'])
        for r in report['requests']:
            self.assertEqual([], path_beyond_own_time(r), r['req'])


def path_beyond_own_time(row: dict) -> list:
    """The components of a request row charged more critical-path time
    than they recorded (exclusive plus SQL time; ``gap`` is nobody's)."""
    own = dict(row['components_us'])
    for name, us in row['sql_in_us'].items():
        own[name] = own.get(name, 0) + us
    return [
        (name, us, own.get(name, 0))
        for name, us in row['critical_path_us'].items()
        if name != 'gap' and us > own.get(name, 0)
    ]
