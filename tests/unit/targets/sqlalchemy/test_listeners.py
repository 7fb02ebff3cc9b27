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
"""sql.query / sql.txn / sql.fingerprint records through oslo.db on sqlite."""

import os
import sys

from oslo_context import context as oslo_context
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade
from oslo_db.sqlalchemy import engines
import sqlalchemy as sa
import testtools

from instrument.runtime import recorder as recorder_mod
from instrument.targets.sqlalchemy import fingerprint
from instrument.targets.sqlalchemy import listeners
from tests.unit import base
from tests.unit.targets.sqlalchemy import fixtures as db_fixtures

INSERT = 'INSERT INTO instances (uuid, host) VALUES (:uuid, :host)'


@enginefacade.transaction_context_provider
def _create_engine(*args, **kwargs):
    """``sqlalchemy.create_engine`` with 2.0's Connection API under
    SQLAlchemy 1.4 too (nova 29's: ``future=True``)."""
    kwargs.setdefault('future', True)
    return sa.create_engine(*args, **kwargs)


def _dbapi(dialect):
    """The dialect's DBAPI module (``dbapi`` before SQLAlchemy 2.0)."""
    return getattr(dialect, 'loaded_dbapi', None) or dialect.dbapi


class Context(oslo_context.RequestContext):
    """A nova-like request context that enginefacade can use."""


def _schema(engine):
    with engine.begin() as conn:
        conn.exec_driver_sql(
            'CREATE TABLE instances (id INTEGER PRIMARY KEY, '
            'uuid VARCHAR(36) UNIQUE, host VARCHAR(255))'
        )


class SqlTestCase(base.TestCase):
    options = {}

    def setUp(self):
        super().setUp()
        # The context of one test must not leak into the next.
        self.addCleanup(
            oslo_context.get_current()
            and oslo_context.get_current().update_store
            or (lambda: None)
        )
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)

    def install(self, **options):
        return self.useFixture(db_fixtures.SqlTiming(**options))

    def engine(self, name):
        """A file-backed sqlite engine made by oslo.db (its exception
        filter registered, as for nova)."""
        path = os.path.join(self.tmp, name)
        engine = engines.create_engine('sqlite:///' + path)
        self.addCleanup(engine.dispose)
        return engine


