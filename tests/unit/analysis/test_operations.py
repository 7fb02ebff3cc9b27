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
"""Each operation's naming and state machine on hand-built span trees."""

import testtools

from instrument import schema
from instrument.analysis.model import operations
from instrument.analysis.model import spans as spans_mod

INST = '11111111-2222-3333-4444-555555555555'


class Spans:
    """A request's spans (the assembler's lists), built step by step."""

    def __init__(self) -> None:
        self.spans = {}
        self.t = 0

    def add(
        self,
        ev,
        parent=None,
        svc=None,
        host='h',
        dur=10,
        err=None,
        attrs=None,
        inst=(INST,),
        start=None,
    ):
        sid = 's%d' % (len(self.spans) + 1)
        svc = svc or ev.split('.', 1)[0]
        self.t += 10
        st = None if dur is None else ('error' if err else 'ok')
        self.spans[sid] = [
            ev,
            host,
            svc,
            1,
            self.t if start is None else start,
            dur,
            parent,
            st,
            {'cls': err, 'msg': 'm'} if err else None,
            attrs or {},
            list(inst) if inst else None,
        ]
        return sid

    def api(
        self,
        method='POST',
        route='/v2.1/servers/{id}/action',
        status=202,
        action=None,
    ):
        attrs = {'method': method, 'route': route, 'status': status}
        if action:
            attrs['action'] = action
        return self.add(
            'api.request', svc='api', dur=1000, attrs=attrs, inst=None, start=0
        )

    def states(self, op=None):
        op = op or operations.operation_of(self.spans)
        rows = operations.final_states(op, spans_mod.Tree(self.spans))
        return op, [(r['state'], (r['cause'] or {}).get('cls')) for r in rows]


