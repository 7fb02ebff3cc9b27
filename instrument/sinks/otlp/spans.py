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
"""Event records -> OpenTelemetry SDK spans (``ReadableSpan``).

Owns the mapping of the event schema onto OTLP, and the little state it
needs.  Runs only in the OTLP sink's exporter thread, one builder per
process.

* Trace id: ``recorder.trace_id_hex(req)`` for records with a request id,
  so the spans of one request share a trace on every host (a periodic
  task run has an id of its own: one trace per run).  Records without
  a request id (start-up, service heartbeats) share the trace of their
  local root (the nearest ancestor in this process whose parent is
  absent or remote), ``(random per-process 64 bits << 64) | root span
  id``.  A span without a request id that ends before its parent is
  exported is held until the parent is seen (at most ``MAX_HELD``
  spans, for as long as the sink says; then it goes out as a trace of
  its own).
* Span id and parent: the event's own 64-bit ids.  A parent whose id
  carries another process's prefix is marked remote (the RPC sender).
* ``X`` records become spans; ``I`` records become zero-length child
  spans of their enclosing span (they may be read after it was
  exported).  ``B`` records are not exported (the file sink keeps the
  starts of calls that never end); those without a request id are read
  to root traces.  ``M`` ``process.start`` feeds resource attributes,
  ``sql.fingerprint`` gives SQL spans ``db.query.text`` (the
  fingerprint: literals replaced, never parameters).  ``C`` records are
  not spans.

Every map here is bounded; what falls out degrades (a span becomes a
trace of its own), it never grows.
"""

import os

from opentelemetry import trace as trace_api
from opentelemetry.sdk import resources
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import export as sdk_export
from opentelemetry.sdk.util import instrumentation

from instrument import schema
from instrument.runtime import record
from instrument.runtime import recorder

SCOPE_NAME = 'openstack-instrument'
ATTR_PREFIX = 'instrument.'

# Bounds of the builder's maps.
MAX_ROOTS = 10000
MAX_HELD = 10000
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
    'api.': (
        ('method', 'http.request.method'),
        ('route', 'http.route'),
        ('status', 'http.response.status_code'),
    ),
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
    return int(recorder.trace_id_hex(req), 16)


# Lone surrogates (a non-UTF-8 file name in an error message) would make
# protobuf refuse the whole export request: written out instead.
_text = record.safe_text


def _value(value):
    """An OTLP attribute value, or None to leave the key out."""
    if value is None:
        return None
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):
            return tuple(_text(v) for v in value)
        if value and all(
            isinstance(v, (int, float)) and not isinstance(v, bool)
            for v in value
        ):
            return tuple(value)
        return _text(record.dumps(value))
    return _text(record.dumps(value))


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


class _Resource(resources.Resource):
    """A resource that is hashed once: the OTLP encoder groups spans by
    resource and hashes it (a JSON dump) for every span."""

    def __hash__(self) -> int:
        value = self.__dict__.get('_hash')
        if value is None:
            value = self._hash = super().__hash__()
        return value


