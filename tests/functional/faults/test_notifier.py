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
"""The notifier driver never fails a service's start or a notification.

oslo.messaging's own Notifier and fake transport, no cloud: cheap.
"""

import fixtures
import oslo_messaging
from oslo_messaging.notify import _impl_test
from oslo_messaging.notify import notifier

from instrument import loaders as loader
from instrument.runtime import lifecycle
from tests.unit import base


def _boom(*args, **kwargs):
    raise KeyError('instrumentation bug')


class NotifierDriverFaultTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
        # The test runner is no nova service.
        self.conf = self.make_conf(sql_timing=False, programs=['*'])
        self.conf.register_opts(
            notifier._notifier_opts, group='oslo_messaging_notifications'
        )
        # Beside another driver, as operators list it.
        self.conf.set_override(
            'driver', ['instrument', 'test'], 'oslo_messaging_notifications'
        )
        _impl_test.reset()
        self.addCleanup(_impl_test.reset)
        self.transport = oslo_messaging.get_notification_transport(
            self.conf, url='fake:/'
        )

    def notifier(self):
        return oslo_messaging.Notifier(self.transport, 'compute.cmp-1')

    def test_a_fault_starting_leaves_notifications_working(self):
        # Each Notifier nova makes builds its drivers: two starts here.
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.lifecycle.setup', _boom)
        )
        first = self.notifier()
        second = self.notifier()
        for n in (first, second):
            n.info({}, 'compute.instance.create.end', {'x': 1})
        self.assertEqual(
            ['compute.instance.create.end'] * 2,
            [m['event_type'] for _c, m, _p, _r in _impl_test.NOTIFICATIONS],
        )
        self.assertIsNone(lifecycle.active())
        self.assertEqual(2, loader.FAULTS.count)
        self.assertEqual(
            1, self.logged().count('fault in the start of the instrumentation')
        )
