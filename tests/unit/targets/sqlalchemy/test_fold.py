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
"""A short transaction's COMMIT/ROLLBACK and pool reset folded into its
``sql.txn`` record: record counts, and the analyser's and the live
metrics' figures equal for the folded and the older shape."""

import json
import os

import fixtures
from oslo_db.sqlalchemy import enginefacade
import sqlalchemy as sa

from instrument import schema
from instrument.analysis import pipeline
from instrument.runtime import metrics
from instrument.runtime import record
from instrument.targets.sqlalchemy import listeners
from tests.unit.targets.sqlalchemy import test_listeners as base_tests


def _counts(records) -> dict:
    out: dict = {}
    for rec in records:
        if rec['ev'] in (schema.EV_SQL_QUERY, schema.EV_SQL_TXN):
            out[rec['ev']] = out.get(rec['ev'], 0) + 1
    return out


def _shape(records) -> list:
    """What a record says but its times, ids and numbers."""
    out = []
    for rec in records:
        if rec['ev'] not in (schema.EV_SQL_QUERY, schema.EV_SQL_TXN):
            continue
        attrs = dict(rec.get('attrs') or {})
        attrs.pop(schema.ATTR_DB)  # (the two runs' files)
        if attrs.get(schema.ATTR_TXN):
            attrs[schema.ATTR_TXN] = 'txn'
        out.append(
            (
                rec['ev'],
                rec.get('req'),
                rec.get('parent') is not None,
                rec['st'],
                json.dumps(attrs, sort_keys=True),
            )
        )
    return sorted(out)


