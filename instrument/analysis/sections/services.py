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
"""``services``: nova's calls to other OpenStack services.

Rolls up the ``ksa.request`` spans (keystoneauth1: placement, neutron,
glance, cinder, keystone...) and ``api.auth_token`` spans
(keystonemiddleware's token validation in nova-api) per operation,
service and route: count, latency percentiles, errors by failure class
(``connect_timeout``, ``read_timeout``, ``http`` ...), retries, and
the share of the operation's critical path spent in them.  Calls made
outside any request (periodic tasks, start-up) are the operation
``(no request)``.  ``report`` makes the ``services`` section of the
JSON report (the service type as recorded: ``volumev3``); ``text`` and
``html_section`` render it, each type by its readable name
(``block-storage (cinder)``, ``display_name``).

A call answered with an HTTP error counts as an error of that status
(``http_409``) whether keystoneauth1 raised it or, as neutronclient and
nova's placement client ask (``raise_exc=False``), returned it for the
client to raise.  ``failure`` names the called service in the failure
table: a ``ksa.request`` that raised (a time-out, a refused
connection...) is a row of its service type, and so is a nova span that
failed right after a call answered with an HTTP error (neutronclient
raising for a 500 of neutron's port creation is a ``network`` row with
that status).
"""

import collections
import html
import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.model import breakdown
from instrument.analysis.model import spans as spans_mod
from instrument.analysis.render import fmt
from instrument.analysis.sections import base

EVENTS = frozenset((schema.EV_KSA_REQUEST, schema.EV_AUTH_TOKEN))
NO_REQUEST = '(no request)'
# Request ids kept per row (every number traced to requests).
KEEP_REQUESTS = 5
# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_DUR = spans_mod.S_DUR
S_PARENT = spans_mod.S_PARENT
S_ST = spans_mod.S_ST
S_ATTRS = spans_mod.S_ATTRS
S_START = spans_mod.S_START
S_ERR = spans_mod.S_ERR


def http_error(attrs: dict) -> typing.Optional[int]:
    """The HTTP error status (400 or more) of a call's attrs, or None."""
    status = attrs.get(schema.ATTR_STATUS)
    if isinstance(status, int) and status >= 400:
        return status
    return None


def error_class(st: typing.Optional[str], attrs: dict) -> typing.Optional[str]:
    """The errors-by-class key of a call: its failure class, with the
    status for HTTP errors (``http_500``), whether raised or returned;
    None for a call that did not fail."""
    status = http_error(attrs)
    if st == schema.ST_ERROR:
        kind = attrs.get(schema.ATTR_FAILURE) or 'error'
        if kind == 'http' and status is not None:
            return 'http_%d' % status
        return kind
    if status is not None:
        return 'http_%d' % status
    return None


def _where(attrs: dict) -> tuple:
    stype = attrs.get(schema.ATTR_SERVICE_TYPE) or 'unknown service'
    return stype, '%s %s %s' % (
        stype,
        attrs.get(schema.ATTR_METHOD),
        attrs.get(schema.ATTR_ROUTE),
    )


def failure(tree: typing.Any, sid: typing.Any) -> typing.Optional[tuple]:
    """``(component, event, class, message)`` of the failure table for
    the error origin ``sid`` when another service is where it came from,
    else None.  A ``ksa.request`` that raised is its service type's row.
    Another span is, when the last call under it answered with an HTTP
    error and nothing under it but such calls (clean-ups) started
    afterwards: the called service's row, with the class of the
    exception nova raised and the call's status."""
    spans = tree.spans
    s = spans[sid]
    err = s[S_ERR] or {}
    cls = err.get('cls') or 'error'
    if s[S_EV] == schema.EV_KSA_REQUEST:
        stype, _ = _where(s[S_ATTRS] or {})
        return stype, schema.EV_KSA_REQUEST, cls, err.get('msg') or ''
    last = None
    others = []
    for cur in tree.subtree(sid):
        c = spans[cur]
        if cur == sid:
            continue
        if c[S_EV] not in EVENTS:
            others.append(c[S_START])
            continue
        if c[S_DUR] is None or http_error(c[S_ATTRS] or {}) is None:
            continue
        end = c[S_START] + c[S_DUR]
        if last is None or end > last[0]:
            last = (end, c)
    if last is None or any(start >= last[0] for start in others):
        return None
    attrs = last[1][S_ATTRS]
    stype, where = _where(attrs)
    return (
        stype,
        schema.EV_KSA_REQUEST,
        cls,
        '%s: HTTP %s' % (where, http_error(attrs)),
    )