class TestStatements(SqlTestCase):
    def test_records_through_enginefacade(self):
        timing = self.install()
        manager = enginefacade.transaction_context()
        manager.configure(
            connection='sqlite:///' + os.path.join(self.tmp, 'nova_api.sqlite')
        )
        ctx = Context(request_id='req-4f1d', global_request_id='req-g1')
        # As in nova: DB work runs inside an instrumented call, which
        # took the request from its context argument.
        with timing.tracer.span('conductor.build_instances', ctx=ctx):
            with manager.writer.using(ctx) as session:
                session.execute(
                    sa.text(
                        'CREATE TABLE instances (id INTEGER PRIMARY KEY, '
                        'uuid VARCHAR(36), host VARCHAR(255))'
                    )
                )
                session.execute(
                    sa.text(INSERT),
                    [
                        {'uuid': 'uuid-param-1', 'host': 'host-param-1'},
                        {'uuid': 'uuid-param-2', 'host': 'host-param-2'},
                    ],
                )
            with manager.reader.using(ctx) as session:
                session.execute(
                    sa.text(
                        'SELECT uuid FROM instances WHERE host IN (:a, :b)'
                    ),
                    {'a': 'host-param-1', 'b': 'host-param-2'},
                ).fetchall()
        # Outside any call: no request, even though oslo.context's
        # thread-local store still holds the last request's context
        # (it does in nova's periodic tasks).
        with manager.reader.using(ctx) as session:
            session.execute(sa.text('SELECT count(*) FROM instances'))

        queries = timing.records('sql.query')
        texts = {
            r['attrs']['fp']: r['attrs']['text']
            for r in timing.records('sql.fingerprint')
        }
        [outside] = [r for r in queries if 'count' in texts[r['attrs']['fp']]]
        self.assertNotIn('req', outside)
        queries = [r for r in queries if r is not outside]
        by_kind = {}
        for rec in queries:
            by_kind.setdefault(rec['attrs']['kind'], []).append(rec)
        (insert,) = by_kind['INSERT']
        (select,) = by_kind['SELECT']
        self.assertEqual('X', insert['ph'])
        self.assertEqual('req-4f1d', insert['req'])
        self.assertEqual('req-g1', insert['greq'])
        self.assertEqual('nova_api.sqlite', insert['attrs']['db'])
        self.assertEqual(2, insert['attrs']['rows'])
        self.assertIs(True, insert['attrs']['many'])
        self.assertFalse(select['attrs']['many'])
        self.assertEqual(
            fingerprint.classify(
                'SELECT uuid FROM instances WHERE host IN (?, ?)'
            ).qid,
            select['attrs']['fp'],
        )
        for rec in queries:
            self.assertEqual('ok', rec['st'])
            self.assertGreaterEqual(rec['dur_us'], 0)
            self.assertEqual('conductor', rec['svc'])
            self.assertEqual('testhost', rec['host'])
        # Never the parameters.
        text = repr(timing.records())
        self.assertNotIn('-param-', text)

        txns = timing.records('sql.txn')
        # oslo.db's sqlite engine issues an explicit BEGIN: statements are
        # BEGIN, CREATE TABLE, INSERT.
        writer = [t for t in txns if t['attrs']['statements'] == 3]
        self.assertEqual(1, len(writer), txns)
        self.assertEqual('commit', writer[0]['attrs']['outcome'])
        self.assertEqual('req-4f1d', writer[0]['req'])
        self.assertEqual(writer[0]['span'], insert['attrs']['txn'])
        commits = [
            q
            for q in queries
            if q['attrs']['kind'] == 'COMMIT'
            and q['attrs']['txn'] == writer[0]['span']
        ]
        self.assertEqual(1, len(commits))
        # The transaction spans its statements and its COMMIT.
        self.assertLessEqual(writer[0]['ts'], insert['ts'])
        self.assertGreaterEqual(
            writer[0]['ts'] + writer[0]['dur_us'] + 2,
            commits[0]['ts'] + commits[0]['dur_us'],
        )

    def test_fingerprint_written_once_per_class(self):
        timing = self.install()
        engine = self.engine('nova.sqlite')
        _schema(engine)
        with engine.begin() as conn:
            for n in range(1, 6):
                # An expanding IN: SQLAlchemy renders n markers.
                stmt = sa.text(
                    'SELECT id FROM instances WHERE uuid IN :uuids'
                ).bindparams(sa.bindparam('uuids', expanding=True))
                conn.execute(stmt, {'uuids': ['x'] * n}).fetchall()
        selects = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] == 'SELECT'
        ]
        self.assertEqual(5, len(selects))
        self.assertEqual(1, len({q['attrs']['fp'] for q in selects}))
        texts = [
            m
            for m in timing.records('sql.fingerprint')
            if m['attrs']['fp'] == selects[0]['attrs']['fp']
        ]
        self.assertEqual(1, len(texts))
        self.assertEqual('M', texts[0]['ph'])
        self.assertEqual(
            'select id from instances where uuid in(?+)',
            texts[0]['attrs']['text'],
        )
        self.assertEqual('SELECT', texts[0]['attrs']['kind'])

    def test_parent_is_the_enclosing_span(self):
        timing = self.install()
        engine = self.engine('nova_cell1.sqlite')
        _schema(engine)
        ctx = oslo_context.RequestContext(request_id='req-span')
        with timing.tracer.span(
            'scheduler.host_states', ctx=ctx, inst=['i-1']
        ):
            with engine.connect() as conn:
                conn.exec_driver_sql('SELECT count(*) FROM instances')
                conn.commit()
        (span,) = [
            r
            for r in timing.records('scheduler.host_states')
            if r['ph'] == 'X'
        ]
        (select,) = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] == 'SELECT'
        ]
        self.assertEqual(span['span'], select['parent'])
        self.assertEqual('req-span', select['req'])
        self.assertEqual(['i-1'], select['inst'])
        self.assertEqual('scheduler.host_states', select['attrs']['call'])
        self.assertEqual('nova_cell1.sqlite', select['attrs']['db'])

    def test_outside_any_span_without_context(self):
        timing = self.install()
        engine = _create_engine('sqlite://')
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1').fetchall()
        (select,) = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] == 'SELECT'
        ]
        self.assertNotIn('parent', select)
        self.assertNotIn('req', select)
        self.assertEqual(':memory:', select['attrs']['db'])
        self.assertIsNone(select['attrs']['call'])


class TestEngines(SqlTestCase):
    def test_engines_created_before_and_after_install(self):
        before = self.engine('nova_cell0.sqlite')
        _schema(before)
        timing = self.install()
        after = self.engine('placement.sqlite')
        _schema(after)
        for engine in (before, after):
            with engine.begin() as conn:
                conn.execute(sa.text(INSERT), {'uuid': 'u', 'host': 'h'})
        inserts = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] == 'INSERT'
        ]
        self.assertEqual(
            ['nova_cell0.sqlite', 'placement.sqlite'],
            sorted(q['attrs']['db'] for q in inserts),
        )

    def test_remove_detaches_everything(self):
        engine = self.engine('nova.sqlite')
        _schema(engine)
        timing = self.install()
        with engine.begin() as conn:
            conn.exec_driver_sql('SELECT 1')
        dialect = engine.dialect
        self.assertIn('do_commit', vars(dialect))
        self.assertTrue(
            sa.event.contains(
                dialect, 'handle_error', timing.handle.listeners.handle_error
            )
        )
        timing.remove()
        count = len(timing.records())
        self.assertNotIn('do_commit', vars(dialect))
        self.assertNotIn('do_rollback', vars(dialect))
        self.assertFalse(
            sa.event.contains(
                dialect, 'handle_error', timing.handle.listeners.handle_error
            )
        )
        with engine.begin() as conn:
            conn.exec_driver_sql('SELECT 2')
        self.assertEqual(count, len(timing.records()))
        timing.remove()  # idempotent

    def test_database_names(self):
        url = sa.engine.make_url
        self.assertEqual(':memory:', listeners.database_name(url('sqlite://')))
        self.assertEqual(
            'nova.sqlite',
            listeners.database_name(
                url('sqlite:////var/lib/nova/nova.sqlite')
            ),
        )
        self.assertEqual(
            'nova_api',
            listeners.database_name(
                url('mysql+pymysql://nova:secret@db/nova_api?charset=utf8')
            ),
        )


