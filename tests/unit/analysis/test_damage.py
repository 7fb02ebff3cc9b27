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
"""Metamorphic tests of damaged input (issue 32, items 4 and 5).

The input is a real demo run with a mixed workload
(``tests/data/fidelity/demo-mixed-threads.jsonl.gz``: ``tox -e demo --
--servers 6 --concurrency 3 --seed 7 --fail 0.2 --reschedule 0.2
--no-report``, nova 34, native threads: boots with a compute failure
and a reschedule, then shows, a list, a resize and its confirm, a live
migration, a delete), written one file per process and service as a
deployment writes them (``test_fidelity.per_process``).  Each test
damages it the way collected logs are damaged and checks that the
discrete results (states, operations, request counts and identities,
failure rows, SQL counts where no SQL was lost) are those of the clean
input, and that every figure a loss can touch is marked, not shifted:
the requests the analyser marks are the ones doing something where and
when the records were lost, and the times are those of the clean input
without the marked requests.

* order within a process does not matter: a process's file reversed
  (read from its end), records moved by up to 64 lines, a span's start
  read after its end;
* a lost end: a request keeps its identity (the id nova's context gave
  it) and its outcome, marked;
* a record with one required field removed is repaired from the records
  around it;
* short child records lost (SQL statements): the parent's time is not
  taken as longer, the requests doing something then are marked;
* one cut last line, or 200 lines of garbage: only the requests a loss
  can touch are marked (garbage is no lost record).
"""

import collections
import gzip
import json
import os
import random
import shutil
import tempfile

import testtools

from instrument.analysis import pipeline
from instrument.analysis.model import breakdown
from instrument.analysis.model import classify
from instrument.analysis.render import text as report_text
from instrument.analysis.render import views
from tests.unit.analysis import test_fidelity as fidelity

DATA = os.path.join(
    os.path.dirname(__file__), os.pardir, os.pardir, 'data', 'fidelity'
)
MIXED = os.path.join(DATA, 'demo-mixed-threads.jsonl.gz')


def split(records: list) -> dict:
    """``{file name: records}``, one file per process."""
    out: dict = collections.defaultdict(list)
    for rec in records:
        out['%s-%s.jsonl' % (rec['host'], rec['pid'])].append(rec)
    return dict(out)


def same_files(clean: list, damaged: list) -> dict:
    """``damaged`` (record for record ``clean``'s, some of them changed)
    in the files of ``clean``'s processes."""
    out: dict = collections.defaultdict(list)
    for a, b in zip(clean, damaged, strict=True):
        if b is not None:
            out['%s-%s.jsonl' % (a['host'], a['pid'])].append(b)
    return dict(out)


def within(records: list, window: int, rnd: random.Random) -> list:
    """``records`` each moved by fewer than ``window`` places."""
    keys = [i + rnd.uniform(0, window - 1) for i in range(len(records))]
    return [
        rec
        for _k, rec in sorted(
            zip(keys, records, strict=True), key=lambda kv: kv[0]
        )
    ]


def discrete(report: dict) -> dict:
    """``test_fidelity.discrete``, the failure rows in one order (rows
    of equal counts are listed in the order their requests were
    finalised: not a figure)."""
    out = fidelity.discrete(report)
    out['failures'] = sorted(out['failures'])
    return out


def timed(report: dict) -> dict:
    """``test_fidelity.timed``, each request's waits in one order (the
    order its spans were read in: not a figure)."""
    out = fidelity.timed(report)
    for row in out['requests']:
        if 'waits' in row:
            row['waits'] = sorted(
                row['waits'], key=lambda w: (w['in'], w['kind'], w['name'])
            )
    return out


def ids(report: dict) -> dict:
    return {r['req']: r for r in report['requests']}


def marked(report: dict) -> set:
    return {
        r['req'] for r in report['requests'] if r.get('loss') or r['lost_ends']
    }


