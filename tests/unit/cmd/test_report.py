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
"""The instrument-report command line, including ``compare``."""

import io
import json
import os
import unittest

import fixtures
import testtools

from instrument.analysis.render import fmt
from instrument.cmd import report
from tests import synthetic


class CommandTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.stdout = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())
        ).new_value
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', io.StringIO())
        ).new_value

    def run_a(self, seed=2, **kw):
        path = os.path.join(self.dir, 'run%d' % seed)
        synthetic.generate(path, seed=seed, requests=120, **kw)
        return path

    def test_text_json_html(self):
        run = self.run_a()
        out_json = os.path.join(self.dir, 'r.json')
        out_html = os.path.join(self.dir, 'r.html')
        rc = report.main(
            [
                run,
                '--json',
                out_json,
                '--html',
                out_html,
                '--group-by',
                'service',
                '--order-by',
                'count',
                '--limit',
                '2',
                '--no-progress',
            ]
        )
        self.assertEqual(0, rc)
        text = self.stdout.getvalue()
        for title in (
            'Clock offsets',
            'final state',
            'Failures',
            'SQL profile (grouped by service, ordered by count)',
            'Query_time distribution',
        ):
            self.assertIn(title, text)
        with open(out_json) as f:
            data = json.load(f)
        self.assertEqual(2, len(data['sql']['rows']))
        self.assertEqual(120, len(data['requests']))
        with open(out_html) as f:
            self.assertIn('Where a successful boot spends its time', f.read())

    def fails(self, argv: list, message: str, status: int = 2) -> None:
        """``argv`` exits with ``status`` and one line on stderr."""
        self.stderr.seek(0)
        self.stderr.truncate()
        exc = self.assertRaises(SystemExit, report.main, argv)
        self.assertEqual(status, exc.code)
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(1, len(lines), lines)
        self.assertTrue(lines[0].startswith('instrument-report: error: '))
        self.assertIn(message, lines[0])

    def test_bad_input_and_options(self):
        self.fails([os.path.join(self.dir, 'missing')], 'no span files')
        run = self.run_a()
        self.fails([run, '--order-by', 'nonsense'], '--order-by')
        self.fails([run, '--since', 'yesterday-ish'], 'cannot read time')
        self.fails(
            [run, '--since', '+20s', '--until', '+10s'], 'window is empty'
        )
        self.fails(
            [run, '--json', '-', '--html', '-'],
            'cannot both write to standard output',
        )
        self.assertEqual('', self.stdout.getvalue())

    def test_json_to_standard_output(self):
        run = self.run_a()
        cwd = self.useFixture(fixtures.TempDir()).path
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(cwd)
        self.assertEqual(0, report.main([run, '--json', '-', '--no-progress']))
        data = json.loads(self.stdout.getvalue())
        self.assertEqual(120, len(data['requests']))
        self.assertEqual([], os.listdir(cwd))

    def test_the_report_is_written_with_the_analysis_frozen(self):
        # what the analysis leaves alive is not scanned again by the
        # cyclic collector while the report is written; the process's
        # collector is as it was afterwards
        import gc

        run = self.run_a()
        seen = []
        freeze = self.useFixture(
            fixtures.MockPatch('gc.freeze', side_effect=gc.freeze)
        ).mock

        def render(rep, **kw):
            seen.append(freeze.call_count)
            return 'text\n'

        self.useFixture(
            fixtures.MockPatch(
                'instrument.analysis.render.text.render', side_effect=render
            )
        )
        self.assertEqual(0, report.main([run, '--no-progress']))
        self.assertEqual([1], seen)
        self.assertEqual(0, gc.get_freeze_count())
        # as the command (its arguments from sys.argv), the process
        # ends with them frozen: its exit does not scan them either
        self.addCleanup(gc.unfreeze)
        self.useFixture(
            fixtures.MonkeyPatch('sys.argv', ['x', run, '--no-progress'])
        )
        self.assertEqual(0, report.main())
        self.assertEqual([1, 2], seen)
        self.assertGreater(gc.get_freeze_count(), 0)

    def test_a_compare_side_without_data(self):
        run = self.run_a()
        good = os.path.join(self.dir, 'good.json')
        self.assertEqual(0, report.main([run, '-q', '--json', good]))
        with open(good) as f:
            data = json.load(f)
        data['inputs']['records'] = 0
        empty = os.path.join(self.dir, 'empty.json')
        with open(empty, 'w') as f:
            json.dump(data, f, separators=(',', ':'))
        self.fails(
            ['compare', good, empty], 'RUN_B %s: no span records' % empty
        )
        other = os.path.join(self.dir, 'other-tool.json')
        with open(other, 'w') as f:
            f.write('{"results": [1, 2, 3]}\n')
        self.fails(
            ['compare', other, good],
            'RUN_A %s: not an instrument-report JSON report' % other,
        )
        newer = dict(data, report_version=99)
        with open(empty, 'w') as f:
            json.dump(newer, f, separators=(',', ':'))
        self.fails(['compare', good, empty], 'report version 99')

    def test_since_filters_sql(self):
        run = self.run_a()
        out_json = os.path.join(self.dir, 'r.json')
        report.main([run, '-q', '--json', out_json, '--since', '+20s'])
        with open(out_json) as f:
            data = json.load(f)
        self.assertGreater(data['sql']['filtered_out'], 0)
        self.assertEqual('', self.stdout.getvalue())

    def test_compare_runs(self):
        fast = self.run_a(seed=3)
        slow = os.path.join(self.dir, 'slow')
        cloud = synthetic.Cloud(seed=3)
        cloud.draw_orig = cloud.draw
        # the same cloud with every piece of work twice as slow
        cloud.draw = lambda median, sigma=0.25: cloud.draw_orig(
            median * 2, sigma
        )
        cloud.generate(slow, requests=120)
        out_json = os.path.join(self.dir, 'fast.json')
        report.main([fast, '-q', '--json', out_json])
        rc = report.main(
            [
                'compare',
                out_json,
                slow,
                '--json',
                os.path.join(self.dir, 'cmp.json'),
            ]
        )
        self.assertEqual(0, rc)
        text = self.stdout.getvalue()
        self.assertIn('Mann-Whitney', text)
        with open(os.path.join(self.dir, 'cmp.json')) as f:
            cmp = json.load(f)
        e2e = [r for r in cmp['latency'] if r['component'] == 'end to end']
        self.assertTrue(e2e[0]['significant'])
        self.assertGreater(e2e[0]['change'], 0.5)
        same = report.main(
            [
                'compare',
                out_json,
                out_json,
                '--json',
                os.path.join(self.dir, 'same.json'),
            ]
        )
        self.assertEqual(0, same)
        with open(os.path.join(self.dir, 'same.json')) as f:
            cmp = json.load(f)
        self.assertFalse(any(r['significant'] for r in cmp['latency']))

    def no_analysis(self):
        """Make the analysis fail the test: what is checked before it
        must be refused without it."""

        def analyse(*args, **kwargs):
            self.fail('analysed %r before refusing' % (args,))

        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.pipeline.analyse', analyse
            )
        )

    def test_an_output_that_cannot_be_written_is_refused_first(self):
        run = self.run_a()
        good = os.path.join(self.dir, 'good.json')
        with open(good, 'w') as f:
            f.write('old\n')
        before = sorted(os.listdir(self.dir))
        self.no_analysis()
        nowhere = os.path.join(self.dir, 'no', 'r.json')
        self.fails(
            [run, '-q', '--json', nowhere],
            'cannot write %s: no directory %s'
            % (nowhere, os.path.join(self.dir, 'no')),
        )
        self.fails(
            [run, '-q', '--html', self.dir],
            'cannot write %s: it is a directory' % self.dir,
        )
        # the writable one is not written (nor emptied) either
        self.fails(
            [
                run,
                '-q',
                '--json',
                good,
                '--html',
                os.path.join(self.dir, 'no', 'r.html'),
            ],
            'cannot write %s' % os.path.join(self.dir, 'no', 'r.html'),
        )
        self.fails(
            [
                'compare',
                run,
                run,
                '--json',
                os.path.join(self.dir, 'no', 'c.json'),
            ],
            'cannot write %s' % os.path.join(self.dir, 'no', 'c.json'),
        )
        with open(good) as f:
            self.assertEqual('old\n', f.read())
        self.assertEqual(before, sorted(os.listdir(self.dir)))
        self.assertEqual('', self.stdout.getvalue())

    def test_a_checked_output_is_not_left_behind(self):
        out = os.path.join(self.dir, 'r.json')
        self.fails(
            [os.path.join(self.dir, 'missing'), '--json', out], 'no span files'
        )
        self.assertFalse(os.path.lexists(out))

    @unittest.skipUnless(os.path.exists('/dev/full'), 'no /dev/full')
    def test_every_output_that_can_be_written_is(self):
        # /dev/full passes the check (a writable device) and then fails
        # the write: the HTML report is written all the same
        run = self.run_a(buffer_drops=0)
        html = os.path.join(self.dir, 'r.html')
        self.fails(
            [
                run,
                '-q',
                '--no-progress',
                '--json',
                '/dev/full',
                '--html',
                html,
            ],
            'cannot write /dev/full: ',
        )
        with open(html) as f:
            self.assertIn('Where a successful boot spends its time', f.read())

    def test_compare_checks_both_runs_before_analysing(self):
        run = self.run_a()
        good = os.path.join(self.dir, 'good.json')
        self.assertEqual(
            0, report.main([run, '-q', '--json', good, '--no-progress'])
        )
        other = os.path.join(self.dir, 'other-tool.json')
        with open(other, 'w') as f:
            json.dump({'results': [1, 2, 3]}, f, indent=2)
        missing = os.path.join(self.dir, 'missing')
        self.no_analysis()
        self.fails(
            ['compare', run, missing],
            'RUN_B %s: no span files to '
            'read: %s: no such file or directory' % (missing, missing),
        )
        self.fails(
            ['compare', run, other],
            'RUN_B %s: not an instrument-report JSON report' % other,
        )
        self.fails(
            ['compare', good, other],
            'RUN_B %s: not an instrument-report JSON report' % other,
        )
        self.assertNotIn('schema version', self.stderr.getvalue())
        with open(good) as f:
            data = json.load(f)
        newer = os.path.join(self.dir, 'newer.json')
        with open(newer, 'w') as f:
            json.dump(dict(data, report_version=99), f)
        self.fails(
            ['compare', run, newer], 'RUN_B %s: report version 99' % newer
        )
        self.assertEqual('', self.stdout.getvalue())

    def test_compare_reads_a_reformatted_report(self):
        run = self.run_a()
        good = os.path.join(self.dir, 'good.json')
        report.main([run, '-q', '--json', good, '--no-progress'])
        with open(good) as f:
            data = json.load(f)
        pretty = os.path.join(self.dir, 'pretty.json')
        with open(pretty, 'w') as f:
            json.dump(data, f, indent=1)  # as jq . writes it
        self.no_analysis()
        self.assertEqual(0, report.main(['compare', good, pretty]))
        self.assertIn('Mann-Whitney', self.stdout.getvalue())

    def test_an_empty_window_is_written_with_a_warning(self):
        run = self.run_a(buffer_drops=0)
        full = os.path.join(self.dir, 'full.json')
        self.assertEqual(
            0, report.main([run, '-q', '--no-progress', '--json', full])
        )
        self.assertEqual('', self.stderr.getvalue())
        with open(full) as f:
            data = json.load(f)
        inputs = data['inputs']
        starts = [r['start_us'] for r in data['requests']]
        self.assertLessEqual(inputs['first_us'], min(starts))
        self.assertGreater(inputs['last_us'], max(starts))
        part = os.path.join(self.dir, 'part.json')
        self.assertEqual(
            0,
            report.main(
                [run, '-q', '--no-progress', '--since', '+10h', '--json', part]
            ),
        )
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(1, len(lines), lines)
        self.assertTrue(
            lines[0].startswith(
                'instrument-report: warning: no request started in the window '
            ),
            lines[0],
        )
        self.assertIn('nor any SQL statement', lines[0])
        when = fmt.fmt_time
        self.assertIn(
            'the input spans %s .. %s'
            % (when(inputs['first_us']), when(inputs['last_us'])),
            lines[0],
        )
        with open(part) as f:
            empty = json.load(f)
        self.assertEqual([], empty['requests'])
        self.assertEqual(len(starts), empty['window']['requests_outside'])
        # a window holding requests: no warning
        self.stderr.truncate(0)
        self.stderr.seek(0)
        self.assertEqual(
            0, report.main([run, '-q', '--no-progress', '--since', '+10s'])
        )
        self.assertEqual('', self.stderr.getvalue())


