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
"""The span wrapper's inline start and end give the records
``Recorder.begin`` and ``end`` give.

A call starts its span in the wrapper itself, with the buffer's enqueue,
and one that ends well with no ``on_exit`` and no ``result_instances``
ends it there too (issue 31: two Python calls less per instrumented
call), with the parts ``begin`` and ``end`` carry (``SpanSteps``); the
same calls through a ``begin`` and ``end`` that carry none, which the
wrapper calls, must give the same bytes on disk (the inline run calls
``end`` only for the call that raised).  A fault in one of the
parts (the fault matrix's recorder sites) gives the span up, releases
its frame and leaves nova's answer alone.

The common case of the wrapper is done in C when the extension
``instrument._native._span`` is built (``SpanCall``): its records must
be the same bytes too, and a fault in any part it calls must end the
same way as in the closure (same records, same faults counted).  The
C tests are skipped when it is not built, except under ``CI=true``,
where that is a failure.
"""

import dataclasses
import importlib
import inspect
import itertools
import os

import fixtures
from oslo_context import context as oslo_context

from instrument.patching import patcher
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder as recorder_mod
from tests import faultinject
from tests.unit import base


def _native_span():
    """The C extension (whatever INSTRUMENT_PURE_PYTHON says), or None
    when it is not built."""
    try:
        return importlib.import_module('instrument._native._span')
    except ImportError:
        return None


NATIVE = _native_span()


def _clear_oslo_context():
    if hasattr(oslo_context._request_store, 'context'):
        del oslo_context._request_store.context


TARGET = '''
class Ctx:
    request_id = 'req-1'
    global_request_id = 'greq-1'


class Inst:
    uuid = 'inst-1'


class Manager:
    host = 'cmp-7'

    def outer(self, context, instance):
        return self.inner(context, instance) + 1

    def inner(self, context, instance):
        return 41 if context is None else free(None) and 41

    def fails(self, context):
        raise ValueError('nova failed')


def free(context, instance=None):
    return 'free'
'''


def _carrying(call, real):
    """``call``, carrying the steps of ``real`` (the recorder's own
    ``end``): the wrapper still does the inline end's steps itself."""
    call.steps = real.steps  # type: ignore[attr-defined]
    return call


def _watched(real, calls, steps: bool):
    """``real``, its calls listed; carrying its steps (the wrapper does
    them inline and calls it only where it must) or not (the wrapper
    calls it)."""

    def call(*args, **kwargs):
        calls.append(real.__name__)
        return real(*args, **kwargs)

    if steps:
        call.steps = real.steps  # type: ignore[attr-defined]
    return call


class _SpanCase(base.TestCase):
    """The target module, the recorder and the calls of these tests."""

    def setUp(self):
        super().setUp()
        self.mod_name = self.make_module(TARGET)
        self.mod = importlib.import_module(self.mod_name)
        self.use_native(None)
        # oslo.context's current request: what a call outside any span
        # and without a context of its own records
        oslo_context.RequestContext(
            request_id='req-oslo', global_request_id='greq-oslo'
        )
        self.addCleanup(_clear_oslo_context)

    def use_native(self, module) -> None:
        """The span wrappers made from now on: in C (``module``, the
        extension) or Python closures (None)."""
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.wrappers.native_span', module
            )
        )

    def need_native(self):
        if NATIVE is None:
            if os.environ.get('CI') == 'true':
                self.fail('instrument._native._span is not built (CI)')
            self.skipTest('instrument._native._span is not built')
        self.use_native(NATIVE)
        return NATIVE

    def recorder(self):
        ticks = itertools.count(1_000_000_000, 1_234_567)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._perf_ns',
                lambda: next(ticks),
            )
        )
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder.span_counter',
                itertools.count(1),
            )
        )
        buffer = buffer_mod.EventBuffer([base.MemorySink()], 1000, 60.0)
        buffer.hold()  # no writer: the records stay in the queue
        self.addCleanup(buffer.close)
        return recorder_mod.Recorder(
            buffer, process.ProcessIdentity.create('nova-compute', 'h-1')
        )

    def points(self):
        uuids = patcher.uuids('instance')
        return [
            patcher.PatchPoint(
                self.mod_name,
                'Manager.outer',
                'compute.outer',
                'compute',
                instances=uuids,
                host=patcher.self_attr('host'),
            ),
            patcher.PatchPoint(
                self.mod_name,
                'Manager.inner',
                'compute.inner',
                'compute',
                instances=uuids,
                host=patcher.self_attr('host'),
            ),
            patcher.PatchPoint(
                self.mod_name, 'Manager.fails', 'compute.fails', 'compute'
            ),
            patcher.PatchPoint(
                self.mod_name, 'free', 'compute.free', 'compute'
            ),
        ]

    def calls(self):
        manager = self.mod.Manager()
        ctx = self.mod.Ctx()
        self.assertEqual(42, manager.outer(ctx, self.mod.Inst()))
        self.assertEqual(41, manager.inner(ctx, instance=None))
        self.assertEqual('free', self.mod.free({'request_id': 'r'}))
        self.assertEqual('free', self.mod.free(None))
        self.assertRaisesRegex(ValueError, 'nova failed', manager.fails, ctx)


