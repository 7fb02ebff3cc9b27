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
"""``instrument-report follow`` (``analysis.follow``): span files read
as they grow give the batch report's figures.

Each test writes span files the way a cloud does while it runs (lines
appended in steps, a file rotated by rename or by ``copytruncate``, a
host whose lines arrive late, a process killed before its end, bad
lines), polls between the steps, and checks the figures follow exports
against the batch report (``pipeline.analyse``) of the same records:
requests and instances per operation and final state, the time per
component of the successful requests, the failure rows per fate, the
DB retries.  The input is the demo's real nova run
(``tests/data/fidelity``) and the synthetic cloud
(``tests.synthetic``).
"""

import collections
import gzip
import json
import os
import re
import shutil
import subprocess
import threading
import typing
import urllib.request

import fixtures
from prometheus_client import parser as prom_parser
import testtools

from instrument.analysis import exposition
from instrument.analysis import follow
from instrument.analysis import pipeline
from instrument.analysis.model import clocks
from instrument.cmd import metrics as metrics_cmd
from instrument.cmd import report as report_cmd
from tests import synthetic

DATA = os.path.join(
    os.path.dirname(__file__), os.pardir, os.pardir, 'data', 'fidelity'
)
PROMTOOL = shutil.which('promtool') or '/usr/bin/promtool'
FIDELITY = [
    os.path.join(DATA, name)
    for name in ('demo-threads.jsonl.gz', 'demo-mixed-threads.jsonl.gz')
]


def batch_figures(report: dict) -> dict:
    """The figures both give, from a batch report."""
    ops = report['operations']
    fails: dict = collections.Counter()
    for row in report['failures']:
        key = (
            row['operation'],
            str(row['component']),
            str(row['ev']),
            str(row['cls']),
        )
        rest = row['count']
        if row['final']:
            fails[key + ('final',)] += row['final']
            rest -= row['final']
        for how, n in row['recovered_by'].items():
            fails[key + (how,)] += n
            rest -= n
        if rest:
            fails[key + ('none',)] += rest
    return {
        'requests': dict(
            collections.Counter(
                (r['kind'], r['state']) for r in report['requests']
            )
        ),
        'instances': {
            (op, st): n
            for op, f in ops.items()
            for st, n in f['states'].items()
        },
        'durations': {
            (op, st): v['count']
            for op, f in ops.items()
            for st, v in f['latency_by_state'].items()
        },
        'timed': {
            (op,): f['latency']['count']
            for op, f in ops.items()
            if f['latency'].get('count')
        },
        'components': {
            (op, name): round(st['sum'] / 1e6, 6)
            for op, f in ops.items()
            for name, st in f['components'].items()
            if st.get('sum')
        },
        'failures': dict(fails),
        'retries': {
            (r['func'], r['cls']): r['count'] for r in report['retries']
        },
    }


def follow_figures(series: dict) -> dict:
    """The same figures, from ``Follower.series``."""
    return {
        'requests': dict(series[exposition.REQUESTS]),
        'instances': dict(series[exposition.INSTANCES]),
        'durations': {
            k: sum(v[:-1]) for k, v in series[exposition.DURATION].items()
        },
        'timed': dict(series[exposition.TIMED]),
        'components': {
            k: round(v, 6)
            for k, v in series[exposition.COMPONENT].items()
            if v
        },
        'failures': dict(series[exposition.FAILURES]),
        'retries': dict(series[exposition.DB_RETRIES]),
    }


def read_lines(path: str) -> list:
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rb') as src:
        return src.read().splitlines(keepends=True)


def plain_name(name: str) -> str:
    return name[:-3] if name.endswith('.gz') else name


_TS = re.compile(rb'"ts":(\d+)')


