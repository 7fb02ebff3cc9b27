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
"""The analyser's operations and final states against nova's own view
(issue 32, item 10).

Each test drives real nova (the instrumented in-process cloud) through
operations the analyser misread on nova's own functional tests: a boot
given up after reschedules, cross-cell (snapshot-based) moves, an
unshelve of a server never offloaded, the shelve of a volume-backed
server, soft delete, restore, force delete, volume attach and detach, a
live migration's abort, requests refused before the compute API.  It
then reads the span files with the analyser and checks each request's
operation and final state against what the API said (status codes,
server states, migration records, faults).  Run in both modes (eventlet,
and native threads with OS_NOVA_DISABLE_EVENTLET_PATCHING=1).
"""

import copy
import gzip
import inspect
import json
import os
from unittest import mock

from nova import exception
from nova.api.openstack.compute import migrate_server as ms_api
from nova.policies import base as base_policies
from nova.policies import deferred_delete as dd_policies
from nova.policies import servers as servers_policies
from nova.scheduler import utils as scheduler_utils
from nova.tests import fixtures as nova_fixtures

from instrument.analysis import pipeline
from instrument.runtime import threads
from tests.functional.nova import base
from tests.functional.nova import test_actions

# With this set to a directory, each test leaves its span files there
# (``<test>.<mode>.jsonl.gz``) and what the API said of each request it
# checked (``.truth.json``): tests/unit/analysis/test_recorded_operations
# reads the recordings kept in tests/data/operations.
RECORD_DIR = os.environ.get('INSTRUMENT_RECORD_OPERATIONS')


class OperationsBase(test_actions.ActionsBase):
    def setUp(self):
        if RECORD_DIR:
            # small recordings: the operations, not the SQL
            self.settings = copy.copy(self.settings)
            self.settings.sql_timing = False
        super().setUp()
        self.expected = {}
        if RECORD_DIR:
            self.addCleanup(self._record)

    def _record(self) -> None:
        """The span files and the requests checked, for the unit tier."""
        self.spans()  # flushed
        mode = 'eventlet' if threads.eventlet_patched() else 'threads'
        name = os.path.join(
            RECORD_DIR, '%s.%s' % (self.id().rsplit('.', 2)[-1], mode)
        )
        with gzip.open(name + '.jsonl.gz', 'wb') as out:
            for fname in sorted(os.listdir(self.span_dir)):
                with open(os.path.join(self.span_dir, fname), 'rb') as f:
                    out.write(f.read())
        with open(name + '.truth.json', 'w') as f:
            json.dump(self.expected, f, indent=1, sort_keys=True)

    def rows(self) -> dict:
        """The analyser's request rows, by request id."""
        self.spans()  # flushed
        report = pipeline.analyse([self.span_dir], pipeline.Options())
        return {r['req']: r for r in report['requests']}

    def check(self, rows, req, op, state, cause=None):
        """Request ``req`` is ``op`` with every instance in ``state``
        (and the cause's class ending with ``cause``)."""
        self.expected[req] = {'kind': op, 'state': state, 'cause': cause}
        row = rows[req]
        self.assertEqual(op, row['kind'], row)
        self.assertEqual(
            [state] * len(row['instances']),
            [i['state'] for i in row['instances']],
            row,
        )
        if cause is not None:
            [inst] = row['instances']
            self.assertTrue(
                (inst['cause'] or {}).get('cls', '').endswith(cause), inst
            )
        return row

    def call(self, method, url, status, body=None) -> str:
        """One API call answered ``status``; its request id as the
        analyser reads it (the context's id, which the ``api.request``
        span ends with)."""
        kwargs = {'check_response_status': [status]}
        if method == 'POST':
            resp = self.api.api_post(url, body, **kwargs)
        else:
            resp = self.api.api_delete(url, **kwargs)
        header = resp.headers['x-openstack-request-id']

        def answered(spans):
            return [
                r
                for r in spans.done('api.request')
                if header in (r['req'], r['attrs'].get('req_began'))
            ]

        [http] = answered(self.spans(until=answered))
        self.assertEqual(status, http['attrs']['status'])
        return http['req']