class InlineSpanTest(_SpanCase):
    def run_calls(self, inline: bool, native=False) -> bytes:
        recorder = self.recorder()
        called: list = []
        recorder.begin = _watched(recorder.begin, called, inline)
        recorder.end = _watched(recorder.end, called, inline)
        patches = patcher.Patcher(self.points(), recorder)
        patches.apply()
        try:
            wrapper = self.mod.Manager.__dict__['outer']
            if native:
                self.assertIsInstance(wrapper, NATIVE.SpanCall)
            else:
                self.assertTrue(inspect.isfunction(wrapper))
            self.calls()
        finally:
            patches.remove()
        self.assertIsNone(recorder_mod.current_frame())
        queued = list(recorder.buffer.queue)
        self.assertEqual(8, len(queued))
        if inline:
            # only the end of the call that raised (it has an error)
            self.assertEqual(['end'], called)
        else:
            self.assertEqual(
                (8, 8), (called.count('begin'), called.count('end'))
            )
        return record.encode_lines(queued, 1, 77)[0]

    def test_inline_start_and_end_write_what_the_recorder_writes(self):
        inline = self.run_calls(True)
        called = self.run_calls(False)
        self.assertEqual(called, inline)
        self.assertEqual(8, inline.count(b'"ph":"X"'))
        self.assertEqual(1, inline.count(b'"st":"error"'))
        self.assertIn(b'"parent":', inline)
        self.assertIn(b'"greq":"greq-1"', inline)
        self.assertIn(b'"inst":["inst-1"]', inline)
        self.assertIn(b'"greq":"greq-oslo"', inline)

    def test_the_c_path_writes_what_the_recorder_writes(self):
        self.need_native()
        native = self.run_calls(True, native=True)
        self.use_native(None)
        self.assertEqual(self.run_calls(False), native)

    def test_a_fault_in_the_inline_enqueue_gives_the_span_up(self):
        self.enqueue_fault()

    def test_a_fault_in_the_c_path_enqueue_gives_the_span_up(self):
        self.need_native()
        self.enqueue_fault()

    def enqueue_fault(self):
        fault = faultinject.Fault(faultinject.RAISE)
        real = recorder_mod.Recorder._span_steps

        def span_steps(recorder):
            steps = real(recorder)
            return steps._replace(append=fault.wrap(steps.append))

        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder.Recorder._span_steps',
                span_steps,
            )
        )
        recorder = self.recorder()
        called: list = []
        recorder.begin = _watched(recorder.begin, called, True)
        patches = patcher.Patcher(self.points(), recorder)
        patches.apply()
        try:
            self.calls()
        finally:
            patches.remove()
        self.assertIsNone(recorder_mod.current_frame())
        self.assertEqual(0, len(recorder.buffer.queue))
        self.assertEqual([], called)
        self.assertEqual(8, fault.raised)
        counted = sum(
            patches.state(point.name).count for point in self.points()
        )
        self.assertEqual(8, counted)

    # -- the C path against the closure, a fault in each part ----------------

    def run_faulted(self, step: str, skip: int, points=None) -> tuple:
        """The calls, with a fault raised by ``step`` (a ``SpanSteps``
        part, ``end_clock``: the clock of the ends, or ``end``: the
        recorder's end, called by a hooked point) once ``skip``
        calls of it passed: (bytes queued, faults counted, fault hits,
        nova's answers)."""
        fault = faultinject.Fault(faultinject.RAISE, skip=skip)
        real = recorder_mod.Recorder._span_steps

        def span_steps(recorder):
            steps = real(recorder)
            if step in ('end_clock', 'end'):
                return steps
            return steps._replace(**{step: fault.wrap(getattr(steps, step))})

        fixture = fixtures.MonkeyPatch(
            'instrument.runtime.recorder.Recorder._span_steps', span_steps
        )
        fixture.setUp()
        recorder = self.recorder()
        if step == 'end_clock':
            recorder.clock = fault.wrap(recorder.clock)
        elif step == 'end':
            recorder.end = _carrying(fault.wrap(recorder.end), recorder.end)
        points = self.points() if points is None else points
        patches = patcher.Patcher(points, recorder)
        patches.apply()
        answers = []
        manager = self.mod.Manager()
        ctx = self.mod.Ctx()
        try:
            answers.append(manager.outer(ctx, self.mod.Inst()))
            answers.append(manager.inner(ctx, instance=None))
            answers.append(self.mod.free({'request_id': 'r'}))
            answers.append(self.mod.free(None))
            try:
                manager.fails(ctx)
            except ValueError as exc:
                answers.append(str(exc))
        finally:
            patches.remove()
            fixture.cleanUp()
        self.assertIsNone(recorder_mod.current_frame())
        counted = sum(patches.state(point.name).count for point in points)
        queued = list(recorder.buffer.queue)
        return (
            record.encode_lines(queued, 1, 77)[0],
            counted,
            fault.hits,
            answers,
        )

    def test_a_fault_in_any_part_ends_as_in_the_closure(self):
        native = self.need_native()
        steps = (
            'clock',
            'get_ident',
            'get_frame',
            'set_frame',
            'reset_frame',
            'request',
            'append',
            'end_clock',
        )
        for step in steps:
            for skip in (0, 1, 2, 5):
                self.use_native(native)
                got = self.run_faulted(step, skip)
                self.use_native(None)
                want = self.run_faulted(step, skip)
                self.assertEqual(want, got, (step, skip))
                self.assertEqual(
                    [42, 41, 'free', 'free', 'nova failed'], got[3]
                )
                self.assertGreater(got[2], 0, (step, skip))

    def test_points_the_c_path_does_not_do_keep_the_closure(self):
        native = self.need_native()
        recorder = self.recorder()
        outer, inner, fails, free = self.points()
        points = [
            outer,
            dataclasses.replace(inner, remote_parent=patcher.arg('instance')),
            dataclasses.replace(fails, when=lambda *a: True),
            dataclasses.replace(free, detail=True),
        ]
        patches = patcher.Patcher(points, recorder)
        patches.apply()
        try:
            kinds = [
                isinstance(self.mod.Manager.__dict__[name], native.SpanCall)
                for name in ('outer', 'inner', 'fails')
            ]
            kinds.append(isinstance(self.mod.free, native.SpanCall))
        finally:
            patches.remove()
        self.assertEqual([True, False, False, False], kinds)

    def run_moved(self) -> list:
        """Two calls, the span id prefix and the wall-clock anchor
        changed between them (as a fork and the writer change them):
        the records queued."""
        recorder = self.recorder()
        patches = patcher.Patcher(self.points(), recorder)
        patches.apply()
        manager = self.mod.Manager()
        try:
            manager.inner(self.mod.Ctx(), instance=None)
            with (
                fixtures.MonkeyPatch(
                    'instrument.runtime.recorder.span_prefix', 0x1234 << 32
                ),
                fixtures.MonkeyPatch(
                    'instrument.runtime.recorder.wall_offset_ns',
                    recorder_mod.wall_offset_ns + 5_000_000_000,
                ),
            ):
                manager.inner(self.mod.Ctx(), instance=None)
        finally:
            patches.remove()
        return [list(rec[:15]) for rec in recorder.buffer.queue]

    def test_the_c_path_reads_the_prefix_and_anchor_per_call(self):
        native = self.need_native()
        got = self.run_moved()
        self.use_native(None)
        want = self.run_moved()
        self.assertEqual(want, got)
        first, second = [r for r in got if r[record.I_EV] == 'compute.inner']
        self.assertEqual(0x1234, second[record.I_SPAN] >> 32)
        self.assertNotEqual(0x1234, first[record.I_SPAN] >> 32)
        self.assertGreater(second[record.I_TS] - first[record.I_TS], 4_000_000)
        self.assertIsNotNone(native)