class TestFold(base_tests.SqlTestCase):
    def one_statement_transactions(self, timing, n=3, name='fold'):
        engine = base_tests._create_engine(
            'sqlite:///' + os.path.join(self.tmp, name + '.sqlite')
        )
        self.addCleanup(engine.dispose)
        base_tests._schema(engine)
        timing.records()  # the schema's, left out
        timing.sink.records.clear()
        ctx = base_tests.Context(request_id='req-fold')
        with timing.tracer.span('conductor.build_instances', ctx=ctx):
            for _i in range(n):
                with engine.begin() as conn:
                    conn.exec_driver_sql('SELECT 1')
            with engine.connect() as conn:
                conn.exec_driver_sql('SELECT 2')
                conn.rollback()
        return engine

    def test_one_record_per_short_transaction_besides_its_statement(self):
        timing = self.install()
        self.one_statement_transactions(timing)
        raw = timing.records(raw=True)
        # each transaction: its statement, and the sql.txn that carries
        # the COMMIT (ROLLBACK) and the pool's reset (four records before)
        self.assertEqual(
            {schema.EV_SQL_QUERY: 4, schema.EV_SQL_TXN: 4}, _counts(raw)
        )
        txns = [r for r in raw if r['ev'] == schema.EV_SQL_TXN]
        for txn in txns:
            attrs = txn['attrs']
            self.assertIn(schema.ATTR_END, attrs)
            dt, dur, fp, kind = attrs[schema.ATTR_END]
            self.assertGreaterEqual(dt, 0)
            # (each time rounded down to the microsecond)
            self.assertLessEqual(dt + dur, txn['dur_us'] + 1)
            self.assertEqual(attrs[schema.ATTR_OUTCOME].upper(), kind)
        # the Connection's close resets the connection (after COMMIT,
        # and after a rollback() that ended the transaction)
        resets = [
            t['attrs'][schema.ATTR_RESET]
            for t in txns
            if schema.ATTR_RESET in t['attrs']
        ]
        self.assertEqual(4, len(resets))
        for _dt, _dur, _fp, kind in resets:
            self.assertEqual('POOL_RESET', kind)

    def test_older_shape_without_fold(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.listeners.FOLD', False
            )
        )
        timing = self.install()
        self.one_statement_transactions(timing)
        raw = timing.records(raw=True)
        self.assertEqual(
            {schema.EV_SQL_QUERY: 12, schema.EV_SQL_TXN: 4}, _counts(raw)
        )

    def test_unfolded_records_are_those_of_the_older_shape(self):
        timing = self.install()
        self.one_statement_transactions(timing)
        new = timing.records()  # unfolded
        timing.remove()
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.listeners.FOLD', False
            )
        )
        timing = self.install()
        self.one_statement_transactions(timing, name='old')
        old = timing.records(raw=True)
        self.assertEqual(_shape(old), _shape(new))
        self.assertEqual(16, len(_shape(new)))

    def test_reset_after_the_hold_is_a_record_of_its_own(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.listeners.HOLD_NS', -1
            )
        )
        timing = self.install()
        engine = base_tests._create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
            conn.commit()
            timing.handle.process()  # the transaction waits no longer
            timing.buffer.drain()  # (no flush_held)
            txns = [
                schema.validate(r)
                for r in timing.sink.records
                if r['ev'] == schema.EV_SQL_TXN
            ]
            self.assertEqual(1, len(txns))
            self.assertNotIn(schema.ATTR_RESET, txns[0]['attrs'])
            self.assertIn(schema.ATTR_END, txns[0]['attrs'])
        timing.sink.records.clear()
        kinds = [
            q['attrs']['kind']
            for q in timing.records(schema.EV_SQL_QUERY, raw=True)
        ]
        self.assertEqual(['POOL_RESET'], kinds)

    def test_waiting_transaction_written_at_removal(self):
        timing = self.install()
        engine = base_tests._create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        conn = engine.connect()
        self.addCleanup(conn.close)
        conn.exec_driver_sql('SELECT 1')
        conn.commit()
        timing.handle.process()  # it waits for a reset
        self.assertEqual(1, len(timing.handle.listeners._held))
        timing.remove()  # (no flush_held: what removal does)
        txns = [
            r
            for r in (schema.validate(rec) for rec in timing.sink.records)
            if r['ev'] == schema.EV_SQL_TXN
        ]
        self.assertEqual(1, len(txns))
        self.assertIn(schema.ATTR_END, txns[0]['attrs'])
        self.assertEqual([], timing.handle.listeners._held)

    def test_reset_in_another_call_is_not_folded(self):
        timing = self.install()
        engine = base_tests._create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        conn = engine.connect()
        ctx = base_tests.Context(request_id='req-a')
        with timing.tracer.span('conductor.build_instances', ctx=ctx):
            conn.exec_driver_sql('SELECT 1')
            conn.commit()
        conn.close()  # outside: the reset has no request
        raw = timing.records(raw=True)
        txn = [r for r in raw if r['ev'] == schema.EV_SQL_TXN][0]
        self.assertNotIn(schema.ATTR_RESET, txn['attrs'])
        reset = [
            q
            for q in raw
            if q['ev'] == schema.EV_SQL_QUERY
            and q['attrs']['kind'] == 'POOL_RESET'
        ]
        self.assertEqual(1, len(reset))
        self.assertNotIn('req', reset[0])

    def test_failed_commit_is_not_folded(self):
        timing = self.install()
        engine = base_tests._create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        conn = engine.connect()
        conn.exec_driver_sql('SELECT 1')
        fairy = conn.connection
        real = fairy.dbapi_connection

        class Failing:
            def commit(self):
                raise real.OperationalError('disk I/O error')

            def __getattr__(self, name):
                return getattr(real, name)

        fairy.dbapi_connection = Failing()
        try:
            self.assertRaises(sa.exc.OperationalError, conn.commit)
        finally:
            fairy.dbapi_connection = real
            conn.close()
        raw = timing.records(raw=True)
        txn = [r for r in raw if r['ev'] == schema.EV_SQL_TXN][0]
        self.assertEqual('error', txn['st'])
        self.assertNotIn(schema.ATTR_END, txn['attrs'])
        commits = [
            q
            for q in raw
            if q['ev'] == schema.EV_SQL_QUERY
            and q['attrs']['kind'] == 'COMMIT'
        ]
        self.assertEqual(1, len(commits))