class OneHostTest(OperationsBase):
    """Operations of one compute."""

    settings = base.cloud.Settings(flush_interval=0.05)

    def test_boot_given_up_after_reschedules(self):
        # every spawn fails: the compute reschedules, the conductor has
        # no alternate host left (MaxRetriesExceeded) and gives up
        with mock.patch(
            'nova.virt.fake.FakeDriver.spawn',
            side_effect=RuntimeError('injected'),
        ):
            server = self.boot(expected_state='ERROR')
        uuid = server['id']
        server = self.api.get_server(uuid)
        self.assertIn(
            'Exceeded maximum number of retries', server['fault']['message']
        )
        spans = self.spans(
            until=lambda s: s.done('conductor.reschedule_failed', inst=uuid)
        )
        [create] = spans.done('api.compute.create', inst=uuid)
        [given_up] = spans.done('conductor.reschedule_failed', inst=uuid)
        self.assertEqual(create['req'], given_up['req'])
        self.check(
            self.rows(),
            create['req'],
            'boot',
            'scheduling_failure',
            'MaxRetriesExceeded',
        )

    def test_shelve_kept_then_unshelved_and_volume_backed_shelve(self):
        # never offloaded: unshelve starts it on its host
        self.flags(shelved_offload_time=-1)
        server = self.boot()
        uuid = server['id']
        host = server['OS-EXT-SRV-ATTR:host']
        server = self._shelve_server(server, 'SHELVED')
        shelve = self.req_of('api.compute.shelve', uuid)
        self.wait_for('compute.shelve_instance', shelve, uuid)
        server = self._unshelve_server(server)
        self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        unshelve = self.req_of('api.compute.unshelve', uuid)
        spans = self.wait_for('compute.start_instance', unshelve, uuid)
        self.step(spans, 'compute.start_instance', unshelve, uuid, host)
        self.assertEqual(
            [], [r for r in spans.done('compute.unshelve_instance', inst=uuid)]
        )
        # a volume-backed server is offloaded at once
        self.flags(shelved_offload_time=0)
        if (
            'networks'
            not in inspect.signature(
                self._create_server_boot_from_volume
            ).parameters
        ):
            # nova 29-31's helper builds a server without `networks`,
            # which the API's microversion here refuses: the
            # volume-backed half runs on nova 33 and 34
            return
        bfv = self._create_server_boot_from_volume(networks='none')
        bfv = self._shelve_server(bfv, 'SHELVED_OFFLOADED')
        offload = self.req_of('api.compute.shelve', bfv['id'])
        spans = self.wait_for(
            'compute.shelve_offload_instance', offload, bfv['id']
        )
        self.assertEqual(
            [],
            [r for r in spans.done('compute.shelve_instance', inst=bfv['id'])],
        )
        rows = self.rows()
        self.check(rows, shelve, 'shelve', 'success')
        self.check(rows, unshelve, 'unshelve', 'success')
        self.check(rows, offload, 'shelve', 'success')

    def test_soft_delete_restore_force_delete_and_volumes(self):
        self.flags(reclaim_instance_interval=3600)
        server = self.boot()
        uuid = server['id']
        host = server['OS-EXT-SRV-ATTR:host']
        reqs = {}

        def done(api_ev, ev):
            req = self.req_of(api_ev, uuid)
            spans = self.wait_for(ev, req, uuid)
            self.step(spans, ev, req, uuid, host)
            return req

        # volumes: attach (its device name reserved first), detach
        volume = nova_fixtures.CinderFixture.SWAP_OLD_VOL
        self.api.post_server_volume(
            uuid, {'volumeAttachment': {'volumeId': volume}}
        )
        self._wait_for_volume_attach(uuid, volume)
        reqs['attach_volume'] = done(
            'api.compute.attach_volume', 'compute.attach_volume'
        )
        self.step(
            self.spans(),
            'compute.reserve_block_device_name',
            reqs['attach_volume'],
            uuid,
            host,
        )
        self.api.delete_server_volume(uuid, volume)
        self._wait_for_volume_detach(uuid, volume)
        reqs['detach_volume'] = done(
            'api.compute.detach_volume', 'compute.detach_volume'
        )
        # a DELETE with reclaim_instance_interval set is a soft delete
        self.api.delete_server(uuid)
        server = self._wait_for_state_change(server, 'SOFT_DELETED')
        reqs['soft_delete'] = done(
            'api.compute.soft_delete', 'compute.soft_delete_instance'
        )
        self.api.post_server_action(uuid, {'restore': None})
        server = self._wait_for_state_change(server, 'ACTIVE')
        reqs['restore'] = done(
            'api.compute.restore', 'compute.restore_instance'
        )
        self.api.delete_server(uuid)
        server = self._wait_for_state_change(server, 'SOFT_DELETED')
        self.api.post_server_action(uuid, {'forceDelete': None})
        self._wait_until_deleted(server)
        reqs['force_delete'] = done(
            'api.compute.force_delete', 'compute.terminate_instance'
        )
        rows = self.rows()
        for op, req in reqs.items():
            self.check(rows, req, op, 'success')
        self.assertEqual(
            1,
            len(
                [
                    r
                    for r in rows.values()
                    if r['kind'] == 'soft_delete'
                    and r['instances'][0]['inst'] == uuid
                    and r['req'] != reqs['soft_delete']
                ]
            ),
        )

    def test_requests_refused_before_the_compute_api(self):
        server = self.boot()
        uuid = server['id']
        action = '/servers/%s/action' % uuid
        self.policy.set_rules(
            {
                ms_api.ms_policies.POLICY_ROOT % 'migrate': '!',
                dd_policies.BASE_POLICY_NAME % 'force': '!',
            },
            overwrite=False,
        )
        refused = {
            # the request's schema (400), before the server is read
            self.call(
                'POST', '/servers', 400, {'server': {'name': 'x'}}
            ): 'boot',
            self.call('POST', action, 400, {'resize': {}}): 'resize',
            self.call(
                'POST', action, 400, {'os-migrateLive': {}}
            ): 'live_migrate',
            self.call(
                'POST',
                '/servers/%s/os-volume_attachments' % uuid,
                400,
                {'volumeAttachment': {}},
            ): 'attach_volume',
            # policy (403), after the server was read
            self.call('POST', action, 403, {'migrate': None}): 'cold_migrate',
            self.call(
                'POST', action, 403, {'forceDelete': None}
            ): 'force_delete',
            # the compute API's state check (409)
            self.call('POST', action, 409, {'restore': None}): 'restore',
        }
        rows = self.rows()
        for req, op in refused.items():
            self.check(rows, req, op, 'api_failure')
        self.assertEqual('ACTIVE', self.api.get_server(uuid)['status'])


