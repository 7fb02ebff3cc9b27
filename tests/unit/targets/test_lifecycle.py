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
"""One lifecycle for every target: gate, install, remove, banner."""

import importlib
import json
import os
import sys

import fixtures
from stevedore import extension

from instrument.patching import patcher
from instrument.runtime import lifecycle
from instrument.targets import base as targets_base
from instrument.targets import db_pool
from instrument.targets import keystoneauth
from instrument.targets import nova
from instrument.targets import oslo_concurrency
from instrument.targets import oslo_messaging
from instrument.targets import periodic
from instrument.targets import process
from instrument.targets import resources
from instrument.targets import sqlalchemy
from instrument.targets.nova import pools as nova_pools
from tests.unit import base

SERVICE = '''
class Manager:
    host = 'cmp-3'

    def work(self, context):
        return 'done'
'''

# Loading and checking every installed target, in a fresh interpreter:
# what does it import?
LOAD_AND_CHECK = '''
import json
import sys

from oslo_config import cfg

from instrument import opts
from instrument.runtime import lifecycle

conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
targets, failures = lifecycle.load_targets()
checks = {t.name: t.check(conf) for t in targets}
print(json.dumps({
    'targets': [t.name for t in targets], 'failures': failures,
    'checks': checks,
    'imported': sorted(m for m in ('nova', 'oslo_messaging', 'sqlalchemy',
                                   'oslo_db', 'pymysql', 'oslo_concurrency',
                                   'keystoneauth1', 'keystonemiddleware',
                                   'oslo_service')
                       if m in sys.modules)}))
'''


class Recording(targets_base.PointsTarget):
    """Points, and a log of the lifecycle calls of every instance."""

    calls = []

    def __init__(self, name, points=(), requires=None):
        super().__init__(points)
        self.name = name
        if requires is not None:
            self.requires = requires

    def install(self, ctx):
        self.calls.append(('install', self.name))
        super().install(ctx)

    def remove(self):
        self.calls.append(('remove', self.name))
        super().remove()


class LifecycleTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
        Recording.calls = []
        self.mod_name = self.make_module(SERVICE)
        self.mod = importlib.import_module(self.mod_name)

    def point(self, ev='compute.work'):
        return patcher.PatchPoint(self.mod_name, 'Manager.work', ev, 'compute')

    def records(self):
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        return records

    def test_installed_in_turn_removed_in_reverse(self):
        active = lifecycle.setup(
            self.make_conf(sql_timing=False),
            'nova-compute',
            targets=[
                Recording('a', [self.point()]),
                Recording('b'),
                Recording('c'),
            ],
        )
        self.assertEqual(['a', 'b', 'c'], [t.name for t in active.targets])
        self.assertEqual('done', self.mod.Manager().work(None))
        lifecycle.teardown()
        self.assertEqual(
            [
                ('install', 'a'),
                ('install', 'b'),
                ('install', 'c'),
                ('remove', 'c'),
                ('remove', 'b'),
                ('remove', 'a'),
            ],
            Recording.calls,
        )
        self.assertFalse(
            hasattr(self.mod.Manager.__dict__['work'], '__instrument_point__')
        )
        self.assertEqual(
            ['compute.work'],
            [r['ev'] for r in self.records() if r['ph'] == 'X'],
        )

    def test_missing_or_unsupported_distribution_is_reported(self):
        active = lifecycle.setup(
            self.make_conf(sql_timing=False),
            'nova-compute',
            targets=[
                Recording(
                    'absent',
                    [self.point()],
                    requires={'no-such-distribution-x': ''},
                ),
                Recording(
                    'old',
                    [self.point('compute.old')],
                    requires={'oslo.config': '<1.0'},
                ),
                Recording(
                    'ok',
                    [self.point('compute.ok')],
                    requires={'oslo.config': '>=1.0'},
                ),
            ],
        )
        self.assertEqual(['ok'], [t.name for t in active.targets])
        self.assertEqual(
            'skipped: no-such-distribution-x is not installed',
            active.status['absent'],
        )
        self.assertRegex(
            active.status['old'],
            r'^skipped: oslo.config \S+ is not supported '
            r'\(needs <1.0\)$',
        )
        self.assertIn('oslo.config', self.logger.output)
        self.assertIn('is not supported by the old target', self.logger.output)
        self.mod.Manager().work(None)
        lifecycle.teardown()
        records = self.records()
        self.assertEqual(
            ['compute.ok'], [r['ev'] for r in records if r['ph'] == 'X']
        )
        start = records[0]
        self.assertEqual('process.start', start['ev'])
        self.assertEqual(active.status, start['attrs']['targets'])
        self.assertEqual(
            ['%s:Manager.work' % self.mod_name],
            start['attrs']['points']['patched'],
        )
        self.assertEqual(
            [('install', 'ok'), ('remove', 'ok')], Recording.calls
        )

    def test_own_points_keep_the_process_wide_targets(self):
        active = lifecycle.setup(
            self.make_conf(), 'nova-compute', points=[self.point()]
        )
        self.assertEqual(
            {
                'points': 'installed',
                'process': 'installed',
                'sqlalchemy': 'installed',
            },
            active.status,
        )
        self.assertIn('os:_exit', active.banner()['patched'])
        self.assertIsNotNone(active.target('sqlalchemy').timing)
        lifecycle.teardown()
        active = lifecycle.setup(
            self.make_conf(sql_timing=False),
            'nova-compute',
            points=[self.point()],
        )
        self.assertEqual(
            'skipped: [instrument] sql_timing is off',
            active.status['sqlalchemy'],
        )

    def test_installed_targets_by_entry_point(self):
        # nova not installed: reported, and the others run.
        self.useFixture(
            _Versions({'oslo.messaging': '14.9.0', 'SQLAlchemy': '2.0.40'})
        )
        active = lifecycle.setup(self.make_conf(), 'nova-compute')
        self.assertEqual(
            {
                'db_pool': 'installed',
                'nova': 'skipped: nova is not installed',
                'keystoneauth': 'skipped: keystoneauth1 is not installed',
                'keystonemiddleware': (
                    'skipped: keystonemiddleware is not installed'
                ),
                'nova_pools': 'skipped: nova is not installed',
                'oslo_concurrency': (
                    'skipped: oslo.concurrency is not installed'
                ),
                'periodic': 'skipped: oslo.service is not installed',
                'oslo_messaging': 'installed',
                'process': 'installed',
                'resources': 'installed',
                'sqlalchemy': 'installed',
            },
            active.status,
        )
        self.assertIn(
            'oslo_messaging.rpc.dispatcher:RPCDispatcher._do_dispatch',
            active.banner()['patched'] + active.banner()['pending'],
        )
        self.assertEqual(0, active.point_state('os:_exit').faults)

    def test_loading_and_checking_imports_no_library(self):
        proc = self.run_script(LOAD_AND_CHECK)
        self.assertEqual(0, proc.returncode, proc.stderr)
        out = json.loads(proc.stdout)
        self.assertEqual(
            [
                'db_pool',
                'keystoneauth',
                'keystonemiddleware',
                'nova',
                'nova_pools',
                'oslo_concurrency',
                'oslo_messaging',
                'periodic',
                'process',
                'resources',
                'sqlalchemy',
            ],
            out['targets'],
        )
        self.assertEqual({}, out['failures'])
        self.assertEqual('nova is not installed', out['checks']['nova'])
        self.assertEqual([], out['imported'])


