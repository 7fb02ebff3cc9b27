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
"""Tests of the file and log sinks, through ``instrument.setup``."""

import errno
import json
import os
import threading
import time

import instrument
from instrument import patcher
from instrument import runtime
from instrument.sink import file as file_sink
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
        self.addCleanup(runtime.teardown)

    def setup_runtime(self, **overrides):
        overrides.setdefault('sql_timing', False)
        overrides.setdefault('flush_interval', 0.05)
        conf = self.make_conf(**overrides)
        points = [
            patcher.PatchPoint(self.mod_name, 'quick', 'compute.quick',
                               'compute'),
            patcher.PatchPoint(self.mod_name, 'hang', 'compute.hang',
                               'compute'),
            patcher.PatchPoint(self.mod_name, 'spawn', 'compute.spawn',
                               'compute')]
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
        runtime.teardown()
        files = base.read_span_files(os.path.join(self.tmp, 'spans'))
        [(name, records)] = files.items()
        self.assertTrue(name.startswith(rt.identity.host + '_nova-compute_'
                                        + str(os.getpid()) + '_'), name)
        self.assertTrue(name.endswith('.jsonl'))
        self.assertEqual('process.start', records[0]['ev'])
        self.assertEqual('nova-compute', records[0]['attrs']['service'])
        self.assertIn('%s:quick' % self.mod_name,
                      records[0]['attrs']['points']['patched'])
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
            recs = [r for rs in base.read_span_files(out).values()
                    for r in rs if r['ev'] == 'compute.hang']
            return recs or None

        recs = self.wait_for(hang_begun)
        self.assertEqual(['B'], [r['ph'] for r in recs])
        mod.gate.set()
        worker.join()
        runtime.teardown()
        recs = [r for rs in base.read_span_files(out).values()
                for r in rs if r['ev'] == 'compute.hang']
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
        self.assertEqual(1, self.logger.output.count(
            'cannot write span events'))

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
        self.assertEqual(1, self.logger.output.count(
            'cannot write span events'))
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
        runtime.teardown()
        self.assertEqual(0, rt.buffer.counts()['file'])
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')).values()
        spawns = [r for r in records if r['ev'] == 'compute.spawn']
        self.assertEqual(6, len(spawns))
        self.assertEqual(294, len([r for r in records
                                   if r['ev'] == 'compute.quick']))
        self.assertEqual(
            'cannot open the disk image /var/lib/nova/instances/'
            '\\xe9t\\xe9/disk', spawns[0]['err']['msg'])
        self.assertEqual(list(range(1, len(records) + 1)),
                         [r['seq'] for r in records])

    def test_file_name_is_safe(self):
        name = file_sink.file_name('cmp/1 x', 'nova-compute', 42, 0.0)
        self.assertEqual('cmp-1-x_nova-compute_42_19700101T000000.jsonl',
                         name)


class LogSinkTest(SetupTestBase):

    def test_events_go_to_the_service_log(self):
        self.setup_runtime(sinks=['log'])
        mod = __import__(self.mod_name)
        mod.quick(mod.Ctx())
        runtime.teardown()
        lines = [line for line in self.logger.output.splitlines()
                 if line.startswith('INFO instrument.spans ')]
        records = [json.loads(line.split(' ', 2)[2]) for line in lines]
        self.assertEqual(['process.start', 'process.points',
                          'compute.quick'], [r['ev'] for r in records])
        self.assertEqual('X', records[-1]['ph'])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, 'spans')))

    def test_file_and_log_at_once(self):
        self.setup_runtime(sinks=['file', 'log'])
        mod = __import__(self.mod_name)
        mod.quick(mod.Ctx())
        runtime.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')).values()
        self.assertEqual(3, len(records))
        self.assertEqual(3, self.logger.output.count('INFO instrument.spans'))


class SetupTest(SetupTestBase):

    def test_disabled_patches_nothing(self):
        conf = self.make_conf(enabled=False)
        self.assertIsNone(instrument.setup(conf, 'nova-compute'))
        self.assertIsNone(runtime.active())

    def test_setup_is_idempotent_and_teardown_restores(self):
        mod = __import__(self.mod_name)
        original = mod.quick
        rt = self.setup_runtime()
        self.assertIs(rt, self.setup_runtime())
        self.assertIsNot(original, mod.quick)
        runtime.teardown()
        self.assertIs(original, mod.quick)
        self.assertIsNone(runtime.active())
        runtime.teardown()

    def test_invalid_option_is_raised_by_name(self):
        conf = self.make_conf()
        conf.set_override('sinks', [], 'instrument')
        from instrument import opts
        exc = self.assertRaises(opts.InvalidOption, instrument.setup, conf,
                                'nova-compute')
        self.assertEqual('sinks', exc.option)
        self.assertIsNone(runtime.active())
