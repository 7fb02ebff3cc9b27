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
"""Calls to other OpenStack services: keystoneauth1 and keystonemiddleware.

nova reaches keystone, neutron, glance, cinder, placement... through
keystoneauth1: its own adapters, neutronclient, glanceclient,
cinderclient and openstacksdk all end in ``Session.request``.  One
point there (``ksa.request``) records every such call, under the span
of the nova call that made it (so under its request; a call outside
any span, at start-up say, has no request: oslo.context's current one
would be stale there):

* ``service_type`` from the call's ``endpoint_filter`` (an adapter's),
  else its microversion header's service, else the endpoint (an SDK
  proxy's ``endpoint_override``: a known path segment or default
  port), ``identity`` for a token request of an auth plugin;
* ``method`` and ``route``: the path only, each id-like segment
  replaced by ``{id}``; never the host, a query string, a header or a
  body;
* ``status`` of the final response (or of the HTTP error raised);
* ``attempts``: requests sent (``Session._send_request``, a hook): 1
  plus connect and status retries and redirects;
* ``failure``: why it failed, by class: ``connect_timeout``,
  ``read_timeout`` (keystoneauth1 raises ``ConnectTimeout`` for both;
  the requests exception it came from tells them apart),
  ``connect_failure``, ``ssl``, ``connection``, ``http``, ``other``.
  The error message is that class (and the HTTP status), never
  keystoneauth1's, which quotes the URL or the response body.

keystonemiddleware's ``AuthProtocol.process_request`` in nova-api is
``api.auth_token``: token validation, its cache and its own calls to
keystone, a component of its own.
"""

import contextvars
import re
from urllib import parse

from instrument import schema
from instrument.patching import points as points_mod
from instrument.runtime import errors
from instrument.targets import base

P = points_mod.PatchPoint

# The innermost running ``Session.request`` (an auth plugin's token
# request runs inside the call it authenticates): (attempts counter,
# the enclosing call's entry, its attrs, its keywords: the dict object
# of that call, which tells its entry apart).  Every way out of a call
# takes its entry off (``_pop``): on_exit, on_error, and on_abandon when
# a fault of the point kept them from running.
_CALL: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    'instrument_ksa_call', default=None
)
# The attrs of the call that just failed, for ``error_of`` (the wrapper
# calls on_error, then the point's error function).
_FAILED: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    'instrument_ksa_failed', default=None
)

_VERSION = re.compile(r'^v\d+(?:\.\d+)*$')
_ROUTES: dict = {}
# Distinct routes remembered; beyond, the memo starts again.
MAX_ROUTES = 4096
MAX_SEGMENT = 40


def _id_like(segment: str) -> bool:
    if len(segment) > MAX_SEGMENT or '%' in segment:
        return True
    if _VERSION.match(segment):
        return False
    return any(c.isdigit() for c in segment)


def route_template(url) -> str:
    """The path of ``url`` with id-like segments (any with a digit but a
    version, long or percent-encoded ones) replaced by ``{id}``: no
    scheme, host, query string or fragment."""
    if not isinstance(url, str):
        return ''
    route = _ROUTES.get(url)
    if route is not None:
        return route
    path = parse.urlsplit(url).path
    route = '/'.join(
        '{id}' if seg and _id_like(seg) else seg for seg in path.split('/')
    )
    if not route.startswith('/'):
        route = '/' + route
    if len(_ROUTES) >= MAX_ROUTES:
        _ROUTES.clear()
    _ROUTES[url] = route
    return route


# Well-known service types by a path segment or the default port of
# an endpoint (an SDK proxy names only its ``endpoint_override``).
KNOWN_TYPES = frozenset(
    (
        'placement',
        'compute',
        'network',
        'image',
        'volume',
        'volumev3',
        'block-storage',
        'identity',
        'baremetal',
        'key-manager',
        'accelerator',
        'shared-file-system',
        'object-store',
    )
)
DEFAULT_PORTS = {
    8778: 'placement',
    9696: 'network',
    9292: 'image',
    8776: 'block-storage',
    5000: 'identity',
    35357: 'identity',
    8774: 'compute',
    6385: 'baremetal',
    9311: 'key-manager',
}
_ENDPOINTS: dict = {}


