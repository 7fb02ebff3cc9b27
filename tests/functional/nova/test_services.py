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

import os
import threading

from instrument_demo import standins
from neutronclient.common import exceptions as neutron_exc
from nova import service_auth
from nova.tests import fixtures as nova_fixtures

from instrument.analysis import pipeline
from tests.functional.nova import base

NETWORK = [{'uuid': nova_fixtures.NeutronFixture.network_1['id']}]


class ServicesCalledTest(base.InstrumentedCloud):

    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def _report(self, uuid) -> tuple:
        """The boot's request id and the report, once its build ended."""
        spans = self.spans(until=lambda s: s.done('compute.build',
                                                  inst=uuid))
        [create] = spans.done('api.compute.create', inst=uuid)
        return create['req'], pipeline.analyse([self.span_dir],
                                               pipeline.Options())

    def _span_text(self) -> str:
        out = []
        for name in sorted(os.listdir(self.span_dir)):
            with open(os.path.join(self.span_dir, name)) as f:
                out.append(f.read())
        return ''.join(out)

    def test_boot_calls_neutron_and_placement(self):
        server = self.boot(networks=NETWORK)
        uuid = server['id']
        spans = self.spans(until=lambda s: s.done('compute.build',
                                                  inst=uuid))
        [create] = spans.done('api.compute.create', inst=uuid)
        req = create['req']
        calls = spans.done('ksa.request', req=req)
        seen = {(c['svc'], c['attrs']['service_type'], c['attrs']['method'],
                 c['attrs']['route'], c['attrs']['status']) for c in calls}
        # nova-api checks the network; the compute creates and binds the
        # port (nova's real neutronclient against the fixture's state)
        self.assertIn(('compute', 'network', 'POST', '/v2.0/ports', 201),
                      seen)
        self.assertIn(('compute', 'network', 'PUT', '/v2.0/ports/{id}',
                       200), seen)
        self.assertIn(('api', 'network', 'GET', '/v2.0/networks', 200),
                      seen)
        self.assertIn(('scheduler', 'placement', 'GET',
                       '/allocation_candidates', 200), seen)
        # the port creation runs under the network allocation span
        parents = {r['span']: r for r in spans.records if r.get('span')}
        [post] = [c for c in calls if c['attrs']['method'] == 'POST' and
                  c['attrs']['route'] == '/v2.0/ports']
        node = post
        while node is not None and node['ev'] != 'compute.network':
            node = parents.get(node.get('parent'))
        self.assertIsNotNone(node, post)
        for call in calls:
            self.assertNotIn(uuid, call['attrs']['route'])
        # the report's services-called table
        report = pipeline.analyse([self.span_dir], pipeline.Options())
        rows = {(r['service'], r['method'], r['route']): r
                for r in report['services'] if r['operation'] == 'boot'}
        port = rows[('network', 'POST', '/v2.0/ports')]
        self.assertEqual(1, port['count'])
        self.assertEqual({}, port['errors'])
        self.assertEqual([req], port['requests'])
        self.assertIn(('placement', 'GET', '/allocation_candidates'), rows)
        self.assertIn(('network', 'GET', '/v2.0/networks'), rows)

    def test_port_creation_failure_is_a_neutron_row(self):
        # neutron answers the port creation with a 500; neutronclient
        # raises it in nova's compute, the build fails
        self.useFixture(base.cloud.fixtures.MockPatchObject(
            self.neutron, 'create_port', side_effect=(
                neutron_exc.NeutronClientException(status_code=500))))
        server = self.boot(networks=NETWORK, expected_state='ERROR')
        req, report = self._report(server['id'])
        rows = [f for f in report['failures'] if req in f['requests']]
        self.assertEqual(1, len(rows), rows)
        [row] = rows
        self.assertEqual('network', row['component'])
        self.assertEqual('ksa.request', row['ev'])
        self.assertEqual('network POST /v2.0/ports: HTTP 500',
                         row['message'])
        self.assertTrue(row['cls'].endswith('InternalServerError'), row)
        [port] = [r for r in report['services']
                  if r['operation'] == 'boot' and
                  r['route'] == '/v2.0/ports' and r['method'] == 'POST']
        self.assertEqual({'http_500': 1}, port['errors'])

    def test_port_creation_time_out_is_a_neutron_row(self):
        # neutron on a real socket, answering the port creation later
        # than [neutron] timeout: keystoneauth1's read time-out
        local = self.useFixture(standins.LocalServer(
            standins.NeutronAPI(self.neutron)))
        self.flags(endpoint_override=local.url, timeout=1,
                   http_retries=0, group='neutron')
        service_auth.reset_globals()  # the session takes the time-out
        answer = threading.Event()
        self.addCleanup(answer.set)
        create_port = self.neutron.create_port

        def late(body=None):
            answer.wait(10)
            return create_port(body=body)
        self.useFixture(base.cloud.fixtures.MockPatchObject(
            self.neutron, 'create_port', side_effect=late))
        server = self.boot(networks=NETWORK, expected_state='ERROR')
        req, report = self._report(server['id'])
        rows = [f for f in report['failures'] if req in f['requests']]
        self.assertEqual(1, len(rows), rows)
        [row] = rows
        self.assertEqual(('network', 'ksa.request'),
                         (row['component'], row['ev']))
        self.assertEqual('keystoneauth1.exceptions.connection.'
                         'ConnectTimeout', row['cls'])
        self.assertEqual('network POST /v2.0/ports: read timeout',
                         row['message'])
        [port] = [r for r in report['services']
                  if r['operation'] == 'boot' and
                  r['route'] == '/v2.0/ports' and r['method'] == 'POST']
        self.assertEqual({'read_timeout': 1}, port['errors'])
        # nothing of the endpoint (keystoneauth1's message quotes it)
        # in any record
        self.assertNotIn(local.url.rstrip('/')[len('http://'):],
                         self._span_text())