class HookedEndTest(_SpanCase):
    """Points with an ``on_exit`` or a ``result_instances``: in C too
    (issue 31), the hooks called after nova's call, then
    ``Recorder.end``'s steps done inline (its attributes merged, its
    instances set), as the closure does; the same bytes as
    ``Recorder.end`` called."""

    def points(self):
        outer, inner, fails, free = super().points()
        return [
            # both: on_exit's attrs merged, result_instances' uuids
            dataclasses.replace(
                outer,
                on_exit=self.on_exit,
                result_instances=self.found,
                on_abandon=self.on_abandon,
            ),
            dataclasses.replace(
                inner,
                on_enter=lambda instance, args, kwargs: {'in': 1},
                on_exit=self.on_exit,
            ),
            dataclasses.replace(fails, on_exit=self.on_exit),
            dataclasses.replace(free, result_instances=self.found),
        ]

    def setUp(self):
        super().setUp()
        self.seen: list = []
        self.hook_fault = None
        self.abandoned: list = []

    def on_exit(self, instance, args, kwargs, result):
        self.seen.append(
            ('exit', type(instance).__name__, len(args), sorted(kwargs))
        )
        if self.hook_fault is not None:
            self.hook_fault()
        return {'out': result, 'n': len(self.seen)}

    def found(self, result):
        self.seen.append(('found', result))
        return ['inst-%s' % result]

    def on_abandon(self, instance, args, kwargs):
        self.abandoned.append(len(args))

    def run_hooked(self, native: bool, steps=True) -> tuple:
        """The calls, in C or not (``native``), ``Recorder.end``
        carrying its steps (done inline) or not (called)."""
        recorder = self.recorder()
        called: list = []
        recorder.begin = _watched(recorder.begin, [], steps)
        recorder.end = _watched(recorder.end, called, steps)
        patches = patcher.Patcher(self.points(), recorder)
        patches.apply()
        del self.seen[:]
        try:
            kinds = [
                isinstance(self.mod.Manager.__dict__[name], NATIVE.SpanCall)
                for name in ('outer', 'inner', 'fails')
            ]
            kinds.append(isinstance(self.mod.free, NATIVE.SpanCall))
            self.assertEqual([native] * 4, kinds)
            self.calls()
        finally:
            patches.remove()
        self.assertIsNone(recorder_mod.current_frame())
        queued = list(recorder.buffer.queue)
        self.assertEqual(8, len(queued))
        counted = sum(
            patches.state(point.name).count for point in self.points()
        )
        return (
            record.encode_lines(queued, 1, 77)[0],
            list(self.seen),
            called,
            counted,
        )

    def test_the_c_path_calls_the_hooks_as_the_closure(self):
        self.need_native()
        native = self.run_hooked(True)
        self.use_native(None)
        closure = self.run_hooked(False)
        self.assertEqual(closure, native)
        # Recorder.end called: the same bytes, the same hooks' calls
        called_end = self.run_hooked(False, steps=False)
        self.assertEqual(closure[:2], called_end[:2])
        self.assertEqual(['end'] * 8, called_end[2])
        lines, seen, called, counted = native
        # the ends done inline but the failed call's
        self.assertEqual(['end'], called)
        self.assertEqual(0, counted)
        self.assertIn(b'"inst":["inst-42"]', lines)
        self.assertIn(b'"inst":["inst-free"]', lines)
        self.assertIn(b'"out":42', lines)
        self.assertIn(b'"in":1', lines)
        self.assertIn(('exit', 'Manager', 2, []), seen)
        self.assertIn(('exit', 'Manager', 1, ['instance']), seen)
        self.assertIn(('found', 42), seen)
        # the hooks after nova's call: outer's after those of the calls
        # it made
        self.assertLess(
            seen.index(('found', 'free')), seen.index(('found', 42))
        )

    def run_hook_fault(self, native: bool) -> tuple:
        fault = faultinject.Fault(faultinject.RAISE, skip=1)
        self.hook_fault = fault.wrap(lambda: None)
        self.use_native(NATIVE if native else None)
        recorder = self.recorder()
        patches = patcher.Patcher(self.points(), recorder)
        patches.apply()
        del self.abandoned[:]
        del self.seen[:]
        try:
            self.calls()
        finally:
            patches.remove()
        self.assertIsNone(recorder_mod.current_frame())
        counts = [patches.state(p.name).count for p in self.points()]
        queued = list(recorder.buffer.queue)
        return (
            record.encode_lines(queued, 1, 77)[0],
            counts,
            fault.raised,
            list(self.abandoned),
        )

    def run_faulted(self, step: str, skip: int, points=None) -> tuple:
        del self.seen[:]
        return InlineSpanTest.run_faulted(self, step, skip, points)

    def test_a_fault_in_on_exit_ends_as_in_the_closure(self):
        self.need_native()
        native = self.run_hook_fault(True)
        closure = self.run_hook_fault(False)
        self.assertEqual(closure, native)
        lines, counts, raised, abandoned = native
        self.assertGreater(raised, 0)
        self.assertEqual(raised, sum(counts))
        # outer's span given up (its on_abandon run), nova's answers kept
        self.assertEqual([1], counts[:1])
        self.assertEqual([2], abandoned)
        # abandon's record: no attrs and no uuids from the hooks
        self.assertIn(b'"ev":"compute.outer"', lines)
        self.assertNotIn(b'"out":42', lines)
        self.assertNotIn(b'"inst":["inst-42"]', lines)

    def test_a_fault_in_any_part_ends_as_in_the_closure(self):
        native = self.need_native()
        steps = (
            'clock',
            'get_ident',
            'set_frame',
            'reset_frame',
            'append',
            'end_clock',
            'end',
        )
        for step in steps:
            for skip in (0, 1, 3):
                self.use_native(native)
                got = self.run_faulted(step, skip, self.points())
                self.use_native(None)
                want = self.run_faulted(step, skip, self.points())
                self.assertEqual(want, got, (step, skip))
                self.assertEqual(
                    [42, 41, 'free', 'free', 'nova failed'], got[3]
                )
                self.assertGreater(got[2], 0, (step, skip))
