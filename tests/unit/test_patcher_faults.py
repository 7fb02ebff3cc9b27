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
"""The wrappers never change nova's outcome (issue 19, item 1).

Every wrapper calls the wrapped callable exactly once, outside any
guarded block, and hands back its result or exception as the same
object; a fault of the instrumentation (an extractor, ``on_enter``,
``on_exit``, ``on_error``, the enqueue...) is counted and logged once,
and the point disables itself after ``FAULT_LIMIT`` faults; nova's own
exceptions are never counted as faults.

The target stands for ``HostManager.get_filtered_hosts``: it consumes
an iterator argument, so a second call would see it used up and give a
different answer (``No valid host was found`` instead of the real
error), which is how the bug showed on real nova.
"""

import importlib

import fixtures

from instrument.patching import patcher
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.targets.nova import frames as nova_frames
from instrument.targets.nova import threads as nova_threads
from tests.unit import base

TARGET = '''
calls = []


class NoValidHost(Exception):
    pass


class Ctx:
    def __init__(self, request_id, error=None, result=None):
        self.request_id = request_id
        self.global_request_id = None
        self.error = error
        self.result = result


class HostManager:
    host = 'sched-1'

    def get_filtered_hosts(self, context, hosts, spec=None):
        calls.append(context.request_id)
        seen = list(hosts)
        if not seen:
            raise NoValidHost('No valid host was found')
        if context.error is not None:
            raise context.error
        return context.result


def spawn_on(executor, func, *args):
    calls.append(executor)
    return func(*args)
'''


def _boom(*args):
    raise KeyError('instrumentation bug')


def _no_memory(rec):
    raise MemoryError('queue append')


class FaultyBuffer(buffer_mod.EventBuffer):
    """The real buffer, whose enqueue or writer start fails."""

    def __init__(self, append=False, start=False):
        super().__init__([base.MemorySink()], 1000, 60.0)
        if append:
            self.emit = _no_memory
        self.fail_start = start

    def add_periodic(self, fn):
        self._periodic.append(fn)  # the first event starts the writer

    def start(self):
        if self.fail_start:
            raise RuntimeError("can't start new thread")
        super().start()


class PointFaultTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.mod_name = self.make_module(TARGET)
        self.mod = importlib.import_module(self.mod_name)
        self.buffer = base.ListBuffer()

    def apply(self, buffer=None, rate=1.0, **point):
        point.setdefault('detail', False)
        if buffer is not None:
            self.addCleanup(buffer.close)
        self.recorder = recorder_mod.Recorder(
            buffer if buffer is not None else self.buffer,
            process.ProcessIdentity.create('nova-scheduler', 'ctl-1'),
            detail_sample_rate=rate,
        )
        self.point = patcher.PatchPoint(
            self.mod_name,
            'HostManager.get_filtered_hosts',
            'scheduler.filter',
            'scheduler',
            **point,
        )
        self.patcher = patcher.Patcher([self.point], self.recorder)
        self.addCleanup(self.patcher.remove)
        self.patcher.apply()
        return self.patcher.state(self.point.name)

    def call(self, ctx):
        """(result or exception, the hosts the target saw once)."""
        hosts = iter(['host1', 'host2'])
        try:
            return self.mod.HostManager().get_filtered_hosts(ctx, hosts)
        except Exception as exc:
            return exc

    def assert_untouched(self, state, faults, outcome, expected, logged=0):
        """Same outcome object, one call, ``faults`` counted and logged
        once (``logged``: fault lines of earlier calls in the test)."""
        self.assertIs(expected, outcome)
        self.assertEqual(
            1, len(self.mod.calls), 'the wrapped call must run exactly once'
        )
        self.assertEqual(faults, state.faults)
        if isinstance(outcome, BaseException):
            self.assertIsNone(
                outcome.__context__, 'the exception was chained to a fault'
            )
        self.assertIsNone(
            recorder_mod.current_frame(),
            'a fault must not leave a span current',
        )
        log = self.logged()
        self.assertEqual(
            logged + min(faults, 1), log.count('fault in point'), log
        )

    # -- item 1 as reported ------------------------------------------------

    def test_unsampled_detail_point_raising_runs_nova_once(self):
        state = self.apply(
            rate=0.5, detail=True, context=patcher.arg('context')
        )
        req = next(
            'req-%d' % n
            for n in range(100)
            if not self.recorder.sampled('req-%d' % n)
        )
        error = RuntimeError('filter exploded')
        outcome = self.call(self.mod.Ctx(req, error=error))
        self.assert_untouched(state, 0, outcome, error)
        self.assertEqual([], self.buffer.events)

    def test_sampled_point_raising_is_recorded_not_counted(self):
        state = self.apply(detail=True, context=patcher.arg('context'))
        error = RuntimeError('filter exploded')
        outcome = self.call(self.mod.Ctx('req-s', error=error))
        self.assert_untouched(state, 0, outcome, error)
        [end] = self.buffer.dicts()
        self.assertEqual(
            ('X', 'error', 'RuntimeError'),
            (end['ph'], end['st'], end['err']['cls']),
        )

    # -- a fault in each part of the wrapper --------------------------------

    def _before_the_call(self, buffer=None, rate=1.0, **point):
        for logged, outcome_kind in enumerate(('result', 'error')):
            self.mod.calls.clear()
            state = self.apply(buffer=buffer, rate=rate, **point)
            expected = (
                object()
                if outcome_kind == 'result'
                else ValueError('nova failed')
            )
            if outcome_kind == 'result':
                ctx = self.mod.Ctx('req-b', result=expected)
            else:
                ctx = self.mod.Ctx('req-b', error=expected)
            outcome = self.call(ctx)
            self.assert_untouched(state, 1, outcome, expected, logged)
            self.assertEqual(
                [],
                [e for e in self.buffer.events if e[0] == 'B'],
                'a span left open',
            )
            self.patcher.remove()

    def test_context_extractor_fault(self):
        self._before_the_call(context=_boom)

    def test_instances_extractor_fault(self):
        self._before_the_call(instances=_boom)

    def test_host_extractor_fault(self):
        self._before_the_call(host=_boom)

    def test_remote_parent_extractor_fault(self):
        self._before_the_call(remote_parent=_boom)

    def test_service_extractor_fault(self):
        self._before_the_call(service_from=_boom)

    def test_on_enter_fault(self):
        self._before_the_call(on_enter=_boom)

    def test_sampling_fault(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder.Recorder.sampled', _boom
            )
        )
        self._before_the_call(rate=0.5, detail=True)

    def test_enqueue_fault(self):
        self._before_the_call(buffer=FaultyBuffer(append=True))

    def test_writer_start_fault(self):
        self._before_the_call(buffer=FaultyBuffer(start=True))

    def test_on_exit_fault_keeps_result_and_ends_the_span(self):
        state = self.apply(on_exit=_boom)
        result = object()
        outcome = self.call(self.mod.Ctx('req-x', result=result))
        self.assert_untouched(state, 1, outcome, result)
        [end] = self.buffer.dicts()
        self.assertEqual(('X', 'ok'), (end['ph'], end['st']))

    def test_result_instances_fault(self):
        state = self.apply(result_instances=_boom)
        result = object()
        outcome = self.call(self.mod.Ctx('req-r', result=result))
        self.assert_untouched(state, 1, outcome, result)
        [end] = self.buffer.dicts()
        self.assertEqual(('X', 'ok'), (end['ph'], end['st']))

    def test_on_error_fault_keeps_the_exception_and_ends_the_span(self):
        state = self.apply(on_error=_boom)
        error = ValueError('nova failed')
        outcome = self.call(self.mod.Ctx('req-e', error=error))
        self.assert_untouched(state, 1, outcome, error)
        [end] = self.buffer.dicts()
        self.assertEqual(('X', 'error'), (end['ph'], end['st']))

    def test_error_description_fault(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.tracer.error_of', _boom)
        )
        state = self.apply()
        error = ValueError('nova failed')
        outcome = self.call(self.mod.Ctx('req-d', error=error))
        self.assert_untouched(state, 1, outcome, error)
        [end] = self.buffer.dicts()
        self.assertEqual(('X', 'error'), (end['ph'], end['st']))

    def test_on_abandon_runs_once_nova_is_done(self):
        # The span cannot start (its enqueue fails) after on_enter ran,
        # or its end fails: on_abandon undoes on_enter's work once
        # nova's call is over; raising there changes nothing for nova.
        for where, kwargs in (
            ('start', {'buffer': FaultyBuffer(append=True)}),
            ('end', {'on_exit': _boom, 'on_error': _boom}),
        ):
            for outcome_kind in ('result', 'error'):
                for raising in (False, True):
                    self.mod.calls.clear()
                    seen = []

                    def abandon(
                        instance, args, kw, raising=raising, seen=seen
                    ):
                        seen.append(len(self.mod.calls))
                        if raising:
                            raise KeyError('abandon bug')

                    state = self.apply(on_abandon=abandon, **kwargs)
                    expected = (
                        object()
                        if outcome_kind == 'result'
                        else ValueError('nova failed')
                    )
                    ctx = self.mod.Ctx('req-a', **{outcome_kind: expected})
                    outcome = self.call(ctx)
                    detail = (where, outcome_kind, raising)
                    self.assertIs(expected, outcome, detail)
                    if outcome_kind == 'error':
                        self.assertIsNone(outcome.__context__, detail)
                    self.assertEqual([1], seen, detail)
                    self.assertEqual(1 + raising, state.faults, detail)
                    self.assertIsNone(recorder_mod.current_frame())
                    self.patcher.remove()

    def test_behind_wrapts_proxy_too(self):
        # A callable that is not a plain function keeps wrapt's proxy.
        self.mod.HostManager.get_filtered_hosts = _Callable(self.mod.calls)
        state = self.apply(rate=0.0, detail=True)
        error = RuntimeError('filter exploded')
        raised = self.assertRaises(
            RuntimeError,
            self.mod.HostManager.get_filtered_hosts,
            self.mod.Ctx('req-w', error=error),
            iter(['h']),
        )
        self.assertIs(error, raised)
        self.assertEqual(1, len(self.mod.calls))
        self.assertEqual(0, state.faults)
        self.patcher.remove()
        state = self.apply(on_enter=_boom)
        result = object()
        self.assertIs(
            result,
            self.mod.HostManager.get_filtered_hosts(
                self.mod.Ctx('req-w', result=result), iter(['h'])
            ),
        )
        self.assertEqual(2, len(self.mod.calls))
        self.assertEqual(1, state.faults)

    def test_repeated_faults_disable_the_point(self):
        state = self.apply(on_enter=_boom)
        calls = patcher.FAULT_LIMIT + 3
        for n in range(calls):
            result = object()
            self.assertIs(
                result, self.call(self.mod.Ctx('req-%d' % n, result=result))
            )
        self.assertEqual(calls, len(self.mod.calls))
        self.assertFalse(state.active)
        self.assertEqual(patcher.FAULT_LIMIT, state.faults)
        log = self.logged()
        self.assertEqual(1, log.count('fault in point'))
        self.assertEqual(1, log.count('disabled after'))

    def test_nova_exceptions_never_disable_the_point(self):
        state = self.apply()
        for n in range(patcher.FAULT_LIMIT + 3):
            error = ValueError(n)
            self.assertIs(error, self.call(self.mod.Ctx('r', error=error)))
        self.assertTrue(state.active)
        self.assertEqual(0, state.faults)

    def test_fault_message_never_carries_sql_parameters(self):
        def leaky(*args):
            raise RuntimeError(
                "(pymysql.err.OperationalError) boom "
                "[SQL: UPDATE x SET y=%(y)s] "
                "[parameters: {'y': 's3cr3t'}]"
            )

        self.apply(on_enter=leaky)
        self.call(self.mod.Ctx('req-p', result=1))
        log = self.logged()
        self.assertIn('fault in point', log)
        self.assertIn('boom', log)
        self.assertNotIn('s3cr3t', log)
        self.assertNotIn('UPDATE', log)


