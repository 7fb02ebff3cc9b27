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
"""Metamorphic tests: the report tells the same truth on the logs an
operator really collects.

The input is a real span file (``tests/data/fidelity``: the demo's
in-process nova 34, threads, 4 boots with an injected compute failure
and a reschedule).  Each test transforms it the way collected logs are
transformed (a file copied beside itself, ``cat f f``, split one file
per process, one host's clock shifted by minutes or hours inside a
multi-host file, files reordered, gzip) and checks that the discrete
results (states, causes, failure rows, retries, SQL counts) are those
of the clean input, and that what was duplicated is named.  These tests
are about the analyser's promises, not its engine: any engine must
pass them.
"""

import gzip
import json
import os
import shutil
import tempfile

import fixtures
import testtools

from instrument.analysis import breakdown
from instrument.analysis import classify
from instrument.analysis import pipeline
from instrument.analysis import report_html
from instrument.analysis import report_text

DATA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                    'data', 'fidelity')
THREADS = os.path.join(DATA, 'demo-threads.jsonl.gz')
# the API's view of the same run (instrument-demo's servers.json)
SERVERS = os.path.join(DATA, 'demo-threads.servers.json')
MINUTE = 60_000_000


def read_records(path: str) -> list:
    with gzip.open(path, 'rb') as f:
        return [json.loads(line) for line in f]


def write(path: str, records: list) -> str:
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'wb') as f:
        for rec in records:
            f.write(json.dumps(rec, separators=(',', ':')).encode() + b'\n')
    return path


def per_process(records: list, by=('host',)) -> list:
    """The records as if each host (or each ``by`` key: host and
    service) were a process of its own, as a deployment writes them: a
    pid and a ``seq`` series each, opened by its own ``process.start``
    (the demo runs every service in one process)."""
    start = next(r for r in records if r['ev'] == 'process.start')

    def key(rec):
        return tuple(rec[k] for k in by)
    keys = sorted({key(r) for r in records if r is not start})
    pids = {k: 4000 + i for i, k in enumerate(keys)}
    seqs = dict.fromkeys(keys, 0)
    out = []
    for k in keys:  # every process opens with its start
        seqs[k] += 1
        out.append(dict(start, host=k[0], pid=pids[k], seq=1))
    for rec in records:
        if rec is start:
            continue
        k = key(rec)
        seqs[k] += 1
        out.append(dict(rec, pid=pids[k], seq=seqs[k]))
    return out


def shifted(records: list, host: str, delta_us: int) -> list:
    """``host``'s clock ``delta_us`` ahead."""
    return [dict(r, ts=r['ts'] + delta_us) if r['host'] == host else r
            for r in records]


def by_host(records: list) -> dict:
    out = {}
    for rec in records:
        out.setdefault(rec['host'], []).append(rec)
    return out


def discrete(report: dict) -> dict:
    """What must not change under any faithful transformation."""
    sql = report['sql']
    return {
        'states': report['summary']['states'],
        'boots': report['summary']['boots'],
        'instances': report['summary']['instances'],
        'other_requests': report['summary']['other_requests'],
        'requests': sorted(
            (r['req'], r['kind'],
             tuple(sorted((i['inst'], i['state'],
                           (i['cause'] or {}).get('cls'))
                          for i in r['instances'])))
            for r in report['requests']),
        'failures': [(f['component'], f['ev'], f['cls'], f['message'],
                      f['count']) for f in report['failures']],
        'retries': report['retries'],
        'sql_calls': sql['calls'],
        'sql_total_us': sql['total_us'],
        'sql_classes': sql['classes'],
        'sql_rows': sorted((c['id'], c['calls'], c['errors'], c['kinds'])
                           for c in sql['rows']),
    }


def timed(report: dict) -> dict:
    """The figures computed from times (identical when no clock
    moved)."""
    # (which lifecycles are kept for timelines depends on the workers)
    requests = [{k: v for k, v in r.items() if k != 'lifecycle'}
                for r in report['requests']]
    return {'summary': report['summary'], 'requests': requests,
            'clocks': {h: i['offset_us'] for h, i in
                       report['clocks']['hosts'].items()}}


