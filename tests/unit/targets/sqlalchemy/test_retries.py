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
"""db.retry events from oslo_db.api.wrap_db_retry."""

import os

from oslo_context import context as oslo_context
from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import engines
import sqlalchemy as sa

from instrument.runtime import metrics
from instrument.targets.sqlalchemy import fingerprint
from instrument.targets.sqlalchemy import listeners
from instrument.targets.sqlalchemy import retries
from tests.unit import base
from tests.unit.targets.sqlalchemy import fixtures as db_fixtures

MISSING_TABLE = 'SELECT uuid FROM nosuch WHERE id = 1'
OTHER_TABLE = 'UPDATE gone SET host = 2 WHERE id = 3'


def _flaky(failures: int):
    """A DB API function decorated like nova's, before instrumentation:
    deadlocks ``failures`` times, then succeeds."""
    calls = []

    @oslo_db_api.wrap_db_retry(
        max_retries=2,
        retry_interval=0.001,
        inc_retry_interval=False,
        retry_on_deadlock=True,
    )
    def quota_reserve(context):
        calls.append(context)
        if len(calls) <= failures:
            raise db_exc.DBDeadlock()
        return 'reserved'

    return quota_reserve, calls


class TestRetries(base.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)

    def test_retries_counted_and_tied_to_the_request(self):
        reserve, calls = _flaky(failures=2)  # decorated before install
        timing = self.useFixture(db_fixtures.SqlTiming())
        ctx = oslo_context.RequestContext(request_id='req-quota')
        with timing.tracer.span('api.compute.create', ctx=ctx):
            self.assertEqual('reserved', reserve(ctx))
        self.assertEqual(3, len(calls))
        events = timing.records('db.retry')
        self.assertEqual([1, 2], [e['attrs']['attempt'] for e in events])
        (span,) = [
            r for r in timing.records('api.compute.create') if r['ph'] == 'X'
        ]
        for event in events:
            self.assertEqual('I', event['ph'])
            self.assertEqual('req-quota', event['req'])
            self.assertEqual(span['span'], event['parent'])
            self.assertFalse(event['attrs']['exhausted'])
            self.assertEqual(
                'oslo_db.exception.DBDeadlock', event['attrs']['cls']
            )
            self.assertTrue(
                event['attrs']['func'].endswith(
                    '_flaky.<locals>.quota_reserve'
                ),
                event['attrs']['func'],
            )

    def test_exhausted(self):
        reserve, calls = _flaky(failures=10)
        timing = self.useFixture(db_fixtures.SqlTiming())
        ctx = oslo_context.RequestContext(request_id='req-out')
        with timing.tracer.span('api.compute.create', ctx=ctx):
            self.assertRaises(db_exc.DBDeadlock, reserve, None)
        events = timing.records('db.retry')
        self.assertEqual(
            [(1, False), (2, False), (3, True)],
            [(e['attrs']['attempt'], e['attrs']['exhausted']) for e in events],
        )
        self.assertEqual({'req-out'}, {e['req'] for e in events})

    def test_unexpected_errors_are_not_retries(self):
        @oslo_db_api.wrap_db_retry(max_retries=2, retry_on_deadlock=True)
        def broken():
            raise ValueError('not a DB error')

        timing = self.useFixture(db_fixtures.SqlTiming())
        self.assertRaises(ValueError, broken)
        self.assertEqual([], timing.records('db.retry'))

    def test_removed(self):
        reserve, calls = _flaky(failures=1)
        timing = self.useFixture(db_fixtures.SqlTiming())
        self.assertTrue(timing.handle.retries.patched)
        timing.remove()
        self.assertFalse(timing.handle.retries.patched)
        self.assertNotIsInstance(
            vars(oslo_db_api.wrap_db_retry)[retries.METHOD],
            retries.wrapt.FunctionWrapper,
        )
        self.assertEqual('reserved', reserve(None))
        self.assertEqual([], timing.records('db.retry'))


def _failing(engine, statement: str, max_retries: int):
    """A DB API function retried on every oslo.db error (nova retries
    deadlocks, which oslo.db translates on MySQL only: on sqlite a
    missing table is the DBError at hand), whose statement always
    fails."""

    @oslo_db_api.wrap_db_retry(
        max_retries=max_retries,
        retry_interval=0.001,
        inc_retry_interval=False,
        exception_checker=lambda exc: isinstance(exc, db_exc.DBError),
    )
    def run():
        with engine.connect() as conn:
            conn.exec_driver_sql(statement)

    return run


