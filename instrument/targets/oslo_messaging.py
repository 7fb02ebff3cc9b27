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
"""oslo.messaging RPC: both sides of every hop (``instrument.targets``).

* ``rpc.call`` / ``rpc.cast``: the client side, ``_BaseCallContext``;
* ``rpc.dispatch``: the server side, ``RPCDispatcher._do_dispatch``,
  charged to the service and host of the endpoint that handles it;
* a hook on ``Transport._send`` puts ``instrument_traceparent`` (W3C
  form) into the serialised context of every RPC sent from inside an
  ``rpc.call`` / ``rpc.cast`` span, and the dispatch on the other side
  takes the sender's span id from it as its parent.  Peers without the
  library ignore the extra key (``RequestContext.from_dict`` reads only
  known keys).

Inside a periodic task run (a current span with a ``periodic-...``
request id, ``schema.periodic_req``) a send keeps the run's id rather
than that of the context it is given (nova's admin context of the
run), and names the context's id in ``ctx_req``: the analyser charges
what the other side does for it (a compute's database work through
nova-conductor) to the run by the span ids of the hop.  Nothing nova
sends is changed for it.

Which service an endpoint belongs to is the application's knowledge: a
target names the services of its endpoint modules in
``rpc_endpoint_services`` (nova's: compute, conductor, scheduler); this
one reads them from the other targets of the process.  What each event
records is documented in doc/source/events.rst.
"""

from instrument import schema
from instrument.patching import points as points_mod
from instrument.runtime import recorder as recorder_mod
from instrument.targets import base

TRACEPARENT_KEY = 'instrument_traceparent'

_RPC_EVENTS = ('rpc.call', 'rpc.cast')
_PERIODIC = schema.PERIODIC_REQ_PREFIX

P = points_mod.PatchPoint


def _in_periodic_run() -> bool:
    """Whether the current span is (under) a periodic task run."""
    frame = recorder_mod.current_frame()
    if frame is None:
        return False
    req = frame[recorder_mod.F_REQ]
    return req.__class__ is str and req.startswith(_PERIODIC)


def _rpc_context(ctxt):
    """The context of a send: its ``ctxt``, none inside a periodic
    task run (the span then inherits the run's request id)."""
    if _in_periodic_run():
        return None
    return ctxt


def _rpc_attrs(instance, ctxt, method):
    target = instance.target
    attrs = {schema.ATTR_METHOD: method, schema.ATTR_TOPIC: target.topic}
    if target.server:
        attrs[schema.ATTR_SERVER] = target.server
    if target.fanout:
        attrs[schema.ATTR_FANOUT] = True
    if _in_periodic_run():
        req = (
            ctxt.get('request_id')
            if ctxt.__class__ is dict
            else getattr(ctxt, 'request_id', None)
        )
        if req.__class__ is str:
            attrs[schema.ATTR_CONTEXT_REQ] = req
    return attrs


def _inject_traceparent(instance, ctxt):
    """Hook on ``Transport._send``: name the sending span in the
    context (``ctxt``, serialised: a dict)."""
    frame = recorder_mod.current_frame()
    if frame is None or frame[recorder_mod.F_EV] not in _RPC_EVENTS:
        return None
    if isinstance(ctxt, dict):
        span = frame[recorder_mod.F_SPAN]
        req = frame[recorder_mod.F_REQ]
        trace = (
            recorder_mod.trace_id_hex(req)
            if req
            else recorder_mod.trace_id_hex('%016x' % span)
        )
        ctxt[TRACEPARENT_KEY] = '00-%s-%016x-01' % (trace, span)
    return None


def _remote_span(ctxt):
    """The sender's span id out of a serialised context, or None."""
    value = ctxt.get(TRACEPARENT_KEY) if isinstance(ctxt, dict) else None
    if isinstance(value, str):
        parts = value.split('-')
        if len(parts) == 4 and len(parts[2]) == 16:
            return parts[2]
    return None


def _endpoint(endpoint):
    """The endpoint object behind oslo.messaging's wrapper of it."""
    return getattr(endpoint, '_endpoint', endpoint)


def _dispatch_service(endpoint_services: dict):
    def service(endpoint):
        return endpoint_services.get(type(_endpoint(endpoint)).__module__)

    return service


def _dispatch_host(endpoint):
    host = getattr(_endpoint(endpoint), 'host', None)
    return host if isinstance(host, str) else None


def _dispatch_attrs(instance, method):
    return {schema.ATTR_METHOD: method}


def points(endpoint_services=None) -> list:
    """The RPC points; ``endpoint_services`` maps the module of an
    endpoint class to the service its dispatched calls belong to.

    Every argument is read by name, found by keyword or at its place
    in the signature of the method patched (``points_mod.reads``,
    ``points_mod.Arg``): ``cast``/``call(ctxt, method, **kwargs)``,
    ``Transport._send(target, ctxt, message, ...)``,
    ``RPCDispatcher._do_dispatch(endpoint, method, ctxt, args)`` in
    every oslo.messaging that nova 29 to 34 use.  The module's
    functions are looked up here, when the points are made (the fault
    tests put theirs in their place).
    """
    reads = points_mod.reads
    arg = points_mod.Arg
    return [
        P(
            'oslo_messaging.rpc.client',
            '_BaseCallContext.cast',
            'rpc.cast',
            None,
            context=arg('ctxt', then=_rpc_context),
            on_enter=reads(_rpc_attrs, 'ctxt', 'method'),
        ),
        P(
            'oslo_messaging.rpc.client',
            '_BaseCallContext.call',
            'rpc.call',
            None,
            context=arg('ctxt', then=_rpc_context),
            on_enter=reads(_rpc_attrs, 'ctxt', 'method'),
        ),
        P(
            'oslo_messaging.transport',
            'Transport._send',
            'rpc.send',
            kind=points_mod.HOOK,
            on_enter=reads(_inject_traceparent, 'ctxt'),
        ),
        P(
            'oslo_messaging.rpc.dispatcher',
            'RPCDispatcher._do_dispatch',
            'rpc.dispatch',
            None,
            context=arg('ctxt'),
            remote_parent=arg('ctxt', then=_remote_span),
            service_from=arg(
                'endpoint',
                then=_dispatch_service(dict(endpoint_services or {})),
            ),
            host=arg('endpoint', then=_dispatch_host),
            on_enter=reads(_dispatch_attrs, 'method'),
        ),
    ]


class OsloMessagingTarget(base.Target):
    """Spans of RPC calls, casts and dispatches."""

    name = 'oslo_messaging'
    requires = {'oslo.messaging': ''}

    def points(self, ctx: base.Context) -> list:
        services = {}
        for target in ctx.targets:
            services.update(
                getattr(target, 'rpc_endpoint_services', None) or {}
            )
        return points(services)