def boot_times(report: dict, leave_out: set) -> dict:
    """The component statistics of the successful boots of ``report``
    but ``leave_out``."""
    rows = [
        r
        for r in report['requests']
        if r['kind'] == 'boot'
        and r['req'] not in leave_out
        and r['state'] in classify.GOOD_STATES
    ]
    return {
        name: breakdown.stats([r['components_us'].get(name, 0) for r in rows])
        for name in report['summary']['components']
    }


class DamageTestBase(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with gzip.open(MIXED, 'rb') as f:
            raw = [json.loads(line) for line in f]
        cls.records = fidelity.per_process(raw, ('host', 'svc'))
        cls.files = split(cls.records)
        cls.tmp = tempfile.mkdtemp(prefix='instrument-damage-')
        cls.clean = cls.analyse_files(cls.files)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    @classmethod
    def analyse_files(
        cls, files: dict, jobs: int = 1, raw: dict = None, idle_s: float = 30.0
    ) -> dict:
        d = tempfile.mkdtemp(dir=cls.tmp)
        for name, recs in files.items():
            fidelity.write(os.path.join(d, name), recs)
        for name, data in (raw or {}).items():
            with open(os.path.join(d, name), 'wb') as f:
                f.write(data)
        return pipeline.analyse(
            [d], pipeline.Options(jobs=jobs, idle_s=idle_s)
        )

    def file_of(self, svc: str) -> str:
        return next(
            name for name, recs in self.files.items() if recs[1]['svc'] == svc
        )

    def assertSameDiscrete(self, report, but=()):
        """The clean input's discrete results; ``but``: requests whose
        rows may differ (none by default)."""
        want = discrete(self.clean)
        got = discrete(report)
        if but:
            for d in (want, got):
                d['requests'] = [r for r in d['requests'] if r[0] not in but]
        self.assertEqual(want, got)

    def assertTimesNotShifted(self, report):
        """The times of the boots not marked are the clean input's."""
        leave_out = marked(report)
        got = report['summary']['components']
        want = boot_times(self.clean, leave_out)
        for name, st in want.items():
            self.assertEqual(st, got.get(name, st), name)
        self.assertEqual(
            sum(
                1
                for r in self.clean['requests']
                if r['kind'] == 'boot'
                and r['state'] in classify.GOOD_STATES
                and r['req'] not in leave_out
            ),
            report['summary']['latency'].get('count', 0),
        )


class OrderTest(DamageTestBase):
    """The order of a process's records does not matter."""

    def test_premise(self):
        kinds = collections.Counter(r['kind'] for r in self.clean['requests'])
        for op in (
            'boot',
            'show',
            'list',
            'resize',
            'confirm_resize',
            'live_migrate',
            'delete',
        ):
            self.assertGreater(kinds[op], 0, op)
        self.assertEqual(
            {'success': 4, 'rescheduled_success': 1, 'compute_failure': 1},
            self.clean['summary']['states'],
        )
        self.assertEqual([], self.clean['load']['loss'])
        self.assertEqual(set(), marked(self.clean))
        self.assertGreater(len(self.files), 5)

    def test_a_process_file_reversed(self):
        # every process's file, one at a time, then all of them (the
        # api's, gzip-compressed too)
        api = self.file_of('api')
        # a horizon shorter than the run: the requests are finalised as
        # the files are read in step by time; the api's file reversed is
        # read from its end, in step with the others, not once they are
        # read (its records would all be late)
        short = self.analyse_files(self.files, idle_s=0.5)
        for name in (api, self.file_of('conductor')):
            files = dict(self.files)
            files[name] = self.files[name][::-1]
            report = self.analyse_files(files, idle_s=0.5)
            self.assertEqual(0, report['load']['counts']['late'], name)
            self.assertEqual(discrete(short), discrete(report))
            self.assertEqual(timed(short), timed(report))
        cases = [[name] for name in sorted(self.files)] + [sorted(self.files)]
        for names in cases:
            files = dict(self.files)
            for name in names:
                files[name] = self.files[name][::-1]
            report = self.analyse_files(files)
            self.assertSameDiscrete(report)
            self.assertEqual(timed(self.clean), timed(report), names)
            self.assertEqual(0, sum(report['load']['counts'].values()))
            self.assertEqual(set(), marked(report))
            for name in names:
                self.assertIn(
                    '%s: its records run backwards (their seq '
                    'going down line after line): read from '
                    'its end' % name,
                    report['load']['problems'],
                )
        files = dict(self.files)
        del files[api]
        data = b''.join(
            json.dumps(r, separators=(',', ':')).encode() + b'\n'
            for r in self.files[api][::-1]
        )
        for jobs in (1, 2):
            report = self.analyse_files(
                files, jobs, raw={api + '.gz': gzip.compress(data)}
            )
            self.assertSameDiscrete(report)
            self.assertEqual(timed(self.clean), timed(report))

    def test_records_moved_within_64_lines(self):
        for seed in range(4):
            rnd = random.Random(seed)
            files = {
                name: within(recs, 64, rnd)
                for name, recs in self.files.items()
            }
            report = self.analyse_files(files, jobs=1 + seed % 2)
            self.assertSameDiscrete(report)
            self.assertEqual(timed(self.clean), timed(report), seed)
            self.assertEqual(0, report['load']['duplicate_spans'], seed)
            self.assertEqual(0, sum(report['load']['counts'].values()))
            self.assertEqual(set(), marked(report))

    def test_a_start_read_after_its_end_is_no_duplicate(self):
        files = {}
        swapped = 0
        for name, recs in self.files.items():
            recs = list(recs)
            ends = {r['span']: i for i, r in enumerate(recs) if r['ph'] == 'X'}
            for i, r in enumerate(list(recs)):
                if r['ph'] == 'B' and r['span'] in ends:
                    j = ends[r['span']]
                    recs[i], recs[j] = recs[j], recs[i]
                    swapped += 1
            files[name] = recs
        self.assertGreater(swapped, 20)
        report = self.analyse_files(files)
        self.assertEqual(0, report['load']['duplicate_spans'])
        self.assertSameDiscrete(report)
        self.assertEqual(timed(self.clean), timed(report))


class LostRecordsTest(DamageTestBase):
    """Records lost: identities and outcomes kept, figures marked."""

    def test_lost_ends_keep_identity_and_outcome(self):
        # the end (X) of every API request and every RPC dispatch whose
        # start (B) was read
        begun = {
            r['span']: r.get('req') for r in self.records if r['ph'] == 'B'
        }
        lost = {
            i
            for i, r in enumerate(self.records)
            if r['ph'] == 'X'
            and r['span'] in begun
            and r['ev'] in ('api.request', 'rpc.dispatch')
        }
        by_ev = collections.Counter(self.records[i]['ev'] for i in lost)
        self.assertGreater(by_ev['api.request'], 20)
        self.assertGreater(by_ev['rpc.dispatch'], 10)
        damaged = [
            None if i in lost else r for i, r in enumerate(self.records)
        ]
        # a request whose id (nova's context's) only the lost record
        # carried keeps the id it began with
        carried = collections.Counter(r.get('req') for r in self.records)
        unknowable = {
            self.records[i]['req']: begun[self.records[i]['span']]
            for i in lost
            if carried[self.records[i]['req']] == 1
        }
        self.assertEqual(1, len(unknowable))
        for jobs in (1, 2):
            report = self.analyse_files(
                same_files(self.records, damaged), jobs
            )
            self.assertEqual(
                len(self.clean['requests']), len(report['requests'])
            )
            self.assertSameDiscrete(
                report, but=set(unknowable) | set(unknowable.values())
            )
            got = ids(report)
            want = ids(self.clean)
            for req, began in unknowable.items():
                self.assertEqual(
                    (want[req]['kind'], want[req]['state']),
                    (got[began]['kind'], got[began]['state']),
                )
            for i in lost:
                req = self.records[i]['req']
                if req in unknowable:
                    # (an end lost, or a request that hung: marked)
                    self.assertIn('lost', got[unknowable[req]]['loss'])
                    continue
                self.assertGreaterEqual(got[req]['lost_ends'], 1, req)
                self.assertIn('lost', got[req]['loss'], req)
            self.assertTimesNotShifted(report)
            self.assertEqual(len(lost), report['quality']['lost_records'])

    def test_a_lost_end_of_an_api_request_keeps_the_show(self):
        # one show whose api.request end is lost: still one request, a
        # show, successful, its time left out
        begun = {r['span'] for r in self.records if r['ph'] == 'B'}
        shows = {
            r['req'] for r in self.clean['requests'] if r['kind'] == 'show'
        }
        i = next(
            i
            for i, r in enumerate(self.records)
            if r['ph'] == 'X'
            and r['ev'] == 'api.request'
            and r['span'] in begun
            and r['req'] in shows
        )
        req = self.records[i]['req']
        damaged = list(self.records)
        damaged[i] = None
        report = self.analyse_files(same_files(self.records, damaged))
        self.assertSameDiscrete(report)
        row = ids(report)[req]
        self.assertEqual(
            ('show', 'success', 1),
            (row['kind'], row['state'], row['lost_ends']),
        )
        self.assertEqual(['lost'], row['loss'])
        self.assertEqual(
            collections.Counter(r['kind'] for r in self.clean['requests']),
            collections.Counter(r['kind'] for r in report['requests']),
        )
        show = report['operations']['show']
        times = [
            r['latency_us']
            for r in self.clean['requests']
            if r['kind'] == 'show'
            and r['state'] == 'success'
            and r['req'] not in marked(report)
        ]
        self.assertEqual(breakdown.stats(times), show['latency'])

    def test_removed_required_fields_are_repaired(self):
        # every X of these events loses one required field
        events = (
            'compute.build',
            'compute.spawn',
            'rpc.dispatch',
            'api.request',
            'scheduler.select_destinations',
            'sql.query',
        )
        rnd = random.Random(5)
        begun = {r['span'] for r in self.records if r['ph'] == 'B'}
        began = {
            (r.get('attrs') or {}).get('req_began'): r['req']
            for r in self.records
            if r['ev'] == 'api.request' and r['ph'] == 'X'
        }
        for field in ('v', 'ph', 'seq', 'ts', 'host', 'svc', 'pid', 'ev'):
            damaged = list(self.records)
            damaged_sql = []
            hit = 0
            for i, r in enumerate(self.records):
                if (
                    r['ph'] != 'X'
                    or r['ev'] not in events
                    or (r['ev'] == 'sql.query' and rnd.random() > 0.05)
                ):
                    continue
                if field == 'ev' and r['span'] not in begun:
                    # (an event name only its span's start can give)
                    continue
                bad = dict(r)
                del bad[field]
                damaged[i] = bad
                hit += 1
                if r['span'] not in begun:
                    damaged_sql.append(r)
            self.assertGreater(hit, 20, field)
            report = self.analyse_files(
                same_files(self.records, damaged),
                jobs=2 if field == 'ts' else 1,
            )
            if field == 'ev':
                # an API request's end without its event name is read
                # with its start, under the id it began with when no
                # other record names its own (as if its end were lost)
                carried = collections.Counter(
                    r.get('req') for r in self.records
                )
                began = {
                    r['span']: r.get('req')
                    for r in self.records
                    if r['ph'] == 'B'
                }
                alone = {
                    r['req']: began[r['span']]
                    for r in self.records
                    if r['ev'] == 'api.request'
                    and r['ph'] == 'X'
                    and r['span'] in began
                    and carried[r['req']] == 1
                }
                self.assertEqual(1, len(alone))
                self.assertSameDiscrete(
                    report, but=set(alone) | set(alone.values())
                )
            else:
                self.assertSameDiscrete(report)
            counts = report['load']['counts']
            self.assertEqual(
                hit, counts['invalid'] + counts['unknown_version'], field
            )
            self.assertEqual(0, report['quality']['lost_records'], field)
            self.assertEqual(
                len(self.records), report['inputs']['records'], field
            )
            repaired = {
                r['req']
                for r in report['requests']
                if 'repaired' in (r.get('loss') or ())
            }
            if field == 'ts':
                # a time estimated (an SQL statement's: no start read),
                # its request marked; not when its span's start was
                # read (a build's, a spawn's: their start is the time)
                requests = {r['req'] for r in report['requests']}
                self.assertEqual(
                    {
                        began.get(r.get('req'), r.get('req'))
                        for r in damaged_sql
                    }
                    & requests,
                    repaired,
                )
                self.assertTrue(repaired)
            else:
                self.assertEqual(set(), marked(report), field)
                if field != 'ev':
                    self.assertEqual(timed(self.clean), timed(report), field)
            self.assertTimesNotShifted(report)

    def test_short_child_records_lost(self):
        # 5 % of the api's SQL statements lost (seq gaps): the API's
        # time per request is not taken as longer; the requests doing
        # something in the api's process then are marked, no other
        api = self.file_of('api')
        rnd = random.Random(11)
        damaged = [
            None
            if (
                r['ev'] == 'sql.query'
                and r['svc'] == 'api'
                and rnd.random() < 0.05
            )
            else r
            for r in self.records
        ]
        lost = damaged.count(None)
        self.assertGreater(lost, 30)
        report = self.analyse_files(same_files(self.records, damaged))
        q = report['quality']
        self.assertEqual(lost, q['lost_records'])
        self.assertEqual(lost, q['causes']['unreported_gaps'])
        # every discrete result but the SQL counts
        want = discrete(self.clean)
        got = discrete(report)
        for key in ('sql_calls', 'sql_total_us', 'sql_classes', 'sql_rows'):
            del want[key], got[key]
        self.assertEqual(want, got)
        self.assertEqual(
            self.clean['sql']['calls'] - lost, report['sql']['calls']
        )
        # the requests that lost a statement are marked; the api's
        # process lost them, so no request that never was there is
        # (the SQL statements of an API request carry the id the WSGI
        # environ began with: read as the request's)
        began = {
            (r.get('attrs') or {}).get('req_began'): r['req']
            for r in self.records
            if r['ev'] == 'api.request' and r['ph'] == 'X'
        }
        lost_from = {
            began.get(r.get('req'), r.get('req'))
            for r, d in zip(self.records, damaged, strict=True)
            if d is None
        } - {None}
        got_marked = marked(report)
        self.assertLessEqual(lost_from, got_marked)
        in_api = {r['req'] for r in self.files[api] if r.get('req')}
        self.assertLessEqual(got_marked, in_api)
        self.assertLess(len(got_marked), len(report['requests']))
        self.assertTimesNotShifted(report)
        # the API time of the shows not marked is the clean one
        clean_api = {
            r['req']: r['components_us'].get('api')
            for r in self.clean['requests']
        }
        for r in report['requests']:
            if r['req'] not in got_marked:
                self.assertEqual(
                    clean_api[r['req']],
                    r['components_us'].get('api'),
                    r['req'],
                )
        text = report_text.render(report)
        self.assertIn(views.sql_loss_line(report), text)
        self.assertIn(
            '%d of the %d show requests here may miss records'
            % (
                q['by_operation']['show'],
                report['operations']['show']['requests'],
            ),
            text,
        )


class LossWarningTest(DamageTestBase):
    """A loss is said beside what it can touch, not beside everything."""

    def cut(self, name: str, files: dict = None) -> dict:
        """The files with the last line of ``name`` cut in half."""
        files = dict(files or self.files)
        lines = [
            json.dumps(r, separators=(',', ':')).encode()
            for r in files.pop(name)
        ]
        data = (
            b'\n'.join(lines[:-1]) + b'\n' + lines[-1][: len(lines[-1]) // 2]
        )
        return self.analyse_files(files, raw={name: data})

    def test_one_cut_last_line(self):
        # the last line of each process's file cut in half (a process
        # killed mid-write), one at a time
        ends = 0
        for name in sorted(self.files):
            last = self.files[name][-1]
            report = self.cut(name)
            q = report['quality']
            self.assertEqual(1, q['lost_records'], name)
            self.assertEqual(1, report['load']['counts']['truncated'])
            # at most the requests doing something in that process at its
            # end: the cut record's, those whose records there reach the
            # time the record before it was written
            before = self.files[name][-2]
            written = before['ts'] + before.get('dur_us', 0)
            could = {
                r['req']
                for r in self.files[name]
                if r.get('req')
                and r['ts'] + r.get('dur_us', 0) >= written - 5_000
            }
            could.add(last.get('req'))
            self.assertLessEqual(marked(report), could, name)
            self.assertLess(q['requests_affected'], 5, name)
            want = discrete(self.clean)
            got = discrete(report)
            sql = last['ev'] == 'sql.query'
            if sql:
                # (the statement it was is not profiled: said beside)
                self.assertEqual(
                    want.pop('sql_calls') - 1, got.pop('sql_calls')
                )
                for key in ('sql_total_us', 'sql_rows'):
                    del want[key], got[key]
            for d in (want, got):
                d['requests'] = [r for r in d['requests'] if r[0] not in could]
            self.assertEqual(want, got, name)
            self.assertTimesNotShifted(report)
            text = report_text.render(report)
            note = views.loss_note(report)
            self.assertEqual(1, text.count(note), name)
            if sql:
                self.assertIn(views.sql_loss_line(report), text)
            if not q['requests_affected']:
                self.assertIn(
                    'no request was doing something in those '
                    'processes when they lost records',
                    note,
                )
                self.assertNotIn('requests here may miss records', text)
            ends += last['ev'] == 'process.end'
        self.assertEqual(1, ends)

    def test_garbage_lines_are_not_lost_records(self):
        name = self.file_of('api')
        rnd = random.Random(3)
        lines = [
            json.dumps(r, separators=(',', ':')).encode()
            for r in self.files[name]
        ]
        junk = [
            b'Traceback (most recent call last):',
            b'  File "x.py", line 1, in <module>',
            b'\x00\xff garbage \x01',
            b'[1, 2, 3]',
            b'{not json',
            b'{"unrelated": true}',
            b'2026-01-01 INFO nova ok',
        ]
        for _ in range(200):
            lines.insert(rnd.randrange(len(lines)), rnd.choice(junk))
        files = dict(self.files)
        del files[name]
        for jobs in (1, 2):
            report = self.analyse_files(
                files, jobs, raw={name: b'\n'.join(lines) + b'\n'}
            )
            self.assertEqual(200, sum(report['load']['counts'].values()))
            q = report['quality']
            self.assertEqual(0, q['lost_records'])
            self.assertEqual([], report['load']['loss'])
            self.assertEqual(0, q['requests_affected'])
            self.assertIsNone(views.loss_note(report))
            self.assertSameDiscrete(report)
            self.assertEqual(timed(self.clean), timed(report))

    def test_marked_requests_named_per_operation(self):
        # records lost in one compute's process: its boots and moves
        # only, and only while it lost them
        name = self.file_of('compute')
        host = self.files[name][1]['host']
        recs = self.files[name]
        mid = len(recs) // 2
        gone = {id(r) for r in recs[mid : mid + 10]}
        damaged = [None if id(r) in gone else r for r in self.records]
        report = self.analyse_files(same_files(self.records, damaged))
        q = report['quality']
        self.assertEqual(10, q['lost_records'])
        got = marked(report)
        self.assertTrue(got)
        on_host = {r['req'] for r in report['requests'] if host in r['hosts']}
        self.assertLessEqual(got, on_host)
        self.assertLess(len(got), len(on_host) + 1)
        by_op = collections.Counter(
            r['kind'] for r in report['requests'] if r['req'] in got
        )
        self.assertEqual(dict(by_op), q['by_operation'])
        self.assertEqual({'lost': len(got)}, q['why'])
        [row] = q['processes']
        self.assertTrue(row['windows'])
        text = report_text.render(report)
        for op, n in by_op.items():
            if op in ('boot', 'other'):
                continue
            self.assertIn(
                '%d of the %d %s requests here may miss'
                % (n, report['operations'][op]['requests'], op),
                text,
            )
        for op in set(report['operations']) - set(by_op) - {'other'}:
            self.assertNotIn('%s requests here may miss' % op, text)
