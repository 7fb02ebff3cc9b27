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
"""``instrument-report export --parquet``: the records pass 2 accepted.

* The tables hold exactly the records every figure of the report was
  computed from: each valid record once, where pass 2 read it (file and
  line), never a bad line, never a duplicate, the same with workers;
* the counts are the analyser's, and the queries of
  doc/source/export.rst (read from the page: the page and this test
  cannot drift) give the report's per-component table and SQL profile;
* ``--memory-limit`` bounds DuckDB, and without DuckDB the command says
  what to install; ``--engine`` (deprecated) changes nothing.
"""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.export import parquet as export
from instrument.analysis.render import json as report_json
from instrument.analysis.render import text as report_text
from instrument.cmd import report as report_cmd
from tests import synthetic

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
THREADS = os.path.join(
    ROOT, 'tests', 'data', 'fidelity', 'demo-threads.jsonl.gz'
)
DOC = os.path.join(ROOT, 'doc', 'source', 'export.rst')


def doc_queries() -> dict:
    """The ``.. code-block:: sql`` blocks of export.rst, by ``:name:``."""
    with open(DOC, encoding='utf-8') as f:
        text = f.read()
    out = {}
    for match in re.finditer(
        r'\.\. code-block:: sql\n   :name: (\S+)\n\n((?:   .*\n|\n)+)', text
    ):
        body = '\n'.join(line[3:] for line in match.group(2).splitlines())
        out[match.group(1)] = body.strip()
    return out


def views(out: str):
    con = export.connect()
    for name in export.EXPORTED:
        con.execute(
            "CREATE VIEW %s AS SELECT * FROM read_parquet('%s/%s/**/"  # noqa: S608
            "*.parquet', hive_partitioning = true)" % (name, out, name)
        )
    return con


def lines_of(directory: str) -> dict:
    """``{(file name, line number): line}`` of every file read."""
    out = {}
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        opener = gzip.open if name.endswith('.gz') else open
        with opener(path, 'rb') as f:
            for i, line in enumerate(f, 1):
                out[(name, i)] = line
    return out


