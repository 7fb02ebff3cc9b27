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
"""``findings``: what is wrong, and the nova.conf knob that fixes it.

The advisor: ``report`` runs every rule of ``analysis.rules.RULES``
over the other sections' results, the finished requests and the wait
records this section reads itself, per kind, name, host and service
(``WaitsByService``: the waits section's table has no service), and
lists the findings, the most sure first.  Shown first in the text
report, the HTML page and ``compare`` (findings resolved, new and
unchanged between two runs).  A run where no rule fired says so in one
line.
"""

import heapq
import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis import rules
from instrument.analysis.model import waits as request_waits
from instrument.analysis.render import fmt
from instrument.analysis.sections import base
from instrument.analysis.sections import services as service_calls
from instrument.analysis.sections import timelines

KEEP = rules.KEEP


class _Row:
    __slots__ = (
        'count',
        'errors',
        'total',
        'max',
        'queued',
        'queued_us',
        'size',
        'top',
    )

    def __init__(self) -> None:
        self.count = self.errors = self.total = self.max = 0
        self.queued = self.queued_us = 0
        self.size = None
        # (us, req) of the longest waits with a request, bounded
        self.top: list = []


class WaitsByService:
    """Every wait record, per (kind, name, host, svc, pid): count, errors
    (time-outs), total and longest wait, the waits over
    ``rules.BUILD_QUEUED_US``, the size the record named, and the
    ``KEEP`` longest waits' requests."""

    def __init__(
        self, since: typing.Optional[int], until: typing.Optional[int]
    ) -> None:
        self.since = since
        self.until = until
        self.rows: dict = {}

    def add(self, rec: typing.Any, ts: int) -> None:
        if (self.since is not None and ts < self.since) or (
            self.until is not None and ts >= self.until
        ):
            return
        kind = schema.WAIT_EVENTS.get(rec.ev)
        if kind is None:
            return
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        key = (
            kind,
            request_waits.wait_name(kind, attrs),
            rec.host or '',
            rec.svc or '',
            rec.pid,
        )
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = _Row()
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        row.count += 1
        row.total += dur
        row.max = max(row.max, dur)
        if rec.st == schema.ST_ERROR:
            row.errors += 1
        if dur >= rules.BUILD_QUEUED_US:
            row.queued += 1
            row.queued_us += dur
        size = attrs.get(schema.ATTR_SIZE)
        if isinstance(size, int) and not isinstance(size, bool):
            row.size = size
        if rec.req:
            item = (dur, str(rec.req))
            if len(row.top) < KEEP:
                heapq.heappush(row.top, item)
            elif item > row.top[0]:
                heapq.heapreplace(row.top, item)

    def merge(self, other: 'WaitsByService') -> None:
        for key, theirs in other.rows.items():
            row = self.rows.get(key)
            if row is None:
                self.rows[key] = theirs
                continue
            row.count += theirs.count
            row.errors += theirs.errors
            row.total += theirs.total
            row.max = max(row.max, theirs.max)
            row.queued += theirs.queued
            row.queued_us += theirs.queued_us
            if theirs.size is not None:
                row.size = theirs.size
            row.top = heapq.nlargest(KEEP, row.top + theirs.top)
            heapq.heapify(row.top)

    def table(self) -> list:
        return [
            {
                'kind': kind,
                'name': name,
                'host': host,
                'svc': svc,
                'pid': pid,
                'count': r.count,
                'errors': r.errors,
                'total_us': r.total,
                'max_us': r.max,
                'queued': r.queued,
                'queued_us': r.queued_us,
                'size': r.size,
                'requests': sorted(r.top, reverse=True),
            }
            for (kind, name, host, svc, pid), r in sorted(
                self.rows.items(), key=lambda kv: repr(kv[0])
            )
        ]