class EntryPointTest(base.TestCase):
    def test_every_entry_point_is_a_target_of_its_name(self):
        targets, failures = lifecycle.load_targets()
        self.assertEqual({}, failures)
        self.assertEqual(
            {
                'db_pool': db_pool.DbPoolTarget,
                'keystoneauth': keystoneauth.KeystoneauthTarget,
                'keystonemiddleware': keystoneauth.KeystoneMiddlewareTarget,
                'nova': nova.NovaTarget,
                'nova_pools': nova_pools.NovaPoolsTarget,
                'oslo_concurrency': oslo_concurrency.OsloConcurrencyTarget,
                'oslo_messaging': oslo_messaging.OsloMessagingTarget,
                'periodic': periodic.PeriodicTarget,
                'process': process.ProcessTarget,
                'resources': resources.ResourcesTarget,
                'sqlalchemy': sqlalchemy.SqlAlchemyTarget,
            },
            {t.name: type(t) for t in targets},
        )
        for target in targets:
            self.assertIsInstance(target, targets_base.Target)

    def test_a_function_returning_points_is_still_a_target(self):
        # The entry point's first form: a function returning points.
        point = patcher.PatchPoint('x_mod', 'f', 'x.f', None)
        legacy = extension.Extension('legacy', None, None, [point])
        manager = extension.ExtensionManager.make_test_instance([legacy])
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.lifecycle.extension.ExtensionManager',
                lambda *a, **k: manager,
            )
        )
        [target], failures = lifecycle.load_targets()
        self.assertEqual({}, failures)
        self.assertIsInstance(target, targets_base.PointsTarget)
        self.assertEqual('legacy', target.name)
        self.assertEqual([point], target.points(None))

    def test_nova_version_gate(self):
        target = nova.NovaTarget()
        conf = self.make_conf()
        fake = {'nova': '28.1.0'}
        self.useFixture(_Versions(fake))
        self.assertEqual(
            'nova 28.1.0 is not supported (needs >=29.0.0)', target.check(conf)
        )
        fake['nova'] = '29.2.0'
        self.assertIsNone(target.check(conf))
        self.assertIn('nova 29.2.0 was not surveyed', self.logger.output)
        for surveyed in ('29.4.0', '31.3.1', '33.0.2', '34.0.0'):
            fake['nova'] = surveyed
            self.assertIsNone(target.check(conf))
            self.assertNotIn(
                'nova %s was not surveyed' % surveyed, self.logger.output
            )
        self.assertNotIn('nova', sys.modules)

    def test_unsurveyed_release_is_warned_once_per_process(self):
        conf = self.make_conf()
        fake = {'nova': '35.0.0'}
        self.useFixture(_Versions(fake))
        for target in (
            nova.NovaTarget(),
            nova_pools.NovaPoolsTarget(),
            nova.NovaTarget(),
        ):
            self.assertIsNone(target.check(conf))
        self.assertEqual(
            1, self.logger.output.count('nova 35.0.0 was not surveyed')
        )
        fake['nova'] = '35.1.0'  # another version: warned too
        self.assertIsNone(nova.NovaTarget().check(conf))
        self.assertEqual(
            1, self.logger.output.count('nova 35.1.0 was not surveyed')
        )

    def test_point_release_of_a_surveyed_release_is_no_warning(self):
        conf = self.make_conf()
        fake = {'nova': '34.0.1'}
        self.useFixture(_Versions(fake))
        for target in (nova.NovaTarget(), nova_pools.NovaPoolsTarget()):
            self.assertIsNone(target.check(conf))
        self.assertNotIn('WARNING', self.logger.output)
        self.assertEqual(
            1,
            self.logger.output.count(
                'INFO instrument.targets.base instrument: nova 34.0.1 is a '
                'point release of 34.0.0, on which the points were '
                'surveyed'
            ),
        )
        fake['nova'] = '33.0.1'  # an earlier point of 33.0.2: the same
        self.assertIsNone(nova.NovaTarget().check(conf))
        self.assertNotIn('WARNING', self.logger.output)


class _Versions(fixtures.Fixture):
    """Installed versions as ``versions`` says."""

    def __init__(self, versions):
        super().__init__()
        self.versions = versions

    def _setUp(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.base.distribution_version',
                self.versions.get,
            )
        )
