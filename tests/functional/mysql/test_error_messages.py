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
"""No bound value in any output, also not in the driver's own messages.

The real runtime (``instrument.setup``: file, log and OTLP sinks) records
failing statements through oslo.db on a real server: MariaDB through
PyMySQL, PostgreSQL through psycopg2.  Every value the statements carry
contains ``s3cret``; the span file, the OTLP spans a collector received
(attributes, status) and every log line of the ``instrument`` loggers
must not, and the messages keep their error code and key name.

PostgreSQL: ``INSTRUMENT_TEST_PG_URL`` or
``postgresql+psycopg2://postgres@127.0.0.1:5432/test``; like MariaDB it
skips when unreachable, except under ``CI=true``.
"""

import json
import os
import uuid

import fixtures
from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import engines
import sqlalchemy as sa
import testtools

import instrument
from instrument import opts
from instrument.runtime import lifecycle
from instrument.runtime import threads
from tests.functional.mysql import test_sql_timing as mysql_base
from tests.unit.sinks import otlp_collector

PG_URL = os.environ.get(
    'INSTRUMENT_TEST_PG_URL',
    'postgresql+psycopg2://postgres@127.0.0.1:5432/test',
)
# Every value of the statements below contains it.
MARK = 's3cret'


class ScrubTestCase(testtools.TestCase):
    """The real runtime with every sink, against the server of ``URL``."""

    URL = None

    def setUp(self):
        super().setUp()
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)
        self.engine = self.connect_or_skip()
        self.table = 'instrument_scrub_%s' % uuid.uuid4().hex[:8]
        self.create_tables()
        self.addCleanup(self.drop_tables)
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.log = self.useFixture(
            fixtures.FakeLogger(
                name='instrument',
                level='DEBUG',
                format='%(levelname)s %(name)s %(message)s',
            )
        )
        self.collector = self.useFixture(otlp_collector.HttpCollector())
        conf = cfg.ConfigOpts()
        conf([], project='instrument-test')
        opts.register_opts(conf)
        for key, value in dict(
            enabled=True,
            sinks=['file', 'log', 'otlp'],
            output_dir=os.path.join(self.tmp, 'spans'),
            otlp_endpoint=self.collector.endpoint,
            slow_query_threshold=0.0,
        ).items():
            conf.set_override(key, value, opts.GROUP)
        self.runtime = instrument.setup(conf, 'nova-conductor', points=[])
        self.addCleanup(lifecycle.teardown)

    def connect_or_skip(self):
        try:
            engine = engines.create_engine(self.URL)
            with engine.connect() as conn:
                conn.exec_driver_sql('SELECT 1')
        except Exception as exc:
            reason = '%s not reachable (%s: %s)' % (
                self.URL,
                exc.__class__.__name__,
                str(exc)[:200],
            )
            if mysql_base._in_ci():
                self.fail('CI=true: ' + reason)
            self.skipTest(reason)
        self.addCleanup(engine.dispose)
        return engine

    def create_tables(self):
        t = self.table
        with self.engine.begin() as conn:
            conn.exec_driver_sql(
                'CREATE TABLE %s (id INTEGER PRIMARY KEY, name VARCHAR(24), '
                'n INTEGER, d DATE, CONSTRAINT uniq_name UNIQUE (name))' % t
            )
            conn.exec_driver_sql(
                'CREATE TABLE %s_child (id INTEGER PRIMARY KEY, pid INTEGER,'
                ' FOREIGN KEY (pid) REFERENCES %s (id))' % (t, t)
            )
            conn.execute(
                sa.text(
                    'INSERT INTO %s (id, name) VALUES (1, :n)'  # noqa: S608
                    % t
                ),
                {'n': "O'Bri-s3cret"},
            )

    def drop_tables(self):
        with self.engine.begin() as conn:
            conn.exec_driver_sql('DROP TABLE IF EXISTS %s_child' % self.table)
            conn.exec_driver_sql('DROP TABLE IF EXISTS %s' % self.table)

    def fail_statement(self, sql, params=None, expected=db_exc.DBError):
        """Run ``sql`` in a nova-like call; it must fail with
        ``expected``; returns the exception."""
        ctx = oslo_context.RequestContext(
            request_id='req-%s' % uuid.uuid4().hex[:8]
        )
        tracer = self.runtime.tracer
        try:
            with tracer.span('api.compute.create', ctx=ctx):
                with self.engine.begin() as conn:
                    conn.execute(
                        sa.text(sql % {'t': self.table}), params or {}
                    )
        except expected:
            return ctx.request_id
        self.fail('%s did not fail' % sql)

    def outputs(self):
        """Span file records, OTLP spans and log lines after a flush."""
        rt = self.runtime
        rt.target('sqlalchemy').timing.process(final=False)
        rt.buffer.drain()
        otlp_sink = [s for s in rt.buffer.sinks if s.name == 'otlp'][0]
        otlp_sink.wait_idle(30)
        spans_dir = os.path.join(self.tmp, 'spans')
        text = ''
        for name in sorted(os.listdir(spans_dir)):
            with open(os.path.join(spans_dir, name), encoding='utf-8') as f:
                text += f.read()
        records = [json.loads(line) for line in text.splitlines()]
        threads.wait_deferred()  # a fault's line is logged elsewhere
        return text, records, self.collector.spans(), self.log.output

    def check(self, cases):
        requests = {}
        for sql, params, expected in cases:
            requests[self.fail_statement(sql, params)] = expected
        text, records, spans, log = self.outputs()
        # Nothing anywhere.
        self.assertNotIn(MARK, text)
        self.assertNotIn(MARK, repr(spans))
        self.assertNotIn(MARK, log)
        # And the messages still say what went wrong, where.
        failed = {
            r['req']: r
            for r in records
            if r['ev'] == 'sql.query' and r.get('st') == 'error'
        }
        calls = {
            r['req']: r
            for r in records
            if r['ev'] == 'api.compute.create' and r['ph'] == 'X'
        }
        statuses = {
            s['attrs'].get('instrument.req'): s['status'][1]
            for s in spans
            if s['name'] == 'sql.query' and s['status'][1]
        }
        for req, expected in requests.items():
            msg = failed[req]['err']['msg']
            self.assertIn(expected, msg, req)
            self.assertEqual(calls[req]['err']['msg'], msg)
            self.assertIn(expected, statuses[req])
        # The log sink wrote the same records.
        self.assertIn('sql.query', log)
        return failed