class SpanBuilder:
    """Turns one process's event records into ``ReadableSpan`` objects."""

    def __init__(self, identity, version: str = 'unknown') -> None:
        self.identity = identity
        self.scope = instrumentation.InstrumentationScope(SCOPE_NAME, version)
        self._salt = (int.from_bytes(os.urandom(8), 'big') | 1) << 64
        # span id -> local trace id, for spans without request id.
        self._roots = {}
        # parent span id -> records without request id waiting for it.
        self._held = {}
        self.held = 0
        self._fingerprints = {}
        self._resources = {}
        self._process_attrs = {}

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
            res = _Resource.create(attrs)
            res = _Resource(res.attributes, res.schema_url)
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

    def add(self, rec, pid: int, out: list) -> None:
        """Read one record; append the spans it makes ready, if any."""
        ph = rec[_R.I_PH]
        if ph == schema.PH_COMPLETE:
            if rec[_R.I_EV] == schema.EV_SQL_TXN and rec[_R.I_ATTRS]:
                # the round trips it carries: spans of their own, as the
                # sql.query records they stand for
                for ts, dur, qattrs in schema.folded(
                    rec[_R.I_TS],
                    rec[_R.I_ATTRS],
                    record.span_hex(rec[_R.I_SPAN]),
                ):
                    self.add(
                        (
                            ph,
                            ts,
                            dur,
                            rec[_R.I_HOST],
                            rec[_R.I_SVC],
                            None,
                            schema.EV_SQL_QUERY,
                            recorder.new_span_id(),
                            rec[_R.I_PARENT],
                            rec[_R.I_REQ],
                            rec[_R.I_GREQ],
                            rec[_R.I_INST],
                            schema.ST_OK,
                            None,
                            qattrs,
                        ),
                        pid,
                        out,
                    )
            span = span_int(rec[_R.I_SPAN])
            if rec[_R.I_REQ] is not None:
                out.append(
                    self._span(rec, span, trace_int(rec[_R.I_REQ]), pid)
                )
            else:
                self._local(rec, span, pid, out)
        elif ph == schema.PH_INSTANT:
            # A zero-length child of the enclosing span, with an id of
            # its own (instants have none).
            span = recorder.new_span_id()
            if rec[_R.I_REQ] is not None:
                out.append(
                    self._span(rec, span, trace_int(rec[_R.I_REQ]), pid)
                )
            else:
                self._local(rec, span, pid, out)
        elif ph == schema.PH_BEGIN:
            if rec[_R.I_REQ] is None:
                span = span_int(rec[_R.I_SPAN])
                trace = self._known_trace(rec, span)
                self._remember(span, trace or self._salt | span)
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

    def release(self, older_than_us: int | None, pid: int, out: list) -> None:
        """Give up waiting for the parents of held spans that ended before
        ``older_than_us`` (and all of them when it is None): each group
        goes out as a trace of its own."""
        held = self._held
        while held:
            parent, group = next(iter(held.items()))
            if (
                older_than_us is not None
                and _end_us(group[0]) >= older_than_us
            ):
                return
            del held[parent]
            self.held -= len(group)
            trace = self._salt | parent
            self._remember(parent, trace)
            for rec, span in group:
                self._resolve(rec, span, trace, pid, out)

    # -- spans without request id ------------------------------------------

    def _known_trace(self, rec, span: int):
        trace = self._roots.get(span)
        if trace is None:
            parent = rec[_R.I_PARENT]
            if parent is not None:
                trace = self._roots.get(span_int(parent))
        return trace

    def _remember(self, span: int, trace: int) -> None:
        roots = self._roots
        if span not in roots and len(roots) >= MAX_ROOTS:
            roots.pop(next(iter(roots)))
        roots[span] = trace

    def _local(self, rec, span: int, pid: int, out: list) -> None:
        trace = self._known_trace(rec, span)
        if trace is None:
            parent = rec[_R.I_PARENT]
            if parent is not None:
                parent = span_int(parent)
                if parent >> 32 == span >> 32:
                    # A local parent not seen yet: wait for it.
                    self._hold(parent, rec, span, pid, out)
                    return
            trace = self._salt | span
        self._resolve(rec, span, trace, pid, out)

    def _hold(self, parent: int, rec, span: int, pid: int, out: list) -> None:
        if self.held >= MAX_HELD:
            self.release(None, pid, out)
        self._held.setdefault(parent, []).append((rec, span))
        self.held += 1

    def _resolve(
        self, rec, span: int, trace: int, pid: int, out: list
    ) -> None:
        """Export ``rec`` in ``trace``, and the held spans below it."""
        todo = [(rec, span)]
        while todo:
            rec, span = todo.pop()
            self._remember(span, trace)
            out.append(self._span(rec, span, trace, pid))
            group = self._held.pop(span, None)
            if group:
                self.held -= len(group)
                todo.extend(group)

    # -- the span ----------------------------------------------------------

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
            out[ATTR_PREFIX + 'inst'] = tuple(_text(str(i)) for i in inst)
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

    def _span(self, rec, span: int, trace: int, pid: int):
        context = trace_api.SpanContext(trace, span, False, _SAMPLED)
        parent = rec[_R.I_PARENT]
        parent_ctx = None
        if parent is not None:
            parent = span_int(parent)
            parent_ctx = trace_api.SpanContext(
                trace, parent, (parent >> 32) != (span >> 32), _SAMPLED
            )
        err = rec[_R.I_ERR]
        if rec[_R.I_ST] == schema.ST_ERROR or err is not None:
            desc = _text('%s: %s' % (err[0], err[1])) if err else None
            status = trace_api.Status(trace_api.StatusCode.ERROR, desc)
        else:
            status = trace_api.Status(trace_api.StatusCode.UNSET)
        start = rec[_R.I_TS] * 1000
        return sdk_trace.ReadableSpan(
            name=rec[_R.I_EV],
            context=context,
            parent=parent_ctx,
            resource=self.resource(pid),
            attributes=self._attributes(rec),
            kind=_KINDS.get(rec[_R.I_EV], trace_api.SpanKind.INTERNAL),
            status=status,
            start_time=start,
            end_time=start + (rec[_R.I_DUR] or 0) * 1000,
            instrumentation_scope=self.scope,
        )


def _end_us(entry) -> int:
    """End (µs) of a held ``(record, span id)`` entry."""
    rec = entry[0]
    return rec[_R.I_TS] + (rec[_R.I_DUR] or 0)
