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
"""Tests of the file and log sinks: through ``instrument.setup``, and
rotation and partial writes of the file sink (rotation by logrotate
itself: ``tests/system/sinks/test_file.py``)."""

import errno
import json
import os
import shutil
import threading
import time

import instrument
from instrument.patching import patcher
from instrument.runtime import lifecycle
from instrument.runtime import process
from instrument.runtime import record
from instrument.sinks import file as file_sink
from tests.unit import base

SERVICE = '''
import threading

gate = threading.Event()


class Ctx:
    request_id = 'req-file'
    global_request_id = None


def quick(context):
    return 'quick'


def hang(context):
    gate.wait(60)
    return 'released'


def spawn(context, path):
    raise OSError('cannot open the disk image ' + path)
'''


class SetupTestBase(base.TestCase):
    def setUp(self):
        super().setUp()
        self.mod_name = self.make_module(SERVICE)
        self.addCleanup(lifecycle.teardown)

    def setup_runtime(self, **overrides):
        overrides.setdefault('sql_timing', False)
        overrides.setdefault('flush_interval', 0.05)
        conf = self.make_conf(**overrides)
        points = [
            patcher.PatchPoint(
                self.mod_name, 'quick', 'compute.quick', 'compute'
            ),
            patcher.PatchPoint(
                self.mod_name, 'hang', 'compute.hang', 'compute'
            ),
            patcher.PatchPoint(
                self.mod_name, 'spawn', 'compute.spawn', 'compute'
            ),
        ]
        return instrument.setup(conf, 'nova-compute', points=points)

    def wait_for(self, predicate, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        self.fail('condition not met within %ss' % timeout)


class FileSinkTest(SetupTestBase):
    def test_lines_are_valid_schema_records(self):
        rt = self.setup_runtime()
        mod = __import__(self.mod_name)
        for _ in range(5):
            mod.quick(mod.Ctx())
        lifecycle.teardown()
        files = base.read_span_files(os.path.join(self.tmp, 'spans'))
        [(name, records)] = files.items()
        self.assertTrue(
            name.startswith(
                rt.identity.host + '_nova-compute_' + str(os.getpid()) + '_'
            ),
            name,
        )
        self.assertTrue(name.endswith('.jsonl'))
        self.assertEqual('process.start', records[0]['ev'])
        self.assertEqual('nova-compute', records[0]['attrs']['service'])
        self.assertIn(
            '%s:quick' % self.mod_name,
            records[0]['attrs']['points']['patched'],
        )
        done = [r for r in records if r['ph'] == 'X']
        self.assertEqual(5, len(done))
        for rec in done:
            self.assertEqual('req-file', rec['req'])
            self.assertEqual('compute.quick', rec['ev'])

    def test_start_without_end_is_on_disk(self):
        self.setup_runtime()
        mod = __import__(self.mod_name)
        self.addCleanup(mod.gate.set)
        worker = threading.Thread(target=mod.hang, args=(mod.Ctx(),))
        worker.start()
        self.addCleanup(worker.join)
        out = os.path.join(self.tmp, 'spans')

        def hang_begun():
            if not os.path.isdir(out):
                return None
            recs = [
                r
                for rs in base.read_span_files(out).values()
                for r in rs
                if r['ev'] == 'compute.hang'
            ]
            return recs or None

        recs = self.wait_for(hang_begun)
        self.assertEqual(['B'], [r['ph'] for r in recs])
        mod.gate.set()
        worker.join()
        lifecycle.teardown()
        recs = [
            r
            for rs in base.read_span_files(out).values()
            for r in rs
            if r['ev'] == 'compute.hang'
        ]
        self.assertEqual(['B', 'X'], [r['ph'] for r in recs])

    def test_unwritable_directory_keeps_the_service_running(self):
        blocker = os.path.join(self.tmp, 'not-a-dir')
        with open(blocker, 'w') as f:
            f.write('x')
        rt = self.setup_runtime(output_dir=os.path.join(blocker, 'spans'))
        mod = __import__(self.mod_name)
        for _ in range(3):
            self.assertEqual('quick', mod.quick(mod.Ctx()))
            rt.buffer.drain()
        file_drops = rt.buffer.counts()['file']
        self.assertGreaterEqual(file_drops, 3)
        self.assertEqual(
            1, self.logger.output.count('cannot write span events')
        )

    def test_full_disk_counts_and_resumes(self):
        rt = self.setup_runtime()
        [sink] = rt.buffer.sinks
        mod = __import__(self.mod_name)
        mod.quick(mod.Ctx())
        rt.buffer.drain()
        full = OSError(errno.ENOSPC, 'No space left on device')

        def no_space(fd, data):
            raise full

        sink._os_write = no_space
        for _ in range(3):
            mod.quick(mod.Ctx())
            rt.buffer.drain()
        self.assertEqual(3, sink.dropped)
        self.assertEqual(
            1, self.logger.output.count('cannot write span events')
        )
        del sink._os_write
        mod.quick(mod.Ctx())
        rt.buffer.drain()
        self.assertIn('writing span file', self.logger.output)
        with open(sink.path) as f:
            records = [json.loads(line) for line in f]
        drops = [r for r in records if r['ev'] == 'sink.drops']
        self.assertEqual(3, drops[-1]['attrs']['file'])
        # The calls made while the disk was full are lost, and counted.
        self.assertEqual(2, len([r for r in records if r['ph'] == 'X']))

    def test_spawn_failure_on_a_non_utf8_file_name_loses_nothing(self):
        rt = self.setup_runtime()
        mod = __import__(self.mod_name)
        path = os.fsdecode(b'/var/lib/nova/instances/\xe9t\xe9/disk')
        for n in range(300):
            if n % 50 == 7:
                self.assertRaises(OSError, mod.spawn, mod.Ctx(), path)
            else:
                mod.quick(mod.Ctx())
        lifecycle.teardown()
        self.assertEqual(0, rt.buffer.counts()['file'])
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        spawns = [r for r in records if r['ev'] == 'compute.spawn']
        self.assertEqual(6, len(spawns))
        self.assertEqual(
            294, len([r for r in records if r['ev'] == 'compute.quick'])
        )
        self.assertEqual(
            'cannot open the disk image /var/lib/nova/instances/'
            '\\xe9t\\xe9/disk',
            spawns[0]['err']['msg'],
        )
        self.assertEqual(
            list(range(1, len(records) + 1)), [r['seq'] for r in records]
        )

    def test_file_name_is_safe(self):
        name = file_sink.file_name('cmp/1 x', 'nova-compute', 42, 0.0)
        self.assertEqual('cmp-1-x_nova-compute_42_19700101T000000.jsonl', name)


class LogSinkTest(SetupTestBase):
    def test_events_go_to_the_service_log(self):
        self.setup_runtime(sinks=['log'])
        mod = __import__(self.mod_name)
        mod.quick(mod.Ctx())
        lifecycle.teardown()
        lines = [
            line
            for line in self.logger.output.splitlines()
            if line.startswith('INFO instrument.spans ')
        ]
        records = [json.loads(line.split(' ', 2)[2]) for line in lines]
        self.assertEqual(
            [
                'process.start',
                'process.points',
                'compute.quick',
                'process.end',
            ],
            [r['ev'] for r in records],
        )
        self.assertEqual('X', records[-2]['ph'])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, 'spans')))

    def test_file_and_log_at_once(self):
        self.setup_runtime(sinks=['file', 'log'])
        mod = __import__(self.mod_name)
        mod.quick(mod.Ctx())
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        self.assertEqual(4, len(records))
        self.assertEqual(4, self.logger.output.count('INFO instrument.spans'))


