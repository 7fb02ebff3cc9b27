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
"""The writer's lines in C (instrument._native._lines) against their
pure-Python twin (``record._lines_fast``): the same bytes, record by
record and batch by batch, over generated records of every builder;
the same refusals; and INSTRUMENT_PURE_PYTHON=1 choosing the twin.

Skipped when the extension is not built, except under CI=true, where
the machine has a compiler and a missing build is a failure."""

import collections
import datetime
import enum
import os
import random
import subprocess
import sys

import fixtures
import msgspec
import testtools

from instrument import _native
from instrument import schema
from instrument.runtime import buffer
from instrument.runtime import record
from tests import native
from tests.unit.test_record import _span


class Color(enum.Enum):
    RED = 'red'


class Level(enum.IntEnum):
    HIGH = 3


class Text(str):
    pass


class Number(int):
    pass


class Items:
    """An iterable that is neither a list nor a tuple."""

    def __iter__(self):
        return iter(['i-1', 'i-2'])


class Empty:
    """Truthy, yet lists to nothing."""

    def __iter__(self):
        return iter(())


def _loop() -> dict:
    loop: dict = {}
    loop['self'] = loop
    return loop


def _deep(levels: int):
    value: object = 'leaf'
    for n in range(levels):
        value = {'k%d' % n: [value, n]}
    return value


STRINGS = [
    '',
    'compute.spawn',
    'req-5d1f6c43-7b7e-4c84-9a51-9a8c6f6a0f11',
    'quote " inside',
    'back\\slash',
    ''.join(chr(c) for c in range(32)) + '\x7f',
    '\b\t\n\f\r',
    'caf\u00e9 \u4e2d\u6587 \u2028\u2029 \U0001f600',
    '</script>&\'',
    'x' * 300 + '\n' + '"' * 40,
    Text('a str subclass'),
    Color.RED,
]
LONE = [os.fsdecode(b'disk-\xff'), 'a\ud800b', '\udbff']
INTS = [
    0,
    1,
    -1,
    7,
    2**31,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    2**70,
    True,
    False,
    Number(5),
    Level.HIGH,
]
OTHER = [
    0.5,
    -0.0,
    1e300,
    float('nan'),
    float('inf'),
    datetime.datetime(2026, 1, 2, 3, 4, 5),
    b'raw',
    object,
    msgspec.UNSET,
]
CONTAINERS = [
    [],
    (),
    {},
    ['a', 1, None],
    ('t', 2.5),
    {'a': 1, 'b': [1.5, True, None, 'x\ny'], 'c': {'d': {}}},
    {7: 'int key'},
    {'a': 1, 2: 'b'},
    {'n': 2**70},
    {'x': [1, 2.5, None, 'a\u2028b']},
    {'s': {'set'}},
    collections.OrderedDict(a=1),
    _deep(3),
    _deep(20),
    _loop(),
    {'path': LONE[0]},
    {'k\ud800': 1},
    {'when': datetime.date(2026, 1, 2), 'obj': object()},
]
SPANS = [
    None,
    0,
    1,
    0x12345678_00000002,
    2**64 - 1,
    2**64,
    -1,
    '00000000000000ab',
    True,
    1.5,
]
ERRS = [
    None,
    ('nova.exception.X', 'bad "x"\n\u00e9'),
    ['C', None],
    ('C', 'm', 'extra'),
    ('only',),
    'ab',
    {0: 'zero', 1: 'one'},
    ('E', LONE[1]),
    5,
]
INSTS = [
    None,
    [],
    (),
    ['0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77'],
    ('a', 'b'),
    {'only'},
    frozenset(),
    'abc',
    '',
    0,
    5,
    Items(),
    Empty(),
    [1, None, {'x': 1}, 2**70],
]


