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
"""The points of server actions and of the API's per-cell queries
(issue 12), without nova: their attrs, the ``when`` of a point, the
cell spans in the threads nova runs them in."""

import importlib
import os
import threading
import types

from instrument import schema
from instrument.patching import patcher as patcher_mod
from instrument.patching import points as points_mod
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder as recorder_mod
from instrument.targets import nova
from instrument.targets.nova import cells as nova_cells
from instrument.targets.nova import threads
from tests.unit import base

DOC = os.path.join(
    os.path.dirname(__file__), '..', '..', '..', 'doc', 'source', 'events.rst'
)


class Versioned:
    """A versioned object with some fields loaded."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)

    def obj_attr_is_set(self, name) -> bool:
        return name in self.__dict__

    def __getattr__(self, name):
        raise AssertionError('lazy load of %s' % name)


def _point_of(module, target):
    [point] = [
        p for p in nova.points() if p.module == module and p.target == target
    ]
    return point


def _point(event):
    [point] = [p for p in nova.points() if p.event == event]
    return point


# nova 34's signatures of the targets whose hooks the tests call by
# position (the hooks read arguments by name, bound to the signature as
# the wrapper binds them when the point is applied).
def prep_resize(
    self,
    context,
    image,
    instance,
    flavor,
    request_spec,
    filter_properties,
    node,
    clean_shutdown,
    migration,
    host_list,
):
    pass


def _rollback_live_migration(
    self,
    context,
    instance,
    dest,
    migrate_data=None,
    migration_status='failed',
    source_bdms=None,
    pre_live_migration=False,
):
    pass


def api_resize(
    self,
    context,
    instance,
    flavor_id=None,
    clean_shutdown=True,
    host_name=None,
    auto_disk_config=None,
):
    pass


def _live_migrate(
    self,
    context,
    instance,
    scheduler_hint,
    block_migration,
    disk_over_commit,
    request_spec,
):
    pass


def get_by_filters(self, ctx, filters, limit, marker, **kwargs):
    pass


def _on_enter(event, signature):
    """The ``on_enter`` of the point of ``event`` as its wrapper calls
    it on a target of ``signature``."""
    return points_mod.bind(_point(event).on_enter, signature)


class ActionPointsTest(base.TestCase):
    def test_every_event_is_in_the_schema_and_documented(self):
        with open(DOC) as f:
            doc = f.read()
        for point in nova.points():
            if point.kind != points_mod.SPAN:
                continue
            self.assertIn(point.event, schema.EVENTS, point.name)
            self.assertIn('``%s``' % point.event, doc, point.name)
        self.assertIn('``%s``' % nova.EV_CELL_QUERY, doc)
        self.assertIn(nova.EV_CELL_QUERY, schema.EVENTS)

    def test_each_operation_has_api_and_compute_points(self):
        events = {p.event for p in nova.points()}
        for name in (
            'delete',
            'resize',
            'confirm_resize',
            'revert_resize',
            'live_migrate',
            'rebuild',
            'evacuate',
            'shelve',
            'unshelve',
            'reboot',
            'stop',
            'start',
            'get',
            'get_all',
        ):
            self.assertIn('api.compute.' + name, events)
        for ev in (
            'compute.prep_resize',
            'compute.resize_instance',
            'compute.finish_resize',
            'compute.pre_live_migration',
            'compute.rollback_live_migration',
            'conductor.live_migrate.checks',
            'api.cells.scatter_gather',
        ):
            self.assertIn(ev, events)

    def test_issue_32_operations_have_their_points(self):
        # cross-cell (snapshot-based) moves, soft delete, restore, force
        # delete, volumes, a live migration's abort; each at the method
        # of nova's that nova 29 to 34 have
        by_event = {p.event: p for p in nova.points()}
        for name in (
            'soft_delete',
            'restore',
            'force_delete',
            'attach_volume',
            'detach_volume',
            'live_migrate_abort',
        ):
            point = by_event['api.compute.' + name]
            self.assertEqual(
                ('nova.compute.api', 'API.' + name),
                (point.module, point.target),
            )
        for method in (
            'prep_snapshot_based_resize_at_dest',
            'prep_snapshot_based_resize_at_source',
            'finish_snapshot_based_resize_at_dest',
            'confirm_snapshot_based_resize_at_source',
            'revert_snapshot_based_resize_at_dest',
            'finish_revert_snapshot_based_resize_at_source',
            'soft_delete_instance',
            'restore_instance',
            'reserve_block_device_name',
            'attach_volume',
            'detach_volume',
            'live_migration_abort',
        ):
            point = by_event['compute.' + method]
            self.assertEqual(
                ('nova.compute.manager', 'ComputeManager.' + method),
                (point.module, point.target),
            )
            self.assertEqual('compute', point.service)
        [hook] = [
            p for p in nova.points() if p.target == 'Resource.get_method'
        ]
        self.assertEqual(points_mod.HOOK, hook.kind)
        self.assertEqual('nova.api.openstack.wsgi', hook.module)

    def test_cross_cell_steps_have_role_and_migration(self):
        migration = Versioned(
            migration_type='resize',
            source_compute='cmp-1',
            dest_compute='cmp-2',
        )

        # nova 34's (and 29's) signatures: prep at the destination
        # takes the migration fifth, the others third
        def prep_at_dest(
            self, ctxt, instance, flavor, nodename, migration, limits
        ):
            pass

        def at_source(self, ctxt, instance, migration, snapshot_id=None):
            pass

        sides = {
            'prep_snapshot_based_resize_at_dest': (
                'destination',
                4,
                prep_at_dest,
            ),
            'prep_snapshot_based_resize_at_source': ('source', 2, at_source),
            'finish_snapshot_based_resize_at_dest': (
                'destination',
                2,
                at_source,
            ),
            'confirm_snapshot_based_resize_at_source': (
                'source',
                2,
                at_source,
            ),
            'revert_snapshot_based_resize_at_dest': (
                'destination',
                2,
                at_source,
            ),
            'finish_revert_snapshot_based_resize_at_source': (
                'source',
                2,
                at_source,
            ),
        }
        for method, (role, pos, signature) in sides.items():
            on_enter = _on_enter('compute.' + method, signature)
            expected = {
                'role': role,
                'migration_type': 'resize',
                'source': 'cmp-1',
                'dest': 'cmp-2',
            }
            # by keyword (RPC) and by position
            self.assertEqual(
                expected,
                on_enter(None, ('ctxt',), {'migration': migration}),
                method,
            )
            self.assertEqual(
                expected,
                on_enter(None, (None,) * pos + (migration,), {}),
                method,
            )

    def test_move_steps_have_role_type_and_hosts(self):
        migration = Versioned(
            migration_type='resize',
            source_compute='cmp-1',
            dest_compute='cmp-2',
        )
        # prep_resize(context, image, instance, flavor, request_spec,
        #             filter_properties, node, clean_shutdown, migration,
        #             host_list), by keyword (RPC) and by position
        prep = _on_enter('compute.prep_resize', prep_resize)
        expected = {
            'role': 'destination',
            'migration_type': 'resize',
            'source': 'cmp-1',
            'dest': 'cmp-2',
        }
        self.assertEqual(
            expected, prep(None, ('ctx',), {'migration': migration})
        )
        self.assertEqual(expected, prep(None, (None,) * 8 + (migration,), {}))
        # a migration without its fields loaded is never lazy-loaded
        bare = Versioned()
        self.assertEqual(
            {
                'role': 'destination',
                'migration_type': None,
                'source': None,
                'dest': None,
            },
            prep(None, (), {'migration': bare}),
        )
        resize = _point('compute.resize_instance').on_enter
        self.assertEqual(
            'source', resize(None, (), {'migration': migration})['role']
        )

    def test_rollback_says_the_migration_status(self):
        rollback = _on_enter(
            'compute.rollback_live_migration', _rollback_live_migration
        )
        self.assertEqual(
            {'role': 'source', 'migration_status': 'failed', 'dest': 'cmp-2'},
            rollback(None, ('ctx', 'inst', 'cmp-2', None), {}),
        )
        self.assertEqual(
            'cancelled',
            rollback(
                None,
                ('ctx', 'inst', 'cmp-2', None),
                {'migration_status': 'cancelled'},
            )['migration_status'],
        )

    def test_api_attrs(self):
        resize = _on_enter('api.compute.resize', api_resize)
        self.assertEqual(
            {'flavor_id': None, 'dest': None},
            resize(None, ('ctx', 'inst'), {}),
        )
        self.assertEqual(
            {'flavor_id': '42', 'dest': 'cmp-2'},
            resize(None, ('ctx', 'inst', '42', True, 'cmp-2'), {}),
        )
        live = _on_enter('conductor.live_migrate', _live_migrate)
        spec = Versioned(requested_destination=Versioned(host='cmp-3'))
        self.assertEqual(
            {'dest': 'cmp-3'},
            live(
                None, ('ctx', 'inst', {'host': None}, False, False, spec), {}
            ),
        )
        self.assertEqual(
            {'dest': 'cmp-4'},
            live(None, ('ctx', 'inst', {'host': 'cmp-4'}), {}),
        )
        rebuild = _point('conductor.rebuild_instance').on_enter
        self.assertEqual(
            {'evacuate': True, 'dest': 'cmp-5'},
            rebuild(None, ('ctx',), {'recreate': True, 'host': 'cmp-5'}),
        )

    def test_cell_database_name_never_carries_credentials(self):
        self.assertEqual(
            'nova_cell1',
            nova_cells.database_of(
                'mysql+pymysql://nova:s3cret@db1/nova_cell1?charset=utf8'
            ),
        )
        self.assertEqual(
            'nova_cell2',
            nova_cells.database_of('sqlite:////var/lib/nova/nova_cell2'),
        )
        self.assertIsNone(nova_cells.database_of('not a url'))


def _spawn_on(executor_type, func, *args, **kwargs):
    """nova's thread start (``nova.thread_pool_factory.spawn_on``)."""


class CellQueryTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer = base.ListBuffer()
        self.recorder = recorder_mod.Recorder(
            self.buffer, process.ProcessIdentity.create('nova-api', 'ctl-1')
        )
        # bound to nova's signature: func at its place
        self.carry = threads.hook(
            types.SimpleNamespace(recorder=self.recorder)
        ).bind(_spawn_on)
        nova_cells.CELLS.clear()
        self.addCleanup(nova_cells.CELLS.clear)

    def _gather(self, fn):
        """nova's scatter_gather_cells, two cells, each in a thread,
        inside an api span and the scatter-gather span."""
        mappings = [
            Versioned(
                uuid='c-1',
                name='cell1',
                database_connection='mysql://u:p@h/nova_c1',
            ),
            Versioned(
                uuid='c-2',
                name='cell2',
                database_connection='mysql://u:p@h/nova_c2',
            ),
        ]
        ctx = types.SimpleNamespace(request_id='req-1', global_request_id=None)
        api = self.recorder.begin(
            'api.request', 'api', None, ctx, None, None, None
        )
        gather = self.recorder.begin(
            nova.EV_SCATTER_GATHER,
            None,
            None,
            ctx,
            None,
            None,
            nova_cells.cells_enter(None, mappings),
        )

        def gather_result(cell_uuid, fn, cctxt):
            try:
                return fn(cctxt)
            except Exception as exc:
                return exc

        threads = []
        for mapping in mappings:
            cctxt = types.SimpleNamespace(
                request_id='req-1', global_request_id=None
            )
            args, kwargs = self.carry(
                None,
                ('SCATTER_GATHER', gather_result, mapping.uuid, fn, cctxt),
                {},
            )
            thread = threading.Thread(target=args[1], args=args[2:])
            threads.append(thread)
            thread.start()
        for thread in threads:
            thread.join()
        self.recorder.end(gather, self.recorder.clock())
        self.recorder.end(api, self.recorder.clock())
        return self.buffer.dicts(), gather

    def test_one_span_per_cell_under_the_scatter_gather(self):
        records, gather = self._gather(lambda cctxt: ['row'])
        cells = [r for r in records if r['ev'] == nova.EV_CELL_QUERY]
        self.assertEqual(2, len(cells))
        [sg] = [r for r in records if r['ev'] == nova.EV_SCATTER_GATHER]
        self.assertEqual(2, sg['attrs']['count'])
        for rec in cells:
            self.assertEqual(sg['span'], rec['parent'])
            self.assertEqual('req-1', rec['req'])
            self.assertEqual('api', rec['svc'])
            self.assertEqual('ok', rec['st'])
            self.assertNotEqual(sg['tid'], rec['tid'])
        self.assertEqual(
            [
                {'cell': 'c-1', 'cell_name': 'cell1', 'db': 'nova_c1'},
                {'cell': 'c-2', 'cell_name': 'cell2', 'db': 'nova_c2'},
            ],
            sorted((r['attrs'] for r in cells), key=lambda a: a['cell']),
        )
        # the spawning thread's frame is untouched
        self.assertIsNone(recorder_mod.current_frame())

    def test_a_cell_that_raised_is_an_error_span(self):
        def fn(cctxt):
            raise ValueError('cell down')

        records, _gather = self._gather(fn)
        cells = [r for r in records if r['ev'] == nova.EV_CELL_QUERY]
        self.assertEqual(['error', 'error'], [r['st'] for r in cells])
        self.assertEqual('ValueError', cells[0]['err']['cls'])
        exits = nova_cells.cells_exit(
            None, (), {}, {'c-1': ValueError('x'), 'c-2': object(), 'c-3': []}
        )
        self.assertEqual({'errors': 1, 'timeouts': 1}, exits)

    def test_a_lazy_cell_function_gets_no_thread_span(self):
        # nova's cross-cell lister: the generator is made in the thread,
        # its queries run in the API thread (InstanceLister's point)
        def query_wrapper(cctxt):
            yield cctxt

        records, _gather = self._gather(query_wrapper)
        self.assertEqual(
            [], [r for r in records if r['ev'] == nova.EV_CELL_QUERY]
        )
        batch = _point_of(
            'nova.compute.instance_list', 'InstanceLister.get_by_filters'
        )
        self.assertEqual(nova.EV_CELL_QUERY, batch.event)
        # the cells were named by the scatter-gather that preceded it
        self.assertEqual(
            {'cell': 'c-2', 'cell_name': 'cell2', 'db': 'nova_c2'},
            points_mod.bind(batch.on_enter, get_by_filters)(
                None,
                (types.SimpleNamespace(cell_uuid='c-2'), {}, 1000, None),
                {},
            ),
        )

    def test_other_spawns_only_carry_the_span(self):
        frame_seen = []
        rec = self.recorder.begin(
            'api.request', 'api', None, None, None, None, None
        )
        args, _kwargs = self.carry(
            None,
            (
                'DEFAULT',
                lambda: frame_seen.append(recorder_mod.current_frame()),
            ),
            {},
        )
        thread = threading.Thread(target=args[1])
        thread.start()
        thread.join()
        self.recorder.end(rec, self.recorder.clock())
        self.assertEqual(rec[record.I_SPAN], frame_seen[0][0])
        self.assertEqual(
            ['api.request'], [r['ev'] for r in self.buffer.dicts()]
        )

    def test_the_function_is_found_by_name(self):
        # func where a release puts it, by position or keyword: the
        # one wrapped to run in the span, another callable argument
        # left as it was; no func in the signature: nothing is guessed
        def spawn_later(delay, callback, func, *args):
            pass

        def run_later(delay, callback):
            pass

        rec = self.recorder.begin(
            'api.request', 'api', None, None, None, None, None
        )
        try:
            carry = threads.hook().bind(spawn_later)
            args, _kwargs = carry(None, (0, len, print, 'x'), {})
            self.assertEqual(0, args[0])
            self.assertIs(len, args[1])
            self.assertIsNot(print, args[2])
            self.assertTrue(callable(args[2]))
            self.assertEqual('x', args[3])
            args, kwargs = carry(None, (0, len), {'func': print})
            self.assertEqual((0, len), args)
            self.assertIsNot(print, kwargs['func'])
            carry = threads.hook().bind(_spawn_on)
            args, _kwargs = carry(None, ('DEFAULT', print), {})
            self.assertIsNot(print, args[1])
            carry = threads.hook().bind(run_later)
            self.assertIsNone(carry(None, (0, print), {}))
        finally:
            self.recorder.end(rec, self.recorder.clock())


