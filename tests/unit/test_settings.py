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
"""The nova.conf values a process ran with, in its ``process.start``:
allow-listed, never a secret, an unknown option skipped."""

import json
import os

from oslo_config import cfg

from instrument import schema
from instrument.runtime import lifecycle
from instrument.runtime import settings
from tests.unit import base

SECRETS = ('s3cr3t-db-pw', 'rabbit-pw-9', 'ks-pw-7', 'memc-key-5', 'url-pw-3')


def register_nova_like(conf: cfg.ConfigOpts) -> None:
    """A few of nova's (and its libraries') options, secrets included,
    with secrets set the way a real nova.conf sets them."""
    conf.register_opts(
        [
            cfg.StrOpt('transport_url', secret=True),
            cfg.IntOpt('rpc_response_timeout', default=60),
            cfg.IntOpt('max_concurrent_builds', default=10),
            cfg.IntOpt('osapi_compute_workers'),
        ]
    )
    for group in ('database', 'api_database'):
        conf.register_opts(
            [
                cfg.StrOpt('connection', secret=True),
                cfg.StrOpt('slave_connection', secret=True),
                cfg.IntOpt('max_pool_size', default=5),
                cfg.IntOpt('max_overflow', default=50),
                cfg.IntOpt('pool_timeout'),
            ],
            group=group,
        )
    conf.register_opts(
        [
            cfg.StrOpt('password', secret=True),
            cfg.StrOpt('memcache_secret_key', secret=True),
            cfg.ListOpt('memcached_servers'),
            cfg.IntOpt('token_cache_time', default=300),
            # allow-listed, yet secret where registered: skipped
            cfg.IntOpt('http_connect_timeout', secret=True),
            # allow-listed, but holding credentials: dropped
            cfg.StrOpt('http_request_max_retries'),
        ],
        group='keystone_authtoken',
    )
    conf.set_override('transport_url', 'rabbit://nova:rabbit-pw-9@mq:5672/')
    conf.set_override(
        'connection',
        'mysql+pymysql://nova:s3cr3t-db-pw@db/nova',
        group='database',
    )
    conf.set_override(
        'connection',
        'mysql+pymysql://nova:s3cr3t-db-pw@db/nova_api',
        group='api_database',
    )
    conf.set_override('max_pool_size', 1, group='database')
    conf.set_override('max_overflow', 0, group='database')
    conf.set_override('password', 'ks-pw-7', group='keystone_authtoken')
    conf.set_override(
        'memcache_secret_key', 'memc-key-5', group='keystone_authtoken'
    )
    conf.set_override(
        'memcached_servers',
        ['mc1:11211', 'mc2:11211'],
        group='keystone_authtoken',
    )
    conf.set_override('http_connect_timeout', 3, group='keystone_authtoken')
    conf.set_override(
        'http_request_max_retries',
        'http://u:url-pw-3@x/',
        group='keystone_authtoken',
    )


class EffectiveTest(base.TestCase):
    def test_allow_listed_values_and_never_a_secret(self):
        conf = cfg.ConfigOpts()
        conf([], project='t')
        register_nova_like(conf)
        got = settings.effective(conf)
        self.assertEqual(
            {'max_pool_size': 1, 'max_overflow': 0, 'pool_timeout': None},
            got['database'],
        )
        self.assertEqual(
            {'max_pool_size': 5, 'max_overflow': 50, 'pool_timeout': None},
            got['api_database'],
        )
        self.assertEqual(
            {
                'rpc_response_timeout': 60,
                'max_concurrent_builds': 10,
                'osapi_compute_workers': None,
            },
            got['DEFAULT'],
        )
        self.assertEqual(
            {
                'memcached_servers': ['mc1:11211', 'mc2:11211'],
                'token_cache_time': 300,
            },
            got['keystone_authtoken'],
        )
        text = json.dumps(got)
        for secret in SECRETS:
            self.assertNotIn(secret, text)
        for name in (
            'connection',
            'transport_url',
            'password',
            'memcache_secret_key',
            'http_connect_timeout',
        ):
            self.assertNotIn('"%s"' % name, text)

    def test_unknown_groups_and_options_are_skipped(self):
        conf = cfg.ConfigOpts()
        conf([], project='t')
        self.assertEqual({}, settings.effective(conf))
        conf.register_opts([cfg.IntOpt('workers')], group='conductor')
        self.assertEqual(
            {'conductor': {'workers': None}}, settings.effective(conf)
        )

    def test_an_unreadable_value_is_skipped(self):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write('[scheduler]\nmax_attempts = many\nworkers = 4\n')
        conf = cfg.ConfigOpts()
        conf([], project='t', default_config_files=[path])
        conf.register_opts(
            [cfg.IntOpt('max_attempts'), cfg.IntOpt('workers')],
            group='scheduler',
        )
        self.assertRaises(
            cfg.ConfigFileValueError, lambda: conf.scheduler.max_attempts
        )
        self.assertEqual(
            {'scheduler': {'workers': 4}}, settings.effective(conf)
        )

    def test_process_start_names_the_settings(self):
        conf = self.make_conf(sql_timing=False)
        register_nova_like(conf)
        lifecycle.setup(conf, 'nova-conductor', targets=[])
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        [start] = [r for r in records if r['ev'] == 'process.start']
        got = start['attrs'][schema.ATTR_SETTINGS]
        self.assertEqual(1, got['database']['max_pool_size'])
        self.assertEqual(0, got['database']['max_overflow'])
        with open(
            os.path.join(
                self.tmp,
                'spans',
                os.listdir(os.path.join(self.tmp, 'spans'))[0],
            )
        ) as f:
            raw = f.read()
        for secret in SECRETS:
            self.assertNotIn(secret, raw)


class FrontServerTest(base.TestCase):
    """The WSGI server's processes and threads, from its own module."""

    def test_mod_wsgi_daemon_mode(self):
        mod = type(
            'M',
            (),
            {
                'process_group': 'nova-api',
                'maximum_processes': 4,
                'threads_per_process': 1,
            },
        )
        self.assertEqual(
            {
                'server': 'mod_wsgi',
                'process_group': 'nova-api',
                'processes': 4,
                'threads': 1,
            },
            settings.front_server({'mod_wsgi': mod}),
        )

    def test_uwsgi_options(self):
        mod = type(
            'U',
            (),
            {'numproc': 8, 'opt': {'processes': b'2', 'threads': b'3'}},
        )
        self.assertEqual(
            {'server': 'uwsgi', 'processes': 2, 'threads': 3},
            settings.front_server({'uwsgi': mod}),
        )
        bare = type('U', (), {'numproc': 8, 'opt': {}})
        self.assertEqual(
            {'server': 'uwsgi', 'processes': 8},
            settings.front_server({'uwsgi': bare}),
        )

    def test_no_server_module_nothing(self):
        self.assertEqual({}, settings.front_server({}))
        # the mod_wsgi package of PyPI (mod_wsgi-express), not the server
        self.assertEqual(
            {}, settings.front_server({'mod_wsgi': type('P', (), {})})
        )

    def test_a_broken_module_is_nothing_never_an_error(self):
        class Broken:
            @property
            def opt(self):
                raise RuntimeError('no')

        self.assertEqual({}, settings.front_server({'uwsgi': Broken()}))
