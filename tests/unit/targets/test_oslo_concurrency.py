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
"""oslo.concurrency lock timing with real locks, under native threads
and (in a subprocess) eventlet: each waiter measures its own wait, and
the recorded ``lock.wait`` must be within 1 ms of it."""

import json
import threading
import time
import uuid

from oslo_concurrency import lockutils
from oslo_context import context as oslo_context

from instrument import patcher as patcher_mod
from instrument.targets import base as targets_base
from instrument.targets import oslo_concurrency as target_mod
from instrument import tracer as tracer_mod
from tests.unit import base

TOLERANCE_US = 1000
HOLD_S = 0.1
ATTEMPTS = 5


def _with(make_cm):
    """locked(fn) for a context manager factory."""
    def locked(fn):
        with make_cm():
            return fn()
    return locked


class LockRun:
    """Two contenders on one lock: the holder keeps it ``HOLD_S``, the
    waiter times its own wait (from before ``lock()`` to inside it)."""

    def __init__(self, tracer, locked) -> None:
        self.tracer = tracer
        # locked(fn): runs fn holding the lock
        self.locked = locked
        self.truth = {}
        self.reqs = {}

    def holder(self, acquired: threading.Event) -> None:
        ctx = oslo_context.RequestContext()
        self.reqs['holder'] = ctx.request_id
        times = []

        def hold():
            times.append(time.perf_counter_ns())
            acquired.set()
            time.sleep(HOLD_S)
            times.append(time.perf_counter_ns())
        with self.tracer.span('compute.claim', ctx=ctx):
            self.locked(hold)
        self.truth['held'] = (times[1] - times[0]) // 1000

    def waiter(self, acquired: threading.Event) -> None:
        acquired.wait()
        ctx = oslo_context.RequestContext()
        self.reqs['waiter'] = ctx.request_id
        times = []
        with self.tracer.span('compute.claim', ctx=ctx):
            times.append(time.perf_counter_ns())
            self.locked(lambda: times.append(time.perf_counter_ns()))
        self.truth['wait'] = (times[1] - times[0]) // 1000

    def run(self) -> None:
        acquired = threading.Event()
        threads = [threading.Thread(target=self.holder, args=(acquired,)),
                   threading.Thread(target=self.waiter, args=(acquired,))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)