FIDELITY = os.path.join(
    os.path.dirname(__file__),
    '..',
    '..',
    'data',
    'fidelity',
    'demo-threads.jsonl.gz',
)


class SmallerTest(testtools.TestCase):
    """Issue 32, item 9: the command's help, ``--since +N``, the errors
    of a binary input and the order of bad lines."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.stdout = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())
        ).new_value
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', io.StringIO())
        ).new_value

    def test_help_names_every_subcommand(self):
        text = ' '.join(report.build_parser().format_help().split())
        self.assertIn('instrument-report compare RUN_A RUN_B', text)
        self.assertIn('instrument-report export --parquet DIR', text)

    def requests(self, *args) -> list:
        out = os.path.join(self.dir, 'r.json')
        report.main(
            [FIDELITY, '-q', '--no-progress', '--json', out] + list(args)
        )
        with open(out) as f:
            return json.load(f)['requests']

    def test_since_plus_zero_counts_from_the_first_request(self):
        every = self.requests()
        # a request of the demo starts before the first RPC span: the
        # api's own work comes first
        self.assertEqual(
            sorted(r['req'] for r in every),
            sorted(r['req'] for r in self.requests('--since', '+0s')),
        )
        first = min(r['start_us'] for r in every)
        late = [r for r in every if r['start_us'] >= first + 2_000_000]
        self.assertEqual(
            sorted(r['req'] for r in late),
            sorted(r['req'] for r in self.requests('--since', '+2s')),
        )

    def test_a_binary_input_is_named_in_a_short_line(self):
        path = os.path.join(self.dir, 'image.jsonl')
        with open(path, 'wb') as f:
            f.write(bytes(b for b in range(256) if b != 10) * 3 + b'\n')
        exc = self.assertRaises(
            SystemExit, report.main, [path, '--no-progress']
        )
        self.assertEqual(2, exc.code)
        line = self.stderr.getvalue().strip()
        self.assertIn(
            'image.jsonl:1: not a span record: binary data, 765 bytes: ', line
        )
        self.assertLess(len(line), 250, line)
        self.assertNotIn('\x00', line)

    def test_bad_lines_are_listed_in_their_order(self):
        run = os.path.join(self.dir, 'run')
        synthetic.generate(run, seed=2, requests=10)
        name = sorted(os.listdir(run))[0]
        with open(os.path.join(run, name), 'a') as f:
            f.write('{"v":1,"ph":"X","seq":999,"ts":1}\n')  # invalid
            f.write('{"v":7,"ph":"M"}\n')  # version
            f.write('not json at all\n')  # malformed
        report.main([run, '--no-progress'])
        listed = [
            line.split(': ')[1]
            for line in self.stdout.getvalue().splitlines()
            if line.startswith('  %s:' % name)
        ]
        self.assertEqual(['invalid', 'unknown_version', 'malformed'], listed)
