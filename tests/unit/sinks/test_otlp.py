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
"""The ``otlp`` sink against local collectors: what arrives, and what a
dead or hanging collector costs (drops, nothing else)."""

import os

import instrument
from instrument import schema
from instrument.patching import patcher
from instrument.runtime import buffer
from instrument.runtime import lifecycle
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder
from instrument.runtime import tracer
from instrument.sinks import otlp
from tests.unit import base
from tests.unit.sinks import otlp_collector

REQ = 'req-6f1e8c1a-0b53-4c0e-9a55-1f4c2f0d9e01'
INST = '3b0d5c3e-2a53-4df5-8c1d-6a1d9b7e2c11'
FP = '0123456789abcdef0123456789abcdef'
FP_TEXT = 'SELECT instances.uuid FROM instances WHERE instances.id = ?'


class Ctx:
    def __init__(self, request_id=REQ):
        self.request_id = request_id
        self.global_request_id = 'req-global'


class OtlpTestBase(base.TestCase):
    def make_service(
        self,
        endpoint,
        host='cmp1',
        service='nova-compute',
        extra_sinks=(),
        **overrides,
    ):
        """A sink, its buffer and tracer for one fake service."""
        overrides.setdefault('otlp_timeout', 10.0)
        conf = self.make_conf(
            sinks=['otlp'], otlp_endpoint=endpoint, **overrides
        )
        ident = process.ProcessIdentity.create(service, host)
        sink = otlp.OtlpSink(conf, ident)
        buf = buffer.EventBuffer(
            [sink] + list(extra_sinks), 100000, 60.0, ident
        )
        self.addCleanup(buf.close)
        return sink, buf, tracer.Tracer(recorder.Recorder(buf, ident))

    def burst(self, tr, count, req=REQ):
        for _ in range(count):
            with tr.span('compute.build', ctx=Ctx(req)):
                pass


def emit_sql(tr, fp=FP, db='nova_cell1'):
    """What the SQL listeners emit: a fingerprint once, then the query."""
    frame = recorder.current_frame()
    emit = tr.recorder.emit
    emit(
        record.meta(
            'sql.fingerprint',
            tr.host,
            tr.svc,
            1,
            {'fp': fp, 'text': FP_TEXT, 'kind': 'SELECT'},
        )
    )
    span = recorder.new_span_id()
    emit(
        (
            schema.PH_COMPLETE,
            1_700_000_000_000_000,
            250,
            tr.host,
            tr.svc,
            1,
            'sql.query',
            span,
            frame[recorder.F_SPAN],
            frame[recorder.F_REQ],
            frame[recorder.F_GREQ],
            frame[recorder.F_INST],
            schema.ST_OK,
            None,
            {
                'fp': fp,
                'db': db,
                'kind': 'SELECT',
                'rows': 1,
                'call': frame[recorder.F_EV],
            },
        )
    )
    return span


