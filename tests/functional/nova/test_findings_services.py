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
"""Rules 5 (``identity_slow``) and 6 (``network_failures``) on real
nova, each on an injected cause, and silent on the same workload with
the knob set well (issue 29).

Rule ``identity_slow``: nova-api with the real keystonemiddleware
(``test_services.RealAuthToken``) against a keystone that takes
``KEYSTONE_SLOW_S`` to validate a token, and
``[keystone_authtoken] token_cache_time = -1`` (the cache off): every
API request validates its token; silent with the cache on (nova's
default, 300 s): the token is validated once.

Rule ``network_failures``: neutron (nova's NeutronFixture, served on a
real socket: ``instrument_demo.standins``) answering the port creation
``NEUTRON_LATE_S`` late, with ``[neutron] timeout = 1``: the compute's
``POST /v2.0/ports`` times out reading, the builds are aborted; silent
with nova's default (no time-out): the same late answers build the
servers.  Its ports not bound: neutron answering the compute's binding
with ``binding:vif_type`` ``binding_failed`` and ``[scheduler]
max_attempts`` 1: nova raises ``PortBindingFailed``, the boot fails,
the finding names ``max_attempts``; silent with the binding fine.
"""

import json
import os
import threading

import fixtures
from oslo_config import cfg
import testtools

from instrument.analysis import exposition
from instrument.analysis import follow
from instrument.analysis import pipeline
from instrument.analysis import rules
from instrument_demo import cmd as demo_cmd
from instrument_demo import inject
from instrument_demo import standins
from tests.functional.nova import base
from tests.functional.nova import test_demo
from tests.functional.nova import test_services

CONF = cfg.CONF
KEYSTONE_SLOW_S = 0.5
# keystonemiddleware's time-out, and a keystone answering later
KEYSTONE_TIMEOUT_S = 1
KEYSTONE_LATE_S = 2.0
NEUTRON_LATE_S = 2.0
NETWORK = test_services.NETWORK


def fired(report: dict, rule: str) -> list:
    return [f for f in report['findings']['findings'] if f['rule'] == rule]


# -- rule 5 ------------------------------------------------------------------


class _Identity(test_services.RealAuthToken):
    cache_time = None  # keystonemiddleware's default (300 s)

    def keystone_app(self, token: str, service_token: str):
        # a loaded keystone validating PKI or UUID tokens
        return standins.Keystone(token, service_token, delay=KEYSTONE_SLOW_S)

    def setUp(self):
        # keystonemiddleware's options (registered by its import in
        # real_auth_token) before the instrumentation writes the values
        # the process runs with
        from keystonemiddleware.auth_token import _opts  # noqa: F401

        if self.cache_time is not None:
            self.flags(
                token_cache_time=self.cache_time, group='keystone_authtoken'
            )
        super().setUp()

    def boot_two(self) -> dict:
        """Two servers, one after the other: the report."""
        uuids = []
        for i in range(2):
            server = self._build_server(name='k%d' % i, networks='none')
            server = self.api.post_server({'server': server})
            self.wait_for_state(server, 'ACTIVE')
            uuids.append(server['id'])
        self.spans(
            until=lambda spans: (
                {
                    i
                    for r in spans.done('compute.build')
                    for i in r.get('inst') or ()
                }
                >= set(uuids)
            ),
            timeout=60,
        )
        return pipeline.analyse([self.span_dir])


class IdentitySlowTest(_Identity):
    cache_time = -1

    def test_fires_naming_token_cache_time(self):
        report = self.boot_two()
        # every API request validated its token, slowly
        self.assertGreaterEqual(self.keystone.validations, 4)
        [f] = fired(report, 'identity_slow')
        figures = f['figures']
        self.assertGreaterEqual(figures['slow'], 4)
        self.assertEqual(figures['slow'], figures['validations'])
        self.assertGreaterEqual(f['sure']['share'], 0.05)
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        cache = knobs[('keystone_authtoken', 'token_cache_time')]
        self.assertEqual(
            {('api', -1, True)},
            {(v['svc'], v['value'], v['recorded']) for v in cache['values']},
        )
        self.assertIn('the token cache is off', cache['direction'])
        servers = knobs[('keystone_authtoken', 'memcached_servers')]
        self.assertEqual({'api'}, {v['svc'] for v in servers['values']})
        self.assertIn(('token', 'provider'), knobs)
        ids = {r['req'] for r in report['requests']}
        self.assertTrue(f['requests'])
        self.assertLessEqual(set(f['requests']), ids)