def _endpoint_type(url):
    """A service type read from an endpoint URL, or None."""
    if not isinstance(url, str):
        return None
    if url in _ENDPOINTS:
        return _ENDPOINTS[url]
    stype = None
    try:
        parts = parse.urlsplit(url)
        for seg in parts.path.split('/'):
            if seg in KNOWN_TYPES:
                stype = seg
                break
        else:
            port = parts.port
            stype = DEFAULT_PORTS.get(port) if port is not None else None
    except ValueError:
        pass
    if len(_ENDPOINTS) >= MAX_ROUTES:
        _ENDPOINTS.clear()
    _ENDPOINTS[url] = stype
    return stype


def _service_type(kwargs: dict, url, route: str):
    """The called service's type: the endpoint filter's (keystoneauth1
    adapters), the microversion's (``OpenStack-API-Version: placement
    1.36``, read for its service type only), the endpoint's (a path
    segment or default port of ``endpoint_override`` or an absolute
    URL), ``identity`` for a token request; else None.

    ``endpoint_filter``, ``endpoint_override``,
    ``microversion_service_type`` and ``headers`` are read by keyword:
    keystoneauth1's callers pass them so (they come after the sixth
    parameter; ``headers`` is in ``**kwargs``)."""
    endpoint_filter = kwargs.get('endpoint_filter')
    if endpoint_filter:
        stype = endpoint_filter.get('service_type')
        if stype:
            return stype
    stype = kwargs.get('microversion_service_type')
    if stype:
        return stype
    headers = kwargs.get('headers')
    if headers:
        version = headers.get('OpenStack-API-Version') or headers.get(
            'openstack-api-version'
        )
        if isinstance(version, str) and ' ' in version:
            return version.split(' ', 1)[0]
    if '/auth/' in route:
        return 'identity'
    return _endpoint_type(kwargs.get('endpoint_override')) or (
        _endpoint_type(url) if isinstance(url, str) and '://' in url else None
    )


# What on_enter reads of ``Session.request(url, method, ...)``: ``url``
# and ``method`` by name (by keyword or at their places in its
# signature), and the keywords dict (what the service type is read
# from, and the identity of the call's entry in ``_CALL``: the same
# object at its exit).
REQUEST_ARGS = ('url', 'method', points_mod.KEYWORDS)


def _request_attrs(instance, url, method, kwargs) -> dict:
    """on_enter of ``Session.request`` (``REQUEST_ARGS``)."""
    route = route_template(url)
    attrs = {
        schema.ATTR_SERVICE_TYPE: _service_type(kwargs, url, route),
        schema.ATTR_METHOD: method if isinstance(method, str) else None,
        schema.ATTR_ROUTE: route,
    }
    _CALL.set(([0], _CALL.get(), attrs, kwargs))
    return attrs


def _pop(kwargs: dict):
    """Take the entry of the call of ``kwargs`` off, and any left above
    it; the enclosing call's is current again.  None when that call has
    none (its on_enter did not get to push it, or it was taken off)."""
    entry = _CALL.get()
    while entry is not None:
        if entry[3] is kwargs:
            _CALL.set(entry[1])
            return entry
        entry = entry[1]
    return None


def _attempts(kwargs: dict, failed: bool = False) -> int:
    """The ending call's attempts; makes the enclosing call current."""
    entry = _pop(kwargs)
    if entry is None:
        return 0
    if failed:
        _FAILED.set(entry[2])
    return entry[0][0]


def _request_abandoned(instance, args, kwargs) -> None:
    """on_abandon: a fault of the point (starting the span, or reading
    the clock at its end) kept on_exit or on_error from running: the
    call's entry is taken off all the same."""
    _pop(kwargs)
    _FAILED.set(None)


