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
"""The event buffer in child processes: a forked child writes its own
file, what is buffered is written at exit, a fault at exit is reported
(the rest of the buffer: ``tests/unit/test_buffer.py``)."""

import json
import os
import re

from tests.unit import base

FORK_SCRIPT = '''
import json, os, sys
from oslo_config import cfg
import instrument
from instrument import opts
from instrument.patching import patcher

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
        self.assertEqual(
            len(spans), len(set(spans)), 'span ids repeat across fork'
        )

    def test_exit_flushes_what_is_buffered(self):
        script = FORK_SCRIPT.split('worker.work(\'before-fork\')')[0] + (
            "for n in range(50):\n    worker.work(n)\n"
        )
        out_dir = os.path.join(self.tmp, 'spans')
        self._run(script, out_dir)
        [records] = base.read_span_files(out_dir).values()
        self.assertEqual(50, len([r for r in records if r['ph'] == 'X']))


# argv: span dir, log file, the fault (what raises at close), how the
# process ends ("exit": os._exit from a thread; "atexit").
EXIT_FAULT_SCRIPT = '''
import logging
import os
import sys
import threading

from oslo_config import cfg
import instrument
from instrument.runtime import buffer
from instrument import opts

out, log, fault, ending = sys.argv[1:]
logging.basicConfig(filename=log, level=logging.INFO)
conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in (('enabled', True), ('output_dir', out),
                   ('flush_interval', 60.0), ('sql_timing', False)):
    conf.set_override(key, value, 'instrument')
rt = instrument.setup(conf, 'nova-conductor', points=[])
for n in range(20):
    rt.recorder.counter('test.event', {'n': n})


def broken(*args, **kwargs):
    raise RuntimeError('injected fault')


if fault == 'enqueue':      # the end record cannot be made
    buffer.EventBuffer._end_record = broken
elif fault == 'drain':      # the queue cannot be written
    buffer.EventBuffer._write_queue = broken
if ending == 'exit':
    thread = threading.Thread(target=os._exit, args=(0,))
    thread.start()
    thread.join(30)
    os._exit(5)
'''


class ExitFaultTest(base.TestCase):
    """Nothing escapes the exit path: a fault there is counted and
    logged once, never a traceback of a dying thread on stderr."""

    def _run(self, fault: str, ending: str) -> tuple:
        out = os.path.join(self.tmp, 'spans')
        log = os.path.join(self.tmp, 'service.log')
        proc = self.run_script(EXIT_FAULT_SCRIPT, out, log, fault, ending)
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertNotIn('Exception in thread', proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)
        with open(log) as f:
            text = f.read()
        self.assertEqual(
            1,
            text.count(
                'fault in the flush at exit (RuntimeError: injected fault)'
            ),
            text,
        )
        files = base.read_span_files(out) if os.path.isdir(out) else {}
        return [r for records in files.values() for r in records], text

    def test_enqueue_fault_at_os_exit(self):
        records, _log = self._run('enqueue', 'exit')
        self.assertEqual(
            20, len([r for r in records if r['ev'] == 'test.event'])
        )
        self.assertNotIn('process.end', [r['ev'] for r in records])

    def test_enqueue_fault_at_interpreter_exit(self):
        records, _log = self._run('enqueue', 'atexit')
        self.assertEqual(
            20, len([r for r in records if r['ev'] == 'test.event'])
        )

    def test_write_fault_at_os_exit_is_reported_with_its_count(self):
        records, log = self._run('drain', 'exit')
        self.assertEqual([], [r for r in records if r['ev'] == 'test.event'])
        # the 20 events and process.start, and the instrument.faults
        # record if a drain ran after the fault was counted
        unwritten = re.search(
            r'at close, (\d+) events were never '
            r'written: the last write failed',
            log,
        )
        self.assertIsNotNone(unwritten, log)
        self.assertIn(int(unwritten.group(1)), (21, 22))
