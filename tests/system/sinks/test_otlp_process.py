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
"""The ``otlp`` sink in whole processes (subprocesses): what it imports,
a missing extra, eventlet (monkey-patched) and fork."""

import json
import os
import subprocess
import sys
import textwrap

from instrument.runtime import recorder
from tests.unit import base
from tests.unit.sinks import otlp_collector

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
)

CONF = '''
import json

from oslo_config import cfg

from instrument import opts


def make_conf(**overrides):
    conf = cfg.ConfigOpts()
    conf([], project='instrument-test')
    opts.register_opts(conf)
    overrides.setdefault('enabled', True)
    overrides.setdefault('flush_interval', 0.05)
    for key, value in overrides.items():
        conf.set_override(key, value, opts.GROUP)
    return conf


class Ctx:
    def __init__(self, request_id):
        self.request_id = request_id
        self.global_request_id = None
'''

NOTHING_IMPORTED = (
    CONF
    + '''
import importlib
import pkgutil
import sys

import instrument
from instrument.runtime import lifecycle
import instrument.sinks.otlp  # the sink's module alone loads nothing

# Every runtime module (the analyser and commands are not the runtime).
failed = []
for mod in pkgutil.walk_packages(instrument.__path__, 'instrument.'):
    if mod.name.startswith(('instrument.analysis', 'instrument.cmd',
                            'instrument.sinks.otlp.spans')):
        continue
    try:
        importlib.import_module(mod.name)
    except Exception as exc:
        failed.append('%s: %s' % (mod.name, exc))

rt = instrument.setup(make_conf(sinks=['file', 'log'],
                                output_dir=sys.argv[1]), 'nova-compute',
                      points=[])
with rt.tracer.span('compute.build', ctx=Ctx('req-1')):
    pass
lifecycle.teardown()
loaded = sorted(m for m in sys.modules
                if m.split('.')[0] in ('opentelemetry', 'grpc')
                or m.startswith('google.protobuf'))
print(json.dumps({'loaded': loaded, 'failed': failed}))
'''
)

HTTP_ONLY = (
    CONF
    + '''
import socket
import sys

import instrument
from instrument.runtime import lifecycle

sock = socket.socket()
sock.bind(('127.0.0.1', 0))  # nobody listens: refused
endpoint = 'http://127.0.0.1:%d/v1/traces' % sock.getsockname()[1]
rt = instrument.setup(make_conf(sinks=['otlp'], otlp_endpoint=endpoint,
                                otlp_timeout=0.5, sql_timing=False),
                      'nova-compute', points=[])
with rt.tracer.span('compute.build', ctx=Ctx('req-1')):
    pass
rt.buffer.drain()
[sink] = rt.buffer.sinks
sink.wait_idle(30)
lifecycle.teardown()
print(json.dumps({'sdk': 'opentelemetry.sdk.trace' in sys.modules,
                  'grpc': sorted(m for m in sys.modules
                                 if m.split('.')[0] == 'grpc'),
                  'dropped': sink.dropped}))
'''
)

MISSING_EXTRA = (
    CONF
    + '''
import sys

sys.modules['opentelemetry'] = None  # as if the extra were not installed

import instrument
from instrument import opts

try:
    instrument.setup(make_conf(sinks=['file', 'otlp'],
                               output_dir=sys.argv[1]), 'nova-compute',
                     points=[])
except opts.InvalidOption as exc:
    print(json.dumps({'option': exc.option, 'message': str(exc)}))
'''
)

