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
"""Hooks get what they need from their target, not from a global."""

import importlib

from instrument.patching import patcher as patcher_mod
from instrument.runtime import lifecycle
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.targets import base as targets_base
from instrument.targets import nova
from instrument.targets import oslo_messaging
from tests.unit import base

DRIVER = '''
class BaseDriver:
    def spawn(self, context, instance):
        return 'spawned'


class FakeDriver(BaseDriver):
    pass
'''


def _ctx(conf, recorder, patcher, targets=()):
    return targets_base.Context(conf, recorder, None, patcher, targets)


def _point(points, event):
    [point] = [p for p in points if p.event == event]
    return point


class NovaHookTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer, self.recorder = base.list_recorder()

    def test_driver_spawn_is_added_to_the_targets_patcher(self):
        # No runtime is running: the hook uses the patcher it was given.
        self.assertIsNone(lifecycle.active())
        mod = importlib.import_module(self.make_module(DRIVER))
        patcher = patcher_mod.Patcher([], self.recorder, 'nova')
        self.addCleanup(patcher.remove)
        patcher.apply()
        target = nova.NovaTarget()
        loaded = _point(
            target.points(_ctx(self.make_conf(), self.recorder, patcher)),
            'compute.driver',
        )
        loaded.on_exit(None, (), {}, mod.FakeDriver())
        spawn = '%s:BaseDriver.spawn' % mod.__name__
        self.assertEqual([spawn], patcher.banner()['patched'])
        self.assertEqual('spawned', mod.FakeDriver().spawn(None, None))
        self.assertEqual(
            ['compute.spawn'], [e['ev'] for e in self.buffer.dicts()]
        )

    def test_services_filter_the_points(self):
        target = nova.NovaTarget()
        patcher = patcher_mod.Patcher([], self.recorder, 'nova')
        conf = self.make_conf(services=['scheduler'])
        target.install(_ctx(conf, self.recorder, patcher))
        self.addCleanup(target.remove)
        names = patcher.banner()['pending']
        self.assertIn(
            'nova.scheduler.manager:SchedulerManager.select_destinations',
            names,
        )
        self.assertNotIn(
            'nova.compute.manager:ComputeManager._do_build_and_run_instance',
            names,
        )
        # Points of no component (spawn_on, the driver) are kept.
        self.assertIn('nova.thread_pool_factory:spawn_on', names)


class OsloMessagingTest(base.TestCase):
    def test_dispatch_service_comes_from_the_application_target(self):
        endpoint_cls = type(
            'ComputeManager',
            (),
            {'__module__': 'nova.compute.manager', 'host': 'cmp-4'},
        )
        other_cls = type('Other', (), {'__module__': 'x.manager'})
        conf = self.make_conf()
        with_nova = oslo_messaging.OsloMessagingTarget().points(
            _ctx(conf, None, None, [nova.NovaTarget()])
        )
        alone = oslo_messaging.OsloMessagingTarget().points(
            _ctx(conf, None, None, [])
        )
        for points, expected in ((with_nova, 'compute'), (alone, None)):
            dispatch = _point(points, 'rpc.dispatch')
            self.assertEqual('endpoint', dispatch.service_from.name)
            self.assertEqual(
                expected, dispatch.service_from.then(endpoint_cls())
            )
            self.assertIsNone(dispatch.service_from.then(other_cls()))
            self.assertEqual('cmp-4', dispatch.host.then(endpoint_cls()))

    def test_traceparent_names_the_sending_span(self):
        recorder = recorder_mod.Recorder(
            base.ListBuffer(), process.ProcessIdentity.create('nova-api', 'h')
        )
        ctxt = {'request_id': 'req-1'}
        # Outside an RPC span: nothing is added.
        oslo_messaging._inject_traceparent(None, ctxt)
        self.assertNotIn(oslo_messaging.TRACEPARENT_KEY, ctxt)
        rec = recorder.begin('rpc.call', None, None, ctxt, None, None, None)
        try:
            oslo_messaging._inject_traceparent(None, ctxt)
        finally:
            recorder.end(rec, recorder.clock())
        value = ctxt[oslo_messaging.TRACEPARENT_KEY]
        self.assertEqual(
            '00-%s-%016x-01'
            % (
                recorder_mod.trace_id_hex('req-1'),
                rec[recorder_mod.record.I_SPAN],
            ),
            value,
        )
        self.assertEqual(
            '%016x' % rec[recorder_mod.record.I_SPAN],
            oslo_messaging._remote_span(ctxt),
        )
