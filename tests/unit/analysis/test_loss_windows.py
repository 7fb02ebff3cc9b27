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
"""When a process lost records, and the requests that may miss them
(issue 32, item 5): ``ingest.losses`` (the windows of a process's
losses), ``model.damage`` (the requests marked) and ``ingest.codec
.repair`` (a record with one required field missing)."""

import json
import os
import random

import fixtures
import testtools

from instrument import schema
from instrument.analysis import pipeline
from instrument.analysis.ingest import codec
from instrument.analysis.ingest import losses
from instrument.analysis.model import damage
from tests.unit.analysis import test_loss_accounting as accounting

T0 = accounting.T0


def seqset(numbers, time=lambda seq: T0 + seq * 1000):
    """A ``SeqSet`` of ``numbers`` read, each record timed
    ``time(seq)``, as the reader of pass 2 writes it."""
    s = losses.SeqSet((0, 'f'), ('h', 1, None))
    for seq in numbers:
        s.add(seq)
        page = s.bucket(seq >> losses.TIMES_SHIFT)
        k = (
            (seq & ((1 << losses.TIMES_SHIFT) - 1)) >> losses.BUCKET_SHIFT
        ) * 2
        t = time(seq)
        if not page[k] or t < page[k]:
            page[k] = t
        if t > page[k + 1]:
            page[k + 1] = t
    return s


class SeqSetTest(testtools.TestCase):
    def test_missing_runs(self):
        rnd = random.Random(3)
        for n in (40, 1000, 70_000, 140_000):
            read = sorted(q for q in range(n) if rnd.random() < 0.97)
            s = seqset(read)
            want = []
            have = set(read)
            for q in range(read[0], read[-1] + 1):
                if q not in have:
                    if want and want[-1][1] == q - 1:
                        want[-1] = (want[-1][0], q)
                    else:
                        want.append((q, q))
            self.assertEqual(want, list(s.missing()), n)
        # pages with no number read at all
        s = seqset(list(range(10)) + [200_000])
        self.assertEqual([(10, 199_999)], list(s.missing()))

    def test_around_a_loss(self):
        s = seqset([q for q in range(100) if q not in (40, 41, 48)])
        # in the middle of a bucket: the times of that bucket
        self.assertEqual((T0 + 32_000, T0 + 47_000), s.around(40, 41))
        # the first of its bucket: and the bucket before
        self.assertEqual((T0 + 32_000, T0 + 63_000), s.around(48, 48))
        # before the first, after the last number read
        self.assertEqual((0, T0 + 15_000), s.around(-1, -1))
        self.assertEqual((T0 + 96_000, losses.FOREVER), s.around(100, 100))

    def test_partitions_merge_to_the_whole(self):
        read = [q for q in range(300) if q % 7]
        whole = seqset(read)
        parts = [seqset([q for q in read if q % 3 == i]) for i in range(3)]
        merged = parts[0]
        for p in parts[1:]:
            merged.merge(p)
        self.assertEqual(whole.row(), merged.row())
        self.assertEqual(list(whole.missing()), list(merged.missing()))
        self.assertEqual(
            [whole.around(a, b) for a, b in whole.missing()],
            [merged.around(a, b) for a, b in merged.missing()],
        )