GREEN = (
    '''
import eventlet
eventlet.monkey_patch()
'''
    + CONF
    + '''
import sys

import instrument
from instrument.runtime import lifecycle

protocol, endpoint, mode, count = sys.argv[1], sys.argv[2], sys.argv[3], \\
    int(sys.argv[4])
rt = instrument.setup(make_conf(
    sinks=['otlp'], otlp_endpoint=endpoint, otlp_protocol=protocol,
    otlp_timeout=120.0 if mode == 'hang' else 10.0, otlp_queue_size=256,
    sql_timing=False), 'nova-compute', points=[])
[sink] = rt.buffer.sinks
tr = rt.tracer
ticks = [0]


def ticker():
    while True:
        eventlet.sleep(0.01)
        ticks[0] += 1


def boot(n):
    with tr.span('compute.build', ctx=Ctx('req-green-%d' % n)):
        eventlet.sleep(0.001)
        with tr.span('compute.spawn'):
            eventlet.sleep(0.001)


eventlet.spawn(ticker)
pool = eventlet.GreenPool(50)
for n in range(count):
    pool.spawn(boot, n)
pool.waitall()
out = {}
if mode == 'hang':
    # Wait until the exporter has taken the spans into an export the
    # collector never answers; then keep the service busy meanwhile.
    while not (sink._accepted and not sink._queue):
        eventlet.sleep(0.01)
    before = ticks[0]
    for n in range(2000):
        pool.spawn(boot, count + n)
    pool.waitall()
    eventlet.sleep(0.5)
    out['ticks_during_hang'] = ticks[0] - before
    out['exported_during_hang'] = sink.exported
else:
    rt.buffer.drain()
    sink.wait_idle(30)
lifecycle.teardown()
out.update(dropped=sink.dropped, exported=sink.exported)
print(json.dumps(out))
'''
)

# The exporter thread is left in an export the collector never answers;
# the collector then resets the connection while the interpreter
# finalizes (the last atexit function), which wakes the thread if close()
# left it behind in its eventlet hub.  The collector is a listener in this
# process that never accepts: the kernel completes the connection in the
# listen backlog, and closing the listener resets it.
FINALIZING = (
    '''
import atexit
import sys


def reset_while_finalizing():
    sys.stdout.flush()
    sys.stderr.flush()
    LISTENER.close()


atexit.register(reset_while_finalizing)  # the first registered runs last

import eventlet
eventlet.monkey_patch()
from eventlet import patcher
'''
    + CONF
    + '''
import instrument
from instrument.runtime import lifecycle

real_socket = patcher.original('socket')
real_select = patcher.original('select')
LISTENER = real_socket.socket(real_socket.AF_INET, real_socket.SOCK_STREAM)
LISTENER.bind(('127.0.0.1', 0))
LISTENER.listen(8)
endpoint = 'http://127.0.0.1:%d/v1/traces' % LISTENER.getsockname()[1]
rt = instrument.setup(make_conf(sinks=['otlp'], otlp_endpoint=endpoint,
                                otlp_timeout=120.0, sql_timing=False),
                      'nova-compute', points=[])
[sink] = rt.buffer.sinks
for n in range(10):
    with rt.tracer.span('compute.build', ctx=Ctx('req-%d' % n)):
        pass
# The exporter connected (a connection waits in the backlog) and sent
# its request, whose answer never comes.
assert real_select.select([LISTENER], [], [], 30)[0], 'no connection'
eventlet.sleep(0.2)
lifecycle.teardown()
print(json.dumps({'dropped': sink.dropped, 'exported': sink.exported,
                  'exporter_alive': sink._thread.is_alive()}))
'''
)

# The same hung export at exit, while the file sink's writer is stuck in
# a write that never returns (a hung disk): the buffer cannot take its
# drain lock, and closes the sinks the writer is not in all the same
# (the OTLP sink's close ends the exporter thread).  argv: mode
# (threads, eventlet), span directory.
STUCK_FILE_FINALIZING = (
    '''
import atexit
import sys


def reset_while_finalizing():
    sys.stdout.flush()
    sys.stderr.flush()
    LISTENER.close()


atexit.register(reset_while_finalizing)  # the first registered runs last

mode, out = sys.argv[1], sys.argv[2]
if mode == 'eventlet':
    import eventlet
    eventlet.monkey_patch()
    from eventlet import patcher
    real_socket = patcher.original('socket')
    real_select = patcher.original('select')
else:
    import select as real_select
    import socket as real_socket
'''
    + CONF
    + '''
import logging

logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format='%(levelname)s %(name)s %(message)s')

import instrument
from instrument.runtime import buffer
from instrument.sinks import file as file_sink
from instrument.runtime import threads

# A stuck writer is waited for 0.5 s at exit, not 2 (the test's time).
buffer.flush_before_exit.__defaults__ = (0.5,)
LISTENER = real_socket.socket(real_socket.AF_INET, real_socket.SOCK_STREAM)
LISTENER.bind(('127.0.0.1', 0))
LISTENER.listen(8)
endpoint = 'http://127.0.0.1:%d/v1/traces' % LISTENER.getsockname()[1]
rt = instrument.setup(make_conf(sinks=['file', 'otlp'], output_dir=out,
                                otlp_endpoint=endpoint, otlp_timeout=120.0,
                                sql_timing=False), 'nova-compute',
                      points=[])
for n in range(10):
    with rt.tracer.span('compute.build', ctx=Ctx('req-%d' % n)):
        pass
# The exporter connected (a connection waits in the backlog) and sent
# its request, whose answer never comes.
assert real_select.select([LISTENER], [], [], 30)[0], 'no connection'
# Then the disk hangs: the next write never returns.
entered = threads.os_event()
never = threads.os_event()


def hung(fd, data):
    entered.set()
    never.wait()


file_sink.FileSink._os_write = staticmethod(hung)
for n in range(10, 20):
    with rt.tracer.span('compute.build', ctx=Ctx('req-%d' % n)):
        pass
assert entered.wait(30), 'the writer did not write'
print(json.dumps({'path': rt.buffer.sinks[0].path}))
# the interpreter exits: the flush at exit, then the reset
'''
)

