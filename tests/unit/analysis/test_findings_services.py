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
"""Rules 5 (``identity_slow``) and 6 (``network_failures``) on span
files: each fires with its cause and is silent on the same requests
without it, naming the value each affected service ran with."""

import json
import os

import testtools

from instrument.analysis import rules
from instrument.analysis.render import text as report_text
from tests.unit.analysis import test_findings
from tests.unit.analysis import test_waits

MS = test_waits.MS
T0 = test_waits.T0
start = test_findings.start


def call(
    log,
    req,
    parent,
    t,
    dur,
    attrs,
    svc='api',
    host='ctl-1',
    ev='ksa.request',
    st='ok',
    err=None,
):
    log.n += 1
    rec = {
        'v': 1,
        'ph': 'X',
        'seq': log.n,
        'ts': T0 + t,
        'dur_us': dur,
        'host': host,
        'svc': svc,
        'pid': 9,
        'ev': ev,
        'span': 'k%015x' % log.n,
        'parent': parent,
        'req': req,
        'st': st,
        'attrs': attrs,
    }
    if err:
        rec['err'] = err
    log.lines.append(json.dumps(rec))
    return rec['span']


class View(dict):
    """A report view of sections' values, without requests."""

    summaries: list = []


class IdentityRuleTest(test_findings.RuleTestCase):
    """API requests of 400 ms, each validating its token (the cache
    off) in ``validate_us`` through a keystone call inside the
    validation."""

    def run_with(
        self,
        validate_us,
        n=6,
        cache_time=-1,
        timeout=False,
        slow=None,
        req_us=400 * MS,
    ):
        log = test_waits._Log()
        start(
            log,
            'ctl-1',
            'api',
            {
                'keystone_authtoken': {
                    'token_cache_time': cache_time,
                    'memcached_servers': None,
                    'http_connect_timeout': None,
                }
            },
        )
        for i in range(n):
            req = 'req-%d' % i
            t = i * 1000 * MS
            us = validate_us if slow is None or i < slow else 5 * MS
            top = log.add(
                'api.compute.create',
                t,
                max(req_us, us + 20 * MS),
                req,
                svc='api',
                host='ctl-1',
            )
            failed = timeout and i == 0
            auth = call(
                log,
                req,
                top,
                t + 1,
                us + i * MS,
                None,
                ev='api.auth_token',
                st='error' if failed else 'ok',
                err={
                    'cls': 'keystoneauth1.exceptions.connection.'
                    'ConnectTimeout',
                    'msg': 'timed out',
                }
                if failed
                else None,
            )
            attrs = {
                'service_type': 'identity',
                'method': 'GET',
                'route': '/v3/auth/tokens',
                'status': 200,
                'attempts': 1,
            }
            err = None
            if timeout and i == 0:
                attrs = dict(attrs, status=None, failure='read_timeout')
                err = {
                    'cls': 'keystoneauth1.exceptions.connection.'
                    'ConnectTimeout',
                    'msg': 'identity GET /v3/auth/tokens: read timeout',
                }
            call(
                log,
                req,
                auth,
                t + 2,
                us + i * MS - 10,
                attrs,
                st='error' if err else 'ok',
                err=err,
            )
        return self.analyse(log)

    def test_fires_on_slow_validations_naming_token_cache_time(self):
        report = self.run_with(300 * MS)
        [f] = self.fired(report, 'identity_slow')
        self.assertEqual('identity_slow', f['key'])
        figures = f['figures']
        self.assertEqual(
            (6, 6, 0),
            (figures['validations'], figures['slow'], figures['timeouts']),
        )
        # the validations' GET to keystone is inside them: not a token
        # request of its own
        self.assertEqual(0, figures['token_requests'])
        self.assertAlmostEqual(
            sum(300 * MS + i * MS for i in range(6)) / (6 * 400 * MS),
            f['sure']['share'],
            2,
        )
        self.assertEqual('req-5', f['requests'][0])
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        cache = knobs[('keystone_authtoken', 'token_cache_time')]
        self.assertEqual(
            [{'host': 'ctl-1', 'svc': 'api', 'value': -1, 'recorded': True}],
            cache['values'],
        )
        self.assertIn('the token cache is off', cache['direction'])
        self.assertIn(
            'set:',
            knobs[('keystone_authtoken', 'memcached_servers')]['direction'],
        )
        self.assertIn('fernet', knobs[('token', 'provider')]['direction'])
        self.assertIn(
            'token_cache_time -> raise above 0', report_text.render(report)
        )

    def test_silent_when_validations_are_fast(self):
        report = self.run_with(5 * MS)
        self.assertEqual([], self.fired(report, 'identity_slow'))

    def test_a_few_slow_ones_are_not_a_finding(self):
        # a cached token: validated slowly once or twice
        report = self.run_with(300 * MS, n=2, cache_time=300)
        self.assertEqual([], self.fired(report, 'identity_slow'))

    def test_a_few_slow_ones_among_many_are_not_a_finding(self):
        # short requests (status polls): identity is much of their
        # time, 3 slow validations of 80 are keystone's hiccups
        report = self.run_with(
            300 * MS, n=80, slow=3, cache_time=300, req_us=30 * MS
        )
        self.assertEqual([], self.fired(report, 'identity_slow'))
        report = self.run_with(
            300 * MS, n=80, slow=8, cache_time=300, req_us=30 * MS
        )
        [f] = self.fired(report, 'identity_slow')
        self.assertEqual(8, f['figures']['slow'])

    def test_one_time_out_is(self):
        report = self.run_with(5 * MS, cache_time=300, timeout=True)
        [f] = self.fired(report, 'identity_slow')
        self.assertEqual(1, f['figures']['timeouts'])
        # keystonemiddleware let keystoneauth1's time-out through
        self.assertEqual(1, f['figures']['validations_failed'])
        self.assertEqual('req-0', f['requests'][0])
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        self.assertIn(
            'leave',
            knobs[('keystone_authtoken', 'token_cache_time')]['direction'],
        )
        self.assertIn(('keystone_authtoken', 'http_connect_timeout'), knobs)


