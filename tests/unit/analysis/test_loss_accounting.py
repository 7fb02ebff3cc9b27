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
"""Records lost, each counted once, with its cause (issue 27, items 2
and 4).

Hand-made span files of known losses, written as the runtime writes
them: a record is numbered (``seq``) when the buffer hands it to its
sinks, so what the file sink could not write is a ``seq`` gap in its
file, and the same count in its ``sink.drops``; what the full buffer
dropped was never numbered (no gap); a line that is not a valid record
is a record lost, and one whose number cannot be read is one of the
gaps; the SQL statements the listeners dropped before they became
records are counted in ``sql.dropped`` (cumulative per process).
"""

import itertools
import json
import os

import fixtures
import testtools

from instrument import schema
from instrument.analysis import compare
from instrument.analysis import pipeline
from instrument.analysis.ingest import losses
from instrument.analysis.render import html as report_html
from instrument.analysis.render import json as report_json
from instrument.analysis.render import text as report_text
from instrument.analysis.render import views

T0 = 1_700_000_000_000_000
FP = 'f' * 32


class Process:
    """The records of one process, numbered as its buffer numbers them;
    ``lines`` is what its file holds."""

    def __init__(
        self, host: str = 'db-1', pid: int = 100, svc: str = 'conductor'
    ) -> None:
        self.host = host
        self.pid = pid
        self.svc = svc
        self.seq = 0
        self.ts = T0
        self.lines = []
        self.write(
            {
                'ph': 'M',
                'ev': 'process.start',
                'attrs': {
                    'service': 'nova-' + svc,
                    'version': 'test',
                    'mode': 'threads',
                    'points': {},
                },
            }
        )
        self.write(
            {
                'ph': 'M',
                'ev': 'sql.fingerprint',
                'attrs': {
                    'fp': FP,
                    'text': 'select * from instances where id = ?',
                    'kind': 'SELECT',
                },
            }
        )

    def record(self, fields: dict) -> dict:
        self.ts += 1000
        rec = {
            'v': schema.SCHEMA_VERSION,
            'seq': self.seq,
            'ts': self.ts,
            'host': self.host,
            'svc': self.svc,
            'pid': self.pid,
        }
        rec.update(fields)
        self.seq += 1
        return rec

    def write(self, fields: dict) -> None:
        self.lines.append(json.dumps(self.record(fields)))

    def queries(self, n: int) -> None:
        for _ in range(n):
            self.write(
                {
                    'ph': 'X',
                    'dur_us': 250,
                    'tid': 1,
                    'ev': 'sql.query',
                    'span': '%016x' % (self.seq + 1),
                    'st': 'ok',
                    'attrs': {
                        'fp': FP,
                        'db': 'nova',
                        'kind': 'SELECT',
                        'rows': 1,
                    },
                }
            )

    def sink_lost(self, n: int) -> None:
        """``n`` records numbered, then not written by the file sink."""
        for _ in range(n):
            self.record({})

    def invalid(self, n: int, drop: str) -> None:
        """``n`` records written without field ``drop`` (``seq``,
        ``pid`` or ``host``: a line whose number cannot be read;
        ``dur_us``: an invalid record with its number), nor ``svc`` (a
        record with one required field missing is repaired: issue 32)."""
        for _ in range(n):
            rec = self.record(
                {
                    'ph': 'X',
                    'dur_us': 250,
                    'tid': 1,
                    'ev': 'sql.query',
                    'span': '%016x' % 1,
                    'st': 'ok',
                    'attrs': {'fp': FP},
                }
            )
            del rec[drop]
            del rec['svc']
            self.lines.append(json.dumps(rec))

    def cut_line(self) -> None:
        """A record the sink wrote in part (a full disk): the rest of its
        line is missing, the next write starts on a new line."""
        rec = json.dumps(
            self.record(
                {
                    'ph': 'X',
                    'dur_us': 250,
                    'tid': 1,
                    'ev': 'sql.query',
                    'span': 'a' * 16,
                    'st': 'ok',
                    'attrs': {'fp': FP},
                }
            )
        )
        self.lines.append(rec[: len(rec) // 2])

    def counter(self, ev: str, attrs: dict) -> None:
        self.write({'ph': 'C', 'ev': ev, 'attrs': attrs})

    def end(self) -> None:
        self.write({'ph': 'M', 'ev': 'process.end', 'attrs': {}})

    def save(self, directory: str, name: str = None, end: str = '\n') -> str:
        path = os.path.join(
            directory,
            name or '%s_nova-%s_%d.jsonl' % (self.host, self.svc, self.pid),
        )
        with open(path, 'w') as f:
            f.write('\n'.join(self.lines) + end)
        return path


class LossTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path

    def analyse(self, *procs, jobs=1) -> dict:
        for p in procs:
            p.save(self.dir)
        return pipeline.analyse([self.dir], pipeline.Options(jobs=jobs))

    def assertLost(self, report: dict, lost: int, **causes) -> None:
        q = report['quality']
        want = dict.fromkeys(
            ('sink_dropped', 'buffer_dropped', 'unreported_gaps', 'invalid'), 0
        )
        want.update(causes)
        self.assertEqual((lost, want), (q['lost_records'], q['causes']))
        self.assertEqual(lost, sum(p['lost'] for p in q['processes']))
        if lost:
            self.assertIn(
                '%d records lost in ' % lost, views.loss_note(report)
            )

    def test_file_sink_drops_are_the_gaps_counted_once(self):
        # 2,036 records the file sink could not write (a full disk), 7
        # more missing that nothing reported: 2,043 lost, not 4,079
        p = Process()
        p.queries(100)
        p.sink_lost(2036)
        p.queries(50)
        p.sink_lost(7)
        p.queries(50)
        p.counter('sink.drops', {'buffer_full': 0, 'file': 2036})
        p.end()
        report = self.analyse(p)
        self.assertLost(report, 2043, sink_dropped=2036, unreported_gaps=7)
        (row,) = report['load']['loss']
        self.assertEqual((2043, 2036), (row['missing'], row['dropped']))
        note = views.loss_note(report)
        self.assertIn(
            '2043 records lost in 1 process(es) (2036 dropped by '
            'a sink, 7 seq gaps nobody reported) on db-1',
            note,
        )

    def test_invalid_lines_are_not_counted_again_as_gaps(self):
        # 1,284 invalid lines: 629 without a readable number (no seq,
        # pid or host) and 655 with one: 1,284 lost, not 1,913
        p = Process()
        p.queries(20)
        p.invalid(300, 'seq')
        p.queries(5)
        p.invalid(200, 'pid')
        p.invalid(129, 'host')
        p.queries(5)
        p.invalid(655, 'dur_us')
        p.queries(5)
        p.end()
        report = self.analyse(p)
        self.assertEqual(1284, sum(report['load']['counts'].values()))
        self.assertLost(report, 1284, invalid=1284)
        (row,) = report['quality']['processes']
        self.assertEqual((629, 0), (row['missing'], row['unreported_gaps']))
        self.assertIn('(1284 invalid lines)', views.loss_note(report))

    def test_a_line_a_full_disk_cut_short_is_one_record(self):
        # the file sink counts the record it wrote in part as dropped;
        # its line is invalid, and its number is missing: one record
        p = Process()
        p.queries(10)
        p.cut_line()
        p.queries(10)
        p.counter('sink.drops', {'buffer_full': 0, 'file': 1})
        p.end()
        report = self.analyse(p)
        self.assertEqual(1, report['load']['counts']['malformed'])
        self.assertLost(report, 1, invalid=1)

    def test_a_last_line_cut_short_is_one_record(self):
        # killed mid-write: the cut line is after the last number read
        # (no gap), and is the one record lost
        p = Process()
        p.queries(30)
        p.cut_line()
        p.save(self.dir, end='')
        report = self.analyse()
        self.assertEqual(1, report['load']['counts']['truncated'])
        self.assertLost(report, 1, invalid=1)
        (row,) = report['quality']['processes']
        self.assertEqual(0, row['missing'])

    def test_buffer_drops_leave_no_gap_and_otlp_drops_lose_nothing_here(self):
        # a full buffer drops before numbering; what the OTLP sink
        # could not export is in the span file all the same
        p = Process()
        p.queries(40)
        p.counter(
            'sink.drops',
            {'buffer_full': 120, 'open_untracked': 3, 'file': 0, 'otlp': 900},
        )
        p.queries(40)
        p.end()
        report = self.analyse(p)
        self.assertLost(report, 123, buffer_dropped=123)
        self.assertIn('(123 dropped by the buffer)', views.loss_note(report))

    def test_a_service_log_counts_the_log_sinks_drops(self):
        p = Process(host='api-1', svc='api')
        p.queries(10)
        p.sink_lost(4)
        p.queries(10)
        p.counter('sink.drops', {'buffer_full': 0, 'log': 4, 'file': 0})
        p.end()
        p.lines = [
            '2024-05-01 12:00:00.000 7 INFO instrument.spans [-] ' + line
            for line in p.lines
        ]
        p.save(self.dir, 'nova-api.log')
        report = pipeline.analyse([self.dir])
        self.assertLost(report, 4, sink_dropped=4)

    def test_totals_and_processes_and_every_form(self):
        a = Process(host='db-1', pid=100)
        a.queries(50)
        a.sink_lost(10)
        a.queries(50)
        a.counter('sink.drops', {'buffer_full': 5, 'file': 10})
        a.end()
        b = Process(host='db-2', pid=200)
        b.queries(50)
        b.sink_lost(3)
        b.invalid(2, 'seq')
        b.queries(50)
        b.end()
        for jobs in (1, 2):
            report = self.analyse(a, b, jobs=jobs)
            self.assertLost(
                report,
                20,
                sink_dropped=10,
                buffer_dropped=5,
                unreported_gaps=3,
                invalid=2,
            )
            keys = (
                'lost',
                'sink_dropped',
                'buffer_dropped',
                'unreported_gaps',
                'invalid',
            )
            rows = {
                r['host']: tuple(r[k] for k in keys)
                for r in report['quality']['processes']
            }
            self.assertEqual(
                {'db-1': (15, 10, 5, 0, 0), 'db-2': (5, 0, 0, 3, 2)}, rows
            )
        note = views.loss_note(report)
        self.assertIn(
            '20 records lost in 2 process(es) (10 dropped by a '
            'sink, 5 dropped by the buffer, 3 seq gaps nobody '
            'reported, 2 invalid lines) on db-1, db-2',
            note,
        )
        text = report_text.render(report)
        self.assertIn(note, text)
        self.assertIn(note[2:], report_html.render(report))
        data = json.loads(report_json.dumps(report))
        self.assertEqual(note[2:], data['quality']['note'])


class SqlDroppedTest(testtools.TestCase):
    """5,000 statements, 4,001 dropped by the SQL listeners before they
    became records: the report says so wherever it counts them."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        p = Process()
        p.queries(500)
        # cumulative counts: the last (largest) is the total
        p.counter('sql.dropped', {'count': 2500})
        p.queries(498)
        p.counter('sql.dropped', {'count': 4001})
        p.end()
        p.save(self.dir)

    def test_every_form_says_how_many_were_not_profiled(self):
        for jobs in (1, 2):
            report = pipeline.analyse([self.dir], pipeline.Options(jobs=jobs))
            q = report['quality']
            self.assertEqual((0, 4001), (q['lost_records'], q['sql_dropped']))
            self.assertEqual(4001, q['processes'][0]['sql_dropped'])
            self.assertEqual(
                (998, 4001), (report['sql']['calls'], report['sql']['dropped'])
            )
        note = views.loss_note(report)
        self.assertIn(
            'computed from input with losses: 4001 SQL '
            'statements dropped before they became records on '
            'db-1',
            note,
        )
        text = report_text.render(report)
        self.assertIn(
            '# 998 statements in 1 classes, 250ms total; 4001 '
            'more statements were dropped before they became '
            'records and are not profiled (sql.dropped)',
            text,
        )
        sql_section = text[text.index('SQL profile (grouped') :]
        # beside the profile, what it may miss (issue 32, item 5)
        self.assertIn(
            '! 4001 statements were dropped before they became '
            'records (see Input problems): the counts and times '
            'below may be short',
            sql_section,
        )
        self.assertEqual(
            views.sql_loss_line(report), sql_section.split('\n')[2]
        )
        html = report_html.render(report)
        self.assertIn(
            '998 statements in 1 classes, 250ms; 4001 more '
            'statements were dropped',
            html,
        )
        self.assertIn(note[2:], html)
        data = json.loads(report_json.dumps(report))
        self.assertEqual(4001, data['sql']['dropped'])
        self.assertEqual(4001, data['quality']['sql_dropped'])
        # and a comparison with it
        cmp = compare.compare(report, report)
        self.assertEqual(4001, cmp['runs']['b']['sql_dropped'])
        self.assertIn('! B: ' + note[2:], compare.render(cmp))


class FoldTest(testtools.TestCase):
    """``losses.SeqSet.fold`` (the follow mode on a long run): the
    pages below the floor dropped, the counts and the windows kept."""

    def seqset(self):
        s = losses.SeqSet((0, 'f'), ('h', 1, 0))
        # three pages of numbers, with a gap in each of the first two
        # and one across the first two
        for seq in itertools.chain(
            range(10, 1000),
            range(1100, 65_500),
            range(65_600, 70_000),
            range(70_010, 190_000),
        ):
            s.add(seq)
            page = s.bucket(seq >> losses.TIMES_SHIFT)
            k = (seq & ((1 << losses.TIMES_SHIFT) - 1)) >> losses.BUCKET_SHIFT
            page[2 * k] = page[2 * k] or seq * 10
            page[2 * k + 1] = seq * 10
        return s

    def test_counts_and_windows_kept(self):
        s = self.seqset()
        loss = losses.FileLoss()
        loss.seqs[s.key] = s
        before = (s.span(), loss.per_process(), loss.windows())
        s.fold(2)
        self.assertEqual([2], sorted(s.pages))
        self.assertEqual(2, s.floor)
        self.assertTrue(all(k >= 2 << 4 for k in s.times))
        self.assertEqual(
            before, (s.span(), loss.per_process(), loss.windows())
        )
        self.assertEqual(
            [(1000, 1099), (65_500, 65_599), (70_000, 70_009)], s.holes
        )

    def test_below_the_floor(self):
        s = self.seqset()
        s.fold(2)
        # read before: a copy
        self.assertFalse(s.below(500))
        self.assertFalse(s.add(500))
        # counted lost, read late: once
        self.assertTrue(s.below(1050))
        self.assertFalse(s.below(1050))
        self.assertEqual((1000, 1049), s.holes[0])
        self.assertEqual((1051, 1099), s.holes[1])
        # above the floor: as before
        self.assertFalse(s.add(150_000))
        self.assertTrue(s.add(200_000))

    def test_retired(self):
        s = self.seqset()
        n, lo, hi = s.span()
        s.retire()
        self.assertEqual((n, lo, hi), s.span())
        self.assertEqual({}, s.pages)
        self.assertEqual({}, s.times)
        self.assertFalse(s.add(hi + 1))