def _key(ev: str, attrs: dict) -> tuple:
    if ev == schema.EV_AUTH_TOKEN:
        return 'identity', '-', 'token validation (keystonemiddleware)'
    return (
        attrs.get(schema.ATTR_SERVICE_TYPE) or 'unknown',
        attrs.get(schema.ATTR_METHOD) or '-',
        attrs.get(schema.ATTR_ROUTE) or '-',
    )


class _Row:
    __slots__ = ('durs', 'errors', 'retries', 'critical_us', 'requests')

    def __init__(self) -> None:
        self.durs: list = []
        self.errors: collections.Counter = collections.Counter()
        self.retries = 0
        self.critical_us = 0
        self.requests: list = []

    def add(
        self, dur: int, st, attrs: dict, req, critical: bool, start: int = 0
    ) -> None:
        self.durs.append(dur)
        kind = error_class(st, attrs)
        if kind is not None:
            self.errors[kind] += 1
        attempts = attrs.get(schema.ATTR_ATTEMPTS)
        if isinstance(attempts, int) and attempts > 1:
            self.retries += attempts - 1
        if critical:
            self.critical_us += dur
        if req is not None:
            # the first requests by (start, id), whatever the order
            # they finished in
            base.keep_best(self.requests, (start, req), KEEP_REQUESTS)

    def merge(self, other: '_Row') -> None:
        self.durs.extend(other.durs)
        self.errors.update(other.errors)
        self.retries += other.retries
        self.critical_us += other.critical_us
        base.merge_best(self.requests, other.requests, KEEP_REQUESTS)


class ServiceCalls:
    """The calls to other services of one analysis pass (mergeable)."""

    def __init__(self) -> None:
        # (operation, service, method, route): _Row
        self.rows: dict = {}
        # operation: [requests, sum of latency us]
        self.ops: dict = {}

    def _row(self, key: tuple) -> _Row:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = _Row()
        return row

    def add_request(self, summary: typing.Any, spans: dict) -> None:
        """The calls of a finished request (its ``RequestSummary`` and
        spans, ``spans.S_*`` lists)."""
        critical = summary.critical or ()
        op = summary.kind
        for sid, s in spans.items():
            ev = s[S_EV]
            dur = s[S_DUR]
            if ev not in EVENTS or dur is None:
                continue
            attrs = s[S_ATTRS] or {}
            parent = spans.get(s[S_PARENT])
            # A token request inside the call it authenticates is on the
            # critical path through that call: counted once.
            nested = parent is not None and parent[S_EV] in EVENTS
            self._row((op,) + _key(ev, attrs)).add(
                dur,
                s[S_ST],
                attrs,
                summary.req,
                sid in critical and not nested,
                summary.start,
            )
        # Every request of the operation counts in the denominator of
        # the critical-path share, with or without calls of its own.
        entry = self.ops.setdefault(op, [0, 0])
        entry[0] += 1
        entry[1] += max(0, summary.end - summary.start)

    def add_orphan(self, rec: typing.Any) -> None:
        """A call outside any request (an ``X`` record)."""
        attrs = rec.attrs or {}
        self._row((NO_REQUEST,) + _key(rec.ev, attrs)).add(
            rec.dur_us, rec.st, attrs, None, False
        )

    def merge(self, other: 'ServiceCalls') -> None:
        for key, row in other.rows.items():
            self._row(key).merge(row)
        for op, (n, us) in other.ops.items():
            entry = self.ops.setdefault(op, [0, 0])
            entry[0] += n
            entry[1] += us

    def report(self) -> list:
        """The rows of the report, by operation then calls."""
        out = []
        for (op, stype, method, route), row in self.rows.items():
            durs = sorted(row.durs)
            n = len(durs)
            total = self.ops.get(op, [0, 0])[1]
            out.append(
                {
                    'operation': op,
                    'service': stype,
                    'method': method,
                    'route': route,
                    'count': n,
                    'p50_us': _pct(durs, 0.50),
                    'p95_us': _pct(durs, 0.95),
                    'p99_us': _pct(durs, 0.99),
                    'max_us': durs[-1] if n else 0,
                    'total_us': sum(durs),
                    'errors': dict(sorted(row.errors.items())),
                    'retries': row.retries,
                    'critical_share': (row.critical_us / total)
                    if total
                    else None,
                    'requests': [req for _start, req in row.requests],
                }
            )
        out.sort(
            key=lambda r: (
                r['operation'] == NO_REQUEST,
                r['operation'],
                -r['count'],
                r['service'],
                r['route'],
                r['method'],
            )
        )
        return out


