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
"""SQL timing through PyMySQL on a real MariaDB: records, a real InnoDB
deadlock, a killed connection, MySQL's double-quoted strings, and every
statement PyMySQL sends (pool resets and connection set-up included)
found in the span file and in the analyser's digest.

MariaDB: ``INSTRUMENT_TEST_MYSQL_URL`` or
``mysql+pymysql://root@127.0.0.1:3306/test``.  When it cannot be reached
the tests skip with the reason, except under ``CI=true`` where they fail:
CI must not pass without having run them.
"""

import collections
import json
import os
import threading
import time
import uuid

import fixtures
from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade
from oslo_db.sqlalchemy import engines
import sqlalchemy as sa
import testtools

import instrument
from instrument import opts
from instrument import schema
from instrument.analysis import pipeline
from instrument.runtime import lifecycle
from instrument.targets.sqlalchemy import fingerprint
from tests.unit.targets.sqlalchemy import fixtures as db_fixtures

URL = os.environ.get(
    'INSTRUMENT_TEST_MYSQL_URL', 'mysql+pymysql://root@127.0.0.1:3306/test'
)


def _in_ci() -> bool:
    return os.environ.get('CI', '').strip().lower() in ('true', '1', 'yes')


def _reachable_or_skip(test) -> None:
    try:
        probe = sa.create_engine(URL)
        with probe.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
        probe.dispose()
    except Exception as exc:
        reason = (
            'MariaDB not reachable at %s (%s: %s); start it, e.g. '
            'start-stop-daemon --start --oknodo --background '
            '--exec /usr/sbin/mariadbd'
            % (URL, exc.__class__.__name__, str(exc)[:200])
        )
        if _in_ci():
            test.fail('CI=true: ' + reason)
        test.skipTest(reason)


class MariaDBTestCase(testtools.TestCase):
    """Skips (outside CI) or fails (CI=true) when MariaDB is unreachable."""

    def setUp(self):
        super().setUp()
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)
        _reachable_or_skip(self)
        self.table = sa.Table(
            'instrument_ft_%s' % uuid.uuid4().hex[:8],
            sa.MetaData(),
            sa.Column('id', sa.Integer, primary_key=True, autoincrement=False),
            sa.Column('host', sa.String(64)),
            mysql_engine='InnoDB',
        )
        self.engine = engines.create_engine(URL)
        self.addCleanup(self.engine.dispose)
        with self.engine.begin() as conn:
            self.table.create(conn)
            conn.execute(
                self.table.insert(),
                [{'id': 1, 'host': 'param-a'}, {'id': 2, 'host': 'param-b'}],
            )
        self.addCleanup(self._drop)
        self.timing = self.useFixture(db_fixtures.SqlTiming())
        self.update = (
            self.table.update()
            .where(self.table.c.id == sa.bindparam('i'))
            .values(host=sa.bindparam('h'))
        )

    def _drop(self):
        with self.engine.begin() as conn:
            self.table.drop(conn, checkfirst=True)


