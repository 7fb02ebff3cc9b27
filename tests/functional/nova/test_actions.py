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
"""Server actions other than create through real nova (issue 12).

Each test runs several operations on one cloud (a cloud costs more than
an operation) and checks, from the written span files, that every stage
of each operation was recorded under the request id of its API call,
on the host (and with the role, source or destination) the API reports,
and with the outcome the API reports.
"""

from unittest import mock

from nova import context
from nova import exception
from nova import objects

from instrument.targets import base as targets_base
from tests.functional.nova import base

NOVA_MAJOR = int(targets_base.distribution_version('nova').split('.')[0])


class ActionsBase(base.InstrumentedCloud):
    def api_span(self, spans, ev, uuid, index=-1):
        """The API span of ``ev`` on server ``uuid`` (the latest one
        unless ``index``), checked to sit under an HTTP request."""
        found = sorted(spans.done(ev, inst=uuid), key=lambda r: r['ts'])
        self.assertTrue(found, '%s of %s not recorded' % (ev, uuid))
        rec = found[index]
        self.assertEqual('api', rec['svc'])
        self.assertTrue(rec['req'].startswith('req-'), rec['req'])
        [http] = [
            r
            for r in spans.done('api.request', req=rec['req'])
            if r['span'] == rec['parent'] or self._ancestor(spans, rec, r)
        ]
        self.assertEqual('api', http['svc'])
        return rec

    @staticmethod
    def _ancestor(spans, rec, ancestor) -> bool:
        parent = rec.get('parent')
        while parent:
            if parent == ancestor['span']:
                return True
            done = [r for r in spans.by_span.get(parent, ()) if r['ph'] == 'X']
            parent = done[0].get('parent') if done else None
        return False

    def step(self, spans, ev, req, uuid, host=None, role=None, st='ok'):
        """The one span ``ev`` of request ``req`` on server ``uuid``,
        checked for its host, role and status."""
        found = [r for r in spans.done(ev, inst=uuid) if r['req'] == req]
        self.assertEqual(1, len(found), '%s under %s: %s' % (ev, req, found))
        [rec] = found
        if host is not None:
            self.assertEqual(host, rec['host'], ev)
        if role is not None:
            self.assertEqual(role, (rec.get('attrs') or {}).get('role'), ev)
        self.assertEqual(st, rec['st'], (ev, rec.get('err')))
        return rec

    def wait_for(self, ev, req, uuid, count=1):
        def check(spans):
            return (
                len([r for r in spans.done(ev, inst=uuid) if r['req'] == req])
                >= count
            )

        return self.spans(until=check)

    def req_of(self, ev, uuid):
        """Request id of the latest API span ``ev`` on ``uuid``."""
        spans = self.spans(until=lambda s: s.done(ev, inst=uuid))
        return self.api_span(spans, ev, uuid)['req']

    def live_migrate(self, server, migration_state, host):
        """Live-migrate ``server`` to ``host`` through the API and wait
        for the migration's ``migration_state`` and an ACTIVE server
        (nova's own ``_live_migrate`` helper only takes a host from
        nova 30 on)."""
        self.api.post_server_action(
            server['id'],
            {'os-migrateLive': {'host': host, 'block_migration': 'auto'}},
        )
        self._wait_for_migration_status(server, [migration_state])
        return self._wait_for_state_change(server, 'ACTIVE')

    def check_gather(self, spans, req, cells, dbs=()):
        """The widest of the API scatter-gathers of request ``req`` that
        are not lazy (each cell queried in a thread of its own): one
        ``api.cells.query`` span per cell of ``cells`` (uuids), in its
        own thread, within the gather, on the cell's database (and the
        databases ``dbs``)."""

        def queries_of(gather):
            return [
                q
                for q in spans.done('api.cells.query', req=req)
                if q['parent'] == gather['span']
            ]

        gathers = [
            r
            for r in spans.done('api.cells.scatter_gather', req=req)
            if queries_of(r)
        ]
        self.assertTrue(gathers, req)
        for gather in gathers:
            self.assertEqual(gather['attrs']['count'], len(queries_of(gather)))
        gather = max(gathers, key=lambda r: r['attrs']['count'])
        queries = queries_of(gather)
        self.assertEqual(len(cells), len(queries))
        self.assertEqual(cells, {q['attrs']['cell'] for q in queries})
        self.assertEqual(0, gather['attrs']['errors'])
        self.assertEqual(0, gather['attrs']['timeouts'])
        for q in queries:
            self.assertEqual('ok', q['st'])
            self.assertNotEqual(gather['tid'], q['tid'])
            self.assertGreaterEqual(q['ts'], gather['ts'])
            self.assertLessEqual(
                q['ts'] + q['dur_us'], gather['ts'] + gather['dur_us']
            )
            queried = {
                r['attrs']['db']
                for r in spans.records
                if r['ev'] == 'sql.query' and r.get('parent') == q['span']
            }
            self.assertLessEqual(
                queried, {'nova_' + q['attrs']['cell_name'], *dbs}
            )
        return gather

    def migration(self, uuid, migration_type):
        migrations = [
            m
            for m in self.api.get_migrations()
            if m['instance_uuid'] == uuid
            and m['migration_type'] == migration_type
        ]
        return sorted(migrations, key=lambda m: m['id'])[-1]


