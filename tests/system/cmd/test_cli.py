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
"""``instrument-report`` run as a user runs it: the console script in a
subprocess, its exit status, standard output and standard error.

What a new user tripped over (issue 14): bad input that exited 0, the
demo's own report files read as span files, ``--json -``, an empty
``--since``/``--until`` window, ``Rows 0`` for unknown row counts.
"""

import json
import os
import re
import subprocess
import sys

import fixtures
import testtools

from tests import synthetic

SCRIPT = os.path.join(os.path.dirname(sys.executable), 'instrument-report')


class CliTest(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = fixtures.TempDir()
        cls.tmp.setUp()
        cls.run_dir = os.path.join(cls.tmp.path, 'run')
        synthetic.generate(cls.run_dir, seed=4, requests=80)
        cls.report = os.path.join(cls.tmp.path, 'run.json')
        proc = subprocess.run(
            [SCRIPT, cls.run_dir, '-q', '--json', cls.report],
            capture_output=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanUp()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.assertTrue(
            os.access(SCRIPT, os.X_OK),
            'the console script is not installed: %s' % SCRIPT,
        )
        self.dir = self.useFixture(fixtures.TempDir()).path

    def cli(self, *args, status=0) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [SCRIPT] + list(args),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.dir,
        )
        self.assertEqual(
            status, proc.returncode, proc.stdout[-2000:] + proc.stderr[-2000:]
        )
        self.assertNotIn('Traceback', proc.stderr)
        return proc

    def error(self, *args) -> str:
        """The one line a failing command writes; status 2, no output."""
        proc = self.cli(*args, status=2)
        self.assertEqual('', proc.stdout)
        lines = proc.stderr.splitlines()
        self.assertEqual(1, len(lines), lines)
        self.assertTrue(
            lines[0].startswith('instrument-report: error: '), lines[0]
        )
        return lines[0]

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.dir, name)
        with open(path, 'wb') as f:
            f.write(data)
        return path

    # -- item 2: input without span records ---------------------------------

    def test_a_binary_file_is_an_error(self):
        path = self.write('capture.bin', bytes(range(256)) * 64)
        line = self.error(path)
        self.assertIn('no span records in 1 file (capture.bin)', line)

    def test_an_empty_file_is_an_error(self):
        line = self.error(self.write('empty.jsonl', b''))
        self.assertIn('no span records', line)
        self.assertIn('nothing but empty lines', line)

    def test_compare_with_another_tools_json(self):
        other = self.write(
            'some-other-tool.json', b'{"benchmark": "x", "results": [1, 2]}\n'
        )
        line = self.error('compare', self.report, other)
        self.assertIn(
            'RUN_B %s: not an instrument-report JSON report' % other, line
        )
        binary = self.write('random.bin', os.urandom(4096))
        line = self.error('compare', binary, self.report)
        self.assertIn('RUN_A %s: no span records' % binary, line)

    def test_compare_with_a_run_without_requests_or_sql(self):
        # span records, but nothing to compare: one process start
        start = {
            'v': 1,
            'ph': 'M',
            'seq': 1,
            'ts': 1_700_000_000_000_000,
            'host': 'h',
            'svc': 'api',
            'pid': 1,
            'ev': 'process.start',
            'attrs': {'service': 'nova-api'},
        }
        spans = self.write('h_api_1.jsonl', json.dumps(start).encode() + b'\n')
        line = self.error('compare', self.report, spans)
        self.assertIn('no request and no SQL statement to compare', line)

    # -- item 3: the demo's output directory --------------------------------

    def demo_like_directory(self) -> str:
        out = os.path.join(self.dir, 'instrument-demo-output')
        os.makedirs(out)
        os.symlink(self.run_dir, os.path.join(out, 'spans'))
        with open(self.report, 'rb') as f:
            self.write('instrument-demo-output/report.json', f.read())
        self.write(
            'instrument-demo-output/servers.json',
            b'{\n "counts": {"ACTIVE": 2}, "servers": []}\n',
        )
        self.write(
            'instrument-demo-output/report.txt',
            b'# instrument-report: 10 files\n',
        )
        self.write('instrument-demo-output/report.html', b'<html/>\n')
        return out

    def test_the_demo_output_directory(self):
        out = self.demo_like_directory()
        proc = self.cli(out, '--no-progress')
        text = proc.stdout
        for kind in ('malformed', 'unknown_version'):
            self.assertNotIn(kind, text)
        self.assertIn('! skipped %s/report.json: a JSON report' % out, text)
        self.assertIn('skipped 2 files holding no span record', text)
        self.assertIn('report.html', text)
        with open(self.report) as f:
            report = json.load(f)
        records = report['inputs']['records']
        # the findings first (the synthetic cloud's injected deadlocks on
        # quota_reserve make one), then the input summary
        found = len(report['findings']['findings'])
        self.assertTrue(found, report['findings'])
        self.assertTrue(text.startswith('Findings: %d (' % found), text[:100])
        header = [
            line
            for line in text.splitlines()
            if line.startswith('# instrument-report: ')
        ]
        self.assertIn('%d records' % records, header[0])

    def test_a_json_report_gets_a_hint_to_compare(self):
        line = self.error(self.report)
        self.assertIn('a JSON report', line)
        self.assertIn('instrument-report compare', line)

    # -- item 4: rows the driver did not count ------------------------------

    def test_rows_unknown_never_zero(self):
        proc = self.cli(
            self.run_dir,
            '--limit',
            '0',
            '--blocks',
            '1000',
            '--json',
            os.path.join(self.dir, 'r.json'),
            '--no-progress',
        )
        with open(os.path.join(self.dir, 'r.json')) as f:
            rows = {r['id']: r for r in json.load(f)['sql']['rows']}
        blocks = proc.stdout.split('\n# Query ')[1:]
        self.assertEqual(len(rows), len(blocks))
        shown = set()
        for block in blocks:
            qid = re.search(r'ID (\w+)', block).group(1)
            text = re.search(r'^# Rows +(\S+)', block, re.M).group(1)
            # the synthetic cloud gives no row count for its one-by-one
            # INSERTs, UPDATEs, BEGINs...: None in JSON, never 0
            want = rows[qid]['rows']
            self.assertEqual(
                'unknown' if want is None else str(want), text, block
            )
            shown.add(text)
        self.assertIn('unknown', shown)
        self.assertNotIn('0', shown)

    # -- item 5: --json -, --since/--until -----------------------------------

    def test_json_to_standard_output(self):
        proc = self.cli(self.run_dir, '--json', '-', '--no-progress')
        data = json.loads(proc.stdout)
        self.assertEqual(80, len(data['requests']))
        self.assertEqual([], os.listdir(self.dir))
        proc = self.cli(
            'compare',
            self.report,
            self.run_dir,
            '--json',
            '-',
            '--no-progress',
        )
        self.assertIn('latency', json.loads(proc.stdout))

    def test_html_to_standard_output(self):
        proc = self.cli(self.run_dir, '--html', '-', '--no-progress')
        self.assertTrue(
            proc.stdout.lstrip().lower().startswith('<!doctype html'),
            proc.stdout[:100],
        )
        self.assertEqual([], os.listdir(self.dir))

    def test_since_later_than_until_is_refused(self):
        for since, until in (
            ('2024-05-01T12:30:00', '2024-05-01T12:00:00'),
            ('+10m', '+5m'),
        ):
            line = self.error(self.run_dir, '--since', since, '--until', until)
            self.assertIn('is not before --until', line)

    def test_the_window_filters_the_whole_report(self):
        with open(self.report) as f:
            full = json.load(f)
        proc = self.cli(
            self.run_dir,
            '--since',
            '+10s',
            '--until',
            '+20s',
            '--json',
            '-',
            '--no-progress',
        )
        part = json.loads(proc.stdout)
        since, until = (part['window']['since_us'], part['window']['until_us'])
        self.assertEqual(10_000_000, until - since)
        want = sorted(
            r['req']
            for r in full['requests']
            if since <= r['start_us'] < until
        )
        self.assertEqual(want, sorted(r['req'] for r in part['requests']))
        self.assertEqual(
            len(full['requests']) - len(want),
            part['window']['requests_outside'],
        )
        text = self.cli(
            self.run_dir, '--since', '+10s', '--until', '+20s', '--no-progress'
        ).stdout
        self.assertIn(
            '%d requests that started outside'
            % part['window']['requests_outside'],
            text,
        )

    # -- issue 27: inputs kept, numbers in range, losses said ----------------

    def test_the_report_never_replaces_its_input(self):
        name = sorted(
            n for n in os.listdir(self.run_dir) if n.endswith('.jsonl')
        )[0]
        with open(os.path.join(self.run_dir, name), 'rb') as f:
            data = f.read()
        victim = self.write('victim.jsonl', data)
        line = self.error(victim, '--json', victim, '-q')
        self.assertEqual(
            'instrument-report: error: cannot write %s: it is '
            'the input %s' % (victim, victim),
            line,
        )
        with open(victim, 'rb') as f:
            self.assertEqual(data, f.read())

    def test_a_number_out_of_range_is_one_line(self):
        line = self.error(self.run_dir, '--horizon', '-5')
        self.assertEqual(
            'instrument-report: error: argument --horizon: '
            'must be more than 0 seconds, not -5 (see '
            'instrument-report --help)',
            line,
        )

    def test_a_cut_file_is_said_on_standard_error_even_quiet(self):
        gz = os.path.join(
            os.path.dirname(
                os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            ),
            'data',
            'fidelity',
            'demo-threads.jsonl.gz',
        )
        with open(gz, 'rb') as f:
            data = f.read()
        cut = self.write('cut.jsonl.gz', data[: len(data) // 2])
        proc = self.cli(
            cut,
            '-q',
            '--json',
            os.path.join(self.dir, 'r.json'),
            '--no-progress',
        )
        self.assertEqual('', proc.stdout)
        (line,) = proc.stderr.splitlines()
        self.assertTrue(
            line.startswith(
                'instrument-report: warning: computed from input with losses: '
            ),
            line,
        )
        self.assertIn('the rest of cut.jsonl.gz after line', line)
