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
"""The columnar engine (DuckDB) gives today's analyser's results.

* ``columnar.load_files`` counts the same bad lines, with the same file,
  line and reason, as the analyser's pass 2, on a real span file, on
  the synthetic cloud's damaged input, on copies and on the corner
  cases of the decoder's own tests;
* ``instrument-report export --parquet`` writes tables whose counts
  are the analyser's, and the queries of doc/source/export.rst (read
  from the page: the page and this test cannot drift) give the
  report's per-component table and SQL profile;
* the SQL digest's tests run again with the classes computed by DuckDB.
"""

import gzip
import json
import os
import re
import shutil
import sys
from unittest import mock

import fixtures
import testtools

from instrument.analysis import columnar
from instrument.analysis import load
from instrument.analysis import pipeline
from instrument.analysis import sqldigest
from instrument.cmd import report as report_cmd
from tests.unit.analysis import test_cut_input
from tests.unit.analysis import test_load
from tests.unit.analysis import test_sqldigest
from tests import synthetic

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
THREADS = os.path.join(ROOT, 'tests', 'data', 'fidelity',
                       'demo-threads.jsonl.gz')
DOC = os.path.join(ROOT, 'doc', 'source', 'export.rst')


def doc_queries() -> dict:
    """The ``.. code-block:: sql`` blocks of export.rst, by ``:name:``."""
    with open(DOC, encoding='utf-8') as f:
        text = f.read()
    out = {}
    for match in re.finditer(
            r'\.\. code-block:: sql\n   :name: (\S+)\n\n((?:   .*\n|\n)+)',
            text):
        body = '\n'.join(line[3:] for line in match.group(2).splitlines())
        out[match.group(1)] = body.strip()
    return out


def issues_of(report_load: dict) -> tuple:
    return (report_load['counts'], report_load['other_lines'],
            sorted((k, tuple(s)) for k, v in report_load['samples'].items()
                   for s in v))


def columnar_issues(paths: list) -> tuple:
    con = columnar.connect()
    loaded = columnar.load_files(con, paths)
    issues = loaded.issues
    return loaded, (issues.counts, issues.other_lines,
                    sorted((k, tuple(s)) for k, v in issues.samples.items()
                           for s in v))