class TraceStructureTest(OtlpTestBase):
    """Two services, one request, one trace (OTLP/HTTP)."""

    def setUp(self):
        super().setUp()
        self.collector = self.useFixture(otlp_collector.HttpCollector())

    def run_boot(self):
        memory = base.MemorySink()
        _, cbuf, ctr = self.make_service(
            self.collector.endpoint, host='ctl1', service='nova-conductor'
        )
        _, mbuf, mtr = self.make_service(
            self.collector.endpoint, extra_sinks=[memory]
        )
        with ctr.span(
            'conductor.schedule_and_build_instances', ctx=Ctx(), inst=[INST]
        ):
            with ctr.span(
                'rpc.cast',
                attrs={'method': 'build_and_run', 'topic': 'compute'},
            ):
                cast = recorder.current_frame()[recorder.F_SPAN]
        # The compute side: its first span's parent is the sender's span.
        with mtr.span(
            'rpc.dispatch',
            ctx=Ctx(),
            remote_parent=cast,
            attrs={'method': 'build_and_run', 'topic': 'compute'},
        ):
            with mtr.span(
                'compute.build',
                inst=[INST],
                attrs={'outcome': 'active', 'attempt': 1},
            ):
                sql = emit_sql(mtr)
                try:
                    with mtr.span('compute.spawn'):
                        raise ValueError('boom\nsecond line')
                except ValueError:
                    pass
        cbuf.drain()
        mbuf.drain()
        spans = self.collector.wait_spans(6)
        by_name = {s['name']: s for s in spans}
        return spans, by_name, cast, sql, memory

    def test_one_trace_id_per_request_across_services(self):
        spans, by_name, _, _, _ = self.run_boot()
        self.assertEqual(6, len(spans))
        self.assertEqual(
            {recorder.trace_id_hex(REQ)}, {s['trace'] for s in spans}
        )
        self.assertEqual(
            {
                'conductor.schedule_and_build_instances',
                'rpc.cast',
                'rpc.dispatch',
                'compute.build',
                'sql.query',
                'compute.spawn',
            },
            set(by_name),
        )

    def test_parent_links_cross_the_rpc_hop(self):
        _, by_name, cast, sql, _ = self.run_boot()
        root = by_name['conductor.schedule_and_build_instances']
        self.assertIsNone(root['parent'])
        self.assertEqual(root['span'], by_name['rpc.cast']['parent'])
        self.assertEqual('%016x' % cast, by_name['rpc.cast']['span'])
        self.assertEqual('%016x' % cast, by_name['rpc.dispatch']['parent'])
        self.assertEqual(
            by_name['rpc.dispatch']['span'], by_name['compute.build']['parent']
        )
        self.assertEqual('%016x' % sql, by_name['sql.query']['span'])
        self.assertEqual(
            by_name['compute.build']['span'], by_name['sql.query']['parent']
        )
        self.assertEqual(
            by_name['compute.build']['span'],
            by_name['compute.spawn']['parent'],
        )
        self.assertEqual('PRODUCER', by_name['rpc.cast']['kind'])
        self.assertEqual('SERVER', by_name['rpc.dispatch']['kind'])
        self.assertEqual('CLIENT', by_name['sql.query']['kind'])
        self.assertEqual('INTERNAL', by_name['compute.build']['kind'])

    def test_resource_names_service_and_host(self):
        _, by_name, _, _, _ = self.run_boot()
        pid = os.getpid()
        conductor = by_name['rpc.cast']['resource']
        self.assertEqual('nova-conductor', conductor['service.name'])
        self.assertEqual('ctl1', conductor['host.name'])
        self.assertEqual('ctl1:%d' % pid, conductor['service.instance.id'])
        self.assertEqual(pid, conductor['process.pid'])
        compute = by_name['compute.build']['resource']
        self.assertEqual('nova-compute', compute['service.name'])
        self.assertEqual('cmp1', compute['host.name'])
        self.assertEqual('cmp1:%d' % pid, compute['service.instance.id'])
        self.assertEqual(
            'openstack-instrument', by_name['compute.build']['scope']
        )

    def test_sql_spans_carry_fingerprint_and_database_only(self):
        _, by_name, _, _, _ = self.run_boot()
        attrs = by_name['sql.query']['attrs']
        self.assertEqual(FP, attrs['instrument.attrs.fp'])
        self.assertEqual('nova_cell1', attrs['instrument.attrs.db'])
        self.assertEqual('nova_cell1', attrs['db.namespace'])
        self.assertEqual('SELECT', attrs['db.operation.name'])
        self.assertEqual(FP_TEXT, attrs['db.query.text'])
        self.assertEqual(REQ, attrs['instrument.req'])
        # Exactly these keys: nothing else (no parameters) can ride along.
        self.assertEqual(
            {
                'instrument.ev',
                'instrument.svc',
                'instrument.req',
                'instrument.greq',
                'instrument.inst',
                'thread.id',
                'instrument.attrs.fp',
                'instrument.attrs.db',
                'instrument.attrs.kind',
                'instrument.attrs.rows',
                'instrument.attrs.call',
                'db.namespace',
                'db.operation.name',
                'db.query.text',
            },
            set(attrs),
        )

    def test_attributes_times_and_errors_match_the_records(self):
        spans, by_name, _, _, memory = self.run_boot()
        build = by_name['compute.build']['attrs']
        self.assertEqual('compute.build', build['instrument.ev'])
        self.assertEqual('compute', build['instrument.svc'])
        self.assertEqual([INST], build['instrument.inst'])
        self.assertEqual('req-global', build['instrument.greq'])
        self.assertEqual('active', build['instrument.attrs.outcome'])
        self.assertEqual(1, build['instrument.attrs.attempt'])
        spawn = by_name['compute.spawn']
        self.assertEqual((2, 'ValueError: boom'), spawn['status'])
        self.assertEqual('ValueError', spawn['attrs']['error.type'])
        self.assertEqual(0, by_name['compute.build']['status'][0])
        recorded = {r['span']: r for r in memory.records if r['ph'] == 'X'}
        compute_spans = [
            s for s in spans if s['resource']['host.name'] == 'cmp1'
        ]
        self.assertEqual(set(recorded), {s['span'] for s in compute_spans})
        for span in compute_spans:
            rec = recorded[span['span']]
            self.assertEqual(rec['ts'] * 1000, span['start'])
            self.assertEqual((rec['ts'] + rec['dur_us']) * 1000, span['end'])


