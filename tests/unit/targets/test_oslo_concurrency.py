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
(eventlet, in a child process: ``tests/system/targets/
test_oslo_concurrency.py``): each waiter measures its own wait, and
the recorded ``lock.wait`` must be within 5 ms of it (5 % of the hold)."""

import threading
import time
import uuid

import fixtures
from oslo_concurrency import lockutils
from oslo_context import context as oslo_context

from instrument.patching import patcher as patcher_mod
from instrument.runtime import tracer as tracer_mod
from instrument.targets import base as targets_base
from instrument.targets import oslo_concurrency as target_mod
from tests import faultinject
from tests.unit import base

# 5 % of the hold: a wait or hold measured wrong (the other side's,
# or not at all) is off by the whole hold; a thread scheduled late
# around its own clock read is off by a millisecond or two on a
# shared machine, in all of a test's runs now and then
TOLERANCE_US = 5000
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
        threads = [
            threading.Thread(target=self.holder, args=(acquired,)),
            threading.Thread(target=self.waiter, args=(acquired,)),
        ]
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
            self.make_conf(),
            self.recorder,
            self.tracer,
            patcher_mod.Patcher([], self.recorder),
            [self.target],
        )
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
            error = max(
                abs(waited['dur_us'] - run.truth['wait']),
                abs(held['attrs']['held_us'] - run.truth['held']),
            )
            if run.truth['wait'] > HOLD_S * 1e6 / 2 and (
                best is None or error < best[0]
            ):
                best = (error, run, records)
            if best is not None and best[0] <= TOLERANCE_US:
                break
        self.assertIsNotNone(best, 'the waiter never waited')
        _error, run, records = best
        by_req = {r['req']: r for r in records}
        waited = by_req[run.reqs['waiter']]
        held = by_req[run.reqs['holder']]
        # the waiter's wait, within TOLERANCE_US of what it measured itself
        self.assertLessEqual(
            abs(waited['dur_us'] - run.truth['wait']),
            TOLERANCE_US,
            (waited, run.truth),
        )
        self.assertLessEqual(
            abs(held['attrs']['held_us'] - run.truth['held']), TOLERANCE_US
        )
        spans = {
            r['span']: r
            for r in self.buffer.dicts()
            if r['ev'] == 'compute.claim'
        }
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
            return lockutils.synchronized(self.name, 'nova-', fair=True)(fn)()

        self.contended(locked, fair=True)

    def test_external_lock(self):
        path = self.tmp

        def enter():
            return lockutils.lock(
                self.name, 'nova-', external=True, lock_path=path
            )

        self.contended(_with(enter), external=True)

    def test_external_lock_by_position(self):
        # as lockutils.synchronized passes it: read at its place in
        # lock()'s signature, not at a position written down
        path = self.tmp

        def enter():
            return lockutils.lock(self.name, 'nova-', True, path)

        self.contended(_with(enter), external=True)

    def test_fair_lock_by_position(self):
        # fair at its place in lock()'s signature, as external is
        with lockutils.lock('warm-up', fair=True):
            pass
        self.buffer.events.clear()

        def enter():
            return lockutils.lock(
                self.name, None, False, None, True, None, 0.01, True
            )

        self.contended(_with(enter), fair=True)

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
        self.addCleanup(setattr, oslo_context._request_store, 'context', None)
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

    def test_what_was_locked_while_patched_is_not_timed_after_remove(self):
        # Functions decorated with the lock, and a prefixed lock, made
        # while it was patched hold the replacement: after remove() they
        # take the lock unrecorded (issue 27).
        @lockutils.lock(self.name)
        def work():
            return 'done'

        prefixed = lockutils.lock_with_prefix('nova-')
        synced = lockutils.synchronized(self.name)(lambda: 'synced')

        def use_all():
            self.assertEqual('done', work())
            with prefixed(self.name) as sem:
                self.assertIsNotNone(sem)
            self.assertEqual('synced', synced())

        use_all()
        self.assertEqual(3, len(self.waits()))
        self.target.remove()
        self.buffer.events.clear()
        use_all()
        self.assertEqual([], self.waits())
        # installed again: recorded again, by the new replacement
        target = target_mod.OsloConcurrencyTarget()
        target.install(
            targets_base.Context(
                self.make_conf(),
                self.recorder,
                self.tracer,
                patcher_mod.Patcher([], self.recorder),
                [target],
            )
        )
        self.addCleanup(target.remove)
        with lockutils.lock(self.name):
            pass
        self.assertEqual(1, len(self.waits()))

    def test_fault_in_recording_leaves_the_lock_working(self):
        def broken(*args, **kwargs):
            raise RuntimeError('emit failed')

        self.recorder.emit = broken
        target = target_mod.OsloConcurrencyTarget()
        self.target.remove()
        ctx = targets_base.Context(
            self.make_conf(),
            self.recorder,
            self.tracer,
            patcher_mod.Patcher([], self.recorder),
            [target],
        )
        target.install(ctx)
        self.addCleanup(target.remove)
        with lockutils.lock(self.name) as sem:
            self.assertIsNotNone(sem)
        self.assertEqual(1, target.waits.faults.count)

    def test_off_by_option(self):
        target = target_mod.OsloConcurrencyTarget()
        self.assertEqual(
            '[instrument] wait_timing is off',
            target.check(self.make_conf(wait_timing=False)),
        )


class Result:
    """What the locked body returned, or raised."""


class LockFaultTest(base.TestCase):
    """Issue 27 item 1: a fault of the lock timing (the clock at each of
    its reads, the record) never changes what nova gets: the locked
    body's value, nova's own exception, the lock's own exception, the
    lock's ``__exit__`` answer; the fault is counted, the lock is taken
    and released exactly as without the timing."""

    def setUp(self):
        super().setUp()
        self.buffer, self.recorder = base.list_recorder()
        self.target = target_mod.OsloConcurrencyTarget()
        ctx = targets_base.Context(
            self.make_conf(),
            self.recorder,
            tracer_mod.Tracer(self.recorder),
            patcher_mod.Patcher([], self.recorder),
            [self.target],
        )
        self.target.install(ctx)
        self.addCleanup(self.target.remove)
        self.name = 'lock-%s' % uuid.uuid4().hex[:8]
        self.ran = []

    def fault(self, kind=faultinject.RAISE, at='clock', skip=0):
        """Inject a fault at ``at``, a global of the target module."""
        fault = faultinject.Fault(kind, skip=skip)
        real = getattr(target_mod, at)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.oslo_concurrency.' + at, fault.wrap(real)
            )
        )
        return fault

    def body(self, outcome):
        self.ran.append(outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def with_lock(self, outcome):
        with lockutils.lock(self.name):
            return self.body(outcome)

    def decorated(self, outcome):
        return lockutils.lock(self.name)(self.body)(outcome)

    def synchronized(self, outcome):
        return lockutils.synchronized(self.name)(self.body)(outcome)

    def outcome_of(self, use, outcome):
        try:
            return use(outcome)
        except Exception as exc:
            return exc

    def assert_free(self):
        """The lock is released: another thread takes it at once."""
        got = []

        def other():
            try:
                with lockutils.lock(self.name, blocking=False):
                    got.append(True)
            except lockutils.AcquireLockFailedException:
                got.append(False)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(10)
        self.assertEqual([True], got, 'the lock was left held')

    def assert_unchanged(self, fault, use):
        for n, outcome in enumerate((Result(), ValueError('nova failed'))):
            got = self.outcome_of(use, outcome)
            self.assertIs(outcome, got)
            self.assertEqual(
                n + 1, len(self.ran), 'the body must run exactly once'
            )
            if isinstance(got, BaseException):
                self.assertIsNone(
                    got.__context__, 'nova\'s exception chained to a fault'
                )
            self.assert_free()
        self.assertGreaterEqual(fault.raised, 1, fault)
        self.assertEqual(fault.raised, self.target.waits.faults.count)
        self.assertEqual(1, self.logged().count('fault in the lock timing'))

    def test_clock_raising_before_the_lock(self):
        fault = self.fault()
        self.assert_unchanged(fault, self.with_lock)
        self.assertEqual([], self.buffer.events)

    def read_fault(self, read: int):
        """The clock raises at its ``read``-th read (1: before the lock,
        2: once it is held, 3: at its release) of each acquisition of
        this test's lock (the main thread's)."""
        fault = faultinject.Fault(faultinject.RAISE)
        reads = []
        main = threading.current_thread()
        raising = fault.wrap(time.perf_counter_ns)

        def clock():
            if threading.current_thread() is not main:
                return time.perf_counter_ns()  # assert_free's
            reads.append(1)
            if (len(reads) - 1) % 3 == read - 1:
                return raising()
            return time.perf_counter_ns()

        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.oslo_concurrency.clock', clock
            )
        )
        return fault

    def test_clock_raising_once_the_lock_is_held(self):
        self.assert_unchanged(self.read_fault(2), self.with_lock)

    def test_clock_raising_at_release(self):
        self.assert_unchanged(self.read_fault(3), self.with_lock)

    def test_record_raising(self):
        fault = self.fault(at='lock_name')
        self.assert_unchanged(fault, self.with_lock)

    def test_decorator_with_the_clock_raising(self):
        fault = self.fault()
        self.assert_unchanged(fault, self.decorated)

    def test_decorator_with_the_clock_raising_at_release(self):
        self.assert_unchanged(self.read_fault(3), self.decorated)

    def test_decorator_with_the_record_raising(self):
        self.assert_unchanged(self.fault(at='lock_name'), self.decorated)

    def test_decorator_set_up_raising(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'functools.wraps',
                faultinject.Fault(faultinject.RAISE).wrap(
                    lambda *a, **k: None
                ),
            )
        )
        body = lockutils.lock(self.name)(self.body)
        self.assertEqual(1, self.target.waits.faults.count)
        for outcome in (Result(), ValueError('nova failed')):
            self.assertIs(outcome, self.outcome_of(body, outcome))
        self.assertEqual(2, len(self.ran))

    def test_synchronized_with_the_clock_raising(self):
        fault = self.fault()
        self.assert_unchanged(fault, self.synchronized)

    def test_a_hanging_clock_changes_nothing(self):
        fault = self.fault(kind=faultinject.HANG)
        for outcome in (Result(), ValueError('nova failed')):
            self.assertIs(outcome, self.outcome_of(self.with_lock, outcome))
            self.assert_free()
        self.assertEqual(3, fault.hung)
        self.assertEqual(0, self.target.waits.faults.count)
        # recorded all the same (each assert_free acquires it once more)
        self.assertEqual(
            4, len([r for r in self.buffer.dicts() if r['ev'] == 'lock.wait'])
        )

    def test_the_lock_failing_passes_its_own_exception(self):
        # blocking=False on a held lock: oslo.concurrency raises; the
        # clock raises too, after the failed acquisition (in that
        # thread only: the holder's acquisition is not faulted)
        fault = faultinject.Fault(
            faultinject.RAISE,
            skip=1,
            where=lambda frame: threading.current_thread() is not main,
        )
        main = threading.current_thread()
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.oslo_concurrency.clock',
                fault.wrap(time.perf_counter_ns),
            )
        )
        with lockutils.lock('held-%s' % self.name):
            got = []

            def other():
                try:
                    with lockutils.lock('held-%s' % self.name, blocking=False):
                        got.append('acquired')
                except Exception as exc:
                    got.append(exc)

            thread = threading.Thread(target=other)
            thread.start()
            thread.join(10)
        [exc] = got
        self.assertIsInstance(exc, lockutils.AcquireLockFailedException)
        self.assertIsNone(exc.__context__)
        self.assertEqual(1, fault.raised)
        self.assertEqual(1, self.target.waits.faults.count)


class _Lock:
    """A lock context manager whose ``__exit__`` answers or raises as
    told (what ``original`` returns in the tests of ``timed_lock``)."""

    def __init__(self, exit_answer=None, exit_error=None):
        self.exit_answer = exit_answer
        self.exit_error = exit_error
        self.entered = self.exited = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, exc_type, exc, tb):
        self.exited += 1
        if self.exit_error is not None:
            raise self.exit_error
        return self.exit_answer


class TimedLockExitTest(base.TestCase):
    """The answer of the lock's ``__exit__`` (suppress or not, or its
    own exception) is what the ``with`` statement gets, whatever the
    timing's clock does at the release."""

    def setUp(self):
        super().setUp()
        self.records = []
        fault = faultinject.Fault(faultinject.RAISE, skip=2)
        self.fault = fault
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.oslo_concurrency.clock',
                fault.wrap(time.perf_counter_ns),
            )
        )

    def lock(self, cm):
        counter = _Counter()
        self.counter = counter
        return target_mod.timed_lock(lambda name: cm, self.record, counter)

    def record(self, *args):
        self.records.append(args)

    def test_a_suppressing_exit_still_suppresses(self):
        cm = _Lock(exit_answer=True)
        lock = self.lock(cm)
        with lock('x'):
            raise ValueError('nova failed, the lock swallows it')
        self.assertEqual((1, 1), (cm.entered, cm.exited))
        self.assertEqual((1, 1), (self.fault.raised, self.counter.count))

    def test_a_false_exit_lets_nova_exception_through(self):
        cm = _Lock(exit_answer=False)
        lock = self.lock(cm)
        error = ValueError('nova failed')

        def use():
            with lock('x'):
                raise error

        self.assertIs(error, self.assertRaises(ValueError, use))
        self.assertIsNone(error.__context__)
        self.assertEqual((1, 1), (self.fault.raised, self.counter.count))

    def test_the_release_failing_passes_its_own_exception(self):
        released = OSError('cannot release the lock file')
        cm = _Lock(exit_error=released)
        lock = self.lock(cm)

        def use():
            with lock('x'):
                return 1

        self.assertIs(released, self.assertRaises(OSError, use))
        self.assertIsNone(released.__context__)
        self.assertEqual((1, 1), (self.fault.raised, self.counter.count))


class _Counter:
    """Stands in for a ``Faults`` counter."""

    active = True

    def __init__(self):
        self.count = 0

    def __call__(self, exc):
        self.count += 1
