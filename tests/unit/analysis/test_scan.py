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
"""Pass 1's request id hashes in C (instrument._native._scan) against
their pure-Python twin (``clockpass.py_request_hashes``)."""

import array
import random
import tempfile
from unittest import mock

import testtools

from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from tests import native
from tests import synthetic

# lines at the edges of the search: no id, a service log line, an id
# without its closing quote (40 bytes taken), one closed at the 256th
# byte and one past it, ids cut by the line's end, escapes
EDGES = [
    b'{"v":1,"ph":"X","req":"req-1","ev":"x"}\n',
    b'{"v":1,"ph":"X","ev":"x"}\n',
    b'2023-11-14 22:13:19 INFO nova {"v":1,"req":"req-2"}\n',
    b'2023-11-14 22:13:19 INFO nova "req":"req-3" {"v":1}\n',
    b'2023-11-14 22:13:19 INFO nova no record\n',
    b'{"req":"' + b'a' * 300 + b'"}\n',
    b'{"req":"' + b'b' * 255 + b'"}\n',
    b'{"req":"' + b'c' * 256 + b'"}\n',
    b'{"req":"short',
    b'{"req":"',
    b'{"req":"\\"quoted"}\n',
    b'{"req":"x"',
    b'x{"v":',
    b'{',
    b'{"v":1,"req":"r1","req":"r2"}\n',
    b'\xff\xfe{"v":1,"req":"\xe9t\xe9"}\n',
]


class ScanTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.native = native.extension(self, '_scan')

    def _same(self, lines):
        want = clockpass.py_request_hashes(lines)
        got = array.array('I')
        got.frombytes(self.native.request_hashes(lines))
        self.assertEqual(list(want), list(got))
        return want

    def test_edges(self):
        want = self._same(EDGES)
        self.assertEqual(clockpass.NO_REQ, want[1])
        self.assertEqual(clockpass.NO_REQ, want[4])
        self.assertNotEqual(want[0], want[2])
        self.assertEqual(len(EDGES), len(want))

    def test_random_lines(self):
        rnd = random.Random(31)
        alphabet = b'{}"req:v,1ab\\\n'
        lines = []
        for _ in range(3000):
            n = rnd.randrange(1, 400)
            line = bytes(rnd.choice(alphabet) for _ in range(n))
            if rnd.random() < 0.5:
                k = rnd.randrange(0, n)
                line = line[:k] + b'{"v":1,"req":"' + line[k:]
            lines.append(line)
        self._same(lines)

    def test_generated_logs(self):
        with tempfile.TemporaryDirectory() as tmp:
            synthetic.generate(tmp, requests=20, seed=5)
            paths, _ = spanfiles.discover([tmp])
            found = 0
            for f in stream.open_files(paths):
                lines = []
                while not f.done:
                    lines += f.read_chunk()
                want = self._same(lines)
                found += len(want) - want.count(clockpass.NO_REQ)
            self.assertGreater(found, 1000)

    def test_not_bytes_falls_back(self):
        self.assertRaises(
            TypeError, self.native.request_hashes, [bytearray(b'{}')]
        )
        self.assertEqual(
            list(clockpass.py_request_hashes([bytearray(b'{"req":"r"}')])),
            list(clockpass.request_hashes([bytearray(b'{"req":"r"}')])),
        )


# a chunk for rpc_spans: an RPC span's start and its end that lost its
# event name (read with its start's), an api.request, a process.start,
# a service log line with an RPC span, lines it skips
CHUNK = [
    b'{"v":1,"ph":"B","ts":10,"host":"h1","ev":"rpc.call","span":"s1",'
    b'"req":"req-1"}\n',
    b'{"v":1,"ph":"X","ts":10,"dur_us":5,"host":"h1","span":"s1",'
    b'"req":"req-1"}\n',
    b'{"v":1,"ph":"X","ts":11,"dur_us":2,"host":"h2","ev":"rpc.dispatch",'
    b'"span":"s2","parent":"s1","req":"req-1"}\n',
    b'{"v":1,"ph":"X","ts":12,"dur_us":2,"host":"h2","ev":"db.query",'
    b'"span":"s3","req":"req-1"}\n',
    b'{"v":1,"ph":"M","ts":1,"host":"h2","ev":"process.start","pid":7}\n',
    b'{"v":1,"ph":"B","ts":9,"host":"h1","ev":"api.request","span":"a1",'
    b'"req":"req-1"}\n',
    b'2023-11-14 22:13:19 INFO nova {"v":1,"ph":"X","ts":13,"dur_us":1,'
    b'"host":"h1","ev":"rpc.cast","span":"s4","req":"req-2"}\n',
    b'2023-11-14 22:13:19 INFO nova {"v":1,"ph":"M","ts":2,"host":"h1",'
    b'"ev":"process.start","pid":8}\n',
    b'2023-11-14 22:13:19 INFO nova plain\n',
    b'{"ph":"X","v":1,"ts":14,"dur_us":1,"host":"h1","ev":"rpc.call",'
    b'"span":"s5","st":"timeout"}\n',
    b'{"v":1,"ph":"X","ts":15,"dur_us":1,"host":"h1"'
    + b' ' * 200
    + b',"ev":"rpc.call","span":"s6"}\n',
    b'{"v":1,"ph":"X","ts":15,"dur_us":1,"host":"h1","span":"nope"}\n',
]