class Services(base.Section):
    """``report['services']``: calls to other services, per operation,
    service and route."""

    key = 'services'
    routes = (
        # the calls outside requests; a request's come with it finished
        routes.Route('X', EVENTS, (routes.NONE, routes.PERIODIC), 'orphan'),
    )

    def __init__(self, ctx: base.Context) -> None:
        self.calls = ServiceCalls()

    def orphan(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.calls.add_orphan(rec)

    def finished(self, done: typing.Any) -> None:
        self.calls.add_request(done.summary, done.request.spans)

    def merge(self, other: 'Services') -> None:
        self.calls.merge(other.calls)

    def report(self, view: base.View) -> list:
        return self.calls.report()

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        out: list = []
        text(report, out)
        return out

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return [html_section(report)]


def _pct(durs: list, q: float) -> int:
    if not durs:
        return 0
    return durs[min(len(durs) - 1, int(q * len(durs)))]


def _ms(us) -> str:
    return '-' if us is None else '%.1f' % (us / 1000.0)


def _errors(errors: dict) -> str:
    return (
        ', '.join('%s %d' % (k, v) for k, v in sorted(errors.items())) or '-'
    )


def _share(value) -> str:
    return '-' if value is None else '%.1f%%' % (100 * value)


HEADERS = [
    'operation',
    'service',
    'method',
    'route',
    'calls',
    'p50 ms',
    'p95 ms',
    'max ms',
    'errors',
    'retries',
    'crit. path',
]


# The OpenStack project behind each service type of the service-types
# authority (``breakdown.SERVICE_ALIASES`` maps the aliases, cinder's
# volumev3, onto them).  placement is its own project's name.
PROJECTS = {
    'network': 'neutron',
    'image': 'glance',
    'block-storage': 'cinder',
    'identity': 'keystone',
    'compute': 'nova',
    'baremetal': 'ironic',
    'key-manager': 'barbican',
    'accelerator': 'cyborg',
    'shared-file-system': 'manila',
    'object-store': 'swift',
}


def display_name(stype: str) -> str:
    """The readable name of a service type in the text and HTML tables:
    its service-types authority name and its project (``volumev3``:
    ``block-storage (cinder)``); a type nobody knows as it is.  The
    JSON report keeps the type recorded."""
    name = breakdown.SERVICE_ALIASES.get(stype, stype)
    project = PROJECTS.get(name)
    return '%s (%s)' % (name, project) if project else name


def _cells(r: dict) -> list:
    return [
        r['operation'],
        display_name(r['service']),
        r['method'],
        r['route'],
        str(r['count']),
        _ms(r['p50_us']),
        _ms(r['p95_us']),
        _ms(r['max_us']),
        _errors(r['errors']),
        str(r['retries']),
        _share(r['critical_share']),
    ]


def text(report: dict, out: list) -> None:
    """The "Services called" section of the text report."""
    rows = report.get('services')
    if not rows:
        return
    title = 'Services called (keystoneauth1, keystonemiddleware)'
    out.extend(['', title, '=' * len(title)])
    out.extend(
        fmt.table(
            HEADERS, [_cells(r) for r in rows], aligns='llll' + 'r' * 4 + 'lrr'
        )
    )
    out.append(
        'crit. path: share of the operation\'s requests\' time spent '
        'in these calls on their critical path'
    )


def html_section(report: dict) -> str:
    """The "Services called" section of the HTML report ('' if none)."""
    rows = report.get('services')
    if not rows:
        return ''
    left = (0, 1, 2, 3, 8)  # text columns (the CSS class ``l``)

    def cls(i):
        return ' class="l"' if i in left else ''

    head = ''.join(
        '<th%s>%s</th>' % (cls(i), html.escape(h))
        for i, h in enumerate(HEADERS)
    )
    body = []
    for r in rows:
        title = html.escape(', '.join(r['requests']))
        cells = [
            '<td%s>%s</td>' % (cls(i), html.escape(c))
            for i, c in enumerate(_cells(r))
        ]
        # the type as recorded (the JSON's), on the readable name
        cells[1] = '<td class="l" title="service type %s">%s</td>' % (
            html.escape(r['service']),
            html.escape(display_name(r['service'])),
        )
        body.append('<tr title="%s">%s</tr>' % (title, ''.join(cells)))
    return (
        '<h2>Services called</h2>\n<p>Calls nova made through '
        'keystoneauth1 (placement, neutron, glance, cinder, keystone) '
        'and keystonemiddleware\'s token validation, per operation; '
        'hover a row for request ids.</p>\n<table><tr>%s</tr>\n%s\n'
        '</table>' % (head, '\n'.join(body))
    )
