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
"""Pass 2's partitioning of requests between workers."""

import json
import os

import fixtures
import testtools

from instrument.analysis import pipeline


def _line(**kw):
    rec = {'v': 1, 'ph': 'X', 'seq': 1, 'ts': 1_700_000_000_000_000,
           'dur_us': 10, 'host': 'h1', 'svc': 'api', 'pid': 7,
           'ev': 'api.request', 'span': '00000000000000a1', 'st': 'ok'}
    rec.update(kw)
    return json.dumps(rec, separators=(',', ':')) + '\n'


class PartitionTest(testtools.TestCase):

    def test_short_request_ids_stay_in_one_worker(self):
        # The B and X records of a span differ after the request id;
        # the partition key must be the id alone.
        d = self.useFixture(fixtures.TempDir()).path
        seq = 0
        with open(os.path.join(d, 'api.jsonl'), 'w') as f:
            for n in range(60):
                req = 'req-%d' % n
                sid = '%016x' % (n + 1)
                seq += 1
                f.write(_line(ph='B', seq=seq, ts=1_700_000_000_000_000 +
                              n * 1000, span=sid, req=req, dur_us=None,
                              st=None, attrs={'method': 'GET'}))
                seq += 1
                f.write(_line(seq=seq, ts=1_700_000_000_000_000 +
                              n * 1000, span=sid, req=req, dur_us=500,
                              attrs={'status': 200}))
        one = pipeline.analyse([d], pipeline.Options(jobs=1))
        two = pipeline.analyse([d], pipeline.Options(jobs=2))
        self.assertEqual(60, len(one['requests']))
        self.assertEqual(0, one['load']['duplicate_spans'])

        def rows(rep):
            return sorted((r['req'], r['latency_us'], r['state'])
                          for r in rep['requests'])
        self.assertEqual(rows(one), rows(two))
        self.assertEqual([500] * 60, [r[1] for r in rows(two)])
