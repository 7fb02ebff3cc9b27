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
"""The span clock: start and end of a span come from one clock."""

import fixtures

from instrument import buffer
from instrument import process
from instrument import tracer as tracing
from tests.unit import base


class SpanClockTest(base.TestCase):

    def setUp(self):
        super().setUp()
        self.buffer = base.ListBuffer()
        self.tracer = tracing.Tracer(
            self.buffer, process.ProcessIdentity.create('nova-compute',
                                                        'cmp-1'))
        self.perf = [10_000_000_000]
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.tracer._perf_ns', lambda: self.perf[0]))
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.tracer._wall_offset_ns', 1_795_000_000_000_000_000))

    def test_start_and_end_are_on_the_anchored_wall_clock(self):
        # The wall clock is read apart from the span (a preemption
        # between two reads must not move the start against the end).
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.tracer._time_ns', lambda: 1))
        rec = self.tracer.begin('rpc.call')
        self.perf[0] += 2_500_000
        self.tracer.end(rec)
        [out] = self.buffer.dicts()
        self.assertEqual(1_795_000_010_000_000, out['ts'])
        self.assertEqual(2500, out['dur_us'])

    def test_refresh_takes_the_tightest_paired_read(self):
        reads = iter([
            # perf, wall, perf: a stalled pair first, then a tight one
            100, 5_000, 900,
            1_000, 6_000, 1_010,
        ] + [2_000, 7_000, 2_600] * 3)
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.tracer._perf_ns', lambda: next(reads)))
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.tracer._time_ns', lambda: next(reads)))
        tracing.refresh_wall_clock()
        self.assertEqual(6_000 - 1_005, tracing._wall_offset_ns)

    def test_a_refresh_of_stalled_reads_keeps_the_anchor(self):
        reads = iter([100, 5_000, 400_100] * 5)
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.tracer._perf_ns', lambda: next(reads)))
        self.useFixture(fixtures.MonkeyPatch(
            'instrument.tracer._time_ns', lambda: next(reads)))
        tracing.refresh_wall_clock()
        self.assertEqual(1_795_000_000_000_000_000, tracing._wall_offset_ns)

    def test_the_writer_refreshes_the_anchor(self):
        calls = []

        class Buffer(base.ListBuffer):
            def add_periodic(self, fn):
                calls.append(fn)

        tracing.Tracer(Buffer(), process.ProcessIdentity.create(
            'nova-compute', 'cmp-1'))
        self.assertEqual([tracing.refresh_wall_clock], calls)


class TracerBufferTest(base.TestCase):

    def test_wall_clock_refresh_runs_as_a_buffer_periodic(self):
        sink = base.MemorySink()
        buf = buffer.EventBuffer([sink], 100, 60.0)
        self.addCleanup(buf.close)
        before = tracing._wall_offset_ns
        tracing.Tracer(buf, process.ProcessIdentity.create('nova-api', 'h'))
        buf.drain()
        self.assertNotIn('periodic callback', self.logger.output)
        self.assertIsInstance(tracing._wall_offset_ns, int)
        self.assertLess(abs(tracing._wall_offset_ns - before),
                        5 * 10 ** 9)
