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
"""The harness itself, without any back end: configuration as README
says, the stand-ins as nova's clients read them, the load mix and the
API-to-analyser vocabulary.  These run (and pass) where MariaDB or
RabbitMQ are missing and the deployment test skips."""

import configparser
import json
import os
import socket
import subprocess
import sys
import threading
import time
import unittest

import fixtures
import glanceclient
from glanceclient import exc as glance_exc
from neutronclient.common import exceptions as neutron_exc
from neutronclient.v2_0 import client as neutron_client
import testtools

from tests.integration import backends
from tests.integration import busy_scheduler
from tests.integration import clockskew
from tests.integration import cloud
from tests.integration import config
from tests.integration import load
from tests.integration import standins
from tests.integration import test_deployment
from tests.integration import wsgi_server


def _endpoints() -> config.Endpoints:
    return config.Endpoints(
        transport_url='rabbit://guest:guest@127.0.0.1:5672/v',
        api_db='mysql+pymysql://root@127.0.0.1/a',
        cell0_db='mysql+pymysql://root@127.0.0.1/c0',
        cell1_db='mysql+pymysql://root@127.0.0.1/c1',
        placement_db='mysql+pymysql://root@127.0.0.1/p',
        placement_url='http://127.0.0.1:1',
        glance_url='http://127.0.0.1:2',
        neutron_url='http://127.0.0.1:3',
        span_dir='/srv/spans',
    )


def _neutron(standin) -> neutron_client.Client:
    return neutron_client.Client(
        endpoint_url=standin.url,
        token=load.HEADERS['X-Auth-Token'],
        auth_strategy='noauth',
    )


def _parse(text: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    return parser


class ConfigTest(testtools.TestCase):
    def test_every_nova_conf_switches_the_library_on_like_readme(self):
        ep = _endpoints()
        for text in (
            config.controller_conf(ep, '/srv/ctl'),
            config.compute_conf(ep, 'compute-9', '/srv/c9', 'fake.FakeDriver'),
        ):
            conf = _parse(text)
            self.assertEqual(
                'instrument',
                conf.get('oslo_messaging_notifications', 'driver'),
            )
            self.assertEqual('true', conf.get('instrument', 'enabled'))
            self.assertEqual(
                '/srv/spans', conf.get('instrument', 'output_dir')
            )

    def test_controller_settings_of_a_test_add_to_the_conf(self):
        conf = _parse(
            config.controller_conf(
                _endpoints(),
                '/srv/ctl',
                extra={
                    'instrument': {'resource_sample_interval': 0.25},
                    'scheduler': {'workers': 2},
                },
            )
        )
        self.assertEqual(
            '0.25', conf.get('instrument', 'resource_sample_interval')
        )
        self.assertEqual('true', conf.get('instrument', 'enabled'))
        self.assertEqual('2', conf.get('scheduler', 'workers'))
        self.assertEqual('3', conf.get('scheduler', 'max_attempts'))

    def test_the_busy_schedulers_burn_holds_the_interpreter(self):
        # test_saturation's scheduler: each burn is one CPU-bound call
        # no other thread of the process runs during (as a loop that
        # never yields holds eventlet's hub)
        burn = busy_scheduler.burner(0.2)
        ticks = []
        stop = threading.Event()

        def tick():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.001)

        ticker = threading.Thread(target=tick)
        ticker.start()
        try:
            time.sleep(0.05)
            cpu = time.thread_time()
            began = time.monotonic()
            burn()
            ended = time.monotonic()
            cpu = time.thread_time() - cpu
        finally:
            stop.set()
            ticker.join()
        self.assertGreater(cpu, 0.1)
        # the tick already running when the burn began, at most
        self.assertLessEqual(
            len([t for t in ticks if began < t < ended]),
            1,
            (ended - began, cpu),
        )

    def test_computes_have_no_database_and_their_own_host(self):
        conf = _parse(
            config.compute_conf(
                _endpoints(), 'compute-9', '/srv/c9', 'fake.FakeDriver'
            )
        )
        self.assertFalse(conf.has_section('database'))
        self.assertFalse(conf.has_section('api_database'))
        self.assertEqual('compute-9', conf.get('DEFAULT', 'host'))
        self.assertEqual(
            'fake.FakeDriver', conf.get('DEFAULT', 'compute_driver')
        )

    def test_api_paste_has_the_filter_and_no_keystone(self):
        with open(cloud.nova_paste_ini()) as f:
            text = config.api_paste_ini(f.read())
        ini = _parse(text)
        for section in (
            'composite:openstack_compute_api_v21',
            'composite:openstack_compute_api_v21_legacy_v2_compatible',
        ):
            words = ini.get(section, 'keystone').split()
            self.assertNotIn('authtoken', words)
            self.assertEqual(
                words.index('compute_req_id') + 1, words.index('instrument')
            )
            self.assertIn('keystonecontext', words)
        self.assertEqual(
            'instrument.loaders.paste:filter_factory',
            ini.get('filter:instrument', 'paste.filter_factory'),
        )


class StandInTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.log = os.path.join(
            self.useFixture(fixtures.TempDir()).path, 'standin.log'
        )

    def _start(self, cls):
        standin = cls(self.log).start()
        self.addCleanup(standin.stop)
        return standin

    def test_glanceclient_reads_the_image_and_the_missing_one(self):
        glance = self._start(standins.Glance)
        client = glanceclient.Client('2', endpoint=glance.url)
        image = client.images.get(standins.IMAGE_ID)
        self.assertEqual('active', image['status'])
        self.assertRaises(
            glance_exc.HTTPNotFound,
            client.images.get,
            test_deployment.MISSING_IMAGE,
        )
        self.assertEqual([], glance.unknown)

    def test_neutronclient_lists_nothing(self):
        neutron = self._start(standins.Neutron)
        client = _neutron(neutron)
        self.assertEqual({'ports': []}, client.list_ports(device_id='x'))
        self.assertEqual(
            ['default'],
            [
                g['name']
                for g in client.list_security_groups()['security_groups']
            ],
        )

    def test_an_unknown_request_is_logged_and_kept(self):
        neutron = self._start(standins.Neutron)
        client = _neutron(neutron)
        self.assertRaises(
            neutron_exc.NotFound,
            client.create_port,
            {'port': {'network_id': 'n'}},
        )
        self.assertEqual(['POST /v2.0/ports'], neutron.unknown)
        with open(self.log) as f:
            self.assertIn('UNKNOWN POST /v2.0/ports', f.read())


class VocabularyTest(testtools.TestCase):
    def _boot(self, server_id='s', status=None, fault=None, builds=()):
        boot = load.Boot('b', 'f', 'i')
        boot.server_id = server_id
        boot.status = status
        boot.fault = fault
        boot.build_hosts = list(builds)
        return boot

    def test_api_answers_map_to_final_states(self):
        state = test_deployment.api_state
        self.assertEqual('api_failure', state(self._boot(server_id=None)))
        self.assertEqual(
            'success', state(self._boot(status='ACTIVE', builds=['compute-1']))
        )
        self.assertEqual(
            'rescheduled_success',
            state(
                self._boot(status='ACTIVE', builds=['compute-3', 'compute-1'])
            ),
        )
        self.assertEqual(
            'scheduling_failure',
            state(
                self._boot(
                    status='ERROR',
                    fault={'message': 'No valid host was found. '},
                )
            ),
        )
        self.assertEqual(
            'scheduling_failure',
            state(
                self._boot(
                    status='ERROR',
                    builds=['compute-3', 'compute-4', 'compute-3'],
                    fault={'message': 'Exceeded maximum number of retries. '},
                )
            ),
        )
        self.assertEqual(
            'compute_failure',
            state(
                self._boot(
                    status='ERROR',
                    builds=['compute-4'],
                    fault={'message': 'Build of instance s aborted: no'},
                )
            ),
        )

    def test_the_load_mixes_every_kind(self):
        boots = test_deployment.plan('img', 'tiny', 'huge')
        self.assertEqual(test_deployment.SERVERS, len(boots))
        kinds = [
            (
                'huge'
                if b.flavor == 'huge'
                else 'noimage'
                if b.image != 'img'
                else 'plain'
            )
            for b in boots
        ]
        self.assertGreater(kinds.count('huge'), 0)
        self.assertGreater(kinds.count('noimage'), 0)
        self.assertGreater(kinds.count('plain'), kinds.count('huge') * 3)

    def test_computes_have_distinct_hosts_and_both_signs_of_skew(self):
        computes = test_deployment.COMPUTES
        self.assertGreaterEqual(len(computes), 3)
        self.assertEqual(len(computes), len({c.host for c in computes}))
        self.assertTrue(any(c.offset_s > 0 for c in computes))
        self.assertTrue(any(c.offset_s < 0 for c in computes))


# What a skewed eventlet nova-compute does with time: a native lock
# waits with a timeout, ``time.sleep`` sleeps; after eventlet's monkey
# patching, the hub sleeps with nothing registered (eventlet's original
# ``time.sleep``).  Then the wall clock and the time slept.
_SKEWED_CHILD = """
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import clockskew
clockskew.install()
t0 = time.monotonic()
lock = threading.Lock()
lock.acquire()
lock.acquire(timeout=0.05)
time.sleep(0.05)
import eventlet
eventlet.monkey_patch()
eventlet.sleep(0.05)
time.sleep(0.05)
print(time.time(), time.monotonic() - t0)
"""


class ClockSkewTest(testtools.TestCase):
    def test_an_eventlet_process_sleeps_on_a_skewed_wall_clock(self):
        try:
            faketime = backends.faketime_library()
        except backends.Unavailable as exc:
            if test_deployment._in_ci():
                raise
            raise unittest.SkipTest(str(exc)) from exc
        env = dict(
            os.environ,
            LD_PRELOAD=faketime,
            FAKETIME='+1.500',
            FAKETIME_DONT_FAKE_MONOTONIC='1',
            FAKETIME_NO_CACHE='1',
        )
        proc = subprocess.run(
            [
                sys.executable,
                '-c',
                _SKEWED_CHILD,
                os.path.dirname(clockskew.__file__),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        now = time.time()
        self.assertEqual(0, proc.returncode, proc.stderr)
        wall, slept = (float(v) for v in proc.stdout.split())
        # the child's wall clock is 1.5 s ahead (it printed before now)
        self.assertGreater(wall - now, 1.0)
        self.assertLess(wall - now, 1.5 + 0.001)
        self.assertGreaterEqual(slept, 0.2)


class ForkingServerTest(testtools.TestCase):
    """nova-api under gunicorn (test_forked_workers): the application
    loaded with the argv nova's oslo.config may read, and the port
    taken as ready without an HTTP request."""

    def test_gunicorn_app_hides_gunicorns_options(self):
        self.useFixture(fixtures.MonkeyPatch('sys.argv', ['gunicorn', '-w']))
        app = wsgi_server.gunicorn_app('json', 'dumps')
        self.assertIs(json.dumps, app)
        self.assertEqual(['json'], sys.argv)

    def test_listening(self):
        port = cloud.free_port()
        self.assertFalse(cloud._listening(port))
        with socket.socket() as s:
            s.bind(('127.0.0.1', port))
            s.listen(1)
            self.assertTrue(cloud._listening(port))