SOURCE = '''
calls = []


def scatter(context, value):
    calls.append(value)
    return value
'''


class WhenTest(base.TestCase):
    def test_a_point_records_only_when_its_when_says_so(self):
        buffer = base.ListBuffer()
        recorder = recorder_mod.Recorder(
            buffer, process.ProcessIdentity.create('nova-api', 'ctl-1')
        )
        mod = importlib.import_module(self.make_module(SOURCE))
        point = points_mod.PatchPoint(
            mod.__name__,
            'scatter',
            'api.cells.scatter_gather',
            None,
            when=lambda instance, args, kwargs: args[1] == 'yes',
        )
        patcher = patcher_mod.Patcher([point], recorder, 'nova')
        self.addCleanup(patcher.remove)
        patcher.apply()
        self.assertEqual('no', mod.scatter(None, 'no'))
        self.assertEqual('yes', mod.scatter(None, 'yes'))
        self.assertEqual(['no', 'yes'], mod.calls)
        self.assertEqual(
            ['api.cells.scatter_gather'], [r['ev'] for r in buffer.dicts()]
        )

    def test_scatter_gather_is_recorded_in_the_api_only(self):
        point = _point(nova.EV_SCATTER_GATHER)
        buffer = base.ListBuffer()
        recorder = recorder_mod.Recorder(
            buffer, process.ProcessIdentity.create('nova-api', 'ctl-1')
        )
        self.assertFalse(point.when(None, (), {}))
        for svc, expected in (('api', True), ('scheduler', False)):
            rec = recorder.begin('x', svc, None, None, None, None, None)
            self.assertEqual(expected, point.when(None, (), {}), svc)
            recorder.end(rec, recorder.clock())