class IdentityCachedTest(_Identity):
    def test_silent(self):
        report = self.boot_two()
        # the same slow keystone, asked once per pooled cache
        self.assertGreater(self.keystone.validations, 0)
        self.assertLess(self.keystone.validations, 3)
        self.assertEqual(
            [], fired(report, 'identity_slow'), report['findings']
        )


# -- rule 6 ------------------------------------------------------------------


class _Network(base.InstrumentedCloud):
    """neutron on a real socket, answering the port creation
    ``NEUTRON_LATE_S`` late."""

    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)
    timeout = None  # nova's default: keystoneauth1's, none

    def setUp(self):
        if self.timeout is not None:
            self.flags(timeout=self.timeout, http_retries=0, group='neutron')
        super().setUp()
        local = self.useFixture(
            standins.LocalServer(standins.NeutronAPI(self.neutron))
        )
        self.flags(endpoint_override=local.url, group='neutron')
        standins.reset_neutron_session()  # the session takes the time-out
        answer = threading.Event()
        self.addCleanup(answer.set)
        create_port = self.neutron.create_port

        def late(body=None):
            answer.wait(NEUTRON_LATE_S)
            return create_port(body=body)

        self.useFixture(
            base.cloud.fixtures.MockPatchObject(
                self.neutron, 'create_port', side_effect=late
            )
        )

    def boot_two(self, state: str) -> dict:
        """Two servers on the network at once, each ending in
        ``state``: the report."""
        servers = [
            self.api.post_server(
                {
                    'server': self._build_server(
                        name='n%d' % i, networks=NETWORK
                    )
                }
            )
            for i in range(2)
        ]
        uuids = {s['id'] for s in servers}
        self.spans(
            until=lambda spans: (
                {
                    i
                    for r in spans.done('compute.build')
                    for i in r.get('inst') or ()
                }
                >= uuids
            ),
            timeout=60,
        )
        for server in servers:
            self.wait_for_state(server, state)
        return pipeline.analyse([self.span_dir])


class NetworkTimeoutTest(_Network):
    timeout = 1

    def test_fires_naming_the_call_and_neutron_timeout(self):
        report = self.boot_two('ERROR')
        found = {f['key']: f for f in fired(report, 'network_failures')}
        f = found.pop('network_failures:POST /v2.0/ports')
        # on a loaded machine another call may take longer than the
        # second too: a finding of its own, of the same time-out
        for other in found.values():
            self.assertEqual(
                {'read_timeout'}, set(other['figures']['errors']), other
            )
        figures = f['figures']
        self.assertEqual({'read_timeout': 2}, figures['errors'])
        self.assertEqual(
            (2, 2), (figures['timeouts'], figures['requests_failed'])
        )
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        timeout = knobs[('neutron', 'timeout')]
        self.assertEqual(
            [('host1', 'compute', 1, True)],
            [
                (v['host'], v['svc'], v['value'], v['recorded'])
                for v in timeout['values']
            ],
        )
        self.assertIn('raise above', timeout['direction'])
        self.assertEqual(
            [0],
            [v['value'] for v in knobs[('neutron', 'http_retries')]['values']],
        )
        self.assertEqual(
            [0],
            [
                v['value']
                for v in knobs[('DEFAULT', 'network_allocate_retries')][
                    'values'
                ]
            ],
        )
        ids = {r['req'] for r in report['requests']}
        self.assertEqual(2, len(f['requests']))
        self.assertLessEqual(set(f['requests']), ids)