class TestErrors(SqlTestCase):
    def test_translated_duplicate_entry(self):
        timing = self.install()
        engine = self.engine('nova.sqlite')
        _schema(engine)
        ctx = oslo_context.RequestContext(request_id='req-dup')
        with timing.tracer.span('api.compute.create', ctx=ctx):
            with engine.begin() as conn:
                conn.execute(sa.text(INSERT), {'uuid': 'u', 'host': 'a'})
            with testtools.ExpectedException(db_exc.DBDuplicateEntry):
                with engine.begin() as conn:
                    conn.execute(
                        sa.text(INSERT), {'uuid': 'u', 'host': 'secret-host'}
                    )
        failed = [q for q in timing.records('sql.query') if q['st'] == 'error']
        self.assertEqual(1, len(failed), failed)
        rec = failed[0]
        self.assertEqual(
            'oslo_db.exception.DBDuplicateEntry', rec['err']['cls']
        )
        self.assertEqual('req-dup', rec['req'])
        self.assertEqual('INSERT', rec['attrs']['kind'])
        self.assertNotIn('secret-host', repr(rec))
        self.assertNotIn('[SQL', rec['err']['msg'])
        rollback = [
            t
            for t in timing.records('sql.txn')
            if t['span'] == rec['attrs']['txn']
        ]
        self.assertEqual('rollback', rollback[0]['attrs']['outcome'])
        # oslo.db's explicit BEGIN on sqlite, and the failed INSERT.
        self.assertEqual(2, rollback[0]['attrs']['statements'])

    def test_plain_engine_error_and_missing_table(self):
        timing = self.install()
        for engine, cls in (
            (_create_engine('sqlite://'), 'sqlalchemy.exc.OperationalError'),
            (
                self.engine('nova.sqlite'),
                'oslo_db.exception.DBNonExistentTable',
            ),
        ):
            with engine.connect() as conn:
                self.assertRaises(
                    (sa.exc.OperationalError, db_exc.DBError),
                    conn.exec_driver_sql,
                    'SELECT * FROM nosuch',
                )
            (rec,) = [
                q
                for q in timing.records('sql.query')
                if q['st'] == 'error'
                and q['attrs']['db'] == listeners.database_name(engine.url)
            ]
            self.assertEqual('error', rec['st'])
            self.assertEqual(cls, rec['err']['cls'])

    def test_errors_written_even_when_aggregating(self):
        timing = self.install(
            slow_query_threshold=60000.0, detail_sample_rate=0.0
        )
        engine = self.engine('nova.sqlite')
        with engine.connect() as conn:
            self.assertRaises(
                db_exc.DBError, conn.exec_driver_sql, 'SELECT * FROM nosuch'
            )
        errors = [q for q in timing.records('sql.query')]
        self.assertEqual(1, len(errors))
        self.assertEqual('error', errors[0]['st'])

    def test_failed_commit_recorded_with_translated_class(self):
        engine = self.engine('nova.sqlite')
        _schema(engine)
        dialect = engine.dialect
        dbapi = _dbapi(dialect)
        refuse = []
        real_commit = dialect.do_commit

        def do_commit(dbapi_connection):
            # What Galera answers on a certification failure at COMMIT.
            if refuse:
                raise dbapi.OperationalError(
                    'Deadlock found when trying to get lock; try '
                    'restarting transaction'
                )
            return real_commit(dbapi_connection)

        # Set before the engine is adopted: the timer wraps this one.
        self.patch(dialect, 'do_commit', do_commit)
        timing = self.install()
        with engine.connect() as conn:
            conn.execute(sa.text(INSERT), {'uuid': 'u', 'host': 'h'})
            refuse.append(True)
            # oslo.db translates deadlocks on MySQL only: on sqlite its
            # filter re-raises the OperationalError as it is, and that is
            # what the caller gets and what is recorded.
            self.assertRaises(sa.exc.OperationalError, conn.commit)
        # No later handler ran to settle it: written once the writer has
        # waited long enough for a translation, or at the end.
        timing.remove()
        commit = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] == 'COMMIT'
        ]
        self.assertEqual(1, len(commit), commit)
        self.assertEqual('error', commit[0]['st'])
        self.assertEqual(
            'sqlalchemy.exc.OperationalError', commit[0]['err']['cls']
        )
        (txn,) = [
            t
            for t in timing.records('sql.txn')
            if t['span'] == commit[0]['attrs']['txn']
        ]
        self.assertEqual('error', txn['st'])
        self.assertEqual('commit', txn['attrs']['outcome'])
        self.assertEqual(commit[0]['err'], txn['err'])