class _Callable:
    """A callable object standing in for nova's method (wrapt path)."""

    def __init__(self, calls):
        self.calls = calls

    def __call__(self, context, hosts):
        self.calls.append(context.request_id)
        list(hosts)
        if context.error is not None:
            raise context.error
        return context.result


class HookFaultTest(base.TestCase):
    """HOOK points (``spawn_on``, the RPC traceparent)."""

    def setUp(self):
        super().setUp()
        self.mod_name = self.make_module(TARGET)
        self.mod = importlib.import_module(self.mod_name)
        self.recorder = recorder_mod.Recorder(
            base.ListBuffer(), process.ProcessIdentity.create('nova', 'h')
        )

    def apply(self, **point):
        point = patcher.PatchPoint(
            self.mod_name,
            'spawn_on',
            'thread.spawn',
            kind=patcher.HOOK,
            **point,
        )
        p = patcher.Patcher([point], self.recorder)
        self.addCleanup(p.remove)
        p.apply()
        return p.state(point.name)

    def test_enter_fault_calls_once_with_the_original_arguments(self):
        state = self.apply(on_enter=_boom)
        result = object()
        self.assertIs(result, self.mod.spawn_on('pool', lambda: result))
        self.assertEqual(['pool'], self.mod.calls)
        self.assertEqual(1, state.faults)
        self.assertEqual(1, self.logged().count('fault in point'))

    def test_a_half_made_change_is_not_applied(self):
        def bad(instance, args, kwargs):
            return ('other-pool',) + tuple(args[1:]), ['not', 'keywords']

        state = self.apply(on_enter=bad)
        result = object()
        self.assertIs(result, self.mod.spawn_on('pool', lambda: result))
        self.assertEqual(['pool'], self.mod.calls)
        self.assertEqual(1, state.faults)

    def test_exit_fault_keeps_the_result(self):
        state = self.apply(on_exit=_boom)
        result = object()
        self.assertIs(result, self.mod.spawn_on('pool', lambda: result))
        self.assertEqual(1, len(self.mod.calls))
        self.assertEqual(1, state.faults)

    def test_target_exception_passes_through_uncounted(self):
        state = self.apply(
            on_enter=nova_threads.hook(), on_exit=lambda *a: None
        )
        error = ValueError('nova failed')

        def fail():
            raise error

        raised = self.assertRaises(ValueError, self.mod.spawn_on, 'pool', fail)
        self.assertIs(error, raised)
        self.assertEqual(1, len(self.mod.calls))
        self.assertEqual(0, state.faults)

    def test_carried_frame_fault_still_runs_the_thread_function_once(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder.set_frame', _boom
            )
        )
        counter = nova_frames.FAULTS
        before = counter.count
        ran = []
        result = object()

        def func(x):
            ran.append(x)
            return result

        run = nova_frames.run_in_frame(('frame',), func)
        self.assertIs(result, run(7))
        self.assertEqual([7], ran)
        self.assertEqual(before + 1, counter.count)
        self.assertIsNone(recorder_mod.current_frame())