class TestMariaDB(MariaDBTestCase):
    def test_records_through_pymysql(self):
        ctx = oslo_context.RequestContext(request_id='req-mysql')
        with self.timing.tracer.span('scheduler.host_states', ctx=ctx):
            with self.engine.begin() as conn:
                rows = conn.execute(
                    sa.select(self.table.c.host).where(
                        self.table.c.id.in_([1, 2])
                    )
                ).fetchall()
                conn.execute(
                    self.update,
                    [{'h': 'param-c', 'i': 1}, {'h': 'param-d', 'i': 2}],
                )
        self.assertEqual(2, len(rows))
        queries = self.timing.records('sql.query')
        (select,) = [q for q in queries if q['attrs']['kind'] == 'SELECT']
        (update,) = [q for q in queries if q['attrs']['kind'] == 'UPDATE']
        (commit,) = [q for q in queries if q['attrs']['kind'] == 'COMMIT']
        for rec in (select, update, commit):
            self.assertEqual('test', rec['attrs']['db'])
            self.assertEqual('req-mysql', rec['req'])
            self.assertEqual('scheduler.host_states', rec['attrs']['call'])
            self.assertEqual('ok', rec['st'])
        self.assertEqual(2, select['attrs']['rows'])
        self.assertEqual(2, update['attrs']['rows'])
        self.assertTrue(update['attrs']['many'])
        (txn,) = [
            t
            for t in self.timing.records('sql.txn')
            if t['span'] == select['attrs']['txn']
        ]
        self.assertEqual(2, txn['attrs']['statements'])
        self.assertEqual('commit', txn['attrs']['outcome'])
        self.assertNotIn('param-', repr(self.timing.records()))

    def test_short_transaction_is_two_records(self):
        # its COMMIT and the pool's reset ROLLBACK ride in its sql.txn
        ctx = oslo_context.RequestContext(request_id='req-fold')
        with self.timing.tracer.span('scheduler.host_states', ctx=ctx):
            for i in (1, 2, 1):
                with self.engine.begin() as conn:
                    conn.execute(
                        sa.select(self.table.c.host).where(
                            self.table.c.id == i
                        )
                    ).fetchall()
        raw = [
            r
            for r in self.timing.records(raw=True)
            if r['ev'] in ('sql.query', 'sql.txn')
            and r['attrs'].get('kind') != 'CONNECT'
        ]
        self.assertEqual(
            ['sql.query', 'sql.txn'] * 3, [r['ev'] for r in raw], raw
        )
        for txn in raw[1::2]:
            self.assertEqual('COMMIT', txn['attrs']['end'][3])
            self.assertEqual('POOL_RESET', txn['attrs']['reset'][3])
            self.assertEqual('req-fold', txn['req'])
        # read as the analyser reads them: each statement the server saw
        self.timing.sink.records.clear()
        kinds = collections.Counter(
            q['attrs']['kind']
            for rec in raw
            for q in schema.unfold(rec)
            if q['ev'] == 'sql.query'
        )
        self.assertEqual(
            {'SELECT': 3, 'COMMIT': 3, 'POOL_RESET': 3}, dict(kinds)
        )

    def test_innodb_deadlock_recorded_on_the_losing_request(self):
        a = self.engine.connect()
        b = self.engine.connect()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        for conn in (a, b):
            conn.exec_driver_sql('SET SESSION innodb_lock_wait_timeout = 20')
        update = self.update
        a.execute(update, {'h': 'param-a1', 'i': 1})
        b.execute(update, {'h': 'param-b2', 'i': 2})
        outcome = {}

        def request(name, conn, row):
            ctx = oslo_context.RequestContext(request_id='req-' + name)
            try:
                with self.timing.tracer.span('api.compute.create', ctx=ctx):
                    conn.execute(update, {'h': 'param-x', 'i': row})
                    conn.commit()
                outcome[name] = 'ok'
            except db_exc.DBDeadlock:
                outcome[name] = 'deadlock'
                conn.rollback()

        waiter = threading.Thread(target=request, args=('a', a, 2))
        waiter.start()
        time.sleep(0.5)  # a now waits for b's row lock
        request('b', b, 1)  # closes the cycle
        waiter.join(30)
        self.assertEqual(['deadlock', 'ok'], sorted(outcome.values()), outcome)
        loser = 'req-' + [n for n, o in outcome.items() if o == 'deadlock'][0]
        self.timing.remove()
        failed = [
            q for q in self.timing.records('sql.query') if q['st'] == 'error'
        ]
        self.assertEqual(1, len(failed), failed)
        self.assertEqual(
            'oslo_db.exception.DBDeadlock', failed[0]['err']['cls']
        )
        self.assertEqual(loser, failed[0]['req'])
        self.assertEqual('UPDATE', failed[0]['attrs']['kind'])
        self.assertNotIn('param-', repr(self.timing.records()))

    def test_killed_connection_recorded_as_disconnect(self):
        victim = self.engine.connect()
        self.addCleanup(victim.close)
        victim_id = victim.exec_driver_sql('SELECT CONNECTION_ID()').scalar()
        victim.commit()
        with self.engine.connect() as killer:
            killer.exec_driver_sql('KILL %d' % int(victim_id))
        ctx = oslo_context.RequestContext(request_id='req-gone')
        with self.timing.tracer.span('conductor.schedule', ctx=ctx):
            self.assertRaises(
                db_exc.DBConnectionError,
                victim.execute,
                sa.select(self.table.c.host),
            )
        self.timing.remove()
        failed = [
            q for q in self.timing.records('sql.query') if q['st'] == 'error'
        ]
        self.assertEqual(1, len(failed), failed)
        self.assertEqual(
            'oslo_db.exception.DBConnectionError', failed[0]['err']['cls']
        )
        self.assertIs(True, failed[0]['attrs']['disconnect'])
        self.assertEqual('req-gone', failed[0]['req'])

    def test_double_quoted_strings_are_literals(self):
        # MySQL reads "x" as a string: one class, as pt-fingerprint.
        with self.engine.connect() as conn:
            for value in ('dq-x1', 'dq-y2'):
                conn.exec_driver_sql(
                    'SELECT host FROM %s WHERE host = "%s"'  # noqa: S608
                    % (self.table.name, value)
                ).fetchall()
        selects = [
            q
            for q in self.timing.records('sql.query')
            if q['attrs']['kind'] == 'SELECT'
        ]
        self.assertEqual(2, len(selects))
        self.assertEqual(1, len({q['attrs']['fp'] for q in selects}))
        (text,) = [
            m['attrs']['text']
            for m in self.timing.records('sql.fingerprint')
            if m['attrs']['fp'] == selects[0]['attrs']['fp']
        ]
        self.assertEqual(
            'select host from %s where host = ?'  # noqa: S608
            % self.table.name,
            text,
        )
        self.assertNotIn('dq-', repr(self.timing.records()))


