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
"""Calls to neutron and placement on real nova, read from the report.

The cloud serves nova's NeutronFixture over HTTP to nova's own neutron
client (``instrument_demo.standins``), so a boot on a network makes
real neutronclient calls through keystoneauth1: ``ksa.request`` spans
of service type ``network``, next to placement's, under the boot's
request.  The assertions are on the analyser's report (the services
called and the failure tables), made from the span files.
"""

import json
import os
import threading
import uuid

from neutronclient.common import exceptions as neutron_exc
from nova.tests import fixtures as nova_fixtures

from instrument.analysis import pipeline
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument_demo import standins
from tests.functional.nova import base

NETWORK = [{'uuid': nova_fixtures.NeutronFixture.network_1['id']}]


def span_text(directory: str) -> str:
    """Every span file of ``directory``, as text."""
    out = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            out.append(f.read())
    return ''.join(out)


class ServicesCalledTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def _failed_boot(self) -> str:
        """Boot a server on the network without waiting for its status
        (nova's helper waits 5 s, short for a time-out under load);
        ``_report`` waits for its build to end."""
        body = self._build_server(networks=NETWORK)
        return self.api.post_server({'server': body})['id']

    def _failure_row(self, uuid) -> tuple:
        """The boot's one failure row, once the server is in ERROR:
        ``(row, report)``."""
        req, report = self._report(uuid)
        self._wait_for_state_change({'id': uuid}, 'ERROR')
        rows = [f for f in report['failures'] if req in f['requests']]
        self.assertEqual(1, len(rows), rows)
        return rows[0], report

    def _report(self, uuid) -> tuple:
        """The boot's request id and the report, once its build ended."""
        spans = self.spans(
            until=lambda s: s.done('compute.build', inst=uuid), timeout=60
        )
        [create] = spans.done('api.compute.create', inst=uuid)
        return create['req'], pipeline.analyse(
            [self.span_dir], pipeline.Options()
        )

    def test_boot_calls_neutron_and_placement(self):
        uuid, req, spans, calls = self.boot_calls(networks=NETWORK)
        seen = {
            (
                c['svc'],
                c['attrs']['service_type'],
                c['attrs']['method'],
                c['attrs']['route'],
                c['attrs']['status'],
            )
            for c in calls
        }
        # nova-api checks the network; the compute creates and binds the
        # port (nova's real neutronclient against the fixture's state)
        self.assertIn(('compute', 'network', 'POST', '/v2.0/ports', 201), seen)
        self.assertIn(
            ('compute', 'network', 'PUT', '/v2.0/ports/{id}', 200), seen
        )
        self.assertIn(('api', 'network', 'GET', '/v2.0/networks', 200), seen)
        self.assertIn(
            ('scheduler', 'placement', 'GET', '/allocation_candidates', 200),
            seen,
        )
        # the port creation runs under the network allocation span
        parents = {r['span']: r for r in spans.records if r.get('span')}
        [post] = [
            c
            for c in calls
            if c['attrs']['method'] == 'POST'
            and c['attrs']['route'] == '/v2.0/ports'
        ]
        node = post
        while node is not None and node['ev'] != 'compute.network':
            node = parents.get(node.get('parent'))
        self.assertIsNotNone(node, post)
        for call in calls:
            self.assertNotIn(uuid, call['attrs']['route'])
        # the report's services-called table
        report = pipeline.analyse([self.span_dir], pipeline.Options())
        rows = {
            (r['service'], r['method'], r['route']): r
            for r in report['services']
            if r['operation'] == 'boot'
        }
        port = rows[('network', 'POST', '/v2.0/ports')]
        self.assertEqual(1, port['count'])
        self.assertEqual({}, port['errors'])
        self.assertEqual([req], port['requests'])
        self.assertIn(('placement', 'GET', '/allocation_candidates'), rows)
        self.assertIn(('network', 'GET', '/v2.0/networks'), rows)

    def test_port_creation_failure_is_a_neutron_row(self):
        # neutron answers the port creation with a 500; neutronclient
        # raises it in nova's compute, the build fails
        self.useFixture(
            base.cloud.fixtures.MockPatchObject(
                self.neutron,
                'create_port',
                side_effect=(
                    neutron_exc.NeutronClientException(status_code=500)
                ),
            )
        )
        row, report = self._failure_row(self._failed_boot())
        self.assertEqual('network', row['component'])
        self.assertEqual('ksa.request', row['ev'])
        self.assertEqual('network POST /v2.0/ports: HTTP 500', row['message'])
        self.assertTrue(row['cls'].endswith('InternalServerError'), row)
        [port] = [
            r
            for r in report['services']
            if r['operation'] == 'boot'
            and r['route'] == '/v2.0/ports'
            and r['method'] == 'POST'
        ]
        self.assertEqual({'http_500': 1}, port['errors'])

    def test_port_creation_time_out_is_a_neutron_row(self):
        # neutron on a real socket, answering the port creation later
        # than [neutron] timeout: keystoneauth1's read time-out
        local = self.useFixture(
            standins.LocalServer(standins.NeutronAPI(self.neutron))
        )
        self.flags(
            endpoint_override=local.url,
            timeout=1,
            http_retries=0,
            group='neutron',
        )
        standins.reset_neutron_session()  # the session takes the time-out
        answer = threading.Event()
        self.addCleanup(answer.set)
        create_port = self.neutron.create_port

        def late(body=None):
            answer.wait(10)
            return create_port(body=body)

        self.useFixture(
            base.cloud.fixtures.MockPatchObject(
                self.neutron, 'create_port', side_effect=late
            )
        )
        row, report = self._failure_row(self._failed_boot())
        self.assertEqual(
            ('network', 'ksa.request'), (row['component'], row['ev'])
        )
        self.assertEqual(
            'keystoneauth1.exceptions.connection.ConnectTimeout', row['cls']
        )
        self.assertEqual(
            'network POST /v2.0/ports: read timeout', row['message']
        )
        [port] = [
            r
            for r in report['services']
            if r['operation'] == 'boot'
            and r['route'] == '/v2.0/ports'
            and r['method'] == 'POST'
        ]
        self.assertEqual({'read_timeout': 1}, port['errors'])
        # nothing of the endpoint (keystoneauth1's message quotes it)
        # in any record
        self.assertNotIn(
            local.url.rstrip('/')[len('http://') :], span_text(self.span_dir)
        )


