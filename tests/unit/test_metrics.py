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
"""Tests of the writer's metrics aggregates (``instrument.runtime.metrics``)
and their hook in the buffer: known records, exact counts and buckets;
bounded labels; the buffer's observer; a forked child's own file."""

import importlib
import json
import os
import threading

from instrument import schema
from instrument.patching import points as points_mod
from instrument.runtime import buffer
from instrument.runtime import lifecycle
from instrument.runtime import metrics
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import resources
from instrument.sinks import metrics as metrics_sink
from instrument.targets import base as targets_base
from tests.unit import base

TS = 1700000000000000
UUID = '0d3a6c9e-3f4b-4c5d-8e9f-0a1b2c3d4e5f'


def span(ev, dur_us, svc='conductor', err=None):
    return record.complete(
        TS,
        dur_us,
        'h1',
        svc,
        ev,
        1,
        None,
        'req-1',
        None,
        [UUID],
        'error' if err else 'ok',
        (err, 'boom') if err else None,
        {},
    )


def sql(fp, dur_us, db='nova', kind='SELECT', rows=None, err=None):
    return record.complete(
        TS,
        dur_us,
        'h1',
        'conductor',
        schema.EV_SQL_QUERY,
        None,
        1,
        'req-1',
        None,
        None,
        'error' if err else 'ok',
        (err, 'x') if err else None,
        {
            schema.ATTR_FP: fp,
            schema.ATTR_DB: db,
            schema.ATTR_KIND: kind,
            schema.ATTR_ROWS: rows,
        },
    )


def sql_agg(fp, count, sum_us, rows=0, rows_known=0, errors=0):
    return record.counter(
        schema.EV_SQL_AGG,
        'h1',
        'conductor',
        TS,
        {
            schema.ATTR_FP: fp,
            schema.ATTR_DB: 'nova',
            schema.ATTR_KIND: 'SELECT',
            schema.ATTR_COUNT: count,
            schema.ATTR_SUM_US: sum_us,
            schema.ATTR_ROWS: rows,
            schema.ATTR_ROWS_KNOWN: rows_known,
            schema.ATTR_ERRORS: errors,
        },
    )


def lock(name, wait_us, held_us):
    return record.complete(
        TS,
        wait_us,
        'h1',
        'compute',
        schema.EV_LOCK_WAIT,
        None,
        1,
        'req-1',
        None,
        None,
        'ok',
        None,
        {schema.ATTR_LOCK: name, schema.ATTR_HELD_US: held_us},
    )


def le(seconds):
    """Index of the bucket whose upper bound is ``seconds``."""
    return metrics.LATENCY_BOUNDS_S.index(seconds)