@enginefacade.transaction_context_provider
class Context(oslo_context.RequestContext):
    """A nova-like request context that enginefacade can use."""


class TestEveryStatement(testtools.TestCase):
    """Every query PyMySQL sends is in the span file and the digest.

    What the driver sent is counted at PyMySQL's ``_execute_command``
    (every COM_QUERY: cursor statements, COMMIT, ROLLBACK, SET NAMES,
    SET AUTOCOMMIT), per query class, for oslo.db enginefacade writer
    and reader sessions on a new engine: its first connection (the
    dialect's start-up queries, oslo.db's sql_mode), a second one, the
    pool's reset-on-return ROLLBACKs, a failed transaction.
    """

    def setUp(self):
        super().setUp()
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)
        _reachable_or_skip(self)
        import pymysql.connections

        self.sent = collections.Counter()
        real = pymysql.connections.Connection._execute_command

        def counting(conn, command, sql):
            if command == 3:  # COM_QUERY
                text = sql.decode() if isinstance(sql, bytes) else sql
                self.sent[fingerprint.classify(text, True).text] += 1
            return real(conn, command, sql)

        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.spans = os.path.join(self.tmp, 'spans')
        conf = cfg.ConfigOpts()
        conf([], project='instrument-test')
        opts.register_opts(conf)
        # Aggregated, as fast statements are in production.
        for key, value in dict(
            enabled=True,
            sinks=['file'],
            output_dir=self.spans,
            slow_query_threshold=60000.0,
        ).items():
            conf.set_override(key, value, opts.GROUP)
        self.runtime = instrument.setup(conf, 'nova-conductor', points=[])
        self.addCleanup(lifecycle.teardown)
        self.useFixture(
            fixtures.MonkeyPatch(
                'pymysql.connections.Connection._execute_command', counting
            )
        )
        self.table = 'instrument_every_%s' % uuid.uuid4().hex[:8]

    def sessions(self):
        manager = enginefacade.transaction_context()
        manager.configure(connection=URL)
        ctx = Context(request_id='req-every')
        other = Context(request_id='req-other')
        insert = sa.text(
            'INSERT INTO %s (id, name) VALUES (:i, :n)'  # noqa: S608
            % self.table
        )
        select = sa.text('SELECT name FROM %s WHERE id > :i' % self.table)  # noqa: S608
        tracer = self.runtime.tracer
        with tracer.span('conductor.build_instances', ctx=ctx):
            with manager.writer.using(ctx) as session:
                session.execute(
                    sa.text(
                        'CREATE TABLE %s (id INTEGER PRIMARY KEY, '
                        'name VARCHAR(32))' % self.table
                    )
                )
            for i in range(5):
                with manager.writer.using(ctx) as session:
                    session.execute(insert, {'i': i, 'n': 'n%d' % i})
                with manager.reader.using(ctx) as session:
                    session.execute(select, {'i': i}).fetchall()
            try:
                with manager.writer.using(ctx) as session:
                    session.execute(insert, {'i': 1, 'n': 'again'})
            except db_exc.DBDuplicateEntry:
                pass
            # Two connections at once: the pool makes a second one.
            with manager.writer.using(ctx) as session:
                session.execute(select, {'i': 0}).fetchall()
                with manager.reader.using(other) as inner:
                    inner.execute(select, {'i': 1}).fetchall()
            with manager.writer.using(ctx) as session:
                session.execute(sa.text('DROP TABLE %s' % self.table))
        manager.writer.get_engine().dispose()

    def test_every_statement_pymysql_sent_is_recorded(self):
        self.sessions()
        self.runtime.target('sqlalchemy').timing.process()
        lifecycle.teardown()  # the last aggregates, the file closed
        sent = dict(self.sent)
        records = []
        for name in os.listdir(self.spans):
            with open(os.path.join(self.spans, name)) as f:
                records.extend(json.loads(line) for line in f)
        texts = {
            r['attrs']['fp']: r['attrs']['text']
            for r in records
            if r['ev'] == 'sql.fingerprint'
        }
        recorded = collections.Counter()
        kinds = collections.defaultdict(collections.Counter)
        for rec in records:
            attrs = rec.get('attrs') or {}
            if rec['ev'] == 'sql.query':
                count = 1
            elif rec['ev'] == 'sql.agg':
                count = attrs['count']
            else:
                continue
            self.assertEqual('test', attrs['db'])
            recorded[texts[attrs['fp']]] += count
            kinds[texts[attrs['fp']]][attrs['kind']] += count
        self.assertEqual(sent, dict(recorded))
        self.assertEqual([], [r for r in records if r['ev'] == 'sql.dropped'])
        # What was not recorded before, as kinds of its own.
        for text in (
            'set names utf8',
            'set autocommit = ?',
            'set session sql_mode = ?',
            'show variables like ?',
            'select database()',
        ):
            self.assertEqual({'CONNECT'}, set(kinds[text]), text)
        # Two connections: PyMySQL's and the dialect's SET NAMES each.
        self.assertEqual(4, kinds['set names utf8']['CONNECT'])
        # Every connection goes back to the pool with a ROLLBACK: those
        # of the 15 sessions and of oslo.db's test connection when it
        # made the engine; beside the transactions' own (6 readers, the
        # failed writer) and the dialect's first-connect one.
        rollbacks = kinds['rollback']
        self.assertEqual(16, rollbacks['POOL_RESET'])
        self.assertEqual(7, rollbacks['ROLLBACK'])
        self.assertEqual(1, rollbacks['CONNECT'])
        # The analyser counts them in their classes, as the server's slow
        # log would, and tells the kinds apart.
        report = pipeline.analyse([self.spans], pipeline.Options(limit=0))
        rows = report['sql']['rows']
        self.assertEqual(sent, {r['fingerprint']: r['calls'] for r in rows})
        (rollback,) = [r for r in rows if r['fingerprint'] == 'rollback']
        self.assertEqual(dict(rollbacks), rollback['kinds'])
        by_kind = pipeline.analyse(
            [self.spans], pipeline.Options(limit=0, group_by='kind')
        )['sql']['rows']
        self.assertEqual(
            {
                kind: sum(k[kind] for k in kinds.values())
                for kind in ('POOL_RESET', 'CONNECT', 'COMMIT')
            },
            {
                r['id']: r['calls']
                for r in by_kind
                if r['id'] in ('POOL_RESET', 'CONNECT', 'COMMIT')
            },
        )
        self.assertEqual(sum(sent.values()), sum(r['calls'] for r in by_kind))