def time_steps(files: dict, steps: int) -> list:
    """``[{file name: (first line, end line)}]``: the files written in
    ``steps`` steps of equal input time, each file up to its first line
    later than the step's end (its lines are in the order written)."""
    times = {
        name: [
            int(m.group(1)) if m else 0
            for m in (_TS.search(line) for line in lines)
        ]
        for name, lines in files.items()
    }
    first = min(t for ts in times.values() for t in ts if t)
    last = max(t for ts in times.values() for t in ts)
    out = []
    done = dict.fromkeys(files, 0)
    for k in range(1, steps + 1):
        end = first + (last - first) * k // steps
        step = {}
        for name, ts in times.items():
            upto = done[name]
            while upto < len(ts) and (ts[upto] <= end or k == steps):
                upto += 1
            step[name] = (done[name], upto)
            done[name] = upto
        out.append(step)
    return out


def steps_seconds(files: dict, steps: int) -> float:
    """The input time of one of ``steps`` steps (``time_steps``)."""
    ts = [
        int(m.group(1))
        for lines in files.values()
        for line in lines
        for m in (_TS.search(line),)
        if m
    ]
    return (max(ts) - min(t for t in ts if t)) / steps / 1e6


def parse(text: str) -> dict:
    """``{family: [samples]}`` of Prometheus text (the client's own
    parser: a malformed exposition raises)."""
    return {
        f.name: f for f in prom_parser.text_string_to_metric_families(text)
    }


