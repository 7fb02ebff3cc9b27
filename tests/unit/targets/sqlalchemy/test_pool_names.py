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
"""One name per database in every record (issue 32, item 7): the pool
records (``db.pool.*``) name a database as the SQL records do, its
first connection included (SQLAlchemy fires the pool's ``connect``
before ``engine_connect``), a plain ``sqlite://`` engine included."""

import os

import fixtures
import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect
import testtools

from instrument.targets.sqlalchemy import listeners as listeners_mod
from instrument.targets.sqlalchemy import pool as pool_mod
from tests.unit.targets.sqlalchemy import fixtures as db_fixtures


class PoolNamesTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.timing = self.useFixture(db_fixtures.SqlTiming())
        self.taps = pool_mod.PoolWaits(self.timing.recorder).install()
        # the taps of the test's end (a test may install others)
        self.addCleanup(lambda: self.taps.remove())
        self.dir = self.useFixture(fixtures.TempDir()).path

    def use(self, engine) -> None:
        self.addCleanup(engine.dispose)
        with engine.connect() as conn:
            conn.execute(sa.text('select 1'))
            conn.commit()

    def names(self) -> dict:
        """``{event: [db, ...]}`` of the pool and SQL records."""
        out: dict = {}
        for rec in self.timing.records():
            if rec['ev'].startswith(('db.pool.', 'sql.query', 'sql.txn')):
                out.setdefault(rec['ev'], []).append(rec['attrs']['db'])
        return out

    def test_first_connection_of_each_engine_named(self):
        path = os.path.join(self.dir, 'nova_api')
        self.use(sa.create_engine('sqlite:///' + path))
        self.use(
            sa.create_engine(
                'sqlite:///file:/x/nova_cell1?mode=memory&uri=true'
            )
        )
        names = self.names()
        self.assertEqual(['nova_api', 'nova_cell1'], names['db.pool.connect'])
        self.assertEqual({'nova_api', 'nova_cell1'}, set(names['sql.query']))

    def test_plain_sqlite_engine_is_memory_everywhere(self):
        self.use(sa.create_engine('sqlite://'))
        names = self.names()
        self.assertEqual([':memory:'], names['db.pool.connect'])
        self.assertEqual({':memory:'}, set(names['sql.query']))

    def test_pool_made_again_keeps_the_name(self):
        engine = sa.create_engine(
            'sqlite:///' + os.path.join(self.dir, 'placement')
        )
        self.use(engine)
        engine.dispose()
        with engine.connect() as conn:
            conn.execute(sa.text('select 1'))
        engine.dispose()
        self.assertEqual(['placement'] * 2, self.names()['db.pool.connect'])

    def test_engine_made_before_install(self):
        self.taps.remove()
        engine = sa.create_engine(
            'sqlite:///' + os.path.join(self.dir, 'nova_cell0')
        )
        self.taps = pool_mod.PoolWaits(self.timing.recorder).install()
        self.use(engine)
        engine.dispose()
        with engine.connect() as conn:
            conn.execute(sa.text('select 1'))
        # SQLAlchemy 2.0: named at install (no engine listener), every
        # connection named; 1.4: the first connection before the engine
        # was seen (engine_connect) unnamed, every later one named
        first = 'nova_cell0' if listeners_mod.DIALECT_EXEC else ''
        self.assertEqual(
            [first, 'nova_cell0'], self.names()['db.pool.connect']
        )

    def test_remove_restores_engine_created(self):
        hook = vars(Dialect)['engine_created']
        self.assertIsNotNone(getattr(hook.__func__, '__wrapped__', None))
        self.taps.remove()
        self.assertIs(
            hook.__func__.__wrapped__, vars(Dialect)['engine_created'].__func__
        )
        self.taps.install()
        self.assertIsNot(hook, vars(Dialect)['engine_created'])

    def test_engine_keyword_arguments_still_accepted(self):
        # create_engine reads Engine.__init__'s own arguments: an engine
        # made with them is made as without instrument
        engine = sa.create_engine(
            'sqlite://', logging_name='x', hide_parameters=True
        )
        self.use(engine)
        self.assertEqual([':memory:'], self.names()['db.pool.connect'])

    def test_a_fault_does_not_stop_the_engine(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.listeners.database_name',
                lambda url: 1 / 0,
            )
        )
        engine = sa.create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.connect() as conn:
            self.assertEqual(1, conn.execute(sa.text('select 1')).scalar())
        self.assertGreater(self.taps.faults.count, 0)
