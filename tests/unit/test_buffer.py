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
"""Tests of the event buffer: batching, drops, fork, exit."""

import json
import os
import threading
import time

from instrument import buffer
from instrument import process
from instrument import record
from instrument import schema
from instrument import threads
from tests.unit import base


def _event(n: int) -> tuple:
    return record.counter('test.event', 'h1', 'compute', 1700000000000000 + n,
                          {'n': n})


class BufferTest(base.TestCase):

    def make_buffer(self, max_records=1000, interval=60.0, header=None):
        sink = base.MemorySink()
        ident = process.ProcessIdentity.create('nova-compute', 'h1')
        buf = buffer.EventBuffer([sink], max_records, interval, ident,
                                 header=header)
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
        self.assertEqual(list(range(10)),
                         [r['attrs']['n'] for r in sink.records])
        for rec in sink.records:
            schema.validate(rec)

    def test_header_opens_the_output_once(self):
        buf, sink = self.make_buffer(header=lambda: [record.meta(
            'process.start', 'h1', 'compute', 1, {'x': 1})])
        buf.emit(_event(1))
        buf.drain()
        buf.emit(_event(2))
        buf.drain()
        self.assertEqual(['process.start', 'test.event', 'test.event'],
                         [r['ev'] for r in sink.records])

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
        self.wait_for(lambda: 'events are being dropped' in
                      self.logger.output)
        self.assertIn('/mnt/nfs/spans/h1_nova-compute.jsonl',
                      self.logger.output)
        self.assertTrue(buf.writer.is_alive())
        self.assertIsNotNone(buf._busy_since)
        release.set()
        self.wait_for(lambda: any(r['ev'] == 'sink.drops'
                                  for r in sink.records))

    def test_stuck_writer_is_reported_then_its_recovery(self):
        buf, sink, release = self.stuck_buffer()
        buf.stall_after = 0.3
        self.wait_for(lambda: 'writer has been stuck' in self.logger.output)
        self.assertIn('writing to /mnt/nfs/spans/h1_nova-compute.jsonl',
                      self.logger.output)
        self.assertEqual(0, buf.dropped_full)  # nothing lost yet
        release.set()
        self.wait_for(lambda: 'writer is writing again' in
                      self.logger.output)
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
        self.assertEqual(20, len([r for r in sink.records
                                  if r['ph'] == 'B']))
        self.assertEqual(4, buf.counts()['open_untracked'])
        self.assertEqual(16, len(buf._open))

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
        self.assertEqual(3, bad.dropped)
        self.assertEqual(3, len([r for r in good.records
                                 if r['ev'] == 'test.event']))
        self.assertEqual({'buffer_full': 0, 'broken': 3, 'memory': 0},
                         buf.counts())
        buf.emit(_event(4))
        buf.drain()
        self.assertEqual(4, bad.dropped)
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
                    raise NotADirectoryError(20, 'Not a directory',
                                             '/srv/spans')
                super().write(batch, first_seq, pid)

        sink = DirSink()
        buf = buffer.EventBuffer([sink], max_records, 60.0)
        self.addCleanup(buf.close)
        return buf, sink, fixed

    def drop_warnings(self) -> list:
        return [line for line in self.logger.output.splitlines()
                if 'being dropped' in line]

    def test_drop_warning_names_the_cause_and_its_advice(self):
        buf, sink, fixed = self.failing_buffer()
        for n in range(3):
            buf.emit(_event(n))
        buf.drain()
        [warning] = self.drop_warnings()
        self.assertIn('3 lost by the file sink (/srv/spans/h1_nova-'
                      'compute.jsonl) since the start (3 in all)', warning)
        self.assertIn("the sink's error: NotADirectoryError: [Errno 20] "
                      "Not a directory: '/srv/spans'", warning)
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
        self.assertIn('[instrument] buffer_size, or record less with '
                      '[instrument] slow_query_threshold or '
                      'detail_sample_rate', warnings[1])
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
        self.assertIn('1 lost by the file sink (/srv/spans/h1_nova-'
                      'compute.jsonl) in the last', warnings[1])
        self.assertIn('(4 in all)', warnings[1])
        time.sleep(0.6)
        buf.drain()  # no new drop: no warning
        self.assertEqual(2, len(self.drop_warnings()))

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


FORK_SCRIPT = '''
import json, os, sys
from oslo_config import cfg
import instrument
from instrument import opts
from instrument import patcher

conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
conf.set_override('enabled', True, 'instrument')
conf.set_override('output_dir', sys.argv[1], 'instrument')
conf.set_override('flush_interval', 60.0, 'instrument')
conf.set_override('sql_timing', False, 'instrument')
import worker
point = patcher.PatchPoint('worker', 'work', 'compute.work', 'compute',
                           context=None)
rt = instrument.setup(conf, 'nova-conductor', points=[point])
worker.work('before-fork')
assert rt.buffer.pending() >= 1
pid = os.fork()
if pid == 0:
    worker.work('in-child')
    rt.buffer.drain()
    os._exit(0)
_, status = os.waitpid(pid, 0)
worker.work('after-fork')
print(json.dumps({'child': pid, 'status': status}))
'''

WORKER = '''
def work(label):
    return label
'''


class ProcessLifecycleTest(base.TestCase):
    """Fork and exit, in subprocesses (a test runner must not fork)."""

    def _run(self, script: str, *args) -> str:
        proc = self.run_script(script, *args, modules={'worker': WORKER})
        self.assertEqual(0, proc.returncode, proc.stderr)
        return proc.stdout

    def test_fork_child_writes_its_own_file_without_parent_events(self):
        out_dir = os.path.join(self.tmp, 'spans')
        result = json.loads(self._run(FORK_SCRIPT, out_dir))
        self.assertEqual(0, result['status'])
        files = base.read_span_files(out_dir)
        self.assertEqual(2, len(files), files.keys())
        by_pid = {}
        for name, records in files.items():
            pids = {r['pid'] for r in records}
            self.assertEqual(1, len(pids), name)
            pid = pids.pop()
            self.assertIn('_%d_' % pid, name)
            by_pid[pid] = records
        child = by_pid.pop(result['child'])
        [parent] = by_pid.values()

        def labels(records):
            return [r['ev'] for r in records if r['ph'] == 'X']

        # The child has its own start record and only its own work.
        self.assertEqual('process.start', child[0]['ev'])
        self.assertEqual(['compute.work'], labels(child))
        # The parent wrote its pre-fork events once, and its later ones.
        self.assertEqual('process.start', parent[0]['ev'])
        self.assertEqual(['compute.work', 'compute.work'], labels(parent))
        seqs = [r['seq'] for r in parent]
        self.assertEqual(list(range(1, len(seqs) + 1)), seqs)
        spans = [r['span'] for r in parent + child if r['ph'] == 'X']
        self.assertEqual(len(spans), len(set(spans)),
                         'span ids repeat across fork')

    def test_exit_flushes_what_is_buffered(self):
        script = FORK_SCRIPT.split('worker.work(\'before-fork\')')[0] + (
            "for n in range(50):\n    worker.work(n)\n")
        out_dir = os.path.join(self.tmp, 'spans')
        self._run(script, out_dir)
        [records] = base.read_span_files(out_dir).values()
        self.assertEqual(50, len([r for r in records if r['ph'] == 'X']))