FORKED = (
    CONF
    + '''
import os
import sys

import instrument
from instrument.runtime import lifecycle

rt = instrument.setup(make_conf(sinks=['otlp'], otlp_endpoint=sys.argv[1],
                                otlp_protocol=sys.argv[2],
                                sql_timing=False), 'nova-api', points=[])
tr = rt.tracer
with tr.span('api.request', ctx=Ctx('req-parent')):
    pass
rt.buffer.drain()
[sink] = rt.buffer.sinks
sink.wait_idle(30)   # the parent's exporter is up and connected
child = os.fork()
if child == 0:
    with tr.span('api.request', ctx=Ctx('req-child')):
        pass
    lifecycle.teardown()
    os._exit(0)
os.waitpid(child, 0)
with tr.span('api.request', ctx=Ctx('req-parent-2')):
    pass
lifecycle.teardown()
print(json.dumps({'parent': os.getpid(), 'child': child}))
'''
)


class ProcessTestBase(base.TestCase):
    def run_script(self, source, *args, timeout=120):
        proc = subprocess.run(
            [sys.executable, '-c', textwrap.dedent(source)] + list(args),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.stderr = proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])


class ImportTest(ProcessTestBase):
    def test_nothing_of_opentelemetry_unless_otlp_is_selected(self):
        out = self.run_script(NOTHING_IMPORTED, self.tmp)
        self.assertEqual([], out['loaded'], out['failed'])

    def test_http_protocol_never_loads_grpc(self):
        out = self.run_script(HTTP_ONLY)
        self.assertTrue(out['sdk'])
        self.assertEqual([], out['grpc'])
        self.assertEqual(1, out['dropped'])

    def test_missing_extra_names_the_option_and_the_fix(self):
        out = self.run_script(MISSING_EXTRA, self.tmp)
        self.assertEqual('sinks', out['option'])
        self.assertIn('[instrument] sinks', out['message'])
        self.assertIn(
            'pip install "openstack-instrument[otlp]"', out['message']
        )


