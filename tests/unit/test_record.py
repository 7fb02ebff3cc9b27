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
import os

import fixtures
import msgspec
import orjson
import testtools

from instrument import schema
from instrument.runtime import record


def _span(**changes) -> list:
    rec = [
        'X',
        1795000000000000,
        1234,
        'cmp-1',
        'compute',
        77,
        'compute.spawn',
        0x12345678_00000002,
        0x12345678_00000001,
        'req-5d1f6c43-7b7e-4c84-9a51-9a8c6f6a0f11',
        None,
        ['0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77'],
        'ok',
        None,
        {'selected': ['h1'], 'n': 3},
        0,
        None,
    ]
    for index, value in changes.items():
        rec[getattr(record, index)] = value
    return rec


class EncodeTest(testtools.TestCase):
    def decode(self, data: bytes) -> list:
        self.assertTrue(data.endswith(b'\n'))
        return [
            schema.validate(json.loads(line)) for line in data.splitlines()
        ]

    def test_lines_are_the_schema_dicts(self):
        batch = [
            _span(),
            _span(
                I_ERR=('nova.exception.X', 'bad "x"\né'),
                I_ST='error',
                I_ATTRS=None,
            ),
        ]
        lines = self.decode(record.encode_batch(batch, 7, 42))
        self.assertEqual(
            [record.to_dict(batch[0], 7, 42), record.to_dict(batch[1], 8, 42)],
            lines,
        )
        self.assertEqual('123456780000000', lines[0]['span'][:15])

    def test_odd_values_are_kept_not_lost(self):
        attrs = {
            'when': datetime.datetime(2026, 1, 2, 3, 4, 5),
            7: 'int key',
            'big': 2**70,
            'obj': object,
        }
        [line] = self.decode(record.encode_batch([_span(I_ATTRS=attrs)], 1, 1))
        self.assertEqual(2**70, line['attrs']['big'])
        self.assertEqual('int key', line['attrs']['7'])
        self.assertIn('2026-01-02', line['attrs']['when'])

    def test_unencodable_record_is_written_with_the_reason(self):
        loop = {}
        loop['self'] = loop
        [line] = self.decode(record.encode_batch([_span(I_ATTRS=loop)], 1, 1))
        self.assertIn('unencodable', line['attrs'])
        self.assertEqual('compute.spawn', line['ev'])

    def test_without_orjson_the_same_lines(self):
        batch = [_span(), _span(I_ATTRS={'a': [1, 'b', None, True]})]
        fast = record.encode_batch(batch, 1, 9)
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.record.orjson', None)
        )
        slow = record.encode_batch(batch, 1, 9)
        self.assertEqual(
            [json.loads(x) for x in fast.splitlines()],
            [json.loads(x) for x in slow.splitlines()],
        )


class BatchEncoderTest(testtools.TestCase):
    """Issue 31: a batch is encoded in one msgspec call from structs,
    with the bytes of the record-by-record dicts."""

    def _batch(self) -> list:
        return [
            _span(),
            _span(I_PARENT=None, I_INST=('a', 'b'), I_ATTRS={}),
            _span(
                I_ERR=('nova.exception.X', 'bad "x"\n\u00e9'),
                I_ST='error',
                I_ATTRS={7: 'int key', 'f': 0.1},
            ),
            tuple(
                _span(
                    I_PH='B', I_DUR=None, I_ST=None, I_SPAN='00000000000000ab'
                )
            )[: record.SIZE],
            record.meta(
                'process.start', 'h', 's', 5, {'x': [1, 2.5, None, 'a\u2028b']}
            ),
            record.complete(
                1,
                2,
                'h',
                's',
                'sql.query',
                7,
                None,
                'r',
                'g',
                None,
                'ok',
                None,
                {'n': 2**70},
            ),
            record.instant(
                1, 'h', 's', None, 'ev', None, None, None, None, None
            ),
            record.counter('sink.drops', None, None, 4, {'file': 1}),
        ]

    def test_no_dict_per_record(self):
        batch = self._batch()
        want = record._encode_each(batch, 3, 77)
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.record.to_dict', _no_dict)
        )
        self.assertEqual(want, record.encode_lines(batch, 3, 77))

    def test_without_msgspec_the_same_bytes(self):
        batch = self._batch()
        fast = record.encode_lines(batch, 3, 77)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.record._encode_structs', None
            )
        )
        self.assertEqual(fast, record.encode_lines(batch, 3, 77))

    def test_a_batch_msgspec_refuses_goes_record_by_record(self):
        batch = self._batch()
        batch[1] = _span(I_ATTRS={'path': os.fsdecode(b'a\xff')})
        data, lost = record.encode_lines(batch, 1, 1)
        self.assertEqual(0, lost)
        lines = [json.loads(raw) for raw in data.splitlines()]
        self.assertEqual(
            list(range(1, len(batch) + 1)), [line['seq'] for line in lines]
        )
        self.assertEqual('a\\xff', lines[1]['attrs']['path'])


