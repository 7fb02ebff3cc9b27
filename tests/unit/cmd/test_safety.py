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
"""``instrument-report`` never destroys its input, refuses nonsense
numbers and never hides a loss (issue 27, items 7 to 10).

Every output of every subcommand goes through one rule
(``report.check_outputs``), applied before the analysis: not an input
(the same file by any path: a symbolic link, another spelling, a hard
link), not inside an input directory, for ``export`` no table directory
it replaces holding an input; its directory exists and it can be
written.  A refusal is one line and exit status 2.
"""

import hashlib
import io
import json
import os
import shutil

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.export import parquet as export
from instrument.cmd import report
from tests import synthetic

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
THREADS = os.path.join(
    ROOT, 'tests', 'data', 'fidelity', 'demo-threads.jsonl.gz'
)
_real_run = pipeline.run


def digest(path: str) -> str:
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


class CliCase(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.stdout = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())
        ).new_value
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', io.StringIO())
        ).new_value

    def path(self, *parts: str) -> str:
        return os.path.join(self.dir, *parts)

    def run_dir(self, name: str = 'run', **kw) -> str:
        path = self.path(name)
        synthetic.generate(path, seed=5, requests=30, **kw)
        return path

    def no_analysis(self):
        """Make the analysis fail the test: a refusal comes first."""

        def run(*args, **kwargs):
            self.fail('analysed %r before refusing' % (args,))

        self.useFixture(
            fixtures.MonkeyPatch('instrument.analysis.pipeline.run', run)
        )

    def analysis(self):
        """Undo ``no_analysis``."""
        self.useFixture(
            fixtures.MonkeyPatch('instrument.analysis.pipeline.run', _real_run)
        )

    def fails(self, argv: list, message: str) -> str:
        """``argv`` exits with status 2 and one line on stderr, which
        holds ``message``."""
        self.stderr.seek(0)
        self.stderr.truncate()
        exc = self.assertRaises(SystemExit, report.main, argv)
        self.assertEqual(2, exc.code)
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(1, len(lines), lines)
        self.assertRegex(lines[0], r'^instrument-report( \w+)?: error: ')
        self.assertIn(message, lines[0])
        return lines[0]