class NetworkRuleTest(test_findings.RuleTestCase):
    """Boots whose compute creates a port on neutron; ``failing`` of
    them fail with ``failure`` (a class, or an HTTP status)."""

    def run_with(self, failing=2, failure='read_timeout', n=4):
        log = test_waits._Log()
        start(
            log,
            'cmp-1',
            'compute',
            {
                'neutron': {'timeout': 1, 'http_retries': 0},
                'DEFAULT': {'network_allocate_retries': 0},
            },
        )
        for i in range(n):
            req = 'req-%d' % i
            t = i * 3000 * MS
            top = log.add(
                'compute.build_and_run_instance',
                t,
                1500 * MS,
                req,
                host='cmp-1',
            )
            attrs = {
                'service_type': 'network',
                'method': 'POST',
                'route': '/v2.0/ports',
                'status': 201,
                'attempts': 1,
            }
            st, err, dur = 'ok', None, 200 * MS
            if i < failing:
                dur = 1000 * MS + i
                if isinstance(failure, int):
                    attrs = dict(attrs, status=failure)
                else:
                    attrs = dict(attrs, status=None, failure=failure)
                    st = 'error'
                    err = {
                        'cls': 'keystoneauth1.exceptions.connection.'
                        'ConnectTimeout',
                        'msg': 'network POST /v2.0/ports: read timeout',
                    }
            call(
                log,
                req,
                top,
                t + 5,
                dur,
                attrs,
                svc='compute',
                host='cmp-1',
                st=st,
                err=err,
            )
        return self.analyse(log)

    def test_fires_on_time_outs_naming_the_call_and_timeout(self):
        report = self.run_with()
        [f] = self.fired(report, 'network_failures')
        self.assertEqual('network_failures:POST /v2.0/ports', f['key'])
        figures = f['figures']
        self.assertEqual(
            (4, 2, 2),
            (figures['calls'], figures['failed'], figures['timeouts']),
        )
        self.assertEqual({'read_timeout': 2}, figures['errors'])
        self.assertEqual(200 * MS, figures['ok_max_us'])
        self.assertAlmostEqual(0.5, f['sure']['share'])
        self.assertEqual(['req-1', 'req-0'], f['requests'])
        knobs = {(s['section'], s['option']): s for s in f['settings']}
        timeout = knobs[('neutron', 'timeout')]
        self.assertEqual(
            [
                {
                    'host': 'cmp-1',
                    'svc': 'compute',
                    'value': 1,
                    'recorded': True,
                }
            ],
            timeout['values'],
        )
        self.assertIn('raise above neutron', timeout['direction'])
        self.assertIn('leave', knobs[('neutron', 'http_retries')]['direction'])
        self.assertEqual(
            0,
            knobs[('DEFAULT', 'network_allocate_retries')]['values'][0][
                'value'
            ],
        )
        self.assertIn(
            'neutron POST /v2.0/ports failing on compute@cmp-1',
            report_text.render(report),
        )

    def test_server_errors_are(self):
        report = self.run_with(failure=500)
        [f] = self.fired(report, 'network_failures')
        self.assertEqual({'http_500': 2}, f['figures']['errors'])
        self.assertIn('leave', f['settings'][0]['direction'])

    def test_client_errors_are_not(self):
        # a 404 or a 409 is the caller's: nova handles them
        report = self.run_with(failure=409)
        self.assertEqual([], self.fired(report, 'network_failures'))

    def test_silent_without_failures(self):
        report = self.run_with(failing=0)
        self.assertEqual([], self.fired(report, 'network_failures'))
        self.assertIn('network_failures', report['findings']['rules'])

    def test_vif_plug_time_outs_name_vif_plugging_timeout(self):
        ev = rules.Evidence(
            View(
                {
                    'failures': [
                        {
                            'cls': 'nova.exception.'
                            'VirtualInterfaceCreateException',
                            'count': 2,
                            'recovered': 0,
                            'requests': ['req-1', 'req-2'],
                        }
                    ],
                    'processes': [
                        {
                            'host': 'cmp-1',
                            'svc': 'compute',
                            'pid': 9,
                            'settings': {
                                'DEFAULT': {
                                    'vif_plugging_timeout': 300,
                                    'vif_plugging_is_fatal': True,
                                }
                            },
                        }
                    ],
                }
            ),
            [],
        )
        [f] = rules.network_failures(ev)
        self.assertEqual('network_failures:vif_plugging', f['key'])
        timeout, fatal = f['settings']
        self.assertEqual(
            ('DEFAULT', 'vif_plugging_timeout'),
            (timeout['section'], timeout['option']),
        )
        self.assertEqual(300, timeout['values'][0]['value'])
        self.assertEqual('vif_plugging_is_fatal', fatal['option'])
        self.assertEqual(['req-1', 'req-2'], f['requests'])


