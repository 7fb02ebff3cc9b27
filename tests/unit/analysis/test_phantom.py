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
"""``api.request`` spans begun and ended under different request ids.

The paste filter begins the span with the WSGI environ's request id
and ends it with nova's context id; behind nova's ``noauth2`` they
differ, and a ``B`` written while the request ran named an id nothing
else has.  The analyser must read it under the id its ``X`` (and the
downstream spans) carry: no phantom request, at any ``--jobs``.
"""

import json
import os
import shutil
import tempfile
import zlib

import testtools

from instrument.analysis import pipeline
from instrument.analysis.ingest import clockpass
from tests.unit.analysis import test_fidelity as fidelity

T0 = 1_700_000_000_000_000


def _rec(
    ph,
    seq,
    ts,
    host,
    svc,
    pid,
    ev,
    span,
    req,
    parent=None,
    dur=None,
    attrs=None,
):
    rec = {
        'v': 1,
        'ph': ph,
        'seq': seq,
        'ts': ts,
        'host': host,
        'svc': svc,
        'pid': pid,
        'tid': 1,
        'ev': ev,
        'span': span,
        'req': req,
    }
    if parent is not None:
        rec['parent'] = parent
    if ph == 'X':
        rec['dur_us'] = dur
        rec['st'] = 'ok'
    if attrs is not None:
        rec['attrs'] = attrs
    return rec


def _two_parts(a: str, b: str) -> bool:
    return zlib.crc32(a.encode()) % 2 != zlib.crc32(b.encode()) % 2


def _boot(begun_req, ended_req):
    """A boot whose api.request B names ``begun_req`` and whose X,
    conductor and compute spans name ``ended_req``."""
    api = ('api-1', 'api', 11)
    cond = ('cond-1', 'conductor', 12)
    cpu = ('cpu-1', 'compute', 13)
    return [
        _rec(
            'B',
            1,
            T0,
            *api,
            'api.request',
            'a1',
            begun_req,
            attrs={'method': 'POST', 'route': '/v2.1/servers'},
        ),
        _rec(
            'X',
            2,
            T0 + 100,
            *api,
            'rpc.cast',
            'a2',
            ended_req,
            parent='a1',
            dur=50,
            attrs={
                'method': 'schedule_and_build_instances',
                'topic': 'conductor',
            },
        ),
        _rec(
            'X',
            3,
            T0,
            *api,
            'api.request',
            'a1',
            ended_req,
            dur=1000,
            attrs={'method': 'POST', 'route': '/v2.1/servers', 'status': 202},
        ),
        _rec(
            'X',
            1,
            T0 + 200,
            *cond,
            'rpc.dispatch',
            'c1',
            ended_req,
            parent='a2',
            dur=5000,
            attrs={'method': 'schedule_and_build_instances'},
        ),
        _rec(
            'X',
            2,
            T0 + 300,
            *cond,
            'conductor.schedule_and_build_instances',
            'c2',
            ended_req,
            parent='c1',
            dur=4000,
        ),
        _rec(
            'X',
            1,
            T0 + 6000,
            *cpu,
            'compute.build_and_run',
            'p1',
            ended_req,
            parent='c2',
            dur=20000,
        ),
    ]


class PhantomTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix='instrument-phantom-')
        self.addCleanup(shutil.rmtree, self.dir, True)

    def analyse(self, name, records, jobs):
        d = os.path.join(self.dir, name)
        os.makedirs(d, exist_ok=True)
        by_host = fidelity.by_host(records)
        for host, recs in by_host.items():
            fidelity.write(os.path.join(d, host + '.jsonl'), recs)
        return pipeline.analyse([d], pipeline.Options(jobs=jobs))

    def test_begun_with_another_id_joins_its_request(self):
        begun, ended = 'req-environ-4', 'req-context-1'
        self.assertTrue(_two_parts(begun, ended))  # -j2 splits them
        for jobs in (1, 2):
            want = self.analyse('same%d' % jobs, _boot(ended, ended), jobs)
            got = self.analyse('split%d' % jobs, _boot(begun, ended), jobs)
            self.assertEqual([ended], [r['req'] for r in got['requests']])
            self.assertEqual(fidelity.discrete(want), fidelity.discrete(got))
            self.assertEqual(fidelity.timed(want), fidelity.timed(got))
            self.assertEqual(0, got['load']['duplicate_spans'])

    def test_end_naming_the_id_it_began_with(self):
        # the paste filter's req_began: no B needed, and the SQL run
        # before nova's context existed joins the request too
        begun, ended = 'req-environ-4', 'req-context-1'

        def boot(sql_req, began):
            recs = _boot(ended, ended)[1:]
            if began:
                recs[1]['attrs']['req_began'] = began
            recs.insert(
                0,
                _rec(
                    'X',
                    1,
                    T0 + 10,
                    'api-1',
                    'api',
                    11,
                    'sql.query',
                    'a3',
                    sql_req,
                    parent='a1',
                    dur=30,
                    attrs={
                        'fp': '0' * 32,
                        'db': 'nova_api',
                        'kind': 'SELECT',
                        'rows': 1,
                        'many': False,
                        'txn': None,
                        'call': None,
                    },
                ),
            )
            return recs

        for jobs in (1, 2):
            want = self.analyse('same%d' % jobs, boot(ended, None), jobs)
            got = self.analyse('split%d' % jobs, boot(begun, begun), jobs)
            self.assertEqual([ended], [r['req'] for r in got['requests']])
            self.assertEqual(fidelity.discrete(want), fidelity.discrete(got))
            self.assertEqual(fidelity.timed(want), fidelity.timed(got))
            self.assertEqual(1, got['sql']['calls'])

    def test_demo_fixture_has_no_phantom_request(self):
        # the demo (noauth2) wrote 19 such B records in its 4-boot run
        records = fidelity.read_records(fidelity.THREADS)
        ended = {
            r['span']: r['req']
            for r in records
            if r['ph'] == 'X' and r['ev'] == 'api.request'
        }
        phantoms = {
            r['req']: ended[r['span']]
            for r in records
            if r['ph'] == 'B'
            and r['ev'] == 'api.request'
            and r['span'] in ended
            and r['req'] != ended[r['span']]
        }
        self.assertGreater(len(phantoms), 10)
        self.assertTrue(any(_two_parts(a, b) for a, b in phantoms.items()))
        # the same run as if the B records had named the context's id
        fixed = [
            dict(r, req=phantoms.get(r.get('req'), r.get('req')))
            for r in records
        ]
        for jobs in (1, 2):
            want = self.analyse('fixed%d' % jobs, fixed, jobs)
            got = self.analyse('demo%d' % jobs, records, jobs)
            reqs = {r['req'] for r in got['requests']}
            self.assertEqual(set(), reqs & set(phantoms))
            self.assertEqual(fidelity.discrete(want), fidelity.discrete(got))
            self.assertEqual(fidelity.timed(want), fidelity.timed(got))
            # every api.request X joined the request of its id
            self.assertLessEqual(set(ended.values()), reqs)


class AliasTest(testtools.TestCase):
    def test_only_differing_pairs_are_kept(self):
        m = clockpass.HopMatcher(10**6)
        spans = [
            ('h', 'api.request', 1, 'B', 's1', None, 'A', 1),
            ('h', 'api.request', 1, 'B', 's2', None, 'C', 2),
            ('h', 'api.request', 1, 'X', 's1', None, 'B', 3),
            ('h', 'api.request', 1, 'X', 's2', None, 'C', 4),
            # an X without its B (the usual case) keeps nothing
            ('h', 'api.request', 1, 'X', 's3', None, 'D', 5),
        ]
        m.add('f', spans, None)
        self.assertEqual({'A': 'B'}, m.aliases_of())
        self.assertEqual({}, dict(m.rejoin.begun))

    def test_lines_read_by_pass_one(self):
        lines = [
            json.dumps(r, separators=(',', ':')).encode()
            for r in _boot('A', 'B')
        ]
        found = clockpass.rpc_spans(
            lines, 0, clockpass.rpc_span_decoder(False)
        )
        api = [(s[3], s[4], s[6]) for s in found if s[1] == 'api.request']
        self.assertEqual([('B', 'a1', 'A'), ('X', 'a1', 'B')], api)

    def test_an_end_naming_its_begun_id_pairs_alone(self):
        recs = _boot('B', 'B')
        recs[2]['attrs']['req_began'] = 'A'
        lines = [
            json.dumps(r, separators=(',', ':')).encode() for r in recs[1:]
        ]
        m = clockpass.HopMatcher(10**6)
        m.add(
            'f',
            clockpass.rpc_spans(lines, 0, clockpass.rpc_span_decoder()),
            None,
        )
        self.assertEqual({'A': 'B'}, m.aliases_of())