class InputIsNeverAnOutputTest(CliCase):
    """Item 7: ``instrument-report victim.jsonl --json victim.jsonl``
    replaced a 37 MB span file with its report."""

    def setUp(self):
        super().setUp()
        self.run = self.run_dir()
        name = sorted(n for n in os.listdir(self.run) if n.endswith('.jsonl'))[
            0
        ]
        self.victim = self.path(name)
        shutil.copy(os.path.join(self.run, name), self.victim)
        self.before = {
            p: digest(p)
            for p in [self.victim]
            + [os.path.join(self.run, n) for n in os.listdir(self.run)]
        }

    def tearDown(self):
        for path, sha in self.before.items():
            self.assertEqual(sha, digest(path), path)
        super().tearDown()

    def test_the_input_file_by_any_path(self):
        self.no_analysis()
        os.symlink(self.victim, self.path('link.jsonl'))
        os.link(self.victim, self.path('hard.jsonl'))
        os.mkdir(self.path('sub'))
        for out in (
            self.victim,
            self.path('link.jsonl'),
            self.path('hard.jsonl'),
            self.path('sub', '..', os.path.basename(self.victim)),
            self.path('nosuch', '..', os.path.basename(self.victim)),
        ):
            for option in ('--json', '--html'):
                self.fails(
                    [self.victim, option, out, '-q'],
                    'cannot write %s: it is the input %s' % (out, self.victim),
                )
        # named through a glob, or as a link
        self.fails(
            [self.path('*.jsonl'), '--json', self.victim], 'it is the input'
        )
        self.fails(
            [self.path('link.jsonl'), '--json', self.victim], 'it is the input'
        )
        # beside the input file (its directory is not an input): written
        self.analysis()
        out = self.path('victim.json')
        self.assertEqual(
            0, report.main([self.victim, '-q', '--json', out, '--no-progress'])
        )
        with open(out) as f:
            self.assertIn('report_version', f.read())

    def test_inside_an_input_directory(self):
        self.no_analysis()
        os.symlink(self.run, self.path('run-link'))
        for out in (
            os.path.join(self.run, 'a.jsonl'),
            os.path.join(self.run, 'report.html'),
            os.path.join(self.run, 'sub', 'deeper.json'),
            self.path('run-link', 'a.json'),
        ):
            self.fails(
                [self.run, '--html', out, '-q'],
                'cannot write %s: it is inside the input directory' % out,
            )
        self.fails(
            [
                self.path('run-link'),
                '--json',
                os.path.join(self.run, 'r.json'),
            ],
            'it is inside the input directory',
        )
        self.fails([self.run, '--json', self.run], 'it is the input')
        self.assertEqual('', self.stdout.getvalue())

    def test_compare_never_writes_over_a_run(self):
        self.no_analysis()
        a = self.path('a.json')
        b = self.path('b.json')
        for path in (a, b):
            with open(path, 'w') as f:
                f.write('{"report_version": 1}\n')
            self.before[path] = digest(path)
        self.fails(
            ['compare', a, b, '--json', a],
            'cannot write %s: it is the input %s' % (a, a),
        )
        self.fails(
            [
                'compare',
                a,
                self.run,
                '--json',
                os.path.join(self.run, 'cmp.json'),
            ],
            'it is inside the input directory %s' % self.run,
        )

    def test_export_never_replaces_an_input(self):
        self.no_analysis()
        self.fails(
            ['export', '--parquet', self.run, self.run],
            'cannot write %s: it is the input %s' % (self.run, self.run),
        )
        inside = os.path.join(self.run, 'parquet')
        self.fails(
            ['export', '--parquet', inside, self.run],
            'it is inside the input directory %s' % self.run,
        )
        # a table directory it would replace holds the input
        out = self.path('out')
        events = os.path.join(out, 'events')
        os.makedirs(events)
        kept = os.path.join(events, 'spans.jsonl')
        shutil.copy(self.victim, kept)
        self.before[kept] = digest(kept)
        for given in (kept, events):
            self.fails(
                ['export', '--parquet', out, given],
                'cannot write %s: %s, which it replaces, holds the '
                'input %s' % (out, events, given),
            )


class OneRuleForEveryOutputTest(CliCase):
    """Item 8: ``export --parquet`` on a file crashed after the whole
    analysis; a missing directory was created for it while ``--json``
    refused one."""

    def test_export_on_a_file_is_refused_first(self):
        run = self.run_dir()
        existing = self.path('existing')
        with open(existing, 'w') as f:
            f.write('keep\n')
        self.no_analysis()
        self.fails(
            ['export', '--parquet', existing, run],
            'cannot write %s: it is not a directory' % existing,
        )
        with open(existing) as f:
            self.assertEqual('keep\n', f.read())

    def test_a_missing_directory_is_refused_for_every_output(self):
        run = self.run_dir()
        self.no_analysis()
        missing = self.path('nonexistent')
        for argv, out in (
            (['export', '--parquet'], os.path.join(missing, 'x')),
            ([run, '--json'], os.path.join(missing, 'r.json')),
            ([run, '--html'], os.path.join(missing, 'r.html')),
            (['compare', run, run, '--json'], os.path.join(missing, 'c.json')),
        ):
            argv = argv + [out] + ([run] if argv[0] == 'export' else [])
            self.fails(
                argv, 'cannot write %s: no directory %s' % (out, missing)
            )
        self.assertFalse(os.path.lexists(missing))
        self.assertEqual(['run'], os.listdir(self.dir))

    def test_a_table_path_that_is_a_file_is_refused_first(self):
        run = self.run_dir()
        out = self.path('out')
        os.mkdir(out)
        with open(os.path.join(out, 'spans'), 'w') as f:
            f.write('x\n')
        self.no_analysis()
        self.fails(
            ['export', '--parquet', out, run],
            'cannot write %s: %s '
            'is not a directory' % (out, os.path.join(out, 'spans')),
        )
        # a table's directory is replaced
        os.unlink(os.path.join(out, 'spans'))
        os.makedirs(os.path.join(out, 'events', 'old'))
        self.analysis()
        self.assertEqual(
            0,
            report.main(
                ['export', '--parquet', out, '--no-progress', THREADS]
            ),
        )
        self.assertEqual(sorted(export.EXPORTED), sorted(os.listdir(out)))
        self.assertFalse(os.path.exists(os.path.join(out, 'events', 'old')))

    def test_a_write_that_fails_after_the_analysis_is_one_line(self):
        out = self.path('out')

        def run(*args, **kwargs):
            result = _real_run(*args, **kwargs)
            # meanwhile, a table's path became a file
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, 'host_offsets'), 'w') as f:
                f.write('x\n')
            return result

        self.useFixture(
            fixtures.MonkeyPatch('instrument.analysis.pipeline.run', run)
        )
        line = self.fails(
            ['export', '--parquet', out, '--no-progress', THREADS],
            'cannot write %s: host_offsets: ' % out,
        )
        self.assertNotIn('Traceback', line)