class TestAggregation(SqlTestCase):
    def test_fast_statements_aggregated_not_lost(self):
        timing = self.install(slow_query_threshold=60000.0)
        engine = self.engine('nova.sqlite')
        _schema(engine)
        ctx = oslo_context.RequestContext(request_id='req-agg')
        with timing.tracer.span('conductor.schedule', ctx=ctx):
            with engine.begin() as conn:
                for n in range(7):
                    conn.execute(
                        sa.text(INSERT), {'uuid': 'u%d' % n, 'host': 'h'}
                    )
        timing.remove()
        self.assertEqual(
            [],
            [
                q
                for q in timing.records('sql.query')
                if q['attrs']['kind'] == 'INSERT'
            ],
        )
        aggs = [
            a
            for a in timing.records('sql.agg')
            if a['attrs']['kind'] == 'INSERT'
        ]
        self.assertEqual(1, len(aggs))
        attrs = aggs[0]['attrs']
        self.assertEqual('C', aggs[0]['ph'])
        self.assertEqual(7, attrs['count'])
        self.assertEqual(7, attrs['rows'])
        self.assertEqual(0, attrs['errors'])
        self.assertEqual(7, sum(attrs['hist']))
        self.assertEqual(9, len(attrs['hist']))
        self.assertEqual('conductor.schedule', attrs['call'])
        self.assertEqual('nova.sqlite', attrs['db'])
        self.assertLessEqual(attrs['min_us'], attrs['max_us'])
        self.assertLessEqual(attrs['max_us'], attrs['sum_us'])
        self.assertGreaterEqual(
            attrs['sumsq_us'], attrs['sum_us'] ** 2 // attrs['count']
        )
        self.assertEqual(fingerprint.classify(INSERT).qid, attrs['fp'])
        # Every class is announced, even when nothing is written alone.
        fps = {m['attrs']['fp'] for m in timing.records('sql.fingerprint')}
        self.assertIn(attrs['fp'], fps)
        # Fast transactions are not written either.
        self.assertEqual([], timing.records('sql.txn'))

    def test_zero_rows_aggregated_are_zero_not_unknown(self):
        # Issue 27 item 12: one by one the class says 0 rows; aggregated
        # it must too (and "unknown" only where no statement had a count).
        from instrument.analysis.model import sqldigest
        from instrument.analysis.sections import sql as sql_section

        blocks = {}
        for threshold in (0.0, 60000.0):
            timing = self.install(slow_query_threshold=threshold)
            engine = self.engine('nova-%d.sqlite' % threshold)
            _schema(engine)
            with engine.begin() as conn:
                for n in range(5):
                    conn.execute(
                        sa.text(
                            "UPDATE instances SET host = 'h2' WHERE uuid = "
                            ':uuid'
                        ),
                        {'uuid': 'none-%d' % n},
                    )
                    conn.exec_driver_sql('SELECT %d' % n)
            timing.remove()
            digest = sqldigest.SqlDigest()
            for rec in timing.records():
                if rec['ev'] == 'sql.query':
                    attrs = rec['attrs']
                    digest.add(
                        rec['ts'],
                        rec['dur_us'],
                        attrs['fp'],
                        rec['svc'],
                        attrs['db'],
                        attrs['call'],
                        attrs['rows'],
                        False,
                        attrs['kind'],
                    )
                elif rec['ev'] == 'sql.agg':
                    digest.add_agg(rec['ts'], rec['svc'], rec['attrs'])
            for row in digest.profile(limit=0)['rows']:
                kind = next(iter(row['kinds']))
                if kind in ('UPDATE', 'SELECT'):
                    blocks.setdefault(kind, []).append(
                        (
                            row['calls'],
                            row['rows'],
                            row['rows_unknown'],
                            sql_section.rows_cell(row)[0],
                        )
                    )
        # The UPDATEs matched nothing: 0 rows, one by one and aggregated.
        self.assertEqual([(5, 0, 0, '0'), (5, 0, 0, '0')], blocks['UPDATE'])
        # sqlite gives no row count for a SELECT: unknown both ways.
        self.assertEqual([(5, None, 5, 'unknown')] * 2, blocks['SELECT'])

    def test_unsampled_requests_are_aggregated(self):
        timing = self.install(detail_sample_rate=0.0)
        engine = _create_engine('sqlite://')
        with timing.tracer.span(
            'conductor.schedule',
            ctx=oslo_context.RequestContext(request_id='req-x'),
        ):
            with engine.connect() as conn:
                conn.exec_driver_sql('SELECT 1')
                conn.exec_driver_sql('SELECT 2')
        timing.remove()
        self.assertEqual([], timing.records('sql.query'))
        selects = [
            a
            for a in timing.records('sql.agg')
            if a['attrs']['kind'] == 'SELECT'
        ]
        self.assertEqual(2, selects[0]['attrs']['count'])

    def test_writer_processes_without_being_asked(self):
        # The buffer's writer runs the SQL processing before each drain.
        timing = self.install()
        engine = _create_engine('sqlite://')
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
        timing.buffer.drain()
        names = [r['ev'] for r in timing.sink.records]
        self.assertIn('sql.query', names)


