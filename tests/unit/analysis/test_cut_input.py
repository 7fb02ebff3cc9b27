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
"""A span file whose end cannot be read (a gzip stream cut short).

Every complete line before the cut is read, by both passes and in any
chunk size, as Python's ``gzip`` yields them line by line before its
``EOFError``; the incomplete last line is "truncated"; the report says
that the input lost the rest of the file (``quality.unreadable``, the
loss note beside every section), without a number it cannot know.
"""

import gzip
import io
import json
import os
import zlib

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.render import views
from tests.unit.analysis import test_load

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
THREADS = os.path.join(
    ROOT, 'tests', 'data', 'fidelity', 'demo-threads.jsonl.gz'
)


def gzip_lines(data: bytes) -> list:
    """The lines Python's gzip yields from ``data`` before it fails."""
    out = []
    try:
        for line in gzip.GzipFile(fileobj=io.BytesIO(data)):
            out.append(line)
    except EOFError:
        pass
    return out


def read_all(path: str, hint: int) -> tuple:
    """``(lines, error, lines counted)`` of a ``SpanFile`` read through
    ``stream.reads`` in chunks of ``hint`` bytes; the number of lines of
    each read, the last one empty."""
    f = spanfiles.SpanFile(path, 0)
    lines = []
    sizes = []
    for _f, chunk, _first, _heap in stream.reads([f], hint):
        lines.extend(chunk)
        sizes.append(len(chunk))
    return lines, f.error, f.lines, sizes


class CutGzipTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        with open(THREADS, 'rb') as f:
            data = f.read()
        # head -c $((size / 2))
        self.cut = data[: len(data) // 2]
        self.path = os.path.join(self.dir, 'demo-threads.jsonl.gz')
        with open(self.path, 'wb') as f:
            f.write(self.cut)
        self.complete = gzip_lines(self.cut)
        # the incomplete line the cut leaves, decompressed as far as it
        # goes
        self.tail = zlib.decompressobj(31).decompress(self.cut)[
            sum(map(len, self.complete)) :
        ]

    def test_every_complete_line_before_the_cut_is_read(self):
        self.assertGreater(len(self.complete), 2000)
        self.assertTrue(self.tail)
        self.assertNotIn(b'\n', self.tail)
        for hint in (1 << 18, 4096, 1):
            lines, error, counted, sizes = read_all(self.path, hint)
            self.assertEqual(self.complete + [self.tail], lines, hint)
            self.assertIn('EOFError', error)
            self.assertEqual(len(self.complete) + 1, counted)
            # the reads end with an empty one (pass 1 in parallel
            # rebuilds the order from that protocol)
            self.assertEqual(0, sizes[-1])
            self.assertNotIn(0, sizes[:-1])

    def test_report_keeps_the_lines_and_says_the_input_lost_the_rest(self):
        n = len(self.complete)
        for jobs in (1, 2):
            report = pipeline.analyse([self.path], pipeline.Options(jobs=jobs))
            self.assertEqual(n, report['inputs']['records'])
            self.assertEqual(n + 1, report['inputs']['lines'])
            self.assertEqual(1, report['load']['counts']['truncated'])
            self.assertEqual(
                ('demo-threads.jsonl.gz', n + 1),
                report['load']['samples']['truncated'][0][:2],
            )
            q = report['quality']
            self.assertEqual(
                [
                    {
                        'file': 'demo-threads.jsonl.gz',
                        'after_line': n + 1,
                        'error': 'EOFError: Compressed file ended '
                        'before the end-of-stream marker was '
                        'reached',
                    }
                ],
                q['unreadable'],
            )
            self.assertEqual(['fake-mini', 'scheduler'], q['hosts'])
            # the requests doing something in that process at the cut,
            # not every one of its host (issue 32, item 5)
            [row] = q['processes']
            [[start, end]] = row['windows']
            self.assertIsNone(end)
            at_cut = {
                r['req'] for r in report['requests'] if r['end_us'] >= start
            }
            self.assertEqual(
                at_cut, {r['req'] for r in report['requests'] if r.get('loss')}
            )
            self.assertEqual(len(at_cut), q['requests_affected'])
            self.assertLess(0, q['requests_affected'])
            self.assertLess(q['requests_affected'], q['requests'])
            self.assertIn(
                'demo-threads.jsonl.gz: EOFError: Compressed file '
                'ended before the end-of-stream marker was '
                'reached (the rest of the file after line %d is '
                'unreadable)' % (n + 1),
                report['load']['problems'],
            )
            note = views.loss_note(report)
            self.assertIn('computed from input with losses: ', note)
            self.assertIn(
                'the rest of demo-threads.jsonl.gz after line %d '
                'on fake-mini, scheduler;' % (n + 1),
                note,
            )
            text = report_text.render(report)
            # once, in the input problems; beside the sections it
            # touches, how
            self.assertEqual(1, text.count(note))
            self.assertIn(views.marked_line(report), text)
            self.assertIn(
                'computed from input with losses', report_html.render(report)
            )

    def test_both_passes_read_it_as_the_plain_file_of_its_lines(self):
        plain = os.path.join(self.dir, 'plain', 'demo-threads.jsonl')
        os.makedirs(os.path.dirname(plain))
        with open(plain, 'wb') as f:
            f.write(b''.join(self.complete) + self.tail)
        for jobs in (1, 2):
            got = clockpass.clock_pass(
                [self.path, self.path], 10**7, jobs=jobs
            )
            want = clockpass.clock_pass([plain, plain], 10**7, jobs=jobs)
            self.assertEqual(want[1:], got[1:])
            self.assertEqual(want[0].starts, got[0].starts)
            self.assertEqual(want[0].to_dict(), got[0].to_dict())
        got = pipeline.analyse([self.path])
        want = pipeline.analyse([plain])
        for key in ('summary', 'requests', 'sql', 'operations'):
            self.assertEqual(want[key], got[key], key)
        self.assertEqual(want['load']['counts'], got['load']['counts'])


class CutAtLineEndTest(testtools.TestCase):
    """A gzip stream cut where a line ends: no bad line, no seq gap,
    and still the input lost the rest of the file."""

    def lines(self, first: int, n: int) -> list:
        return [
            json.dumps(
                test_load.rec(
                    seq=i,
                    span='%016x' % i,
                    req='req-%d' % i,
                    ts=1_700_000_000_000_000 + i,
                )
            ).encode()
            + b'\n'
            for i in range(first, first + n)
        ]

    def test_cut_in_a_later_member_at_a_line_end(self):
        one = self.lines(1, 40)
        two = self.lines(41, 60)
        d = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(d, 'cut.jsonl.gz')
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        head = z.compress(b''.join(two[:25])) + z.flush(zlib.Z_SYNC_FLUSH)
        with open(path, 'wb') as f:
            f.write(gzip.compress(b''.join(one)) + head)
        self.assertEqual(
            one + two[:25], gzip_lines(gzip.compress(b''.join(one)) + head)
        )
        for hint in (1 << 18, 100):
            lines, error, counted, _sizes = read_all(path, hint)
            self.assertEqual(one + two[:25], lines)
            self.assertEqual(65, counted)
            self.assertIn('EOFError', error)
        report = pipeline.analyse([path])
        self.assertEqual(65, report['inputs']['records'])
        self.assertEqual(0, sum(report['load']['counts'].values()))
        q = report['quality']
        self.assertEqual(0, q['lost_records'])
        self.assertEqual(
            [('cut.jsonl.gz', 65)],
            [(u['file'], u['after_line']) for u in q['unreadable']],
        )
        self.assertEqual(['h1'], q['hosts'])
        note = views.loss_note(report)
        # (its records are a microsecond apart: every request was doing
        # something at the end of the file)
        self.assertEqual(
            '! computed from input with losses: the rest of cut.jsonl.gz '
            'after line 65 on h1; %d of %d requests (100.0%%) may miss '
            'some of their records: %d doing something in a process when '
            'it lost records; marked in the request table (loss), left out '
            'of the times, counted in the states (e.g. req-1)'
            % (q['requests'], q['requests'], q['requests']),
            note,
        )
        self.assertIn(note, report_text.render(report))

    def test_corrupt_stream_keeps_the_lines_before(self):
        # a damaged block (not a cut): zlib.error, read as far as it goes
        one = self.lines(1, 200)
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        head = z.compress(b''.join(one[:120])) + z.flush(zlib.Z_FULL_FLUSH)
        rest = z.compress(b''.join(one[120:])) + z.flush()
        d = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(d, 'bad.jsonl.gz')
        with open(path, 'wb') as f:
            # an invalid block type where the next block starts
            f.write(head + b'\xff' * 8 + rest[8:])
        for hint in (1 << 18, 1000):
            lines, error, counted, _sizes = read_all(path, hint)
            self.assertEqual(one[:120], lines)
            self.assertEqual(120, counted)
            self.assertIn('error', error)
        report = pipeline.analyse([path])
        self.assertEqual(120, report['inputs']['records'])
        self.assertEqual(
            [('bad.jsonl.gz', 120)],
            [
                (u['file'], u['after_line'])
                for u in report['quality']['unreadable']
            ],
        )
        self.assertIsNotNone(views.loss_note(report))
