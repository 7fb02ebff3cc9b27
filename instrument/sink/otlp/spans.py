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
"""Event tuples -> OpenTelemetry SDK spans (``ReadableSpan``).

Owns the mapping of the event schema onto OTLP, and the little state it
needs.  Runs only in the OTLP sink's exporter thread, one builder per
process.

* Trace id: ``tracer.trace_id_hex(req)`` for records with a request id,
  so the spans of one request share a trace on every host.  Records
  without a request id (periodic tasks, service heartbeats) get the trace
  of their nearest ancestor without a request id in this process, rooted
  at ``(random per-process 64 bits << 64) | root span id``: one trace per
  periodic task run.
* Span id and parent: the event's own 64-bit ids.  A parent whose id
  carries another process's prefix is marked remote (the RPC sender).
* ``X`` records become spans; ``I`` records become span events on their
  enclosing span (or zero-length spans when they have none).  ``B``
  records are not exported (the file sink keeps the starts of calls that
  never end); only those without a request id are read, to root traces.
  ``M`` ``process.start`` feeds resource attributes, ``sql.fingerprint``
  gives SQL spans ``db.query.text`` (the fingerprint: literals replaced,
  never parameters).  ``C`` records are not spans.

Every map here is bounded; what falls out degrades (a span becomes its
own trace, an instant is lost and counted), it never grows.
"""

import os

from opentelemetry import trace as trace_api
from opentelemetry.sdk import resources
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import export as sdk_export
from opentelemetry.sdk.util import instrumentation

from instrument import record
from instrument import schema
from instrument import tracer

SCOPE_NAME = 'openstack-instrument'
ATTR_PREFIX = 'instrument.'

# Bounds of the builder's maps.
MAX_OPEN_ROOTS = 10000
MAX_PENDING_EVENTS = 10000
MAX_FINGERPRINTS = 10000

# What an SDK exporter's export() returns when the collector took it.
EXPORT_SUCCESS = sdk_export.SpanExportResult.SUCCESS

_R = record
_SAMPLED = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)

_KINDS = {
    'api.request': trace_api.SpanKind.SERVER,
    'rpc.call': trace_api.SpanKind.CLIENT,
    'rpc.cast': trace_api.SpanKind.PRODUCER,
    'rpc.dispatch': trace_api.SpanKind.SERVER,
    'sql.query': trace_api.SpanKind.CLIENT,
    'scheduler.placement.candidates': trace_api.SpanKind.CLIENT,
    'scheduler.claim': trace_api.SpanKind.CLIENT,
}

# attrs keys copied to OpenTelemetry semantic-convention names, per event
# prefix (the instrument.attrs.* copies stay, so nothing is renamed away).
_SEMCONV = {
    'api.': (('method', 'http.request.method'), ('route', 'http.route'),
             ('status', 'http.response.status_code')),
    'rpc.': (('method', 'rpc.method'), ('topic', 'rpc.service')),
    'sql.': (('db', 'db.namespace'), ('kind', 'db.operation.name')),
}


def span_int(value) -> int:
    """Span ids are ints in memory; accept their 16-hex form too."""
    if value.__class__ is int:
        return value
    return int(value, 16)


def trace_int(req: str) -> int:
    """The 128-bit trace id of a request id."""
    return int(tracer.trace_id_hex(req), 16)


def _value(value):
    """An OTLP attribute value, or None to leave the key out."""
    if value is None:
        return None
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):
            return tuple(value)
        if value and all(isinstance(v, (int, float)) and
                         not isinstance(v, bool) for v in value):
            return tuple(value)
        return record._dumps(value)
    return record._dumps(value)


def flatten(attrs, prefix: str, out: dict) -> dict:
    """``{'a': {'b': 1}}`` -> ``{prefix + 'a.b': 1}``; bounded depth 3."""
    _flatten(attrs, prefix, out, 3)
    return out


def _flatten(attrs, prefix, out, depth):
    for key, value in attrs.items():
        name = prefix + str(key)
        if isinstance(value, dict) and depth > 1:
            _flatten(value, name + '.', out, depth - 1)
            continue
        value = _value(value)
        if value is not None:
            out[name] = value


