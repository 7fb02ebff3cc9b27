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
"""DB pool exhaustion on a real MariaDB: an oslo.db engine with one
connection (``max_pool_size=1``, ``max_overflow=0``) and two concurrent
requests; the second one's checkout wait is recorded on its request,
and reported by the analyser.  Skips like the other MariaDB tests."""

import json
import os
import threading
import time

from oslo_context import context as oslo_context
from oslo_db.sqlalchemy import engines
import sqlalchemy as sa
import testtools

from instrument.analysis import pipeline
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracer_mod
from instrument.targets.sqlalchemy import pool as pool_mod
from tests.functional.mysql import test_sql_timing
from tests.unit import base

HOLD_S = 0.3


class PoolWaitTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)
        test_sql_timing._reachable_or_skip(self)
        self.buffer = base.ListBuffer()
        self.recorder = recorder_mod.Recorder(
            self.buffer,
            process.ProcessIdentity.create('nova-conductor', 'ctl-1'),
        )
        self.tracer = tracer_mod.Tracer(self.recorder)
        self.taps = pool_mod.PoolWaits(self.recorder).install()
        self.addCleanup(self.taps.remove)

    def engine(self, **kwargs):
        engine = engines.create_engine(
            test_sql_timing.URL, max_pool_size=1, max_overflow=0, **kwargs
        )
        self.addCleanup(engine.dispose)
        return engine

    def records(self, ev):
        return [r for r in self.buffer.dicts() if r['ev'] == ev]

    def test_second_request_waits_for_the_only_connection(self):
        engine = self.engine()
        have_it = threading.Event()
        b_waiting = threading.Event()
        truth = {}

        def request_a():
            ctx = oslo_context.RequestContext(request_id='req-a')
            with self.tracer.span('conductor.schedule', ctx=ctx):
                with engine.connect() as conn:
                    conn.exec_driver_sql('SELECT 1')
                    have_it.set()
                    b_waiting.wait(30)
                    time.sleep(HOLD_S)  # b is in the pool's queue now

        def request_b():
            have_it.wait(30)
            ctx = oslo_context.RequestContext(request_id='req-b')
            with self.tracer.span('conductor.schedule', ctx=ctx):
                b_waiting.set()
                t0 = time.perf_counter_ns()
                raw = engine.raw_connection()  # the pool's checkout
                truth['wait'] = (time.perf_counter_ns() - t0) // 1000
                raw.close()

        threads = [
            threading.Thread(target=request_a),
            threading.Thread(target=request_b),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        waits = self.records('db.pool.wait')
        self.assertEqual(['req-b'], [w['req'] for w in waits], waits)
        [wait] = waits
        spans = {r['span']: r for r in self.records('conductor.schedule')}
        self.assertEqual('req-b', spans[wait['parent']]['req'])
        self.assertEqual('test', wait['attrs']['db'])
        self.assertEqual(1, wait['attrs']['size'])
        self.assertEqual('conductor.schedule', wait['attrs']['call'])
        self.assertEqual('ok', wait['st'])
        # the wait is inside what b measured, and most of it
        self.assertLessEqual(wait['dur_us'], truth['wait'])
        self.assertGreater(wait['dur_us'], truth['wait'] * 0.9)
        self.assertGreater(wait['dur_us'], HOLD_S * 1e6 / 2)
        # the one connection (made when oslo.db tested the engine)
        connects = self.records('db.pool.connect')
        self.assertEqual(['test'], [c['attrs']['db'] for c in connects])

        # and the analyser reports it
        span_dir = self.useFixture(base.fixtures.TempDir()).path
        with open(os.path.join(span_dir, 'ctl-1.jsonl'), 'w') as f:
            for rec in self.buffer.dicts():
                f.write(json.dumps(rec) + '\n')
        report = pipeline.analyse([span_dir])
        top = {(r['kind'], r['name']): r for r in report['waits']['top']}
        row = top[('db_pool', 'test')]
        self.assertEqual(1, row['count'])
        self.assertEqual(wait['dur_us'], row['total_us'])
        self.assertEqual('req-b', row['longest_wait_request'])
        self.assertEqual(
            [{'db': 'test', 'connect': 1, 'close': 0, 'invalidate': 0}],
            report['waits']['connections'],
        )

    def test_checkout_timeout_is_an_error(self):
        engine = self.engine(pool_timeout=0.2)
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
            ctx = oslo_context.RequestContext(request_id='req-late')
            with self.tracer.span('conductor.schedule', ctx=ctx):
                self.assertRaises(sa.exc.TimeoutError, engine.raw_connection)
        [wait] = self.records('db.pool.wait')
        self.assertEqual('error', wait['st'])
        self.assertEqual('sqlalchemy.exc.TimeoutError', wait['err']['cls'])
        self.assertEqual('req-late', wait['req'])
        self.assertGreaterEqual(wait['dur_us'], 150000)

    def test_no_record_when_a_connection_is_free(self):
        engine = self.engine()
        for _ in range(3):
            with engine.connect() as conn:
                conn.exec_driver_sql('SELECT 1')
        self.assertEqual([], self.records('db.pool.wait'))
        self.assertEqual(1, len(self.records('db.pool.connect')))

    def test_connects_and_closes_on_their_request(self):
        engine = self.engine()
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
        engine.pool.dispose()  # closes the idle connection
        ctx = oslo_context.RequestContext(request_id='req-new')
        with self.tracer.span('conductor.schedule', ctx=ctx):
            with engine.connect() as conn:
                conn.exec_driver_sql('SELECT 1')
                conn.invalidate()  # as after a lost connection
        # the idle one closed by dispose(), the invalidated one
        closes = self.records('db.pool.close')
        self.assertEqual(
            [('test', None), ('test', 'req-new')],
            [(c['attrs']['db'], c.get('req')) for c in closes],
        )
        connects = self.records('db.pool.connect')
        self.assertEqual(2, len(connects))
        self.assertEqual(
            ('req-new', 'test', 'conductor.schedule'),
            (
                connects[1]['req'],
                connects[1]['attrs']['db'],
                {
                    r['span']: r['ev']
                    for r in self.records('conductor.schedule')
                }[connects[1]['parent']],
            ),
        )
        [invalid] = self.records('db.pool.invalidate')
        self.assertEqual(
            ('req-new', 'test'), (invalid['req'], invalid['attrs']['db'])
        )

    def test_remove_restores_the_pool(self):
        from sqlalchemy.pool import impl

        self.assertTrue(
            getattr(impl.QueuePool._do_get, '_instrument_timed', False)
        )
        self.taps.remove()
        self.assertFalse(
            getattr(impl.QueuePool._do_get, '_instrument_timed', False)
        )
