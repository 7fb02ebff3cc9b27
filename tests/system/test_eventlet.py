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
"""The buffer and sinks under eventlet, in monkey-patched subprocesses."""

import json
import os
import time

from tests.unit import base

BLOCKED_WRITER = '''
import eventlet
eventlet.monkey_patch()

import json
import os
import sys
import time

from instrument.runtime import buffer
from instrument.runtime import record
from instrument import sinks as sink


class FifoSink(sink.Sink):
    """Opening a FIFO nobody reads blocks the calling OS thread."""

    name = 'fifo'

    def write(self, batch, first_seq, pid):
        os.open(sys.argv[1], os.O_WRONLY)


buf = buffer.EventBuffer([FifoSink(None, None)], 1000, 0.01)
buf.stall_after = 0.2
ticks = [0]


def ticker():
    while True:
        ticks[0] += 1
        eventlet.sleep(0.001)


eventlet.spawn(ticker)
buf.emit(record.counter('t', 'h', 's', 1, {}))
eventlet.sleep(0.3)           # the writer is now stuck in os.open()
before = ticks[0]
worst = 0.0
for n in range(5000):
    start = time.perf_counter()
    buf.emit(record.counter('t', 'h', 's', n, {}))
    worst = max(worst, time.perf_counter() - start)
    if n % 500 == 0:
        eventlet.sleep(0)
eventlet.sleep(1.5)
print(json.dumps({'ticks': ticks[0] - before, 'worst_emit_s': worst,
                  'dropped': buf.dropped_full,
                  'writer_alive': buf.writer.is_alive()}))
sys.stdout.flush()
# What was logged so far was logged while the writer was stuck.
sys.stderr.write('END OF RUN\\n')
sys.stderr.flush()
'''

GREEN_SERVICE = '''
import eventlet
eventlet.monkey_patch()

import sys

from oslo_config import cfg

import instrument
from instrument import opts
from instrument.patching import patcher

conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
conf.set_override('enabled', True, 'instrument')
conf.set_override('output_dir', sys.argv[1], 'instrument')
conf.set_override('sql_timing', False, 'instrument')
conf.set_override('flush_interval', 0.02, 'instrument')
import green_worker
rt = instrument.setup(conf, 'nova-compute', points=[patcher.PatchPoint(
    'green_worker', 'Worker.run', 'compute.run', 'compute')])
pool = eventlet.GreenPool()
for n in range(20):
    pool.spawn(green_worker.Worker().run, green_worker.Ctx('req-%d' % n))
pool.waitall()
'''

LOGGING_UNDER_EVENTLET = '''
import eventlet
eventlet.monkey_patch()

import logging
import sys

from oslo_config import cfg

import instrument
from instrument import opts
from instrument.patching import patcher

# A plain handler: its lock is a green lock after monkey_patch().
logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format='%(name)s %(message)s')
conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
conf.set_override('enabled', True, 'instrument')
conf.set_override('sinks', ['log', 'file'], 'instrument')
conf.set_override('output_dir', sys.argv[1], 'instrument')
conf.set_override('sql_timing', False, 'instrument')
conf.set_override('flush_interval', 0.01, 'instrument')
conf.set_override('buffer_size', 16, 'instrument')
import green_worker
rt = instrument.setup(conf, 'nova-compute', points=[patcher.PatchPoint(
    'green_worker', 'Worker.run', 'compute.run', 'compute')])
chatter = logging.getLogger('service')


def chatty():
    # The service logs too, through the same handler, all the time.
    while True:
        chatter.info('service line')
        eventlet.sleep(0)


eventlet.spawn(chatty)
for round_ in range(30):
    pool = eventlet.GreenPool()
    for n in range(40):  # more than the buffer holds: drops are logged
        pool.spawn(green_worker.Worker().run, green_worker.Ctx('r-%d' % n))
    pool.waitall()
    eventlet.sleep(0.02)
'''

