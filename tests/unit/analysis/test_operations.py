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

from instrument.analysis import classify
from instrument.analysis import operations

INST = '11111111-2222-3333-4444-555555555555'


class Spans:
    """A request's spans (the assembler's lists), built step by step."""

    def __init__(self) -> None:
        self.spans = {}
        self.t = 0

    def add(self, ev, parent=None, svc=None, host='h', dur=10, err=None,
            attrs=None, inst=(INST,), start=None):
        sid = 's%d' % (len(self.spans) + 1)
        svc = svc or ev.split('.', 1)[0]
        self.t += 10
        st = None if dur is None else ('error' if err else 'ok')
        self.spans[sid] = [ev, host, svc, 1, self.t if start is None
                           else start, dur, parent, st,
                           {'cls': err, 'msg': 'm'} if err else None,
                           attrs or {}, list(inst) if inst else None]
        return sid

    def api(self, method='POST', route='/v2.1/servers/{id}/action',
            status=202, action=None):
        attrs = {'method': method, 'route': route, 'status': status}
        if action:
            attrs['action'] = action
        return self.add('api.request', svc='api', dur=1000, attrs=attrs,
                        inst=None, start=0)

    def states(self, op=None):
        op = op or operations.operation_of(self.spans)
        rows = operations.final_states(op, classify.Tree(self.spans))
        return op, [(r['state'], (r['cause'] or {}).get('cls'))
                    for r in rows]