class TestFaults(SqlTestCase):
    def test_fault_in_processing_is_counted_not_raised(self):
        timing = self.install()
        listeners_ = timing.handle.listeners

        def broken(statement):
            raise RuntimeError('boom')

        self.useFixture(
            db_fixtures.fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.fingerprint.Memo.learn',
                lambda self, statement: broken(statement),
            )
        )
        engine = _create_engine('sqlite://')
        with engine.connect() as conn:
            self.assertEqual(
                [(1,)], conn.exec_driver_sql('SELECT 1').fetchall()
            )
        self.assertEqual([], timing.records('sql.query'))
        # The statement and the ROLLBACK of its connection's close.
        self.assertEqual(2, listeners_.faults.count)

    def test_dropped_when_the_queue_is_full(self):
        timing = self.install()
        listeners_ = timing.handle.listeners
        # A queue that holds nothing: rebuild and re-listen with it.
        listeners_.remove()
        listeners_.max_pending = 0
        listeners_._build()
        listeners_.install()
        engine = _create_engine('sqlite://')
        with engine.connect() as conn:
            self.assertEqual(
                [(1,)], conn.exec_driver_sql('SELECT 1').fetchall()
            )
        # The statement and the ROLLBACK of its connection's close.
        self.assertEqual(2, listeners_.dropped)
        self.assertEqual([], timing.records('sql.query'))
        drops = timing.records('sql.dropped')
        self.assertEqual([{'count': 2}], [d['attrs'] for d in drops])


class TestGuards(SqlTestCase):
    """A fault in the first lines of the listeners never reaches the
    statement (it used to become a DBError, an HTTP 500 in nova)."""

    def broken_clock(self, where):
        """The monotonic clock fails when read from function ``where``."""
        real = listeners._perf_ns

        def perf_ns():
            if sys._getframe(1).f_code.co_name == where:
                raise RuntimeError('clock fault')
            return real()

        # The per-statement listeners take the clock when they are
        # built (at install).
        self.useFixture(
            db_fixtures.fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.listeners._perf_ns', perf_ns
            )
        )

    def check_statements_unaffected(self, timing):
        engine = self.engine('nova.sqlite')
        _schema(engine)
        with engine.begin() as conn:
            conn.execute(sa.text(INSERT), {'uuid': 'u1', 'host': 'h'})
            rows = conn.exec_driver_sql('SELECT uuid FROM instances')
            self.assertEqual([('u1',)], rows.fetchall())
        with engine.connect() as conn:
            conn.execute(sa.text(INSERT), {'uuid': 'u2', 'host': 'h'})
            conn.commit()
        self.assertGreater(timing.handle.listeners.faults.count, 0)

    def test_fault_at_the_start_of_before_cursor_execute(self):
        # (SQLAlchemy 2.0: the dialect's timers, both clock reads)
        self.broken_clock(
            'do_execute' if listeners.DIALECT_EXEC else 'before_cursor_execute'
        )
        self.check_statements_unaffected(self.install())

    def test_fault_at_the_start_of_after_cursor_execute(self):
        self.broken_clock(
            'do_execute' if listeners.DIALECT_EXEC else 'after_cursor_execute'
        )
        self.check_statements_unaffected(self.install())

    def test_fault_in_the_begin_timer(self):
        if not listeners.DIALECT_EXEC:
            self.skipTest('SQLAlchemy 1.4: the begin event')
        self.broken_clock('do_begin')
        timing = self.install()
        # (not oslo.db's sqlite engine: its BEGIN statement begins the
        # transaction before do_begin)
        engine = _create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.begin() as conn:
            rows = conn.exec_driver_sql('SELECT 1').fetchall()
        self.assertEqual([(1,)], rows)
        self.assertGreater(timing.handle.listeners.faults.count, 0)

    def test_fault_in_the_commit_and_rollback_timers(self):
        self.broken_clock('timed')
        self.check_statements_unaffected(self.install())

    def test_fault_in_the_pool_reset_timer(self):
        # The reset's path of the timer reads the current frame (its
        # attribution) before its clock; so does on_begin.
        def broken_frame():
            raise RuntimeError('frame fault')

        self.useFixture(
            db_fixtures.fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.listeners._current_frame',
                broken_frame,
            )
        )
        self.check_statements_unaffected(self.install())