class SetupTest(SetupTestBase):
    def test_disabled_patches_nothing(self):
        conf = self.make_conf(enabled=False)
        self.assertIsNone(instrument.setup(conf, 'nova-compute'))
        self.assertIsNone(lifecycle.active())

    def test_setup_is_idempotent_and_teardown_restores(self):
        mod = __import__(self.mod_name)
        original = mod.quick
        rt = self.setup_runtime()
        self.assertIs(rt, self.setup_runtime())
        self.assertIsNot(original, mod.quick)
        lifecycle.teardown()
        self.assertIs(original, mod.quick)
        self.assertIsNone(lifecycle.active())
        lifecycle.teardown()

    def test_invalid_option_is_raised_by_name(self):
        conf = self.make_conf()
        conf.set_override('sinks', [], 'instrument')
        from instrument import opts

        exc = self.assertRaises(
            opts.InvalidOption, instrument.setup, conf, 'nova-compute'
        )
        self.assertEqual('sinks', exc.option)
        self.assertIsNone(lifecycle.active())


def _events(first: int, count: int) -> list:
    return [
        record.counter(
            'test.event', 'h1', 'compute', 1700000000000000, {'n': n}
        )
        for n in range(first, first + count)
    ]


class _SinkTestBase(base.TestCase):
    def setUp(self):
        super().setUp()
        self.out = os.path.join(self.tmp, 'spans')
        self.conf = self.make_conf(output_dir=self.out)
        self.sink = file_sink.FileSink(
            self.conf, process.ProcessIdentity.create('nova-compute', 'h1')
        )
        self.addCleanup(self.sink.close)
        self.seq = 1

    def write(self, count: int) -> None:
        self.sink.write(_events(self.seq, count), self.seq, os.getpid())
        self.seq += count

    def numbers(self, path: str) -> list:
        with open(path, 'rb') as f:
            return [json.loads(line)['attrs']['n'] for line in f]


