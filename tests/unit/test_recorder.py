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
"""The hot path's owner: clock anchor, records, enqueue, current span."""

import time

import fixtures

from instrument.runtime import buffer
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracing
from tests.unit import base

WALL = 1_795_000_000_000_000_000


def _identity():
    return process.ProcessIdentity.create('nova-compute', 'cmp-1')


class SpanClockTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer = base.ListBuffer()
        self.perf = [10_000_000_000]
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._perf_ns', lambda: self.perf[0]
            )
        )
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder.wall_offset_ns', WALL
            )
        )
        self.recorder = recorder_mod.Recorder(self.buffer, _identity())
        self.tracer = tracing.Tracer(self.recorder)

    def test_start_and_end_are_on_the_anchored_wall_clock(self):
        # The wall clock is read apart from the span (a preemption
        # between two reads must not move the start against the end).
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._time_ns', lambda: 1
            )
        )
        rec = self.tracer.begin('rpc.call')
        self.perf[0] += 2_500_000
        self.tracer.end(rec)
        [out] = self.buffer.dicts()
        self.assertEqual(1_795_000_010_000_000, out['ts'])
        self.assertEqual(2500, out['dur_us'])

    def test_every_event_is_on_the_anchor(self):
        # An SQL statement timed on the calling thread and recorded by
        # the writer, an instant and a counter: one clock for all.
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._time_ns', lambda: 1
            )
        )
        self.recorder.complete(
            'sql.query',
            self.perf[0] - 3000,
            self.perf[0],
            None,
            None,
            'req-1',
            None,
            None,
            None,
            None,
            'ok',
            None,
            {},
        )
        self.recorder.instant('db.retry', {'attempt': 1})
        self.recorder.counter('sql.dropped', {'count': 1})
        query, retry, counter = self.buffer.dicts()
        now = (self.perf[0] + WALL) // 1000
        self.assertEqual((now - 3, 3), (query['ts'], query['dur_us']))
        self.assertEqual(('cmp-1', 'compute'), (query['host'], query['svc']))
        self.assertEqual(16, len(query['span']))
        self.assertEqual(now, retry['ts'])
        self.assertEqual(now, counter['ts'])

    def test_refresh_takes_the_tightest_paired_read(self):
        reads = iter(
            [
                # perf, wall, perf: a stalled pair first, then a tight one
                100,
                5_000,
                900,
                1_000,
                6_000,
                1_010,
            ]
            + [2_000, 7_000, 2_600] * 3
        )
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._perf_ns', lambda: next(reads)
            )
        )
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._time_ns', lambda: next(reads)
            )
        )
        recorder_mod.refresh_wall_clock()
        self.assertEqual(6_000 - 1_005, recorder_mod.wall_offset_ns)

    def test_a_refresh_of_stalled_reads_keeps_the_anchor(self):
        reads = iter([100, 5_000, 400_100] * 5)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._perf_ns', lambda: next(reads)
            )
        )
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._time_ns', lambda: next(reads)
            )
        )
        recorder_mod.refresh_wall_clock()
        self.assertEqual(WALL, recorder_mod.wall_offset_ns)

    def test_the_writer_refreshes_the_anchor(self):
        calls = []

        class Buffer(base.ListBuffer):
            def add_periodic(self, fn):
                calls.append(fn)

        recorder_mod.Recorder(Buffer(), _identity())
        self.assertEqual([recorder_mod.refresh_wall_clock], calls)


class RecorderBufferTest(base.TestCase):
    def make(self, size=100, hold=False):
        sink = base.MemorySink()
        buf = buffer.EventBuffer([sink], size, 60.0)
        self.addCleanup(buf.close)
        if hold:
            buf.hold()
        return buf, sink, recorder_mod.Recorder(buf, _identity())

    def test_wall_clock_refresh_runs_as_a_buffer_periodic(self):
        before = recorder_mod.wall_offset_ns
        buf, _sink, _recorder = self.make()
        buf.drain()
        self.assertNotIn('periodic callback', self.logger.output)
        self.assertIsInstance(recorder_mod.wall_offset_ns, int)
        self.assertLess(abs(recorder_mod.wall_offset_ns - before), 5 * 10**9)

    def test_a_full_buffer_drops_and_counts_the_span(self):
        buf, sink, recorder = self.make(size=16)
        for _ in range(16):
            buf.emit(('filler',))
        rec = recorder.begin(
            'compute.build', None, None, None, None, None, None
        )
        # Dropped, not lost silently: the span still ends normally.
        self.assertEqual(1, buf.counts()['buffer_full'])
        recorder.end(rec, recorder.clock())
        self.assertIsNone(recorder_mod.current_frame())

    def test_a_failed_enqueue_releases_the_span(self):
        buf, _sink, recorder = self.make()

        def no_thread():
            raise RuntimeError("can't start new thread")

        buf.writer = None
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.buffer.EventBuffer.start',
                lambda self: no_thread(),
            )
        )
        self.assertRaises(
            RuntimeError,
            recorder.begin,
            'compute.build',
            None,
            None,
            None,
            None,
            None,
            None,
        )
        self.assertIsNone(
            recorder_mod.current_frame(),
            'a span that was not queued stayed current',
        )
        self.assertEqual(0, buf.pending())

    def test_held_writer_starts_at_release(self):
        # The recorder's periodic and an event: neither starts it.
        buf, sink, recorder = self.make(hold=True)
        recorder.counter('sql.dropped', {'count': 1})
        self.assertIsNone(buf.writer)
        buf.release()
        self.assertIsNotNone(buf.writer)
        buf.drain()
        self.assertEqual(['sql.dropped'], [r['ev'] for r in sink.records])