class FoldedTransactionTest(OtlpTestBase):
    """An ``sql.txn`` that carries its COMMIT and the pool's reset is
    three spans: accepted, exported and lost as three."""

    def emit_txn(self, tr):
        frame = recorder.current_frame()
        tr.recorder.emit(
            (
                schema.PH_COMPLETE,
                1_700_000_000_000_000,
                300,
                tr.host,
                tr.svc,
                1,
                schema.EV_SQL_TXN,
                recorder.new_span_id(),
                frame[recorder.F_SPAN],
                frame[recorder.F_REQ],
                frame[recorder.F_GREQ],
                frame[recorder.F_INST],
                schema.ST_OK,
                None,
                {
                    'db': 'nova',
                    'statements': 1,
                    'outcome': 'commit',
                    'call': frame[recorder.F_EV],
                    schema.ATTR_END: [250, 40, FP, 'COMMIT'],
                    schema.ATTR_RESET: [310, 20, FP, 'POOL_RESET'],
                },
            )
        )

    def test_exported_as_its_spans(self):
        collector = self.useFixture(otlp_collector.HttpCollector())
        sink, buf, tr = self.make_service(collector.endpoint)
        with tr.span('compute.build', ctx=Ctx(REQ)):
            self.emit_txn(tr)
        buf.drain()
        spans = collector.wait_spans(4)
        self.assertEqual(
            ['compute.build', 'sql.query', 'sql.query', 'sql.txn'],
            sorted(span['name'] for span in spans),
        )
        self.assertTrue(sink.wait_idle(10))
        self.assertEqual(4, sink.exported)
        self.assertEqual(0, sink.dropped)

    def test_lost_as_its_spans(self):
        refusing = self.useFixture(otlp_collector.RefusingEndpoint())
        sink, buf, tr = self.make_service(refusing.endpoint, otlp_timeout=0.5)
        with tr.span('compute.build', ctx=Ctx(REQ)):
            self.emit_txn(tr)
        buf.drain()
        self.assertTrue(sink.wait_idle(30))
        self.assertEqual(0, sink.exported)
        self.assertEqual(4, sink.dropped)


