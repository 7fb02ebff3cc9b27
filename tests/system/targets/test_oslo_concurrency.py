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
"""oslo.concurrency lock timing with real locks under eventlet, in a
child process: each waiter measures its own wait, and the recorded
``lock.wait`` must be within 1 ms of it (native threads:
``tests/unit/targets/test_oslo_concurrency.py``)."""

import json

from tests.unit import base

TOLERANCE_US = 1000
HOLD_S = 0.1
ATTEMPTS = 5


EVENTLET_RUN = '''
import eventlet
eventlet.monkey_patch()

import json
import os
import sys
import time

from oslo_concurrency import lockutils
from oslo_config import cfg
from oslo_context import context as oslo_context

from instrument import opts
from instrument.patching import patcher as patcher_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import record
from instrument.targets import base as targets_base
from instrument.targets import oslo_concurrency as target_mod
from instrument.runtime import tracer as tracer_mod

events = []


class Buffer:
    emit = events.append


conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
recorder = recorder_mod.Recorder(
    Buffer(), process.ProcessIdentity.create('nova-compute', 'cmp-1'))
tracer = tracer_mod.Tracer(recorder)
target = target_mod.OsloConcurrencyTarget()
target.install(targets_base.Context(conf, recorder, tracer,
                                    patcher_mod.Patcher([], recorder),
                                    [target]))
fair = sys.argv[1] == 'fair'
truth = {}
reqs = {}
acquired = eventlet.event.Event()


def holder():
    ctx = oslo_context.RequestContext()
    reqs['holder'] = ctx.request_id
    with tracer.span('compute.claim', ctx=ctx):
        with lockutils.lock('compute_resources', fair=fair):
            t1 = time.perf_counter_ns()
            acquired.send()
            eventlet.sleep(0.05)
            t2 = time.perf_counter_ns()
    truth['held'] = (t2 - t1) // 1000


def waiter():
    acquired.wait()
    ctx = oslo_context.RequestContext()
    reqs['waiter'] = ctx.request_id
    with tracer.span('compute.claim', ctx=ctx):
        t0 = time.perf_counter_ns()
        with lockutils.lock('compute_resources', fair=fair):
            t1 = time.perf_counter_ns()
    truth['wait'] = (t1 - t0) // 1000


pool = eventlet.GreenPool()
pool.spawn(holder)
pool.spawn(waiter)
pool.waitall()
target.remove()
print(json.dumps({
    'truth': truth, 'reqs': reqs,
    'records': [record.to_dict(r, n, os.getpid())
                for n, r in enumerate(events, 1)]}))
'''


class EventletLockTimingTest(base.TestCase):
    """The same under eventlet (a monkey-patched subprocess)."""

    def check(self, kind: str) -> None:
        # as in the threads test: the best of a few runs (a loaded
        # machine may deschedule the process around the waiter's call)
        best = None
        for _ in range(ATTEMPTS):
            proc = self.run_script(EVENTLET_RUN, kind)
            self.assertEqual(0, proc.returncode, proc.stderr)
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            waits = {
                r['req']: r for r in out['records'] if r['ev'] == 'lock.wait'
            }
            self.assertEqual(2, len(waits), out['records'])
            error = abs(
                waits[out['reqs']['waiter']]['dur_us'] - out['truth']['wait']
            )
            if best is None or error < best[0]:
                best = (error, out, waits)
            if error <= TOLERANCE_US:
                break
        _error, out, waits = best
        truth = out['truth']
        spans = {
            r['span']: r for r in out['records'] if r['ev'] == 'compute.claim'
        }
        waited = waits[out['reqs']['waiter']]
        held = waits[out['reqs']['holder']]
        self.assertGreater(truth['wait'], HOLD_S * 1e6 / 4)
        self.assertLessEqual(
            abs(waited['dur_us'] - truth['wait']),
            TOLERANCE_US,
            (waited, truth),
        )
        self.assertLessEqual(
            abs(held['attrs']['held_us'] - truth['held']),
            TOLERANCE_US,
            (held, truth),
        )
        for rec in (waited, held):
            self.assertEqual('compute_resources', rec['attrs']['lock'])
            self.assertEqual(rec['req'], spans[rec['parent']]['req'])
        self.assertEqual(kind == 'fair', waited['attrs'].get('fair', False))

    def test_internal_lock_under_eventlet(self):
        self.check('internal')

    def test_fair_lock_under_eventlet(self):
        self.check('fair')
