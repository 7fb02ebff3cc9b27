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
"""nova's neutron stand-in served over HTTP, so nova's own client runs.

nova's functional ``NeutronFixture`` keeps neutron's state (ports,
bindings, networks, subnets...) and replaces
``nova.network.neutron.get_client`` with an object that calls it
directly: no neutronclient, no keystoneauth1, so no ``ksa.request``
span.  ``ServedNeutronFixture`` keeps the fixture's state and methods
but puts nova's real ``get_client`` back, points ``[neutron]
endpoint_override`` at a wsgi-intercept host (as nova's
``PlacementFixture`` does for placement) and answers neutron's REST API
there from the fixture's methods (``NeutronAPI``).  A neutron call is
then nova's ``ClientWrapper``, neutronclient, a keystoneauth1
``Session.request`` and requests, as in a deployment, down to the
socket, which wsgi-intercept replaces.

Admin calls use the ``[neutron]`` credentials (``auth_type = none``
here: keystoneauth1's ``NoAuth``, whose token is ``notused``); the
stand-in tells them from user calls by that token, as the fixture's own
client did by nova's ``_get_auth_plugin`` logic.  An exception of a
fixture method becomes neutron's error response (status and
``NeutronError`` type), which neutronclient turns back into its
exception: a test that makes ``self.neutron.create_port`` raise
``NeutronClientException(status_code=500)`` gets an HTTP 500 from
neutron in nova's compute.

``LocalServer`` serves the same application on a real local socket,
for what wsgi-intercept cannot show: a neutron that answers too late
for ``[neutron] timeout`` (keystoneauth1's read time-out).

``Keystone`` is keystone's token validation for one user token, and
``real_auth_token`` puts the real keystonemiddleware in nova-api's
pipeline against it (nova's functional API fixture stubs it out).
"""

import json
import re
import socketserver
import threading
import time
import uuid
from wsgiref import simple_server

import fixtures
from keystoneauth1 import noauth
from nova.network import neutron as neutron_api
from nova.tests import fixtures as nova_fixtures
from oslo_log import log as logging
import webob
from wsgi_intercept import interceptor

LOG = logging.getLogger(__name__)

# The token of the [neutron] credentials' plugin (auth_type = none).
SERVICE_TOKEN = noauth.NoAuth().get_token(None)

# neutron's v2.0 routes: (method, path pattern, fixture method, how the
# call is made: 'list', 'show', 'create', 'update', 'delete', 'args').
_ID = '([^/]+)'
ROUTES = [
    (method, re.compile('^/v2.0/%s$' % path), name, kind)
    for method, path, name, kind in (
        ('GET', 'extensions', 'list_extensions', 'args'),
        ('GET', 'ports', 'list_ports', 'list'),
        ('POST', 'ports', 'create_port', 'create'),
        ('GET', 'ports/' + _ID, 'show_port', 'show'),
        ('PUT', 'ports/' + _ID, 'update_port', 'update'),
        ('DELETE', 'ports/' + _ID, 'delete_port', 'delete'),
        ('POST', 'ports/%s/bindings' % _ID, 'create_port_binding', 'update'),
        (
            'GET',
            'ports/%s/bindings/%s' % (_ID, _ID),
            'show_port_binding',
            'args',
        ),
        (
            'DELETE',
            'ports/%s/bindings/%s' % (_ID, _ID),
            'delete_port_binding',
            'args',
        ),
        (
            'PUT',
            'ports/%s/bindings/%s/activate' % (_ID, _ID),
            'activate_port_binding',
            'args',
        ),
        ('GET', 'networks', 'list_networks', 'list'),
        ('GET', 'networks/' + _ID, 'show_network', 'show'),
        ('GET', 'subnets', 'list_subnets', 'list'),
        ('GET', 'subnets/' + _ID, 'show_subnet', 'show'),
        ('GET', 'floatingips', 'list_floatingips', 'list'),
        ('GET', 'security-groups', 'list_security_groups', 'list'),
        ('GET', 'quotas/' + _ID, 'show_quota', 'args'),
        (
            'GET',
            'auto-allocated-topology/' + _ID,
            'get_auto_allocated_topology',
            'show',
        ),
    )
]


def _params(req: webob.Request) -> dict:
    """The query string as neutronclient wrote it (``urlencode`` with
    ``doseq``): one value or a list, booleans back from ``True`` and
    ``False``."""
    out = {}
    for key in req.GET.keys():
        values = [
            {'True': True, 'False': False}.get(v, v)
            for v in req.GET.getall(key)
        ]
        out[key] = values[0] if len(values) == 1 else values
    return out