class BothSinksTest(OtlpTestBase):
    """``sinks = file, otlp`` through instrument.setup."""

    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
        self.mod_name = self.make_module('''
            def build(context):
                return 'built'
        ''')

    def setup_runtime(self, endpoint, **overrides):
        conf = self.make_conf(
            sinks=['file', 'otlp'],
            otlp_endpoint=endpoint,
            sql_timing=False,
            flush_interval=0.05,
            **overrides,
        )
        points = [
            patcher.PatchPoint(
                self.mod_name, 'build', 'compute.build', 'compute'
            )
        ]
        return instrument.setup(conf, 'nova-compute', points=points)

    def test_file_and_collector_both_get_every_span(self):
        collector = self.useFixture(otlp_collector.HttpCollector())
        self.setup_runtime(collector.endpoint)
        mod = __import__(self.mod_name)
        for n in range(20):
            self.assertEqual('built', mod.build(Ctx('req-%d' % n)))
        lifecycle.teardown()
        spans = collector.wait_spans(20)
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        done = {r['span']: r for r in records if r['ph'] == 'X'}
        self.assertEqual(20, len(done))
        self.assertEqual(set(done), {s['span'] for s in spans})
        for span in spans:
            self.assertEqual(
                recorder.trace_id_hex(done[span['span']]['req']), span['trace']
            )
        # process.start feeds the resource.
        resource = spans[0]['resource']
        self.assertEqual('threads', resource['instrument.mode'])
        self.assertEqual(os.getppid(), resource['process.parent_pid'])

    def test_dead_collector_leaves_the_file_complete(self):
        refusing = self.useFixture(otlp_collector.RefusingEndpoint())
        rt = self.setup_runtime(refusing.endpoint, otlp_timeout=0.5)
        mod = __import__(self.mod_name)
        for n in range(30):
            self.assertEqual('built', mod.build(Ctx('req-%d' % n)))
        rt.buffer.drain()
        [sink] = [s for s in rt.buffer.sinks if s.name == 'otlp']
        self.assertTrue(sink.wait_idle(30))
        rt.buffer.drain()
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        self.assertEqual(30, len([r for r in records if r['ph'] == 'X']))
        drops = [r['attrs'] for r in records if r['ev'] == 'sink.drops']
        self.assertEqual(30, drops[-1]['otlp'])
        self.assertEqual(0, drops[-1]['file'])


class DeadCollectorTest(OtlpTestBase):
    """Connection refused: everything is dropped and counted, once
    logged, and export resumes when the collector is back."""

    def test_refused_counts_every_span(self):
        refusing = self.useFixture(otlp_collector.RefusingEndpoint())
        memory = base.MemorySink()
        sink, buf, tr = self.make_service(
            refusing.endpoint,
            extra_sinks=[memory],
            otlp_timeout=0.5,
            otlp_queue_size=64,
        )
        self.burst(tr, 1000)
        buf.drain()
        self.assertGreaterEqual(sink.dropped, 1000 - 64)
        self.assertTrue(sink.wait_idle(30))
        self.assertEqual(0, sink.exported)
        self.assertEqual(1000, sink.dropped)
        self.assertEqual(1000, buf.counts()['otlp'])
        # The memory sink got every span, and the drop report.
        buf.drain()
        self.assertEqual(
            1000, len([r for r in memory.records if r['ph'] == 'X'])
        )
        drops = [r for r in memory.records if r['ev'] == 'sink.drops']
        self.assertEqual(1000, drops[-1]['attrs']['otlp'])
        self.assertEqual(
            1,
            self.logger.output.count(
                'cannot export spans to %s' % refusing.endpoint
            ),
        )
        # The SDK's own per-batch lines stay out of the service log.
        self.assertNotIn(' opentelemetry.', self.logger.output)

    def test_a_dead_collector_costs_one_batch_per_attempt(self):
        refusing = self.useFixture(otlp_collector.RefusingEndpoint())
        sink, buf, tr = self.make_service(refusing.endpoint, otlp_timeout=0.5)
        self.burst(tr, 5000)
        buf.drain()
        self.assertTrue(sink.wait_idle(30))
        self.assertEqual(5000, sink.dropped)
        # After a failed export the backlog is dropped, not converted and
        # sent batch after batch (that would be 10 attempts of 512).
        self.assertLessEqual(sink.attempts, 2)

    def test_export_resumes_when_the_collector_comes_back(self):
        refusing = self.useFixture(otlp_collector.RefusingEndpoint())
        sink, buf, tr = self.make_service(refusing.endpoint, otlp_timeout=0.5)
        self.burst(tr, 5)
        buf.drain()
        self.assertTrue(sink.wait_idle(30))
        self.assertEqual(5, sink.dropped)
        refusing.sock.close()
        collector = self.useFixture(
            otlp_collector.HttpCollector(port=refusing.port)
        )
        self.burst(tr, 7, req='req-back')
        buf.drain()
        spans = collector.wait_spans(7)
        self.assertEqual(7, len(spans))
        self.assertTrue(sink.wait_idle(30))
        self.assertEqual(5, sink.dropped)
        self.assertEqual(7, sink.exported)
        self.assertIn(
            'exporting spans to %s again' % refusing.endpoint,
            self.logger.output,
        )