class TestRetriesPerQueryClass(base.TestCase):
    """A retry caused by a failed statement names the statement's query
    class and database, the same as the failed ``sql.query`` record;
    the metrics count retries per database and query class."""

    def setUp(self):
        super().setUp()
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)
        self.engine = engines.create_engine(
            'sqlite:///' + os.path.join(self.tmp, 'nova.sqlite')
        )
        self.addCleanup(self.engine.dispose)
        self.db = listeners.database_name(self.engine.url)

    def test_retries_tied_to_the_failed_statement(self):
        timing = self.useFixture(db_fixtures.SqlTiming())
        # what instrument-metrics exposes, folded from the writer's
        # batches
        m = metrics.Metrics()
        timing.buffer.add_observer(m)
        ctx = oslo_context.RequestContext(request_id='req-retry')
        with timing.tracer.span('conductor.build_instances', ctx=ctx):
            self.assertRaises(
                db_exc.DBError, _failing(self.engine, MISSING_TABLE, 2)
            )
            self.assertRaises(
                db_exc.DBError, _failing(self.engine, OTHER_TABLE, 1)
            )
            # a retry of no statement (raised by the function itself)
            reserve, _calls = _flaky(failures=1)
            self.assertEqual('reserved', reserve(ctx))
        records = timing.records()
        failed = [
            r for r in records if r['ev'] == 'sql.query' and r['st'] == 'error'
        ]
        fps = {r['attrs']['fp'] for r in failed}
        missing = fingerprint.classify(MISSING_TABLE).qid
        other = fingerprint.classify(OTHER_TABLE).qid
        self.assertEqual({missing, other}, fps)
        events = [r for r in records if r['ev'] == 'db.retry']
        self.assertEqual(
            [
                (missing, self.db, 1, False),
                (missing, self.db, 2, False),
                (missing, self.db, 3, True),
                (other, self.db, 1, False),
                (other, self.db, 2, True),
                (None, None, 1, False),
            ],
            [
                (
                    e['attrs'].get('fp'),
                    e['attrs'].get('db'),
                    e['attrs']['attempt'],
                    e['attrs']['exhausted'],
                )
                for e in events
            ],
        )
        # their fingerprints are announced (the failed statements')
        texts = {
            r['attrs']['fp'] for r in records if r['ev'] == 'sql.fingerprint'
        }
        self.assertTrue({missing, other} <= texts)
        self.assertEqual(
            {
                (self.db, missing, 'false'): 2,
                (self.db, missing, 'true'): 1,
                (self.db, other, 'false'): 1,
                (self.db, other, 'true'): 1,
            },
            m.families[metrics.SQL_RETRIES],
        )
        self.assertEqual(
            {
                ('oslo_db.exception.DBNonExistentTable', 'false'): 3,
                ('oslo_db.exception.DBNonExistentTable', 'true'): 2,
                ('oslo_db.exception.DBDeadlock', 'false'): 1,
            },
            m.families[metrics.DB_RETRIES],
        )

    def test_a_retried_commit_is_of_the_commit_class(self):
        with self.engine.begin() as conn:
            conn.exec_driver_sql('CREATE TABLE t (id INTEGER)')
        dialect = self.engine.dialect
        dbapi = getattr(dialect, 'loaded_dbapi', None) or dialect.dbapi
        real_commit = dialect.do_commit
        refused = []

        def do_commit(dbapi_connection):
            # What Galera answers on a certification failure at COMMIT.
            if len(refused) < 2:
                refused.append(True)
                raise dbapi.OperationalError(
                    'Deadlock found when trying to get lock'
                )
            return real_commit(dbapi_connection)

        # Set before the engine is adopted: the timer wraps this one.
        self.patch(dialect, 'do_commit', do_commit)
        timing = self.useFixture(db_fixtures.SqlTiming())

        @oslo_db_api.wrap_db_retry(
            max_retries=3,
            retry_interval=0.001,
            inc_retry_interval=False,
            exception_checker=lambda exc: isinstance(
                exc, sa.exc.OperationalError
            ),
        )
        def insert():
            with self.engine.begin() as conn:
                conn.exec_driver_sql('INSERT INTO t (id) VALUES (1)')

        insert()
        timing.remove()
        events = timing.records('db.retry')
        commit = fingerprint.classify('COMMIT').qid
        self.assertEqual(
            [(commit, self.db, 1), (commit, self.db, 2)],
            [
                (
                    e['attrs'].get('fp'),
                    e['attrs'].get('db'),
                    e['attrs']['attempt'],
                )
                for e in events
            ],
        )

    def test_the_memo_gives_the_class_of_a_known_statement(self):
        memo = fingerprint.Memo()
        qclass, _new = memo.learn(MISSING_TABLE)
        recorder = retries.RetryRecorder(None, memo=memo)
        # the memo's answer, not a new fingerprint
        memo._known[fingerprint.memo_key(MISSING_TABLE)] = (
            fingerprint.QueryClass('f' * 32, qclass.kind, qclass.text)
        )
        self.assertEqual('f' * 32, recorder._query_id(MISSING_TABLE, False))
        self.assertEqual(
            fingerprint.classify(OTHER_TABLE).qid,
            recorder._query_id(OTHER_TABLE, False),
        )

    def test_failed_statement_is_found_through_wrappers(self):
        inner = ValueError('raw')
        setattr(inner, listeners.ATTR_SQL, ('SELECT 1', 'nova', False))
        wrapped = db_exc.DBDeadlock(inner)
        self.assertEqual(
            ('SELECT 1', 'nova', False), retries.failed_statement(wrapped)
        )
        request = db_exc.RetryRequest(wrapped)
        self.assertEqual(
            ('SELECT 1', 'nova', False), retries.failed_statement(request)
        )
        self.assertIsNone(retries.failed_statement(ValueError('x')))