class AbandonTest(base.TestCase):
    """A span whose end fails is still ended, whatever its clock does
    (issue 27): never left open for the writer to keep waiting for."""

    def failing_clock(self, good: int):
        """The monotonic clock: ``good`` reads, then it raises."""
        left = [good]

        def clock():
            if left[0] <= 0:
                raise OSError('clock_gettime failed')
            left[0] -= 1
            return time.perf_counter_ns()

        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.recorder._perf_ns', clock)
        )

    def test_a_span_by_hand_whose_clock_fails_at_its_end(self):
        # The end's clock read raises, and so does abandon's: the span
        # ends on the wall clock, is written as complete, no span is
        # left open.
        self.failing_clock(good=1)
        sink = base.MemorySink()
        buf = buffer.EventBuffer([sink], 100, 60.0)
        self.addCleanup(buf.close)
        tracer = tracing.Tracer(recorder_mod.Recorder(buf, _identity()))
        with tracer.span('compute.build'):
            pass
        self.assertIsNone(recorder_mod.current_frame())
        buf.drain()
        [span] = [r for r in sink.records if r['ev'] == 'compute.build']
        self.assertEqual(('X', 'ok'), (span['ph'], span['st']))
        self.assertGreaterEqual(span['dur_us'], 0)
        self.assertLess(span['dur_us'], 5_000_000)
        self.assertEqual(0, len(buf._open), 'the span was left open')
        self.assertEqual(1, tracing.span_faults().count)
        self.assertNotIn('open_untracked', buf.counts())

    def test_every_clock_failing(self):
        self.failing_clock(good=1)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._time_ns', self.failing_clock
            )
        )
        buffer_, recorder = base.list_recorder()
        rec = recorder.begin(
            'compute.build', None, None, None, None, None, None
        )
        recorder_mod.abandon(rec, recorder_mod.ST_ERROR)
        [out] = buffer_.dicts()
        self.assertEqual(
            ('X', 'error', 0), (out['ph'], out['st'], out['dur_us'])
        )
        self.assertIsNone(recorder_mod.current_frame())

    def test_an_end_time_given_is_kept(self):
        buffer_, recorder = base.list_recorder()
        rec = recorder.begin(
            'compute.build', None, None, None, None, None, None
        )
        recorder_mod.abandon(
            rec, recorder_mod.ST_OK, rec[recorder_mod.I_T0] + 7_000
        )
        [out] = buffer_.dicts()
        self.assertEqual(('X', 7), (out['ph'], out['dur_us']))


class FrameTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer = base.ListBuffer()
        self.recorder = recorder_mod.Recorder(
            self.buffer, _identity(), detail_sample_rate=0.5
        )

    def test_nested_spans_inherit_and_end_restores(self):
        class Ctx:
            request_id = 'req-outer'
            global_request_id = 'greq'

        outer = self.recorder.begin(
            'compute.build', 'compute', 'cmp-9', Ctx(), ['u1'], None, {'a': 1}
        )
        inner = self.recorder.begin(
            'compute.spawn', None, None, None, None, None, None
        )
        frame = recorder_mod.current_frame()
        self.assertEqual(
            inner[recorder_mod.record.I_SPAN], frame[recorder_mod.F_SPAN]
        )
        self.recorder.end(inner, self.recorder.clock())
        self.recorder.end(
            outer, self.recorder.clock(), attrs={'b': 2}, inst=['u2']
        )
        self.assertIsNone(recorder_mod.current_frame())
        end_outer, end_inner = sorted(
            self.buffer.dicts(), key=lambda r: r['ev']
        )
        self.assertEqual(end_outer['span'], end_inner['parent'])
        self.assertEqual(
            ('req-outer', 'greq', ['u1'], 'compute', 'cmp-9'),
            (
                end_inner['req'],
                end_inner['greq'],
                end_inner['inst'],
                end_inner['svc'],
                end_inner['host'],
            ),
        )
        self.assertEqual({'a': 1, 'b': 2}, end_outer['attrs'])
        self.assertEqual(['u2'], end_outer['inst'])

    def test_detail_decision_follows_the_enclosing_request(self):
        sampled = next(
            'req-%d' % n
            for n in range(100)
            if self.recorder.sampled('req-%d' % n)
        )
        unsampled = next(
            'req-%d' % n
            for n in range(100)
            if not self.recorder.sampled('req-%d' % n)
        )
        for req, expected in ((sampled, True), (unsampled, False)):
            rec = self.recorder.begin(
                'conductor.schedule',
                None,
                None,
                {'request_id': req},
                None,
                None,
                None,
            )
            self.assertEqual(expected, self.recorder.wants(None))
            self.assertEqual(
                expected, self.recorder.wants({'request_id': req})
            )
            self.recorder.end(rec, self.recorder.clock())