class RpcCalls:
    """``rpc.call`` ends per (topic, method): calls, those that timed
    out (``MessagingTimeout``), their callers (host, svc, pid), the
    ``KEEP`` longest timed-out calls' requests; ``rpc.dispatch`` ends
    per method: the server side's count and longest time; per caller
    the ``KEEP_WAITS`` longest calls answered (``waits``)."""

    KEEP_WAITS = 200

    def __init__(self) -> None:
        self.calls: dict = {}
        self.dispatch: dict = {}

    def add(self, rec: typing.Any) -> None:
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        method = attrs.get(schema.ATTR_METHOD)
        if not isinstance(method, str):
            return
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        if rec.ev == 'rpc.dispatch':
            row = self.dispatch.setdefault(method, [0, 0])
            row[0] += 1
            row[1] = max(row[1], dur)
            return
        topic = attrs.get(schema.ATTR_TOPIC)
        row = self.calls.setdefault(
            (str(topic or '?'), method),
            {
                'calls': 0,
                'timeouts': 0,
                'max_us': 0,
                'callers': set(),
                'top': [],
                'waits': {},
            },
        )
        row['calls'] += 1
        row['max_us'] = max(row['max_us'], dur)
        err = rec.err if isinstance(rec.err, dict) else None
        cls = err.get('cls') if err is not None else None
        # the class as the tracer names it, with its module
        if (
            not isinstance(cls, str)
            or cls.rsplit('.', 1)[-1] not in rules.RPC_TIMEOUTS
        ):
            # a reply waited for: the longest per caller (rule 3's long
            # waits against the caller's time-out), bounded
            caller = (rec.host or '', rec.svc or '', rec.pid)
            heap = row['waits'].setdefault(caller, [])
            item = (dur, str(rec.req or ''))
            if len(heap) < self.KEEP_WAITS:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
            return
        row['timeouts'] += 1
        row['callers'].add((rec.host or '', rec.svc or '', rec.pid))
        if rec.req:
            heapq.heappush(row['top'], (dur, str(rec.req)))
            if len(row['top']) > KEEP:
                heapq.heappop(row['top'])

    def merge(self, other: 'RpcCalls') -> None:
        for key, theirs in other.calls.items():
            row = self.calls.get(key)
            if row is None:
                self.calls[key] = theirs
                continue
            for k in ('calls', 'timeouts'):
                row[k] += theirs[k]
            row['max_us'] = max(row['max_us'], theirs['max_us'])
            row['callers'] |= theirs['callers']
            row['top'] = heapq.nlargest(KEEP, row['top'] + theirs['top'])
            heapq.heapify(row['top'])
            for caller, heap in theirs['waits'].items():
                mine = heapq.nlargest(
                    self.KEEP_WAITS, row['waits'].get(caller, []) + heap
                )
                heapq.heapify(mine)
                row['waits'][caller] = mine
        for method, (n, longest) in other.dispatch.items():
            row = self.dispatch.setdefault(method, [0, 0])
            row[0] += n
            row[1] = max(row[1], longest)

    def table(self) -> list:
        out = []
        for (topic, method), r in sorted(self.calls.items()):
            served = self.dispatch.get(method) or [0, 0]
            out.append(
                {
                    'topic': topic,
                    'method': method,
                    'calls': r['calls'],
                    'timeouts': r['timeouts'],
                    'max_us': r['max_us'],
                    'callers': sorted(r['callers'], key=repr),
                    'requests': sorted(r['top'], reverse=True),
                    'waits': [
                        (caller, sorted(heap, reverse=True))
                        for caller, heap in sorted(
                            r['waits'].items(), key=repr
                        )
                    ],
                    'dispatched': served[0],
                    'dispatch_max_us': served[1],
                }
            )
        return out


