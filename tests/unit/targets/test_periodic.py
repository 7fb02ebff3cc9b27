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
"""oslo.service periodic tasks as ``periodic.task`` spans (real
``PeriodicTasks``)."""

import fixtures
from oslo_config import cfg
from oslo_service import periodic_task

from instrument import schema
from instrument.patching import patcher as patcher_mod
from instrument.runtime import tracer as tracer_mod
from instrument.targets import periodic
from tests.unit import base


class Ctx:
    request_id = 'req-periodic-1'
    global_request_id = None


class Manager(periodic_task.PeriodicTasks):
    def __init__(self, recorder):
        super().__init__(cfg.ConfigOpts())
        self.tracer = tracer_mod.Tracer(recorder)
        self.ran = []
        self.host = 'node-7'

    @periodic_task.periodic_task(spacing=1, run_immediately=True)
    def update_available_resource(self, context):
        self.ran.append('update')
        rec = self.tracer.begin('sql.like.child')
        self.tracer.end(rec)

    @periodic_task.periodic_task(spacing=1, run_immediately=True)
    def _sync_power_states(self, context):
        self.ran.append('sync')
        raise ValueError('power state')


class PeriodicTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer, self.recorder = base.list_recorder()
        patcher = patcher_mod.Patcher(
            periodic.points(self.recorder), self.recorder, 'oslo.service'
        )
        patcher.apply()
        self.addCleanup(patcher.remove)

    def test_each_task_is_a_span(self):
        manager = Manager(self.recorder)
        manager.run_periodic_tasks(Ctx())
        self.assertEqual(['sync', 'update'], sorted(manager.ran))
        recs = self.buffer.dicts()
        tasks = {
            r['attrs']['task']: r for r in recs if r['ev'] == 'periodic.task'
        }
        self.assertEqual(
            {
                'Manager.update_available_resource',
                'Manager._sync_power_states',
            },
            set(tasks),
        )
        update = tasks['Manager.update_available_resource']
        self.assertEqual('ok', update['st'])
        # a request id of its own: not the run's admin context's, not
        # a stale one; it names the task
        self.assertNotEqual(Ctx.request_id, update['req'])
        self.assertTrue(
            update['req'].startswith(
                'periodic-Manager.update_available_resource-'
            ),
            update,
        )
        self.assertEqual(
            'Manager.update_available_resource',
            schema.periodic_task_of(update['req']),
        )
        self.assertIsNone(update.get('greq'))
        self.assertIsNone(update.get('parent'))
        # the service's host, else the process's
        self.assertEqual('node-7', update['host'])
        # its children are charged to it
        [child] = [r for r in recs if r['ev'] == 'sql.like.child']
        self.assertEqual(update['span'], child['parent'])
        self.assertEqual(update['req'], child['req'])
        self.assertEqual('node-7', child['host'])
        sync = tasks['Manager._sync_power_states']
        self.assertEqual('error', sync['st'])
        self.assertEqual('ValueError', sync['err']['cls'])
        # one id per run of each task
        self.assertNotEqual(update['req'], sync['req'])
        self.assertEqual(
            'Manager._sync_power_states', schema.periodic_task_of(sync['req'])
        )
        # The instance's copy of the task list is gone after the call.
        self.assertNotIn(periodic.ATTR, vars(manager))

    def test_exception_goes_through_unchanged(self):
        manager = Manager(self.recorder)
        self.assertRaises(
            ValueError, manager.run_periodic_tasks, Ctx(), raise_on_error=True
        )
        # The next run records again (the leftover copy is replaced).
        manager._periodic_last_run = dict.fromkeys(manager._periodic_last_run)
        manager.run_periodic_tasks(Ctx())
        names = [
            r['attrs']['task']
            for r in self.buffer.dicts()
            if r['ev'] == 'periodic.task'
        ]
        self.assertGreaterEqual(len(names), 3)

    def test_a_service_without_a_host_gets_the_process_host(self):
        manager = Manager(self.recorder)
        manager.host = None
        manager.run_periodic_tasks(Ctx())
        hosts = {
            r['host']
            for r in self.buffer.dicts()
            if r['ev'] == 'periodic.task'
        }
        self.assertEqual({'cmp-1'}, hosts)


class _Sent:
    """What the fake driver was given to send (the serialised
    context), one per cast."""

    def __init__(self):
        self.contexts = []


class RpcInPeriodicRunTest(base.TestCase):
    """A cast a periodic task makes keeps the run's id, names the
    context's beside it, and sends nova's context unchanged (real
    oslo.messaging client, fake driver)."""

    def setUp(self):
        super().setUp()
        import oslo_messaging as messaging

        from instrument.targets import oslo_messaging as om_target

        self.buffer, self.recorder = base.list_recorder()
        for points, dist in (
            (periodic.points(self.recorder), 'oslo.service'),
            (om_target.points(), 'oslo.messaging'),
        ):
            patcher = patcher_mod.Patcher(points, self.recorder, dist)
            patcher.apply()
            self.addCleanup(patcher.remove)
        conf = cfg.ConfigOpts()
        # (oslo.messaging's tracing options are the global CONF's)
        transport = messaging.get_rpc_transport(cfg.CONF, url='fake:/')
        self.addCleanup(transport.cleanup)
        self.sent = _Sent()
        real_send = transport._driver.send

        def send(target, ctxt, message, *args, **kwargs):
            self.sent.contexts.append(dict(ctxt))
            return real_send(target, ctxt, message, *args, **kwargs)

        self.useFixture(
            fixtures.MockPatchObject(transport._driver, 'send', send)
        )
        client = messaging.get_rpc_client(
            transport, messaging.Target(topic='conductor')
        )

        class Conductor(periodic_task.PeriodicTasks):
            host = 'node-7'

            def __init__(self):
                super().__init__(conf)

            @periodic_task.periodic_task(spacing=1, run_immediately=True)
            def update_available_resource(self, context):
                client.cast(context, 'object_action', objmethod='save')

        self.manager = Conductor()
        self.client = client

    def test_the_send_keeps_the_runs_id(self):
        self.manager.run_periodic_tasks({'request_id': Ctx.request_id})
        recs = self.buffer.dicts()
        [task] = [r for r in recs if r['ev'] == 'periodic.task']
        [cast] = [r for r in recs if r['ev'] == 'rpc.cast']
        self.assertEqual(task['req'], cast['req'])
        self.assertEqual(task['span'], cast['parent'])
        self.assertEqual(
            Ctx.request_id, cast['attrs'][schema.ATTR_CONTEXT_REQ]
        )
        # nova's context goes out with its own id
        [sent] = self.sent.contexts
        self.assertEqual(Ctx.request_id, sent['request_id'])

    def test_outside_a_run_the_context_is_the_sends(self):
        self.client.cast({'request_id': 'req-user'}, 'object_action')
        [cast] = [r for r in self.buffer.dicts() if r['ev'] == 'rpc.cast']
        self.assertEqual('req-user', cast['req'])
        self.assertNotIn(schema.ATTR_CONTEXT_REQ, cast['attrs'])
