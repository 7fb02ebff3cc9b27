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
"""Switching on from nova.conf alone: the notifier-driver path.

Each test runs a child process that starts like ``nova-compute`` does
(``monkey_patch.patch``, ``config.parse_args(sys.argv)`` with a nova.conf
file, which calls ``rpc.init``) and reports what got instrumented.
"""

import json
import os
import subprocess
import sys
import textwrap

import fixtures
import testtools

CHILD = '''
import sys
from nova import monkey_patch
if hasattr(monkey_patch, 'patch'):
    monkey_patch.patch(backend=sys.argv[3])
# else nova 31 or older: importing nova.monkey_patch patched eventlet.

import json
from nova import config

prog, set_up = sys.argv[4], sys.argv[5] == 'log'
sys.argv = [prog, '--config-file', sys.argv[1]]
config.parse_args(sys.argv)
if set_up:  # as nova/cmd/compute.py, after parse_args
    from oslo_log import log as logging
    logging.setup(config.CONF, 'nova')

from instrument.runtime import lifecycle
active = lifecycle.active()
if active is None:
    print(json.dumps({'active': False}))
    sys.exit(0)
import nova.compute.manager
manager = nova.compute.manager.ComputeManager
result = {
    'active': True,
    'service': active.identity.service,
    'svc': active.identity.svc,
    'host': active.identity.host,
    'banner': active.banner(),
    'targets': active.status,
    'patched_build': hasattr(manager.__dict__['_do_build_and_run_instance'],
                             '__instrument_point__'),
}
lifecycle.teardown()
print(json.dumps(result))
'''

NOVA_CONF = '''
[DEFAULT]
host = cmp-017
log_file = {log}
transport_url = fake:/
state_path = {state}

[database]
connection = sqlite://

[api_database]
connection = sqlite://

[oslo_messaging_notifications]
driver = instrument

[instrument]
enabled = true
output_dir = {spans}
{extra}
'''


class NotifierPathTest(testtools.TestCase):
    backend = 'threading'

    def _start(self, extra='', prog='nova-compute', set_up=False):
        tmp = self.useFixture(fixtures.TempDir()).path
        spans = os.path.join(tmp, 'spans')
        conf = os.path.join(tmp, 'nova.conf')
        self.log = os.path.join(tmp, 'nova.log')
        with open(conf, 'w') as f:
            f.write(
                NOVA_CONF.format(
                    state=tmp, spans=spans, extra=extra, log=self.log
                )
            )
        script = os.path.join(tmp, 'child.py')
        with open(script, 'w') as f:
            f.write(textwrap.dedent(CHILD))
        env = dict(os.environ)
        env.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)
        proc = subprocess.run(
            [
                sys.executable,
                script,
                conf,
                spans,
                self.backend,
                prog,
                'log' if set_up else '-',
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        return (
            json.loads(proc.stdout.strip().splitlines()[-1]),
            spans,
            proc.stderr,
        )

    def test_nova_conf_starts_and_patches_compute(self):
        result, spans, _ = self._start()
        self.assertTrue(result['active'])
        self.assertEqual('nova-compute', result['service'])
        self.assertEqual('compute', result['svc'])
        self.assertEqual('cmp-017', result['host'])
        self.assertTrue(result['patched_build'])
        patched = result['banner']['patched']
        self.assertIn(
            'nova.compute.manager:ComputeManager._do_build_and_run_instance',
            patched,
        )
        self.assertIn(
            'oslo_messaging.rpc.dispatcher:RPCDispatcher._do_dispatch', patched
        )
        self.assertEqual([], result['banner']['failed'])
        # Every target of the package runs on a nova host (real nova,
        # oslo.messaging and SQLAlchemy; the exit flush; keystoneauth1,
        # keystonemiddleware and oslo.service, which nova requires; the
        # resource samples).
        self.assertEqual(
            {
                'nova': 'installed',
                'oslo_messaging': 'installed',
                'process': 'installed',
                'sqlalchemy': 'installed',
                'oslo_concurrency': 'installed',
                'db_pool': 'installed',
                'nova_pools': 'installed',
                'keystoneauth': 'installed',
                'keystonemiddleware': 'installed',
                'periodic': 'installed',
                'resources': 'installed',
            },
            result['targets'],
        )
        # the locks are timed
        self.assertIn('oslo_concurrency.lockutils:lock', patched)
        [name] = os.listdir(spans)
        self.assertTrue(name.startswith('cmp-017_nova-compute_'), name)
        with open(os.path.join(spans, name)) as f:
            first = json.loads(f.readline())
        self.assertEqual('process.start', first['ev'])
        self.assertEqual(
            self.backend if self.backend == 'eventlet' else 'threads',
            first['attrs']['mode'],
        )

    def test_bad_option_is_logged_by_name_and_nova_runs(self):
        result, spans, stderr = self._start('buffer_size = lots')
        self.assertFalse(result['active'])
        self.assertIn('[instrument] buffer_size', stderr)
        self.assertFalse(os.path.exists(spans))

    def _instrument_lines(self):
        with open(self.log) as f:
            return [line for line in f if ' instrument.' in line]

    def test_banner_is_in_the_service_log(self):
        # nova sets its logging up after parse_args built the notifiers.
        result, _spans, stderr = self._start(set_up=True)
        self.assertTrue(result['active'])
        lines = self._instrument_lines()
        self.assertEqual(
            1,
            len(
                [
                    line
                    for line in lines
                    if ' INFO instrument.runtime.lifecycle [-] '
                    'instrument: recording nova-compute on cmp-017 to file'
                    in line
                ]
            ),
            lines,
        )
        self.assertEqual(
            1, len([line for line in lines if 'points patched' in line]), lines
        )
        self.assertNotIn('instrument:', stderr)

    def test_nova_manage_records_nothing(self):
        result, spans, _stderr = self._start(prog='nova-manage', set_up=True)
        self.assertFalse(result['active'])
        self.assertFalse(os.path.exists(spans))
        [line] = self._instrument_lines()
        self.assertIn(
            ' INFO instrument.loaders [-] instrument: loaded by '
            'nova-manage, which is not one of [instrument] '
            'programs',
            line,
        )


class NotifierPathEventletTest(NotifierPathTest):
    backend = 'eventlet'
