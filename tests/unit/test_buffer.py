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
"""Tests of the event buffer: batching, drops, faults (a fork and the
exit, in child processes: ``tests/system/test_buffer.py``)."""

import threading
import time

import fixtures

from instrument import schema
from instrument.runtime import buffer
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import threads
from tests.unit import base


def _event(n: int) -> tuple:
    return record.counter(
        'test.event', 'h1', 'compute', 1700000000000000 + n, {'n': n}
    )


class BufferTest(base.TestCase):
    def make_buffer(self, max_records=1000, interval=60.0, header=None):
        sink = base.MemorySink()
        ident = process.ProcessIdentity.create('nova-compute', 'h1')
        buf = buffer.EventBuffer(
            [sink], max_records, interval, ident, header=header
        )
        self.addCleanup(buf.close)
        return buf, sink

    def test_batches_are_numbered_and_ordered(self):
        buf, sink = self.make_buffer()
        for n in range(10):
            buf.emit(_event(n))
        self.assertEqual(10, buf.pending())
        buf.drain()
        self.assertEqual(0, buf.pending())
        self.assertEqual(list(range(1, 11)), [r['seq'] for r in sink.records])
        self.assertEqual(
            list(range(10)), [r['attrs']['n'] for r in sink.records]
        )
        for rec in sink.records:
            schema.validate(rec)

    def test_header_opens_the_output_once(self):
        buf, sink = self.make_buffer(
            header=lambda: [
                record.meta('process.start', 'h1', 'compute', 1, {'x': 1})
            ]
        )
        buf.emit(_event(1))
        buf.drain()
        buf.emit(_event(2))
        buf.drain()
        self.assertEqual(
            ['process.start', 'test.event', 'test.event'],
            [r['ev'] for r in sink.records],
        )

    def test_full_buffer_drops_and_counts(self):
        buf, sink = self.make_buffer(max_records=16)
        for n in range(100):
            buf.emit(_event(n))
        self.assertEqual(84, buf.dropped_full)
        buf.drain()
        events = [r for r in sink.records if r['ev'] == 'test.event']
        self.assertEqual(list(range(16)), [r['attrs']['n'] for r in events])
        drops = [r for r in sink.records if r['ev'] == 'sink.drops']
        self.assertEqual(1, len(drops))
        self.assertEqual(84, drops[0]['attrs']['buffer_full'])
        self.assertEqual('C', drops[0]['ph'])
        # Logged once (by the watchdog thread, see below), not once per
        # drop or per drain.
        self.wait_for(lambda: 'being dropped' in self.logger.output)
        for n in range(100):
            buf.emit(_event(n))
        buf.drain()
        time.sleep(2 * threads.WATCH_INTERVAL)
        self.assertEqual(1, self.logger.output.count('being dropped'))
        drops = [r for r in sink.records if r['ev'] == 'sink.drops']
        self.assertEqual(168, drops[-1]['attrs']['buffer_full'])

    def test_emit_never_waits_for_a_stuck_sink(self):
        release = threading.Event()

        class StuckSink(base.MemorySink):
            def write(self, batch, first_seq, pid):
                release.wait(30)
                super().write(batch, first_seq, pid)

        sink = StuckSink()
        buf = buffer.EventBuffer([sink], 100, 0.01)
        self.addCleanup(buf.close)
        self.addCleanup(release.set)
        buf.emit(_event(0))
        time.sleep(0.1)  # the writer is now stuck inside write()
        start = time.perf_counter()
        for n in range(1000):
            buf.emit(_event(n))
        elapsed = time.perf_counter() - start
        self.assertEqual(900, buf.dropped_full)
        self.assertLess(elapsed, 5.0)
        release.set()

    def wait_for(self, predicate, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                self.fail('condition not met within %ss' % timeout)
            time.sleep(0.02)

    def stuck_buffer(self, max_records=100):
        """A buffer whose sink blocks in write() until released, the way
        a write to a hard-mounted NFS server that stopped answering does.
        """
        release = threading.Event()
        entered = threading.Event()

        class StuckSink(base.MemorySink):
            name = 'nfs'
            path = '/mnt/nfs/spans/h1_nova-compute.jsonl'

            def write(self, batch, first_seq, pid):
                entered.set()
                release.wait(30)
                super().write(batch, first_seq, pid)

        sink = StuckSink()
        buf = buffer.EventBuffer([sink], max_records, 0.01)
        self.addCleanup(buf.close, 0.1)
        self.addCleanup(release.set)
        buf.emit(_event(0))
        self.assertTrue(entered.wait(10))  # the writer is now stuck
        return buf, sink, release

    def test_first_drop_is_logged_while_the_writer_is_stuck(self):
        buf, sink, release = self.stuck_buffer()
        for n in range(150):
            buf.emit(_event(n))
        self.assertEqual(50, buf.dropped_full)
        # Not from the writer, which is still stuck, and not from the
        # emitting thread either (it only hands the call over).
        self.wait_for(lambda: 'events are being dropped' in self.logger.output)
        self.assertIn(
            '/mnt/nfs/spans/h1_nova-compute.jsonl', self.logger.output
        )
        self.assertTrue(buf.writer.is_alive())
        self.assertIsNotNone(buf._busy_since)
        release.set()
        self.wait_for(
            lambda: any(r['ev'] == 'sink.drops' for r in sink.records)
        )

    def test_stuck_writer_is_reported_then_its_recovery(self):
        buf, sink, release = self.stuck_buffer()
        buf.stall_after = 0.3
        self.wait_for(lambda: 'writer has been stuck' in self.logger.output)
        self.assertIn(
            'writing to /mnt/nfs/spans/h1_nova-compute.jsonl',
            self.logger.output,
        )
        self.assertEqual(0, buf.dropped_full)  # nothing lost yet
        release.set()
        self.wait_for(lambda: 'writer is writing again' in self.logger.output)
        self.assertEqual(1, self.logger.output.count('has been stuck'))

    def test_running_spans_are_bounded_by_the_buffer_size(self):
        buf, sink = self.make_buffer(max_records=16)
        for n in range(20):
            rec = list(_event(n)) + [None, None]
            rec[record.I_PH] = schema.PH_BEGIN
            buf.emit(rec)
            if n % 10 == 9:
                buf.drain()
        # 20 starts written; the 4 oldest are no longer followed.
        self.assertEqual(20, len([r for r in sink.records if r['ph'] == 'B']))
        self.assertEqual(4, buf.counts()['open_untracked'])
        self.assertEqual(16, len(buf._open))

    def _mixed(self, n: int) -> tuple:
        """Ended spans (X lists), running ones (B lists), events and a
        B tuple (not a span's record: written as it is, not followed),
        in a batch of ``n``; and the running lists."""
        recs, running = [], []
        for i in range(n):
            kind = i % 7
            if kind == 3:
                rec = list(_event(i)) + [None, None]
                rec[record.I_PH] = schema.PH_BEGIN
                running.append(rec)
            elif kind == 5:
                rec = _event(i)
                rec = (schema.PH_BEGIN,) + rec[1:]
            elif kind == 6:
                rec = list(_event(i)) + [None, None]
                rec[record.I_PH] = schema.PH_COMPLETE
                rec[record.I_DUR] = 5
            else:
                rec = _event(i)
            recs.append(rec)
        return recs, running

    def test_running_spans_in_batches_both_paths(self):
        # The writer's "is a span still running" in C and its pure-
        # Python twin: the same lines, the same spans followed, and
        # their ends written at the next drain.
        finders = [buffer._first_running_py]
        if buffer._first_running is not buffer._first_running_py:
            finders.append(buffer._first_running)
        written = []
        for finder in finders:
            self.useFixture(
                fixtures.MonkeyPatch(
                    'instrument.runtime.buffer._first_running', finder
                )
            )
            buf, sink = self.make_buffer(max_records=100000)
            recs, running = self._mixed(2 * buffer.MAX_BATCH + 40)
            for rec in recs:
                buf.emit(rec)
            buf.drain()
            self.assertEqual(len(recs), len(sink.records))
            self.assertEqual(
                [r['ph'] for r in sink.records],
                [r[record.I_PH] for r in recs],
            )
            self.assertEqual(running, list(buf._open))
            for rec in running:
                rec[record.I_PH] = schema.PH_COMPLETE
                rec[record.I_DUR] = 7
            buf.drain()
            self.assertEqual(0, len(buf._open))
            ends = sink.records[len(recs) :]
            self.assertEqual(len(running), len(ends))
            self.assertEqual({'X'}, {r['ph'] for r in ends})
            self.assertEqual({7}, {r['dur_us'] for r in ends})
            written.append(sink.records)
        self.assertEqual(1, len({repr(w) for w in written}))

    def test_a_drain_writes_batches_of_max_batch_in_order(self):
        buf, sink = self.make_buffer(max_records=100000)
        sizes = []
        write = sink.write

        def spy(batch, first_seq, pid):
            sizes.append((len(batch), first_seq))
            write(batch, first_seq, pid)

        sink.write = spy
        total = 2 * buffer.MAX_BATCH + 3
        for n in range(total):
            buf.emit(_event(n))
        buf.drain()
        self.assertEqual(
            [
                (buffer.MAX_BATCH, 1),
                (buffer.MAX_BATCH, buffer.MAX_BATCH + 1),
                (3, 2 * buffer.MAX_BATCH + 1),
            ],
            sizes,
        )
        self.assertEqual(
            list(range(total)), [r['attrs']['n'] for r in sink.records]
        )
        self.assertEqual(0, buf.pending())

    def test_background_writer_flushes_on_its_own(self):
        buf, sink = self.make_buffer(interval=0.02)
        buf.emit(_event(1))
        deadline = time.time() + 10
        while not sink.records and time.time() < deadline:
            time.sleep(0.01)
        self.assertEqual(1, len(sink.records))

    def test_failing_sink_counts_and_keeps_the_others(self):
        class BrokenSink(base.MemorySink):
            name = 'broken'

            def write(self, batch, first_seq, pid):
                raise RuntimeError('sink bug')

        good = base.MemorySink()
        bad = BrokenSink()
        buf = buffer.EventBuffer([bad, good], 100, 60.0)
        self.addCleanup(buf.close)
        for n in range(3):
            buf.emit(_event(n))
        buf.drain()
        # the 3 events, and the drop report the good sink took (its seq
        # number is missing from what the broken sink has)
        self.assertEqual(4, bad.dropped)
        self.assertEqual(
            3, len([r for r in good.records if r['ev'] == 'test.event'])
        )
        self.assertEqual(
            {'buffer_full': 0, 'broken': 4, 'memory': 0}, buf.counts()
        )
        self.assertEqual(
            [{'buffer_full': 0, 'broken': 3, 'memory': 0}],
            [r['attrs'] for r in good.records if r['ev'] == 'sink.drops'],
        )
        buf.emit(_event(4))
        buf.drain()
        self.assertEqual(6, bad.dropped)
        seqs = [r['seq'] for r in good.records]
        self.assertEqual(list(range(1, 7)), seqs)
        self.assertEqual(1, self.logger.output.count('sink broken failed'))

    def failing_buffer(self, max_records=16):
        """A buffer whose one sink fails the way a span directory that
        is a file does, until ``fixed`` is set."""
        fixed = threading.Event()

        class DirSink(base.MemorySink):
            name = 'file'
            path = '/srv/spans/h1_nova-compute.jsonl'

            def write(self, batch, first_seq, pid):
                if not fixed.is_set():
                    raise NotADirectoryError(
                        20, 'Not a directory', '/srv/spans'
                    )
                super().write(batch, first_seq, pid)

        sink = DirSink()
        buf = buffer.EventBuffer([sink], max_records, 60.0)
        self.addCleanup(buf.close)
        return buf, sink, fixed

    def drop_warnings(self) -> list:
        return [
            line
            for line in self.logger.output.splitlines()
            if 'being dropped' in line
        ]

    def test_drop_warning_names_the_cause_and_its_advice(self):
        buf, sink, fixed = self.failing_buffer()
        for n in range(3):
            buf.emit(_event(n))
        buf.drain()
        [warning] = self.drop_warnings()
        self.assertIn(
            '3 lost by the file sink (/srv/spans/h1_nova-'
            'compute.jsonl) since the start (3 in all)',
            warning,
        )
        self.assertIn(
            "the sink's error: NotADirectoryError: [Errno 20] "
            "Not a directory: '/srv/spans'",
            warning,
        )
        self.assertNotIn('buffer_size', warning)
        # The operator fixes the directory; a burst then overflows the
        # buffer: a cause of its own, warned about too, with its advice.
        fixed.set()
        for n in range(100):
            buf.emit(_event(n))
        self.assertEqual(84, buf.dropped_full)
        self.wait_for(lambda: len(self.drop_warnings()) == 2)
        buf.drain()
        time.sleep(2 * threads.WATCH_INTERVAL)
        warnings = self.drop_warnings()
        self.assertEqual(2, len(warnings))
        self.assertIn(
            '[instrument] buffer_size, or record less with '
            '[instrument] slow_query_threshold or '
            'detail_sample_rate',
            warnings[1],
        )
        self.assertNotIn('Not a directory', warnings[1])

    def test_drop_warnings_are_rate_limited_per_cause(self):
        buf, sink, fixed = self.failing_buffer(max_records=1000)
        buf.warn_interval = 0.5
        for n in range(3):
            buf.emit(_event(n))
        buf.drain()
        buf.emit(_event(3))
        buf.drain()  # within the interval: counted, not logged
        self.assertEqual(1, len(self.drop_warnings()))
        self.assertEqual(4, sink.dropped)
        time.sleep(0.6)
        buf.drain()  # nothing new since: the drops of the interval
        warnings = self.drop_warnings()
        self.assertEqual(2, len(warnings))
        self.assertIn(
            '1 lost by the file sink (/srv/spans/h1_nova-'
            'compute.jsonl) in the last',
            warnings[1],
        )
        self.assertIn('(4 in all)', warnings[1])
        time.sleep(0.6)
        buf.drain()  # no new drop: no warning
        self.assertEqual(2, len(self.drop_warnings()))

    def final_lines(self) -> list:
        return [
            line
            for line in self.logger.output.splitlines()
            if 'instrument: at close,' in line
        ]

    def test_a_sink_broken_until_exit_logs_its_final_total(self):
        buf, sink, fixed = self.failing_buffer(max_records=1000)
        for _ in range(3):
            for n in range(7):
                buf.emit(_event(n))
            buf.drain()
        # warned once (rate-limited), with the first drain's 7
        self.assertEqual(1, len(self.drop_warnings()))
        buf.close()
        # the 21 events and the process.end record
        self.assertEqual(22, sink.dropped)
        [line] = self.final_lines()
        self.assertIn(
            'at close, 22 lost by the file sink (/srv/spans/'
            'h1_nova-compute.jsonl) since the start, 15 of them '
            'since the last warning; counted in sink.drops '
            'records (the last one could not be written: this '
            'line is the only record of the total)',
            line,
        )

    def test_final_total_written_when_the_sink_takes_it_again(self):
        buf, sink, fixed = self.failing_buffer(max_records=1000)
        for n in range(5):
            buf.emit(_event(n))
        buf.drain()
        fixed.set()
        buf.close()
        [drops] = [r['attrs'] for r in sink.records if r['ev'] == 'sink.drops']
        self.assertEqual({'buffer_full': 0, 'file': 5}, drops)
        [line] = self.final_lines()
        self.assertTrue(line.endswith('counted in sink.drops records'), line)
        self.assertEqual(
            ['process.end', 'sink.drops'], [r['ev'] for r in sink.records[-2:]]
        )

    def test_full_buffer_total_logged_at_close(self):
        buf, sink = self.make_buffer(max_records=16)
        for n in range(40):
            buf.emit(_event(n))
        buf.close()
        [line] = self.final_lines()
        self.assertIn(
            'at close, 24 lost to a full buffer of 16 events '
            'since the start, 23 of them since the last warning',
            line,
        )

    def test_what_a_stuck_writer_never_wrote_is_logged_at_close(self):
        buf, sink, release = self.stuck_buffer()
        for n in range(30):
            buf.emit(_event(n))
        buf.close(timeout=0.2)
        [line] = self.final_lines()
        # the 30 queued, and the one in the write that never returned
        self.assertIn(
            'at close, 31 events (1 of them in the write that '
            'did not return) were never written: the writer did '
            'not finish writing to /mnt/nfs/spans/h1_nova-'
            'compute.jsonl within the exit timeout',
            line,
        )

    def test_nothing_lost_nothing_logged_at_close(self):
        buf, sink = self.make_buffer()
        buf.emit(_event(1))
        buf.close()
        self.assertEqual([], self.final_lines())

    def test_periodic_callbacks_run_before_each_drain(self):
        buf, sink = self.make_buffer()
        calls = []
        buf.add_periodic(calls.append)
        buf.drain()
        buf.close()
        self.assertEqual([False, True], calls)
        self.assertNotIn('failed', self.logger.output)

    def test_close_is_idempotent_and_drains(self):
        buf, sink = self.make_buffer()
        buf.emit(_event(1))
        buf.close()
        buf.close()
        # the event, then one end record (a clean stop says so)
        self.assertEqual(2, len(sink.records))
        self.assertEqual('process.end', sink.records[-1]['ev'])

    def test_close_never_closes_a_sink_under_a_write(self):
        # The exit path closes the buffer while the writer thread is
        # still writing a batch (a nova-scheduler master lost a record
        # with EBADF so): the sink is not closed under that write, and
        # nothing is written after the sinks are closed.
        entered = threading.Event()
        release = threading.Event()

        class SlowSink(base.MemorySink):
            writing = False
            closed_while_writing = None

            def write(self, batch, first_seq, pid):
                self.writing = True
                entered.set()
                release.wait(10)
                super().write(batch, first_seq, pid)
                self.writing = False

            def close(self):
                self.closed_while_writing = self.writing

        sink = SlowSink()
        ident = process.ProcessIdentity.create('nova-compute', 'h1')
        buf = buffer.EventBuffer([sink], 1000, 60.0, ident)
        buf.emit(_event(1))
        writer = threading.Thread(target=buf.drain)
        writer.start()
        self.assertTrue(entered.wait(10))
        buf.close(timeout=0.2)
        release.set()
        writer.join(10)
        self.assertIsNone(sink.closed_while_writing)
        # a writer that finishes in time: the sink closes after its write
        entered.clear()
        release.clear()
        sink2 = SlowSink()
        buf2 = buffer.EventBuffer([sink2], 1000, 60.0, ident)
        buf2.emit(_event(2))
        writer = threading.Thread(target=buf2.drain)
        writer.start()
        self.assertTrue(entered.wait(10))
        closer = threading.Thread(target=buf2.close, kwargs={'timeout': 10})
        closer.start()
        time.sleep(0.1)
        release.set()
        closer.join(10)
        writer.join(10)
        self.assertIs(False, sink2.closed_while_writing)
        written = len(sink2.records)
        buf2.emit(_event(3))
        self.assertFalse(buf2.drain())
        self.assertEqual(written, len(sink2.records))

    def test_a_stuck_writer_leaves_the_other_sinks_closed(self):
        # The writer is stuck in one sink's write (a hung disk): close
        # waits for the drain lock once, then closes every other sink
        # (an OTLP sink must end its exporter thread), not that one.
        release = threading.Event()
        entered = threading.Event()

        class StuckSink(base.MemorySink):
            name = 'file'
            closed = False

            def write(self, batch, first_seq, pid):
                entered.set()
                release.wait(30)

            def close(self):
                self.closed = True

        class OtherSink(base.MemorySink):
            name = 'otlp'
            closed = False

            def close(self):
                self.closed = True

        other, stuck = OtherSink(), StuckSink()
        buf = buffer.EventBuffer([other, stuck], 100, 0.01)
        self.addCleanup(release.set)
        buf.emit(_event(0))
        self.assertTrue(entered.wait(10))
        start = time.monotonic()
        buf.close(timeout=0.3)
        elapsed = time.monotonic() - start
        self.assertTrue(other.closed, 'the other sink was not closed')
        self.assertFalse(stuck.closed, 'closed under the stuck write')
        # the drain lock was waited for once, not twice
        self.assertLess(elapsed, 0.55)
        self.assertGreater(buf.close_bound(0.3), 2 * 0.3)


class PeriodicFaultTest(base.TestCase):
    """A periodic callback that keeps failing: logged once with its
    traceback, counted, disabled at the limit and said so once."""

    def test_logged_once_counted_and_disabled(self):
        from instrument.runtime import faults

        sink = base.MemorySink()
        buf = buffer.EventBuffer([sink], 100, 3600.0)
        self.addCleanup(buf.close)
        calls = []
        good = []

        def broken(final):
            calls.append(final)
            raise RuntimeError('callback bug')

        buf.add_periodic(broken)
        buf.add_periodic(good.append)
        drains = buffer.PERIODIC_FAULT_LIMIT + 5
        for _ in range(drains):
            buf.drain()
        self.assertEqual(buffer.PERIODIC_FAULT_LIMIT, len(calls))
        self.assertEqual(drains, len(good))  # the others still run
        out = self.logged()
        self.assertEqual(1, out.count('fault in the periodic callback '))
        self.assertIn(
            'PeriodicFaultTest.test_logged_once_counted_and_'
            'disabled.<locals>.broken of the writer (RuntimeError:'
            ' callback bug)',
            out,
        )
        self.assertEqual(1, out.count('Traceback'))
        self.assertEqual(
            1,
            out.count(
                'disabled after %d faults' % buffer.PERIODIC_FAULT_LIMIT
            ),
        )
        [(name, count)] = [
            item
            for item in faults.totals().items()
            if 'periodic callback' in item[0]
        ]
        self.assertEqual(buffer.PERIODIC_FAULT_LIMIT, count)