class FidelityTest(testtools.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.records = read_records(THREADS)
        cls.hosts = sorted({r['host'] for r in cls.records})
        cls.clean = cls.analyse_file(THREADS)

    @classmethod
    def analyse_file(cls, *paths, jobs=1):
        return pipeline.analyse(list(paths), pipeline.Options(jobs=jobs))

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix='instrument-fidelity-')
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def analyse(self, *names, jobs=1):
        return pipeline.analyse([self.path(n) for n in names] or
                                [self.dir], pipeline.Options(jobs=jobs))

    def assertSameTruth(self, report, exact=True, records=True):
        self.assertEqual(discrete(self.clean), discrete(report))
        if records:
            # per_process adds a process.start per host
            self.assertEqual(self.clean['inputs']['records'],
                             report['inputs']['records'])
        if exact:
            self.assertEqual(timed(self.clean), timed(report))

    def test_clean_input_is_what_the_demo_saw(self):
        # the premise of every other test: failures, a reschedule, SQL
        states = self.clean['summary']['states']
        self.assertEqual(1, states.get('compute_failure'))
        self.assertEqual(1, states.get('rescheduled_success'))
        self.assertGreater(self.clean['sql']['calls'], 1000)
        self.assertEqual([], self.clean['load']['duplicates'])
        self.assertEqual([], self.clean['load']['loss'])
        self.assertIn('every line valid; no data loss reported',
                      report_text.render(self.clean))

    # -- duplicates ---------------------------------------------------------

    def _assert_duplicates_named(self, report, fname, count, records):
        self.assertEqual([{'file': fname, 'duplicates': count,
                           'records': records}],
                         report['load']['duplicates'])
        self.assertEqual(count, report['load']['counts']['duplicate'])
        text = report_text.render(report)
        self.assertNotIn('no data loss reported', text)
        self.assertIn('%s: %d of its %d records were read before' % (
            fname, count, records), text)
        self.assertIn('%s: %d of its %d records were read before' % (
            fname, count, records), report_html.render(report))

    def test_copied_file_beside_the_original(self):
        n = len(self.records)
        shutil.copy(THREADS, self.path('a.jsonl.gz'))
        shutil.copy(THREADS, self.path('b.jsonl.gz'))
        for jobs in (1, 2):
            report = self.analyse(jobs=jobs)
            self.assertSameTruth(report)
            self._assert_duplicates_named(report, 'b.jsonl.gz', n, n)

    def test_file_holding_its_records_twice(self):
        # cat f f: a replay of the same process, not a restart
        n = len(self.records)
        write(self.path('f.jsonl'), self.records + self.records)
        for jobs in (1, 2):
            report = self.analyse(jobs=jobs)
            self.assertSameTruth(report)
            self._assert_duplicates_named(report, 'f.jsonl', n, 2 * n)

    def test_restart_needs_a_new_process_start(self):
        # the same pid again after a new process.start is a new process:
        # its records count (here: the run once more, a minute later)
        later = [dict(r, ts=r['ts'] + 10 * MINUTE) for r in self.records]
        write(self.path('f.jsonl'), self.records + later)
        report = self.analyse()
        self.assertEqual([], report['load']['duplicates'])
        self.assertEqual(2 * len(self.records), report['inputs']['records'])
        self.assertEqual(2 * self.clean['sql']['calls'],
                         report['sql']['calls'])

    def test_overlapping_rotated_copies(self):
        # the second half of the file collected twice: once in the whole
        # file, once on its own (a rotated log copied again)
        half = len(self.records) // 2
        write(self.path('a.jsonl'), self.records)
        write(self.path('b.jsonl'), self.records[half:])
        report = self.analyse()
        self.assertSameTruth(report)
        self.assertEqual(len(self.records) - half,
                         report['load']['counts']['duplicate'])

    # -- layout -------------------------------------------------------------

    def test_one_file_or_one_file_per_process(self):
        procs = per_process(self.records)
        write(self.path('all.jsonl'), procs)
        one = self.analyse('all.jsonl')
        os.unlink(self.path('all.jsonl'))
        for host, recs in by_host(procs).items():
            write(self.path('%s.jsonl' % host), recs)
        split = self.analyse()
        self.assertSameTruth(one, records=False)
        self.assertEqual(discrete(one), discrete(split))
        self.assertEqual(timed(one), timed(split))
        self.assertEqual([], split['load']['loss'])
        self.assertEqual([], split['load']['duplicates'])

    def test_one_process_or_one_per_service(self):
        # the demo runs every service in one process (one pid): an
        # asynchronous hop between two of them is still a message wait
        # (rpc.queue), as between processes
        write(self.path('f.jsonl'), per_process(self.records,
                                                ('host', 'svc')))
        report = self.analyse('f.jsonl')
        self.assertSameTruth(report, records=False)
        self.assertGreater(report['summary']['components']['rpc.queue'][
            'median'], 0)

    def test_file_order_and_gzip(self):
        procs = per_process(self.records)
        names = []
        for i, (host, recs) in enumerate(sorted(by_host(procs).items())):
            # names that sort in the reverse order of the hosts
            name = '%02d-%s.jsonl' % (len(self.hosts) - i, host)
            if i % 2:
                name += '.gz'
            names.append(write(self.path(name), recs))
        forward = pipeline.analyse(names, pipeline.Options(jobs=1))
        backward = pipeline.analyse(names[::-1], pipeline.Options(jobs=1))
        self.assertSameTruth(forward, records=False)
        self.assertEqual(discrete(forward), discrete(backward))
        self.assertEqual(timed(forward), timed(backward))

    # -- clocks -------------------------------------------------------------

    def _assert_shift_corrected(self, report, host, delta, records=True):
        self.assertSameTruth(report, exact=False, records=records)
        clean = self.clean['clocks']['hosts']
        hosts = report['clocks']['hosts']
        info = hosts[host]
        self.assertIn(info['status'], ('corrected', 'one-sided'))
        # the bounds are differences of timestamps: they move with the
        # clock, exactly, and the offset chosen lies within them
        for end in ('low_us', 'high_us'):
            if clean[host][end] is None:
                self.assertIsNone(info[end])
            else:
                self.assertEqual(clean[host][end] - delta, info[end])
        if info['low_us'] is not None:
            self.assertGreaterEqual(info['offset_us'], info['low_us'])
        if info['high_us'] is not None:
            self.assertLessEqual(info['offset_us'], info['high_us'])
        for other in set(hosts) - {host}:
            self.assertEqual(clean[other]['status'],
                             hosts[other]['status'])
        self.assertEqual(0, report['causality']['violations'])

    def _computes(self):
        return [h for h in self.hosts if h.startswith('cmp-')]

    def test_host_shifted_inside_a_multi_host_file(self):
        # the demo's file holds every host: a compute 10 minutes ahead
        # or behind must change no lifecycle (small chunks: many of them
        # end on a line of the shifted host, which dates the file)
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.analysis.stream.CHUNK_BYTES', 16384))
        for host in self._computes():
            for delta in (10 * MINUTE, -10 * MINUTE, 12 * MINUTE):
                write(self.path('f.jsonl'),
                      shifted(self.records, host, delta))
                report = self.analyse('f.jsonl')
                self._assert_shift_corrected(report, host, delta)

    def test_host_shifted_per_process_files(self):
        procs = per_process(self.records)
        host = self._computes()[0]
        for delta in (10 * MINUTE, -10 * MINUTE):
            for name, recs in by_host(shifted(procs, host, delta)).items():
                write(self.path('%s.jsonl' % name), recs)
            self._assert_shift_corrected(self.analyse(), host, delta,
                                         records=False)

    def test_clock_off_by_milliseconds_to_hours(self):
        # within the bounds' width, around it, and beyond the clock
        # pass's horizon (10 minutes), both signs
        for delta in (3_000, -3_000, 40_000, -2_000_000, 60 * MINUTE,
                      -15 * MINUTE, -3 * 60 * MINUTE):
            for host in self._computes()[:2]:
                write(self.path('f.jsonl'),
                      shifted(self.records, host, delta))
                self._assert_shift_corrected(self.analyse('f.jsonl'), host,
                                             delta)