# keystone's token validation for one user token
FakeKeystone = standins.Keystone


class RealAuthToken(base.InstrumentedCloud):
    """nova-api with the real keystonemiddleware (nova's functional API
    fixture stubs it out), validating a unique token against a keystone
    over HTTP (``keystone_app``: ``FakeKeystone``;
    ``standins.real_auth_token``); every API request of the test client
    carries the token."""

    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def keystone_app(self, token: str, service_token: str):
        return FakeKeystone(token, service_token)

    def setUp(self):
        self.token = 'tok-%s' % uuid.uuid4().hex
        self.service_token = 'svc-%s' % uuid.uuid4().hex
        self.keystone = self.keystone_app(self.token, self.service_token)
        standins.real_auth_token(self, self.keystone)
        super().setUp()


class TokenTest(RealAuthToken):
    """The token goes with nova's calls to neutron.  Neither it, nor a
    query string, nor a request body is in any span file or report."""

    def test_nothing_of_token_query_or_body_anywhere(self):
        body_value = 'body-%s' % uuid.uuid4().hex
        query_value = 'query-%s' % uuid.uuid4().hex
        server = self.boot(networks=NETWORK, name=body_value)
        uuid_ = server['id']
        self.api.api_get('/servers?name=%s' % query_value)
        spans = self.spans(until=lambda s: s.done('compute.build', inst=uuid_))
        # the token was validated by keystone, went to neutron
        self.assertGreater(self.keystone.validations, 0)
        self.assertIn(self.token, self.neutron.app.tokens)
        [create] = spans.done('api.compute.create', inst=uuid_)
        req = create['req']
        [auth] = spans.done('api.auth_token', req=req)
        self.assertEqual('ok', auth['st'])
        calls = spans.done('ksa.request', req=req)
        services = {c['attrs']['service_type'] for c in calls}
        self.assertIn('network', services)
        report = pipeline.analyse([self.span_dir], pipeline.Options())
        self.assertIn(
            ('boot', 'identity', 'token validation (keystonemiddleware)'),
            {
                (r['operation'], r['service'], r['route'])
                for r in report['services']
            },
        )
        outputs = {
            'span files': span_text(self.span_dir),
            'text': report_text.render(report),
            'json': json.dumps(report),
            'html': report_html.render(report),
        }
        for name, text in outputs.items():
            for secret in (
                self.token,
                self.service_token,
                body_value,
                query_value,
            ):
                self.assertNotIn(secret, text, name)