def _error(status: int, exc: BaseException) -> webob.Response:
    """neutron's error body: neutronclient picks its exception class by
    the type (``<type>Client``), else by the status."""
    kind = type(exc).__name__
    if kind.endswith('Client'):
        kind = kind[: -len('Client')]
    return webob.Response(
        status=status,
        json_body={
            'NeutronError': {'type': kind, 'message': str(exc), 'detail': ''}
        },
    )


class NeutronAPI:
    """A WSGI application: neutron's v2.0 REST API over a
    ``NeutronFixture``'s methods (``ROUTES``)."""

    #: Distinct tokens remembered (``tokens``: which reached neutron).
    MAX_TOKENS = 16

    def __init__(self, fixture) -> None:
        self.fixture = fixture
        self.tokens: set = set()

    def __call__(self, environ, start_response):
        req = webob.Request(environ)
        return self.respond(req)(environ, start_response)

    def respond(self, req: webob.Request) -> webob.Response:
        path = req.path_info.rstrip('/')
        for method, pattern, name, kind in ROUTES:
            match = pattern.match(path)
            if match is None:
                continue
            if method != req.method:
                continue
            try:
                result = self._call(req, name, kind, match.groups())
            except Exception as exc:
                status = getattr(exc, 'status_code', None) or getattr(
                    exc, 'code', None
                )
                if not isinstance(status, int) or status < 400:
                    status = 500
                return _error(status, exc)
            if result is None or kind == 'delete':
                return webob.Response(status=204)
            return webob.Response(
                status=201 if kind == 'create' else 200, json_body=result
            )
        # a call nova makes that the stand-in does not serve (yet)
        LOG.warning('neutron stand-in: no route for %s %s', req.method, path)
        return webob.Response(
            status=404,
            json_body={
                'NeutronError': {
                    'type': 'HTTPNotFound',
                    'message': 'no route',
                    'detail': '',
                }
            },
        )

    def _call(self, req, name, kind, ids):
        method = getattr(self.fixture, name)
        token = req.headers.get('X-Auth-Token')
        if len(self.tokens) < self.MAX_TOKENS:
            self.tokens.add(token)
        admin = token == SERVICE_TOKEN
        body = json.loads(req.body) if req.body else None
        if kind == 'list':
            params = _params(req)
            if name == 'list_ports':
                return method(admin, **params)
            return method(**params)
        if kind == 'show':
            params = _params(req)
            if name == 'show_port':
                params['is_admin'] = admin
            return method(*ids, **params)
        if kind == 'create':
            return method(body=body)
        if kind == 'update':
            return method(*ids, body=body)
        return method(*ids)


def reset_neutron_session() -> None:
    """Forget nova's cached keystoneauth1 session for neutron, so the
    next call builds one from ``[neutron]`` as it is now (a time-out
    set by a test): ``nova.service_auth``'s (nova 34) or
    ``nova.network.neutron``'s own (older releases)."""
    from nova import service_auth

    for reset in (
        getattr(service_auth, 'reset_globals', None),
        getattr(neutron_api, 'reset_state', None),
    ):
        if reset is not None:
            reset()


class ServedNeutronFixture(nova_fixtures.NeutronFixture):
    """nova's ``NeutronFixture``, reached through nova's real neutron
    client over (intercepted) HTTP; see the module's docstring."""

    def setUp(self):
        real_get_client = neutron_api.get_client
        super().setUp()
        self.endpoint = 'http://%s:9696/' % uuid.uuid4().hex
        self.app = app = NeutronAPI(self)
        intercept = interceptor.RequestsInterceptor(
            lambda: app, url=self.endpoint
        )
        intercept.install_intercept()
        self.addCleanup(intercept.uninstall_intercept)
        # keystoneauth1's keep-alive socket options upset wsgi-intercept
        # (nova's PlacementFixture does the same)
        from requests import adapters

        self.useFixture(
            fixtures.MonkeyPatch(
                'keystoneauth1.session.TCPKeepAliveAdapter.init_poolmanager',
                adapters.HTTPAdapter.init_poolmanager,
            )
        )
        self.test.flags(
            endpoint_override=self.endpoint, auth_type='none', group='neutron'
        )
        reset_neutron_session()
        self.addCleanup(reset_neutron_session)
        self.useFixture(
            fixtures.MonkeyPatch(
                'nova.network.neutron.get_client', real_get_client
            )
        )


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