class AggregationTest(base.TestCase):
    def test_span_latency_buckets_and_errors(self):
        m = metrics.Metrics()
        running = list(span('conductor.build_instances', None)) + [0, None]
        running[record.I_PH] = schema.PH_BEGIN
        m.observe(
            [
                span('conductor.build_instances', 500),
                span('conductor.build_instances', 1000),  # le is inclusive
                span('conductor.build_instances', 1001),
                span('conductor.build_instances', 700 * 1000000),  # > 10 min
                span(
                    'conductor.build_instances',
                    2000,
                    err='nova.exception.NoValidHost',
                ),
                record.begin_snapshot(running),  # not counted
                span('compute.build_and_run_instance', 3000000, svc='compute'),
            ]
        )
        hist = m.families[metrics.SPAN][
            ('conductor', 'conductor.build_instances')
        ]
        expected = [0] * (len(metrics.LATENCY_BOUNDS_S) + 1)
        expected[le(0.001)] = 2
        expected[le(0.0025)] = 2
        expected[-1] = 1
        self.assertEqual(expected, hist[:-1])
        # the sum in microseconds while folding, seconds in the state
        self.assertEqual(500 + 1000 + 1001 + 700000000 + 2000, hist[-1])
        [row] = [r for r in m.state()[metrics.SPAN] if r[0] == 'conductor']
        self.assertAlmostEqual(700.004501, row[-1][-1])
        other = m.families[metrics.SPAN][
            ('compute', 'compute.build_and_run_instance')
        ]
        self.assertEqual(1, other[le(5.0)])
        self.assertEqual(1, sum(other[:-1]))
        self.assertEqual(
            {
                (
                    'conductor',
                    'conductor.build_instances',
                    'nova.exception.NoValidHost',
                ): 1
            },
            m.families[metrics.SPAN_ERRORS],
        )

    def test_sql_statements_aggregates_errors_and_deadlocks(self):
        m = metrics.Metrics()
        deadlock = 'oslo_db.exception.DBDeadlock'
        m.observe(
            [
                sql('a' * 32, 1500, rows=3),
                sql('a' * 32, 500, rows=None),
                sql('b' * 32, 2000, kind='UPDATE', rows=0, err=deadlock),
                sql(
                    'b' * 32,
                    1000,
                    kind='UPDATE',
                    err='oslo_db.exception.DBError',
                ),
                sql_agg('a' * 32, 10, 5000, rows=7, rows_known=4, errors=1),
            ]
        )
        a = ('nova', 'SELECT', 'a' * 32)
        b = ('nova', 'UPDATE', 'b' * 32)
        self.assertEqual({a: 12, b: 2}, m.families[metrics.SQL_STATEMENTS])
        self.assertAlmostEqual(0.007, m.families[metrics.SQL_SECONDS][a])
        self.assertAlmostEqual(0.003, m.families[metrics.SQL_SECONDS][b])
        self.assertEqual({a: 10, b: 0}, m.families[metrics.SQL_ROWS])
        self.assertEqual(
            {
                ('nova', 'b' * 32, deadlock): 1,
                ('nova', 'b' * 32, 'oslo_db.exception.DBError'): 1,
                ('nova', 'a' * 32, 'other'): 1,
            },
            m.families[metrics.SQL_ERRORS],
        )
        self.assertEqual(
            {('nova', 'b' * 32): 1}, m.families[metrics.SQL_DEADLOCKS]
        )

    def test_locks_pools_retries_drops_and_fill(self):
        m = metrics.Metrics()
        m.observe(
            [
                lock('compute_resources', 2000, 30000),
                lock('compute_resources', 20000, 10000),
                lock('refresh_cache-%s' % UUID, 100, 5000),
                lock(
                    'refresh_cache-%s' % UUID.upper().replace('-', ''),
                    100,
                    5000,
                ),
                record.complete(
                    TS,
                    40000,
                    'h1',
                    'conductor',
                    schema.EV_DB_POOL_WAIT,
                    None,
                    1,
                    None,
                    None,
                    None,
                    'error',
                    ('sqlalchemy.exc.TimeoutError', 'x'),
                    {schema.ATTR_DB: 'nova'},
                ),
                record.instant(
                    TS,
                    'h1',
                    'conductor',
                    None,
                    schema.EV_DB_RETRY,
                    1,
                    None,
                    None,
                    None,
                    {
                        schema.ATTR_CLS: 'oslo_db.exception.DBDeadlock',
                        schema.ATTR_EXHAUSTED: False,
                    },
                ),
                record.counter(
                    schema.EV_SINK_DROPS,
                    'h1',
                    'conductor',
                    TS,
                    {'buffer_full': 3, 'file': 1},
                ),
                record.counter(
                    schema.EV_SINK_DROPS,
                    'h1',
                    'conductor',
                    TS,
                    {'buffer_full': 5, 'file': 1},
                ),
                record.counter(
                    schema.EV_SQL_DROPPED,
                    'h1',
                    'conductor',
                    TS,
                    {schema.ATTR_COUNT: 4},
                ),
                record.counter(
                    schema.EV_PROCESS_SAMPLE,
                    'h1',
                    'conductor',
                    TS,
                    {schema.ATTR_BUF_FILL: 17},
                ),
            ]
        )
        waits = m.families[metrics.LOCK_WAIT]
        self.assertEqual(
            {('compute_resources',), ('refresh_cache-{uuid}',)}, set(waits)
        )
        self.assertEqual(1, waits[('compute_resources',)][le(0.0025)])
        self.assertEqual(1, waits[('compute_resources',)][le(0.025)])
        self.assertEqual(2, waits[('refresh_cache-{uuid}',)][le(0.001)])
        self.assertAlmostEqual(
            0.04, m.families[metrics.LOCK_HELD][('compute_resources',)]
        )
        self.assertEqual(1, m.families[metrics.POOL_WAIT][('nova',)][le(0.05)])
        self.assertEqual({('nova',): 1}, m.families[metrics.POOL_TIMEOUTS])
        self.assertEqual(
            {('oslo_db.exception.DBDeadlock', 'false'): 1},
            m.families[metrics.DB_RETRIES],
        )
        # cumulative counts: the last one, not a sum
        self.assertEqual(
            {('buffer_full',): 5, ('file',): 1, ('sql_queue',): 4},
            m.families[metrics.DROPS],
        )
        self.assertEqual({(): 17}, m.families[metrics.BUF_FILL])

    def test_service_calls_and_periodic_tasks(self):
        m = metrics.Metrics()

        def ksa(dur_us, status, failure=None):
            rec = list(
                span(
                    schema.EV_KSA_REQUEST,
                    dur_us,
                    svc='compute',
                    err='keystoneauth1.exceptions.ConnectTimeout'
                    if failure
                    else None,
                )
            )
            rec[record.I_ATTRS] = {
                schema.ATTR_SERVICE_TYPE: 'placement',
                schema.ATTR_METHOD: 'GET',
                schema.ATTR_ROUTE: '/resource_providers/{id}',
                schema.ATTR_STATUS: status,
                schema.ATTR_FAILURE: failure,
            }
            return tuple(rec)

        periodic = list(span(schema.EV_PERIODIC_TASK, 4000000, svc='compute'))
        periodic[record.I_ATTRS] = {
            schema.ATTR_TASK: 'ComputeManager.update_available_resource'
        }
        m.observe(
            [
                ksa(3000, 200),
                ksa(4000, 204),
                ksa(30000, 404),
                ksa(60000000, None, 'read_timeout'),
                tuple(periodic),
            ]
        )
        calls = {
            k[-1]: sum(v[:-1])
            for k, v in m.families[metrics.SERVICE_CALLS].items()
        }
        self.assertEqual({'2xx': 2, '4xx': 1, 'read_timeout': 1}, calls)
        [task] = m.families[metrics.PERIODIC].items()
        self.assertEqual(
            ('ComputeManager.update_available_resource',), task[0]
        )
        self.assertEqual(1, task[1][le(5.0)])
        # they are spans too
        self.assertEqual(
            4,
            sum(
                m.families[metrics.SPAN][('compute', schema.EV_KSA_REQUEST)][
                    :-1
                ]
            ),
        )

    def test_labels_are_bounded_under_a_flood(self):
        m = metrics.Metrics(max_series=50)
        m.observe([sql('%032x' % n, 10) for n in range(10000)])
        m.observe(
            [
                lock('lock-%s' % os.urandom(8).hex(), 10, 10)
                for _ in range(1000)
            ]
        )
        statements = m.families[metrics.SQL_STATEMENTS]
        self.assertEqual(51, len(statements))
        # past the cap: the query class is "other", the database kept
        self.assertEqual(10000 - 50, statements[('nova', 'SELECT', 'other')])
        self.assertEqual(10000, sum(statements.values()))
        self.assertLessEqual(len(m.families[metrics.LOCK_WAIT]), 51)
        # numbers are replaced before the cap: one lock name
        self.assertEqual('lock-{n}', metrics.lock_label('lock-123'))

    def test_no_request_id_uuid_or_sql_text_in_labels(self):
        m = metrics.Metrics()
        rec = sql('c' * 32, 10)
        rec[record.I_ATTRS][schema.ATTR_TEXT] = 'select * from x'
        m.observe(
            [
                rec,
                span('conductor.build_instances', 10),
                lock('instance-%s' % UUID, 10, 10),
            ]
        )
        text = json.dumps(m.state())
        for secret in ('req-1', UUID, 'select'):
            self.assertNotIn(secret, text)

    def test_tick_writes_changed_state_at_most_once_per_interval(self):
        written = []
        m = metrics.Metrics(
            lambda state, final: written.append((state, final)), interval=10.0
        )
        self.assertTrue(m.tick(100.0))
        self.assertFalse(m.tick(101.0))  # nothing changed
        m.observe([span('a.b', 10)])
        self.assertFalse(m.tick(105.0))  # too soon
        self.assertTrue(m.tick(110.0))
        self.assertTrue(m.tick(111.0, final=True))
        self.assertEqual([False, False, True], [f for _, f in written])
        self.assertEqual(1, written[1][0][metrics.SPAN][0][-1][le(0.001)])

    def test_only_a_changed_value_makes_the_state_written_again(self):
        # An idle process: a sample every resource_sample_interval, the
        # same drop counts, its faults counter; its file stays as it is.
        def counter(ev, attrs):
            return record.counter(ev, 'h1', 'conductor', TS, attrs)

        def sample(fill):
            return counter(
                schema.EV_PROCESS_SAMPLE,
                {schema.ATTR_BUF_FILL: fill, schema.ATTR_CPU_USER_S: fill},
            )

        drops = counter(schema.EV_SINK_DROPS, {'buffer_full': 2, 'file': 0})
        written = []
        m = metrics.Metrics(
            lambda state, final: written.append(state), interval=1.0
        )
        m.observe([sample(0), drops, counter(schema.EV_SQL_DROPPED, {})])
        self.assertTrue(m.tick(10.0))
        for now in (20.0, 30.0):
            m.observe([sample(0)])
            m.observe([drops])
            m.observe([counter(schema.EV_FAULTS, {'a hook': 1})])
            m.observe([counter(schema.EV_SQL_DROPPED, {})])
            self.assertFalse(m.tick(now), 'nothing changed')
        m.observe([sample(4)])
        self.assertTrue(m.tick(40.0))
        self.assertEqual({(): 4}, m.families[metrics.BUF_FILL])
        m.observe([sample(4)])
        self.assertFalse(m.tick(50.0))
        m.observe(
            [counter(schema.EV_SINK_DROPS, {'buffer_full': 3, 'file': 0})]
        )
        self.assertTrue(m.tick(60.0))
        m.observe([counter(schema.EV_SQL_DROPPED, {schema.ATTR_COUNT: 1})])
        self.assertTrue(m.tick(70.0))
        m.observe([span('a.b', 10)])
        self.assertTrue(m.tick(80.0))
        m.observe([sql_agg('c' * 32, 1, 10)])
        self.assertTrue(m.tick(90.0))
        self.assertTrue(m.tick(91.0, final=True), 'always at close')
        self.assertEqual(7, len(written))
        self.assertEqual(
            {('buffer_full',): 3, ('file',): 0, ('sql_queue',): 1},
            m.families[metrics.DROPS],
        )

    def test_points_by_status_from_the_start_record_and_changes(self):
        m = metrics.Metrics()
        self.assertEqual({}, m.families[metrics.POINTS])
        start = record.meta(
            schema.EV_PROCESS_START,
            'h1',
            'conductor',
            TS,
            {
                schema.ATTR_POINTS: {
                    'patched': ['m:A.a', 'm:A.b', 'm:A.c'],
                    'pending': ['m:B.d', 'm:B.e'],
                    'missing': ['m:C.f'],
                    'failed': ['m:D.g (boom: x)'],
                }
            },
        )
        m.observe([start])
        self.assertEqual(
            {
                ('patched',): 3,
                ('pending',): 2,
                ('missing',): 1,
                ('failed',): 1,
            },
            m.families[metrics.POINTS],
        )
        # later: d imported and patched, e missing in this release
        m.observe(
            [
                record.meta(
                    schema.EV_PROCESS_POINTS,
                    'h1',
                    'conductor',
                    TS,
                    {'patched': ['m:B.d']},
                ),
                record.meta(
                    schema.EV_PROCESS_POINTS,
                    'h1',
                    'conductor',
                    TS,
                    {'missing': ['m:B.e'], 'failed': ['m:D.g']},
                ),
            ]
        )
        self.assertEqual(
            {
                ('patched',): 4,
                ('pending',): 0,
                ('missing',): 2,
                ('failed',): 1,
            },
            m.families[metrics.POINTS],
        )
        # a forked child's own start record starts afresh
        m.observe([start])
        self.assertEqual(3, m.families[metrics.POINTS][('patched',)])