class NetworkPatientTest(_Network):
    def test_silent(self):
        report = self.boot_two('ACTIVE')
        self.assertEqual(
            [], fired(report, 'network_failures'), report['findings']
        )
        # the same late answers
        [port] = [
            r
            for r in report['services']
            if r['operation'] == 'boot'
            and r['route'] == '/v2.0/ports'
            and r['method'] == 'POST'
        ]
        self.assertGreaterEqual(port['max_us'], NEUTRON_LATE_S * 1e6)


class _Binding(base.InstrumentedCloud):
    """neutron (nova's NeutronFixture behind nova's client over HTTP)
    answering the compute's binding of a port (``PUT /v2.0/ports/{id}``
    with ``binding:host_id``) with ``binding:vif_type`` =
    ``binding_failed`` when ``unbindable``: nova raises
    ``PortBindingFailed`` and reschedules; with ``[scheduler]
    max_attempts`` 1 the boot fails."""

    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)
    unbindable = False

    def setUp(self):
        self.flags(max_attempts=1, group='scheduler')
        super().setUp()
        if not self.unbindable:
            return
        update_port = self.neutron.update_port

        def unbound(port_id, body=None):
            answer = update_port(port_id, body=body)
            if (body or {}).get('port', {}).get('binding:host_id'):
                answer['port']['binding:vif_type'] = 'binding_failed'
            return answer

        self.useFixture(
            base.cloud.fixtures.MockPatchObject(
                self.neutron, 'update_port', side_effect=unbound
            )
        )

    def boot_one(self, state: str) -> dict:
        server = self.api.post_server(
            {'server': self._build_server(name='b0', networks=NETWORK)}
        )
        self.spans(
            until=lambda spans: (
                server['id']
                in {
                    i
                    for r in spans.done('compute.build')
                    for i in r.get('inst') or ()
                }
            ),
            timeout=60,
        )
        self.wait_for_state(server, state)
        return pipeline.analyse([self.span_dir])


class PortBindingFailedTest(_Binding):
    unbindable = True

    def test_fires_naming_max_attempts(self):
        report = self.boot_one('ERROR')
        found = {f['key']: f for f in fired(report, 'network_failures')}
        f = found['network_failures:port_binding']
        self.assertIn('PortBindingFailed', f['seen'])
        self.assertEqual(1, f['figures']['failures'])
        self.assertEqual(0, f['figures']['recovered'])
        [knob] = f['settings']
        self.assertEqual(
            ('scheduler', 'max_attempts'), (knob['section'], knob['option'])
        )
        self.assertEqual(
            [1], [v['value'] for v in knob['values'] if v['recorded']]
        )
        ids = {r['req'] for r in report['requests']}
        self.assertEqual(1, len(f['requests']))
        self.assertLessEqual(set(f['requests']), ids)


class PortBindingFineTest(_Binding):
    def test_silent(self):
        report = self.boot_one('ACTIVE')
        self.assertEqual(
            [], fired(report, 'network_failures'), report['findings']
        )


# -- the demo's --inject -----------------------------------------------------


class DemoInjectionsTest(testtools.TestCase):
    """``instrument-demo --inject`` has a cause for every rule the
    in-process cloud can show (the others are ``NOT_INJECTABLE``, each
    with its reason), and its help names the finding each makes."""

    def test_one_cause_per_rule(self):
        self.assertEqual(
            {name: i.rule for name, i in inject.INJECTIONS.items()},
            demo_cmd.INJECTABLE,
        )
        self.assertEqual(
            {name for name, i in inject.INJECTIONS.items() if i.threads_only},
            demo_cmd.THREADS_ONLY,
        )
        # every rule has a cause or a reason why the demo cannot show it
        self.assertEqual(
            {r.id for r in rules.RULES} - set(demo_cmd.NOT_INJECTABLE),
            set(demo_cmd.INJECTABLE.values()),
        )
        self.assertFalse(
            set(demo_cmd.NOT_INJECTABLE) & set(demo_cmd.INJECTABLE.values())
        )

    def test_parsed_and_checked(self):
        args = demo_cmd.build_parser().parse_args(
            ['--inject', 'identity-slow', '--inject', 'network-fail']
        )
        self.assertEqual(['identity-slow', 'network-fail'], args.inject)
        self.assertIsNone(demo_cmd.build_parser().parse_args([]).inject)
        args = demo_cmd.build_parser().parse_args(
            ['--inject', 'db-pool', '--mode', 'eventlet']
        )
        self.assertRaises(SystemExit, demo_cmd._check, args)