class LocalServer(fixtures.Fixture):
    """``app`` on 127.0.0.1 (a free port) in a thread of its own;
    ``url`` is its endpoint."""

    def __init__(self, app) -> None:
        super().__init__()
        self.app = app

    def _setUp(self) -> None:
        server = simple_server.make_server(
            '127.0.0.1',
            0,
            self.app,
            server_class=_Server,
            handler_class=_QuietHandler,
        )
        self.url = 'http://127.0.0.1:%d/' % server.server_port
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={'poll_interval': 0.05},
            daemon=True,
        )
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)


class Keystone:
    """keystone's token validation (``GET /v3/auth/tokens``) for one
    user token: the token of a user with the admin, member and reader
    roles in nova's test project; any other token is unknown (404).
    Each answer takes ``delay`` seconds (a loaded keystone validating
    PKI or UUID tokens)."""

    def __init__(
        self, token: str, service_token: str, delay: float = 0.0
    ) -> None:
        self.token = token
        self.service_token = service_token
        self.delay = delay
        self.validations = 0

    def __call__(self, environ, start_response):
        if self.delay:
            time.sleep(self.delay)
        req = webob.Request(environ)
        resp = webob.Response(
            status=404,
            json_body={
                'error': {'code': 404, 'title': 'Not Found', 'message': 'no'}
            },
        )
        if (
            req.path_info.rstrip('/') == '/v3/auth/tokens'
            and req.method == 'GET'
            and req.headers.get('X-Auth-Token') == self.service_token
            and req.headers.get('X-Subject-Token') == self.token
        ):
            self.validations += 1
            resp = webob.Response(
                status=200,
                json_body={
                    'token': {
                        'methods': ['password'],
                        'issued_at': '2026-01-01T00:00:00.000000Z',
                        'expires_at': '2099-01-01T00:00:00.000000Z',
                        'user': {
                            'id': 'admin',
                            'name': 'admin',
                            'domain': {'id': 'default', 'name': 'Default'},
                        },
                        'project': {
                            'id': nova_fixtures.PROJECT_ID,
                            'name': 'project',
                            'domain': {'id': 'default', 'name': 'Default'},
                        },
                        'roles': [
                            {'id': 'r%d' % n, 'name': name}
                            for n, name in enumerate(
                                ('admin', 'member', 'reader')
                            )
                        ],
                        'catalog': [],
                    }
                },
            )
            resp.headers['X-Subject-Token'] = self.token
        return resp(environ, start_response)


def real_auth_token(case, keystone: Keystone) -> None:
    """Before the cloud's ``setUp``: nova-api with the real
    keystonemiddleware validating ``keystone.token`` against
    ``keystone`` served on a local socket, with the admin token
    ``keystone.service_token``; every API request of nova's test client
    carries the token.  ``case``: the cloud (a test case)."""
    from keystoneauth1 import loading as ks_loading
    from keystonemiddleware.auth_token import _opts  # noqa: F401
    from oslo_config import cfg

    server = case.useFixture(LocalServer(keystone))
    # keystonemiddleware and nova's context middleware for real
    case.useFixture(
        fixtures.MockPatch(
            'nova.tests.fixtures.nova.OSAPIFixture._stub_keystone'
        )
    )
    ks_loading.register_auth_conf_options(cfg.CONF, 'keystone_authtoken')
    cfg.CONF.register_opts(
        ks_loading.get_auth_plugin_conf_options('admin_token'),
        group='keystone_authtoken',
    )
    endpoint = server.url + 'v3'
    for key, value in (
        ('auth_type', 'admin_token'),
        ('endpoint', endpoint),
        ('token', keystone.service_token),
        ('www_authenticate_uri', endpoint),
    ):
        cfg.CONF.set_override(key, value, group='keystone_authtoken')
        case.addCleanup(
            cfg.CONF.clear_override, key, group='keystone_authtoken'
        )
    from nova.tests.functional.api import client

    request = client.TestOpenStackClient.request
    token = keystone.token

    def with_token(api, url, method='GET', body=None, headers=None):
        headers = dict(headers or {}, **{'X-Auth-Token': token})
        return request(api, url, method=method, body=body, headers=headers)

    case.useFixture(
        fixtures.MonkeyPatch(
            'nova.tests.functional.api.client.TestOpenStackClient.request',
            with_token,
        )
    )