class MoveOperationsTest(ActionsBase):
    """Resize, cold migrate, live migrate between two computes."""

    settings = base.cloud.Settings(
        computes=('host1', 'host2'), flush_interval=0.05
    )

    def test_moves_record_both_hosts_under_their_request(self):
        server = self.boot()
        uuid = server['id']
        src = server['OS-EXT-SRV-ATTR:host']
        dst = 'host2' if src == 'host1' else 'host1'

        # -- cold migrate, then confirm -----------------------------------
        server = self._migrate_server(server)
        self.assertEqual(dst, server['OS-EXT-SRV-ATTR:host'])
        req = self.req_of('api.compute.resize', uuid)
        spans = self.wait_for('compute.finish_resize', req, uuid)
        api = self.api_span(spans, 'api.compute.resize', uuid)
        self.assertIsNone(api['attrs']['flavor_id'])
        self.step(spans, 'conductor.migrate_server', req, uuid)
        self.step(spans, 'conductor.cold_migrate', req, uuid)
        [select] = [
            r
            for r in spans.done('scheduler.select_destinations', inst=uuid)
            if r['req'] == req
        ]
        self.assertEqual([dst], select['attrs']['selected'])
        prep = self.step(
            spans, 'compute.prep_resize', req, uuid, dst, 'destination'
        )
        self.assertEqual('migration', prep['attrs']['migration_type'])
        resize = self.step(
            spans, 'compute.resize_instance', req, uuid, src, 'source'
        )
        self.assertEqual(src, resize['attrs']['source'])
        self.assertEqual(dst, resize['attrs']['dest'])
        self.step(
            spans, 'compute.finish_resize', req, uuid, dst, 'destination'
        )
        self._confirm_resize(server)
        req = self.req_of('api.compute.confirm_resize', uuid)
        spans = self.wait_for('compute.confirm_resize', req, uuid)
        self.step(spans, 'compute.confirm_resize', req, uuid, src, 'source')
        self.assertEqual(
            'confirmed', self.migration(uuid, 'migration')['status']
        )

        # -- resize to another flavor, then revert --------------------------
        src, dst = dst, src
        flavor = self.api.get_flavors()[1]['id']
        self.api.post_server_action(uuid, {'resize': {'flavorRef': flavor}})
        server = self._wait_for_state_change(server, 'VERIFY_RESIZE')
        req = self.req_of('api.compute.resize', uuid)
        spans = self.wait_for('compute.finish_resize', req, uuid)
        api = self.api_span(spans, 'api.compute.resize', uuid)
        self.assertEqual(str(flavor), str(api['attrs']['flavor_id']))
        prep = self.step(
            spans, 'compute.prep_resize', req, uuid, role='destination'
        )
        self.assertEqual('resize', prep['attrs']['migration_type'])
        moved_to = server['OS-EXT-SRV-ATTR:host']
        self.assertEqual(moved_to, prep['host'])
        self.api.post_server_action(uuid, {'revertResize': None})
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual(src, server['OS-EXT-SRV-ATTR:host'])
        req = self.req_of('api.compute.revert_resize', uuid)
        spans = self.wait_for('compute.finish_revert_resize', req, uuid)
        self.step(
            spans, 'compute.revert_resize', req, uuid, moved_to, 'destination'
        )
        self.step(
            spans, 'compute.finish_revert_resize', req, uuid, src, 'source'
        )
        self.assertEqual('reverted', self.migration(uuid, 'resize')['status'])

        # -- live migration ---------------------------------------------------
        server = self.live_migrate(server, 'completed', host=dst)
        self.assertEqual(dst, server['OS-EXT-SRV-ATTR:host'])
        req = self.req_of('api.compute.live_migrate', uuid)
        spans = self.wait_for(
            'compute.post_live_migration_at_destination', req, uuid
        )
        api = self.api_span(spans, 'api.compute.live_migrate', uuid)
        self.assertEqual(dst, api['attrs']['dest'])
        conduct = self.step(spans, 'conductor.live_migrate', req, uuid)
        self.assertEqual(dst, conduct['attrs']['dest'])
        checks = self.step(spans, 'conductor.live_migrate.checks', req, uuid)
        self.assertEqual(dst, checks['attrs']['dest'])
        self.assertEqual(conduct['span'], checks['parent'])
        self.step(
            spans,
            'compute.check_can_live_migrate_destination',
            req,
            uuid,
            dst,
            'destination',
        )
        self.step(
            spans,
            'compute.check_can_live_migrate_source',
            req,
            uuid,
            src,
            'source',
        )
        self.step(
            spans, 'compute.pre_live_migration', req, uuid, dst, 'destination'
        )
        whole = self.step(
            spans, 'compute.live_migration', req, uuid, src, 'source'
        )
        self.assertEqual('live-migration', whole['attrs']['migration_type'])
        self.assertEqual(dst, whole['attrs']['dest'])
        post = self.step(
            spans, 'compute.post_live_migration', req, uuid, src, 'source'
        )
        self.assertEqual(whole['span'], post['parent'])
        self.step(
            spans,
            'compute.post_live_migration_at_destination',
            req,
            uuid,
            dst,
            'destination',
        )
        src, dst = dst, src

        # -- live migration whose destination pre-check fails ------------
        with mock.patch(
            'nova.virt.fake.FakeDriver.check_can_live_migrate_destination',
            side_effect=exception.MigrationPreCheckError(reason='injected'),
        ):
            server = self.live_migrate(server, 'error', host=dst)
        self.assertEqual(src, server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(
            'error', self.migration(uuid, 'live-migration')['status']
        )
        req = self.req_of('api.compute.live_migrate', uuid)
        spans = self.wait_for('conductor.live_migrate', req, uuid)
        check = self.step(
            spans,
            'compute.check_can_live_migrate_destination',
            req,
            uuid,
            dst,
            'destination',
            st='error',
        )
        self.assertEqual(
            'nova.exception.MigrationPreCheckError', check['err']['cls']
        )
        self.step(
            spans, 'conductor.live_migrate.checks', req, uuid, st='error'
        )
        self.step(spans, 'conductor.live_migrate', req, uuid, st='error')
        self.assertEqual(
            [],
            [
                r
                for r in spans.done('compute.pre_live_migration', inst=uuid)
                if r['req'] == req
            ],
        )

        # -- live migration rolled back: pre_live_migration fails ---------
        with mock.patch(
            'nova.virt.fake.FakeDriver.pre_live_migration',
            side_effect=exception.MigrationError(reason='injected'),
        ):
            server = self.live_migrate(server, 'failed', host=dst)
        self.assertEqual(src, server['OS-EXT-SRV-ATTR:host'])
        req = self.req_of('api.compute.live_migrate', uuid)
        spans = self.wait_for('compute.rollback_live_migration', req, uuid)
        self.step(
            spans,
            'compute.pre_live_migration',
            req,
            uuid,
            dst,
            'destination',
            st='error',
        )
        rollback = self.step(
            spans, 'compute.rollback_live_migration', req, uuid, src, 'source'
        )
        self.assertEqual(dst, rollback['attrs']['dest'])
        # the status the rollback gave the migration is the API's
        self.assertEqual(
            self.migration(uuid, 'live-migration')['status'],
            rollback['attrs']['migration_status'],
        )
        self.assertEqual('failed', rollback['attrs']['migration_status'])
        whole = self.step(
            spans,
            'compute.live_migration',
            req,
            uuid,
            src,
            'source',
            st='error',
        )
        self.assertEqual(whole['span'], rollback['parent'])


class EvacuateTest(ActionsBase):
    settings = base.cloud.Settings(
        computes=('host1', 'host2'), flush_interval=0.05
    )

    def test_evacuate_records_the_destination(self):
        server = self.boot()
        uuid = server['id']
        src = server['OS-EXT-SRV-ATTR:host']
        dst = 'host2' if src == 'host1' else 'host1'
        self.computes[src].stop()
        [service] = self.api.get_services(host=src, binary='nova-compute')
        self.api.put_service_force_down(service['id'], True)
        server = self._evacuate_server(server, expected_host=dst)
        req = self.req_of('api.compute.evacuate', uuid)
        spans = self.wait_for('compute.rebuild_instance', req, uuid)
        conduct = self.step(spans, 'conductor.rebuild_instance', req, uuid)
        self.assertTrue(conduct['attrs']['evacuate'])
        rebuild = self.step(
            spans, 'compute.rebuild_instance', req, uuid, dst, 'destination'
        )
        self.assertTrue(rebuild['attrs']['evacuate'])
        self.assertEqual('evacuation', rebuild['attrs']['migration_type'])
        self.assertEqual(src, rebuild['attrs']['source'])
        self.assertEqual('done', self.migration(uuid, 'evacuation')['status'])


class OneHostOperationsTest(ActionsBase):
    """Reboot, stop/start, rebuild, shelve/unshelve, list/show, delete;
    two cells besides cell0, so that a list is a scatter-gather."""

    NUMBER_OF_CELLS = 2
    settings = base.cloud.Settings(flush_interval=0.05)

    def test_one_host_operations_and_cells(self):
        server = self.boot()
        uuid = server['id']
        host = server['OS-EXT-SRV-ATTR:host']

        def one(api_ev, ev, attrs=None):
            req = self.req_of(api_ev, uuid)
            spans = self.wait_for(ev, req, uuid)
            rec = self.step(spans, ev, req, uuid, host)
            for key, value in (attrs or {}).items():
                self.assertEqual(value, rec['attrs'][key], (ev, key))
            return spans, req

        self._reboot_server(server, hard=True)
        one(
            'api.compute.reboot',
            'compute.reboot_instance',
            {'reboot_type': 'HARD'},
        )
        self._stop_server(server)
        one('api.compute.stop', 'compute.stop_instance')
        self._start_server(server)
        one('api.compute.start', 'compute.start_instance')
        self._rebuild_server(server, server['image']['id'])
        spans, req = one(
            'api.compute.rebuild',
            'compute.rebuild_instance',
            {'evacuate': False},
        )
        self.step(spans, 'conductor.rebuild_instance', req, uuid)

        server = self._shelve_server(server)
        spans, req = one('api.compute.shelve', 'compute.shelve_instance')
        self.step(spans, 'compute.shelve_offload_instance', req, uuid, host)
        server = self._unshelve_server(server)
        self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        spans, req = one('api.compute.unshelve', 'compute.unshelve_instance')
        self.step(spans, 'conductor.unshelve_instance', req, uuid)
        [select] = [
            r
            for r in spans.done('scheduler.select_destinations', inst=uuid)
            if r['req'] == req
        ]
        self.assertEqual([host], select['attrs']['selected'])

        # -- show and list ------------------------------------------------
        self.api.get_server(uuid)
        req = self.req_of('api.compute.get', uuid)
        self.assertEqual(
            [],
            [
                r
                for r in self.spans().records
                if r.get('req') == req
                and r['ev'].startswith('api.compute.')
                and r['ev'] != 'api.compute.get'
            ],
        )
        listed = self.api.get_servers()
        self.assertIn(uuid, [s['id'] for s in listed])
        spans = self.spans(until=lambda s: s.done('api.compute.get_all'))
        [get_all] = spans.done('api.compute.get_all')
        self.assertEqual(len(listed), get_all['attrs']['count'])
        req = get_all['req']
        mappings = {c.uuid for c in self.cell_mappings.values()}
        # nova's cross-cell list makes a generator per cell in the
        # scatter-gather's threads; the cells' queries run as the API
        # thread merges them: one api.cells.query per batch, under
        # api.compute.get_all, one after another, with each cell's
        # statements on its database
        batches = [
            r
            for r in spans.done('api.cells.query', req=req)
            if r['parent'] == get_all['span']
        ]
        self.assertEqual(
            {'cell0', 'cell1', 'cell2'},
            {q['attrs']['cell_name'] for q in batches},
        )
        self.assertEqual(mappings, {q['attrs']['cell'] for q in batches})
        self.assertEqual(
            len(listed), sum(q['attrs']['count'] for q in batches)
        )
        batches.sort(key=lambda q: q['ts'])
        for q, after in zip(batches, batches[1:], strict=False):
            self.assertEqual(get_all['tid'], q['tid'])
            self.assertLessEqual(q['ts'] + q['dur_us'], after['ts'])
        for q in batches:
            dbs = {
                r['attrs']['db']
                for r in spans.records
                if r['ev'] == 'sql.query' and r.get('parent') == q['span']
            }
            self.assertEqual({'nova_' + q['attrs']['cell_name']}, dbs)
        # the other scatter-gathers of the request (not lazy) query
        # each cell in a thread of its own: one span per cell.  On nova
        # 33 and 34, InstanceList.fill_faults gathers the listed
        # servers' faults from every cell; 29 and 31 read them in the
        # servers' cell, so their widest gather (the servers' block
        # device mappings) covers that one cell.
        if NOVA_MAJOR >= 33:
            self.check_gather(spans, req, mappings)
        else:
            cell = objects.InstanceMapping.get_by_instance_uuid(
                context.get_admin_context(), uuid
            ).cell_mapping.uuid
            self.check_gather(spans, req, {cell})
        # on every release, the service list gathers every cell's
        # services (ServiceList.get_all across cells; their availability
        # zones are read from the API database)
        self.api.get_services()
        spans = self.spans(
            until=lambda s: [
                r
                for r in s.done('api.request')
                if '/os-services' in r['attrs'].get('route', '')
            ]
        )
        [services] = [
            r
            for r in spans.done('api.request')
            if '/os-services' in r['attrs'].get('route', '')
        ]
        self.check_gather(spans, services['req'], mappings, {'nova_api'})
        # the scheduler's scatter-gathers stay inside its own spans
        self.assertEqual(
            [],
            [
                r
                for r in spans.done('api.cells.scatter_gather')
                if r['svc'] != 'api'
            ],
        )

        # -- delete -----------------------------------------------------------
        self._delete_server(server)
        req = self.req_of('api.compute.delete', uuid)
        spans = self.wait_for('compute.terminate_instance', req, uuid)
        self.step(spans, 'compute.terminate_instance', req, uuid, host)