class Scheduling:
    """The scheduling collisions' evidence: the schedulers seen
    (``scheduler.select_destinations`` per host, svc, pid) and the
    hosts each selected, ``scheduler.claim`` ends (those that lost
    their placement claim: ``claimed`` false), ``compute.claim``
    ends (those that failed on the compute), the conductor's
    ``conductor.reschedule_failed`` (builds out of attempts), each
    with the ``KEEP`` longest requests."""

    EVENTS = frozenset(
        (
            'scheduler.select_destinations',
            'scheduler.claim',
            'compute.claim',
            'conductor.reschedule_failed',
        )
    )

    def __init__(self) -> None:
        # (host, svc, pid): {selected host: count}
        self.schedulers: dict = {}
        self.claims = self.lost = 0
        self.compute_claims = self.compute_failed = 0
        self.gave_up = 0
        # 'lost', 'failed', 'gave_up': [(us, req)] bounded
        self.top: dict = {'lost': [], 'failed': [], 'gave_up': []}
        self.failed_on: set = set()

    def _keep(self, what: str, rec: typing.Any, dur: int) -> None:
        if rec.req:
            heap = self.top[what]
            heapq.heappush(heap, (dur, str(rec.req)))
            if len(heap) > KEEP:
                heapq.heappop(heap)

    def add(self, rec: typing.Any) -> None:
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        if rec.ev == 'scheduler.select_destinations':
            row = self.schedulers.setdefault(
                (rec.host or '', rec.svc or '', rec.pid), {}
            )
            for host in attrs.get(schema.ATTR_SELECTED) or ():
                if isinstance(host, str) and len(row) < 1000:
                    row[host] = row.get(host, 0) + 1
        elif rec.ev == 'scheduler.claim':
            self.claims += 1
            if (
                attrs.get(schema.ATTR_CLAIMED) is False
                or rec.st == schema.ST_ERROR
            ):
                self.lost += 1
                self._keep('lost', rec, dur)
        elif rec.ev == 'compute.claim':
            self.compute_claims += 1
            if rec.st == schema.ST_ERROR:
                self.compute_failed += 1
                self.failed_on.add((rec.host or '', rec.svc or '', rec.pid))
                self._keep('failed', rec, dur)
        elif rec.ev == 'conductor.reschedule_failed':
            self.gave_up += 1
            self._keep('gave_up', rec, dur)

    def merge(self, other: 'Scheduling') -> None:
        for key, theirs in other.schedulers.items():
            row = self.schedulers.setdefault(key, {})
            for host, n in theirs.items():
                row[host] = row.get(host, 0) + n
        self.claims += other.claims
        self.lost += other.lost
        self.compute_claims += other.compute_claims
        self.compute_failed += other.compute_failed
        self.gave_up += other.gave_up
        self.failed_on |= other.failed_on
        for what, heap in other.top.items():
            self.top[what] = heapq.nlargest(KEEP, self.top[what] + heap)
            heapq.heapify(self.top[what])

    def table(self) -> dict:
        return {
            'schedulers': sorted(self.schedulers, key=repr),
            'selected': {
                key: dict(hosts) for key, hosts in self.schedulers.items()
            },
            'claims': self.claims,
            'lost': self.lost,
            'compute_claims': self.compute_claims,
            'compute_failed': self.compute_failed,
            'failed_on': sorted(self.failed_on, key=repr),
            'gave_up': self.gave_up,
            'requests': {
                what: sorted(heap, reverse=True)
                for what, heap in self.top.items()
            },
        }


class DbRetries:
    """oslo.db's retries (``db.retry``) per retried function: count,
    error classes, exhausted, the processes, the requests (distinct,
    bounded) and the ``KEEP`` requests whose retries ran out; and the
    statements that failed with a deadlock (``sql.query`` ends whose
    error class names one), per query class (query id, database,
    enclosing call)."""

    MAX_REQS = 10000

    def __init__(self) -> None:
        self.funcs: dict = {}
        self.deadlocks: dict = {}

    def retry(self, rec: typing.Any) -> None:
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        func = attrs.get(schema.ATTR_FUNC)
        row = self.funcs.setdefault(
            str(func or '?'),
            {
                'count': 0,
                'classes': {},
                'exhausted': 0,
                'where': set(),
                'reqs': set(),
                'failed': [],
            },
        )
        row['count'] += 1
        cls = str(attrs.get(schema.ATTR_CLS) or '?').rsplit('.', 1)[-1]
        row['classes'][cls] = row['classes'].get(cls, 0) + 1
        row['where'].add((rec.host or '', rec.svc or '', rec.pid))
        if rec.req and len(row['reqs']) < self.MAX_REQS:
            row['reqs'].add(str(rec.req))
        if attrs.get(schema.ATTR_EXHAUSTED) is True:
            row['exhausted'] += 1
            if rec.req:
                # the first request ids by name (as ``requests``), the
                # same at any -j
                base.keep_best(row['failed'], str(rec.req), KEEP)

    def query(self, rec: typing.Any) -> None:
        err = rec.err if isinstance(rec.err, dict) else None
        cls = err.get('cls') if err is not None else None
        if (
            not isinstance(cls, str)
            or 'deadlock' not in cls.rsplit('.', 1)[-1].lower()
        ):
            return
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        key = (
            str(attrs.get(schema.ATTR_FP) or '?'),
            str(attrs.get(schema.ATTR_DB) or '?'),
            str(attrs.get(schema.ATTR_CALL) or '?'),
        )
        row = self.deadlocks.setdefault(key, {'count': 0, 'top': []})
        row['count'] += 1
        if rec.req:
            dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
            heapq.heappush(row['top'], (dur, str(rec.req)))
            if len(row['top']) > KEEP:
                heapq.heappop(row['top'])

    def merge(self, other: 'DbRetries') -> None:
        for func, theirs in other.funcs.items():
            row = self.funcs.get(func)
            if row is None:
                self.funcs[func] = theirs
                continue
            row['count'] += theirs['count']
            row['exhausted'] += theirs['exhausted']
            for cls, n in theirs['classes'].items():
                row['classes'][cls] = row['classes'].get(cls, 0) + n
            row['where'] |= theirs['where']
            row['reqs'] |= set(
                list(theirs['reqs'])[
                    : max(self.MAX_REQS - len(row['reqs']), 0)
                ]
            )
            base.merge_best(row['failed'], theirs['failed'], KEEP)
        for key, theirs in other.deadlocks.items():
            row = self.deadlocks.setdefault(key, {'count': 0, 'top': []})
            row['count'] += theirs['count']
            row['top'] = heapq.nlargest(KEEP, row['top'] + theirs['top'])
            heapq.heapify(row['top'])

    def table(self) -> dict:
        return {
            'funcs': [
                {
                    'func': func,
                    'count': r['count'],
                    'classes': dict(sorted(r['classes'].items())),
                    'exhausted': r['exhausted'],
                    'where': sorted(r['where'], key=repr),
                    'requests': sorted(r['reqs']),
                    'failed': list(r['failed']),
                }
                for func, r in sorted(self.funcs.items())
            ],
            'deadlocks': [
                {
                    'fp': fp,
                    'db': db,
                    'call': call,
                    'count': r['count'],
                    'requests': sorted(r['top'], reverse=True),
                }
                for (fp, db, call), r in sorted(
                    self.deadlocks.items(),
                    key=lambda kv: (-kv[1]['count'], kv[0]),
                )
            ],
        }