class Generator:
    """Records of every builder, with values drawn from the lists
    above (mostly ordinary ones, as the hot path makes them)."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def pick(self, ordinary, odd=()):
        pools = [ordinary, STRINGS, INTS, OTHER, CONTAINERS, LONE, odd]
        if self.rnd.random() < 0.95:
            return self.rnd.choice(ordinary)
        return self.rnd.choice(self.rnd.choice([p for p in pools if p]))

    def text(self):
        return self.pick(STRINGS[:10] + [None])

    def number(self):
        return self.pick([0, 1795000000000000, 1234, None])

    def attrs(self):
        return self.pick(CONTAINERS[:12] + [None, {'selected': ['h1']}])

    def record(self):
        kind = self.rnd.randrange(7)
        t, n = self.text, self.number
        if kind == 0:
            rec = record.instant(
                n(), t(), t(), n(), t(), self.span(), t(), t(),
                self.inst(), self.attrs(),
            )  # fmt: skip
        elif kind == 1:
            rec = record.complete(
                n(), n(), t(), t(), t(), self.span(), self.span(), t(),
                t(), self.inst(), t(), self.err(), self.attrs(),
            )  # fmt: skip
        elif kind == 2:
            rec = record.meta(t(), t(), t(), n(), self.attrs())
        elif kind == 3:
            rec = record.counter(t(), t(), t(), n(), self.attrs(), t())
        else:
            rec = [
                self.pick(['X', 'B']), n(), n(), t(), t(), n(), t(),
                self.span(), self.span(), t(), t(), self.inst(), t(),
                self.err(), self.attrs(), 12345, None,
            ]  # fmt: skip
            if kind == 5:
                rec = record.begin_snapshot(rec)
            elif kind == 6 and self.rnd.random() < 0.2:
                rec = tuple(rec[: self.rnd.choice([14, 15, 16])])
        return rec

    def span(self):
        return self.pick([None, 0x12345678_00000002, 1], SPANS)

    def err(self):
        return self.pick([None, ('nova.exception.X', 'msg')], ERRS)

    def inst(self):
        return self.pick([None, ['0b6c3a52'], ('a', 'b')], INSTS)


def _run(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared, not hidden
        return exc


class NativeLinesTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.native = native.extension(self, '_lines')

    def c_lines(self, batch, seq, pid):
        return self.native.lines(
            batch,
            seq,
            pid,
            schema.SCHEMA_VERSION,
            record._encode_value or msgspec.json.Encoder(enc_hook=str).encode,
            msgspec.UNSET,
        )

    def compare(self, batch, seq, pid) -> bool:
        """The C bytes are the twin's; True when both wrote the batch.
        Either refuses what the other refuses (UNSET, which a struct
        leaves out, the C refuses alone: the twin writes it)."""
        want = _run(record._lines_fast, batch, seq, pid)
        got = _run(self.c_lines, batch, seq, pid)
        if isinstance(want, bytes):
            if isinstance(got, Exception) and _has_unset(batch):
                return False
            self.assertEqual(want, got, batch)
            return True
        self.assertIsInstance(got, Exception, batch)
        return False

    def test_generated_records_one_by_one(self):
        gen = Generator(31)
        written = refused = 0
        for n in range(6000):
            if self.compare([gen.record()], n, 4242):
                written += 1
            else:
                refused += 1
        # Most are written (the comparison means something) and the
        # refusals are exercised too.
        self.assertGreater(written, 4000)
        self.assertGreater(refused, 100)

    def test_generated_batches(self):
        gen = Generator(7)
        batches = [
            [gen.record() for _ in range(gen.rnd.randrange(1, 40))]
            for _ in range(200)
        ]
        written = sum(
            self.compare(batch, n * 100, 17) for n, batch in enumerate(batches)
        )
        self.assertGreater(written, 20)
        # The writer's own call: the same (data, lost) either way,
        # whatever the batch holds (a batch the C refuses falls back).
        with_c = [record.encode_lines(b, n, 17) for n, b in enumerate(batches)]
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.record._lines_c', None)
        )
        for n, batch in enumerate(batches):
            self.assertEqual(
                record.encode_lines(batch, n, 17), with_c[n], batch
            )

    def test_every_escape_and_value_kind(self):
        batch = []
        for value in STRINGS + INTS + OTHER + CONTAINERS + LONE:
            for index in ('I_EV', 'I_REQ', 'I_ATTRS', 'I_ST', 'I_TS'):
                rec = _span()
                rec[getattr(record, index)] = value
                batch.append(rec)
        for value in SPANS:
            batch.append(_span(I_SPAN=value, I_PARENT=value))
        for value in ERRS:
            batch.append(_span(I_ERR=value))
        for value in INSTS:
            batch.append(_span(I_INST=value))
        for rec in batch:
            self.compare([rec], 1, 1)
        ordinary = [
            r
            for r in batch
            if isinstance(_run(_one, r), bytes) and not _has_unset([r])
        ]
        self.assertTrue(self.compare(ordinary, 5, 6))

    def test_control_characters_as_msgspec_escapes_them(self):
        for code in range(0x80):
            rec = _span(I_EV=chr(code) + 'x', I_ATTRS={chr(code): chr(code)})
            self.assertTrue(self.compare([rec], 1, 1), code)
        line = self.c_lines([_span(I_EV='\n\x01"\\\x7f\u00e9')], 1, 1)
        self.assertIn(b'"ev":"\\n\\u0001\\"\\\\\x7f\xc3\xa9"', line)

    def test_an_escape_at_every_place_of_a_string(self):
        # The C scans 8 bytes at a time, then the last ones: each
        # special character at each place of strings of 1 to 25 bytes.
        batch = []
        for char in ('"', '\\', '\x00', '\x1f', '\n', ' ', '\x7f', '\u00e9'):
            for length in range(1, 26):
                texts = [
                    'a' * at + char + 'b' * (length - at - 1)
                    for at in range(length)
                ]
                batch.append(_span(I_EV=texts[-1], I_ATTRS={'t': texts}))
        self.assertTrue(self.compare(batch, 1, 1))

    def test_values_repeated_from_record_to_record(self):
        # The C copies the text of a field's value that is the same
        # object as the last one written in that field: same objects,
        # equal ones that are not the same, values that change, a dict
        # written again through msgspec (its text cut and rewritten)
        # between them, and the version and pid of every line.
        host = 'compute-"1"\n'
        other = ''.join(['compute-"1"', '\n'])
        req = 'req-\u00e9'
        big = 2**64 + 1
        batch = []
        for n in range(60):
            batch.append(
                _span(
                    I_HOST=host if n % 3 else other,
                    I_SVC=('compute', 'api')[n % 2],
                    I_EV=STRINGS[n % 10],
                    I_TID=(None, 7, big, 2**63)[n % 4],
                    I_REQ=req if n % 5 else None,
                    I_GREQ=STRINGS[(n // 2) % 10],
                    I_ST=('ok', 'error', None)[n % 3],
                    I_ATTRS={7: 'int key'} if n % 4 == 1 else {'n': n},
                )
            )
        self.assertTrue(self.compare(batch, 1, 4242))
        self.assertTrue(self.compare(batch, 2**62, 2**70))
        self.assertTrue(self.compare(batch[::-1], 9, 'pid'))

    def test_the_writer_uses_the_extension(self):
        if _native.PURE_PYTHON:  # the suite run with the switch on
            self.assertIsNone(record._lines_c)
        else:
            self.assertIs(self.native.lines, record._lines_c)
        batch = [_span()]
        calls = []

        def spy(*args):
            calls.append(args)
            return self.native.lines(*args)

        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.record._lines_c', spy)
        )
        self.assertEqual(
            (record._lines_fast(batch, 3, 9), 0),
            record.encode_lines(batch, 3, 9),
        )
        self.assertEqual(1, len(calls))

    def test_pure_python_switch(self):
        code = (
            'from instrument.runtime import record; '
            'print(record._lines_c is None)'
        )
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join(sys.path)
        for value, none in (('1', 'True'), ('0', 'False'), (None, 'False')):
            env.pop('INSTRUMENT_PURE_PYTHON', None)
            if value is not None:
                env['INSTRUMENT_PURE_PYTHON'] = value
            out = subprocess.run(
                [sys.executable, '-c', code],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            self.assertEqual(none, out, value)


class Phase:
    """A phase that says it equals anything (Python's ``==`` decides)."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class Failing:
    def __eq__(self, other):
        raise ValueError('no comparison')

    __hash__ = object.__hash__


class Spans(list):
    """A list subclass: not a span's record."""


class NativeRunningTest(testtools.TestCase):
    """``running``, the writer's "first span still running" in C,
    against its pure-Python twin (``buffer._first_running_py``)."""

    def setUp(self):
        super().setUp()
        self.native = native.extension(self, '_lines')

    def both(self, batch, begin='B'):
        want = _run(buffer._first_running_py, batch, begin)
        got = _run(self.native.running, batch, begin)
        if isinstance(want, Exception):
            self.assertIsInstance(got, want.__class__, batch)
        else:
            self.assertEqual(want, got, batch)
        return got

    def test_generated_batches(self):
        gen = Generator(11)
        phases = ['X', 'B', 'I', 'C', 'M', Text('B'), 'BB', '', 'b', '\u0042']
        found = 0
        for _ in range(400):
            batch = []
            for _ in range(gen.rnd.randrange(0, 30)):
                rec = gen.record()
                if gen.rnd.random() < 0.3:
                    rec = list(rec)
                    rec[0] = gen.rnd.choice(phases)
                batch.append(rec)
            if self.both(batch) < len(batch):
                found += 1
        self.assertGreater(found, 50)

    def test_what_counts_as_running(self):
        b = ['B', 1]
        x = ['X', 1]
        self.assertEqual(0, self.both([b]))
        self.assertEqual(2, self.both([x, ('B', 1), b]))
        self.assertEqual(3, self.both([x, ('B', 1), x]))
        self.assertEqual(2, self.both([Spans(b), x]))
        self.assertEqual(1, self.both([x, [Text('B')]]))
        self.assertEqual(1, self.both([x, ['B' + '']]))
        self.assertEqual(1, self.both([x, [''.join(['B'])]]))
        self.assertEqual(0, self.both([[Phase()], b]))
        self.assertEqual(1, self.both([x, ['B']], Text('B')))
        self.assertEqual(0, self.both([x, ['B']], Phase()))
        self.assertEqual(0, self.both([]))
        # equal strings that are not the same object (one character
        # strings are; longer ones made at run time are not)
        begin, other = ''.join(['B', 'x']), 'B'.__add__('x')
        self.assertIsNot(begin, other)
        self.assertEqual(2, self.both([x, ['By'], [other]], begin))
        self.assertEqual(1, self.both([x, [other], ['Bx']], begin))
        self.assertEqual(1, self.both([['Ax'], [Text(other)]], begin))
        self.assertIsInstance(self.both([[Failing()]]), ValueError)
        self.assertRaises(TypeError, self.native.running, (b,), 'B')
        self.assertRaises(TypeError, self.native.running, [b])

    def test_the_writer_uses_it(self):
        if _native.PURE_PYTHON:
            self.assertIs(buffer._first_running_py, buffer._first_running)
        else:
            self.assertIs(self.native.running, buffer._first_running)


def _one(rec):
    return record._lines_fast([rec], 1, 1)


def _has_unset(batch) -> bool:
    return any(value is msgspec.UNSET for rec in batch for value in rec[:15])