class NovaNetworkErrorsTest(testtools.TestCase):
    def test_ports_not_bound_name_the_binding_and_max_attempts(self):
        ev = rules.Evidence(
            View(
                {
                    'failures': [
                        {
                            'cls': 'nova.exception.PortBindingFailed',
                            'count': 3,
                            'recovered': 2,
                            'requests': ['req-1'],
                        }
                    ],
                    'processes': [
                        {
                            'host': 'ctl-1',
                            'svc': 'conductor',
                            'pid': 9,
                            'settings': {'scheduler': {'max_attempts': 3}},
                        }
                    ],
                }
            ),
            [],
        )
        [f] = rules.network_failures(ev)
        self.assertEqual('network_failures:port_binding', f['key'])
        self.assertIn('PUT /v2.0/ports/{id}', f['seen'])
        self.assertEqual(
            (3, 2), (f['figures']['failures'], f['figures']['recovered'])
        )
        self.assertAlmostEqual(1 / 3, f['sure']['share'])
        [attempts] = f['settings']
        self.assertEqual(
            ('scheduler', 'max_attempts'),
            (attempts['section'], attempts['option']),
        )
        self.assertEqual(
            [
                {
                    'host': 'ctl-1',
                    'svc': 'conductor',
                    'value': 3,
                    'recorded': True,
                }
            ],
            attempts['values'],
        )

    def test_a_failure_raised_again_in_spawn_counts_once(self):
        # measured on nova (PortBindingFailedTest): one port, raised in
        # the network allocation's thread and again in the driver's
        # spawn that waited on it; the demo's one process started under
        # its own name, the conductor known by its dispatches
        row = {
            'cls': 'nova.exception.PortBindingFailed',
            'count': 1,
            'recovered': 0,
            'requests': ['req-1'],
        }
        ev = rules.Evidence(
            View(
                {
                    'failures': [
                        dict(row, ev='compute.network', final=0),
                        dict(row, ev='compute.spawn', final=1),
                    ],
                    'processes': [
                        {
                            'host': 'fake-mini',
                            'svc': '__main__',
                            'pid': 9,
                            'settings': {'scheduler': {'max_attempts': 1}},
                        }
                    ],
                }
            ),
            [],
            load={
                'queues': {'conductor': [{'host': 'host1', 'pid': 9}]},
                'cpu': {},
            },
        )
        [f] = rules.network_failures(ev)
        self.assertEqual(
            (1, 0), (f['figures']['failures'], f['figures']['recovered'])
        )
        self.assertEqual(['req-1'], f['requests'])
        [attempts] = f['settings']
        self.assertEqual(
            [
                {
                    'host': 'host1',
                    'svc': 'conductor',
                    'value': 1,
                    'recorded': True,
                }
            ],
            attempts['values'],
        )

    def test_other_failures_are_not(self):
        ev = rules.Evidence(
            View(
                {
                    'failures': [
                        {
                            'cls': 'nova.exception.NoValidHost',
                            'count': 3,
                            'recovered': 0,
                            'requests': [],
                        }
                    ],
                    'processes': [],
                }
            ),
            [],
        )
        self.assertEqual([], rules.network_failures(ev))


class RulesDocumentedTest(testtools.TestCase):
    def test_every_rule_has_its_table_in_the_findings_page(self):
        path = os.path.join(
            os.path.dirname(__file__),
            '..',
            '..',
            '..',
            'doc',
            'source',
            'findings.rst',
        )
        with open(path) as f:
            page = f.read()
        for rule in rules.RULES:
            self.assertIn('rule                        ``%s``' % rule.id, page)