class TestPoolReset(SqlTestCase):
    """The pool's reset-on-return ROLLBACK is a statement of its own."""

    def reset_ids(self):
        return fingerprint.classify('ROLLBACK').qid

    def test_reset_after_commit_is_recorded(self):
        timing = self.install()
        manager = enginefacade.transaction_context()
        manager.configure(
            connection='sqlite:///' + os.path.join(self.tmp, 'nova_api.sqlite')
        )
        ctx = Context(request_id='req-reset')
        with timing.tracer.span('conductor.build_instances', ctx=ctx):
            with manager.writer.using(ctx) as session:
                session.execute(sa.text('SELECT 1'))
        queries = timing.records('sql.query')
        # oslo.db's test connection when it made the engine, and the
        # session's connection going back to the pool after COMMIT.
        resets = [q for q in queries if q['attrs']['kind'] == 'POOL_RESET']
        self.assertEqual(2, len(resets), queries)
        for reset in resets:
            self.assertEqual(self.reset_ids(), reset['attrs']['fp'])
            self.assertEqual('req-reset', reset['req'])
            self.assertEqual(
                'conductor.build_instances', reset['attrs']['call']
            )
            self.assertEqual('nova_api.sqlite', reset['attrs']['db'])
            self.assertIsNone(reset['attrs']['txn'])
            self.assertEqual('ok', reset['st'])
        self.assertLess(resets[0]['seq'], resets[1]['seq'])
        # The transaction's own COMMIT is still a COMMIT.
        self.assertEqual(
            1, len([q for q in queries if q['attrs']['kind'] == 'COMMIT'])
        )

    def test_connection_that_never_began(self):
        timing = self.install()
        # oslo.db connects once to test the engine, and closes.
        self.engine('nova.sqlite')
        resets = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] == 'POOL_RESET'
        ]
        self.assertEqual(['nova.sqlite'], [r['attrs']['db'] for r in resets])

    def test_no_reset_no_record(self):
        timing = self.install()
        engine = _create_engine('sqlite://', pool_reset_on_return=None)
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
            conn.commit()
        with engine.begin() as conn:  # closed with its transaction
            conn.exec_driver_sql('SELECT 1')
        self.assertEqual(
            [],
            [
                q
                for q in timing.records('sql.query')
                if q['attrs']['kind'] == 'POOL_RESET'
            ],
        )

    def test_aggregated_as_its_own_kind(self):
        timing = self.install(slow_query_threshold=60000.0)
        engine = _create_engine(
            'sqlite:///' + os.path.join(self.tmp, 'nova.sqlite')
        )
        self.addCleanup(engine.dispose)
        for _ in range(3):
            with engine.connect() as conn:
                conn.exec_driver_sql('SELECT 1')
                conn.commit()
        timing.remove()
        kinds = {}
        for agg in timing.records('sql.agg'):
            attrs = agg['attrs']
            kinds[attrs['kind']] = kinds.get(attrs['kind'], 0) + attrs['count']
        self.assertEqual(3, kinds['POOL_RESET'])
        self.assertEqual(3, kinds['COMMIT'])
        fps = {
            a['attrs']['fp']
            for a in timing.records('sql.agg')
            if a['attrs']['kind'] == 'POOL_RESET'
        }
        self.assertEqual({self.reset_ids()}, fps)

    def test_failed_reset_is_recorded_and_the_caller_unaffected(self):
        engine = self.engine('nova.sqlite')
        dialect = engine.dialect
        dbapi = _dbapi(dialect)
        refuse = []
        real_rollback = dialect.do_rollback

        def do_rollback(dbapi_connection):
            if refuse:
                raise dbapi.OperationalError('disk I/O error')
            return real_rollback(dbapi_connection)

        self.patch(dialect, 'do_rollback', do_rollback)
        timing = self.install()
        conn = engine.connect()
        conn.exec_driver_sql('SELECT 1')
        conn.commit()
        refuse.append(True)
        conn.close()  # the pool logs the failure and drops the connection
        (reset,) = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] == 'POOL_RESET'
        ]
        self.assertEqual('error', reset['st'])
        self.assertEqual('sqlite3.OperationalError', reset['err']['cls'])


class TestTracerFrames(testtools.TestCase):
    def test_frame_layout_matches(self):
        # The listeners unpack a frame as an attribution tuple.
        self.assertEqual(
            (
                listeners.A_PARENT,
                listeners.A_REQ,
                listeners.A_GREQ,
                listeners.A_INST,
                listeners.A_SVC,
                listeners.A_HOST,
                listeners.A_CALL,
            ),
            (
                recorder_mod.F_SPAN,
                recorder_mod.F_REQ,
                recorder_mod.F_GREQ,
                recorder_mod.F_INST,
                recorder_mod.F_SVC,
                recorder_mod.F_HOST,
                recorder_mod.F_EV,
            ),
        )


