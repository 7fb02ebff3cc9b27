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
"""The one patch engine (issue 28): REPLACE, LISTEN and per-object
points, hooks that read arguments by name, ``remove()`` putting back
every original, and the SQL, pool and lock points in the start-up
banner and the start record."""

import functools
import importlib
import os
import pathlib
import sys

from oslo_concurrency import lockutils
from oslo_db import api as oslo_db_api
import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import base as engine_base
from sqlalchemy.engine import interfaces as engine_interfaces
from sqlalchemy.pool import base as pool_base
from sqlalchemy.pool import impl as pool_impl

from instrument.patching import hooks
from instrument.patching import patcher
from instrument.patching import points
from instrument.runtime import lifecycle
from instrument.runtime import resources
from instrument.runtime import startlog
from instrument.targets import db_pool
from instrument.targets import oslo_concurrency
from instrument.targets import resources as resources_target
from instrument.targets import sqlalchemy as sqlalchemy_target
from instrument.targets.sqlalchemy import connect as connect_mod
from instrument.targets.sqlalchemy import listeners as listeners_mod
from instrument.targets.sqlalchemy import retries as retries_mod
from tests.unit import base

SOURCE = '''
def helper(value):
    return value + 1


class Base:
    def inherited(self):
        return 'base'

    def send(self):
        return 'sent'


class Thing(Base):
    @staticmethod
    def static(value):
        return value

    @classmethod
    def klass(cls, value):
        return value

    def method(self, context, size, name=None):
        return size
'''


def _expected(*names):
    """A decorator that does not keep ``__wrapped__`` (as oslo.messaging's
    ``expected_exceptions``): the function is in its closure only."""

    def outer(func):
        def inner(*args, **kwargs):
            return func(*args, **kwargs)

        return inner

    return outer


class Endpoint:
    @_expected('x')
    def call(self, context, instance, migration, dest=None):
        return migration


class KindsTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer, self.recorder = base.list_recorder('ctl-1')
        self.mod_name = self.make_module(SOURCE)

    def make(self, pts):
        p = patcher.Patcher(pts, self.recorder)
        self.addCleanup(p.remove)
        return p

    def test_replace_on_a_later_import_and_remove_restores_identity(self):
        seen = []

        def factory(original, state, owner):
            seen.append((original, owner))

            def replacement(value):
                return ('replaced', original(value), state.active)

            return replacement

        p = self.make([points.replace(self.mod_name, 'helper', factory)])
        p.apply()
        name = '%s:helper' % self.mod_name
        self.assertEqual(patcher.PENDING, p.status(name))
        mod = importlib.import_module(self.mod_name)
        original = seen[0][0]
        self.assertIs(mod, seen[0][1])
        self.assertEqual(('replaced', 2, True), mod.helper(1))
        self.assertEqual(patcher.PATCHED, p.status(name))
        self.assertIs(original, p.original(name))
        p.remove()
        self.assertIs(original, vars(mod)['helper'])
        self.assertEqual(patcher.REMOVED, p.status(name))

    def test_remove_restores_every_kind_of_callable(self):
        mod = importlib.import_module(self.mod_name)
        before = {
            attr: vars(mod.Thing)[attr]
            for attr in ('static', 'klass', 'method')
        }
        p = self.make(
            [
                patcher.PatchPoint(self.mod_name, 'Thing.' + attr, 'x.' + attr)
                for attr in before
            ]
            + [
                patcher.PatchPoint(self.mod_name, 'Thing.inherited', 'x.i'),
                points.replace(
                    self.mod_name,
                    'Thing.send',
                    lambda original, state, owner: original,
                ),
            ]
        )
        p.apply()
        for attr in before:
            self.assertIsNot(before[attr], vars(mod.Thing)[attr])
        self.assertIn('inherited', vars(mod.Thing))
        self.assertEqual(3, mod.Thing().method(None, 3))
        p.remove()
        for attr, original in before.items():
            self.assertIs(original, vars(mod.Thing)[attr], attr)
        self.assertNotIn('inherited', vars(mod.Thing))
        self.assertNotIn('send', vars(mod.Thing))

    def test_per_object_points_and_their_removal(self):
        mod = importlib.import_module(self.mod_name)

        class Holder:
            pass

        holder = Holder()
        own = holder.sem = object()
        p = self.make(
            [
                points.replace(
                    self.mod_name,
                    'Thing.method',
                    lambda original, state, obj: functools.partial(
                        original, 'ctx'
                    ),
                    per_object=True,
                ),
                points.replace(
                    self.mod_name,
                    'Holder.sem',
                    lambda original, state, obj: ('proxy', original),
                    per_object=True,
                ),
            ]
        )
        p.apply()
        method = '%s:Thing.method' % self.mod_name
        sem = '%s:Holder.sem' % self.mod_name
        # never patched on the class: pending until an object comes
        self.assertEqual([method, sem], p.banner()[patcher.PENDING])
        before = vars(mod.Thing)['method']
        thing = mod.Thing()
        self.assertTrue(p.patch_object(method, thing))
        self.assertTrue(p.patch_object(sem, holder))
        self.assertIs(before, vars(mod.Thing)['method'])
        self.assertEqual(7, thing.method(7))
        self.assertEqual(('proxy', own), holder.sem)
        self.assertEqual([method, sem], p.banner()[patcher.PATCHED])
        p.remove()
        self.assertNotIn('method', vars(thing))
        self.assertIs(own, holder.sem)
        self.assertFalse(p.patch_object(method, mod.Thing()))

    def test_points_added_after_the_start_record_are_announced(self):
        importlib.import_module(self.mod_name)
        p = self.make([])
        p.apply()
        early = points.PatchPoint(
            self.mod_name, 'Thing.method', 'x.early', context=None
        )
        late = points.PatchPoint(
            self.mod_name, 'Thing.send', 'x.late', context=None
        )
        p.add_points([early])
        # the runtime read the banner for the start record: from now on
        # an added point is a change (what instrument_points folds)
        p.headed = True
        p.add_points([late])
        changes = [
            e['attrs']
            for e in self.buffer.dicts()
            if e['ev'] == 'process.points'
        ]
        self.assertEqual([{'patched': [late.name]}], changes)
        self.assertEqual([early.name, late.name], p.banner()[patcher.PATCHED])

    def test_a_failing_factory_is_a_fault_not_an_error(self):
        mod = importlib.import_module(self.mod_name)

        def broken(original, state, obj):
            raise RuntimeError('boom')

        p = self.make(
            [
                points.replace(
                    self.mod_name, 'Thing.method', broken, per_object=True
                )
            ]
        )
        p.apply()
        name = '%s:Thing.method' % self.mod_name
        self.assertFalse(p.patch_object(name, mod.Thing()))
        self.assertEqual(1, p.state(name).faults)
        self.assertEqual(patcher.PENDING, p.status(name))

    def test_listen_points_attach_and_detach(self):
        calls = []

        def on_connect(dbapi_connection, connection_record):
            calls.append(dbapi_connection)

        p = self.make(
            [
                points.listen(
                    'sqlalchemy.pool.base', 'Pool', 'connect', on_connect
                )
            ]
        )
        p.apply()
        name = 'sqlalchemy.pool.base:Pool@connect'
        self.assertEqual([name], p.banner()[patcher.PATCHED])
        engine = sqlalchemy.create_engine('sqlite://')
        with engine.connect():
            pass
        self.assertEqual(1, len(calls))
        self.assertTrue(event.contains(pool_base.Pool, 'connect', on_connect))
        p.remove()
        self.assertFalse(event.contains(pool_base.Pool, 'connect', on_connect))
        engine.dispose()

    def test_discard_undoes_some_points_and_keeps_the_others(self):
        mod = importlib.import_module(self.mod_name)
        helper = vars(mod)['helper']
        p = self.make(
            [
                points.replace(
                    self.mod_name, 'helper', lambda original, state, owner: len
                ),
                patcher.PatchPoint(self.mod_name, 'Thing.method', 'x.m'),
            ]
        )
        p.apply()
        p.discard(['%s:helper' % self.mod_name])
        self.assertIs(helper, vars(mod)['helper'])
        self.assertTrue(
            hasattr(vars(mod.Thing)['method'], '__instrument_point__')
        )
        self.assertEqual(
            ['%s:Thing.method' % self.mod_name], p.banner()[patcher.PATCHED]
        )