class RescheduleClaimFailsTest(OperationsBase):
    """A reschedule whose claim on the alternate host fails."""

    settings = base.cloud.Settings(
        computes=('host1', 'host2'), flush_interval=0.05
    )

    def test_boot_given_up_when_the_alternate_cannot_be_claimed(self):
        # the spawn fails on the first host; the conductor's claim on
        # the alternate fails (AllocationUpdateFailed): it gives up
        real_claim = scheduler_utils.claim_resources
        claims = []

        def claim(*args, **kwargs):
            claims.append(args)
            if len(claims) == 1:  # the scheduler's, on the first host
                return real_claim(*args, **kwargs)
            raise exception.AllocationUpdateFailed(
                consumer_uuid=args[3], error='injected'
            )

        with (
            mock.patch(
                'nova.virt.fake.FakeDriver.spawn',
                side_effect=RuntimeError('injected'),
            ),
            mock.patch(
                'nova.scheduler.utils.claim_resources', side_effect=claim
            ),
        ):
            server = self.boot(expected_state='ERROR')
        uuid = server['id']
        self.assertEqual(2, len(claims))
        self.assertIn(
            'Failed to update allocations',
            self.api.get_server(uuid)['fault']['message'],
        )
        spans = self.spans(
            until=lambda s: s.done('conductor.reschedule_failed', inst=uuid)
        )
        [create] = spans.done('api.compute.create', inst=uuid)
        self.check(
            self.rows(),
            create['req'],
            'boot',
            'scheduling_failure',
            'AllocationUpdateFailed',
        )


class CrossCellBase(OperationsBase):
    """host1 in cell1, host2 in cell2; cross-cell resize allowed."""

    NUMBER_OF_CELLS = 2
    settings = base.cloud.Settings(computes=(), flush_interval=0.05)

    def _setup_compute_service(self):
        self._start_compute('host1', cell_name='cell1')
        return self._start_compute('host2', cell_name='cell2')

    def setUp(self):
        super().setUp()
        self.policy.set_rules(
            {servers_policies.CROSS_CELL_RESIZE: base_policies.RULE_ADMIN_API},
            overwrite=False,
        )