class LoadTest(testtools.TestCase):
    """Bad lines: the same kinds, lines and reasons as pass 2."""

    def same(self, inputs: list) -> columnar.Loaded:
        report = pipeline.analyse(inputs)
        paths, _problems = load.discover(inputs)
        loaded, mine = columnar_issues(paths)
        self.assertEqual(issues_of(report['load']), mine)
        self.assertEqual(report['inputs']['records'], loaded.records)
        self.assertEqual(report['inputs']['lines'], loaded.lines)
        return loaded

    def test_real_span_file(self):
        loaded = self.same([THREADS])
        self.assertEqual(6406, loaded.records)

    def test_damaged_synthetic_cloud(self):
        d = self.useFixture(fixtures.TempDir()).path
        synthetic.generate(d, seed=3, requests=40, rate=3.0, computes=2,
                           bad_input=True)
        sched = [n for n in os.listdir(d) if 'nova-scheduler' in n][0]
        with open(os.path.join(d, sched), 'ab') as f:
            f.write(b'{"v":1,"ph":"X","seq":99990,"ts":"abc","host":"x",'
                    b'"svc":"s","pid":1,"ev":"x","span":"a","st":"ok",'
                    b'"dur_us":1}\n')
            f.write(b'\x00\xff\xfebinary garbage\x01\n\n[1, 2]\n')
        loaded = self.same([d])
        counts = loaded.issues.counts
        for kind in ('malformed', 'truncated', 'unknown_version',
                     'invalid', 'duplicate'):
            self.assertGreater(counts[kind], 0, kind)

    def test_copies_and_records_twice(self):
        d = self.useFixture(fixtures.TempDir()).path
        shutil.copy(THREADS, os.path.join(d, 'a.jsonl.gz'))
        shutil.copy(THREADS, os.path.join(d, 'b.jsonl.gz'))
        with gzip.open(THREADS, 'rb') as f:
            data = f.read()
        with open(os.path.join(d, 'twice.jsonl'), 'wb') as f:
            f.write(data + data)
        loaded = self.same([d])
        self.assertEqual(6406, loaded.records)
        self.assertEqual(3 * 6406, loaded.issues.counts['duplicate'])

    def test_a_field_given_twice_is_named_not_misread(self):
        # Python keeps the last value; DuckDB would read the first: the
        # record is left out and named (the key count finds it)
        d = self.useFixture(fixtures.TempDir()).path
        ok = (b'{"v":1,"ph":"M","seq":1,"ts":5,"host":"h","svc":"s",'
              b'"pid":7,"ev":"x"}\n')
        twice = ok.replace(b'"seq":1,', b'"seq":2,"seq":3,')
        with open(os.path.join(d, 'a.jsonl'), 'wb') as f:
            f.write(ok + twice)
        loaded = columnar.load_files(columnar.connect(),
                                     [os.path.join(d, 'a.jsonl')])
        self.assertEqual(1, loaded.records)
        self.assertEqual(['a.jsonl:2: a valid record the columnar engine '
                          'cannot type (left out)'], loaded.problems)
        self.assertEqual(0, sum(loaded.issues.counts.values()))
        self.assertEqual(2, pipeline.analyse([os.path.join(
            d, 'a.jsonl')])['inputs']['records'])

    def test_service_log_not_utf8_and_cut_gzip(self):
        d = self.useFixture(fixtures.TempDir()).path
        lines = [json.dumps(test_load.rec(seq=i, span='%016x' % i,
                                          req='req-%d' % i))
                 for i in range(1, 30)]
        with open(os.path.join(d, 'nova-api.log'), 'wb') as f:
            for i, line in enumerate(lines):
                f.write(b'2024-01-01 00:00:00.000 7 INFO nova.api [-] GET'
                        b'%s\n' % (b' \xff' if i == 3 else
                                   b' \r' if i == 5 else b''))
                f.write(b'2024-01-01 00:00:00.000 7 INFO instrument.spans '
                        b'[-] %s\n' % line.encode())
            f.write(b'{"v":1,"ph":"X","seq":\xff}\n\t\n')
        data = gzip.compress(('\n'.join(lines) + '\n').encode())
        with open(os.path.join(d, 'cut.jsonl.gz'), 'wb') as f:
            f.write(data[:len(data) // 2])
        with open(os.path.join(d, 'bad.jsonl'), 'wb') as f:
            f.write(b'{"v":1}\n\xff\xfe not utf-8\n' +
                    lines[0].encode()[:30])
        loaded = self.same([d])
        # every complete line before the cut is read, by both engines
        n = len(test_cut_input.gzip_lines(data[:len(data) // 2]))
        self.assertGreater(n, 0)
        cut = [p for p in loaded.problems if p.startswith('cut.jsonl.gz')]
        self.assertEqual(1, len(cut))
        self.assertIn('the rest of the file after line %d is' % (n + 1),
                      cut[0])
        self.assertIn(cut[0], pipeline.analyse([d])['load']['problems'])

    def test_cut_gzip_span_file(self):
        d = self.useFixture(fixtures.TempDir()).path
        with open(THREADS, 'rb') as f:
            data = f.read()
        path = os.path.join(d, 'demo-threads.jsonl.gz')
        with open(path, 'wb') as f:
            f.write(data[:len(data) // 2])
        loaded = self.same([path])
        n = len(test_cut_input.gzip_lines(data[:len(data) // 2]))
        self.assertEqual(n, loaded.records)
        self.assertEqual(n + 1, loaded.lines)
        self.assertEqual(1, loaded.issues.counts['truncated'])
        self.assertEqual([load.unreadable(
            'demo-threads.jsonl.gz', 'EOFError: Compressed file ended '
            'before the end-of-stream marker was reached', n + 1)],
            loaded.problems)

    def test_carriage_returns_in_span_files(self):
        # read_csv ends a line at a carriage return too
        d = self.useFixture(fixtures.TempDir()).path
        with gzip.open(THREADS, 'rb') as f:
            lines = f.read().splitlines(keepends=True)[:200]
        with open(os.path.join(d, 'crlf.jsonl'), 'wb') as f:
            f.write(b''.join(line.replace(b'\n', b'\r\n')
                             for line in lines[:100]) +
                    b'{"v":1,"ph":"X"}\r\n{"v": 1, \r\n')
        with gzip.open(os.path.join(d, 'mid.jsonl.gz'), 'wb') as f:
            f.write(b''.join(lines[100:150]) + b'{"v":1,\r"ph":"X"}\n' +
                    b'{"v":1,"ph":"X","x":"a\rb"}\n' +
                    b''.join(lines[150:]))
        loaded = self.same([d])
        self.assertEqual(200, loaded.records)
        self.assertEqual({'malformed': 2, 'invalid': 2}, {
            k: n for k, n in loaded.issues.counts.items() if n})

    def test_the_decoders_corner_cases(self):
        d = self.useFixture(fixtures.TempDir()).path
        cases = test_load.RecordDecoderTest('test_fast_and_reference_'
                                            'paths_agree').lines()
        # the two differences the module names: a field given twice, and
        # an integer beyond 64 bits that Python accepts
        cases = [c for c in cases if b'"seq": 1, "seq": 2' not in c and
                 b'%d' % ((1 << 64) - 1) not in c]
        with open(os.path.join(d, 'cases.jsonl'), 'wb') as f:
            for i, raw in enumerate(cases):
                # one process, a seq per line: no duplicates between
                # the cases themselves
                f.write(raw.replace(b'"seq": 1,', b'"seq": %d,' % (i + 2))
                        .rstrip(b'\n') + b'\n')
        self.same([d])


class ExportTest(testtools.TestCase):
    """``export --parquet``: the tables, and the documented queries."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        import tempfile
        cls.dir = tempfile.mkdtemp(prefix='instrument-test-export-')
        cls.out = os.path.join(cls.dir, 'parquet')
        cls.result = columnar.export([THREADS], cls.out,
                                     pipeline.Options())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def views(self):
        con = columnar.connect()
        for name in columnar.EXPORTED:
            con.execute(
                "CREATE VIEW %s AS SELECT * FROM read_parquet('%s/%s/**/"  # noqa: S608
                "*.parquet', hive_partitioning = true)" % (
                    name, self.out, name))
        return con

    def test_counts(self):
        con = self.views()
        report = self.result['report']
        n = {name: con.execute('SELECT count(*) FROM %s' % name  # noqa: S608
                               ).fetchone()[0]
             for name in columnar.EXPORTED}
        self.assertEqual(self.result['rows'], n)
        self.assertEqual(report['inputs']['records'], n['events'])
        self.assertEqual(len(report['requests']), n['requests'])
        self.assertEqual(report['sql']['calls'], con.execute(
            'SELECT sum(count) FROM sql_classes').fetchone()[0])
        self.assertEqual(set(report['clocks']['hosts']), {r[0] for r in (
            con.execute('SELECT host FROM host_offsets').fetchall())})
        # partitioned by day and host, Hive style
        hosts = os.listdir(os.path.join(
            self.out, 'events', os.listdir(os.path.join(
                self.out, 'events'))[0]))
        self.assertTrue(hosts and all(h.startswith('host=') for h in hosts))
        # each record where it was read
        self.assertEqual((os.path.basename(THREADS), 1), con.execute(
            'SELECT file_name, min(line) FROM events GROUP BY ALL'
        ).fetchone())

    def test_components_query_is_the_reports(self):
        con = self.views()
        rows = con.execute(doc_queries()['components']).fetchall()
        comps = self.result['report']['summary']['components']
        self.assertTrue(rows)
        self.assertEqual(set(comps), {r[0] for r in rows})
        for name, n, lo, med, p95, hi, mean, total in rows:
            want = comps[name]
            self.assertEqual(want['count'], n)
            for key, got in (('min', lo), ('median', med), ('p95', p95),
                             ('max', hi), ('mean', mean), ('sum', total)):
                self.assertAlmostEqual(want[key], float(got), places=6,
                                       msg='%s %s' % (name, key))

    def test_top_classes_query_is_the_reports_profile(self):
        con = self.views()
        rows = con.execute(doc_queries()['top-classes']).fetchall()
        prof = self.result['report']['sql']['rows']
        self.assertEqual(len(prof), len(rows))
        for want, got in zip(prof, rows, strict=True):
            self.assertEqual(
                (want['id'], want['fingerprint'], want['calls'],
                 want['total_us'], want['min_us'], want['max_us'],
                 want['errors'], want['rows']),
                (got[0], got[1], got[2], got[3], got[5], got[6], got[7],
                 got[8]))
            self.assertAlmostEqual(want['avg_us'], got[4])
        slowest = con.execute(doc_queries()['slowest-statements']
                              ).fetchall()
        self.assertTrue(slowest)

    def test_command(self):
        out = os.path.join(self.useFixture(fixtures.TempDir()).path, 'p')
        stdout = self.useFixture(fixtures.StringStream('stdout')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', stdout))
        self.assertEqual(0, report_cmd.main(
            ['export', '--parquet', out, '--no-progress', THREADS]))
        stdout.seek(0)
        self.assertIn('events 6406', stdout.read())
        self.assertEqual(sorted(columnar.EXPORTED), sorted(os.listdir(out)))


    def test_progress(self):
        # the command's progress line is told of every stage
        seen = []
        out = os.path.join(self.useFixture(fixtures.TempDir()).path, 'p')
        columnar.export([THREADS], out, pipeline.Options(
            progress=lambda *args: seen.append(args)))
        stages = [s for s, _d, _t in seen]
        for stage in ('clocks', 'spans', 'load', 'export'):
            self.assertIn(stage, stages)
        self.assertEqual('done', stages[-1])
        total = os.path.getsize(THREADS)
        self.assertEqual(('export', total, total), [
            a for a in seen if a[0] == 'export'][-1])
        self.assertEqual(('load', total, total), [
            a for a in seen if a[0] == 'load'][-1])


class EngineTest(testtools.TestCase):
    """``--engine duckdb``: the report's SQL profile is the same."""

    def test_same_profile_on_a_real_file(self):
        python = pipeline.analyse([THREADS], pipeline.Options(limit=0))
        duck = pipeline.analyse([THREADS], pipeline.Options(
            limit=0, engine='duckdb'))
        self.assertGreater(python['sql']['calls'], 1000)
        self.assertEqual(python['sql'], duck['sql'])
        for group in sqldigest.GROUPS:
            opts = pipeline.Options(limit=0, group_by=group)
            a = pipeline.analyse([THREADS], opts)['sql']
            opts.engine = 'duckdb'
            self.assertEqual(a, pipeline.analyse([THREADS], opts)['sql'])


    def test_jobs_are_duckdbs_threads(self):
        # -j 1: DuckDB on one thread (the staging's statements too), the
        # same profile
        seen = []
        connect = columnar.connect

        def spy(*args, **kwargs):
            con = connect(*args, **kwargs)
            seen.append(con.execute(
                "SELECT current_setting('threads')").fetchone()[0])
            return con
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.analysis.columnar.connect', spy))
        python = pipeline.analyse([THREADS], pipeline.Options(limit=0))
        duck = pipeline.analyse([THREADS], pipeline.Options(
            limit=0, engine='duckdb', jobs=1))
        self.assertEqual([1], seen)
        self.assertEqual(python['sql'], duck['sql'])

    def test_same_profile_on_damaged_input_and_copies(self):
        # the digest reads only the SQL lines and process starts: bad
        # ones and those read twice are left out as today
        d = self.useFixture(fixtures.TempDir()).path
        synthetic.generate(d, seed=3, requests=40, rate=3.0, computes=2,
                           bad_input=True)
        shutil.copy(THREADS, os.path.join(d, 'a.jsonl.gz'))
        shutil.copy(THREADS, os.path.join(d, 'b.jsonl.gz'))
        python = pipeline.analyse([d], pipeline.Options(limit=0))
        duck = pipeline.analyse([d], pipeline.Options(
            limit=0, engine='duckdb'))
        counts = python['load']['counts']
        self.assertGreater(counts['duplicate'], 6406)
        self.assertGreater(counts['malformed'] + counts['truncated'], 0)
        self.assertGreater(python['sql']['calls'], 1000)
        self.assertEqual(python['sql'], duck['sql'])

    def test_memory_limit(self):
        # DuckDB within --memory-limit, spilling under the temp
        # directory (removed after); the same profile
        import tempfile
        tmp = self.useFixture(fixtures.TempDir()).path
        self.useFixture(fixtures.MonkeyPatch('tempfile.tempdir', tmp))
        python = pipeline.analyse([THREADS], pipeline.Options(limit=0))
        duck = pipeline.analyse([THREADS], pipeline.Options(
            limit=0, engine='duckdb', memory_limit='64MB'))
        self.assertEqual(python['sql'], duck['sql'])
        self.assertEqual([], os.listdir(tempfile.gettempdir()))
        con = columnar.connect('16MB', temp_directory=tmp)
        self.assertEqual('15.2 MiB', con.execute(
            "SELECT current_setting('memory_limit')").fetchone()[0])

    def test_memory_limit_too_small_or_not_a_size(self):
        stderr = self.useFixture(fixtures.StringStream('stderr')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', stderr))
        out = self.useFixture(fixtures.TempDir()).path
        for argv in (['--engine', 'duckdb', '-q', '--no-progress',
                      '--memory-limit', '1KB', THREADS],
                     ['export', '--parquet', out, '--no-progress',
                      '--memory-limit', '1KB', THREADS]):
            exc = self.assertRaises(SystemExit, report_cmd.main, argv)
            self.assertEqual(report_cmd.EXIT_MISSING, exc.code)
        stderr.seek(0)
        self.assertIn('more memory than --memory-limit 1KB allows',
                      stderr.read())
        exc = self.assertRaises(SystemExit, report_cmd.main, [
            '--engine', 'duckdb', '--memory-limit', 'lots', THREADS])
        self.assertEqual(report_cmd.EXIT_USAGE, exc.code)

    def test_without_duckdb_the_command_says_what_to_install(self):
        # no traceback: one line and exit status 1, as for the other
        # libraries of the report extra
        patch = mock.patch.dict(sys.modules, {'duckdb': None})
        patch.start()
        self.addCleanup(patch.stop)
        stderr = self.useFixture(fixtures.StringStream('stderr')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', stderr))
        for argv in (['--engine', 'duckdb', '-q', '--no-progress', THREADS],
                     ['export', '--parquet', self.useFixture(
                         fixtures.TempDir()).path, '--no-progress',
                      THREADS]):
            exc = self.assertRaises(SystemExit, report_cmd.main, argv)
            self.assertEqual(report_cmd.EXIT_MISSING, exc.code)
        stderr.seek(0)
        self.assertIn("pip install 'openstack-instrument[report]'",
                      stderr.read())


_SqlDigest = sqldigest.SqlDigest


class DuckDigest(_SqlDigest):
    """``SqlDigest`` whose classes DuckDB computes (``sql_digest``) from
    a table of the statements and counters given to ``add`` and
    ``add_agg``."""

    def __init__(self, since=None, until=None) -> None:
        self._pending = []
        self._classes = {}
        super().__init__(since, until)

    @property
    def classes(self):
        if self._pending:
            self._compute()
        return self._classes

    @classes.setter
    def classes(self, value):
        self._classes = value

    def add(self, ts, dur, fp, svc, db, call, rows, error, kind=None):
        self._pending.append(('X', 'sql.query', ts, dur, svc,
                              'error' if error else 'ok',
                              {'fp': fp, 'db': db, 'call': call,
                               'rows': rows, 'kind': kind}))

    def add_agg(self, ts, svc, attrs):
        self._pending.append(('C', 'sql.agg', ts, None, svc, None, attrs))

    def _compute(self):
        con = columnar.connect()
        con.execute('CREATE TABLE t (file INTEGER, line BIGINT, ph '
                    'VARCHAR, ev VARCHAR, ts_corr BIGINT, dur_us BIGINT, '
                    'svc VARCHAR, st VARCHAR, attrs JSON)')
        con.executemany('INSERT INTO t VALUES (0, ?, ?, ?, ?, ?, ?, ?, ?)',
                        [(i,) + row[:6] + (json.dumps(row[6]),)
                         for i, row in enumerate(self._pending)])
        self._pending = []
        done = columnar.sql_digest(con, self.since, self.until, 't',
                                   _SqlDigest(self.since, self.until))
        self.filtered += done.filtered
        for key, s in done.classes.items():
            if key in self._classes:
                sqldigest._combine(self._classes[key], s)
            else:
                self._classes[key] = s


class _OnDuckDB:

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.MockPatchObject(sqldigest, 'SqlDigest',
                                                 DuckDigest))


class DigestOnDuckDBTest(_OnDuckDB, test_sqldigest.DigestTest):
    pass


class KindOnDuckDBTest(_OnDuckDB, test_sqldigest.KindTest):
    pass


class RowsOnDuckDBTest(_OnDuckDB, test_sqldigest.RowsTest):
    pass


class DuckDigestIsUsedTest(testtools.TestCase):
    """The patched tests above do run DuckDB's aggregation."""

    def test_classes_come_from_duckdb(self):
        d = DuckDigest()
        d.add(1000, 250, 'fp', 's', 'db', 'c', 2, True, 'SELECT')
        d.add(1001, 5000, 'fp', 's', 'db', 'c', None, False, 'SELECT')
        self.assertEqual(2, len(d._pending))
        s = d.classes[('fp', 's', 'db', 'c', 'SELECT')]
        self.assertEqual([], d._pending)
        self.assertEqual([2, 5250, 250 ** 2 + 5000 ** 2, 250, 5000, 2, 1],
                         s[:7])
        self.assertEqual({sqldigest.bucket(250): 1,
                          sqldigest.bucket(5000): 1}, s[sqldigest.C_HIST])
        self.assertEqual(1, s[sqldigest.C_ROWS_N])