class EventletTest(ProcessTestBase):
    """Monkey-patched services: export works, and a hanging collector
    stalls neither the hub nor the greenthreads that emit."""

    def check_live(self, collector, protocol):
        out = self.run_script(
            GREEN, protocol, collector.endpoint, 'live', '20'
        )
        self.assertEqual({'dropped': 0, 'exported': 40}, out)
        spans = collector.wait_spans(40)
        self.assertEqual(40, len(spans))
        by_trace = {}
        for span in spans:
            by_trace.setdefault(span['trace'], {})[span['name']] = span
        self.assertEqual(
            {recorder.trace_id_hex('req-green-%d' % n) for n in range(20)},
            set(by_trace),
        )
        for trace in by_trace.values():
            self.assertEqual(
                trace['compute.build']['span'],
                trace['compute.spawn']['parent'],
            )
            self.assertEqual(
                'eventlet',
                trace['compute.build']['resource']['instrument.mode'],
            )

    def test_http_export_under_eventlet(self):
        self.check_live(
            self.useFixture(otlp_collector.HttpCollector()), 'http/protobuf'
        )

    def test_grpc_export_under_eventlet(self):
        self.check_live(
            self.useFixture(otlp_collector.GrpcCollector()), 'grpc'
        )

    def check_hang(self, protocol, endpoint, hanging):
        out = self.run_script(GREEN, protocol, endpoint, 'hang', '10')
        # The collector took the connection and never answered...
        self.assertGreater(hanging.accepted, 0)
        self.assertEqual(0, out['exported'])
        # ... while the hub kept running and 2000 more calls went through.
        self.assertGreater(out['ticks_during_hang'], 20)
        # Every span was dropped and counted (queue full, or held by the
        # hung export when the process stopped).
        self.assertEqual(2 * (10 + 2000), out['dropped'])

    def test_hanging_collector_over_http_does_not_block_the_hub(self):
        hanging = self.useFixture(otlp_collector.HangingCollector())
        self.check_hang('http/protobuf', hanging.endpoint, hanging)

    def test_hanging_collector_over_grpc_does_not_block_the_hub(self):
        hanging = self.useFixture(otlp_collector.HangingCollector())
        self.check_hang('grpc', hanging.grpc_endpoint, hanging)

    def test_export_given_up_on_at_exit_cannot_crash_the_exit(self):
        # Left in its eventlet hub, the exporter thread woken by the
        # reset while the interpreter finalizes is ended by pthread_exit
        # through greenlet's frames: SIGSEGV (-11), 18 runs in 20 here.
        out = self.run_script(FINALIZING)
        self.assertEqual(
            {'dropped': 10, 'exported': 0, 'exporter_alive': False}, out
        )
        self.assertNotIn('Traceback', self.stderr)
        self.assertIn('10 spans not exported', self.stderr)


class StuckWriterAtExitTest(ProcessTestBase):
    """A file sink stuck on a hung disk and a hung OTLP collector at
    exit: the OTLP sink is closed all the same (its exporter thread
    interrupted under eventlet: no SIGSEGV), and every count is logged
    (issue 27)."""

    def check(self, mode: str) -> None:
        out = self.run_script(STUCK_FILE_FINALIZING, mode, self.tmp)
        log = self.stderr
        self.assertNotIn('Traceback', log)
        # the OTLP sink's close ran: what the hung export held, counted
        self.assertIn('10 spans not exported to', log)
        self.assertIn('instrument: at close, 10 lost by the otlp sink', log)
        # what the stuck writer never wrote
        self.assertRegex(
            log,
            r'at close, 10 events \(\d+ of them in the '
            r'write that did not return\) were never written: '
            r'the writer did not finish writing to %s' % out['path'],
        )

    def test_eventlet(self):
        # Without the OTLP sink's close, its exporter thread is left in
        # its eventlet hub; the reset wakes it while the interpreter
        # finalizes: SIGSEGV (run_script checks the exit status).
        for _ in range(3):
            self.check('eventlet')

    def test_threads(self):
        self.check('threads')


class ForkTest(ProcessTestBase):
    def check_fork(self, collector, protocol):
        out = self.run_script(FORKED, collector.endpoint, protocol)
        spans = {
            s['attrs']['instrument.req']: s for s in collector.wait_spans(3)
        }
        self.assertEqual(
            {'req-parent', 'req-child', 'req-parent-2'}, set(spans)
        )
        for req, pid in (
            ('req-parent', out['parent']),
            ('req-child', out['child']),
            ('req-parent-2', out['parent']),
        ):
            resource = spans[req]['resource']
            self.assertEqual(pid, resource['process.pid'])
            self.assertEqual('nova-api', resource['service.name'])
            self.assertTrue(
                resource['service.instance.id'].endswith(':%d' % pid)
            )
        self.assertEqual(
            out['parent'], spans['req-child']['resource']['process.parent_pid']
        )

    def test_forked_worker_exports_as_its_own_instance(self):
        self.check_fork(
            self.useFixture(otlp_collector.HttpCollector()), 'http/protobuf'
        )

    def test_forked_worker_exports_over_grpc(self):
        # The child never uses the parent's channel: it builds its own.
        self.check_fork(
            self.useFixture(otlp_collector.GrpcCollector()), 'grpc'
        )