class BufferObserverTest(base.TestCase):
    def make(self, max_records=1000):
        sink = base.MemorySink()
        ident = process.ProcessIdentity.create('nova-conductor', 'h1')
        buf = buffer.EventBuffer([sink], max_records, 60.0, ident)
        self.addCleanup(buf.close)
        state = metrics_sink.StateFile(self.tmp, ident)
        m = metrics.Metrics(state, 0.0)
        buf.add_observer(m)
        return buf, sink, m, state

    def read(self, state):
        with open(state.path(), encoding='utf-8') as f:
            return json.load(f)

    def test_the_writer_folds_what_it_writes_and_writes_the_file(self):
        buf, sink, m, state = self.make(max_records=3)
        for n in range(5):  # two dropped: buffer_full
            buf.emit(span('conductor.build_instances', 1000 + n))
        buf.drain()
        doc = self.read(state)
        self.assertEqual('nova-conductor', doc['service'])
        self.assertEqual(os.getpid(), doc['pid'])
        rows = doc['families'][metrics.SPAN]
        self.assertEqual(3, sum(rows[0][-1][:-1]))
        self.assertIn(['buffer_full', 2], doc['families'][metrics.DROPS])
        # the sink got every record the metrics counted
        self.assertEqual(
            3,
            sum(
                1
                for r in sink.records
                if r['ev'] == 'conductor.build_instances'
            ),
        )
        self.assertFalse(
            [n for n in os.listdir(self.tmp) if n.endswith('.tmp')]
        )

    def test_an_idle_writer_rewrites_the_file_only_when_it_changed(self):
        buf, sink, m, state = self.make()
        writes = []

        def write(doc, final):
            writes.append(final)
            state(doc, final)

        m.writer = write
        recorder = recorder_mod.Recorder(
            buf, process.ProcessIdentity.create('nova-conductor', 'h1')
        )
        sampler = resources.Sampler(recorder, 0.0)  # one every drain
        sampler.start()
        self.addCleanup(sampler.stop)
        for _ in range(5):
            buf.drain()
        samples = [
            r for r in sink.records if r['ev'] == schema.EV_PROCESS_SAMPLE
        ]
        self.assertEqual(5, len(samples))
        self.assertEqual([False], writes)
        buf.emit(span('a.b', 10))
        buf.drain()
        self.assertEqual([False, False], writes)
        doc = self.read(state)
        self.assertEqual(1, sum(doc['families'][metrics.SPAN][0][-1][:-1]))
        buf.close()
        # the final state, whatever changed (the closing thread and the
        # woken writer may both write it)
        self.assertEqual([False, False], writes[:2])
        self.assertTrue(writes[2:] and all(writes[2:]), writes)
        self.assertTrue(self.read(state)['final'])

    def test_a_running_span_counts_when_it_ends(self):
        buf, sink, m, state = self.make()
        rec = list(
            span('compute.build_and_run_instance', None, svc='compute')
        ) + [0, None]
        rec[record.I_PH] = schema.PH_BEGIN
        buf.emit(rec)
        buf.drain()
        self.assertFalse(m.families[metrics.SPAN])
        rec[record.I_PH] = schema.PH_COMPLETE
        rec[record.I_DUR] = 2000000
        buf.drain()
        hist = m.families[metrics.SPAN][
            ('compute', 'compute.build_and_run_instance')
        ]
        self.assertEqual(1, hist[le(2.5)])

    def test_the_last_drain_at_close_writes_the_final_state(self):
        buf, sink, m, state = self.make()
        m.interval = 3600.0
        buf.emit(span('a.b', 10))
        buf.drain()
        buf.emit(span('a.b', 10))
        buf.drain()  # too soon: not written
        self.assertEqual(
            1, sum(self.read(state)['families'][metrics.SPAN][0][-1][:-1])
        )
        buf.close()
        doc = self.read(state)
        self.assertTrue(doc['final'])
        self.assertEqual(2, sum(doc['families'][metrics.SPAN][0][-1][:-1]))

    def test_only_the_writer_thread_folds(self):
        sink = base.MemorySink()
        ident = process.ProcessIdentity.create('nova-conductor', 'h1')
        buf = buffer.EventBuffer([sink], 1000, 0.01, ident)
        self.addCleanup(buf.close)
        seen = []
        done = threading.Event()

        class Watching(metrics.Metrics):
            def observe(self, batch, *args):
                seen.append(threading.get_ident())
                super().observe(batch, *args)
                done.set()

        m = Watching()
        buf.add_observer(m)
        buf.emit(span('a.b', 10))
        self.assertTrue(done.wait(10))
        self.assertNotIn(threading.get_ident(), seen)
        self.assertEqual([buf.writer.ident], list(set(seen)))

    def test_a_failing_observer_never_stops_the_writer(self):
        buf, sink, m, state = self.make()

        class Broken:
            def observe(self, batch):
                raise RuntimeError('observe')

            def tick(self, now, final):
                raise RuntimeError('tick')

        buf.add_observer(Broken())
        buf.emit(span('a.b', 10))
        buf.drain()
        self.assertEqual(['a.b'], [r['ev'] for r in sink.records])
        self.assertIn('observe', self.logged())


