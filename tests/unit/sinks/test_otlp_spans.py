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
"""Event records -> OTLP spans: ids, traces without request ids,
instants, attributes (``instrument.sinks.otlp.spans``)."""

import os

import fixtures
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common import trace_encoder
import testtools

from instrument import schema
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder
from instrument.sinks.otlp import spans

PID = 4242
HOST = 'cmp1'
# Span ids of "this" process and of another one (different prefixes).
LOCAL = 0x1234567900000000
REMOTE = 0x7777777700000000
TS = 1_700_000_000_000_000


def rec(
    ph,
    span,
    parent=None,
    req=None,
    ev='compute.build',
    ts=TS,
    dur=100,
    st='ok',
    err=None,
    attrs=None,
    inst=None,
):
    if ph != schema.PH_COMPLETE:
        dur = st = None
    return (
        ph,
        ts,
        dur,
        HOST,
        'compute',
        7,
        ev,
        span,
        parent,
        req,
        None,
        inst,
        st,
        err,
        attrs,
    )


class SpanBuilderTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.builder = spans.SpanBuilder(
            process.ProcessIdentity.create('nova-compute', HOST), '1.2.3'
        )

    def add(self, *records):
        out = []
        for r in records:
            self.builder.add(r, PID, out)
        return out

    def test_request_id_gives_the_trace_id(self):
        [span] = self.add(rec('X', LOCAL | 1, req='req-a'))
        self.assertEqual(
            int(recorder.trace_id_hex('req-a'), 16), span.context.trace_id
        )
        self.assertEqual(LOCAL | 1, span.context.span_id)
        self.assertIsNone(span.parent)
        self.assertEqual('compute.build', span.name)
        self.assertEqual(TS * 1000, span.start_time)
        self.assertEqual((TS + 100) * 1000, span.end_time)

    def test_round_trips_a_transaction_carries_are_spans(self):
        out = self.add(
            rec(
                'X',
                LOCAL | 9,
                parent=LOCAL | 1,
                req='req-a',
                ev=schema.EV_SQL_TXN,
                dur=300,
                attrs={
                    'db': 'nova',
                    'statements': 1,
                    'outcome': 'commit',
                    'call': 'compute.build',
                    schema.ATTR_END: [250, 40, 'f' * 32, 'COMMIT'],
                    schema.ATTR_RESET: [310, 20, 'e' * 32, 'POOL_RESET'],
                },
            )
        )
        self.assertEqual(
            ['sql.query', 'sql.query', 'sql.txn'], [s.name for s in out]
        )
        commit, reset, _txn = out
        self.assertEqual((TS + 250) * 1000, commit.start_time)
        self.assertEqual((TS + 290) * 1000, commit.end_time)
        self.assertEqual(LOCAL | 1, commit.parent.span_id)
        self.assertEqual(
            '%016x' % (LOCAL | 9), commit.attributes['instrument.attrs.txn']
        )
        self.assertEqual(
            'POOL_RESET', reset.attributes['instrument.attrs.kind']
        )
        self.assertNotIn('instrument.attrs.txn', reset.attributes)

    def test_span_ids_in_hex_are_read_too(self):
        [span] = self.add(
            rec(
                'X',
                '%016x' % (LOCAL | 3),
                parent='%016x' % (REMOTE | 9),
                req='r',
            )
        )
        self.assertEqual(LOCAL | 3, span.context.span_id)
        self.assertEqual(REMOTE | 9, span.parent.span_id)

    def test_parent_of_another_process_is_remote(self):
        remote, local = self.add(
            rec('X', LOCAL | 2, parent=REMOTE | 5, req='r'),
            rec('X', LOCAL | 3, parent=LOCAL | 2, req='r'),
        )
        self.assertTrue(remote.parent.is_remote)
        self.assertFalse(local.parent.is_remote)
        self.assertEqual(remote.context.trace_id, local.context.trace_id)

    def test_without_request_children_first_are_held_for_the_root(self):
        out = self.add(
            rec('X', LOCAL | 3, parent=LOCAL | 2, ev='sql.query'),
            rec('X', LOCAL | 2, parent=LOCAL | 1, ev='compute.audit'),
        )
        self.assertEqual([], out)
        self.assertEqual(2, self.builder.held)
        out = self.add(rec('X', LOCAL | 1, ev='compute.periodic'))
        self.assertEqual(0, self.builder.held)
        self.assertEqual(
            {LOCAL | 1, LOCAL | 2, LOCAL | 3}, {s.context.span_id for s in out}
        )
        [trace] = {s.context.trace_id for s in out}
        # Rooted at the local root span, never at a request's MD5.
        self.assertEqual(LOCAL | 1, trace & (2**64 - 1))
        self.assertNotEqual(0, trace >> 64)

    def test_without_request_parent_first_shares_its_trace(self):
        out = self.add(
            rec('X', LOCAL | 1, ev='compute.periodic'),
            rec('X', LOCAL | 2, parent=LOCAL | 1),
            rec('X', LOCAL | 3, parent=LOCAL | 2, ev='sql.query'),
        )
        self.assertEqual(3, len(out))
        self.assertEqual(1, len({s.context.trace_id for s in out}))

    def test_without_request_a_running_parent_roots_by_its_start(self):
        out = self.add(
            rec('B', LOCAL | 1, ev='compute.periodic'),
            rec('X', LOCAL | 2, parent=LOCAL | 1, ev='sql.query'),
        )
        self.assertEqual(1, len(out))
        out += self.add(rec('X', LOCAL | 1, ev='compute.periodic'))
        self.assertEqual(2, len(out))
        self.assertEqual(1, len({s.context.trace_id for s in out}))

    def test_two_runs_are_two_traces(self):
        out = self.add(rec('X', LOCAL | 1), rec('X', LOCAL | 2))
        self.assertEqual(2, len({s.context.trace_id for s in out}))

    def test_remote_parent_without_request_roots_a_trace_here(self):
        [span] = self.add(rec('X', LOCAL | 4, parent=REMOTE | 1))
        self.assertEqual(LOCAL | 4, span.context.trace_id & (2**64 - 1))
        self.assertEqual(REMOTE | 1, span.parent.span_id)

    def test_held_spans_go_out_when_stale(self):
        self.add(rec('X', LOCAL | 2, parent=LOCAL | 1, ts=TS, dur=10))
        out = []
        self.builder.release(TS + 10, PID, out)
        self.assertEqual([], out)
        self.builder.release(TS + 11, PID, out)
        [span] = out
        self.assertEqual(0, self.builder.held)
        # The missing parent stays the parent, and names the trace.
        self.assertEqual(LOCAL | 1, span.parent.span_id)
        self.assertEqual(LOCAL | 1, span.context.trace_id & (2**64 - 1))

    def test_held_spans_are_bounded(self):
        self.useFixture(fixtures.MockPatchObject(spans, 'MAX_HELD', 3))
        out = self.add(
            *[
                rec('X', LOCAL | (10 + n), parent=LOCAL | n)
                for n in range(1, 4)
            ]
        )
        self.assertEqual([], out)
        out = self.add(rec('X', LOCAL | 20, parent=LOCAL | 19))
        self.assertEqual(3, len(out))
        self.assertEqual(1, self.builder.held)

    def test_instant_is_a_zero_length_child(self):
        [span] = self.add(
            rec(
                'I',
                None,
                parent=LOCAL | 1,
                req='r',
                ev='db.retry',
                attrs={'attempt': 2},
            )
        )
        self.assertEqual('db.retry', span.name)
        self.assertEqual(LOCAL | 1, span.parent.span_id)
        self.assertEqual(span.start_time, span.end_time)
        self.assertEqual(2, span.attributes['instrument.attrs.attempt'])
        self.assertNotEqual(LOCAL | 1, span.context.span_id)

    def test_list_records_of_the_tracer_are_read(self):
        live = list(rec('X', LOCAL | 1, req='r')) + [0, None]
        [span] = self.add(live)
        self.assertEqual(LOCAL | 1, span.context.span_id)

    def test_error_status_and_type(self):
        [span] = self.add(
            rec(
                'X',
                LOCAL | 1,
                req='r',
                st='error',
                err=('nova.exception.NoValidHost', 'No valid host was found.'),
            )
        )
        self.assertEqual(trace_api.StatusCode.ERROR, span.status.status_code)
        self.assertEqual(
            'nova.exception.NoValidHost: No valid host was found.',
            span.status.description,
        )
        self.assertEqual(
            'nova.exception.NoValidHost', span.attributes['error.type']
        )

    def test_a_non_utf8_file_name_does_not_fail_the_export(self):
        name = os.fsdecode(b'/var/lib/nova/instances/\xff/disk')
        records = [
            rec('X', LOCAL | n, req='r', attrs={'n': n}) for n in range(1, 6)
        ]
        records[2] = rec(
            'X',
            LOCAL | 3,
            req='r',
            st='error',
            err=('OSError', 'cannot open ' + name),
            inst=[name],
            attrs={'path': name, 'paths': [name]},
        )
        out = self.add(*records)
        # protobuf refuses lone surrogates: one such span would fail
        # the whole export request.
        data = trace_encoder.encode_spans(out).SerializeToString()
        self.assertIn(b'cannot open /var/lib/nova/instances/\\xff/disk', data)
        span = out[2]
        self.assertEqual(
            '/var/lib/nova/instances/\\xff/disk',
            span.attributes['instrument.attrs.path'],
        )
        self.assertEqual(
            ('/var/lib/nova/instances/\\xff/disk',),
            span.attributes['instrument.inst'],
        )

    def test_attributes_are_flattened_to_otlp_values(self):
        [span] = self.add(
            rec(
                'X',
                LOCAL | 1,
                req='r',
                ev='api.request',
                inst=['u1', 'u2'],
                attrs={
                    'method': 'POST',
                    'status': 202,
                    'route': '/servers',
                    'selected': ['h1', 'h2'],
                    'mixed': [1, 'a'],
                    'none': None,
                    'fanout': False,
                    'nested': {'a': {'b': 1.5}},
                },
            )
        )
        attrs = span.attributes
        self.assertEqual(('u1', 'u2'), attrs['instrument.inst'])
        self.assertEqual(('h1', 'h2'), attrs['instrument.attrs.selected'])
        self.assertEqual('[1,"a"]', attrs['instrument.attrs.mixed'])
        self.assertNotIn('instrument.attrs.none', attrs)
        self.assertIs(False, attrs['instrument.attrs.fanout'])
        self.assertEqual(1.5, attrs['instrument.attrs.nested.a.b'])
        self.assertEqual('POST', attrs['http.request.method'])
        self.assertEqual(202, attrs['http.response.status_code'])
        self.assertEqual('/servers', attrs['http.route'])
        self.assertEqual(trace_api.SpanKind.SERVER, span.kind)

    def test_process_start_names_the_resource(self):
        self.add(
            record.meta(
                'process.start',
                HOST,
                'compute',
                TS,
                {
                    'ppid': 1,
                    'mode': 'eventlet',
                    'version': '1.2.3',
                    'points': {},
                },
            )
        )
        [span] = self.add(rec('X', LOCAL | 1, req='r'))
        res = span.resource.attributes
        self.assertEqual('nova-compute', res['service.name'])
        self.assertEqual(HOST, res['host.name'])
        self.assertEqual('%s:%d' % (HOST, PID), res['service.instance.id'])
        self.assertEqual(PID, res['process.pid'])
        self.assertEqual(1, res['process.parent_pid'])
        self.assertEqual('eventlet', res['instrument.mode'])
        self.assertEqual('1.2.3', span.instrumentation_scope.version)

    def test_other_records_are_not_spans(self):
        out = self.add(
            rec('B', LOCAL | 1, req='r'),
            record.counter('sink.drops', HOST, 'compute', TS, {'file': 1}),
            record.meta(
                'sql.fingerprint',
                HOST,
                'compute',
                TS,
                {'fp': 'f', 'text': 'SELECT ?', 'kind': 'SELECT'},
            ),
        )
        self.assertEqual([], out)
        [span] = self.add(
            rec(
                'X',
                LOCAL | 2,
                req='r',
                ev='sql.query',
                attrs={'fp': 'f', 'db': 'nova'},
            )
        )
        self.assertEqual('SELECT ?', span.attributes['db.query.text'])
