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
"""The report of an input is the same at every ``-j``.

Pass 2 runs in worker processes on partitions of the requests and
merges their sections' partial states.  What a section keeps a few of
(the requests of a failure row, the lifecycles kept for timelines, a
periodic task's runs and longest run, the longest wait's request, a
service's requests, the causality examples) is picked by a total key
of the example, never by the order it arrived in: the JSON and text
reports of ``-j 1``, ``-j 2`` and ``-j 3`` are equal byte for byte,
on a synthetic cloud, on the same damaged (a file reversed, a gzip
file reversed and cut short) and on ``tools/report_golden.py``'s
``rich`` input.  Then, per section, the examples follow
the key whatever the order of arrival and however they are split
between workers.
"""

import gzip
import importlib.util
import os
import random
import shutil
import tempfile
import types

import testtools

from instrument.analysis import pipeline
from instrument.analysis.model import durations
from instrument.analysis.render import json as report_json
from instrument.analysis.render import text as report_text
from instrument.analysis.sections import causality
from instrument.analysis.sections import failures
from instrument.analysis.sections import periodic
from instrument.analysis.sections import services
from instrument.analysis.sections import timelines
from instrument.analysis.sections import waits
from tests import synthetic

GOLDEN = os.path.join(
    os.path.dirname(__file__),
    os.pardir,
    os.pardir,
    os.pardir,
    'tools',
    'report_golden.py',
)


def _forms(path: str, jobs: int) -> tuple:
    report = pipeline.analyse([path], pipeline.Options(jobs=jobs))
    # the analysis's own timings and its number of workers: not what
    # the input says
    report['run']['seconds'] = 0.0
    report['run']['clock_pass_seconds'] = 0.0
    report['run']['jobs'] = 0
    return report_json.dumps(report), report_text.render(report)