class CrossCellTest(CrossCellBase):
    """A cold migration and a resize across cells (snapshot-based), a
    confirm and a revert."""

    def test_cross_cell_moves(self):
        server = self.boot()
        uuid = server['id']
        src = server['OS-EXT-SRV-ATTR:host']
        dst = 'host2' if src == 'host1' else 'host1'
        reqs = {}

        def move(api_ev, steps):
            req = self.req_of(api_ev, uuid)
            spans = self.wait_for(steps[-1][0], req, uuid)
            for ev, host, role in steps:
                rec = self.step(spans, ev, req, uuid, host, role)
                self.assertEqual(
                    src if role == 'source' else dst, rec['host'], ev
                )
            return req

        there = (
            ('compute.prep_snapshot_based_resize_at_dest', dst, 'destination'),
            ('compute.prep_snapshot_based_resize_at_source', src, 'source'),
            (
                'compute.finish_snapshot_based_resize_at_dest',
                dst,
                'destination',
            ),
        )
        server = self._migrate_server(server)
        self.assertEqual(dst, server['OS-EXT-SRV-ATTR:host'])
        reqs[move('api.compute.resize', there)] = 'cold_migrate'
        server = self._confirm_resize(server, cross_cell=True)
        reqs[
            move(
                'api.compute.confirm_resize',
                (
                    (
                        'compute.confirm_snapshot_based_resize_at_source',
                        src,
                        'source',
                    ),
                ),
            )
        ] = 'confirm_resize'
        self.assertEqual(
            'confirmed', self.migration(uuid, 'migration')['status']
        )

        src, dst = dst, src
        there = tuple(
            (ev, src if role == 'source' else dst, role)
            for ev, _host, role in there
        )
        flavor = self.api.get_flavors()[1]['id']
        self.api.post_server_action(uuid, {'resize': {'flavorRef': flavor}})
        server = self._wait_for_state_change(server, 'VERIFY_RESIZE')
        self.assertEqual(dst, server['OS-EXT-SRV-ATTR:host'])
        reqs[move('api.compute.resize', there)] = 'resize'
        self.api.post_server_action(uuid, {'revertResize': None})
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual(src, server['OS-EXT-SRV-ATTR:host'])
        reqs[
            move(
                'api.compute.revert_resize',
                (
                    (
                        'compute.revert_snapshot_based_resize_at_dest',
                        dst,
                        'destination',
                    ),
                    (
                        'compute.finish_revert_snapshot_based_resize_at_source',
                        src,
                        'source',
                    ),
                ),
            )
        ] = 'revert_resize'
        self._wait_for_migration_status(server, ['reverted'])

        rows = self.rows()
        for req, op in reqs.items():
            self.check(rows, req, op, 'success')