# the callers of nova-api's queue: whoever sent the HTTP requests
API_CLIENTS = 'HTTP clients'


class ServiceLoad:
    """A saturated service's evidence (rules 8 and 3): each
    ``rpc.dispatch`` with the time its message waited before it started
    (its start less its sender's: the ``rpc.call`` or ``rpc.cast`` span
    named as its parent), per service, host and process; the callers'
    services (who waits on whom); and the processes' CPU samples
    (``process.sample``: cumulative user + system seconds).  nova-api's
    queue is its requests' ``api.request`` with the wait before the
    paste filter its front server recorded (``queue_us``), the HTTP
    clients its callers.  Bounded: ``MAX`` senders, dispatches,
    requests and samples each."""

    MAX = 200_000

    def __init__(self) -> None:
        # sender span id -> (start ts, caller svc, 'rpc.call'/'rpc.cast')
        self.senders: dict = {}
        # (ts, dur, host, svc, pid, method, parent, req)
        self.dispatches: list = []
        # (host, svc, pid): [(ts, cpu seconds)]
        self.samples: dict = {}
        self.n_samples = 0
        # api.request with a queue_us: (ts, queue_us, dur, host, pid,
        # route, req)
        self.arrivals: list = []

    def arrived(self, rec: typing.Any, ts: int) -> None:
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        waited = attrs.get(schema.ATTR_QUEUE_US)
        if (
            not isinstance(waited, int)
            or isinstance(waited, bool)
            or waited < 0
            or len(self.arrivals) >= self.MAX
        ):
            return
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        self.arrivals.append(
            (
                ts,
                waited,
                dur,
                rec.host or '',
                rec.pid,
                str(attrs.get(schema.ATTR_ROUTE) or '?'),
                str(rec.req or ''),
            )
        )

    def sent(self, rec: typing.Any, ts: int) -> None:
        if rec.span and len(self.senders) < self.MAX:
            self.senders[rec.span] = (ts, rec.svc or '', rec.ev)

    def dispatch(self, rec: typing.Any, ts: int) -> None:
        if not rec.parent or len(self.dispatches) >= self.MAX:
            return
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        self.dispatches.append(
            (
                ts,
                dur,
                rec.host or '',
                rec.svc or '',
                rec.pid,
                str(attrs.get(schema.ATTR_METHOD) or '?'),
                rec.parent,
                str(rec.req or ''),
            )
        )

    def sample(self, rec: typing.Any, ts: int) -> None:
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        user = attrs.get(schema.ATTR_CPU_USER_S)
        sys_ = attrs.get(schema.ATTR_CPU_SYS_S)
        if (
            not isinstance(user, (int, float))
            or not isinstance(sys_, (int, float))
            or self.n_samples >= self.MAX
        ):
            return
        self.n_samples += 1
        self.samples.setdefault(
            (rec.host or '', rec.svc or '', rec.pid), []
        ).append((ts, float(user) + float(sys_)))

    def merge(self, other: 'ServiceLoad') -> None:
        for span, row in other.senders.items():
            if len(self.senders) >= self.MAX:
                break
            self.senders.setdefault(span, row)
        self.dispatches.extend(
            other.dispatches[: max(self.MAX - len(self.dispatches), 0)]
        )
        for key, rows in other.samples.items():
            self.samples.setdefault(key, []).extend(rows)
        self.n_samples += other.n_samples
        self.arrivals.extend(
            other.arrivals[: max(self.MAX - len(self.arrivals), 0)]
        )

    def table(self) -> dict:
        """``{'queues': {svc: [{ts, queue_us, dur_us, host, pid, method,
        sync, caller, req}] in time order}, 'cpu': {(host, svc, pid):
        [(t0, t1, cores)]}}``: the dispatches whose sender was seen,
        and each process's CPU rate between two samples (1.0: one core
        busy)."""
        queues: dict = {}
        for ts, dur, host, svc, pid, method, parent, req in self.dispatches:
            sender = self.senders.get(parent)
            if sender is None:
                continue
            sts, caller, ev = sender
            queues.setdefault(svc, []).append(
                {
                    'ts': ts,
                    'queue_us': max(ts - sts, 0),
                    'dur_us': dur,
                    'host': host,
                    'pid': pid,
                    'method': method,
                    'sync': ev == 'rpc.call',
                    'caller': caller,
                    'req': req,
                }
            )
        for ts, waited, dur, host, pid, route, req in self.arrivals:
            # the HTTP client waits on its answer: a call
            queues.setdefault('api', []).append(
                {
                    'ts': ts,
                    'queue_us': waited,
                    'dur_us': dur,
                    'host': host,
                    'pid': pid,
                    'method': route,
                    'sync': True,
                    'caller': API_CLIENTS,
                    'req': req,
                }
            )
        for rows in queues.values():
            rows.sort(key=lambda r: r['ts'])
        cpu: dict = {}
        for key, rows in self.samples.items():
            rows = sorted(rows)
            rates = []
            for (t0, c0), (t1, c1) in zip(rows, rows[1:], strict=False):
                if t1 > t0:
                    rates.append(
                        (t0, t1, max(c1 - c0, 0.0) / ((t1 - t0) / 1e6))
                    )
            cpu[key] = rates
        return {'queues': queues, 'cpu': cpu}