class RotationTest(_SinkTestBase):
    """Like logging.handlers.WatchedFileHandler: checked at each write."""

    def test_renamed_file_is_opened_again_at_its_path(self):
        self.write(3)
        path = self.sink.path
        os.rename(path, path + '.1')
        self.write(2)
        self.assertEqual([1, 2, 3], self.numbers(path + '.1'))
        self.assertEqual([4, 5], self.numbers(path))
        self.assertEqual(0, self.sink.dropped)
        self.assertIn('was moved or deleted', self.logger.output)

    def test_deleted_file_is_created_again(self):
        self.write(3)
        os.unlink(self.sink.path)
        self.write(2)
        self.assertEqual([4, 5], self.numbers(self.sink.path))

    def test_deleted_directory_is_created_again(self):
        self.write(3)
        path = self.sink.path
        shutil.rmtree(self.out)
        self.write(2)
        self.assertEqual([4, 5], self.numbers(path))
        self.assertIn('was deleted; creating it again', self.logger.output)

    def test_file_replaced_by_logrotate_create_is_used(self):
        self.write(3)
        path = self.sink.path
        os.rename(path, path + '.1')
        with open(path, 'w'):  # logrotate's "create"
            pass
        self.write(2)
        self.assertEqual([4, 5], self.numbers(path))

    def test_copytruncate_is_safe(self):
        self.write(3)
        path = self.sink.path
        shutil.copyfile(path, path + '.1')
        os.truncate(path, 0)
        self.write(2)
        with open(path, 'rb') as f:
            data = f.read()
        # O_APPEND: the next lines land at the start of the truncated
        # file, not after a hole of NUL bytes.
        self.assertNotIn(b'\0', data)
        self.assertEqual([4, 5], self.numbers(path))
        self.assertEqual([1, 2, 3], self.numbers(path + '.1'))

    def test_rotation_through_the_writer(self):
        rt = self.setup_runtime()
        mod = __import__(self.mod_name)
        mod.quick(mod.Ctx())
        rt.buffer.drain()
        [sink] = rt.buffer.sinks
        os.rename(sink.path, sink.path + '.1')
        mod.quick(mod.Ctx())
        rt.buffer.drain()
        lifecycle.teardown()
        with open(sink.path) as f:
            rec, end = [json.loads(line) for line in f]
        self.assertEqual('compute.quick', rec['ev'])
        self.assertEqual('process.end', end['ev'])

    def setup_runtime(self):
        self.mod_name = self.make_module(SERVICE)
        self.addCleanup(lifecycle.teardown)
        conf = self.make_conf(
            output_dir=self.out, sql_timing=False, flush_interval=60.0
        )
        return instrument.setup(
            conf,
            'nova-compute',
            points=[
                patcher.PatchPoint(
                    self.mod_name, 'quick', 'compute.quick', 'compute'
                )
            ],
        )


