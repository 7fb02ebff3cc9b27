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

from oslo_config import cfg
from oslo_service import periodic_task

from instrument import patcher as patcher_mod
from instrument import process
from instrument import recorder as recorder_mod
from instrument import schema
from instrument.targets import periodic
from instrument import tracer as tracer_mod
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
        self.buffer = base.ListBuffer()
        self.recorder = recorder_mod.Recorder(
            self.buffer, process.ProcessIdentity.create('nova-compute',
                                                        'cmp-1'))
        patcher = patcher_mod.Patcher(periodic.points(self.recorder),
                                      self.recorder, 'oslo.service')
        patcher.apply()
        self.addCleanup(patcher.remove)

    def test_each_task_is_a_span(self):
        manager = Manager(self.recorder)
        manager.run_periodic_tasks(Ctx())
        self.assertEqual(['sync', 'update'], sorted(manager.ran))
        recs = self.buffer.dicts()
        tasks = {r['attrs']['task']: r for r in recs
                 if r['ev'] == 'periodic.task'}
        self.assertEqual({'Manager.update_available_resource',
                          'Manager._sync_power_states'}, set(tasks))
        update = tasks['Manager.update_available_resource']
        self.assertEqual('ok', update['st'])
        # a request id of its own: not the run's admin context's, not
        # a stale one; it names the task
        self.assertNotEqual(Ctx.request_id, update['req'])
        self.assertTrue(update['req'].startswith(
            'periodic-Manager.update_available_resource-'), update)
        self.assertEqual('Manager.update_available_resource',
                         schema.periodic_task_of(update['req']))
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
        self.assertEqual('Manager._sync_power_states',
                         schema.periodic_task_of(sync['req']))
        # The instance's copy of the task list is gone after the call.
        self.assertNotIn(periodic.ATTR, vars(manager))

    def test_exception_goes_through_unchanged(self):
        manager = Manager(self.recorder)
        self.assertRaises(ValueError, manager.run_periodic_tasks, Ctx(),
                          raise_on_error=True)
        # The next run records again (the leftover copy is replaced).
        manager._periodic_last_run = dict.fromkeys(
            manager._periodic_last_run)
        manager.run_periodic_tasks(Ctx())
        names = [r['attrs']['task'] for r in self.buffer.dicts()
                 if r['ev'] == 'periodic.task']
        self.assertGreaterEqual(len(names), 3)

    def test_a_service_without_a_host_gets_the_process_host(self):
        manager = Manager(self.recorder)
        manager.host = None
        manager.run_periodic_tasks(Ctx())
        hosts = {r['host'] for r in self.buffer.dicts()
                 if r['ev'] == 'periodic.task'}
        self.assertEqual({'cmp-1'}, hosts)