class CandidatesTest(testtools.TestCase):
    """``rpc_candidates`` in C against its twin, and ``rpc_spans`` with
    and without it."""

    def setUp(self):
        super().setUp()
        self.native = native.extension(self, '_scan')

    def _same(self, lines):
        for ends in (False, True):
            want = clockpass.py_rpc_candidates(lines, ends)
            got = array.array('I')
            got.frombytes(self.native.rpc_candidates(lines, ends))
            self.assertEqual(want, list(got))
            with mock.patch.object(clockpass, '_SCAN', self.native):
                picked = clockpass.rpc_candidates(lines, ends)
            self.assertEqual(want, list(picked))

    def _spans(self, lines, native):
        decode = clockpass.rpc_span_decoder(True)
        # (the C, loaded under INSTRUMENT_PURE_PYTHON=1 too)
        scan = self.native if native else None
        with mock.patch.object(clockpass, '_SCAN', scan):
            if native:
                self.assertIsNotNone(clockpass.rpc_candidates(lines, True))
            else:
                self.assertIsNone(clockpass.rpc_candidates(lines, True))
            return (
                clockpass.rpc_spans(lines, 40, decode, {}),
                clockpass.rpc_spans(lines, 40, decode, None),
            )

    def _same_spans(self, lines):
        want = self._spans(lines, False)
        self.assertEqual(want, self._spans(lines, True))
        return want

    def test_edges(self):
        self._same(EDGES + CHUNK)
        self.assertEqual(
            [0, 1, 2, 4, 5, 6, 7, 9, 10, 11],
            clockpass.py_rpc_candidates(CHUNK, True),
        )
        self.assertEqual(
            [0, 2, 4, 5, 6, 7, 9, 10],
            clockpass.py_rpc_candidates(CHUNK, False),
        )

    def test_random_lines(self):
        rnd = random.Random(32)
        pieces = [
            b'"ev":"rpc.',
            b'"ev":"api.',
            b'"ev":"process.start"',
            b'"ev":',
            b'{"v":1,"ph":"X',
            b'{"v":1,"ph":"',
            b'x',
            b' ' * 150,
        ]
        lines = []
        for _ in range(3000):
            k = rnd.randrange(0, 5)
            lines.append(b''.join(rnd.choice(pieces) for _ in range(k)))
        self._same(lines)

    def test_rpc_spans_same(self):
        with_begun, without = self._same_spans(CHUNK)
        got = [(f[4], f[-1]) for f in with_begun]
        self.assertIn(('s1', 42), got)  # the end read with its start's
        self.assertNotIn(('s1', 42), [(f[4], f[-1]) for f in without])
        self.assertIn(('s6', 51), got)
        self.assertIn(('a1', 46), got)
        self.assertIn((None, 48), got)  # process.start of a log line

    def test_generated_logs(self):
        with tempfile.TemporaryDirectory() as tmp:
            synthetic.generate(tmp, requests=20, seed=6)
            paths, _ = spanfiles.discover([tmp])
            found = 0
            for f in stream.open_files(paths):
                lines = []
                while not f.done:
                    lines += f.read_chunk()
                self._same(lines)
                found += len(self._same_spans(lines)[0])
            self.assertGreater(found, 100)

    def test_cut_short_lines_skipped(self):
        # a file cut short by a crash may end anywhere in a line, the
        # writer's prefix included: nothing read from it, nothing raised
        cut = [b'{"v":1,"ph":"', b'{"v":1,"ph":', b'{"v":1,"ph":"X']
        with_begun, without = self._same_spans(list(CHUNK) + cut)
        self.assertEqual(self._same_spans(list(CHUNK))[0], with_begun)

    def test_not_bytes_falls_back(self):
        lines = [bytearray(line) for line in CHUNK]
        self.assertRaises(TypeError, self.native.rpc_candidates, lines, True)
        self.assertIsNone(clockpass.rpc_candidates(lines, True))
        self.assertEqual(
            clockpass.rpc_spans(list(CHUNK), 40, lambda raw: None, {}),
            clockpass.rpc_spans(lines, 40, lambda raw: None, {}),
        )