class CellLists:
    """The cells' queries of each request (``api.cells.query``: one per
    cell of a scatter-gather, or per batch of a cross-cell list): per
    request and cell, the queries' time, their count and the cell's
    name and database (rule 9).  Bounded: ``MAX`` requests."""

    MAX = 100_000

    def __init__(self) -> None:
        # req -> {cell: [us, queries, name, db]}
        self.reqs: dict = {}
        # (host, svc, pid) of the processes that queried, bounded
        self.where: set = set()

    def add(self, rec: typing.Any) -> None:
        if not rec.req:
            return
        req = str(rec.req)
        cells = self.reqs.get(req)
        if cells is None:
            if len(self.reqs) >= self.MAX:
                return
            cells = self.reqs[req] = {}
        if len(self.where) < 1000:
            self.where.add((rec.host or '', rec.svc or '', rec.pid))
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        cell = str(attrs.get(schema.ATTR_CELL) or '?')
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        row = cells.setdefault(
            cell,
            [
                0,
                0,
                attrs.get(schema.ATTR_CELL_NAME),
                attrs.get(schema.ATTR_DB),
            ],
        )
        row[0] += dur
        row[1] += 1

    def merge(self, other: 'CellLists') -> None:
        self.where |= set(list(other.where)[: max(1000 - len(self.where), 0)])
        for req, cells in other.reqs.items():
            mine = self.reqs.setdefault(req, {})
            for cell, row in cells.items():
                have = mine.get(cell)
                if have is None:
                    mine[cell] = list(row)
                else:
                    have[0] += row[0]
                    have[1] += row[1]

    def table(self) -> dict:
        """``{'reqs': {req: {cell: {us, queries, name, db}}}, 'where':
        [(host, svc, pid)]}``."""
        return {
            'reqs': {
                req: {
                    cell: {
                        'us': r[0],
                        'queries': r[1],
                        'name': r[2],
                        'db': r[3],
                    }
                    for cell, r in cells.items()
                }
                for req, cells in self.reqs.items()
            },
            'where': sorted(self.where, key=repr),
        }