class Base(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def synthetic_lines(
        self, seed: int = 4, requests: int = 60, **kwargs
    ) -> dict:
        """``{file name: lines}`` of a synthetic cloud (decompressed):
        by default without losses and with right clocks (what is read
        live is marked and placed as known when its request is
        finalised: a loss, or a clock offset, found later changes
        nothing of it; ``follow``'s doc)."""
        kwargs.setdefault('buffer_drops', 0)
        kwargs.setdefault('skew_us', 0)
        src = os.path.join(self.tmp, 'src-%d' % seed)
        synthetic.generate(src, seed=seed, requests=requests, **kwargs)
        return {
            plain_name(n): read_lines(os.path.join(src, n))
            for n in sorted(os.listdir(src))
        }

    def append(
        self,
        directory: str,
        files: dict,
        step: dict,
        skip: typing.Collection = (),
    ) -> None:
        """Append each file's lines of ``step`` (``time_steps``)."""
        for name, (a, b) in step.items():
            if name in skip or a == b:
                continue
            with open(os.path.join(directory, name), 'ab') as out:
                out.writelines(files[name][a:b])

    def write_all(self, directory: str, files: dict) -> str:
        os.makedirs(directory, exist_ok=True)
        for name, lines in files.items():
            with open(os.path.join(directory, name), 'wb') as out:
                out.writelines(lines)
        return directory

    def assertSameAsBatch(
        self, follower, inputs, live=True, rpc_within=0.1, **kwargs
    ):
        """The figures of ``follower`` are the batch report's on
        ``inputs``.  ``live``: read in steps, the times that depend on
        the clock offsets (an RPC's wait and queue between two hosts)
        are those of the offsets solved when each record was read, not
        of the whole run's: within ``rpc_within`` (None: only there);
        all else is equal."""
        batch = pipeline.analyse(inputs, pipeline.Options(jobs=1, **kwargs))
        expected = batch_figures(batch)
        got = follow_figures(follower.series())
        if live:
            self.assertEqual(
                set(expected['components']), set(got['components'])
            )
            for key, value in expected.pop('components').items():
                if key[1].startswith('rpc'):
                    if rpc_within is None:
                        continue
                    self.assertLess(
                        abs(got['components'][key] - value),
                        rpc_within * value + 1e-6,
                        key,
                    )
                else:
                    self.assertEqual(value, got['components'][key], key)
            got.pop('components')
        self.assertEqual(expected, got)
        return batch


class TestOnceEqualsBatch(Base):
    """``--once`` on a finished run: the batch report's figures."""

    def test_fidelity_runs(self):
        for path in FIDELITY:
            batch = self.assertSameAsBatch(
                follow.once([path]), [path], live=False
            )
            # (the runs have failures and a reschedule to compare)
            self.assertTrue(batch['failures'])

    def test_files_that_are_not_spans_are_left_out(self):
        directory = os.path.join(self.tmp, 'run')
        os.makedirs(directory)
        shutil.copy(FIDELITY[0], directory)
        shutil.copy(os.path.join(DATA, 'demo-threads.servers.json'), directory)
        with open(os.path.join(directory, 'report.json'), 'w') as out:
            out.write('{"report_version": 1}\n')
        follower = follow.once([directory])
        self.assertEqual(0, sum(follower.series()[exposition.BAD].values()))
        self.assertSameAsBatch(follower, [directory], live=False)

    def test_synthetic_cloud(self):
        directory = os.path.join(self.tmp, 'in')
        synthetic.generate(directory, seed=7, requests=120)
        batch = self.assertSameAsBatch(
            follow.once([directory]), [directory], live=False
        )
        self.assertGreater(len(batch['operations']), 1)


class TestGrowing(Base):
    """Files appended to in steps while it runs."""

    def test_counts_grow_and_end_equal_to_batch(self):
        files = self.synthetic_lines(seed=5, requests=120)
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        # one file appears only halfway through (what it holds is
        # later than the lag: its requests are still open)
        late_file = sorted(files)[-1]
        follower = follow.Follower(
            [live], follow.Options(lag_s=20.0, idle_s=1.0)
        )
        steps = time_steps(files, 6)
        totals = []
        for k, step in enumerate(steps):
            if k == 2:
                step = dict(step, **{late_file: (0, step[late_file][1])})
            self.append(live, files, step, skip=(late_file,) if k < 2 else ())
            follower.poll()
            totals.append(sum(follower.series()[exposition.REQUESTS].values()))
        self.assertEqual(totals, sorted(totals))
        # requests were finalised while it ran, not only at the end
        self.assertGreater(totals[-2], 0)
        self.assertEqual(0, follower.model.late)
        follower.finish()
        self.assertSameAsBatch(follower, [live])

    def test_real_nova_runs_in_steps(self):
        """The demo's runs (api.request spans begun under another
        request id than they ended with: put together again when the
        start and the end come in different polls), files appearing
        after a start that found none."""
        for path in FIDELITY:
            files = {'demo.jsonl': read_lines(path)}
            live = os.path.join(self.tmp, os.path.basename(path))
            os.makedirs(live)
            follower = follow.Follower(
                [live], follow.Options(lag_s=1.0, idle_s=1.0)
            )
            self.assertEqual(0, follower.poll())
            for step in time_steps(files, 6):
                self.append(live, files, step)
                follower.poll()
            self.assertTrue(follower.reader.aliases)
            follower.finish()
            # (the offsets: those of the first poll's hops, the later
            # ones matched a clock horizon later)
            self.assertSameAsBatch(follower, [live], rpc_within=None)

    def test_partial_line_waits_for_its_end(self):
        files = self.synthetic_lines(seed=6, requests=10)
        name, lines = next(
            (n, ls) for n, ls in files.items() if n.endswith('.jsonl')
        )
        path = os.path.join(self.tmp, 'live', name)
        os.makedirs(os.path.dirname(path))
        follower = follow.Follower([os.path.dirname(path)])
        with open(path, 'wb') as out:
            out.writelines(lines[:5])
            out.write(lines[5][:20])
        self.assertEqual(5, follower.poll())
        with open(path, 'ab') as out:
            out.write(lines[5][20:])
            out.writelines(lines[6:])
        self.assertEqual(len(lines) - 5, follower.poll())
        bad = follower.series()[exposition.BAD]
        self.assertEqual(0, sum(bad.values()))

    def test_a_late_host(self):
        """One host's lines arrive a step after the others': with a
        lag longer than that, nothing is finalised early."""
        files = self.synthetic_lines(seed=8, requests=100)
        late = next(n for n in files if n.startswith('cmp-000'))
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        steps = time_steps(files, 5)
        follower = follow.Follower(
            [live],
            follow.Options(lag_s=(steps_seconds(files, 5) + 1), idle_s=1.0),
        )
        for k in range(len(steps) + 1):
            if k < len(steps):
                self.append(live, files, steps[k], skip=(late,))
            if k:
                self.append(live, files, {late: steps[k - 1][late]})
            follower.poll()
        self.assertEqual(0, follower.model.late)
        follower.finish()
        self.assertSameAsBatch(follower, [live])

    def test_a_skewed_host_that_appears_later(self):
        """A host whose files appear after the start, its clock 20 s
        ahead (further than the lag): its records are placed by the
        hops of its first poll before they are read, as the batch
        report places them; nothing finalised early, nothing late."""
        files = self.synthetic_lines(seed=5, requests=120)
        late = sorted(n for n in files if n.startswith('cmp-'))[0]
        # (written as time goes: steps of true time)
        steps = time_steps(files, 6)
        ahead = 20_000_000
        files[late] = [
            _TS.sub(lambda m: b'"ts":%d' % (int(m.group(1)) + ahead), line, 1)
            for line in files[late]
        ]
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        follower = follow.Follower(
            [live], follow.Options(lag_s=5.0, idle_s=1.0)
        )
        for k, step in enumerate(steps):
            if k == 2:
                step = dict(step, **{late: (0, step[late][1])})
            self.append(live, files, step, skip=(late,) if k < 2 else ())
            follower.poll()
        # placed 20 s back (to a millisecond), before the clock
        # horizon (600 s) passed its hops
        host = late.split('_')[0]
        self.assertIn(host, follower.provisional)
        self.assertLess(abs(follower.offsets[host] + ahead), 1000)
        self.assertEqual(0, follower.model.late)
        follower.finish()
        self.assertSameAsBatch(follower, [live])

    def test_a_host_placed_early_stays_placed(self):
        """Solved again before its own hops passed the horizon, a host
        placed early keeps its offset (not the solve's 0)."""
        follower = follow.Follower([self.tmp])
        follower.offsets['late'] = -20_000_000
        follower.placed.add('late')
        follower.provisional.add('late')
        collector = clocks.PairCollector()
        collector.add_hop('a', 1000, 3000, 'b', 1500, 2500, True, None)
        follower._solved(clocks.solve(collector, {'a', 'b', 'late'}))
        self.assertEqual(-20_000_000, follower.offsets['late'])
        self.assertEqual({'a', 'b', 'late'}, follower.placed)
        collector.add_hop('a', 1000, 3000, 'late', 1500, 2500, True, None)
        follower._solved(clocks.solve(collector, {'a', 'b', 'late'}))
        self.assertNotEqual(-20_000_000, follower.offsets['late'])
        self.assertEqual(set(), follower.provisional)

    def test_a_host_later_than_the_lag_is_counted_late(self):
        files = self.synthetic_lines(seed=8, requests=60)
        late = next(n for n in files if n.startswith('cmp-000'))
        live = self.write_all(
            os.path.join(self.tmp, 'live'),
            {n: ls for n, ls in files.items() if n != late},
        )
        follower = follow.Follower(
            [live], follow.Options(lag_s=0.001, idle_s=0.001, hung_s=0.001)
        )
        follower.poll()
        self.write_all(live, {late: files[late]})
        follower.poll()
        follower.finish()
        series = follower.series()
        self.assertGreater(series[exposition.LATE][()], 0)
        self.assertEqual(
            series[exposition.LATE][()], series[exposition.BAD][('late',)]
        )


class TestRotation(Base):
    def split(self, seed=9):
        files = self.synthetic_lines(seed=seed, requests=60)
        name = next(n for n in files if n.startswith('cmp-000'))
        return files, name

    def test_rename_and_new_file(self):
        files, name = self.split()
        live = os.path.join(self.tmp, 'live')
        lines = files[name]
        half = len(lines) // 2
        first = dict(files)
        first[name] = lines[:half]
        self.write_all(live, first)
        follower = follow.Follower([live], follow.Options(lag_s=1.0))
        follower.poll()
        path = os.path.join(live, name)
        os.rename(path, path + '.1')
        with open(path, 'wb') as out:
            out.writelines(lines[half:])
        follower.poll()
        follower.finish()
        self.assertEqual(1, follower.rotations['renamed'])
        # the same records as one file holding them all
        whole = self.write_all(os.path.join(self.tmp, 'whole'), files)
        self.assertSameAsBatch(follower, [whole])
        self.assertEqual(0, follower.series()[exposition.BAD][('duplicate',)])

    def test_copytruncate(self):
        files, name = self.split(seed=10)
        live = os.path.join(self.tmp, 'live')
        lines = files[name]
        half = len(lines) // 2
        first = dict(files)
        first[name] = lines[:half]
        self.write_all(live, first)
        follower = follow.Follower([live], follow.Options(lag_s=1.0))
        follower.poll()
        path = os.path.join(live, name)
        # lines written after the poll, before the copy: only the copy
        # has them
        with open(path, 'ab') as out:
            out.writelines(lines[half : half + 10])
        shutil.copyfile(path, path + '.1')
        with open(path, 'r+b') as out:
            out.truncate(0)
        with open(path, 'ab') as out:
            out.writelines(lines[half + 10 :])
        follower.poll()
        follower.finish()
        self.assertEqual(1, follower.rotations['truncated'])
        whole = self.write_all(os.path.join(self.tmp, 'whole'), files)
        self.assertSameAsBatch(follower, [whole])
        # only what the copy holds beyond what was read came from it
        self.assertEqual(0, follower.series()[exposition.BAD][('duplicate',)])

    def test_file_removed_after_rotation_is_read_to_its_end(self):
        files, name = self.split(seed=11)
        live = os.path.join(self.tmp, 'live')
        self.write_all(live, files)
        follower = follow.Follower([live], follow.Options(lag_s=1.0))
        path = os.path.join(live, name)
        with open(path, 'rb') as src:
            kept = src.read()
        with open(path, 'wb') as out:
            out.write(kept[: len(kept) // 3])
        follower.poll()
        # the rest written, then the file removed (moved out of the
        # directory) before the next poll: its open handle reads it
        with open(path, 'ab') as out:
            out.write(kept[len(kept) // 3 :])
        os.rename(path, os.path.join(self.tmp, name))
        follower.poll()
        follower.finish()
        whole = self.write_all(os.path.join(self.tmp, 'whole'), files)
        self.assertSameAsBatch(follower, [whole])


class TestKilledProcess(Base):
    def test_requests_of_a_killed_process_are_finalised_incomplete(self):
        files = self.synthetic_lines(seed=12, requests=300, rate=2.0)
        name = next(n for n in files if n.startswith('cmp-002'))
        lines = files[name]
        # killed halfway: no more records, no end record
        files[name] = lines[: len(lines) // 2]
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        step_s = steps_seconds(files, 8)
        # (hung: longer than a boot's spawn, quiet for seconds)
        hung = 30.0
        follower = follow.Follower(
            [live], follow.Options(lag_s=step_s, idle_s=1.0, hung_s=hung)
        )
        for step in time_steps(files, 8):
            self.append(live, files, step)
            follower.poll()
        # before the end: the killed boots were finalised, incomplete
        before = follower.series()[exposition.REQUESTS]
        self.assertTrue(
            any(
                state == 'incomplete' and n
                for (_op, state), n in before.items()
            )
        )
        follower.finish()
        self.assertSameAsBatch(follower, [live], idle_s=1.0, hung_s=hung)


class TestBounds(Base):
    def test_open_requests_stay_bounded(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.analysis.follow.RECENT', 200)
        )
        files = self.synthetic_lines(seed=13, requests=500, rate=2.0)
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        follower = follow.Follower(
            [live], follow.Options(lag_s=1.0, idle_s=1.0)
        )
        most = 0
        for step in time_steps(files, 20):
            self.append(live, files, step)
            follower.poll()
            most = max(most, len(follower.model.open))
            # nothing kept of a finished request but its id, of the
            # last RECENT
            self.assertEqual([], follower.model.summaries)
            self.assertLessEqual(len(follower.model.recent), 200)
            self.assertEqual(
                set(),
                {type(v) for v in follower.model.recent.values()}
                - {type(None)},
            )
        follower.finish()
        total = sum(follower.series()[exposition.REQUESTS].values())
        self.assertGreaterEqual(total, 500)
        # the requests in flight, not the requests read
        self.assertLess(most, total // 3)

    def test_request_id_pairs_stay_bounded(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.analysis.follow.RECENT', 5)
        )
        files = {'demo.jsonl': read_lines(FIDELITY[1])}
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        follower = follow.Follower([live], follow.Options(lag_s=1.0))
        for step in time_steps(files, 6):
            self.append(live, files, step)
            follower.poll()
            self.assertLessEqual(len(follower.reader.aliases), 5)
            self.assertLessEqual(len(follower.matcher.rejoin.pairs), 5)
        self.assertEqual(5, len(follower.reader.aliases))

    def test_max_open_drops_and_counts(self):
        files = self.synthetic_lines(seed=14, requests=120)
        live = self.write_all(os.path.join(self.tmp, 'live'), files)
        # a lag beyond the run: nothing would be finalised before the end
        follower = follow.Follower(
            [live], follow.Options(lag_s=3600.0, max_open=10)
        )
        follower.poll()
        self.assertLessEqual(len(follower.model.open), 10)
        follower.finish()
        series = follower.series()
        dropped = series[exposition.DROPPED][()]
        self.assertGreater(dropped, 0)
        batch = pipeline.analyse([live], pipeline.Options(jobs=1))
        self.assertEqual(
            len(batch['requests']),
            sum(series[exposition.REQUESTS].values()) + dropped,
        )

    def test_bad_lines_are_counted_not_fatal(self):
        files = self.synthetic_lines(seed=15, requests=30)
        live = self.write_all(os.path.join(self.tmp, 'live'), files)
        follower = follow.Follower([live], follow.Options(lag_s=1.0))
        follower.poll()
        name = next(n for n in files if n.endswith('.jsonl'))
        with open(os.path.join(live, name), 'ab') as out:
            out.write(b'garbage, not a record\n')
            out.write(b'{"v":1,"ph":"X","seq":\n')
            out.write(b'\x00\xff\xfe\n')
        follower.poll()
        follower.finish()
        bad = follower.series()[exposition.BAD]
        self.assertGreaterEqual(sum(bad.values()), 3)
        clean = self.write_all(os.path.join(self.tmp, 'clean'), files)
        expected = batch_figures(
            pipeline.analyse([clean], pipeline.Options(jobs=1))
        )
        self.assertEqual(expected, follow_figures(follower.series()))


class TestLossBitmapsBounded(Base):
    """Days of records folded (``Follower._prune``): the pages of ``seq``
    numbers stay bounded, and the counts stay those of every record."""

    T0 = 1_700_000_000_000_000
    # a block of records written in a row, then numbers lost
    BLOCK = 64
    GAP = 16_000
    # seconds between blocks
    EVERY = 0.5

    def line(self, seq, ts, pid=100, ev='sink.drops', ph='C'):
        rec = {
            'v': 1,
            'ph': ph,
            'seq': seq,
            'ts': ts,
            'host': 'cmp-9',
            'svc': 'compute',
            'pid': pid,
            'ev': ev,
        }
        if ev == 'sink.drops':
            rec['attrs'] = {'file': 0}
        elif ev == 'process.start':
            rec['attrs'] = {'service': 'nova-compute'}
        return (json.dumps(rec, separators=(',', ':')) + '\n').encode()

    def blocks(self, pid, first_block, blocks, end=False):
        """The lines of blocks ``first_block``... of process ``pid``
        (its start first), and the numbers they skip."""
        lines = []
        if not first_block:
            lines.append(self.line(1, self.T0, pid, 'process.start', 'M'))
        seq = 2 + first_block * (self.BLOCK + self.GAP)
        for k in range(first_block, first_block + blocks):
            ts = self.T0 + int((k + 1) * self.EVERY * 1e6)
            for i in range(self.BLOCK):
                lines.append(self.line(seq + i, ts + i, pid))
            seq += self.BLOCK + self.GAP
        if end:
            # (right after the last block: no gap after it)
            seq -= self.GAP
            lines.append(
                self.line(seq, ts + self.BLOCK, pid, 'process.end', 'M')
            )
        return lines

    def test_days_of_records_keep_the_pages_bounded(self):
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        follower = follow.Follower(
            [live],
            follow.Options(
                lag_s=1.0,
                idle_s=1.0,
                hung_s=5.0,
                findings_window_s=0,
            ),
        )
        polls, per_poll = 60, 5
        written = {'a.jsonl': [], 'b.jsonl': []}
        most_pages = 0
        for k in range(polls):
            step = {
                'a.jsonl': self.blocks(100, k * per_poll, per_poll),
                # a process that ends a quarter of the way
                'b.jsonl': self.blocks(
                    200, k * per_poll, per_poll, end=k == polls // 4
                )
                if k <= polls // 4
                else [],
            }
            for name, lines in step.items():
                written[name].extend(lines)
                with open(os.path.join(live, name), 'ab') as out:
                    out.writelines(lines)
            follower.poll()
            seqs = follower.reader.loss.seqs
            most_pages = max(
                most_pages, sum(len(s.pages) for s in seqs.values())
            )
        loss = follower.reader.loss
        a = loss.seqs[('cmp-9', 100, self.T0)]
        blocks_a = polls * per_poll
        numbers = blocks_a * (self.BLOCK + self.GAP)
        # millions of numbers, in pages of 64 Ki: a few kept
        self.assertGreater(numbers, 4_000_000)
        self.assertGreater(numbers >> 16, 60)
        # (the margin and the lag: 6 s, 12 blocks, 3 pages; and the
        # page being written)
        self.assertLessEqual(most_pages, 2 * 5)
        self.assertLessEqual(len(a.pages), 5)
        self.assertLessEqual(len(a.times), 5 * 16)
        self.assertGreater(a.floor, 50)
        # the ended process: done with, its counts kept
        self.assertNotIn(('cmp-9', 200, self.T0), loss.seqs)
        self.assertIn(('cmp-9', 200, self.T0), loss.retired)
        self.assertEqual(1, follower.losses()['retired'])

        # a rotated copy of the first records (long folded), and a
        # record counted lost, read late
        copied = written['a.jsonl'][:1000] + written['b.jsonl'][:300]
        hole = 2 + self.BLOCK + 5
        late = [
            written['a.jsonl'][0],
            self.line(hole, self.T0 + int(self.EVERY * 1e6) + 99),
        ]
        with open(os.path.join(live, 'a-copy.jsonl'), 'wb') as out:
            out.writelines(copied)
        with open(os.path.join(live, 'late.jsonl'), 'wb') as out:
            out.writelines(late)
        follower.poll()
        counts = follower.reader.issues.counts
        self.assertEqual(len(copied) + 1, counts['duplicate'])
        self.assertEqual(1, counts['late'])
        self.assertLessEqual(len(a.pages), 5)

        # the truth: every record written once, every number skipped
        blocks_b = polls // 4 * per_poll + per_poll
        truth_records = (
            1 + blocks_a * self.BLOCK + 1 + blocks_b * self.BLOCK + 1
        )
        # (the record read late was counted lost: final)
        truth_missing = (blocks_a - 1) * self.GAP + (blocks_b - 1) * self.GAP
        got = follower.losses()
        self.assertEqual(truth_records, got['records'])
        self.assertEqual(truth_missing, got['missing'])
        self.assertEqual(truth_missing, got['lost'])
        self.assertEqual(2, got['processes'])
        # the same counts as reading it all at once, never folded
        once = follow.once([live], follow.Options(findings_window_s=0))
        whole = once.losses()
        self.assertEqual(0, whole['retired'])
        self.assertEqual(truth_records + 1, whole['records'])
        self.assertEqual(truth_missing - 1, whole['missing'])


class TestExposition(Base):
    def test_parsed_by_the_prometheus_client(self):
        text = follow.once([FIDELITY[0]]).exposition()
        families = parse(text)
        for name in (
            exposition.REQUESTS,
            exposition.INSTANCES,
            exposition.DURATION,
            exposition.COMPONENT,
            exposition.FAILURES,
            exposition.TIMED,
            exposition.LINES,
            exposition.OPEN,
        ):
            self.assertIn(name.removesuffix('_total'), families)
        for name, (kind, _help, labels) in exposition.FAMILIES.items():
            base = (
                name[: -len('_total')]
                if kind == 'counter' and name.endswith('_total')
                else name
            )
            if base not in families:
                continue
            self.assertEqual(kind, families[base].type)
            self.assertTrue(families[base].documentation)
            for sample in families[base].samples:
                if sample.name.endswith('_bucket'):
                    continue
                self.assertEqual(set(labels), set(sample.labels) - {'le'})
        dur = families['instrument_operation_duration_seconds']
        buckets = [
            s
            for s in dur.samples
            if s.name.endswith('_bucket')
            and s.labels['operation'] == 'boot'
            and s.labels['state'] == 'success'
        ]
        self.assertEqual('+Inf', buckets[-1].labels['le'])
        values = [s.value for s in buckets]
        self.assertEqual(values, sorted(values))
        self.assertEqual(2, values[-1])

    def test_promtool_checks_it(self):
        text = follow.once([FIDELITY[1]]).exposition()
        done = subprocess.run(  # noqa: S603 - a fixed tool
            [PROMTOOL, 'check', 'metrics'],
            input=text.encode(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        self.assertEqual(
            (0, b''), (done.returncode, done.stdout + done.stderr)
        )

    def test_labels_past_the_cap_are_other(self):
        totals = exposition.Totals()
        for i in range(exposition.MAX_SERIES + 5):
            totals.add(exposition.TRIED, ('op%d' % i,))
        series = totals.export()[exposition.TRIED]
        self.assertEqual(exposition.MAX_SERIES + 1, len(series))
        self.assertEqual(5, series[('other',)])


class TestCommand(Base):
    def test_once_prints_the_exposition(self):
        out = self.useFixture(fixtures.StringStream('stdout')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', out))
        self.assertEqual(0, report_cmd.main(['follow', '--once', FIDELITY[0]]))
        out.seek(0)
        families = parse(out.read())
        samples = families['instrument_operation_requests'].samples
        self.assertEqual(
            4, sum(s.value for s in samples if s.labels['operation'] == 'boot')
        )

    def test_textfile_written_while_it_runs(self):
        live = os.path.join(self.tmp, 'live')
        os.makedirs(live)
        shutil.copy(FIDELITY[0], live)
        prom = os.path.join(self.tmp, 'follow.prom')
        polls = []

        def stop():
            polls.append(1)
            return len(polls) > 2

        self.assertEqual(
            0,
            report_cmd.main_follow(
                [live, '--textfile', prom, '--interval', '0.01'], stop
            ),
        )
        with open(prom, encoding='utf-8') as src:
            families = parse(src.read())
        self.assertIn('instrument_follow_lines', families)
        self.assertEqual(
            [], [n for n in os.listdir(self.tmp) if n.endswith('.tmp')]
        )

    def test_needs_an_output(self):
        err = self.useFixture(fixtures.StringStream('stderr')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
        exc = self.assertRaises(
            SystemExit, report_cmd.main, ['follow', self.tmp]
        )
        self.assertEqual(2, exc.code)

    def test_served_over_http(self):
        follower = follow.once([FIDELITY[0]])
        server = metrics_cmd.text_server(follower.exposition, '127.0.0.1', 0)
        self.addCleanup(server.server_close)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.shutdown)
        url = 'http://127.0.0.1:%d/metrics' % server.server_address[1]
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310
            body = resp.read().decode()
            self.assertIn('text/plain', resp.headers['Content-Type'])
        self.assertIn('instrument_operation_requests', parse(body))
