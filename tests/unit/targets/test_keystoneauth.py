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
"""keystoneauth1 calls as ``ksa.request`` spans, against a real server.

A real keystoneauth1 ``Session`` (admin-token plugin) talks to an
``http.server`` in a thread; nothing of keystoneauth1 is mocked.
"""

import http.server
import json
import socket
import threading
import time
import uuid

from keystoneauth1 import adapter
from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import session as ksa_session
from keystoneauth1 import token_endpoint

from instrument import schema
from instrument.patching import patcher as patcher_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracer_mod
from instrument.targets import keystoneauth
from tests.unit import base

TOKEN = 'tok-%s' % uuid.uuid4().hex
SECRET = 'secret-%s' % uuid.uuid4().hex
RP = str(uuid.uuid4())


class Handler(http.server.BaseHTTPRequestHandler):
    """Answers by path: /ok, /missing (404), /broken (500), /slow."""

    hits: list = []

    def log_message(self, *args):
        pass

    def _answer(self):
        Handler.hits.append(self.path)
        path = self.path.split('?', 1)[0]
        if path.endswith('/slow'):
            time.sleep(1.0)
        status = 200
        if path.endswith('/missing'):
            status = 404
        elif path.endswith('/broken'):
            status = 500
        body = json.dumps({'error': {'message': SECRET}}).encode()
        try:
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client timed out and went
            pass

    do_GET = do_POST = do_PUT = _answer


class KeystoneauthTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.server = http.server.ThreadingHTTPServer(
            ('127.0.0.1', 0), Handler
        )
        self.server.daemon_threads = True
        thread = threading.Thread(
            target=self.server.serve_forever, daemon=True
        )
        thread.start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.endpoint = 'http://127.0.0.1:%d/placement' % (
            self.server.server_port
        )
        self.buffer, self.recorder = base.list_recorder()
        patcher = patcher_mod.Patcher(
            list(keystoneauth.KSA_POINTS), self.recorder, 'keystoneauth1'
        )
        patcher.apply()
        self.addCleanup(patcher.remove)
        self.session = ksa_session.Session(
            auth=token_endpoint.Token(self.endpoint, TOKEN)
        )
        self.placement = adapter.Adapter(
            self.session, service_type='placement'
        )

    def spans(self) -> list:
        return [
            r for r in self.buffer.dicts() if r['ev'] == schema.EV_KSA_REQUEST
        ]

    def assert_nothing_secret(self):
        text = json.dumps(self.buffer.dicts())
        for value in (TOKEN, SECRET, 'since=', RP, '127.0.0.1'):
            self.assertNotIn(value, text)

    def test_success(self):
        resp = self.placement.get(
            '/resource_providers/%s/allocations?since=%s' % (RP, SECRET)
        )
        self.assertEqual(200, resp.status_code)
        [span] = self.spans()
        self.assertEqual('ok', span['st'])
        self.assertEqual(
            {
                'service_type': 'placement',
                'method': 'GET',
                'route': '/resource_providers/{id}/allocations',
                'status': 200,
                'attempts': 1,
            },
            span['attrs'],
        )
        # The request reached the server with its query string.
        self.assertIn('since=%s' % SECRET, Handler.hits[-1])
        self.assert_nothing_secret()

    def test_http_error_names_status_not_body(self):
        self.assertRaises(
            ksa_exc.NotFound, self.placement.get, '/traits/%s/missing' % RP
        )
        [span] = self.spans()
        self.assertEqual('error', span['st'])
        self.assertEqual(
            'keystoneauth1.exceptions.http.NotFound', span['err']['cls']
        )
        self.assertEqual(
            'placement GET /traits/{id}/missing: HTTP 404', span['err']['msg']
        )
        self.assertEqual(404, span['attrs']['status'])
        self.assertEqual('http', span['attrs']['failure'])
        self.assertEqual('/traits/{id}/missing', span['attrs']['route'])
        self.assert_nothing_secret()

    def test_status_retries_are_counted(self):
        self.assertRaises(
            ksa_exc.InternalServerError,
            self.placement.get,
            '/broken',
            status_code_retries=2,
            retriable_status_codes=[500],
            status_code_retry_delay=0.01,
        )
        [span] = self.spans()
        self.assertEqual(3, span['attrs']['attempts'])
        self.assertEqual(500, span['attrs']['status'])
        self.assertEqual('http', span['attrs']['failure'])

    def test_read_timeout_and_its_retry(self):
        self.assertRaises(
            ksa_exc.ConnectTimeout,
            self.placement.get,
            '/slow',
            timeout=0.2,
            connect_retries=1,
            connect_retry_delay=0.01,
        )
        [span] = self.spans()
        self.assertEqual('read_timeout', span['attrs']['failure'])
        self.assertEqual(2, span['attrs']['attempts'])
        self.assertEqual(
            'placement GET /slow: read timeout', span['err']['msg']
        )
        self.assertEqual(
            'keystoneauth1.exceptions.connection.ConnectTimeout',
            span['err']['cls'],
        )
        self.assert_nothing_secret()

    def test_connect_failure(self):
        sock = socket.socket()
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
        sock.close()  # nothing listens there now
        self.assertRaises(
            ksa_exc.ConnectFailure,
            self.session.get,
            'http://127.0.0.1:%d/v2.0/ports/%s' % (port, RP),
            endpoint_filter={'service_type': 'network'},
        )
        [span] = self.spans()
        self.assertEqual('connect_failure', span['attrs']['failure'])
        self.assertEqual('network', span['attrs']['service_type'])
        self.assertEqual('/v2.0/ports/{id}', span['attrs']['route'])
        self.assert_nothing_secret()

    def test_connect_timeout(self):
        # A listener that never accepts, its backlog filled: the kernel
        # drops further SYNs, so the connect itself times out.
        sock = socket.socket()
        sock.bind(('127.0.0.1', 0))
        sock.listen(0)
        self.addCleanup(sock.close)
        fillers = []
        port = sock.getsockname()[1]
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(('127.0.0.1', port))
            fillers.append(filler)
        self.addCleanup(lambda: [f.close() for f in fillers])
        time.sleep(0.05)
        self.assertRaises(
            ksa_exc.ConnectTimeout,
            self.session.get,
            'http://127.0.0.1:%d/x' % port,
            endpoint_filter={'service_type': 'image'},
            timeout=0.3,
        )
        [span] = self.spans()
        self.assertEqual('connect_timeout', span['attrs']['failure'])

    def test_service_type_of_an_sdk_like_call(self):
        # openstacksdk's proxies (nova's placement client) give no
        # endpoint filter: the microversion header, else the endpoint.
        self.session.get(
            '/resource_providers',
            endpoint_override=(
                'http://127.0.0.1:%d/x' % self.server.server_port
            ),
            headers={'OpenStack-API-Version': 'placement 1.36'},
        )
        self.session.get(
            '/resource_providers', endpoint_override=self.endpoint
        )
        self.assertEqual(
            ['placement', 'placement'],
            [s['attrs']['service_type'] for s in self.spans()],
        )
        self.assert_nothing_secret()

    def test_under_the_calling_span_and_its_request(self):
        tracer = tracer_mod.Tracer(self.recorder)

        class Ctx:
            request_id = 'req-%s' % uuid.uuid4()
            global_request_id = None

        rec = tracer.begin('compute.build', ctx=Ctx())
        self.placement.put('/allocations/%s' % RP, json={'x': SECRET})
        tracer.end(rec)
        outer = [r for r in self.buffer.dicts() if r['ev'] == 'compute.build'][
            0
        ]
        [span] = self.spans()
        self.assertEqual(outer['span'], span['parent'])
        self.assertEqual(Ctx.request_id, span['req'])
        self.assertEqual('PUT', span['attrs']['method'])
        self.assertEqual('/allocations/{id}', span['attrs']['route'])
        self.assert_nothing_secret()

    def test_token_request_of_an_auth_plugin_is_identity(self):
        # A password plugin asks keystone (here: the same server, which
        # answers 404) for a token inside the call it authenticates.
        from keystoneauth1.identity import v3

        auth = v3.Password(
            auth_url=self.endpoint + '/identity/v3',
            username='u',
            password=SECRET,
            project_name='p',
            user_domain_id='default',
            project_domain_id='default',
        )
        sess = ksa_session.Session(auth=auth)
        self.assertRaises(
            ksa_exc.ClientException,
            sess.get,
            '/servers',
            endpoint_filter={'service_type': 'compute'},
        )
        spans = self.spans()
        identity = [
            s for s in spans if s['attrs']['service_type'] == 'identity'
        ]
        self.assertTrue(identity, spans)
        self.assertEqual('POST', identity[0]['attrs']['method'])
        self.assertEqual(
            '/placement/identity/v3/auth/tokens', identity[0]['attrs']['route']
        )
        self.assert_nothing_secret()


class NestedAuth(token_endpoint.Token):
    """An auth plugin that makes a call of its own (a token request)
    inside the call it authenticates."""

    def get_token(self, session):
        session.get(self.endpoint + '/ok', authenticated=False)
        return super().get_token(session)


