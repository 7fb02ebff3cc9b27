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
"""Tests of the nova-api paste filter (a plain WSGI app stands in)."""

import os

from instrument.loader import paste
from instrument import runtime
from tests.unit import base

NOVA_PIPELINE = '''[composite:openstack_compute_api_v21]
use = call:nova.api.auth:pipeline_factory_v21
keystone = cors compute_req_id faultwrap keystonecontext osapi_compute_app_v21

[pipeline:oscomputeversions]
pipeline = cors faultwrap request_log http_proxy_to_wsgi oscomputeversionapp
'''


class Ctx:
    request_id = 'req-from-context'
    global_request_id = None


def app(status):
    def application(environ, start_response):
        environ['nova.context'] = Ctx()
        start_response(status, [('Content-Type', 'application/json')])
        return [b'{}']
    return application


class PasteFilterTest(base.TestCase):

    def setUp(self):
        super().setUp()
        self.addCleanup(runtime.teardown)
        self.conf = self.make_conf(sql_timing=False)

    def call(self, status, method='POST', path='/servers'):
        middleware = paste.filter_factory({})(app(status))
        middleware.conf = self.conf
        environ = {'REQUEST_METHOD': method, 'SCRIPT_NAME': '/v2.1',
                   'PATH_INFO': path,
                   'openstack.request_id': 'req-from-header'}
        body = middleware(environ, lambda s, h, e=None: None)
        self.assertEqual([b'{}'], list(body))
        runtime.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')).values()
        return [r for r in records if r['ev'] == 'api.request']

    def test_records_the_request(self):
        [span] = self.call('202 Accepted')
        self.assertEqual('X', span['ph'])
        self.assertEqual('api', span['svc'])
        self.assertEqual('ok', span['st'])
        self.assertEqual({'method': 'POST', 'route': '/v2.1/servers',
                          'status': 202}, span['attrs'])
        # The request id nova carries downstream, not the header's.
        self.assertEqual('req-from-context', span['req'])

    def test_server_errors_are_errors_and_ids_leave_the_route(self):
        [span] = self.call('500 Internal Server Error', 'GET',
                           '/servers/0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77'
                           '/os-interface/12')
        self.assertEqual('error', span['st'])
        self.assertEqual('HTTP 500', span['err']['cls'])
        self.assertEqual('/v2.1/servers/{id}/os-interface/{id}',
                         span['attrs']['route'])

    def test_disabled_passes_through(self):
        conf = self.make_conf(enabled=False)
        middleware = paste.InstrumentMiddleware(app('200 OK'), conf=conf)
        body = middleware({'REQUEST_METHOD': 'GET', 'PATH_INFO': '/'},
                          lambda s, h, e=None: None)
        self.assertEqual([b'{}'], list(body))
        self.assertIsNone(runtime.active())

    def test_filter_goes_into_every_compute_pipeline_once(self):
        text = paste.add_to_pipelines(NOVA_PIPELINE)
        self.assertIn('compute_req_id instrument faultwrap', text)
        # No compute_req_id there: left alone.
        self.assertIn('pipeline = cors faultwrap request_log', text)
        self.assertEqual(1, text.count('[filter:instrument]'))
        self.assertEqual(text, paste.add_to_pipelines(text))