class TestMariaDB(ScrubTestCase):
    URL = mysql_base.URL

    def test_driver_messages_carry_no_value(self):
        t = "INSERT INTO %(t)s (id, name) VALUES (:i, :n)"
        self.check(
            [
                # The value holds a quote: the server does not escape it.
                (
                    t,
                    {'i': 2, 'n': "O'Bri-s3cret"},
                    '(1062, "Duplicate entry ? for key \'uniq_name\'")',
                ),
                (
                    t,
                    {'i': 3, 'n': '\U0001f600s3cret'},
                    "(1366, 'Incorrect string value: ? for column ",
                ),
                (
                    t,
                    {'i': 4, 'n': 'long-s3cret-%s' % ('x' * 30)},
                    '(1406, "Data too long for column \'name\' at row 1")',
                ),
                (
                    "INSERT INTO %(t)s (id, n) VALUES (:i, :n)",
                    {'i': 5, 'n': 'int-s3cret'},
                    "(1366, 'Incorrect integer value: ? for column ",
                ),
                (
                    "INSERT INTO %(t)s (id, d) VALUES (:i, :n)",
                    {'i': 6, 'n': '2020-13-45-s3cret'},
                    "Incorrect date value: ? for column ",
                ),
                (
                    "INSERT INTO %(t)s_child (id, pid) VALUES (:i, :n)",
                    {'i': 7, 'n': 424242},
                    "(1452, 'Cannot add or update a child row: a foreign key "
                    "constraint fails",
                ),
                # Literals in the statement text itself.
                (
                    "SELECT * FROM %(t)s WHERE name = 's3cret' AND ORDER",
                    {},
                    (
                        "(1064, 'You have an error in your SQL syntax; check "
                        "the "
                        "manual that corresponds to your MariaDB server "
                        "version for "
                        "the right syntax to use near ? at line 1')"
                    ),
                ),
                (
                    'SELECT * FROM %(t)s WHERE name = "dq-s3cret" + + OR',
                    {},
                    'the right syntax to use near ? at line 1',
                ),
            ]
        )


class TestPostgreSQL(ScrubTestCase):
    URL = PG_URL

    def setUp(self):
        try:
            import psycopg2  # noqa: F401
        except ImportError as exc:
            if mysql_base._in_ci():
                self.fail('CI=true: psycopg2 is missing (%s)' % exc)
            self.skipTest('psycopg2 is not installed')
        super().setUp()

    def test_driver_messages_carry_no_value(self):
        t = "INSERT INTO %(t)s (id, name) VALUES (:i, :n)"
        self.check(
            [
                (
                    t,
                    {'i': 2, 'n': "O'Bri-s3cret"},
                    'duplicate key value violates unique constraint '
                    '"uniq_name"',
                ),
                (
                    t,
                    {'i': 3, 'n': 'long-s3cret-%s' % ('x' * 30)},
                    'value too long for type character varying(24)',
                ),
                (
                    "INSERT INTO %(t)s (id, n) VALUES (:i, :n)",
                    {'i': 5, 'n': 'int-s3cret'},
                    'invalid input syntax for type integer: ?',
                ),
                (
                    "INSERT INTO %(t)s (id, d) VALUES (:i, :n)",
                    {'i': 6, 'n': '2020-12-45-s3cret'},
                    'invalid input syntax for type date: ?',
                ),
                (
                    "INSERT INTO %(t)s_child (id, pid) VALUES (:i, :n)",
                    {'i': 7, 'n': 424242},
                    'violates foreign key constraint',
                ),
                (
                    "SELECT * FROM %(t)s WHERE name = 's3cret' AND",
                    {},
                    'syntax error at end of input',
                ),
            ]
        )