class ServiceCallsByCaller:
    """Calls to other services (``ksa.request``) and keystonemiddleware's
    token validations (``api.auth_token``) per (call, service type,
    method, route, host, svc, pid), for the identity and network rules:
    count, total and longest time, the longest that succeeded, the calls
    of ``rules.SLOW_CALL_US`` or more, errors by class
    (``services.error_class``: ``read_timeout``, ``http_500``...; a
    validation's by the class nova-api raised), retries, the ``KEEP``
    longest failed and slow calls' requests and the requests of the
    failed calls (distinct, bounded)."""

    EVENTS = frozenset((schema.EV_KSA_REQUEST, schema.EV_AUTH_TOKEN))
    MAX_REQS = 10000

    def __init__(self) -> None:
        self.rows: dict = {}

    def add(self, rec: typing.Any) -> None:
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        key: tuple
        if rec.ev == schema.EV_AUTH_TOKEN:
            key = (
                'validation',
                'identity',
                '-',
                'token validation (keystonemiddleware)',
            )
            kind = None
            if rec.st == schema.ST_ERROR:
                err = rec.err if isinstance(rec.err, dict) else {}
                kind = str(err.get('cls') or 'error').rsplit('.', 1)[-1]
        else:
            key = (
                'call',
                str(attrs.get(schema.ATTR_SERVICE_TYPE) or 'unknown'),
                str(attrs.get(schema.ATTR_METHOD) or '-'),
                str(attrs.get(schema.ATTR_ROUTE) or '-'),
            )
            kind = service_calls.error_class(rec.st, attrs)
        key += (rec.host or '', rec.svc or '', rec.pid)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = {
                'calls': 0,
                'total_us': 0,
                'max_us': 0,
                'ok_max_us': 0,
                'slow': 0,
                'slow_us': 0,
                'errors': {},
                'retries': 0,
                'failed_top': [],
                'slow_top': [],
                'failed_reqs': set(),
            }
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        row['calls'] += 1
        row['total_us'] += dur
        row['max_us'] = max(row['max_us'], dur)
        attempts = attrs.get(schema.ATTR_ATTEMPTS)
        if isinstance(attempts, int) and attempts > 1:
            row['retries'] += attempts - 1
        top = None
        if kind is not None:
            row['errors'][kind] = row['errors'].get(kind, 0) + 1
            top = row['failed_top']
            if rec.req and len(row['failed_reqs']) < self.MAX_REQS:
                row['failed_reqs'].add(str(rec.req))
        else:
            row['ok_max_us'] = max(row['ok_max_us'], dur)
        if dur >= rules.SLOW_CALL_US:
            row['slow'] += 1
            row['slow_us'] += dur
            top = top if top is not None else row['slow_top']
        if top is not None and rec.req:
            heapq.heappush(top, (dur, str(rec.req)))
            if len(top) > KEEP:
                heapq.heappop(top)

    def merge(self, other: 'ServiceCallsByCaller') -> None:
        for key, theirs in other.rows.items():
            row = self.rows.get(key)
            if row is None:
                self.rows[key] = theirs
                continue
            for k in ('calls', 'total_us', 'slow', 'slow_us', 'retries'):
                row[k] += theirs[k]
            for k in ('max_us', 'ok_max_us'):
                row[k] = max(row[k], theirs[k])
            for cls, n in theirs['errors'].items():
                row['errors'][cls] = row['errors'].get(cls, 0) + n
            row['failed_reqs'] |= set(
                list(theirs['failed_reqs'])[
                    : max(self.MAX_REQS - len(row['failed_reqs']), 0)
                ]
            )
            for k in ('failed_top', 'slow_top'):
                row[k] = heapq.nlargest(KEEP, row[k] + theirs[k])
                heapq.heapify(row[k])

    def table(self) -> list:
        return [
            {
                'call': call,
                'service': stype,
                'method': method,
                'route': route,
                'host': host,
                'svc': svc,
                'pid': pid,
                'calls': r['calls'],
                'total_us': r['total_us'],
                'max_us': r['max_us'],
                'ok_max_us': r['ok_max_us'],
                'slow': r['slow'],
                'slow_us': r['slow_us'],
                'errors': dict(sorted(r['errors'].items())),
                'retries': r['retries'],
                'failed': sorted(r['failed_top'], reverse=True),
                'failed_requests': sorted(r['failed_reqs']),
                'slowest': sorted(r['slow_top'], reverse=True),
            }
            for (call, stype, method, route, host, svc, pid), r in sorted(
                self.rows.items(), key=lambda kv: repr(kv[0])
            )
        ]