class OperationOfTest(testtools.TestCase):
    def test_action_method_wins_over_the_get_of_the_instance(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.get', api)
        s.add('api.compute.live_migrate', api)
        self.assertEqual('live_migrate', operations.operation_of(s.spans))

    def test_show_list_and_other(self):
        s = Spans()
        s.add('api.compute.get', s.api('GET', '/v2.1/servers/{id}', 200))
        self.assertEqual('show', operations.operation_of(s.spans))
        s = Spans()
        s.add('api.compute.get_all', s.api('GET', '/v2.1/servers/detail', 200))
        self.assertEqual('list', operations.operation_of(s.spans))
        s = Spans()
        s.add('api.compute.get', s.api())  # a console: only a get
        self.assertEqual('other', operations.operation_of(s.spans))
        s = Spans()
        s.api('GET', '/v2.1/flavors', 200)
        self.assertEqual('other', operations.operation_of(s.spans))

    def test_a_get_of_a_server_s_sub_resource_is_no_show(self):
        # the demo's wait for an instance action's event: nova loads
        # the server (api.compute.get), the route ends with an id, and
        # it is not GET /servers/{id} (22 of the demo's 1277 requests
        # read as show)
        for route in (
            '/v2.1/servers/{id}/os-instance-actions/{id}',
            '/v2.1/servers/{id}/migrations/{id}',
            '/v2.1/servers/{id}/os-volume_attachments/{id}',
        ):
            s = Spans()
            s.add('api.compute.get', s.api('GET', route, 200))
            self.assertEqual('other', operations.operation_of(s.spans), route)
        s = Spans()
        s.add('api.compute.get', s.api('GET', '/v2.1/servers/{id}/', 200))
        self.assertEqual('show', operations.operation_of(s.spans))

    def test_resize_or_cold_migrate_as_the_api_says(self):
        s = Spans()
        s.add('api.compute.resize', s.api(), attrs={'flavor_id': '2'})
        self.assertEqual('resize', operations.operation_of(s.spans))
        s = Spans()
        s.add('api.compute.resize', s.api(), attrs={'flavor_id': None})
        self.assertEqual('cold_migrate', operations.operation_of(s.spans))
        s = Spans()
        s.add('api.compute.resize', s.api(action='migrate'))
        self.assertEqual('cold_migrate', operations.operation_of(s.spans))

    def test_without_api_span_the_first_downstream_step(self):
        s = Spans()
        s.add('conductor.schedule_and_build_instances')
        s.add('compute.build')
        self.assertEqual('boot', operations.operation_of(s.spans))
        s = Spans()
        s.add('compute.check_can_live_migrate_destination')
        s.add('compute.rollback_live_migration')
        self.assertEqual('live_migrate', operations.operation_of(s.spans))

    def test_scheduler_alone_names_no_operation(self):
        s = Spans()
        s.add('scheduler.select_destinations')
        self.assertEqual('other', operations.operation_of(s.spans))

    def test_resize_is_not_a_boot(self):
        # issue 12: migrations counted as boots
        s = Spans()
        api = s.api()
        s.add('api.compute.resize', api, attrs={'flavor_id': '2'})
        c = s.add('conductor.migrate_server', api)
        s.add('conductor.schedule', c)
        s.add('scheduler.select_destinations', c, svc='scheduler')
        self.assertEqual('resize', operations.operation_of(s.spans))


class LiveMigrationTest(testtools.TestCase):
    def _base(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.live_migrate', api)
        cond = s.add('conductor.live_migrate', api, dur=500)
        checks = s.add('conductor.live_migrate.checks', cond, dur=100)
        return s, cond, checks

    def test_success(self):
        s, cond, checks = self._base()
        s.add(
            'compute.check_can_live_migrate_destination',
            checks,
            host='dst',
            attrs={'role': 'dest'},
        )
        lm = s.add('compute.live_migration', cond, host='src', dur=300)
        s.add('compute.pre_live_migration', lm, host='dst')
        post = s.add('compute.post_live_migration', lm, host='src')
        s.add('compute.post_live_migration_at_destination', post, host='dst')
        self.assertEqual(('live_migrate', [('success', None)]), s.states())

    def test_precheck_failure(self):
        s, cond, checks = self._base()
        s.add(
            'compute.check_can_live_migrate_destination',
            checks,
            host='dst',
            err='nova.exception.MigrationPreCheckError',
        )
        self.assertEqual(
            [('precheck_failure', 'nova.exception.MigrationPreCheckError')],
            s.states()[1],
        )

    def test_no_valid_host(self):
        s, cond, checks = self._base()
        s.add(
            'scheduler.select_destinations',
            checks,
            svc='scheduler',
            err='nova.exception.NoValidHost',
        )
        self.assertEqual(
            [('scheduling_failure', 'nova.exception.NoValidHost')],
            s.states()[1],
        )

    def test_rolled_back_after_pre_live_migration_failed(self):
        s, cond, checks = self._base()
        s.add('compute.check_can_live_migrate_destination', checks, host='dst')
        lm = s.add('compute.live_migration', cond, host='src', dur=300)
        s.add(
            'compute.pre_live_migration',
            lm,
            host='dst',
            err='nova.exception.VirtualInterfacePlugException',
        )
        rb = s.add('compute.rollback_live_migration', lm, host='src')
        s.add('compute.rollback_live_migration_at_destination', rb, host='dst')
        self.assertEqual(
            [('rolled_back', 'nova.exception.VirtualInterfacePlugException')],
            s.states()[1],
        )

    def test_failed_on_destination_after_the_move(self):
        s, cond, checks = self._base()
        lm = s.add('compute.live_migration', cond, host='src', dur=300)
        post = s.add('compute.post_live_migration', lm, host='src')
        s.add(
            'compute.post_live_migration_at_destination',
            post,
            host='dst',
            err='nova.exception.PortBindingFailed',
        )
        self.assertEqual(
            [('failed_on_destination', 'nova.exception.PortBindingFailed')],
            s.states()[1],
        )

    def test_incomplete_says_where_it_stopped(self):
        s, cond, checks = self._base()
        lm = s.add('compute.live_migration', cond, host='src', dur=None)
        rows = operations.final_states('live_migrate', spans_mod.Tree(s.spans))
        self.assertEqual('incomplete', rows[0]['state'])
        self.assertEqual(
            {'ev': 'compute.live_migration', 'host': 'src', 'open': True},
            rows[0]['stopped'],
        )
        self.assertFalse(operations.terminal('live_migrate', s.spans))
        self.assertEqual(lm, 's5')

    def test_retry_on_another_destination(self):
        s, cond, checks = self._base()
        s.add(
            'compute.check_can_live_migrate_destination',
            checks,
            host='d1',
            err='nova.exception.MigrationPreCheckError',
        )
        s.add('compute.check_can_live_migrate_destination', checks, host='d2')
        lm = s.add('compute.live_migration', cond, host='src')
        s.add('compute.post_live_migration_at_destination', lm, host='d2')
        self.assertEqual([('rescheduled_success', None)], s.states()[1])


class ResizeTest(testtools.TestCase):
    def _base(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.resize', api, attrs={'flavor_id': '2'})
        cond = s.add('conductor.migrate_server', api, dur=500)
        return s, cond

    def test_success(self):
        s, cond = self._base()
        prep = s.add('compute.prep_resize', cond, host='dst')
        ri = s.add('compute.resize_instance', prep, host='src')
        s.add('compute.finish_resize', ri, host='dst')
        self.assertEqual(('resize', [('success', None)]), s.states())
        self.assertTrue(operations.terminal('resize', s.spans))

    def test_scheduling_failure(self):
        s, cond = self._base()
        s.add(
            'scheduler.select_destinations',
            cond,
            svc='scheduler',
            err='nova.exception.NoValidHost',
        )
        self.assertEqual(
            [('scheduling_failure', 'nova.exception.NoValidHost')],
            s.states()[1],
        )

    def test_failed_on_source_and_on_destination(self):
        s, cond = self._base()
        prep = s.add('compute.prep_resize', cond, host='dst')
        s.add(
            'compute.resize_instance',
            prep,
            host='src',
            err='nova.exception.ResizeError',
        )
        self.assertEqual(
            [('failed_on_source', 'nova.exception.ResizeError')], s.states()[1]
        )
        s, cond = self._base()
        prep = s.add('compute.prep_resize', cond, host='dst')
        ri = s.add('compute.resize_instance', prep, host='src')
        s.add(
            'compute.finish_resize',
            ri,
            host='dst',
            err='nova.exception.ResizeError',
        )
        self.assertEqual(
            [('failed_on_destination', 'nova.exception.ResizeError')],
            s.states()[1],
        )

    def test_error_inside_a_step_falls_to_the_step(self):
        s, cond = self._base()
        prep = s.add('compute.prep_resize', cond, host='dst')
        ri = s.add('compute.resize_instance', prep, host='src', err='X')
        s.add(
            'rpc.call',
            ri,
            svc='compute',
            host='src',
            err='oslo_messaging.MessagingTimeout',
        )
        self.assertEqual(
            [('failed_on_source', 'oslo_messaging.MessagingTimeout')],
            s.states()[1],
        )

    def test_role_attribute_overrides(self):
        s, cond = self._base()
        s.add(
            'compute.prep_resize',
            cond,
            host='src',
            attrs={'role': 'source'},
            err='E',
        )
        self.assertEqual([('failed_on_source', 'E')], s.states()[1])

    def test_api_failure(self):
        s = Spans()
        api = s.api(status=400)
        s.add(
            'api.compute.resize', api, err='nova.exception.CannotResizeDiskUp'
        )
        self.assertEqual(
            [('api_failure', 'nova.exception.CannotResizeDiskUp')],
            s.states()[1],
        )


class OneHostOperationsTest(testtools.TestCase):
    def test_delete(self):
        s = Spans()
        api = s.api('DELETE', '/v2.1/servers/{id}', 204)
        s.add('api.compute.delete', api)
        cast = s.add('rpc.cast', api, svc='api')
        s.add('compute.terminate_instance', cast, host='c1')
        self.assertEqual(('delete', [('success', None)]), s.states())
        s = Spans()
        api = s.api('DELETE', '/v2.1/servers/{id}', 204)
        s.add('api.compute.delete', api)
        s.add('rpc.cast', api, svc='api')
        self.assertEqual([('incomplete', None)], s.states()[1])
        s = Spans()  # local delete: nothing sent on
        api = s.api('DELETE', '/v2.1/servers/{id}', 204)
        s.add('api.compute.delete', api)
        self.assertEqual([('success', None)], s.states()[1])

    def test_reboot_failure(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.reboot', api)
        s.add('compute.reboot_instance', api, err='libvirt.libvirtError')
        self.assertEqual(
            ('reboot', [('compute_failure', 'libvirt.libvirtError')]),
            s.states(),
        )

    def test_evacuate_and_unshelve_schedule(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.evacuate', api)
        c = s.add('conductor.rebuild_instance', api)
        s.add(
            'scheduler.select_destinations',
            c,
            svc='scheduler',
            err='nova.exception.NoValidHost',
        )
        self.assertEqual(
            (
                'evacuate',
                [('scheduling_failure', 'nova.exception.NoValidHost')],
            ),
            s.states(),
        )
        s = Spans()
        api = s.api()
        s.add('api.compute.unshelve', api)
        c = s.add('conductor.unshelve_instance', api)
        s.add('compute.unshelve_instance', c)
        self.assertEqual(('unshelve', [('success', None)]), s.states())


class CellsTest(testtools.TestCase):
    def _list(self, starts):
        s = Spans()
        api = s.api('GET', '/v2.1/servers/detail', 200)
        s.add('api.compute.get_all', api, inst=None)
        sg = s.add('api.cells.scatter_gather', api, inst=None, dur=500)
        for i, start in enumerate(starts):
            s.add(
                'api.cells.query',
                sg,
                inst=None,
                start=start,
                dur=100 * (i + 1),
                attrs={'cell': 'cell%d' % i, 'db': 'nova_cell%d' % i},
            )
        return s

    def test_parallel_serial_single(self):
        s = self._list([10, 20, 30])
        self.assertEqual('parallel', operations.cells(s.spans, 0)['mode'])
        s = self._list([10, 200, 600])
        info = operations.cells(s.spans, 0)
        self.assertEqual('serial', info['mode'])
        self.assertEqual(
            ['cell0', 'cell1', 'cell2'], [c['cell'] for c in info['cells']]
        )
        self.assertEqual(300, info['cells'][2]['dur_us'])
        s = self._list([10])
        self.assertEqual('single', operations.cells(s.spans, 0)['mode'])

    def test_list_states(self):
        s = self._list([10, 20])
        self.assertEqual(('list', [('success', None)]), s.states())
        s.spans['s4'][7] = 'error'
        s.spans['s4'][8] = {'cls': 'nova.exception.CellTimeout', 'msg': ''}
        self.assertEqual(
            [('partial', 'nova.exception.CellTimeout')], s.states()[1]
        )
        s = Spans()
        s.add(
            'api.compute.get_all',
            s.api('GET', '/v2.1/servers', 500),
            inst=None,
        )
        self.assertEqual([('api_failure', 'HTTP 500')], s.states()[1])


class CrossCellMoveTest(testtools.TestCase):
    """Issue 32 item 10: a resize, cold migration, confirm and revert
    across cells (snapshot-based) end with their own compute steps."""

    def _move(self, flavor_id='2'):
        s = Spans()
        api = s.api()
        s.add('api.compute.resize', api, attrs={'flavor_id': flavor_id})
        cond = s.add('conductor.migrate_server', api, dur=500)
        return s, cond

    def test_resize_and_cold_migrate_succeed(self):
        for flavor, op in (('2', 'resize'), (None, 'cold_migrate')):
            s, cond = self._move(flavor)
            s.add(
                'compute.prep_snapshot_based_resize_at_dest',
                cond,
                host='dst',
                attrs={'role': 'destination'},
            )
            s.add(
                'compute.prep_snapshot_based_resize_at_source',
                cond,
                host='src',
                attrs={'role': 'source'},
            )
            s.add(
                'compute.finish_snapshot_based_resize_at_dest',
                cond,
                host='dst',
                attrs={'role': 'destination'},
            )
            self.assertEqual((op, [('success', None)]), s.states())
            self.assertTrue(operations.terminal(op, s.spans))
            rows = operations.final_states(op, spans_mod.Tree(s.spans))
            self.assertEqual(1, rows[0]['attempts'])

    def test_each_step_fails_on_its_side(self):
        steps = (
            'compute.prep_snapshot_based_resize_at_dest',
            'compute.prep_snapshot_based_resize_at_source',
            'compute.finish_snapshot_based_resize_at_dest',
        )
        want = (
            'failed_on_destination',
            'failed_on_source',
            'failed_on_destination',
        )
        for n, (step, state) in enumerate(zip(steps, want, strict=True)):
            s, cond = self._move()
            for before in steps[:n]:
                s.add(before, cond)
            s.add(step, cond, err='nova.exception.MigrationError')
            self.assertEqual(
                [(state, 'nova.exception.MigrationError')], s.states()[1], step
            )

    def test_confirm_and_revert(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.confirm_resize', api)
        cond = s.add('rpc.call', api, svc='conductor', inst=None)
        s.add(
            'compute.confirm_snapshot_based_resize_at_source', cond, host='src'
        )
        self.assertEqual(('confirm_resize', [('success', None)]), s.states())
        s = Spans()
        api = s.api()
        s.add('api.compute.revert_resize', api)
        s.add('compute.revert_snapshot_based_resize_at_dest', api, host='dst')
        s.add(
            'compute.finish_revert_snapshot_based_resize_at_source',
            api,
            host='src',
        )
        self.assertEqual(('revert_resize', [('success', None)]), s.states())
        s = Spans()
        api = s.api()
        s.add('api.compute.revert_resize', api)
        s.add(
            'compute.revert_snapshot_based_resize_at_dest',
            api,
            host='dst',
            err='E',
        )
        self.assertEqual([('failed_on_destination', 'E')], s.states()[1])

    def _conductor(self, op_ev, method):
        s = Spans()
        api = s.api()
        s.add(op_ev, api)
        cast = s.add(
            'rpc.cast', api, svc='api', inst=None, attrs={'method': method}
        )
        return s, cast

    def test_conductor_failure_after_the_compute_step(self):
        # the confirm's source step ended ok, then the conductor's task
        # failed in the target cell: no success
        s, cast = self._conductor(
            'api.compute.confirm_resize', 'confirm_snapshot_based_resize'
        )
        disp = s.add(
            'rpc.dispatch',
            cast,
            svc='conductor',
            inst=None,
            dur=500,
            err='oslo_db.exception.DBConnectionError',
            attrs={'method': 'confirm_snapshot_based_resize'},
        )
        call = s.add(
            'rpc.call',
            disp,
            svc='conductor',
            inst=None,
            attrs={'method': 'confirm_snapshot_based_resize_at_source'},
        )
        s.add(
            'compute.confirm_snapshot_based_resize_at_source',
            call,
            host='src',
            attrs={'role': 'source'},
        )
        self.assertEqual(
            (
                'confirm_resize',
                [('conductor_failure', 'oslo_db.exception.DBConnectionError')],
            ),
            s.states(),
        )
        self.assertTrue(operations.terminal('confirm_resize', s.spans))
        # still at work after the step: not yet a success
        s.spans[disp][5] = None
        s.spans[disp][7] = None
        s.spans[disp][8] = None
        self.assertEqual([('incomplete', None)], s.states()[1])

    def test_conductor_failure_before_any_compute_step(self):
        s, cast = self._conductor(
            'api.compute.revert_resize', 'revert_snapshot_based_resize'
        )
        s.add(
            'rpc.dispatch',
            cast,
            svc='conductor',
            inst=None,
            dur=500,
            err='oslo_db.exception.DBConnectionError',
            attrs={'method': 'revert_snapshot_based_resize'},
        )
        self.assertEqual(
            (
                'revert_resize',
                [('conductor_failure', 'oslo_db.exception.DBConnectionError')],
            ),
            s.states(),
        )

    def test_a_compute_step_s_error_under_the_conductor_keeps_its_side(self):
        s, cast = self._conductor(
            'api.compute.revert_resize', 'revert_snapshot_based_resize'
        )
        disp = s.add(
            'rpc.dispatch',
            cast,
            svc='conductor',
            inst=None,
            dur=500,
            err='E',
            attrs={'method': 'revert_snapshot_based_resize'},
        )
        call = s.add(
            'rpc.call',
            disp,
            svc='conductor',
            inst=None,
            err='E',
            attrs={'method': 'revert_snapshot_based_resize_at_dest'},
        )
        s.add(
            'compute.revert_snapshot_based_resize_at_dest',
            call,
            host='dst',
            err='E',
            attrs={'role': 'destination'},
        )
        self.assertEqual([('failed_on_destination', 'E')], s.states()[1])

    def test_a_resize_s_conductor_dispatch_is_not_the_confirm_s(self):
        # only the confirm's and revert's own conductor methods: a
        # resize's failed dispatch is not a conductor_failure
        s, cast = self._conductor('api.compute.resize', 'migrate_server')
        s.add(
            'rpc.dispatch',
            cast,
            svc='conductor',
            inst=None,
            err='E',
            attrs={'method': 'migrate_server'},
        )
        self.assertNotIn('conductor_failure', dict(s.states()[1]))

    def test_without_api_span_the_steps_name_the_operation(self):
        for step, op in (
            ('compute.prep_snapshot_based_resize_at_dest', 'resize'),
            (
                'compute.confirm_snapshot_based_resize_at_source',
                'confirm_resize',
            ),
            ('compute.revert_snapshot_based_resize_at_dest', 'revert_resize'),
        ):
            s = Spans()
            s.add(step)
            self.assertEqual(op, operations.operation_of(s.spans))


class ShelveTest(testtools.TestCase):
    def test_unshelve_of_a_server_not_offloaded_starts_it(self):
        # the conductor calls start_instance on its host
        s = Spans()
        api = s.api()
        s.add('api.compute.unshelve', api)
        c = s.add('conductor.unshelve_instance', api)
        s.add('compute.start_instance', c, host='c1')
        self.assertEqual(('unshelve', [('success', None)]), s.states())
        s = Spans()
        api = s.api()
        s.add('api.compute.unshelve', api)
        c = s.add('conductor.unshelve_instance', api)
        s.add('compute.start_instance', c, err='E')
        self.assertEqual([('compute_failure', 'E')], s.states()[1])

    def test_shelve_offloaded_at_once(self):
        # a volume-backed server: the API casts shelve_offload_instance
        s = Spans()
        api = s.api()
        s.add('api.compute.shelve', api)
        cast = s.add('rpc.cast', api, svc='api')
        s.add('compute.shelve_offload_instance', cast, host='c1')
        self.assertEqual(('shelve', [('success', None)]), s.states())
        # and a shelve whose offload follows inside it
        s = Spans()
        api = s.api()
        s.add('api.compute.shelve', api)
        sh = s.add('compute.shelve_instance', api, host='c1')
        s.add('compute.shelve_offload_instance', sh, host='c1')
        self.assertEqual(('shelve', [('success', None)]), s.states())


class NewOperationsTest(testtools.TestCase):
    """Soft delete, restore, force delete, volume attach and detach, a
    live migration's abort: named by their API span, ended by their
    compute step."""

    CASES = (
        (
            'soft_delete',
            'DELETE',
            '/v2.1/servers/{id}',
            ('compute.soft_delete_instance',),
        ),
        (
            'restore',
            'POST',
            '/v2.1/servers/{id}/action',
            ('compute.restore_instance',),
        ),
        (
            'force_delete',
            'POST',
            '/v2.1/servers/{id}/action',
            ('compute.terminate_instance',),
        ),
        (
            'attach_volume',
            'POST',
            '/v2.1/servers/{id}/os-volume_attachments',
            ('compute.reserve_block_device_name', 'compute.attach_volume'),
        ),
        (
            'detach_volume',
            'DELETE',
            '/v2.1/servers/{id}/os-volume_attachments/{id}',
            ('compute.detach_volume',),
        ),
        (
            'live_migrate_abort',
            'DELETE',
            '/v2.1/servers/{id}/migrations/{id}',
            ('compute.live_migration_abort',),
        ),
    )

    def test_named_and_ended_by_their_steps(self):
        for op, method, route, steps in self.CASES:
            s = Spans()
            api = s.api(method, route)
            s.add('api.compute.get', api)
            s.add('api.compute.' + op, api)
            cast = s.add('rpc.cast', api, svc='api')
            for step in steps:
                s.add(step, cast, host='c1')
            self.assertEqual((op, [('success', None)]), s.states(), op)
            self.assertTrue(operations.terminal(op, s.spans), op)
            self.assertIn(op, schema.OPERATIONS)
            self.assertIn('compute_failure', operations.states_of(op))
            # the last step failed
            s.spans[list(s.spans)[-1]][7] = 'error'
            s.spans[list(s.spans)[-1]][8] = {'cls': 'E', 'msg': ''}
            self.assertEqual([('compute_failure', 'E')], s.states()[1], op)
            # sent on, never done
            s = Spans()
            api = s.api(method, route)
            s.add('api.compute.' + op, api)
            s.add('rpc.cast', api, svc='api')
            self.assertEqual([('incomplete', None)], s.states()[1], op)

    def test_done_in_the_api(self):
        # nothing sent on (no host; a shelved-offloaded server's volume)
        for op, method, route, _steps in self.CASES:
            if op == 'live_migrate_abort':
                continue
            s = Spans()
            s.add('api.compute.' + op, s.api(method, route))
            self.assertEqual((op, [('success', None)]), s.states(), op)

    def test_downstream_alone_names_them(self):
        for op, _method, _route, steps in self.CASES:
            if op == 'force_delete':  # a delete's step
                continue
            s = Spans()
            s.add(steps[0])
            self.assertEqual(op, operations.operation_of(s.spans))


class RefusedRequestTest(testtools.TestCase):
    """A request the API refused before the compute API method of its
    operation (a schema's 400, a policy's 403) is that operation's
    ``api_failure``: its method, route and action say which."""

    def test_route_and_action_name_the_operation(self):
        cases = (
            ('POST', '/v2.1/servers', None, 400, 'boot'),
            ('POST', '/v2.1/servers/{id}/action', 'resize', 400, 'resize'),
            (
                'POST',
                '/v2.1/servers/{id}/action',
                'migrate',
                403,
                'cold_migrate',
            ),
            (
                'POST',
                '/v2.1/servers/{id}/action',
                'os-migrateLive',
                400,
                'live_migrate',
            ),
            (
                'POST',
                '/v2.1/servers/{id}/action',
                'forceDelete',
                403,
                'force_delete',
            ),
            ('POST', '/v2.1/servers/{id}/action', 'restore', 409, 'restore'),
            (
                'POST',
                '/v2.1/servers/{id}/action',
                'shelveOffload',
                403,
                'shelve_offload',
            ),
            ('DELETE', '/v2.1/servers/{id}', None, 403, 'delete'),
            (
                'POST',
                '/v2.1/servers/{id}/os-volume_attachments',
                None,
                400,
                'attach_volume',
            ),
            (
                'DELETE',
                '/v2.1/servers/{id}/os-volume_attachments/{id}',
                None,
                403,
                'detach_volume',
            ),
            (
                'DELETE',
                '/v2.1/servers/{id}/migrations/{id}',
                None,
                400,
                'live_migrate_abort',
            ),
            ('GET', '/v2.1/{id}/servers/detail', None, 403, 'list'),
        )
        for method, route, action, status, op in cases:
            s = Spans()
            api = s.api(method, route, status, action)
            if route.endswith('}') or route.endswith('action'):
                # the server looked up first, then policy said no
                s.add('api.compute.get', api)
            self.assertEqual(op, operations.operation_of(s.spans), route)
            got, rows = s.states()
            self.assertEqual(
                [('api_failure', 'HTTP %d' % status)], rows, (op, route)
            )
            if op != 'boot':
                self.assertTrue(operations.terminal(op, s.spans), op)

    def test_server_not_found_is_the_operation_s_failure(self):
        s = Spans()
        api = s.api(action='reboot', status=404)
        s.add('api.compute.get', api, err='nova.exception.InstanceNotFound')
        self.assertEqual(
            ('reboot', [('api_failure', 'nova.exception.InstanceNotFound')]),
            s.states(),
        )

    def test_unknown_or_accepted_requests_keep_their_reading(self):
        s = Spans()
        s.add(
            'api.compute.get', s.api(action='os-getConsoleOutput', status=400)
        )
        self.assertEqual('other', operations.operation_of(s.spans))
        s = Spans()  # an action with no name (its dispatch failed)
        s.api(status=400)
        self.assertEqual('other', operations.operation_of(s.spans))
        s = Spans()
        s.api('GET', '/v2.1/os-hypervisors', 403)
        self.assertEqual('other', operations.operation_of(s.spans))
        s = Spans()  # answered: never named from its route
        s.add('api.compute.get', s.api(action='resize', status=202))
        self.assertEqual('other', operations.operation_of(s.spans))