class ReadsTest(base.TestCase):
    """Hooks read arguments by name, at the position the target's
    signature gives, never at one written in the point."""

    def test_by_keyword_or_by_the_signatures_position(self):
        def method(self, context, size, name=None):
            pass

        hook = points.reads(
            lambda inst, size, name: (inst, size, name), 'size', 'name'
        )
        bound = points.bind(hook, method)
        self.assertEqual(('i', 3, 'n'), bound('i', ('ctx', 3, 'n'), {}))
        self.assertEqual(
            ('i', 3, 'n'), bound('i', ('ctx',), {'size': 3, 'name': 'n'})
        )
        self.assertEqual(('i', 3, None), bound('i', ('ctx', 3), {}))
        # unbound (no signature known): keywords only
        self.assertEqual(
            ('i', None, 'n'), hook('i', ('ctx', 3), {'name': 'n'})
        )

    def test_the_rest_follows_the_arguments(self):
        def method(self, context, size):
            pass

        hook = points.reads(lambda inst, size, result: size + result, 'size')
        self.assertEqual(5, points.bind(hook, method)(None, ('c', 2), {}, 3))

    def test_through_a_decorator_without_wrapped(self):
        hook = points.reads(
            lambda inst, migration, dest: (migration, dest),
            'migration',
            'dest',
        )
        bound = points.bind(hook, vars(Endpoint)['call'])
        self.assertEqual(('m', 'h'), bound(None, ('c', 'i', 'm', 'h'), {}))

    def test_a_span_point_binds_its_hooks(self):
        buffer, recorder = base.list_recorder('ctl-1')
        p = patcher.Patcher(
            [
                patcher.PatchPoint(
                    __name__,
                    'Endpoint.call',
                    'test.call',
                    on_enter=points.reads(
                        lambda inst, migration: {'migration': migration},
                        'migration',
                    ),
                )
            ],
            recorder,
        )
        self.addCleanup(p.remove)
        p.apply()
        self.assertEqual('m', Endpoint().call('ctx', 'i', 'm'))
        [span] = [r for r in buffer.dicts() if r['ph'] == 'X']
        self.assertEqual({'migration': 'm'}, span['attrs'])


# Every place the SQL, pool and lock timing patch or listen to.
SQL_POINTS = (
    # (SQLAlchemy 2.0: no engine listener, the early error listener on
    # the dialect class)
    [listeners_mod.POINT_EARLY_ERROR]
    if listeners_mod.DIALECT_EXEC
    else [
        'sqlalchemy.engine.base:Engine@' + name
        for name in (
            'before_cursor_execute',
            'after_cursor_execute',
            'begin',
            'handle_error',
        )
    ]
    # (SQLAlchemy 1.4: at each Connection too)
    + (
        []
        if listeners_mod.DIALECT_HANDLE_ERROR
        else ['sqlalchemy.engine.base:Engine@engine_connect']
    )
    + [
        'sqlalchemy.pool.base:Pool@' + name
        for name in ('first_connect', 'connect', 'checkout', 'invalidate')
    ]
    + ['oslo_db.api:wrap_db_retry._is_exception_expected']
    # adopts an engine when it is made
    + ['sqlalchemy.engine.interfaces:Dialect.engine_created']
)
POOL_POINTS = (
    []
    if listeners_mod.DIALECT_EXEC
    else ['sqlalchemy.engine.base:Engine@engine_connect']
) + [
    'sqlalchemy.pool.base:Pool@connect',
    'sqlalchemy.pool.base:Pool@close',
    'sqlalchemy.pool.base:Pool@invalidate',
    'sqlalchemy.pool.impl:QueuePool._do_get',
    # names an engine's pool when the engine is made
    'sqlalchemy.engine.interfaces:Dialect.engine_created',
]
# made when an engine is first used (per dialect)
DIALECT_POINTS = [
    listeners_mod.POINT_LATE_ERROR,
    listeners_mod.POINT_COMMIT,
    listeners_mod.POINT_ROLLBACK,
] + (
    [
        listeners_mod.POINT_BEGIN,
        listeners_mod.POINT_EXECUTE,
        listeners_mod.POINT_EXECUTEMANY,
        listeners_mod.POINT_NO_PARAMS,
    ]
    if listeners_mod.DIALECT_EXEC
    else []
)


