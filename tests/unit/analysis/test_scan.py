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
import importlib
import os
import random
import tempfile

import testtools

from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from tests import synthetic


def _extension():
    try:
        return importlib.import_module('instrument._native._scan')
    except ImportError:
        return None


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
        self.native = _extension()
        if self.native is None:
            if os.environ.get('CI') == 'true':
                self.fail('instrument._native._scan is not built')
            self.skipTest('instrument._native._scan is not built')

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
