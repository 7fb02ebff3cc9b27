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
"""Tests of the event encoding (JSON lines, orjson or json)."""

import datetime
import json

import fixtures
import testtools

from instrument import record
from instrument import schema


def _span(**changes) -> list:
    rec = ['X', 1795000000000000, 1234, 'cmp-1', 'compute', 77,
           'compute.spawn', 0x12345678_00000002, 0x12345678_00000001,
           'req-5d1f6c43-7b7e-4c84-9a51-9a8c6f6a0f11', None,
           ['0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77'], 'ok', None,
           {'selected': ['h1'], 'n': 3}, 0, None]
    for index, value in changes.items():
        rec[getattr(record, index)] = value
    return rec


class EncodeTest(testtools.TestCase):

    def decode(self, data: bytes) -> list:
        self.assertTrue(data.endswith(b'\n'))
        return [schema.validate(json.loads(line))
                for line in data.splitlines()]

    def test_lines_are_the_schema_dicts(self):
        batch = [_span(), _span(I_ERR=('nova.exception.X', 'bad "x"\né'),
                                I_ST='error', I_ATTRS=None)]
        lines = self.decode(record.encode_batch(batch, 7, 42))
        self.assertEqual([record.to_dict(batch[0], 7, 42),
                          record.to_dict(batch[1], 8, 42)], lines)
        self.assertEqual('123456780000000', lines[0]['span'][:15])

    def test_odd_values_are_kept_not_lost(self):
        attrs = {'when': datetime.datetime(2026, 1, 2, 3, 4, 5),
                 7: 'int key', 'big': 2 ** 70, 'obj': object}
        [line] = self.decode(record.encode_batch(
            [_span(I_ATTRS=attrs)], 1, 1))
        self.assertEqual(2 ** 70, line['attrs']['big'])
        self.assertEqual('int key', line['attrs']['7'])
        self.assertIn('2026-01-02', line['attrs']['when'])

    def test_unencodable_record_is_written_with_the_reason(self):
        loop = {}
        loop['self'] = loop
        [line] = self.decode(record.encode_batch(
            [_span(I_ATTRS=loop)], 1, 1))
        self.assertIn('unencodable', line['attrs'])
        self.assertEqual('compute.spawn', line['ev'])

    def test_without_orjson_the_same_lines(self):
        batch = [_span(), _span(I_ATTRS={'a': [1, 'b', None, True]})]
        fast = record.encode_batch(batch, 1, 9)
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.record.orjson', None))
        slow = record.encode_batch(batch, 1, 9)
        self.assertEqual([json.loads(x) for x in fast.splitlines()],
                         [json.loads(x) for x in slow.splitlines()])