class WindowsTest(testtools.TestCase):
    """``FileLoss.windows`` of hand-made processes."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path

    def windows(self, *procs) -> tuple:
        for p in procs:
            p.save(self.dir)
        run = pipeline.run([self.dir], pipeline.Options(jobs=1))
        q = run.report['quality']
        return {
            (r['host'], r['pid']): r.get('windows') for r in q['processes']
        }, run.report

    def test_a_gap_is_where_it_was_written(self):
        p = accounting.Process()
        p.queries(200)
        before = p.ts
        p.sink_lost(3)
        after = p.ts
        p.queries(200)
        p.end()
        found, _report = self.windows(p)
        [[lo, hi]] = found[('db-1', 100)]
        slack = losses.WINDOW_SLACK_US
        self.assertLessEqual(lo, before - slack + 250)
        self.assertGreaterEqual(hi, after + slack)
        # within its bucket and the next: not the process's whole life
        self.assertGreater(lo, T0 + 100 * 1000)
        self.assertLess(hi, T0 + 250 * 1000)

    def test_a_cut_last_line_is_at_the_end(self):
        p = accounting.Process()
        p.queries(300)
        p.cut_line()
        p.save(self.dir, end='')
        found, _report = self.windows()
        [[lo, hi]] = found[('db-1', 100)]
        self.assertIsNone(hi)
        self.assertGreater(lo, T0 + 290 * 1000)

    def test_buffer_drops_between_their_counters(self):
        p = accounting.Process()
        p.queries(50)
        p.counter('sink.drops', {'buffer_full': 0, 'file': 0})
        first = p.ts
        p.queries(50)
        p.counter('sink.drops', {'buffer_full': 7, 'file': 0})
        second = p.ts
        p.queries(50)
        p.counter('sink.drops', {'buffer_full': 7, 'file': 0})
        p.end()
        found, _report = self.windows(p)
        [[lo, hi]] = found[('db-1', 100)]
        self.assertEqual(
            (first - losses.WINDOW_SLACK_US, second + losses.WINDOW_SLACK_US),
            (lo, hi),
        )

    def test_garbage_is_no_record_lost(self):
        p = accounting.Process()
        p.queries(50)
        p.lines[20:20] = [
            'Traceback (most recent call last):',
            '[1, 2]',
            '{"unrelated": 1}',
            '{broken',
            '\x00\x01',
        ]
        p.end()
        found, report = self.windows(p)
        self.assertEqual({}, found)
        self.assertEqual(0, report['quality']['lost_records'])
        self.assertEqual(5, sum(report['load']['counts'].values()))


class Summary:
    """What ``damage.mark`` reads of a request summary."""

    def __init__(
        self, req, hosts, procs, start=0, end=0, late=0, if_lost=None
    ):
        self.req = req
        self.kind = 'show'
        self.state = 'incomplete'
        self.instances = []
        self.lost_ends = 0
        self.hosts = hosts
        self.procs = procs
        self.start = start
        self.end = end
        self.late = late
        self.loss = None
        self.if_lost = if_lost


class MarkTest(testtools.TestCase):
    KEY = ('api-1', 7, 1000)
    WINDOWS = {KEY: [(5000, 6000), (9000, 9500)]}
    HOSTS = {KEY: {'api-1'}}

    def mark(self, *summaries, repaired=()):
        return damage.mark(
            summaries, self.WINDOWS, self.HOSTS, repaired, hung_us=1000
        )

    def test_overlap_in_the_process_only(self):
        inside = Summary('a', ['api-1'], [0, 7, 5500, 5600, -1])
        before = Summary('b', ['api-1'], [0, 7, 4000, 4999, -1])
        between = Summary('c', ['api-1'], [0, 7, 6001, 8999, -1])
        other_pid = Summary('d', ['api-1'], [0, 8, 5500, 5600, -1])
        other_host = Summary('e', ['api-2'], [0, 7, 5500, 5600, -1])
        got = self.mark(inside, before, between, other_pid, other_host)
        self.assertEqual([inside], got)
        self.assertEqual(['lost'], inside.loss)
        self.assertIsNone(before.loss)

    def test_an_open_span_before_a_loss_within_the_horizon(self):
        alt = ('success', [{'state': 'success'}], 1)
        near = Summary('a', ['api-1'], [0, 7, 4500, 4600, 4500], if_lost=alt)
        far = Summary('b', ['api-1'], [0, 7, 1000, 1100, 1000], if_lost=alt)
        self.assertEqual([near], self.mark(near, far))
        # its end may be the record lost: it ended as its calls say
        self.assertEqual(('success', 1), (near.state, near.lost_ends))
        self.assertEqual('incomplete', far.state)

    def test_late_and_repaired(self):
        late = Summary('a', ['api-2'], [0, 9, 1, 2, -1], late=3)
        fixed = Summary('b', ['api-2'], [0, 9, 1, 2, -1])
        both = Summary('c', ['api-1'], [0, 7, 5000, 5001, -1], late=1)
        self.mark(late, fixed, both, repaired={'b'})
        self.assertEqual(
            (['late'], ['repaired'], ['late', 'lost']),
            (late.loss, fixed.loss, both.loss),
        )
        self.assertTrue(damage.marked(late))

    def test_no_span_any_process(self):
        sql_only = Summary('a', [], [], start=9100, end=9200)
        self.assertEqual([sql_only], self.mark(sql_only))


class RepairTest(testtools.TestCase):
    def rec(self, **kw):
        out = {
            'v': 1,
            'ph': 'X',
            'seq': 5,
            'ts': T0,
            'dur_us': 10,
            'host': 'h1',
            'svc': 'api',
            'pid': 7,
            'tid': 3,
            'ev': 'sql.query',
            'span': 'a' * 16,
            'st': 'ok',
        }
        out.update(kw)
        return out

    def neighbours(self):
        return [
            self.rec(seq=4, ts=T0 - 100),
            self.rec(seq=6, ts=T0 + 100),
            self.rec(seq=7, tid=4, svc='api'),
        ]

    def test_each_required_field(self):
        for field in schema.REQUIRED:
            rec = self.rec()
            del rec[field]
            fixed = codec.repair(rec, self.neighbours(), started='sql.query')
            self.assertIsNotNone(fixed, field)
            out, name, _how = fixed
            self.assertEqual(field, name)
            want = self.rec()
            for key in schema.FIELDS:
                if key == 'seq' and field == 'seq':
                    self.assertIsNone(out.seq)
                elif key == 'ts' and field == 'ts':
                    # when the record before it was written, less its
                    # duration
                    self.assertEqual(T0 - 100 + 10 - 10, out.ts)
                else:
                    self.assertEqual(
                        want.get(key), getattr(out, key), (field, key)
                    )

    def test_what_is_not_repaired(self):
        two = self.rec()
        del two['host'], two['svc']
        self.assertIsNone(codec.repair(two, self.neighbours()))
        no_ev = self.rec()
        del no_ev['ev']
        self.assertIsNone(codec.repair(no_ev, self.neighbours()))
        self.assertIsNone(codec.repair(self.rec(dur_us=-1), self.neighbours()))
        # neighbours that disagree
        no_host = self.rec()
        del no_host['host']
        self.assertIsNone(
            codec.repair(no_host, [self.rec(host='a'), self.rec(host='b')])
        )
        self.assertIsNone(codec.repair([1, 2], []))

    def test_a_repaired_line_is_read_and_said(self):
        d = self.useFixture(fixtures.TempDir()).path
        p = accounting.Process()
        p.queries(20)
        rec = json.loads(p.lines[10])
        del rec['host']
        p.lines[10] = json.dumps(rec)
        p.end()
        p.save(d)
        report = pipeline.analyse([d], pipeline.Options(jobs=1))
        self.assertEqual(1, report['load']['counts']['invalid'])
        [(fname, line, why)] = report['load']['samples']['invalid']
        self.assertEqual((os.path.basename(p.save(d)), 11), (fname, line))
        self.assertEqual(
            "missing field 'host'; repaired: host from the records around it",
            why,
        )
        self.assertEqual(0, report['quality']['lost_records'])
        self.assertEqual(20, report['sql']['calls'])
