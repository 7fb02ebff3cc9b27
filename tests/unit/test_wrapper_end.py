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
"""The span wrapper's inline end gives the records ``Recorder.end`` gives.

A call that ends well with no ``on_exit`` and no ``result_instances``
ends its span in the wrapper itself (issue 31: one Python call less per
instrumented call); the same calls through a recorder of another class,
whose ``end`` is always called, must give the same bytes on disk.
"""

import importlib
import itertools

import fixtures

from instrument.patching import patcher
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder as recorder_mod
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
        return 41


def free(context, instance=None):
    return 'free'
'''


class CalledRecorder(recorder_mod.Recorder):
    """A recorder of another class: the wrapper calls its ``end``."""


def _end_must_not_be_called(*args, **kwargs):
    raise AssertionError('the inline end called Recorder.end')


class InlineEndTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.mod_name = self.make_module(TARGET)
        self.mod = importlib.import_module(self.mod_name)

    def run_calls(self, recorder_class, inline: bool) -> bytes:
        ticks = itertools.count(1_000_000_000, 1_234_567)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder._perf_ns',
                lambda: next(ticks),
            )
        )
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder.span_counter', itertools.count(1)
            )
        )
        buffer = base.ListBuffer()
        recorder = recorder_class(
            buffer, process.ProcessIdentity.create('nova-compute', 'h-1')
        )
        if inline:
            recorder.end = _end_must_not_be_called
        uuids = patcher.uuids('instance')
        points = [
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
                self.mod_name, 'free', 'compute.free', 'compute'
            ),
        ]
        patches = patcher.Patcher(points, recorder)
        patches.apply()
        try:
            manager = self.mod.Manager()
            ctx = self.mod.Ctx()
            self.assertEqual(42, manager.outer(ctx, self.mod.Inst()))
            self.assertEqual(41, manager.inner(ctx, instance=None))
            self.assertEqual('free', self.mod.free({'request_id': 'r'}))
            self.assertEqual('free', self.mod.free(None))
        finally:
            patches.remove()
        self.assertIsNone(recorder_mod.current_frame())
        self.assertEqual(5, len(buffer.events))
        return record.encode_lines(buffer.events, 1, 77)[0]

    def test_inline_end_writes_what_end_writes(self):
        inline = self.run_calls(recorder_mod.Recorder, True)
        called = self.run_calls(CalledRecorder, False)
        self.assertEqual(called, inline)
        self.assertEqual(5, inline.count(b'"ph":"X"'))
        self.assertIn(b'"parent":', inline)