class PointsGaugeTest(base.TestCase):
    """A real set-up with ``metrics_dir``: its points by status in the
    exposition ``instrument-metrics`` serves."""

    def test_a_missing_point_is_in_the_exposition(self):
        mod = self.make_module('''
            class Manager:
                def build(self, context):
                    return 1
            ''')
        importlib.import_module(mod)
        out = os.path.join(self.tmp, 'metrics')
        conf = self.make_conf(metrics_dir=out)
        runtime = lifecycle.setup(
            conf,
            'nova-conductor',
            targets=[
                targets_base.PointsTarget(
                    [
                        points_mod.PatchPoint(mod, 'Manager.build', 'x.build'),
                        points_mod.PatchPoint(mod, 'Manager.gone', 'x.gone'),
                        points_mod.PatchPoint(
                            mod + '_never_imported', 'X.y', 'x.y'
                        ),
                    ]
                )
            ],
        )
        self.addCleanup(lifecycle.teardown)
        self.assertIsNotNone(runtime)
        lifecycle.teardown()
        text = metrics_sink.exposition(out)
        for status, count in (
            ('patched', 1),
            ('pending', 1),
            ('missing', 1),
            ('failed', 0),
        ):
            self.assertIn(
                'instrument_points{service="nova-conductor",'
                'status="%s"} %d\n' % (status, count),
                text,
            )
        self.assertIn('# TYPE instrument_points gauge\n', text)