class SqlPointsTest(base.TestCase):
    """The SQL, pool and lock timing's places are points: in the banner
    and the start record, each undone by ``remove()``."""

    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)

    def setup_runtime(self):
        return lifecycle.setup(
            self.make_conf(sql_timing=True, wait_timing=True),
            'nova-conductor',
            targets=[
                sqlalchemy_target.SqlAlchemyTarget(),
                db_pool.DbPoolTarget(),
                oslo_concurrency.OsloConcurrencyTarget(),
                resources_target.ResourcesTarget(),
            ],
        )

    def test_banner_and_start_record_list_the_sql_and_pool_points(self):
        active = self.setup_runtime()
        banner = active.banner()
        for name in (
            SQL_POINTS
            + POOL_POINTS
            + [oslo_concurrency.POINT, resources.POINT]
        ):
            self.assertIn(name, banner[patcher.PATCHED])
        pymysql = connect_mod.POINT
        expected_pymysql = (
            patcher.PATCHED
            if 'pymysql.connections' in sys.modules
            else patcher.PENDING
        )
        self.assertIn(pymysql, banner[expected_pymysql])
        # (SQLAlchemy 2.0: the engines alive at install are adopted
        # then, an earlier test's included)
        if not listeners_mod.DIALECT_EXEC:
            for name in DIALECT_POINTS:
                self.assertIn(name, banner[patcher.PENDING])
        # an engine used: its dialect's places are patched
        engine = sqlalchemy.create_engine('sqlite://')
        with engine.begin() as conn:
            conn.exec_driver_sql('SELECT 1')
        for name in DIALECT_POINTS:
            self.assertIn(name, active.banner()[patcher.PATCHED])
        lifecycle.teardown()
        engine.dispose()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        start = records[0]
        self.assertEqual('process.start', start['ev'])
        listed = [
            name
            for names in start['attrs']['points'].values()
            for name in names
        ]
        for name in (
            SQL_POINTS
            + POOL_POINTS
            + DIALECT_POINTS
            + [pymysql, oslo_concurrency.POINT, resources.POINT]
        ):
            self.assertIn(name, listed)
        # one status per patched place, in each target's own entry
        self.assertEqual(
            ['installed'] * 4,
            [
                start['attrs']['targets'][name]
                for name in (
                    'sqlalchemy',
                    'db_pool',
                    'oslo_concurrency',
                    'resources',
                )
            ],
        )

    def test_no_engine_listener(self):
        # SQLAlchemy 2.0: none of the four sets Engine._has_events (a
        # class-level engine listener would, for every engine of the
        # process: SQLAlchemy's event paths at each statement)
        if not listeners_mod.DIALECT_EXEC:
            self.skipTest('SQLAlchemy 1.4 keeps the engine listeners')
        # nothing sets it back once set (an earlier test's listener)
        self.patch(engine_base.Engine, '_has_events', False)
        before = sqlalchemy.create_engine('sqlite://')
        self.addCleanup(before.dispose)
        self.setup_runtime()
        after = sqlalchemy.create_engine('sqlite://')
        self.addCleanup(after.dispose)
        for engine in (before, after):
            with engine.begin() as conn:
                conn.exec_driver_sql('SELECT 1')
            for name in ('engine_connect', 'begin', 'before_cursor_execute'):
                self.assertFalse(getattr(engine.dispatch, name), name)
        self.assertFalse(engine_base.Engine._has_events)

    def test_teardown_restores_every_original(self):
        originals = {
            (pool_impl.QueuePool, '_do_get'): vars(pool_impl.QueuePool)[
                '_do_get'
            ],
            (oslo_db_api.wrap_db_retry, retries_mod.METHOD): vars(
                oslo_db_api.wrap_db_retry
            )[retries_mod.METHOD],
            (lockutils, 'lock'): vars(lockutils)['lock'],
            (engine_interfaces.Dialect, 'engine_created'): vars(
                engine_interfaces.Dialect
            )['engine_created'],
        }
        active = self.setup_runtime()
        for (owner, attr), original in originals.items():
            self.assertIsNot(original, vars(owner)[attr], attr)
        engine = sqlalchemy.create_engine('sqlite://')
        with engine.begin() as conn:
            conn.exec_driver_sql('SELECT 1')
        dialect = engine.dialect
        self.assertIn('do_commit', vars(dialect))
        sql = active.target('sqlalchemy').timing.listeners
        pool_waits = active.target('db_pool').taps
        sampler_pools = active.target('resources').sampler.pools
        classes = {
            'Engine': engine_base.Engine,
            'Pool': pool_base.Pool,
            'Dialect': engine_interfaces.Dialect,
        }
        listened = [
            (classes[p.target], p.listen[0], p.listen[1])
            for p in sql._points + pool_waits._points + [sampler_pools.point()]
            if p.listen is not None and not p.per_object
        ] + [(dialect, 'handle_error', sql.handle_error)]
        # (SQLAlchemy 2.0: no engine listener)
        self.assertEqual(
            9 if listeners_mod.DIALECT_EXEC else 15, len(listened)
        )
        for target, name, fn in listened:
            self.assertTrue(event.contains(target, name, fn), name)
        lifecycle.teardown()
        for (owner, attr), original in originals.items():
            self.assertIs(original, vars(owner)[attr], attr)
        for attr in (
            'do_commit',
            'do_rollback',
            'do_begin',
            'do_execute',
            'do_executemany',
            'do_execute_no_params',
        ):
            self.assertNotIn(attr, vars(dialect))
        for target, name, fn in listened:
            self.assertFalse(event.contains(target, name, fn), name)
        engine.dispose()


