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
"""The operations of issue 32 item 10 on span files real nova wrote.

``tests/data/operations`` holds what tests/functional/nova/
test_operations.py recorded (``INSTRUMENT_RECORD_OPERATIONS=<dir>``),
in eventlet and native threads modes, without SQL timing: a boot given
up after reschedules (MaxRetriesExceeded, AllocationUpdateFailed),
cross-cell moves with their confirm and revert, an unshelve of a server
never offloaded and a volume-backed shelve, soft delete, restore, force
delete, volume attach and detach, a live migration's abort, requests
refused before the compute API; and beside each, what the API said of
the requests the test checked (``.truth.json``); and a cross-cell
confirm and revert whose conductor task failed on its own.  The analyser must
read every one of them as the API did, and leave no request incomplete
(every operation had finished when the files were taken).
"""

import glob
import json
import os

import testtools

from instrument.analysis import pipeline

DATA = os.path.join(
    os.path.dirname(__file__), os.pardir, os.pardir, 'data', 'operations'
)
RECORDINGS = sorted(glob.glob(os.path.join(DATA, '*.jsonl.gz')))


class RecordedOperationsTest(testtools.TestCase):
    def test_there_are_recordings_of_both_modes(self):
        names = [os.path.basename(p) for p in RECORDINGS]
        self.assertEqual(8, len([n for n in names if '.threads.' in n]))
        self.assertEqual(8, len([n for n in names if '.eventlet.' in n]))

    def test_each_request_as_the_api_said(self):
        for path in RECORDINGS:
            name = os.path.basename(path)
            with open(path.replace('.jsonl.gz', '.truth.json')) as f:
                truth = json.load(f)
            self.assertTrue(truth, name)
            report = pipeline.analyse([path], pipeline.Options(jobs=1))
            rows = {r['req']: r for r in report['requests']}
            for req, want in truth.items():
                row = rows[req]
                self.assertEqual(want['kind'], row['kind'], (name, req))
                self.assertEqual(
                    {want['state']},
                    {i['state'] for i in row['instances']},
                    (name, req, row['instances']),
                )
                if want['cause']:
                    [inst] = row['instances']
                    self.assertTrue(
                        inst['cause']['cls'].endswith(want['cause']),
                        (name, req, inst),
                    )
            self.assertEqual(
                [],
                [
                    (r['req'], r['kind'])
                    for r in rows.values()
                    if r['state'] == 'incomplete'
                ],
                name,
            )