class GroundTruthTest(testtools.TestCase):
    """The report against the API's own view of the same run (the
    demo's ``servers.json``: each server's status and fault), on the
    clean file and on the worst of the transformations at once."""

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix='instrument-truth-')
        self.addCleanup(shutil.rmtree, self.dir, True)
        with open(SERVERS) as f:
            self.servers = {s['id']: s for s in json.load(f)['servers']}

    def assertApiView(self, report):
        seen = {}
        for row in report['requests']:
            for inst in row['instances']:
                seen[inst['inst']] = inst
        self.assertEqual(set(self.servers), set(seen))
        for sid, server in self.servers.items():
            inst = seen[sid]
            if server['status'] == 'ACTIVE':
                self.assertIn(inst['state'], classify.GOOD_STATES, sid)
            else:
                self.assertEqual('ERROR', server['status'])
                self.assertIn(inst['state'], ('compute_failure',
                                              'scheduling_failure'), sid)
                # the fault the API shows is the cause found
                self.assertEqual(server['fault'], inst['cause']['msg'])

    def test_clean(self):
        self.assertApiView(pipeline.analyse([THREADS],
                                            pipeline.Options(jobs=1)))

    def test_copied_replayed_and_skewed(self):
        records = read_records(THREADS)
        for host, delta in (('cmp-01', 60 * MINUTE),
                            ('cmp-02', -15 * MINUTE),
                            ('scheduler', 10 * MINUTE)):
            records = shifted(records, host, delta)
        write(os.path.join(self.dir, 'a.jsonl'), records + records)
        write(os.path.join(self.dir, 'b.jsonl.gz'), records)
        for jobs in (1, 2):
            self.assertApiView(pipeline.analyse(
                [self.dir], pipeline.Options(jobs=jobs)))


