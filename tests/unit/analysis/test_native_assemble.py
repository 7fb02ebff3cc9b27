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
"""The request model's ingest in C (instrument._native._assemble,
``Assembler.ingest_*``) against its methods (``complete``, ``begin``,
``sql``): the same answers and the same open requests, record after
record, over random streams (starts after ends, duplicates, records
without a request id, records of requests finalised, failed
statements, empty attrs, records of the reference decoder's type);
and INSTRUMENT_PURE_PYTHON=1 giving the methods themselves.

Skipped when the extension is not built, except under CI=true, where
the machine has a compiler and a missing build is a failure."""

import importlib
import os
import random
import subprocess
import sys

import testtools

from instrument.analysis.ingest import codec
from instrument.analysis.model import requests


def _extension():
    try:
        return importlib.import_module('instrument._native._assemble')
    except ImportError:
        return None


def _record(rng: random.Random, ph: str, sql: bool) -> dict:
    dur = rng.choice((0, 5, rng.randrange(0, 1000)))
    st = rng.choice(('ok', 'ok', 'error'))
    return {
        'v': 1,
        'ph': ph,
        'seq': rng.randrange(1000),
        'ts': rng.randrange(0, 10_000),
        'dur_us': dur if ph == 'X' else None,
        'host': rng.choice(('h1', 'h2')),
        'svc': rng.choice(('nova-api', 'nova-compute')),
        'pid': rng.choice((1, 2)),
        'tid': 1,
        'ev': 'sql.query' if sql else rng.choice(('rpc.call', 'api.request')),
        'span': None if sql else 's%d' % rng.randrange(8),
        'parent': rng.choice((None, 's1', 's2')),
        'req': rng.choice((None, 'r1', 'r2', 'r3')) if not sql else 'r1',
        'greq': None,
        'inst': rng.choice((None, ['i1'])),
        'st': st if ph == 'X' else None,
        'err': (
            {'cls': 'E', 'msg': 'm'} if ph == 'X' and st == 'error' else None
        ),
        'attrs': rng.choice((None, {}, {'a': 1})),
    }


def _state(model: requests.Assembler) -> tuple:
    return (
        [
            (
                req,
                list(r.spans.items()),
                list(r.sql.items()),
                r.sql_errors,
                r.events,
                r.last,
                r.open,
                r.begun,
            )
            for req, r in model.open.items()
        ],
        model.late,
        model.duplicates,
        dict(model.no_request),
    )


def _summary(s) -> list:
    return [(name, getattr(s, name, None)) for name in type(s).__slots__]


class NativeAssembleTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        if _extension() is None:
            if os.environ.get('CI') == 'true':
                self.fail('instrument._native._assemble is not built')
            self.skipTest('instrument._native._assemble is not built')

    def test_random_streams(self):
        rng = random.Random(17)
        for _ in range(200):
            native = requests.Assembler()
            python = requests.Assembler()
            handlers = (
                native.ingest_begin,
                native.ingest_complete,
                native.ingest_sql,
            )
            self.assertNotIn(native.begin, handlers)
            for _ in range(rng.randrange(1, 60)):
                kind = rng.choice(('B', 'X', 'sql'))
                fields = _record(
                    rng, 'B' if kind == 'B' else 'X', kind == 'sql'
                )
                rec = (
                    codec.Record(**fields)
                    if rng.random() < 0.8
                    else codec.SlowRecord(fields)
                )
                ts = fields['ts'] + rng.choice((0, 7))
                if kind == 'B':
                    got = native.ingest_begin(rec, ts, None)
                    want = python.begin(rec, ts, None)
                elif kind == 'X':
                    got = native.ingest_complete(rec, ts)
                    want = python.complete(rec, ts)
                else:
                    got = native.ingest_sql(rec, ts, None)
                    want = python.sql(rec, ts, None)
                self.assertEqual(want, got)
                self.assertEqual(_state(python), _state(native))
                if rng.random() < 0.05 and python.open:
                    # a request finalised: its later records are late
                    req = rng.choice(list(python.open))
                    python.finalise(python.open.pop(req))
                    native.finalise(native.open.pop(req))
            self.assertEqual(
                [_summary(s) for s in python.summaries],
                [_summary(s) for s in native.summaries],
            )

    def test_pure_python_switch(self):
        code = (
            'from instrument.analysis.model import requests; '
            'm = requests.Assembler(); '
            'print(m.ingest_begin == m.begin, m.ingest_sql == m.sql, '
            'm.ingest_complete == m.complete)'
        )
        for value, want in (
            ('1', 'True True True'),
            ('0', 'False False False'),
        ):
            out = subprocess.run(
                [sys.executable, '-c', code],
                capture_output=True,
                text=True,
                check=True,
                env=dict(os.environ, INSTRUMENT_PURE_PYTHON=value),
            ).stdout.strip()
            self.assertEqual(want, out)