def _no_dict(*args):
    raise AssertionError('a dict was built for one record')


class UnencodableRecordTest(testtools.TestCase):
    """One record that cannot be UTF-8 encoded never costs its batch."""

    # A spawn failure on a file name that is not UTF-8: os.fsdecode
    # turns the byte into a lone surrogate, which UTF-8 cannot encode.
    NAME = os.fsdecode(b'/var/lib/nova/instances/\xff-disk')

    def _batch(self) -> list:
        batch = [_span(I_ATTRS={'n': n}) for n in range(1000)]
        batch[500] = _span(
            I_ST='error',
            I_ATTRS={'n': 500},
            I_ERR=('OSError', 'No such file: ' + self.NAME),
        )
        # One more lone surrogate, outside the surrogateescape range,
        # in attrs (a key and a value).
        batch[700] = _span(I_ATTRS={'n': 700, 'path\ud800': '\udbff'})
        return batch

    def _check(self, data: bytes, lost: int) -> None:
        self.assertEqual(0, lost)
        data.decode('utf-8')  # strict: every line is valid UTF-8
        lines = data.splitlines()
        self.assertEqual(1000, len(lines))
        for raw in lines:
            # The strict parsers the analyser uses accept every line.
            self.assertEqual(json.loads(raw), orjson.loads(raw))
            msgspec.json.decode(raw)
        recs = [json.loads(raw) for raw in lines]
        self.assertEqual(list(range(1, 1001)), [r['seq'] for r in recs])
        self.assertEqual(list(range(1000)), [r['attrs']['n'] for r in recs])
        # Written out the way Python shows the string, nothing lost.
        self.assertEqual(
            'No such file: /var/lib/nova/instances/\\xff-disk',
            recs[500]['err']['msg'],
        )
        self.assertEqual('error', recs[500]['st'])
        self.assertEqual('\\udbff', recs[700]['attrs']['path\\ud800'])

    def test_lone_surrogate_costs_nothing_with_orjson(self):
        self.assertIsNotNone(record.orjson)
        self._check(*record.encode_lines(self._batch(), 1, 42))

    def test_lone_surrogate_costs_nothing_without_orjson(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.record.orjson', None)
        )
        self._check(*record.encode_lines(self._batch(), 1, 42))

    def test_a_record_beyond_saving_is_left_out_and_counted(self):
        batch = [_span(I_ATTRS={'n': n}) for n in range(5)]
        batch[2] = _span(I_INST=5)  # not a list of uuids: to_dict fails

        class Unprintable:
            def __str__(self):
                raise RuntimeError('no text')

        batch[3] = _span(I_ATTRS={'n': 3, 'obj': Unprintable()})
        data, lost = record.encode_lines(batch, 1, 42)
        self.assertEqual(1, lost)
        recs = [json.loads(raw) for raw in data.splitlines()]
        # The seq of the record left out is missing: a gap the analyser
        # counts; the unprintable one is kept with the reason.
        self.assertEqual([1, 2, 4, 5], [r['seq'] for r in recs])
        self.assertIn('unencodable', recs[2]['attrs'])

    def test_safe_text_for_other_encoders(self):
        self.assertEqual(
            'a\\xffb\\ud800',
            record.safe_text(os.fsdecode(b'a\xffb') + '\ud800'),
        )
        same = 'nova.exception.Foo: é'
        self.assertIs(same, record.safe_text(same))
