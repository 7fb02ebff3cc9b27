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
"""Pass 2 hands each record to the consumers whose routes take it.

By phase, event (every event but those excluded, when none is named)
and what the record's request id says it belongs to; in the consumers'
order, a handler returning False (a span read twice) stopping the
others; the metadata every partition reads (``shared``) given to the
other partitions too, and nothing else.
"""

import json
import os

import fixtures
import testtools

from instrument import schema
from instrument.analysis import pipeline
from instrument.analysis import routes
from instrument.analysis.ingest import reader
from instrument.analysis.ingest import stream

T0 = 1_700_000_000_000_000


class Recorder:
    """A consumer that notes what it was given."""

    def __init__(
        self,
        name: str,
        route_list: tuple,
        seen: list,
        refuse: frozenset = frozenset(),
    ) -> None:
        self.name = name
        self.routes = route_list
        self.seen = seen
        self.refuse = refuse

    def take(self, rec, ts, cursor):
        self.seen.append(
            (
                self.name,
                rec.ph,
                rec.ev,
                rec.req,
                ts,
                cursor.fname,
                cursor.process.key,
            )
        )
        if rec.span in self.refuse:
            return False
        return None


def record(seq: int, ph: str, ev: str, req=None, span=None, **more):
    rec = {
        'v': 1,
        'ph': ph,
        'seq': seq,
        'ts': T0 + seq,
        'host': 'h',
        'svc': 'compute',
        'pid': 7,
        'ev': ev,
    }
    if req is not None:
        rec['req'] = req
    if span is not None:
        rec['span'] = span
    if ph == 'X':
        rec.update(dur_us=1, st='ok')
    rec.update(more)
    # as the runtime writes them (the partitions find metadata so)
    return json.dumps(rec, separators=(',', ':'))


class RouteTest(testtools.TestCase):
    def test_takes(self):
        every = routes.Route(
            'XB',
            None,
            (routes.REQUEST,),
            'h',
            exclude=frozenset(('sql.query',)),
        )
        self.assertTrue(every.takes('X', 'compute.build', routes.REQUEST))
        self.assertFalse(every.takes('X', 'sql.query', routes.REQUEST))
        self.assertFalse(every.takes('I', 'compute.build', routes.REQUEST))
        self.assertFalse(every.takes('X', 'compute.build', routes.NONE))
        named = routes.Route('C', frozenset(('sql.agg',)), routes.ALL, 'h')
        self.assertTrue(named.takes('C', 'sql.agg', routes.PERIODIC))
        self.assertFalse(named.takes('C', 'sql.dropped', routes.PERIODIC))


class ReaderTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'cmp.jsonl')
        periodic = schema.periodic_req('ComputeManager.x', 'ab' * 16)
        lines = [
            record(1, 'M', 'process.start'),
            record(2, 'X', 'compute.build', req='req-1', span='s1'),
            # the same span again (another seq): a duplicate span
            record(3, 'X', 'compute.build', req='req-1', span='s1'),
            record(4, 'X', 'compute.build', req=periodic, span='s2'),
            record(5, 'X', 'compute.build', span='s3'),
            record(6, 'X', 'sql.query', req='req-1', span='q1', parent='s1'),
            record(7, 'M', 'sql.fingerprint', attrs={'fp': 'f'}),
        ]
        with open(self.path, 'w') as f:
            f.write('\n'.join(lines) + '\n')

    def read(self, consumers, part=0, nparts=1):
        part_reader = reader.PartReader(
            {'h': 5}, part, nparts, pipeline.Options(), consumers
        )
        part_reader.read(stream.open_files([self.path], {0: 5}))
        return part_reader

    def test_by_phase_event_and_context_in_order(self):
        seen = []
        first = Recorder(
            'first',
            (
                routes.Route(
                    'X',
                    None,
                    (routes.REQUEST, routes.NONE),
                    'take',
                    exclude=frozenset(('sql.query',)),
                ),
            ),
            seen,
            refuse=frozenset(('s1',)),
        )
        second = Recorder(
            'second', (routes.Route('X', None, routes.ALL, 'take'),), seen
        )
        part = self.read((first, second))
        got = [(name, ev, req) for name, _ph, ev, req, *_rest in seen]
        periodic = schema.periodic_req('ComputeManager.x', 'ab' * 16)
        self.assertEqual(
            [
                # the first refuses s1 (both times): the second never gets it
                ('first', 'compute.build', 'req-1'),
                ('first', 'compute.build', 'req-1'),
                ('second', 'compute.build', periodic),
                ('first', 'compute.build', None),
                ('second', 'compute.build', None),
                ('second', 'sql.query', 'req-1'),
            ],
            got,
        )
        self.assertEqual(2, part.duplicate_spans)
        # the time corrected by the host's offset, the file and process
        _n, _ph, _ev, _req, ts, fname, key = seen[0]
        self.assertEqual(
            (T0 + 2 + 5, 'cmp.jsonl', ('h', 7, T0 + 1)), (ts, fname, key)
        )

    def test_shared_metadata_in_every_partition(self):
        seen = []
        shared = Recorder(
            'fp',
            (
                routes.Route(
                    'M',
                    frozenset(('sql.fingerprint',)),
                    routes.ALL,
                    'take',
                    shared=True,
                ),
            ),
            seen,
        )
        counted = Recorder(
            'all', (routes.Route('M', None, routes.ALL, 'take'),), seen
        )
        self.read((shared, counted), part=1, nparts=2)
        # the other partition: the shared route only (no process yet:
        # its process.start is counted by partition 0)
        self.assertEqual(
            ['fp'], [s[0] for s in seen if s[2] == 'sql.fingerprint']
        )
        self.assertEqual([], [s for s in seen if s[0] == 'all'])