class LockTimingTest(base.TestCase):

    def setUp(self):
        super().setUp()
        self.buffer, self.recorder = base.list_recorder()
        self.tracer = tracer_mod.Tracer(self.recorder)
        self.target = target_mod.OsloConcurrencyTarget()
        ctx = targets_base.Context(
            self.make_conf(), self.recorder, self.tracer,
            patcher_mod.Patcher([], self.recorder), [self.target])
        self.target.install(ctx)
        self.addCleanup(self.target.remove)
        self.name = 'lock-%s' % uuid.uuid4().hex[:8]

    def waits(self) -> list:
        return [r for r in self.buffer.dicts() if r['ev'] == 'lock.wait']

    def contended(self, locked, **attrs) -> list:
        """Run the two contenders until the waiter really waited and was
        measured without being descheduled around its call (a loaded
        machine can do either): up to ATTEMPTS runs, the best counts.
        A wrong wait or hold fails every run."""
        best = None
        for _ in range(ATTEMPTS):
            self.buffer.events.clear()
            run = LockRun(self.tracer, locked)
            run.run()
            records = self.waits()
            self.assertEqual(2, len(records), records)
            by_req = {r['req']: r for r in records}
            waited = by_req[run.reqs['waiter']]
            held = by_req[run.reqs['holder']]
            # the run's worse error, of the wait and of the hold: either
            # side may be descheduled around its own measurement
            error = max(abs(waited['dur_us'] - run.truth['wait']),
                        abs(held['attrs']['held_us'] - run.truth['held']))
            if run.truth['wait'] > HOLD_S * 1e6 / 2 and (
                    best is None or error < best[0]):
                best = (error, run, records)
            if best is not None and best[0] <= TOLERANCE_US:
                break
        self.assertIsNotNone(best, 'the waiter never waited')
        _error, run, records = best
        by_req = {r['req']: r for r in records}
        waited = by_req[run.reqs['waiter']]
        held = by_req[run.reqs['holder']]
        # the waiter's wait, within 1 ms of what it measured itself
        self.assertLessEqual(abs(waited['dur_us'] - run.truth['wait']),
                             TOLERANCE_US, (waited, run.truth))
        self.assertLessEqual(abs(held['attrs']['held_us'] -
                                 run.truth['held']), TOLERANCE_US)
        spans = {r['span']: r for r in self.buffer.dicts()
                 if r['ev'] == 'compute.claim'}
        for rec in (waited, held):
            self.assertEqual(self.name, rec['attrs']['lock'])
            self.assertEqual('compute.claim', rec['attrs']['call'])
            self.assertEqual('compute.claim', spans[rec['parent']]['ev'])
            self.assertEqual(rec['req'], spans[rec['parent']]['req'])
            self.assertEqual('ok', rec['st'])
            for key, value in attrs.items():
                self.assertEqual(value, rec['attrs'].get(key), key)
        return records

    def test_internal_lock_wait_and_hold(self):
        records = self.contended(_with(lambda: lockutils.lock(self.name)))
        self.assertNotIn('fair', records[0]['attrs'])

    def test_fair_lock_through_synchronized(self):
        # The first fair lock imports eventlet (lockutils does, to pick
        # its thread functor); in a thread, that import leaves the
        # thread unjoinable for a while.  nova has imported it long
        # before; do it here, in the main thread.
        with lockutils.lock('warm-up', fair=True):
            pass
        self.buffer.events.clear()

        def locked(fn):
            # the way nova's resource tracker takes compute_resources
            return lockutils.synchronized(self.name, 'nova-',
                                          fair=True)(fn)()
        self.contended(locked, fair=True)

    def test_external_lock(self):
        path = self.tmp

        def enter():
            return lockutils.lock(self.name, 'nova-', external=True,
                                  lock_path=path)
        self.contended(_with(enter), external=True)

    def test_prefixed_lock_made_after_install(self):
        lock = lockutils.lock_with_prefix('nova-')
        self.contended(_with(lambda: lock(self.name)))

    def test_failed_nonblocking_acquisition_is_an_error(self):
        with lockutils.lock(self.name):
            failed = []

            def other():
                try:
                    with lockutils.lock(self.name, blocking=False):
                        pass
                except lockutils.AcquireLockFailedException as exc:
                    failed.append(exc)
            t = threading.Thread(target=other)
            t.start()
            t.join(10)
        self.assertEqual(1, len(failed))
        records = self.waits()
        self.assertEqual(['error', 'ok'], sorted(r['st'] for r in records))
        [error] = [r for r in records if r['st'] == 'error']
        self.assertIn('AcquireLockFailedException', error['err']['cls'])

    def test_result_and_exception_pass_through(self):
        @lockutils.synchronized(self.name)
        def work(x):
            if x is None:
                raise KeyError('boom')
            return x * 2

        # a stale current context (what nova's threads inherit)
        self.addCleanup(setattr, oslo_context._request_store, 'context',
                        None)
        oslo_context.RequestContext(request_id='req-stale')
        self.assertEqual(6, work(3))
        self.assertRaises(KeyError, work, None)
        records = self.waits()
        self.assertEqual(2, len(records))
        # an exception inside the held section is not the lock's failure
        self.assertEqual(['ok', 'ok'], [r['st'] for r in records])
        # outside any span: no parent, and not the stale request
        self.assertIsNone(records[0].get('parent'))
        self.assertIsNone(records[0].get('req'))
        self.assertEqual('compute', records[0]['svc'])

    def test_remove_restores_lockutils(self):
        self.assertTrue(getattr(lockutils.lock, '_instrument_timed', False))
        self.target.remove()
        self.assertFalse(getattr(lockutils.lock, '_instrument_timed', False))
        with lockutils.lock(self.name):
            pass
        self.assertEqual([], self.waits())

    def test_fault_in_recording_leaves_the_lock_working(self):
        def broken(*args, **kwargs):
            raise RuntimeError('emit failed')
        self.recorder.emit = broken
        target = target_mod.OsloConcurrencyTarget()
        self.target.remove()
        ctx = targets_base.Context(
            self.make_conf(), self.recorder, self.tracer,
            patcher_mod.Patcher([], self.recorder), [target])
        target.install(ctx)
        self.addCleanup(target.remove)
        with lockutils.lock(self.name) as sem:
            self.assertIsNotNone(sem)
        self.assertEqual(1, target.waits.faults.count)

    def test_off_by_option(self):
        target = target_mod.OsloConcurrencyTarget()
        self.assertEqual('[instrument] wait_timing is off',
                         target.check(self.make_conf(wait_timing=False)))


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
from instrument import patcher as patcher_mod
from instrument import process
from instrument import recorder as recorder_mod
from instrument import record
from instrument.targets import base as targets_base
from instrument.targets import oslo_concurrency as target_mod
from instrument import tracer as tracer_mod

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
            waits = {r['req']: r for r in out['records']
                     if r['ev'] == 'lock.wait'}
            self.assertEqual(2, len(waits), out['records'])
            error = abs(waits[out['reqs']['waiter']]['dur_us'] -
                        out['truth']['wait'])
            if best is None or error < best[0]:
                best = (error, out, waits)
            if error <= TOLERANCE_US:
                break
        _error, out, waits = best
        truth = out['truth']
        spans = {r['span']: r for r in out['records']
                 if r['ev'] == 'compute.claim'}
        waited = waits[out['reqs']['waiter']]
        held = waits[out['reqs']['holder']]
        self.assertGreater(truth['wait'], HOLD_S * 1e6 / 4)
        self.assertLessEqual(abs(waited['dur_us'] - truth['wait']),
                             TOLERANCE_US, (waited, truth))
        self.assertLessEqual(abs(held['attrs']['held_us'] - truth['held']),
                             TOLERANCE_US, (held, truth))
        for rec in (waited, held):
            self.assertEqual('compute_resources', rec['attrs']['lock'])
            self.assertEqual(rec['req'], spans[rec['parent']]['req'])
        self.assertEqual(kind == 'fair', waited['attrs'].get('fair', False))

    def test_internal_lock_under_eventlet(self):
        self.check('internal')

    def test_fair_lock_under_eventlet(self):
        self.check('fair')