class HangingCollectorTest(OtlpTestBase):
    """The collector accepts and never answers: emits and the writer go
    on, spans are dropped and counted, close() does not wait for it."""

    def test_burst_and_close_while_the_export_hangs(self):
        hanging = self.useFixture(otlp_collector.HangingCollector())
        memory = base.MemorySink()
        sink, buf, tr = self.make_service(
            hanging.endpoint,
            extra_sinks=[memory],
            otlp_timeout=120.0,
            otlp_queue_size=256,
        )
        self.burst(tr, 1)
        buf.drain()
        self.assertTrue(hanging.connected.wait(15))
        # The exporter is now inside an export the collector never
        # answers.  A burst, and the writer's drains, still go through.
        self.burst(tr, 2000)
        buf.drain()
        self.burst(tr, 2000)
        buf.drain()
        self.assertGreater(hanging.holding(), 0)
        self.assertEqual(
            4001, len([r for r in memory.records if r['ph'] == 'X'])
        )
        self.assertEqual(4000 - 256, sink.dropped)
        self.assertEqual(0, sink.exported)
        buf.close()
        # close() gave up on the hung export instead of waiting for it.
        self.assertGreater(hanging.holding(), 0)
        self.assertEqual(4001, sink.dropped)
        self.assertIn(
            '257 spans not exported to %s at exit' % hanging.endpoint,
            self.logger.output,
        )


class GrpcTest(OtlpTestBase):
    """OTLP/gRPC to an in-process grpcio TraceService."""

    def test_grpc_export_keeps_the_trace_structure(self):
        collector = self.useFixture(otlp_collector.GrpcCollector())
        sink, buf, tr = self.make_service(
            collector.endpoint, otlp_protocol='grpc'
        )
        with tr.span('rpc.dispatch', ctx=Ctx(), remote_parent=0xABC):
            with tr.span('compute.build'):
                emit_sql(tr)
        buf.drain()
        spans = {s['name']: s for s in collector.wait_spans(3)}
        self.assertEqual(
            {'rpc.dispatch', 'compute.build', 'sql.query'}, set(spans)
        )
        self.assertEqual(
            {recorder.trace_id_hex(REQ)}, {s['trace'] for s in spans.values()}
        )
        self.assertEqual('%016x' % 0xABC, spans['rpc.dispatch']['parent'])
        self.assertEqual(
            spans['rpc.dispatch']['span'], spans['compute.build']['parent']
        )
        self.assertEqual(
            spans['compute.build']['span'], spans['sql.query']['parent']
        )
        self.assertEqual(
            'nova-compute', spans['sql.query']['resource']['service.name']
        )
        self.assertEqual(
            FP, spans['sql.query']['attrs']['instrument.attrs.fp']
        )
        self.assertTrue(sink.wait_idle(15))
        self.assertEqual(3, sink.exported)
        self.assertEqual(0, sink.dropped)

    def test_grpc_refused_counts_drops(self):
        refusing = self.useFixture(otlp_collector.RefusingEndpoint())
        sink, buf, tr = self.make_service(
            refusing.grpc_endpoint, otlp_protocol='grpc', otlp_timeout=0.5
        )
        self.burst(tr, 50)
        buf.drain()
        self.assertTrue(sink.wait_idle(30))
        self.assertEqual(0, sink.exported)
        self.assertEqual(50, sink.dropped)
        self.assertEqual(
            1,
            self.logger.output.count(
                'cannot export spans to %s' % refusing.grpc_endpoint
            ),
        )

    def test_default_endpoint_follows_the_protocol(self):
        conf = self.make_conf(sinks=['otlp'], otlp_protocol='grpc')
        sink = otlp.OtlpSink(conf, process.ProcessIdentity.create('x', 'h'))
        self.assertEqual('http://127.0.0.1:4317', sink.endpoint)
        conf = self.make_conf(sinks=['otlp'])
        sink = otlp.OtlpSink(conf, process.ProcessIdentity.create('x', 'h'))
        self.assertEqual('http://127.0.0.1:4318/v1/traces', sink.endpoint)