class SameAtEveryJobsTest(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix='instrument-samej-')
        cls.clean = os.path.join(cls.tmp, 'clean')
        synthetic.generate(
            cls.clean,
            seed=21,
            requests=200,
            skew_us=4_000_000,
            bad_input=True,
        )
        cls.damaged = os.path.join(cls.tmp, 'damaged')
        shutil.copytree(cls.clean, cls.damaged)
        names = sorted(os.listdir(cls.damaged))
        plain = [n for n in names if n.endswith('.jsonl')][0]
        gz = [n for n in names if n.endswith('.gz')][0]
        # one file read from its end
        path = os.path.join(cls.damaged, plain)
        with open(path, 'rb') as f:
            lines = f.read().splitlines(keepends=True)
        with open(path, 'wb') as f:
            f.writelines(lines[::-1])
        # one gzip file reversed, then cut short
        path = os.path.join(cls.damaged, gz)
        with gzip.open(path, 'rb') as f:
            lines = f.read().splitlines(keepends=True)
        data = gzip.compress(b''.join(lines[::-1]))
        with open(path, 'wb') as f:
            f.write(data[: len(data) * 2 // 3])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def assertSameAtEveryJobs(self, path: str) -> None:
        one = _forms(path, 1)
        for jobs in (2, 3):
            json_j, text_j = _forms(path, jobs)
            self.assertEqual(one[0], json_j, 'JSON, -j %d' % jobs)
            self.assertEqual(one[1], text_j, 'text, -j %d' % jobs)

    def test_clean(self):
        self.assertSameAtEveryJobs(self.clean)

    def test_damaged(self):
        self.assertSameAtEveryJobs(self.damaged)

    def test_rich(self):
        # tools/report_golden.py's hand-made input: periodic runs,
        # waits, calls to other services, a copied file, and a process
        # that restarts (its process.start written with ``ph`` after
        # five other fields: every worker must see it)
        spec = importlib.util.spec_from_file_location('golden', GOLDEN)
        golden = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(golden)
        path = os.path.join(self.tmp, 'rich')
        golden.rich(path)
        self.assertSameAtEveryJobs(path)


def _orders(items: list, seed: int = 3):
    """``items`` in a few orders of arrival, each split in one to three
    parts (the workers' partitions)."""
    rnd = random.Random(seed)
    for _ in range(12):
        shuffled = list(items)
        rnd.shuffle(shuffled)
        k = rnd.randint(1, 3)
        yield [shuffled[i::k] for i in range(k)]


def _summary(req: str, start: int, dur: int, **kw) -> types.SimpleNamespace:
    s = types.SimpleNamespace(
        req=req,
        start=start,
        end=start + dur,
        latency=dur,
        kind='boot',
        state='success',
        lifecycle=['kept'],
    )
    s.__dict__.update(kw)
    return s


class FailureRowsTest(testtools.TestCase):
    # (request, start, duration): ties in duration, one request twice
    REQS = [('req-%02d' % i, 1000 - i * 7, (i % 4) * 100) for i in range(12)]

    def test_slowest_requests_whatever_the_order(self):
        key = ('boot', 'compute', 'compute.build', 'E', 'boom')
        want = [
            r
            for _d, _s, r in sorted((-d, s, r) for r, s, d in self.REQS)[
                : failures.KEEP
            ]
        ]
        for parts in _orders(self.REQS):
            merged = failures.Failures(None)
            for part in parts:
                f = failures.Failures(None)
                for req, start, dur in part:
                    summary = _summary(req, start, dur)
                    f._add(key, req, failures.FINAL, summary)
                    # the same error twice in one request: once
                    f._add(key, req, None, summary)
                merged.merge(f)
            rows = merged.report(None)
            self.assertEqual(want, rows[0]['requests'])
            self.assertEqual(24, rows[0]['count'])


class KeeperTest(testtools.TestCase):
    def test_slowest_and_first_whatever_the_order(self):
        good = [('req-g%03d' % i, 5000 - i, 100 + (i % 5)) for i in range(30)]
        bad = [('req-b%03d' % i, (i * 37) % 60, 10) for i in range(60)]
        want_good = {
            r
            for _d, _s, r in sorted((-d, s, r) for r, s, d in good)[
                : timelines.KEEP_SLOWEST
            ]
        }
        want_bad = {
            r
            for _s, r in sorted((s, r) for r, s, _d in bad)[
                : timelines.KEEP_PER_STATE
            ]
        }
        for parts in _orders(
            [('g',) + g for g in good] + [('b',) + b for b in bad]
        ):
            made = []
            merged = timelines.Keeper(False)
            for part in parts:
                keeper = timelines.Keeper(False)
                for what, req, start, dur in part:
                    s = _summary(
                        req,
                        start,
                        dur,
                        state='success' if what == 'g' else 'compute_failure',
                    )
                    s.lifecycle = ['kept'] if keeper(s, None, None) else None
                    made.append(s)
                merged.merge(keeper)
            kept = {s.req for s in made if s.lifecycle is not None}
            self.assertEqual(want_good | want_bad, kept)


class PeriodicTest(testtools.TestCase):
    def test_runs_and_longest_run_whatever_the_order(self):
        # five runs of 300 ms (the longest, tied), more of 100 ms
        runs = [
            (
                'periodic-T-%02d' % i,
                1000 + (i * 13) % 40,
                300 if i % 3 else 100,
            )
            for i in range(15)
        ]
        longest = min(
            (s, r) for r, s, d in runs if d == max(x[2] for x in runs)
        )[1]
        first = [r for _s, r in sorted((s, r) for r, s, _d in runs)]
        for parts in _orders(runs):
            merged = periodic._Task()
            for part in parts:
                task = periodic._Task()
                for req, ts, dur in part:
                    task.durs.add(dur, False, req, ts)
                    periodic.base.keep_best(
                        task.runs_seen, (ts, req), periodic.KEEP
                    )
                merged.merge(task)
            self.assertEqual(longest, merged.durs.max_req)
            self.assertEqual(
                first[: periodic.KEEP], [r for _t, r in merged.runs_seen]
            )


class WaitsTest(testtools.TestCase):
    def test_longest_wait_and_hold_whatever_the_order(self):
        recs = [
            types.SimpleNamespace(
                ev='lock.wait',
                attrs={'lock': 'L', 'held_us': 50 if i % 2 else 20},
                dur_us=70 if i % 3 else 10,
                st='ok',
                req='req-%02d' % i,
                host='h',
                svc='compute',
                ts=500 - (i * 11) % 90,
            )
            for i in range(10)
        ]
        got = set()
        for parts in _orders(recs):
            merged = waits.WaitTable()
            for part in parts:
                table = waits.WaitTable()
                for rec in part:
                    table.add(rec, rec.ts)
                merged.merge(table)
            (row,) = merged.top()
            got.add(
                (
                    row['longest_wait_request'],
                    row['longest_hold']['request'],
                    row['longest_hold']['ts'],
                )
            )
        want_wait = min((r.ts, r.req) for r in recs if r.dur_us == 70)[1]
        hold = min((r.ts, r.req) for r in recs if r.attrs['held_us'] == 50)
        self.assertEqual({(want_wait, hold[1], hold[0])}, got)

    def test_durations_tie(self):
        a = durations.Durations()
        a.add(5, False, 'req-b', 10)
        a.add(5, False, 'req-a', 10)
        a.add(5, False, 'req-c', 9)
        self.assertEqual('req-c', a.max_req)


class ServicesTest(testtools.TestCase):
    def test_requests_whatever_the_order(self):
        reqs = [('req-%02d' % i, (i * 29) % 50) for i in range(14)]
        want = [r for _s, r in sorted((s, r) for r, s in reqs)]
        for parts in _orders(reqs):
            merged = services._Row()
            for part in parts:
                row = services._Row()
                for req, start in part:
                    row.add(10, 'ok', {}, req, False, start)
                    row.add(20, 'ok', {}, req, False, start)
                merged.merge(row)
            self.assertEqual(
                want[: services.KEEP_REQUESTS],
                [r for _s, r in merged.requests],
            )


class CausalityTest(testtools.TestCase):
    def test_examples_whatever_the_order(self):
        def done(i):
            spans = {
                'p': ['rpc.call', 'h1', 'conductor', 100, 50, None],
                'c': ['rpc.dispatch', 'h2', 'compute', 90 - i, 10, 'p'],
            }
            return types.SimpleNamespace(
                request=types.SimpleNamespace(
                    req='req-%02d' % i, spans=_spans(spans)
                )
            )

        items = list(range(14))
        got = set()
        for parts in _orders(items):
            merged = causality.Causality(None)
            for part in parts:
                c = causality.Causality(None)
                for i in part:
                    c.finished(done(i))
                merged.merge(c)
            table = merged.report(None)
            self.assertEqual(14, table['violations'])
            got.add(tuple(e['req'] for e in table['examples']))
        self.assertEqual(
            {tuple('req-%02d' % i for i in range(13, 3, -1))}, got
        )


def _spans(short: dict) -> dict:
    """Span entries (``spans.S_*`` lists) of ``{id: [ev, host, svc,
    start, dur, parent]}``."""
    from instrument.analysis.model import spans as spans_mod

    out = {}
    for sid, (ev, host, svc, start, dur, parent) in short.items():
        s = [None] * (
            max(
                spans_mod.S_EV,
                spans_mod.S_HOST,
                spans_mod.S_SVC,
                spans_mod.S_START,
                spans_mod.S_DUR,
                spans_mod.S_PARENT,
                spans_mod.S_ST,
                spans_mod.S_ERR,
                spans_mod.S_ATTRS,
            )
            + 1
        )
        s[spans_mod.S_EV] = ev
        s[spans_mod.S_HOST] = host
        s[spans_mod.S_SVC] = svc
        s[spans_mod.S_START] = start
        s[spans_mod.S_DUR] = dur
        s[spans_mod.S_PARENT] = parent
        s[spans_mod.S_ST] = 'ok'
        out[sid] = s
    return out