class ForkTest(base.TestCase):
    def test_a_forked_child_writes_its_own_file(self):
        self._fork('')

    def test_a_forked_child_writes_its_own_file_under_eventlet(self):
        self._fork('            import eventlet; eventlet.monkey_patch()')

    def _fork(self, prelude):
        out = os.path.join(self.tmp, 'metrics')
        result = self.run_script(
            prelude
            + '''
            import os, sys
            from instrument.runtime import buffer, metrics, process, record
            from instrument.sinks import metrics as metrics_sink
            from instrument import sinks

            class Null(sinks.Sink):
                name = 'null'
                def write(self, batch, first_seq, pid):
                    pass

            out = sys.argv[1]
            ident = process.ProcessIdentity.create('nova-api', 'h1')
            buf = buffer.EventBuffer([Null(None, ident)], 1000, 0.05, ident)
            buf.add_observer(metrics.Metrics(
                metrics_sink.StateFile(out, ident), 0.05))

            def span(ev):
                return record.complete(1, 1000, 'h1', 'api', ev, 1, None,
                                       None, None, None, 'ok', None, {})

            buf.emit(span('api.parent'))
            buf.drain()
            pid = os.fork()
            if pid == 0:
                buf.emit(span('api.child'))
                buf.emit(span('api.child'))
                buffer.flush_before_exit()
                os._exit(0)
            os.waitpid(pid, 0)
            buf.emit(span('api.parent'))
            buf.close()
            print(pid)
            ''',
            out,
        )
        self.assertEqual(0, result.returncode, result.stderr)
        child = int(result.stdout.split()[-1])
        docs = {d['pid']: d for d in metrics_sink.read_states(out)}
        self.assertEqual(2, len(docs))
        self.assertIn(child, docs)

        def events(doc):
            return {
                row[1]: sum(row[-1][:-1])
                for row in doc['families'][metrics.SPAN]
            }

        self.assertEqual({'api.child': 2}, events(docs[child]))
        parent = [d for p, d in docs.items() if p != child][0]
        self.assertEqual({'api.parent': 2}, events(parent))
        merged = metrics_sink.merge(list(docs.values()))
        self.assertEqual(
            {
                ('nova-api', 'api', 'api.parent'): 2,
                ('nova-api', 'api', 'api.child'): 2,
            },
            {k: sum(v[:-1]) for k, v in merged[metrics.SPAN].items()},
        )
