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
"""

import importlib
import itertools

import fixtures

from instrument.patching import patcher
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder as recorder_mod
from tests import faultinject
from tests.unit import base

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


class InlineSpanTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.mod_name = self.make_module(TARGET)
        self.mod = importlib.import_module(self.mod_name)

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

    def run_calls(self, inline: bool) -> bytes:
        recorder = self.recorder()
        called: list = []
        recorder.begin = _watched(recorder.begin, called, inline)
        recorder.end = _watched(recorder.end, called, inline)
        patches = patcher.Patcher(self.points(), recorder)
        patches.apply()
        try:
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

    def test_a_fault_in_the_inline_enqueue_gives_the_span_up(self):
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