class SpanBuilder:
    """Turns one process's event tuples into ``ReadableSpan`` objects."""

    def __init__(self, identity, version: str = 'unknown') -> None:
        self.identity = identity
        self.version = version
        self.scope = instrumentation.InstrumentationScope(
            SCOPE_NAME, version)
        self._salt = (int.from_bytes(os.urandom(8), 'big') | 1) << 64
        self._roots = {}
        self._events = {}
        self._n_events = 0
        self._fingerprints = {}
        self._resources = {}
        self._process_attrs = {}
        self.lost = 0

    # -- resource ----------------------------------------------------------

    def resource(self, pid: int):
        """Resource of process ``pid``: service, host, instance."""
        res = self._resources.get(pid)
        if res is None:
            ident = self.identity
            attrs = {
                'service.name': ident.service,
                'service.namespace': 'openstack',
                'service.instance.id': '%s:%d' % (ident.host, pid),
                'host.name': ident.host,
                'process.pid': pid,
                ATTR_PREFIX + 'svc': ident.svc,
            }
            attrs.update(self._process_attrs)
            res = resources.Resource.create(attrs)
            self._resources = {pid: res}
        return res

    def _process_start(self, rec) -> None:
        attrs = rec[_R.I_ATTRS] or {}
        extra = {}
        if attrs.get('ppid') is not None:
            extra['process.parent_pid'] = attrs['ppid']
        for key in ('version', 'mode'):
            if attrs.get(key) is not None:
                extra[ATTR_PREFIX + key] = str(attrs[key])
        if extra != self._process_attrs:
            self._process_attrs = extra
            self._resources = {}

    # -- records -----------------------------------------------------------

    def add(self, rec: tuple, pid: int, out: list) -> None:
        """Read one record; append the span it completes, if any."""
        ph = rec[_R.I_PH]
        if ph == schema.PH_COMPLETE:
            out.append(self._span(rec, pid))
        elif ph == schema.PH_INSTANT:
            self._instant(rec, pid, out)
        elif ph == schema.PH_BEGIN:
            if rec[_R.I_REQ] is None:
                span = span_int(rec[_R.I_SPAN])
                self._remember_root(span, self._local_trace(rec, span))
        elif ph == schema.PH_META:
            ev = rec[_R.I_EV]
            if ev == 'process.start':
                self._process_start(rec)
            elif ev == 'sql.fingerprint':
                attrs = rec[_R.I_ATTRS] or {}
                if attrs.get('fp') and attrs.get('text'):
                    if len(self._fingerprints) >= MAX_FINGERPRINTS:
                        self._fingerprints.pop(next(iter(self._fingerprints)))
                    self._fingerprints[attrs['fp']] = attrs['text']

    def _local_trace(self, rec, span: int) -> int:
        parent = rec[_R.I_PARENT]
        if parent is not None:
            trace = self._roots.get(span_int(parent))
            if trace is not None:
                return trace
        return self._salt | span

    def _remember_root(self, span: int, trace: int) -> None:
        roots = self._roots
        if len(roots) >= MAX_OPEN_ROOTS:
            roots.pop(next(iter(roots)))
        roots[span] = trace

    def _trace_of(self, rec, span: int) -> int:
        req = rec[_R.I_REQ]
        if req is not None:
            return trace_int(req)
        trace = self._roots.pop(span, None)
        if trace is None:
            trace = self._local_trace(rec, span)
        return trace

    def _attributes(self, rec) -> dict:
        ev = rec[_R.I_EV]
        out = {ATTR_PREFIX + 'ev': ev, ATTR_PREFIX + 'svc': rec[_R.I_SVC]}
        if rec[_R.I_HOST] != self.identity.host:
            out[ATTR_PREFIX + 'host'] = rec[_R.I_HOST]
        if rec[_R.I_REQ] is not None:
            out[ATTR_PREFIX + 'req'] = rec[_R.I_REQ]
        if rec[_R.I_GREQ] is not None:
            out[ATTR_PREFIX + 'greq'] = rec[_R.I_GREQ]
        inst = rec[_R.I_INST]
        if inst:
            out[ATTR_PREFIX + 'inst'] = tuple(str(i) for i in inst)
        if rec[_R.I_TID] is not None:
            out['thread.id'] = rec[_R.I_TID]
        attrs = rec[_R.I_ATTRS]
        if attrs:
            flatten(attrs, ATTR_PREFIX + 'attrs.', out)
            for prefix, pairs in _SEMCONV.items():
                if ev.startswith(prefix):
                    for key, name in pairs:
                        value = _value(attrs.get(key))
                        if value is not None:
                            out[name] = value
            if ev == 'sql.query':
                text = self._fingerprints.get(attrs.get('fp'))
                if text is not None:
                    out['db.query.text'] = text
        err = rec[_R.I_ERR]
        if err is not None:
            out['error.type'] = err[0]
        return out

    def _span(self, rec, pid: int):
        span = span_int(rec[_R.I_SPAN])
        trace = self._trace_of(rec, span)
        context = trace_api.SpanContext(trace, span, False, _SAMPLED)
        parent = rec[_R.I_PARENT]
        parent_ctx = None
        if parent is not None:
            parent = span_int(parent)
            parent_ctx = trace_api.SpanContext(
                trace, parent, (parent >> 32) != (span >> 32), _SAMPLED)
        err = rec[_R.I_ERR]
        if rec[_R.I_ST] == schema.ST_ERROR or err is not None:
            desc = '%s: %s' % (err[0], err[1]) if err else None
            status = trace_api.Status(trace_api.StatusCode.ERROR, desc)
        else:
            status = trace_api.Status(trace_api.StatusCode.UNSET)
        start = rec[_R.I_TS] * 1000
        dur = rec[_R.I_DUR] or 0
        return sdk_trace.ReadableSpan(
            name=rec[_R.I_EV], context=context, parent=parent_ctx,
            resource=self.resource(pid), attributes=self._attributes(rec),
            events=self._take_events(span), kind=_KINDS.get(rec[_R.I_EV],
                                           trace_api.SpanKind.INTERNAL),
            status=status, start_time=start, end_time=start + dur * 1000,
            instrumentation_scope=self.scope)

    # -- instants ----------------------------------------------------------

    def _instant(self, rec, pid: int, out: list) -> None:
        parent = rec[_R.I_PARENT]
        if parent is None:
            # Nothing to attach it to: a zero-length span of its own.
            span = tracer.new_span_id()
            rec = rec[:_R.I_SPAN] + (span,) + rec[_R.I_SPAN + 1:]
            out.append(self._span(rec, pid))
            return
        attrs = {}
        if rec[_R.I_ATTRS]:
            flatten(rec[_R.I_ATTRS], ATTR_PREFIX + 'attrs.', attrs)
        event = sdk_trace.Event(rec[_R.I_EV], attrs, rec[_R.I_TS] * 1000)
        if self._n_events >= MAX_PENDING_EVENTS:
            oldest = self._events.pop(next(iter(self._events)))
            self._n_events -= len(oldest)
            self.lost += len(oldest)
        self._events.setdefault(span_int(parent), []).append(event)
        self._n_events += 1

    def _take_events(self, span: int):
        events = self._events.pop(span, None)
        if events is None:
            return ()
        self._n_events -= len(events)
        return events