class PartialWriteTest(_SinkTestBase):
    """A disk that fills up in the middle of a batch."""

    def _fail_after(self, nbytes: int, error=errno.ENOSPC) -> None:
        """The next writes take ``nbytes`` bytes in all, then fail."""
        budget = [nbytes]

        def short_write(fd, data):
            if budget[0] <= 0:
                raise OSError(error, os.strerror(error))
            n = min(len(data), budget[0], 100)  # short writes, too
            budget[0] -= n
            return os.write(fd, data[:n])

        self.sink._os_write = short_write

    def test_only_what_was_not_written_is_counted(self):
        self.write(2)
        with open(self.sink.path, 'rb') as f:
            line = len(f.readline())
        # Room for 3 lines and a half of the next batch of 10.
        self._fail_after(3 * line + line // 2)
        self.write(10)
        # 3 records written whole; 7 lost, the cut one among them.
        self.assertEqual(7, self.sink.dropped)
        del self.sink._os_write  # space again
        self.write(5)
        with open(self.sink.path, 'rb') as f:
            lines = f.read().split(b'\n')
        self.assertEqual(b'', lines.pop())
        good = []
        bad = []
        for raw in lines:
            try:
                good.append(json.loads(raw)['attrs']['n'])
            except ValueError:
                bad.append(raw)
        # The cut record is the only malformed line: the next batch
        # starts on a line of its own.
        self.assertEqual(1, len(bad))
        self.assertEqual([1, 2, 3, 4, 5, 13, 14, 15, 16, 17], good)
        self.assertEqual(17 - self.sink.dropped, len(good))

    def test_cut_at_a_line_end_needs_no_newline(self):
        self.write(1)
        with open(self.sink.path, 'rb') as f:
            line = len(f.read())
        self._fail_after(2 * line)
        self.write(4)
        self.assertEqual(2, self.sink.dropped)
        del self.sink._os_write
        self.write(1)
        self.assertEqual([1, 2, 3, 6], self.numbers(self.sink.path))

    def test_failure_before_the_newline_keeps_it_owed(self):
        self.write(1)
        with open(self.sink.path, 'rb') as f:
            line = len(f.read())
        self._fail_after(line // 2)
        self.write(1)  # cut in the middle
        self._fail_after(0)
        self.write(1)  # nothing written, not even the newline owed
        self.assertEqual(2, self.sink.dropped)
        del self.sink._os_write
        self.write(1)
        with open(self.sink.path, 'rb') as f:
            lines = f.read().splitlines()
        self.assertEqual(3, len(lines))
        self.assertEqual(4, json.loads(lines[2])['attrs']['n'])

    def test_other_errors_count_the_same(self):
        self.write(1)
        self._fail_after(10, errno.EIO)
        self.write(3)
        self.assertEqual(3, self.sink.dropped)
        del self.sink._os_write
        self.write(1)
        with open(self.sink.path, 'rb') as f:
            lines = f.read().splitlines()
        self.assertEqual(3, len(lines))
        self.assertEqual(5, json.loads(lines[2])['attrs']['n'])