def _count_send(instance, args, kwargs) -> None:
    """Hook on ``Session._send_request``: one more request sent."""
    entry = _CALL.get()
    if entry is not None:
        entry[0][0] += 1


def _request_done(instance, args, kwargs, result) -> dict:
    return {
        schema.ATTR_STATUS: getattr(result, 'status_code', None),
        schema.ATTR_ATTEMPTS: _attempts(kwargs),
    }


def _names(exc: BaseException) -> set:
    return {cls.__name__ for cls in type(exc).__mro__}


def failure_class(exc: BaseException) -> str:
    """What kind of failure ``exc`` (raised by ``Session.request``) is
    (one of ``schema.FAILURE_CLASSES``)."""
    if isinstance(getattr(exc, 'http_status', None), int):
        return 'http'
    names = _names(exc)
    if 'ConnectTimeout' in names:
        cause = exc.__cause__ or exc.__context__
        if cause is not None and 'ReadTimeout' in _names(cause):
            return 'read_timeout'
        return 'connect_timeout'
    if 'SSLError' in names:
        return 'ssl'
    if 'ConnectFailure' in names:
        return 'connect_failure'
    if 'ConnectionError' in names:
        return 'connection'
    return 'other'


def _request_failed(instance, args, kwargs, exc) -> dict:
    status = getattr(exc, 'http_status', None)
    return {
        schema.ATTR_STATUS: status if isinstance(status, int) else None,
        schema.ATTR_FAILURE: failure_class(exc),
        schema.ATTR_ATTEMPTS: _attempts(kwargs, failed=True),
    }


def error_of(exc: BaseException) -> tuple:
    """``(class, message)``: the message names the service, method and
    route template, then the HTTP status or the failure class, e.g.
    ``network POST /v2.0/ports: HTTP 409`` (keystoneauth1's own
    messages quote the URL or the response body)."""
    kind = failure_class(exc)
    status = getattr(exc, 'http_status', None)
    if kind == 'http' and isinstance(status, int):
        what = 'HTTP %d' % status
    else:
        what = kind.replace('_', ' ')
    call = _FAILED.get()
    _FAILED.set(None)
    if call:
        what = '%s %s %s: %s' % (
            call.get(schema.ATTR_SERVICE_TYPE) or 'unknown service',
            call.get(schema.ATTR_METHOD),
            call.get(schema.ATTR_ROUTE),
            what,
        )
    return errors.error_class(exc), what


KSA_POINTS = (
    P(
        'keystoneauth1.session',
        'Session.request',
        schema.EV_KSA_REQUEST,
        None,
        context=None,
        on_enter=points_mod.reads(_request_attrs, *REQUEST_ARGS),
        on_exit=_request_done,
        on_error=_request_failed,
        on_abandon=_request_abandoned,
        error=error_of,
        request_outside_spans=False,
    ),
    P(
        'keystoneauth1.session',
        'Session._send_request',
        'ksa.send',
        kind=points_mod.HOOK,
        on_enter=_count_send,
    ),
)

AUTH_TOKEN_POINTS = (
    P(
        'keystonemiddleware.auth_token',
        'AuthProtocol.process_request',
        schema.EV_AUTH_TOKEN,
        'api',
        context=None,
        request_outside_spans=False,
    ),
)


class KeystoneauthTarget(base.Target):
    """``ksa.request`` spans: every call to another service."""

    name = 'keystoneauth'
    requires = {'keystoneauth1': '>=3.4.0'}
    surveyed = {'keystoneauth1': ('5.18.1',)}

    def points(self, ctx: base.Context) -> list:
        return list(KSA_POINTS)


class KeystoneMiddlewareTarget(base.Target):
    """``api.auth_token`` spans: token validation in nova-api."""

    name = 'keystonemiddleware'
    requires = {'keystonemiddleware': ''}
    surveyed = {'keystonemiddleware': ('13.0.1',)}

    def points(self, ctx: base.Context) -> list:
        return list(AUTH_TOKEN_POINTS)