class CrossCellConductorFailureTest(CrossCellBase):
    """The conductor's own part of a cross-cell confirm and revert fails
    (its work in the cell databases: the confirm's after the source
    compute cleaned up, the revert's before any compute step): the
    conductor's event of the action is an Error (and the confirmed
    server ERROR, its migration error), and the analyser reads
    ``conductor_failure``, neither incomplete nor a success."""

    def _moved(self) -> dict:
        """A server cold-migrated to the other cell, to confirm or
        revert."""
        server = self._migrate_server(self.boot())
        self.assertEqual('VERIFY_RESIZE', server['status'])
        return server

    def _dispatched(self, req: str, method: str) -> None:
        """Wait for the conductor's dispatch of ``method`` under
        ``req`` to end; it failed."""

        def ended(spans):
            return [
                r
                for r in spans.done('rpc.dispatch', req=req)
                if r['attrs'].get('method') == method
            ]

        [dispatch] = ended(self.spans(until=ended))
        self.assertEqual('conductor', dispatch['svc'])
        self.assertEqual('error', dispatch['st'])

    def test_conductor_fails_cross_cell_confirm_and_revert(self):
        from nova.conductor.tasks import cross_cell_migrate as ccm
        from oslo_db import exception as db_exc

        def lost(*args, **kwargs):
            raise db_exc.DBConnectionError('cell database gone')

        # confirm: the source host cleaned up (its step ended ok), then
        # the conductor fails updating the target cell
        server = self._moved()
        uuid = server['id']
        with mock.patch.object(
            ccm.ConfirmResizeTask, '_finish_confirm_in_target_cell', lost
        ):
            self.api.post_server_action(uuid, {'confirmResize': None})
            self._wait_for_state_change(server, 'ERROR')
            self._wait_for_instance_action_event(
                server,
                'confirmResize',
                'conductor_confirm_snapshot_based_resize',
                'Error',
            )
        self.assertEqual('error', self.migration(uuid, 'migration')['status'])
        confirm = self.req_of('api.compute.confirm_resize', uuid)
        self._dispatched(confirm, 'confirm_snapshot_based_resize')
        spans = self.wait_for(
            'compute.confirm_snapshot_based_resize_at_source', confirm, uuid
        )
        self.step(
            spans,
            'compute.confirm_snapshot_based_resize_at_source',
            confirm,
            uuid,
            role='source',
        )

        # revert: the conductor fails updating the source cell, before
        # it calls either compute (nova's roll-back then marks the copy
        # in the source cell, which the API does not show yet: the
        # conductor's event of the action is what says it failed)
        server = self._moved()
        uuid = server['id']
        with mock.patch.object(
            ccm.RevertResizeTask, '_update_instance_in_source_cell', lost
        ):
            self.api.post_server_action(uuid, {'revertResize': None})
            self._wait_for_instance_action_event(
                server,
                'revertResize',
                'conductor_revert_snapshot_based_resize',
                'Error',
            )
        revert = self.req_of('api.compute.revert_resize', uuid)
        self._dispatched(revert, 'revert_snapshot_based_resize')
        self.assertEqual(
            [],
            [
                r
                for r in self.spans().done(inst=uuid)
                if r['req'] == revert and r['ev'].startswith('compute.')
            ],
        )

        rows = self.rows()
        for req, op in (
            (confirm, 'confirm_resize'),
            (revert, 'revert_resize'),
        ):
            row = self.check(
                rows, req, op, 'conductor_failure', 'DBConnectionError'
            )
            [inst] = row['instances']
            self.assertEqual('rpc.dispatch', inst['cause']['ev'])


class LiveMigrationAbortTest(OperationsBase):
    """A running live migration aborted through the API (nova's
    ``FakeLiveMigrateDriver``: a migration runs until aborted, for up
    to 5 s, then rolls back as ``cancelled``)."""

    settings = base.cloud.Settings(
        computes=('host1', 'host2'),
        driver='fake.FakeLiveMigrateDriver',
        flush_interval=0.05,
    )

    def test_abort(self):
        server = self.boot()
        uuid = server['id']
        src = server['OS-EXT-SRV-ATTR:host']
        dst = 'host2' if src == 'host1' else 'host1'
        self.api.post_server_action(
            uuid, {'os-migrateLive': {'host': dst, 'block_migration': 'auto'}}
        )
        self._wait_for_migration_status(server, ['running'])
        migration = self.migration(uuid, 'live-migration')
        self.api.api_delete(
            '/servers/%s/migrations/%s' % (uuid, migration['id'])
        )
        self._wait_for_migration_status(server, ['cancelled'])
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual(src, server['OS-EXT-SRV-ATTR:host'])
        req = self.req_of('api.compute.live_migrate_abort', uuid)
        spans = self.wait_for('compute.live_migration_abort', req, uuid)
        self.step(
            spans, 'compute.live_migration_abort', req, uuid, src, 'source'
        )
        migrate_req = self.req_of('api.compute.live_migrate', uuid)
        spans = self.wait_for(
            'compute.rollback_live_migration', migrate_req, uuid
        )
        rollback = self.step(
            spans,
            'compute.rollback_live_migration',
            migrate_req,
            uuid,
            src,
            'source',
        )
        self.assertEqual('cancelled', rollback['attrs']['migration_status'])
        # a migration that is over can no longer be aborted: the
        # compute API refuses it (409: the server is not migrating)
        refused = self.call(
            'DELETE',
            '/servers/%s/migrations/%s' % (uuid, migration['id']),
            409,
        )
        rows = self.rows()
        self.check(rows, req, 'live_migrate_abort', 'success')
        self.check(rows, migrate_req, 'live_migrate', 'rolled_back')
        self.check(rows, refused, 'live_migrate_abort', 'api_failure')