class AttemptsAfterAFaultTest(base.TestCase):
    """A fault of the point in a nested call (its span cannot start, or
    its end's clock fails) leaves the enclosing call's attempts right
    (issue 27): the nested call's entry is taken off on every path."""

    def setUp(self):
        super().setUp()
        server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.endpoint = 'http://127.0.0.1:%d/placement' % server.server_port
        self.buffer, self.recorder = base.list_recorder()
        self.faults = []

    def apply(self):
        patcher = patcher_mod.Patcher(
            list(keystoneauth.KSA_POINTS), self.recorder, 'keystoneauth1'
        )
        patcher.apply()
        self.addCleanup(patcher.remove)
        self.addCleanup(keystoneauth._CALL.set, None)
        session = ksa_session.Session(auth=NestedAuth(self.endpoint, TOKEN))
        placement = adapter.Adapter(session, service_type='placement')
        # 3 attempts: the first and 2 status retries
        self.assertRaises(
            ksa_exc.InternalServerError,
            placement.get,
            '/broken',
            status_code_retries=2,
            retriable_status_codes=[500],
            status_code_retry_delay=0.01,
        )
        spans = [
            r for r in self.buffer.dicts() if r['ev'] == schema.EV_KSA_REQUEST
        ]
        self.assertEqual(1, len(self.faults), 'the fault was not injected')
        self.assertIsNone(keystoneauth._CALL.get(), 'an entry was left behind')
        return spans

    def fail_once(self, fn, nth: int):
        calls = [0]

        def faulty(*args, **kwargs):
            calls[0] += 1
            if calls[0] == nth:
                self.faults.append(calls[0])
                raise RuntimeError('injected fault')
            return fn(*args, **kwargs)

        return faulty

    def test_the_nested_span_cannot_start(self):
        # begin of the nested call (the second ksa.request) fails, after
        # its on_enter ran
        real = self.recorder.begin
        faulty = self.fail_once(real, 2)
        self.recorder.begin = lambda ev, *args: (
            faulty(ev, *args)
            if ev == schema.EV_KSA_REQUEST
            else real(ev, *args)
        )
        [outer] = self.apply()
        self.assertEqual('/broken', outer['attrs']['route'])
        self.assertEqual(3, outer['attrs']['attempts'])

    def test_the_clock_fails_at_the_nested_calls_end(self):
        # the wrapper's first clock read is the nested call's end
        self.recorder.clock = self.fail_once(self.recorder.clock, 1)
        # queued as they began: the outer call first
        outer, nested = self.apply()
        self.assertEqual('/placement/ok', nested['attrs']['route'])
        self.assertEqual('/broken', outer['attrs']['route'])
        self.assertEqual(3, outer['attrs']['attempts'])


class RouteTemplateTest(base.TestCase):
    def test_routes(self):
        cases = {
            'http://h:1/v2.0/ports/%s?device_id=x' % RP: '/v2.0/ports/{id}',
            ('/resource_providers/%s/inventories/VCPU' % RP): (
                '/resource_providers/{id}/inventories/VCPU'
            ),
            'servers/12345/os-volume_attachments': (
                '/servers/{id}/os-volume_attachments'
            ),
            'https://k/v3/auth/tokens#frag': '/v3/auth/tokens',
            '/images/abcdef0123456789abcdef0123456789/file': (
                '/images/{id}/file'
            ),
            '/v1/a%20b': '/v1/{id}',
        }
        for url, route in cases.items():
            self.assertEqual(route, keystoneauth.route_template(url), url)
        self.assertEqual('', keystoneauth.route_template(None))


class LifecycleTest(base.TestCase):
    def test_targets_are_registered_and_gated(self):
        from instrument.runtime import lifecycle

        loaded, failures = lifecycle.load_targets()
        names = {t.name: t for t in loaded}
        self.assertIn('keystoneauth', names)
        self.assertIn('keystonemiddleware', names)
        self.assertIsNone(names['keystoneauth'].check(self.make_conf()))
        self.assertEqual({}, failures)


class OutsideSpansTest(base.TestCase):
    """A call outside any span takes no request from oslo.context (stale
    there: a periodic task, start-up)."""

    def test_no_stale_request(self):
        from oslo_context import context as oslo_context

        stale = oslo_context.RequestContext(request_id='req-stale')
        self.assertIs(stale, oslo_context.get_current())
        self.addCleanup(oslo_context.RequestContext, overwrite=True)
        server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
        thread = threading.Thread(target=server.handle_request, daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        buf = base.ListBuffer()
        recorder = recorder_mod.Recorder(
            buf, process.ProcessIdentity.create('nova-compute', 'cmp-1')
        )
        patcher = patcher_mod.Patcher(
            list(keystoneauth.KSA_POINTS), recorder, 'keystoneauth1'
        )
        patcher.apply()
        self.addCleanup(patcher.remove)
        ksa_session.Session().get('http://127.0.0.1:%d/x' % server.server_port)
        thread.join()
        [span] = [r for r in buf.dicts() if r['ev'] == 'ksa.request']
        self.assertIsNone(span.get('req'))
        self.assertIsNone(span.get('parent'))
        # and the thread's frame is as it was
        self.assertIsNone(recorder_mod.current_frame())