class OneHookRegistryTest(base.TestCase):
    def test_only_the_hook_registry_registers_post_import_hooks(self):
        root = pathlib.Path(patcher.__file__).parent.parent
        registering = sorted(
            str(path.relative_to(root))
            for path in root.rglob('*.py')
            if 'register_post_import_hook' in path.read_text()
        )
        self.assertEqual(['patching/hooks.py'], registering)
        # the patcher and the start-up log (oslo.log's setup, before
        # any patcher exists) go through it
        name = self.make_module('def f():\n    return 1\n')
        buffer, recorder = base.list_recorder('ctl-1')
        p = patcher.Patcher([points.PatchPoint(name, 'f', 'x.f')], recorder)
        self.addCleanup(p.remove)
        p.apply()
        self.assertEqual((patcher._on_import,), hooks.registered(name))
        startlog._wrap_setup()
        self.assertIn(startlog._wrap_module, hooks.registered('oslo_log.log'))

    def test_each_callback_once_when_imported_later(self):
        name = self.make_module('VALUE = 1\n')
        seen = []

        def first(module):
            seen.append(('first', module.VALUE))

        def second(module):
            seen.append(('second', module.VALUE))

        def broken(module):
            raise RuntimeError('a hook that fails')

        hooks.when_imported(name, first)
        hooks.when_imported(name, broken)
        hooks.when_imported(name, first)
        self.assertEqual([], seen)
        self.assertNotIn(name, sys.modules)
        importlib.import_module(name)
        self.addCleanup(sys.modules.pop, name, None)
        # a failing callback is logged; the others run, the import too
        self.assertEqual([('first', 1)], seen)
        self.assertIn('post-import hook of %s failed' % name, self.logged())
        # registered after the import: called at once, once
        hooks.when_imported(name, second)
        hooks.when_imported(name, second)
        self.assertEqual([('first', 1), ('second', 1)], seen)
        self.assertEqual((first, broken, second), hooks.registered(name))