class TestReadersOfBothShapes(base_tests.SqlTestCase):
    """The same workload's records, folded and unfolded: the analyser's
    report and the live metrics agree."""

    def workload(self):
        timing = self.install()
        manager = enginefacade.transaction_context()
        manager.configure(
            connection='sqlite:///' + os.path.join(self.tmp, 'nova.sqlite')
        )
        ctx = base_tests.Context(request_id='req-both')
        with timing.tracer.span('conductor.build_instances', ctx=ctx):
            with manager.writer.using(ctx) as session:
                session.execute(
                    sa.text('CREATE TABLE t (id INTEGER PRIMARY KEY)')
                )
            for i in range(5):
                with manager.writer.using(ctx) as session:
                    session.execute(
                        sa.text('INSERT INTO t VALUES (:i)'), {'i': i}
                    )
                with manager.reader.using(ctx) as session:
                    session.execute(sa.text('SELECT * FROM t')).fetchall()
        with manager.reader.using(ctx) as session:
            session.execute(sa.text('SELECT id FROM t')).fetchall()
        raw = timing.records(raw=True)
        self.assertTrue(
            any(
                schema.ATTR_RESET in (r.get('attrs') or {})
                for r in raw
                if r['ev'] == schema.EV_SQL_TXN
            )
        )
        return raw

    @staticmethod
    def write(path, records):
        with open(path, 'w') as f:
            for seq, rec in enumerate(records, 1):
                rec = dict(rec, seq=seq)
                if rec['ph'] == 'X' and 'span' not in rec:
                    rec['span'] = '%016x' % (0xF0000000 + seq)
                f.write(json.dumps(rec) + '\n')

    def report(self, name, records) -> dict:
        d = os.path.join(self.tmp, name)
        os.mkdir(d)
        self.write(os.path.join(d, 'nova-conductor.jsonl'), records)
        return pipeline.analyse([d], pipeline.Options(jobs=1))

    def test_analyser_figures_equal(self):
        raw = self.workload()
        old = [each for rec in raw for each in schema.unfold(rec)]
        self.assertLess(len(raw), len(old))
        a = self.report('folded', raw)
        b = self.report('unfolded', old)
        self.assertGreater(a['sql']['classes'], 3)
        for key in ('sql', 'requests'):
            self.assertEqual(b[key], a[key], key)

    def test_live_metrics_equal(self):
        raw = self.workload()
        old = [each for rec in raw for each in schema.unfold(rec)]

        def tuples(records):
            return [
                (
                    r['ph'],
                    r['ts'],
                    r.get('dur_us'),
                    r['host'],
                    r['svc'],
                    r.get('tid'),
                    r['ev'],
                    r.get('span'),
                    r.get('parent'),
                    r.get('req'),
                    r.get('greq'),
                    r.get('inst'),
                    r.get('st'),
                    None
                    if r.get('err') is None
                    else (r['err']['cls'], r['err']['msg']),
                    r.get('attrs'),
                )
                for r in records
                if r['ph'] in ('X', 'C')
            ]

        a = metrics.Metrics()
        a.observe(tuples(raw))
        b = metrics.Metrics()
        b.observe(tuples(old))
        self.assertTrue(b.families[metrics.SQL_STATEMENTS])
        for family in (metrics.SQL_STATEMENTS, metrics.SQL_SECONDS):
            self.assertEqual(b.families[family], a.families[family])
        self.assertEqual(record.SIZE, len(tuples(raw)[0]))

    def test_folding_is_what_the_readers_see(self):
        # (a check of the check: without the reader's unfolding the
        # folded records give fewer statements)
        self.assertTrue(listeners.FOLD)


class TestDecoders(base_tests.base.TestCase):
    LINE = json.dumps(
        {
            'v': 1,
            'ph': 'X',
            'seq': 4,
            'ts': 1_700_000_000_000_000,
            'dur_us': 300,
            'host': 'h',
            'svc': 'conductor',
            'pid': 7,
            'ev': 'sql.txn',
            'span': '00000000000000aa',
            'parent': '0000000000000001',
            'req': 'req-1',
            'st': 'ok',
            'attrs': {
                'db': 'nova',
                'statements': 1,
                'outcome': 'commit',
                'call': 'c',
                'end': [250, 40, 'f' * 32, 'COMMIT'],
                'reset': [310, 20, 'e' * 32, 'POOL_RESET'],
            },
        },
        separators=(',', ':'),
    ).encode()

    def unfolded(self, fast, line=None):
        from instrument.analysis.ingest import codec

        decoder = codec.RecordDecoder(fast=fast)
        rec = decoder.decode((line or self.LINE) + b'\n')
        return [
            {name: getattr(q, name) for name in schema.FIELDS}
            for q in codec.unfolded(rec)
        ]

    def test_both_decoders_unfold_alike(self):
        fast = self.unfolded(True)
        self.assertEqual(fast, self.unfolded(False))
        self.assertEqual(
            [1_700_000_000_000_250, 1_700_000_000_000_310],
            [q['ts'] for q in fast],
        )
        self.assertEqual(['sql.query'] * 2, [q['ev'] for q in fast])
        self.assertEqual(
            ['00000000000000aa', None], [q['attrs']['txn'] for q in fast]
        )
        expected = [
            dict(q, seq=4, span=None)
            for q in schema.unfold(json.loads(self.LINE))
            if q['ev'] == 'sql.query'
        ]
        for q in expected:
            for name in schema.FIELDS:
                q.setdefault(name, None)
        self.assertEqual(expected, fast)

    def test_a_part_of_another_shape_is_not_read(self):
        rec = json.loads(self.LINE)
        rec['attrs']['end'][0] = 'x'
        rec['attrs']['reset'] = {'a': 310}
        line = json.dumps(rec).encode()
        self.assertEqual([], self.unfolded(True, line))
        self.assertEqual([], self.unfolded(False, line))