class Findings(base.Section):
    """``report['findings']``: ``{'rules': [rule ids checked],
    'findings': [finding, ...]}`` (``analysis.rules`` says a finding's
    keys)."""

    key = 'findings'
    routes = (
        routes.Route('X', frozenset(schema.WAIT_EVENTS), routes.ALL, 'add'),
        routes.Route(
            'X', frozenset(('rpc.call', 'rpc.dispatch')), routes.ALL, 'rpc'
        ),
        routes.Route('X', Scheduling.EVENTS, routes.ALL, 'scheduling'),
        routes.Route(
            'I', frozenset((schema.EV_DB_RETRY,)), routes.ALL, 'db_retry'
        ),
        routes.Route(
            'X', frozenset((schema.EV_SQL_QUERY,)), routes.ALL, 'db_query'
        ),
        routes.Route(
            'X',
            frozenset(
                ('rpc.call', 'rpc.cast', 'rpc.dispatch', schema.EV_API_REQUEST)
            ),
            routes.ALL,
            'service_load',
        ),
        routes.Route(
            'C',
            frozenset((schema.EV_PROCESS_SAMPLE,)),
            routes.ALL,
            'cpu_sample',
        ),
        routes.Route(
            'X', frozenset(('api.cells.query',)), routes.ALL, 'cell_query'
        ),
        routes.Route(
            'X', ServiceCallsByCaller.EVENTS, routes.ALL, 'service_call'
        ),
    )

    def __init__(self, ctx: base.Context) -> None:
        self.since = ctx.since
        self.until = ctx.until
        self.waits = WaitsByService(ctx.since, ctx.until)
        self.rpc_calls = RpcCalls()
        self.sched = Scheduling()
        self.db_retries = DbRetries()
        self.service_calls = ServiceCallsByCaller()
        self.load = ServiceLoad()
        self.cells = CellLists()

    def service_load(
        self, rec: typing.Any, ts: int, cursor: typing.Any
    ) -> None:
        if not self._in(ts):
            return
        if rec.ev == 'rpc.dispatch':
            self.load.dispatch(rec, ts)
        elif rec.ev == schema.EV_API_REQUEST:
            self.load.arrived(rec, ts)
        else:
            self.load.sent(rec, ts)

    def cpu_sample(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        # the samples around the window too: a rate needs two
        self.load.sample(rec, ts)

    def cell_query(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        if self._in(ts):
            self.cells.add(rec)

    def add(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.waits.add(rec, ts)

    def rpc(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        if (self.since is not None and ts < self.since) or (
            self.until is not None and ts >= self.until
        ):
            return
        self.rpc_calls.add(rec)

    def scheduling(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        if (self.since is not None and ts < self.since) or (
            self.until is not None and ts >= self.until
        ):
            return
        self.sched.add(rec)

    def _in(self, ts: int) -> bool:
        return (self.since is None or ts >= self.since) and (
            self.until is None or ts < self.until
        )

    def db_retry(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        if self._in(ts):
            self.db_retries.retry(rec)

    def db_query(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        if rec.st == schema.ST_ERROR and self._in(ts):
            self.db_retries.query(rec)

    def service_call(
        self, rec: typing.Any, ts: int, cursor: typing.Any
    ) -> None:
        if self._in(ts):
            self.service_calls.add(rec)

    def merge(self, other: 'Findings') -> None:
        self.service_calls.merge(other.service_calls)
        self.db_retries.merge(other.db_retries)
        self.waits.merge(other.waits)
        self.rpc_calls.merge(other.rpc_calls)
        self.sched.merge(other.sched)
        self.load.merge(other.load)
        self.cells.merge(other.cells)

    def report(self, view: base.View) -> dict:
        evidence = rules.Evidence(
            view,
            self.waits.table(),
            self.rpc_calls.table(),
            self.sched.table(),
            self.db_retries.table(),
            load=self.load.table(),
            cells=self.cells.table(),
            calls=self.service_calls.table(),
        )
        return {
            'rules': [r.id for r in rules.RULES],
            'findings': rules.run(evidence),
        }

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report.get('findings'))

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return [html_section(report.get('findings'), report)]

    @staticmethod
    def compare(a: dict, b: dict, how: base.Comparing) -> dict:
        return {
            'findings': compare_findings(a.get('findings'), b.get('findings'))
        }

    @staticmethod
    def compare_text(cmp: dict, reminder: list) -> list:
        return compare_lines(cmp.get('findings'))


# -- compare -----------------------------------------------------------------


def compare_findings(
    a: typing.Optional[dict], b: typing.Optional[dict]
) -> dict:
    """Findings ``resolved`` (in A only), ``new`` (in B only) and
    ``unchanged`` (in both, by ``key``; with A's and B's share); None
    for a run whose report has no findings (an older report)."""
    if a is None or b is None:
        return {
            'resolved': [],
            'new': [],
            'unchanged': [],
            'missing': [name for name, r in (('A', a), ('B', b)) if r is None],
        }
    fa = {f['key']: f for f in a.get('findings') or ()}
    fb = {f['key']: f for f in b.get('findings') or ()}

    def brief(f: dict) -> dict:
        return {
            'key': f['key'],
            'rule': f['rule'],
            'title': f['title'],
            'share': f['sure']['share'],
        }

    return {
        'resolved': [brief(fa[k]) for k in fa if k not in fb],
        'new': [brief(fb[k]) for k in fb if k not in fa],
        'unchanged': [
            dict(brief(fb[k]), share_a=fa[k]['sure']['share'])
            for k in fb
            if k in fa
        ],
        'missing': [],
    }


def compare_lines(cmp: typing.Optional[dict]) -> list:
    if not cmp:
        return []
    out = ['Findings (A -> B)', '=================']
    if cmp.get('missing'):
        out.append(
            'not compared: no findings in the report of %s (made '
            'before findings existed)' % ' and '.join(cmp['missing'])
        )
        return out
    if not (cmp['resolved'] or cmp['new'] or cmp['unchanged']):
        out.append('no finding in either run')
        return out
    for f in cmp['resolved']:
        out.append(
            'resolved:  %s (A: %s)' % (f['title'], fmt.fmt_pct(f['share']))
        )
    for f in cmp['new']:
        out.append(
            'new:       %s (B: %s)' % (f['title'], fmt.fmt_pct(f['share']))
        )
    for f in cmp['unchanged']:
        out.append(
            'unchanged: %s (A: %s, B: %s)'
            % (f['title'], fmt.fmt_pct(f['share_a']), fmt.fmt_pct(f['share']))
        )
    return out


# -- writers -----------------------------------------------------------------


def _value(v: dict) -> str:
    if not v.get('recorded'):
        return 'not recorded on %s@%s' % (v['svc'] or '?', v['host'] or '?')
    value = v['value']
    return '%s on %s@%s' % (
        'unset' if value is None else value,
        v['svc'] or '?',
        v['host'] or '?',
    )


def none_line(section: dict) -> str:
    return 'Findings: none (%d rules checked: %s)' % (
        len(section.get('rules') or ()),
        ', '.join(section.get('rules') or ()),
    )


def text_lines(section: typing.Optional[dict]) -> list:
    """The text report's lines for ``report['findings']``."""
    if section is None:
        return []
    found = section.get('findings') or []
    if not found:
        return [none_line(section)]
    title = 'Findings: %d (%d rules checked)' % (
        len(found),
        len(section.get('rules') or ()),
    )
    out = [title, '=' * len(title)]
    for i, f in enumerate(found, 1):
        out.append('%d. %s' % (i, f['title']))
        out.append('   seen: %s' % f['seen'])
        out.append(
            '   sure: %s of the %s'
            % (fmt.fmt_pct(f['sure']['share']), f['sure']['of'])
        )
        if f.get('requests'):
            out.append(
                '   requests (slowest first): %s' % ', '.join(f['requests'])
            )
        for s in f['settings']:
            out.append(
                '   setting: [%s] %s -> %s: %s'
                % (
                    s['section'],
                    s['option'],
                    s['direction'],
                    '; '.join(_value(v) for v in s['values'])
                    or 'no service named',
                )
            )
            out.append('            trade-off: %s' % s['tradeoff'])
        out.append('   check: %s' % f['check'])
    return out


def html_section(section: typing.Optional[dict], report: dict) -> str:
    """The HTML page's findings; a request id links to its lifecycle
    (``#req-<id>``) when the page draws it."""
    if section is None:
        return ''
    esc = fmt.esc
    found = section.get('findings') or []
    if not found:
        return '<h2>Findings</h2><p>%s</p>' % esc(none_line(section))
    drawn = {
        t.get('req')
        for _label, t in timelines.pick(report.get('timelines') or [])
    }
    parts = ['<h2>Findings: %d</h2><ol class="findings">' % len(found)]
    for f in found:
        reqs = ', '.join(
            '<a href="#req-%s">%s</a>' % (esc(r), esc(r))
            if r in drawn
            else esc(r)
            for r in f.get('requests') or ()
        )
        settings = ''.join(
            '<li><code>[%s] %s</code> &rarr; %s: %s<br><i>trade-off:</i> '
            '%s</li>'
            % (
                esc(s['section']),
                esc(s['option']),
                esc(s['direction']),
                esc('; '.join(_value(v) for v in s['values'])),
                esc(s['tradeoff']),
            )
            for s in f['settings']
        )
        parts.append(
            '<li><b>%s</b><br><i>seen:</i> %s<br><i>sure:</i> %s of the '
            '%s<br><i>requests (slowest first):</i> %s<ul>%s</ul>'
            '<i>check:</i> %s</li>'
            % (
                esc(f['title']),
                esc(f['seen']),
                esc(fmt.fmt_pct(f['sure']['share'])),
                esc(f['sure']['of']),
                reqs or '-',
                settings,
                esc(f['check']),
            )
        )
    parts.append('</ol>')
    return ''.join(parts)