class OperationOfTest(testtools.TestCase):

    def test_action_method_wins_over_the_get_of_the_instance(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.get', api)
        s.add('api.compute.live_migrate', api)
        self.assertEqual('live_migrate',
                         operations.operation_of(s.spans))

    def test_show_list_and_other(self):
        s = Spans()
        s.add('api.compute.get', s.api('GET', '/v2.1/servers/{id}', 200))
        self.assertEqual('show', operations.operation_of(s.spans))
        s = Spans()
        s.add('api.compute.get_all', s.api('GET', '/v2.1/servers/detail',
                                           200))
        self.assertEqual('list', operations.operation_of(s.spans))
        s = Spans()
        s.add('api.compute.get', s.api())  # a console: only a get
        self.assertEqual('other', operations.operation_of(s.spans))
        s = Spans()
        s.api('GET', '/v2.1/flavors', 200)
        self.assertEqual('other', operations.operation_of(s.spans))

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
        s.add('compute.check_can_live_migrate_destination', checks,
              host='dst', attrs={'role': 'dest'})
        lm = s.add('compute.live_migration', cond, host='src', dur=300)
        s.add('compute.pre_live_migration', lm, host='dst')
        post = s.add('compute.post_live_migration', lm, host='src')
        s.add('compute.post_live_migration_at_destination', post,
              host='dst')
        self.assertEqual(('live_migrate', [('success', None)]), s.states())

    def test_precheck_failure(self):
        s, cond, checks = self._base()
        s.add('compute.check_can_live_migrate_destination', checks,
              host='dst', err='nova.exception.MigrationPreCheckError')
        self.assertEqual(
            [('precheck_failure', 'nova.exception.MigrationPreCheckError')],
            s.states()[1])

    def test_no_valid_host(self):
        s, cond, checks = self._base()
        s.add('scheduler.select_destinations', checks, svc='scheduler',
              err='nova.exception.NoValidHost')
        self.assertEqual(
            [('scheduling_failure', 'nova.exception.NoValidHost')],
            s.states()[1])

    def test_rolled_back_after_pre_live_migration_failed(self):
        s, cond, checks = self._base()
        s.add('compute.check_can_live_migrate_destination', checks,
              host='dst')
        lm = s.add('compute.live_migration', cond, host='src', dur=300)
        s.add('compute.pre_live_migration', lm, host='dst',
              err='nova.exception.VirtualInterfacePlugException')
        rb = s.add('compute.rollback_live_migration', lm, host='src')
        s.add('compute.rollback_live_migration_at_destination', rb,
              host='dst')
        self.assertEqual(
            [('rolled_back', 'nova.exception.VirtualInterfacePlugException')],
            s.states()[1])

    def test_failed_on_destination_after_the_move(self):
        s, cond, checks = self._base()
        lm = s.add('compute.live_migration', cond, host='src', dur=300)
        post = s.add('compute.post_live_migration', lm, host='src')
        s.add('compute.post_live_migration_at_destination', post,
              host='dst', err='nova.exception.PortBindingFailed')
        self.assertEqual(
            [('failed_on_destination', 'nova.exception.PortBindingFailed')],
            s.states()[1])

    def test_incomplete_says_where_it_stopped(self):
        s, cond, checks = self._base()
        lm = s.add('compute.live_migration', cond, host='src', dur=None)
        rows = operations.final_states('live_migrate',
                                       classify.Tree(s.spans))
        self.assertEqual('incomplete', rows[0]['state'])
        self.assertEqual({'ev': 'compute.live_migration', 'host': 'src',
                          'open': True}, rows[0]['stopped'])
        self.assertFalse(operations.terminal('live_migrate', s.spans))
        self.assertEqual(lm, 's5')

    def test_retry_on_another_destination(self):
        s, cond, checks = self._base()
        s.add('compute.check_can_live_migrate_destination', checks,
              host='d1', err='nova.exception.MigrationPreCheckError')
        s.add('compute.check_can_live_migrate_destination', checks,
              host='d2')
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
        s.add('scheduler.select_destinations', cond, svc='scheduler',
              err='nova.exception.NoValidHost')
        self.assertEqual([('scheduling_failure',
                           'nova.exception.NoValidHost')], s.states()[1])

    def test_failed_on_source_and_on_destination(self):
        s, cond = self._base()
        prep = s.add('compute.prep_resize', cond, host='dst')
        s.add('compute.resize_instance', prep, host='src',
              err='nova.exception.ResizeError')
        self.assertEqual([('failed_on_source', 'nova.exception.ResizeError')],
                         s.states()[1])
        s, cond = self._base()
        prep = s.add('compute.prep_resize', cond, host='dst')
        ri = s.add('compute.resize_instance', prep, host='src')
        s.add('compute.finish_resize', ri, host='dst',
              err='nova.exception.ResizeError')
        self.assertEqual([('failed_on_destination',
                           'nova.exception.ResizeError')], s.states()[1])

    def test_error_inside_a_step_falls_to_the_step(self):
        s, cond = self._base()
        prep = s.add('compute.prep_resize', cond, host='dst')
        ri = s.add('compute.resize_instance', prep, host='src',
                   err='X')
        s.add('rpc.call', ri, svc='compute', host='src',
              err='oslo_messaging.MessagingTimeout')
        self.assertEqual([('failed_on_source',
                           'oslo_messaging.MessagingTimeout')],
                         s.states()[1])

    def test_role_attribute_overrides(self):
        s, cond = self._base()
        s.add('compute.prep_resize', cond, host='src',
              attrs={'role': 'source'}, err='E')
        self.assertEqual([('failed_on_source', 'E')], s.states()[1])

    def test_api_failure(self):
        s = Spans()
        api = s.api(status=400)
        s.add('api.compute.resize', api, err='nova.exception.CannotResize'
              'DiskUp')
        self.assertEqual([('api_failure', 'nova.exception.CannotResize'
                           'DiskUp')], s.states()[1])


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
        self.assertEqual(('reboot', [('compute_failure',
                                      'libvirt.libvirtError')]),
                         s.states())

    def test_evacuate_and_unshelve_schedule(self):
        s = Spans()
        api = s.api()
        s.add('api.compute.evacuate', api)
        c = s.add('conductor.rebuild_instance', api)
        s.add('scheduler.select_destinations', c, svc='scheduler',
              err='nova.exception.NoValidHost')
        self.assertEqual(('evacuate', [('scheduling_failure',
                                        'nova.exception.NoValidHost')]),
                         s.states())
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
            s.add('api.cells.query', sg, inst=None, start=start,
                  dur=100 * (i + 1), attrs={'cell': 'cell%d' % i,
                                            'db': 'nova_cell%d' % i})
        return s

    def test_parallel_serial_single(self):
        s = self._list([10, 20, 30])
        self.assertEqual('parallel', operations.cells(s.spans, 0)['mode'])
        s = self._list([10, 200, 600])
        info = operations.cells(s.spans, 0)
        self.assertEqual('serial', info['mode'])
        self.assertEqual(['cell0', 'cell1', 'cell2'],
                         [c['cell'] for c in info['cells']])
        self.assertEqual(300, info['cells'][2]['dur_us'])
        s = self._list([10])
        self.assertEqual('single', operations.cells(s.spans, 0)['mode'])

    def test_list_states(self):
        s = self._list([10, 20])
        self.assertEqual(('list', [('success', None)]), s.states())
        s.spans['s4'][7] = 'error'
        s.spans['s4'][8] = {'cls': 'nova.exception.CellTimeout', 'msg': ''}
        self.assertEqual([('partial', 'nova.exception.CellTimeout')],
                         s.states()[1])
        s = Spans()
        s.add('api.compute.get_all', s.api('GET', '/v2.1/servers', 500),
              inst=None)
        self.assertEqual([('api_failure', 'HTTP 500')], s.states()[1])