class NumbersInRangeTest(CliCase):
    """Item 9: nonsense numbers were accepted with exit status 0."""

    def test_out_of_range_is_one_line_and_status_2(self):
        run = self.run_dir()
        self.no_analysis()
        for argv, message in (
            (
                ['--horizon', '-5'],
                'argument --horizon: must be more than 0 seconds, not -5',
            ),
            (['--horizon', '0'], 'argument --horizon: must be more than 0'),
            (
                ['--horizon', 'inf'],
                'argument --horizon: not a number of seconds',
            ),
            (
                ['--horizon', 'nan'],
                'argument --horizon: not a number of seconds',
            ),
            (['--hung', '-1'], 'argument --hung: must be more than 0'),
            (['--limit', '-1'], 'argument --limit: must be 0 or more, not -1'),
            (['--limit', '2.5'], 'argument --limit: not a whole number'),
            (['--jobs', '0'], 'argument --jobs/-j: must be 1 or more'),
            (['--jobs', '-3'], 'argument --jobs/-j: must be 1 or more'),
            (['--blocks', '-1'], 'argument --blocks: must be 0 or more'),
        ):
            self.fails([run] + argv, message)
            self.fails(
                ['export', '--parquet', self.path('p'), run] + argv
                if argv[0] != '--blocks'
                else [run] + argv,
                message,
            )
        for argv, message in (
            (
                ['--alpha', '5'],
                'argument --alpha: must be between 0 and 1 (e.g. 0.05), not 5',
            ),
            (['--alpha', '0'], 'argument --alpha: must be between'),
            (['--alpha', '1'], 'argument --alpha: must be between'),
            (['--top', '-1'], 'argument --top: must be 0 or more'),
            (['--jobs', '0'], 'argument --jobs/-j: must be 1 or more'),
            (['--horizon', '-5'], 'argument --horizon: must be more'),
        ):
            self.fails(['compare', run, run] + argv, message)
        self.assertEqual('', self.stdout.getvalue())

    def test_in_range_is_taken(self):
        args = report.build_parser().parse_args(
            [
                'x',
                '--horizon',
                '0.5',
                '--hung',
                '1e3',
                '--limit',
                '0',
                '--jobs',
                '2',
                '--blocks',
                '0',
            ]
        )
        self.assertEqual(
            (0.5, 1000.0, 0, 2, 0),
            (args.horizon, args.hung, args.limit, args.jobs, args.blocks),
        )
        self.assertIsNone(report.build_parser().parse_args(['x']).jobs)
        args = report.build_compare_parser().parse_args(
            ['a', 'b', '--alpha', '0.01', '--top', '0']
        )
        self.assertEqual((0.01, 0), (args.alpha, args.top))


