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
"""A fault logged from another thread than the one that had it: a log
handler that hangs never delays the faulted call, and the line of a
fault at exit still comes (child processes, threads and eventlet; the
counters: ``tests/unit/test_faults.py``)."""

import importlib
import json
import logging
import threading
import time

from instrument.patching import patcher
from instrument.runtime import lifecycle
from tests.unit import base

TARGET = '''
class Manager:
    def work(self, context):
        return 'done'
'''


def _boom(*args, **kwargs):
    raise KeyError('instrumentation bug')


# A log handler that hangs (a log server that stopped answering) and a
# point whose hook faults at every call: the faulted nova call returns
# at once, the fault is logged once with its traceback when the handler
# answers again.  argv: mode (threads, eventlet), module directory.
HANGING_LOG_SCRIPT = r'''
import sys

mode = sys.argv[1]
if mode == 'eventlet':
    import eventlet
    eventlet.monkey_patch()

import importlib
import json
import logging
import threading
import time

logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format='%(levelname)s %(name)s %(message)s')

from oslo_config import cfg

import instrument
from instrument import opts
from instrument.patching import patcher

HANG_S = 3.0
answer = threading.Event()


class Hanging(logging.Handler):
    def emit(self, rec):
        if not answer.is_set():
            time.sleep(HANG_S)  # eventlet's under eventlet
            answer.set()


logging.getLogger('instrument.runtime.faults').addHandler(Hanging())

conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in (('enabled', True), ('sinks', ['log']),
                   ('sql_timing', False), ('resource_sample_interval', 0)):
    conf.set_override(key, value, 'instrument')


def boom(*args, **kwargs):
    raise KeyError('instrumentation bug')


mod = importlib.import_module('fake_manager')
instrument.setup(conf, 'nova-compute', points=[patcher.PatchPoint(
    'fake_manager', 'Manager.work', 'compute.work', 'compute',
    on_enter=boom)])
slowest = 0.0
answers = []
for _ in range(3):
    t0 = time.monotonic()
    answers.append(mod.Manager().work(None))
    slowest = max(slowest, time.monotonic() - t0)
    time.sleep(0.3)  # the hub (or the watchdog) takes the line
# the handler answers again: the line is logged
assert answer.wait(HANG_S + 10), 'the fault was never logged'
time.sleep(0.3)
instrument.teardown()
print(json.dumps({'slowest': slowest, 'answers': answers}))
'''


# A process whose start fails and that exits at once: the fault's line,
# handed over to another thread, is still logged.  argv: mode.
FAULT_AT_EXIT_SCRIPT = r'''
import sys

if sys.argv[1] == 'eventlet':
    import eventlet
    eventlet.monkey_patch()

import logging

logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format='%(levelname)s %(name)s %(message)s')

from instrument.runtime import buffer  # noqa: F401 - the flush at exit
from instrument.runtime import faults


def start():
    raise KeyError('instrumentation bug')


try:
    start()
except KeyError as exc:
    faults.Faults('the start of the instrumentation')(exc)
'''


class FaultAtExitTest(base.TestCase):
    def test_logged_before_the_process_goes(self):
        for mode in ('threads', 'eventlet'):
            proc = self.run_script(FAULT_AT_EXIT_SCRIPT, mode)
            self.assertEqual(0, proc.returncode, proc.stderr)
            self.assertEqual(
                1,
                proc.stderr.count(
                    'fault in the start of the instrumentation (KeyError'
                ),
                (mode, proc.stderr),
            )
            self.assertIn('in start', proc.stderr)


class HangingLogTest(base.TestCase):
    """A fault is never logged from the thread that had it: a log
    handler that hangs never delays nova's call (issue 27)."""

    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)

    def test_threads_in_process(self):
        release = threading.Event()
        entered = threading.Event()

        class Hanging(logging.Handler):
            def emit(self, rec):
                entered.set()
                release.wait(30)

        handler = Hanging()
        faults_log = logging.getLogger('instrument.runtime.faults')
        faults_log.addHandler(handler)
        self.addCleanup(faults_log.removeHandler, handler)
        self.addCleanup(release.set)
        mod_name = self.make_module(TARGET)
        mod = importlib.import_module(mod_name)
        lifecycle.setup(
            self.make_conf(sql_timing=False),
            'nova-compute',
            points=[
                patcher.PatchPoint(
                    mod_name,
                    'Manager.work',
                    'compute.work',
                    'compute',
                    on_enter=_boom,
                )
            ],
        )
        for _ in range(3):
            t0 = time.monotonic()
            self.assertEqual('done', mod.Manager().work(None))
            self.assertLess(
                time.monotonic() - t0,
                1.0,
                'the faulted call waited for the log handler',
            )
            self.assertTrue(entered.wait(5), 'the fault was not logged')
        release.set()
        log = self.logged()
        self.assertEqual(
            1, log.count('fault in point %s:Manager.work' % mod_name), log
        )
        self.assertIn('(KeyError: ', log)
        self.assertEqual(1, log.count('Traceback'), log)
        self.assertIn('in _boom', log)

    def run_mode(self, mode: str) -> dict:
        proc = self.run_script(
            HANGING_LOG_SCRIPT, mode, modules={'fake_manager': TARGET}
        )
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        out = json.loads(proc.stdout.splitlines()[-1])
        self.assertEqual(['done'] * 3, out['answers'])
        self.assertLess(
            out['slowest'], 1.0, 'the faulted call waited for the log handler'
        )
        log = proc.stderr
        self.assertEqual(
            1,
            log.count('fault in point fake_manager:Manager.work (KeyError: '),
            log,
        )
        self.assertEqual(1, log.count('Traceback'), log)
        self.assertIn('in boom', log)
        return out

    def test_threads(self):
        self.run_mode('threads')

    def test_eventlet(self):
        self.run_mode('eventlet')
