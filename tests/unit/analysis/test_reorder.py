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
"""The order of a process's records does not matter (issue 32, item 4):
the pairs of request ids of an API request found whichever of its
records is read first (``ingest.aliases``), and a file whose records
run backwards read from its end (``ingest.spanfiles.Backwards``)."""

import gzip
import json
import os

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.ingest import aliases
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from tests.unit.analysis import test_load


class RejoinTest(testtools.TestCase):
    def test_start_and_end_in_either_order(self):
        for order in ('BX', 'XB'):
            r = aliases.Rejoin()
            for ph in order:
                if ph == 'B':
                    r.begin('s1', 'environ')
                else:
                    r.end('s1', 'context')
            self.assertEqual({'environ': 'context'}, r.aliases(), order)

    def test_a_child_pairs_when_the_end_is_lost(self):
        for order in (('B', 'child'), ('child', 'B')):
            r = aliases.Rejoin()
            for what in order:
                if what == 'B':
                    r.begin('s1', 'environ')
                else:
                    r.child('s1', 'context')
            self.assertEqual({'environ': 'context'}, r.aliases(), order)

    def test_the_end_wins_over_a_child(self):
        r = aliases.Rejoin()
        r.begin('s1', 'environ')
        r.child('s1', 'other')
        r.end('s1', 'context')
        r.child('s1', 'another')
        self.assertEqual({'environ': 'context'}, r.aliases())
        # an end naming the id it began with: no pair
        r = aliases.Rejoin()
        r.begin('s2', 'same')
        r.child('s2', 'other')
        r.end('s2', 'same')
        self.assertEqual({}, r.aliases())

    def test_bounded(self):
        r = aliases.Rejoin(limit=4)
        for i in range(10):
            r.end('s%d' % i, 'req-%d' % i)
            r.child('p%d' % i, 'req-%d' % i)
        self.assertEqual(4, len(r.ended))
        self.assertEqual(4, len(r.early))
        # the oldest forgotten: its start pairs nothing
        r.begin('s0', 'environ-0')
        r.begin('s9', 'environ-9')
        self.assertEqual({'environ-9': 'req-9'}, r.aliases())


def lines_of(records: list) -> list:
    return [
        json.dumps(r, separators=(',', ':')).encode() + b'\n' for r in records
    ]


class BackwardsTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.records = [
            test_load.rec(
                seq=i,
                span='%016x' % i,
                req='req-%d' % (i // 3),
                ts=1_700_000_000_000_000 + i * 10,
            )
            for i in range(1, 400)
        ]

    def read(self, path: str, hint: int) -> tuple:
        f = spanfiles.SpanFile(path, 0)
        out = []
        firsts = []
        for _f, lines, first, _heap in stream.reads([f], hint):
            out.extend(lines)
            firsts.extend(
                f.line_of(n) for n in range(first + 1, first + len(lines) + 1)
            )
        return out, firsts, f

    def test_runs_backwards(self):
        lines = lines_of(self.records)
        self.assertFalse(spanfiles.runs_backwards(lines))
        self.assertTrue(spanfiles.runs_backwards(lines[::-1]))
        # a file holding its records twice, a restart, a few records
        # out of order: forwards
        self.assertFalse(spanfiles.runs_backwards(lines + lines))
        moved = list(lines)
        for i in range(0, len(moved) - 1, 10):
            moved[i], moved[i + 1] = moved[i + 1], moved[i]
        self.assertFalse(spanfiles.runs_backwards(moved))

    def test_a_reversed_file_reads_as_written_in_any_chunk_size(self):
        forward = lines_of(self.records)
        data = b''.join(forward[::-1])
        for name, write in (
            ('f.jsonl', lambda d: d),
            ('f.jsonl.gz', gzip.compress),
        ):
            path = os.path.join(self.dir, name)
            with open(path, 'wb') as f:
                f.write(write(data))
            for hint in (1 << 18, 1000, 1):
                got, numbers, f = self.read(path, hint)
                self.assertEqual(forward, got, (name, hint))
                # each line's number is its own in the file
                self.assertEqual(list(range(len(forward), 0, -1)), numbers)
                self.assertEqual(len(forward), f.backwards)
                self.assertIsNone(f.error)

    def test_last_line_without_newline_and_a_cut_gzip(self):
        forward = lines_of(self.records)
        reverse = forward[::-1]
        data = b''.join(reverse)[:-1]  # the file's last line: no newline
        path = os.path.join(self.dir, 'f.jsonl')
        with open(path, 'wb') as f:
            f.write(data)
        got, _n, _f = self.read(path, 4096)
        self.assertEqual([forward[0][:-1]] + forward[1:], got)
        # a gzip stream cut short: the lines before the cut, from the
        # last one read back to the first, and the error
        blob = gzip.compress(b''.join(reverse))
        path = os.path.join(self.dir, 'cut.jsonl.gz')
        with open(path, 'wb') as f:
            f.write(blob[: len(blob) * 2 // 3])
        got, _n, f = self.read(path, 4096)
        self.assertIn('EOFError', f.error)
        self.assertEqual(f.backwards, len(got))
        whole = [line for line in got if line.endswith(b'\n')]
        self.assertEqual(reverse[: len(whole)][::-1], whole)

    def test_looked_at_once_per_file(self):
        # pass 1 looks whether a file runs backwards, pass 2 (and the
        # workers of both) reuse what it found
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.ingest.spanfiles._SNIFFED', {}
            )
        )
        looked = self.useFixture(
            fixtures.MockPatch(
                'instrument.analysis.ingest.spanfiles.runs_backwards',
                side_effect=spanfiles.runs_backwards,
            )
        ).mock
        lines = lines_of(self.records)
        paths = []
        for name, data in (('r.jsonl', lines[::-1]), ('f.jsonl', lines)):
            paths.append(os.path.join(self.dir, name))
            with open(paths[-1], 'wb') as f:
                f.write(b''.join(data))
        one = pipeline.analyse([self.dir], pipeline.Options(jobs=1))
        self.assertEqual(2, looked.call_count)
        self.assertEqual(
            [True, False], [spanfiles.backwards_seen(p) for p in paths]
        )
        # with workers: what pass 1's found comes back to the parent
        spanfiles._SNIFFED.clear()
        two = pipeline.analyse([self.dir], pipeline.Options(jobs=2))
        self.assertEqual(
            [True, False], [spanfiles.backwards_seen(p) for p in paths]
        )
        self.assertEqual(one['summary'], two['summary'])
        self.assertEqual(one['load']['problems'], two['load']['problems'])
        # another version of a file is looked at anew
        with open(paths[0], 'wb') as f:
            f.write(b''.join(lines + lines[:1]))
        self.assertIsNone(spanfiles.backwards_seen(paths[0]))
        self.assertFalse(spanfiles.SpanFile(paths[0], 0)._runs_backwards())

    def test_the_report_of_a_reversed_file_is_the_forward_one(self):
        d1 = os.path.join(self.dir, 'a')
        d2 = os.path.join(self.dir, 'b')
        for d, lines in (
            (d1, lines_of(self.records)),
            (d2, lines_of(self.records)[::-1]),
        ):
            os.makedirs(d)
            with open(os.path.join(d, 'f.jsonl'), 'wb') as f:
                f.write(b''.join(lines))
        for jobs in (1, 2):
            a = pipeline.analyse([d1], pipeline.Options(jobs=jobs))
            b = pipeline.analyse([d2], pipeline.Options(jobs=jobs))
            for key in ('summary', 'requests', 'sql', 'quality'):
                self.assertEqual(a[key], b[key], key)
            self.assertEqual(
                [
                    'f.jsonl: its records run backwards (their '
                    'seq going down line after line): read from '
                    'its end'
                ],
                b['load']['problems'],
            )