class IdentityTimeoutTest(_Identity):
    """keystone slower than ``[keystone_authtoken] http_connect_timeout``:
    nova-api cannot validate the token (keystonemiddleware lets
    keystoneauth1's time-out through: nova-api answers 500)."""

    def setUp(self):
        self.flags(
            http_connect_timeout=KEYSTONE_TIMEOUT_S,
            http_request_max_retries=0,
            group='keystone_authtoken',
        )
        super().setUp()
        self.keystone.delay = KEYSTONE_LATE_S

    def test_fires_on_validations_timing_out(self):
        from nova.tests.functional.api import client

        for _ in range(2):
            exc = self.assertRaises(
                client.OpenStackApiException, self.api.api_get, '/servers'
            )
            self.assertEqual(500, exc.response.status_code)
        self.spans(
            until=lambda spans: len(spans.done('api.auth_token')) >= 2,
            timeout=30,
        )
        report = pipeline.analyse([self.span_dir])
        [f] = fired(report, 'identity_slow')
        figures = f['figures']
        self.assertEqual(2, figures['validations_failed'])
        self.assertEqual(2, figures['timeouts'])
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        connect = knobs[('keystone_authtoken', 'http_connect_timeout')]
        self.assertEqual(
            {('api', KEYSTONE_TIMEOUT_S, True)},
            {(v['svc'], v['value'], v['recorded']) for v in connect['values']},
        )
        # the cache is on: the knob is not blamed
        self.assertIn(
            'leave',
            knobs[('keystone_authtoken', 'token_cache_time')]['direction'],
        )


class DemoInjectTest(testtools.TestCase):
    """``instrument-demo --inject`` (README's example and the network
    cause): each report opens with the finding of its cause, and only
    that one."""

    mode = 'threads'
    _demo = test_demo.DemoTest._demo

    def _findings(self, cause: str) -> list:
        out = self.useFixture(fixtures.TempDir()).path
        proc = self._demo(
            out,
            '--inject',
            cause,
            '--servers',
            '4',
            '--concurrency',
            '2',
            '--computes',
            '2',
            '--boots-only',
            '--fail',
            '0',
            '--reschedule',
            '0',
        )
        self.assertIn('injected causes: %s' % cause, proc.stdout)
        with open(os.path.join(out, 'report.json')) as f:
            found = json.load(f)['findings']['findings']
        # instrument-report follow --once exports the same findings
        # (rule, setting, service; a setting no service ran with, as
        # keystone's token provider, with neither) as the demo's batch
        # report
        printed = {
            (f['rule'], s['section'], s['option'], v['host'], v['svc'])
            for f in found
            for s in f['settings']
            for v in s['values'] or [{'host': '', 'svc': ''}]
        }
        live = follow.once([os.path.join(out, 'spans')])
        self.assertEqual(
            printed, set(live.series()[exposition.FINDING]), found
        )
        return found

    def test_identity_slow(self):
        found = self._findings('identity-slow')
        self.assertEqual(['identity_slow'], [f['rule'] for f in found])

    def test_network_fail(self):
        found = self._findings('network-fail')
        self.assertEqual({'network_failures'}, {f['rule'] for f in found})
        self.assertIn(
            'network_failures:POST /v2.0/ports', {f['key'] for f in found}
        )


class DemoInjectEventletTest(DemoInjectTest):
    mode = 'eventlet'