LOG_SINK_WITH_A_BUSY_HUB = '''
import eventlet
eventlet.monkey_patch()

import json
import logging
import sys
import time

from oslo_config import cfg

from instrument.runtime import buffer
from instrument import opts
from instrument.runtime import record
from instrument.sinks import log as log_sink

logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format='%(name)s %(message)s')
conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
conf.set_override('buffer_size', 50, 'instrument')
sink = log_sink.LogSink(conf, None)
buf = buffer.EventBuffer([sink], 50, 0.01)


def busy(seconds, until=lambda: True):
    # Never yields: the hub cannot log what the writer hands it.
    end = time.monotonic() + seconds
    while time.monotonic() < end or not until():
        if time.monotonic() > end + 30:
            sys.exit('the writer did not drain')


most = 0
for round_ in range(4):
    for n in range(50):
        buf.emit(record.counter('test.line', 'h', 's', n, {}))
    # The writer takes them all, then hands them to the log sink.
    busy(0.1, lambda: buf.pending() == 0)
    busy(0.1)
    most = max(most, sink.waiting())
eventlet.sleep(1.0)  # the hub runs again and logs
print(json.dumps({'dropped': sink.dropped, 'most_waiting': most}))
sys.stdout.flush()
'''

GREEN_WORKER = '''
import eventlet


class Ctx:
    def __init__(self, request_id):
        self.request_id = request_id
        self.global_request_id = None


class Worker:
    def run(self, context):
        eventlet.sleep(0.01)
        return context.request_id
'''


class EventletTest(base.TestCase):
    def _run(self, script: str, *args, timeout=60):
        return self.run_script(
            script,
            *args,
            timeout=timeout,
            modules={'green_worker': GREEN_WORKER},
        )

    def test_blocked_writer_blocks_neither_hub_nor_caller(self):
        fifo = os.path.join(self.tmp, 'fifo')
        os.mkfifo(fifo)
        start = time.monotonic()
        proc = self._run(BLOCKED_WRITER, fifo)
        elapsed = time.monotonic() - start
        self.assertEqual(0, proc.returncode, proc.stderr)
        result = json.loads(proc.stdout)
        # The writer is stuck in a blocking syscall in its own OS thread;
        # greenthreads keep running.
        self.assertTrue(result['writer_alive'])
        self.assertGreater(result['ticks'], 100, result)
        # Callers never wait: the buffer fills and the rest is counted.
        self.assertEqual(5000 - 1000, result['dropped'])
        self.assertLess(result['worst_emit_s'], 0.05, result)
        # Both reported from the hub while the writer was stuck: the
        # first drop (handed over by the emitting greenthread) and the
        # stuck drain (seen by the watchdog thread).
        during = proc.stderr.split('END OF RUN')[0]
        self.assertIn('events are being dropped', during)
        self.assertIn('writer has been stuck', during)
        # Exit gives up on the stuck writer after a bounded wait.
        self.assertLess(elapsed, 30)

    def test_logging_from_the_writer_never_deadlocks_the_hub(self):
        out = os.path.join(self.tmp, 'spans')
        proc = self._run(LOGGING_UNDER_EVENTLET, out, timeout=90)
        self.assertEqual(0, proc.returncode, proc.stderr[-2000:])
        err = proc.stderr
        # The log sink's lines and the writer's warning reached the
        # handler, from the hub, and the process exited.
        self.assertIn('instrument.spans {"v":1', err)
        self.assertIn('events are being dropped', err)
        [records] = base.read_span_files(out).values()
        self.assertTrue(any(r['ev'] == 'sink.drops' for r in records))

    def test_log_sink_lines_waiting_for_the_hub_are_bounded(self):
        proc = self._run(LOG_SINK_WITH_A_BUSY_HUB)
        self.assertEqual(0, proc.returncode, proc.stderr[-2000:])
        result = json.loads(proc.stdout)
        logged = proc.stderr.count('"ev":"test.line"')
        # buffer_size (50) lines waited for the hub; the rest of the 200
        # were dropped and counted, none lost silently.
        self.assertEqual(50, result['most_waiting'])
        self.assertEqual(50, logged)
        self.assertEqual(150, result['dropped'])

    def test_spans_of_greenthreads(self):
        out = os.path.join(self.tmp, 'spans')
        proc = self._run(GREEN_SERVICE, out)
        self.assertEqual(0, proc.returncode, proc.stderr)
        [records] = base.read_span_files(out).values()
        self.assertEqual('eventlet', records[0]['attrs']['mode'])
        done = [r for r in records if r['ph'] == 'X']
        self.assertEqual(20, len(done))
        self.assertEqual(
            {'req-%d' % n for n in range(20)}, {r['req'] for r in done}
        )
        # Each greenthread has its own id, and its own current span.
        self.assertEqual(20, len({r['tid'] for r in done}))
        self.assertEqual(set(), {r.get('parent') for r in done} - {None})
        for rec in done:
            self.assertGreaterEqual(rec['dur_us'], 9000)