class DamageTest(testtools.TestCase):
    """Records lost on the way: the requests they touch are marked and
    left out of the times, never mis-timed; every figure says so."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.records = read_records(THREADS)
        cls.clean = pipeline.analyse([THREADS], pipeline.Options(jobs=1))

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix='instrument-damage-')
        self.addCleanup(shutil.rmtree, self.dir, True)

    def analyse(self, records):
        write(os.path.join(self.dir, 'f.jsonl'), records)
        return pipeline.analyse([self.dir], pipeline.Options(jobs=1))

    def _span_end_of_a_good_boot(self):
        """A span of a successful boot whose start (B) and end (X) are
        both in the file: the X's index."""
        good = {r['req'] for r in self.clean['requests']
                if r['state'] in classify.GOOD_STATES}
        begun = {r['span'] for r in self.records if r['ph'] == 'B'}
        for i, r in enumerate(self.records):
            if r['ph'] == 'X' and r['span'] in begun and \
                    r.get('req') in good and r['ev'] != 'api.request':
                return i
        self.fail('no begun span in a successful boot')

    def _times_without(self, req):
        """The component statistics of the clean run without ``req``."""
        rows = [r for r in self.clean['requests']
                if r['kind'] == 'boot' and r['req'] != req and
                r['state'] in classify.GOOD_STATES]
        return {name: breakdown.stats([r['components_us'].get(name, 0)
                                       for r in rows])
                for name in self.clean['summary']['components']}

    def _assert_degraded(self, report, req):
        self.assertEqual(discrete(self.clean)['states'],
                         discrete(report)['states'])
        row = {r['req']: r for r in report['requests']}[req]
        self.assertEqual(1, row['lost_ends'])
        deg = report['summary']['degraded']
        self.assertEqual((1, 1, 1, [req]), (deg['requests'], deg['boots'],
                                            deg['lost_ends'],
                                            deg['examples']))
        # the times are those of the other requests, exactly
        want = self._times_without(req)
        got = report['summary']['components']
        for name, st in want.items():
            self.assertEqual(st, got.get(name, st), name)
        text = report_text.render(report)
        self.assertIn('1 request(s) (1 boots) left out of these times',
                      text)
        self.assertIn('left out of these times',
                      report_html.render(report))

    def _assert_warned(self, report, lost):
        q = report['quality']
        self.assertEqual(lost, q['lost_records'])
        self.assertEqual(q['requests'], len(report['requests']))
        self.assertGreater(q['requests_affected'], 0)
        text = report_text.render(report)
        note = report_text.loss_note(report)
        self.assertIn('computed from input with losses: %d records' % lost,
                      note)
        # beside the states, the times, the operations, the failures and
        # the SQL
        self.assertEqual(5, text.count(note))

    def test_lost_span_end_seq_gap(self):
        i = self._span_end_of_a_good_boot()
        req = self.records[i]['req']
        report = self.analyse(self.records[:i] + self.records[i + 1:])
        self._assert_degraded(report, req)
        self.assertEqual(1, report['load']['loss'][0]['missing'])
        self._assert_warned(report, 1)

    def test_lost_span_end_invalid_line(self):
        i = self._span_end_of_a_good_boot()
        req = self.records[i]['req']
        bad = dict(self.records[i])
        del bad['dur_us']
        report = self.analyse(self.records[:i] + [bad] +
                              self.records[i + 1:])
        self._assert_degraded(report, req)
        self.assertEqual(1, report['load']['counts']['invalid'])
        # the invalid line is not also a missing seq
        self.assertEqual([], report['load']['loss'])
        self._assert_warned(report, 1)

    def test_buffer_overflow_is_warned_beside_every_figure(self):
        # the runtime's own count of events it could not keep
        last = self.records[-2]
        drops = dict(last, ph='C', seq=last['seq'] + 1, ev='sink.drops',
                     attrs={'buffer_full': 500, 'file': 0})
        for key in ('dur_us', 'tid', 'span', 'parent', 'req', 'greq',
                    'inst', 'st', 'err'):
            drops.pop(key, None)
        end = dict(self.records[-1], seq=last['seq'] + 2)
        report = self.analyse(self.records[:-1] + [drops, end])
        self.assertEqual(500, report['load']['loss'][0]['dropped'])
        self._assert_warned(report, 500)
        # every request of the process's host may miss events
        self.assertEqual(report['quality']['requests'],
                         report['quality']['requests_affected'])

    def test_clean_input_has_no_warning(self):
        self.assertIsNone(report_text.loss_note(self.clean))
        self.assertEqual(0, self.clean['quality']['lost_records'])
        self.assertEqual(0, self.clean['summary']['degraded']['requests'])
        self.assertEqual([], self.clean['load']['unended'])

    def test_killed_process_has_no_end_record(self):
        self.assertEqual('process.end', self.records[-1]['ev'])
        killed = self.records[:-1]
        report = self.analyse(killed)
        [row] = report['load']['unended']
        last = killed[-1]
        self.assertEqual((last['host'], last['pid'], 'f.jsonl'),
                         (row['host'], row['pid'], row['file']))
        # the latest time of its records, on the corrected clock
        hosts = report['clocks']['hosts']
        self.assertEqual(max(r['ts'] + hosts[r['host']]['offset_us']
                             for r in killed), row['last_us'])
        text = report_text.render(report)
        self.assertNotIn('no data loss reported', text)
        self.assertIn('no end record from pid %d on %s' % (
            last['pid'], last['host']), text)
        self.assertIn('no end record from pid %d on %s' % (
            last['pid'], last['host']), report_html.render(report))


class SmallItemsTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix='instrument-small-')
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.records = read_records(THREADS)

    def test_garbage_in_a_span_file_is_a_bad_line(self):
        path = os.path.join(self.dir, 'f.jsonl')
        write(path, self.records)
        with open(path, 'ab') as f:
            f.write(b'Traceback (most recent call last):\n')
        report = pipeline.analyse([path], pipeline.Options(jobs=1))
        self.assertEqual(1, report['load']['counts']['malformed'])
        self.assertIn('f.jsonl:%d: malformed: not a span record' % (
            len(self.records) + 1), report_text.render(report))

    def test_service_log_lines_are_not_bad_lines(self):
        path = os.path.join(self.dir, 'nova-compute.log')
        with open(path, 'wb') as f:
            for rec in self.records:
                f.write(b'2026-01-01 INFO instrument.spans ' +
                        json.dumps(rec, separators=(',', ':')).encode() +
                        b'\n')
                f.write(b'2026-01-01 INFO nova.compute.manager ok\n')
        report = pipeline.analyse([path], pipeline.Options(jobs=1))
        self.assertEqual(0, report['load']['counts']['malformed'])
        self.assertEqual(len(self.records), report['load']['other_lines'])

    def test_host_with_every_record_rejected_leaves_the_clock_table(self):
        bad = [dict(r, zz=1) if r['host'] == 'cmp-03' else r
               for r in self.records]
        path = write(os.path.join(self.dir, 'f.jsonl'), bad)
        report = pipeline.analyse([path], pipeline.Options(jobs=1))
        self.assertNotIn('cmp-03', report['clocks']['hosts'])
        self.assertIn('cmp-01', report['clocks']['hosts'])
        self.assertIn('host cmp-03: no valid record (every one rejected), '
                      'left out of the clock offsets',
                      report['load']['problems'])

    def test_one_job_by_default_on_two_cpus(self):
        big = 1 << 30
        for cpus, want in ((1, 1), (2, 1), (4, 4), (8, 4)):
            self.useFixture(fixtures.MonkeyPatch(
                'os.sched_getaffinity', lambda _pid, n=cpus: set(range(n))))
            self.assertEqual(want, pipeline.default_jobs(big), cpus)
        self.assertEqual(1, pipeline.default_jobs(1 << 20))