class TestInstallRace(SqlTestCase):
    def test_statement_started_before_install_is_not_a_fault(self):
        engine = _create_engine('sqlite://')
        timing = []

        def install_now(*args):
            if not timing:
                timing.append(self.install())

        # Installed between the start and the end of a statement.
        sa.event.listen(engine, 'before_cursor_execute', install_now)
        with engine.connect() as conn:
            self.assertEqual(
                [(1,)], conn.exec_driver_sql('SELECT 1').fetchall()
            )
            conn.exec_driver_sql('SELECT 2')
        self.assertEqual(0, timing[0].handle.listeners.faults.count)
        selects = [
            q
            for q in timing[0].records('sql.query')
            if q['attrs']['kind'] == 'SELECT'
        ]
        # (SQLAlchemy 2.0: the engine is adopted at install, and the
        # dialect's timer is in place before the first reaches it)
        self.assertEqual(2 if listeners.DIALECT_EXEC else 1, len(selects))

    def test_class_level_listeners_removed(self):
        from sqlalchemy.engine import Engine
        from sqlalchemy.engine import interfaces

        timing = self.install()
        handle = timing.handle.listeners
        self.assertTrue(
            sa.event.contains(
                interfaces.Dialect if listeners.DIALECT_EXEC else Engine,
                'handle_error',
                handle.early_error,
            )
        )
        timing.remove()
        for name, fn, _kwargs in handle._events:
            self.assertFalse(sa.event.contains(Engine, name, fn), name)


class TestOneHookPerRoundTrip(SqlTestCase):
    """The COMMIT/ROLLBACK and the pool's reset are timed by the
    dialect's ``do_commit``/``do_rollback`` alone: no ``commit`` or
    pool ``reset`` event is listened to."""

    def test_no_commit_or_reset_listener(self):
        timing = self.install()
        engine = _create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.begin() as conn:
            conn.exec_driver_sql('SELECT 1')
        self.assertFalse(engine.dispatch.commit)
        self.assertFalse(engine.pool.dispatch.reset)
        kinds = sorted(q['attrs']['kind'] for q in timing.records('sql.query'))
        self.assertEqual(['COMMIT', 'POOL_RESET', 'SELECT'], kinds)
        [txn] = timing.records('sql.txn')
        self.assertEqual('commit', txn['attrs']['outcome'])
        self.assertEqual(1, txn['attrs']['statements'])

    def test_transaction_of_an_invalidated_connection(self):
        timing = self.install()
        engine = _create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
            conn.invalidate()
            conn.rollback()  # no round trip: the transaction ends
        [txn] = timing.records('sql.txn')
        self.assertEqual('rollback', txn['attrs']['outcome'])
        self.assertEqual(1, txn['attrs']['statements'])
        kinds = [q['attrs']['kind'] for q in timing.records('sql.query')]
        self.assertNotIn('ROLLBACK', kinds)
        self.assertEqual(0, timing.handle.listeners.faults.count)

    def test_commit_after_invalidation(self):
        timing = self.install()
        engine = _create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
            conn.invalidate()
            self.assertRaises(sa.exc.PendingRollbackError, conn.commit)
            conn.rollback()
        # once, as rolled back: the COMMIT never happened
        [txn] = timing.records('sql.txn')
        self.assertEqual('rollback', txn['attrs']['outcome'])
        self.assertEqual(0, timing.handle.listeners.faults.count)

    def test_rollback_of_a_raw_connection_is_not_a_reset(self):
        timing = self.install()
        engine = _create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.begin() as conn:  # adopts the dialect
            conn.exec_driver_sql('SELECT 1')
            raw = conn.connection.dbapi_connection
        before = len(timing.records('sql.query'))
        # as the dialect's first connect does, on the raw connection
        engine.dialect.do_rollback(raw)
        self.assertEqual(before, len(timing.records('sql.query')))

    def test_transaction_state_cleared_at_its_end(self):
        self.install()
        engine = _create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
            fairy = conn.connection
            # (SQLAlchemy 2.0: on the pool connection only)
            on_conn = vars(conn).get(listeners.ATTR_TXN)
            if listeners.DIALECT_EXEC:
                self.assertIsNone(on_conn)
                txn = vars(fairy)[listeners.ATTR_TXN]
                self.assertIsNone(txn[listeners.T_CONN])
            else:
                self.assertIsNotNone(on_conn)
            conn.commit()
            self.assertIsNone(vars(conn).get(listeners.ATTR_TXN))
            # the pool connection keeps it, ended (no reference to the
            # Connection), for the reset that may fold into its record
            txn = vars(fairy)[listeners.ATTR_TXN]
            self.assertIs(listeners.ENDED, txn[listeners.T_CONN])
        # the reset took it
        self.assertNotIn(listeners.ATTR_TXN, vars(fairy))


# Every ConnectionEvents event of SQLAlchemy 2.0.
_CONNECTION_EVENTS = (
    'before_execute',
    'after_execute',
    'before_cursor_execute',
    'after_cursor_execute',
    'engine_connect',
    'set_connection_execution_options',
    'set_engine_execution_options',
    'engine_disposed',
    'begin',
    'rollback',
    'commit',
    'savepoint',
    'rollback_savepoint',
    'release_savepoint',
    'begin_twophase',
    'prepare_twophase',
    'rollback_twophase',
    'commit_twophase',
)