class ExportTest(testtools.TestCase):
    """The tables, and the documented queries."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix='instrument-test-export-')
        cls.out = os.path.join(cls.dir, 'parquet')
        cls.result = export.export([THREADS], cls.out, pipeline.Options())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def test_counts(self):
        con = views(self.out)
        report = self.result['report']
        n = {
            name: con.execute(
                'SELECT count(*) FROM %s' % name  # noqa: S608
            ).fetchone()[0]
            for name in export.EXPORTED
        }
        self.assertEqual(self.result['rows'], n)
        self.assertEqual(6406, n['events'])
        self.assertEqual(report['inputs']['records'], n['events'])
        self.assertEqual(len(report['requests']), n['requests'])
        self.assertEqual(
            report['sql']['calls'],
            con.execute('SELECT sum(count) FROM sql_classes').fetchone()[0],
        )
        self.assertEqual(
            set(report['clocks']['hosts']),
            {
                r[0]
                for r in (
                    con.execute('SELECT host FROM host_offsets').fetchall()
                )
            },
        )
        # each host's offset, interval, width and error as reported
        self.assertEqual(
            sorted(
                (
                    h,
                    i['offset_us'],
                    i['low_us'],
                    i['high_us'],
                    i['width_us'],
                    i['error_us'],
                )
                for h, i in report['clocks']['hosts'].items()
            ),
            con.execute(
                'SELECT host, offset_us, low_us, high_us, '
                'width_us, error_us FROM host_offsets ORDER BY '
                'host'
            ).fetchall(),
        )
        # partitioned by day and host, Hive style
        hosts = os.listdir(
            os.path.join(
                self.out,
                'events',
                os.listdir(os.path.join(self.out, 'events'))[0],
            )
        )
        self.assertTrue(hosts and all(h.startswith('host=') for h in hosts))
        # each record where it was read, with its process and clock
        self.assertEqual(
            (os.path.basename(THREADS), 1, 6406),
            con.execute(
                'SELECT file_name, min(line), max(line) FROM events GROUP BY '
                'ALL'
            ).fetchone(),
        )
        start = con.execute(
            "SELECT ts FROM events WHERE ev = 'process.start'"
        ).fetchone()
        self.assertEqual(
            {start},
            set(
                con.execute(
                    'SELECT DISTINCT process_start FROM events'
                ).fetchall()
            ),
        )
        self.assertEqual(
            0,
            con.execute(
                'SELECT count(*) FROM events WHERE ts_corr <> ts + offset_us'
            ).fetchone()[0],
        )

    def test_components_query_is_the_reports(self):
        con = views(self.out)
        rows = con.execute(doc_queries()['components']).fetchall()
        comps = self.result['report']['summary']['components']
        self.assertTrue(rows)
        self.assertEqual(set(comps), {r[0] for r in rows})
        for name, n, lo, med, p95, hi, mean, total in rows:
            want = comps[name]
            self.assertEqual(want['count'], n)
            for key, got in (
                ('min', lo),
                ('median', med),
                ('p95', p95),
                ('max', hi),
                ('mean', mean),
                ('sum', total),
            ):
                self.assertAlmostEqual(
                    want[key], float(got), places=6, msg='%s %s' % (name, key)
                )

    def test_top_classes_query_is_the_reports_profile(self):
        con = views(self.out)
        rows = con.execute(doc_queries()['top-classes']).fetchall()
        prof = self.result['report']['sql']['rows']
        self.assertEqual(len(prof), len(rows))
        for want, got in zip(prof, rows, strict=True):
            self.assertEqual(
                (
                    want['id'],
                    want['fingerprint'],
                    want['calls'],
                    want['total_us'],
                    want['min_us'],
                    want['max_us'],
                    want['errors'],
                    want['rows'],
                ),
                (
                    got[0],
                    got[1],
                    got[2],
                    got[3],
                    got[5],
                    got[6],
                    got[7],
                    got[8],
                ),
            )
            self.assertAlmostEqual(want['avg_us'], got[4])
        slowest = con.execute(doc_queries()['slowest-statements']).fetchall()
        self.assertTrue(slowest)
        # every statement the report profiled is a row (this run's
        # records aggregated none: no sql.agg)
        self.assertEqual(
            (4566, self.result['report']['sql']['calls']),
            (
                con.execute('SELECT count(*) FROM sql_statements').fetchone()[
                    0
                ],
                4566,
            ),
        )

    def test_command(self):
        out = os.path.join(self.useFixture(fixtures.TempDir()).path, 'p')
        stdout = self.useFixture(fixtures.StringStream('stdout')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', stdout))
        self.assertEqual(
            0,
            report_cmd.main(
                ['export', '--parquet', out, '--no-progress', THREADS]
            ),
        )
        stdout.seek(0)
        self.assertIn('events 6406', stdout.read())
        self.assertEqual(sorted(export.EXPORTED), sorted(os.listdir(out)))

    def test_progress(self):
        # the command's progress line is told of every stage; the files
        # are read once, by the analysis
        seen = []
        out = os.path.join(self.useFixture(fixtures.TempDir()).path, 'p')
        export.export(
            [THREADS],
            out,
            pipeline.Options(progress=lambda *args: seen.append(args)),
        )
        stages = [s for s, _d, _t in seen]
        self.assertEqual(
            ['clocks', 'spans', 'done', 'export', 'done'],
            list(dict.fromkeys(stages)) + ['done'],
        )
        self.assertEqual('done', stages[-1])
        total = os.path.getsize(THREADS)
        self.assertEqual(
            ('export', total, total), [a for a in seen if a[0] == 'export'][-1]
        )


class AcceptedTest(testtools.TestCase):
    """The export holds what pass 2 accepted: no second reader."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.runs = os.path.join(self.dir, 'run')
        synthetic.generate(
            self.runs,
            seed=3,
            requests=40,
            rate=3.0,
            computes=2,
            bad_input=True,
        )
        # copies and a file holding its records twice
        shutil.copy(THREADS, os.path.join(self.runs, 'a.jsonl.gz'))
        shutil.copy(THREADS, os.path.join(self.runs, 'b.jsonl.gz'))
        with gzip.open(THREADS, 'rb') as f:
            data = f.read()
        with open(os.path.join(self.runs, 'twice.jsonl'), 'wb') as f:
            f.write(data + data)
        sched = [n for n in os.listdir(self.runs) if 'nova-scheduler' in n][0]
        with open(os.path.join(self.runs, sched), 'ab') as f:
            f.write(
                b'{"v":1,"ph":"X","seq":99990,"ts":"abc","host":"x",'
                b'"svc":"s","pid":1,"ev":"x","span":"a","st":"ok",'
                b'"dur_us":1}\n'
            )
            f.write(b'\x00\xff\xfebinary garbage\x01\n\n[1, 2]\n')

    def exported(self, jobs: int) -> tuple:
        out = os.path.join(self.dir, 'p%d' % jobs)
        result = export.export([self.runs], out, pipeline.Options(jobs=jobs))
        con = views(out)
        rows = con.execute(
            'SELECT file_name, line, host, pid, process_start, seq, ev '
            'FROM events'
        ).fetchall()
        return result, rows

    def test_the_records_pass_2_accepted_where_it_read_them(self):
        result, rows = self.exported(1)
        report = result['report']
        counts = report['load']['counts']
        for kind in (
            'malformed',
            'truncated',
            'unknown_version',
            'invalid',
            'duplicate',
        ):
            self.assertGreater(counts[kind], 0, kind)
        self.assertGreater(counts['duplicate'], 2 * 6406)
        self.assertEqual(0, result['untyped'])
        # every record once: no duplicate, no bad line
        self.assertEqual(report['inputs']['records'], len(rows))
        keys = [
            (host, pid, start, seq)
            for _f, _l, host, pid, start, seq, _ev in rows
        ]
        self.assertEqual(len(keys), len(set(keys)))
        # ... found at the file and line named
        lines = lines_of(self.runs)
        for fname, line, host, pid, _start, seq, ev in rows:
            raw = lines[(fname, line)]
            rec = json.loads(raw[raw.index(b'{"v":') :])
            self.assertEqual(
                (host, pid, seq, ev),
                (rec['host'], rec['pid'], rec['seq'], rec['ev']),
            )
        placed = {(fname, line) for fname, line, *_rest in rows}
        for samples in report['load']['samples'].values():
            for fname, line, _why in samples:
                self.assertNotIn((fname, line), placed)

    def test_workers_export_the_same_records(self):
        _r1, one = self.exported(1)
        _r2, two = self.exported(2)
        self.assertEqual(sorted(one), sorted(two))

    def test_a_value_parquet_cannot_hold_is_said(self):
        # Python reads an integer up to 2**64 - 1; a BIGINT holds up to
        # 2**63 - 1
        path = os.path.join(self.dir, 'big.jsonl')
        with open(path, 'w') as f:
            f.write(
                '{"v":1,"ph":"M","seq":1,"ts":5,"host":"h","svc":"s",'
                '"pid":7,"ev":"x"}\n'
            )
            f.write(
                '{"v":1,"ph":"M","seq":2,"ts":5,"host":"h","svc":"s",'
                '"pid":7,"ev":"x","tid":%d}\n' % ((1 << 64) - 1)
            )
        stderr = self.useFixture(fixtures.StringStream('stderr')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', stderr))
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', stderr))
        out = os.path.join(self.dir, 'big')
        self.assertEqual(
            0,
            report_cmd.main(
                ['export', '--parquet', out, '--no-progress', path]
            ),
        )
        stderr.seek(0)
        self.assertIn(
            'warning: 1 valid records left out of the events table',
            stderr.read(),
        )
        self.assertEqual(
            1,
            export.connect()
            .execute(
                'SELECT count(*) FROM read_parquet(?)',
                [os.path.join(out, 'events', '**', '*.parquet')],
            )
            .fetchone()[0],
        )


class CommandTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.stderr = self.useFixture(fixtures.StringStream('stderr')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', self.stderr))
        self.stdout = self.useFixture(fixtures.StringStream('stdout')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', self.stdout))

    def said(self, stream) -> str:
        stream.seek(0)
        return stream.read()

    def test_memory_limit_too_small_or_not_a_size(self):
        out = self.useFixture(fixtures.TempDir()).path
        exc = self.assertRaises(
            SystemExit,
            report_cmd.main,
            [
                'export',
                '--parquet',
                out,
                '--no-progress',
                '--memory-limit',
                '1KB',
                THREADS,
            ],
        )
        self.assertEqual(report_cmd.EXIT_MISSING, exc.code)
        self.assertIn(
            'more memory than --memory-limit 1KB allows',
            self.said(self.stderr),
        )
        exc = self.assertRaises(
            SystemExit,
            report_cmd.main,
            ['export', '--parquet', out, '--memory-limit', 'lots', THREADS],
        )
        self.assertEqual(report_cmd.EXIT_USAGE, exc.code)

    def test_memory_limit_spills_under_the_temp_directory(self):
        out = os.path.join(self.useFixture(fixtures.TempDir()).path, 'p')
        tmp = self.useFixture(fixtures.TempDir()).path
        self.useFixture(fixtures.MonkeyPatch('tempfile.tempdir', tmp))
        result = export.export(
            [THREADS], out, pipeline.Options(), memory_limit='64MB'
        )
        self.assertEqual(6406, result['rows']['events'])
        self.assertEqual([], os.listdir(tempfile.gettempdir()))
        con = export.connect('16MB', temp_directory=tmp)
        self.assertEqual(
            '15.2 MiB',
            con.execute("SELECT current_setting('memory_limit')").fetchone()[
                0
            ],
        )

    def test_without_duckdb_export_says_what_to_install(self):
        # no traceback: one line and exit status 1, as for the other
        # libraries of the report extra; the report itself needs none
        out = self.useFixture(fixtures.TempDir()).path
        code = (
            'import sys\n'
            'sys.modules["duckdb"] = None\n'
            'from instrument.cmd import report\n'
            'report.main(sys.argv[1:])\n'
        )
        proc = subprocess.run(
            [
                sys.executable,
                '-c',
                code,
                'export',
                '--parquet',
                out,
                '--no-progress',
                THREADS,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        self.assertEqual(report_cmd.EXIT_MISSING, proc.returncode)
        self.assertEqual(
            [
                "instrument-report: error: DuckDB is not "
                "installed: pip install "
                "'openstack-instrument[report]'"
            ],
            proc.stderr.splitlines(),
        )
        proc = subprocess.run(
            [sys.executable, '-c', code, '-q', '--no-progress', THREADS],
            capture_output=True,
            text=True,
            check=False,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)

    def test_engine_is_deprecated_and_changes_nothing(self):
        d = self.useFixture(fixtures.TempDir()).path
        outputs = []
        for extra in (
            [],
            ['--engine', 'duckdb', '--memory-limit', '2GB'],
            ['--engine', 'python'],
        ):
            path = os.path.join(d, 'r%d.json' % len(outputs))
            self.assertEqual(
                0,
                report_cmd.main(
                    ['--no-progress', '-q', '--json', path, THREADS] + extra
                ),
            )
            with open(path) as f:
                report = json.load(f)
            report.pop('run')
            outputs.append(report)
        self.assertEqual(outputs[0], outputs[1])
        self.assertEqual(outputs[0], outputs[2])
        said = self.said(self.stderr).splitlines()
        self.assertEqual(
            2,
            sum('--engine is deprecated and ignored' in line for line in said),
            said,
        )
        self.assertEqual(
            1,
            sum(
                '--memory-limit is deprecated and ignored here' in line
                for line in said
            ),
            said,
        )
        # export takes --engine too (deprecated), and --memory-limit
        out = os.path.join(d, 'p')
        self.assertEqual(
            0,
            report_cmd.main(
                [
                    'export',
                    '--parquet',
                    out,
                    '--no-progress',
                    '--engine',
                    'duckdb',
                    '--memory-limit',
                    '512MB',
                    THREADS,
                ]
            ),
        )
        said = self.said(self.stderr).splitlines()
        self.assertEqual(
            3, sum('--engine is deprecated' in line for line in said)
        )
        self.assertEqual(
            1, sum('--memory-limit is deprecated' in line for line in said)
        )

    def test_the_report_of_a_run_is_the_same_as_before_the_export(self):
        # the export's analysis is the report's
        out = os.path.join(self.useFixture(fixtures.TempDir()).path, 'p')
        result = export.export([THREADS], out, pipeline.Options())
        report = pipeline.analyse([THREADS], pipeline.Options())
        for r in (report, result['report']):
            r.pop('run')
        self.assertEqual(
            report_json.dumps(report), report_json.dumps(result['report'])
        )
        self.assertEqual(
            report_text.render(report), report_text.render(result['report'])
        )
