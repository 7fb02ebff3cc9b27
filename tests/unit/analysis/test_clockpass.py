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
"""Pass 1: the parallel reading by files gives what one process gives."""

import gzip
import os

import fixtures
import testtools

from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from tests import synthetic


class ParallelClockPassTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        synthetic.generate(
            self.dir, seed=8, requests=120, skew_us=3_000_000, bad_input=True
        )
        self.paths, _ = spanfiles.discover([self.dir])
        # many small chunks, so the files interleave
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.ingest.stream.CHUNK_BYTES', 8192
            )
        )

    def test_chunks_in_the_same_order(self):
        one = list(clockpass._chunks(self.paths, True, None))
        self.assertGreater(len(one), 3 * len(self.paths))
        self.assertTrue(any(spans for _i, _n, _h, spans, _w, _c in one))
        for jobs in (2, 3):
            done = []
            many = list(
                clockpass._parallel_chunks(self.paths, jobs, True, done.append)
            )
            self.assertEqual(one, many, jobs)
            self.assertEqual(
                sum(f.size for f in stream.open_files(self.paths)), done[-1]
            )

    def test_same_offsets_and_hops(self):
        # a short horizon: spans leave the matcher while reading
        want = clockpass.clock_pass(self.paths, 2_000_000, jobs=1)
        got = clockpass.clock_pass(self.paths, 2_000_000, jobs=2)
        self.assertEqual(want[0].to_dict(), got[0].to_dict())
        self.assertEqual(want[1:], got[1:])
        self.assertGreater(want[3]['hops'], 0)

    def test_same_line_hashes_in_workers(self):
        # a file read from its end (its lines reversed) and a gzip file
        # cut short: the hashes of the lines in the order pass 2 reads
        with open(self.paths[0], 'rb') as f:
            lines = f.readlines()
        back = os.path.join(self.dir, 'zz-back.jsonl')
        with open(back, 'wb') as f:
            f.writelines(reversed(lines))
        cut = os.path.join(self.dir, 'zz-cut.jsonl.gz')
        data = gzip.compress(b''.join(lines))
        with open(cut, 'wb') as f:
            f.write(data[: len(data) * 2 // 3])
        self.paths, _ = spanfiles.discover([self.dir])
        want = clockpass.clock_pass(
            self.paths, 2_000_000, jobs=1, hashes=True
        )[0].line_hashes
        got = clockpass.clock_pass(self.paths, 2_000_000, jobs=2, hashes=True)[
            0
        ].line_hashes
        self.assertEqual(set(range(len(self.paths))), set(want))
        self.assertEqual(want, got)
        files = stream.open_files(self.paths)
        for f in files:
            lines = []
            while not f.done:
                lines += f.read_chunk()
            self.assertEqual(
                list(clockpass.request_hashes(lines)),
                list(want[f.index]),
                f.name,
            )
            if f.name == 'zz-back.jsonl':
                self.assertIsNotNone(f.backwards)
            if f.name == 'zz-cut.jsonl.gz':
                self.assertIsNotNone(f.error)
        self.assertEqual(
            {},
            clockpass.clock_pass(self.paths, 2_000_000, jobs=2)[0].line_hashes,
        )

    def test_worker_failure_is_reported(self):
        def boom(*_args):
            raise ValueError('boom in worker')

        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.ingest.clockpass.rpc_spans', boom
            )
        )
        exc = self.assertRaises(
            RuntimeError,
            list,
            clockpass._parallel_chunks(self.paths, 2, True, None),
        )
        self.assertIn('boom in worker', str(exc))