class LossesAreNeverHiddenTest(CliCase):
    """Item 10: a cut gzip with ``-q --json`` exited 0 with nothing on
    stderr; ``compare`` of a cut run said "0 successful, success rate
    -100 %" without a word about the cut."""

    def setUp(self):
        super().setUp()
        with open(THREADS, 'rb') as f:
            data = f.read()
        self.cut = self.path('cut.jsonl.gz')
        with open(self.cut, 'wb') as f:
            f.write(data[: len(data) // 2])

    def warnings(self) -> list:
        return [
            line
            for line in self.stderr.getvalue().splitlines()
            if line.startswith('instrument-report: warning: ')
        ]

    def test_quiet_json_report_of_a_cut_file_warns(self):
        out = self.path('cut.json')
        self.assertEqual(
            0, report.main([self.cut, '-q', '--no-progress', '--json', out])
        )
        self.assertEqual('', self.stdout.getvalue())
        (line,) = self.stderr.getvalue().splitlines()
        self.assertIn(
            'instrument-report: warning: computed from input with losses: ',
            line,
        )
        self.assertIn('the rest of cut.jsonl.gz after line ', line)
        with open(out) as f:
            q = json.load(f)['quality']
        self.assertEqual(line.split('warning: ', 1)[1], q['note'])
        # to standard output, too
        self.stderr.truncate(0)
        self.stderr.seek(0)
        self.assertEqual(
            0, report.main([self.cut, '--no-progress', '--html', '-'])
        )
        self.assertEqual(1, len(self.warnings()))
        self.assertIn(q['note'], self.stdout.getvalue())
        # the whole file: no warning
        self.stderr.truncate(0)
        self.stderr.seek(0)
        self.assertEqual(0, report.main([THREADS, '-q', '--no-progress']))
        self.assertEqual('', self.stderr.getvalue())

    def test_compare_names_the_cut_run_and_its_incomplete_boots(self):
        cut_json = self.path('cut.json')
        self.assertEqual(
            0,
            report.main([self.cut, '-q', '--no-progress', '--json', cut_json]),
        )
        for run_b in (self.cut, cut_json):
            self.stdout.truncate(0)
            self.stdout.seek(0)
            self.stderr.truncate(0)
            self.stderr.seek(0)
            out = self.path('cmp.json')
            self.assertEqual(
                0,
                report.main(
                    ['compare', THREADS, run_b, '--no-progress', '--json', out]
                ),
            )
            (line,) = self.warnings()
            self.assertIn(
                'RUN_B %s: computed from input with losses: ' % run_b, line
            )
            self.assertIn('the rest of cut.jsonl.gz after line', line)
            text = self.stdout.getvalue()
            self.assertIn(
                '# B: 2 boots, 0 successful, 2 boot instances incomplete', text
            )
            self.assertIn('! B: computed from input with losses: ', text)
            # beside the rates, the latencies and the SQL
            self.assertEqual(
                3,
                text.count(
                    '! B: computed from input with losses (see the top)'
                ),
            )
            with open(out) as f:
                runs = json.load(f)['runs']
            self.assertIsNone(runs['a']['loss'])
            self.assertEqual(['cut.jsonl.gz'], runs['b']['unreadable'])
            self.assertEqual(2, runs['b']['incomplete'])
            self.assertIn('the rest of cut.jsonl.gz', runs['b']['loss'])

    def test_export_of_a_cut_file_warns(self):
        out = self.path('p')
        self.assertEqual(
            0,
            report.main(
                ['export', '--parquet', out, '--no-progress', self.cut]
            ),
        )
        (line,) = self.warnings()
        self.assertIn('the rest of cut.jsonl.gz after line', line)