@testtools.skipUnless(
    listeners.DIALECT_EXEC, 'SQLAlchemy 1.4 keeps the engine listeners'
)
class TestNoEngineEvents(SqlTestCase):
    """SQLAlchemy 2.0: no ``ConnectionEvents`` listener of the library
    (a class-level one sets ``Engine._has_events`` for every engine of
    the process, whose Connections then take SQLAlchemy's event paths):
    the statements and the transaction's start are timed by the
    dialect, the records are those of before."""

    def setUp(self):
        super().setUp()
        from sqlalchemy.engine import Engine

        # Nothing sets it back once set (an earlier test's listener).
        self.patch(Engine, '_has_events', False)

    def test_no_engine_listener(self):
        from sqlalchemy.engine import Engine

        before = _create_engine('sqlite://')
        self.addCleanup(before.dispose)
        timing = self.install()
        after = _create_engine('sqlite://')
        self.addCleanup(after.dispose)
        for engine in (before, after):
            with engine.begin() as conn:
                conn.exec_driver_sql('SELECT 1')
            for name in _CONNECTION_EVENTS:
                self.assertFalse(getattr(engine.dispatch, name), name)
            self.assertFalse(engine._has_events)
        self.assertFalse(Engine._has_events)
        # both engines timed, the one made before install included
        [one, two] = timing.records('sql.txn')
        self.assertEqual(1, one['attrs']['statements'])
        self.assertEqual(1, two['attrs']['statements'])
        self.assertEqual(0, timing.handle.listeners.faults.count)

    def test_every_path_timed(self):
        from sqlalchemy import orm

        timing = self.install()
        engine = _create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        _schema(engine)
        meta = sa.MetaData()
        table = sa.Table('instances', meta, autoload_with=engine)
        with engine.begin() as conn:
            # execute with parameters, executemany, no parameters
            conn.execute(sa.text(INSERT), {'uuid': 'u1', 'host': 'h'})
            conn.execute(
                table.insert(),
                [{'uuid': 'u2', 'host': 'h'}, {'uuid': 'u3', 'host': 'h'}],
            )
            conn.execute(sa.text('SELECT uuid FROM instances')).fetchall()
        # ORM flush
        with orm.Session(engine) as session:
            session.execute(table.update().values(host='g'))
            session.commit()
        # an error, then the rollback
        with engine.connect() as conn:
            self.assertRaises(
                sa.exc.OperationalError,
                conn.exec_driver_sql,
                'SELECT nothing FROM nowhere',
            )
            conn.rollback()
        self.assertEqual(0, timing.handle.listeners.faults.count)
        queries = [
            q
            for q in timing.records('sql.query')
            if q['attrs']['kind'] not in ('POOL_RESET',)
        ]
        kinds = [(q['attrs']['kind'], q['attrs']['many']) for q in queries]
        self.assertEqual(
            [
                ('SELECT', False),  # the reflection's last
                ('INSERT', False),
                ('INSERT', True),
                ('SELECT', False),
                ('COMMIT', False),
                ('UPDATE', False),
                ('COMMIT', False),
                ('SELECT', False),
                ('ROLLBACK', False),
                ('ROLLBACK', False),  # the reflection's, held for its reset
            ],
            [k for k in kinds if not k[0].startswith('PRAGMA')][-10:],
        )
        selects = [q for q in queries if q['attrs']['kind'] == 'SELECT']
        self.assertEqual(3, selects[0]['attrs']['rows'] or 3)
        failed = selects[-1]
        self.assertEqual('error', failed['st'])
        self.assertEqual(
            'sqlalchemy.exc.OperationalError', failed['err']['cls']
        )
        txns = timing.records('sql.txn')
        self.assertEqual(
            [
                ('commit', 3),
                ('commit', 1),
                ('rollback', 1),
                ('rollback', 10),  # the reflection's
            ],
            [(t['attrs']['outcome'], t['attrs']['statements']) for t in txns][
                -4:
            ],
        )
        # each statement in its transaction
        for q in queries:
            if q['attrs']['kind'] in ('INSERT', 'UPDATE'):
                self.assertIsNotNone(q['attrs']['txn'])

    def test_begin_listener_statement_in_its_transaction(self):
        # oslo.db's sqlite engines send BEGIN from a begin listener,
        # before the dialect's do_begin.
        timing = self.install()
        engine = self.engine('nova.sqlite')
        with engine.begin() as conn:
            conn.exec_driver_sql('SELECT 1')
        txns = timing.records('sql.txn')
        queries = timing.records('sql.query')
        begin = [q for q in queries if q['attrs']['kind'] == 'BEGIN']
        self.assertTrue(begin)
        spans = {t['span'] for t in txns}
        self.assertIn(begin[-1]['attrs']['txn'], spans)
        self.assertEqual(2, txns[-1]['attrs']['statements'])
        self.assertEqual(0, timing.handle.listeners.faults.count)
