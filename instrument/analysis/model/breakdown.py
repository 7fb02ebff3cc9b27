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
"""Where the time of a request goes, per request and over a run.

Per request (``summarise``), on corrected clocks:

* exclusive (self) time per component: a span's duration minus what
  its children cover (the union of their intervals, so nesting is never
  counted twice) minus the SQL statements it issued.  The component of
  a span is ``schema.EVENTS[ev]`` (``api``, ``conductor``,
  ``scheduler``, ``scheduler.db`` (the host-state refresh),
  ``scheduler.placement``, ``compute``, ``compute.claim``,
  ``compute.network``, ``compute.spawn`` ... and ``rpc`` for both sides
  of RPC hops; a call to another service, ``service.<its service
  type>``: ``service.placement`` beside the scheduler's own
  ``scheduler.placement``), else its service.  Children in another
  process count only under a parent that waits for them
  (``rpc.call``); the time
  between an asynchronous send (``rpc.cast``) ending and its dispatch
  starting in another process is ``rpc.queue``;
* SQL time inside each component (the statements' own durations);
* the critical path: the chain of spans that ends last, walked back
  from the request's end; each stretch is charged to the span that was
  running on it, or to ``rpc.queue`` while a message waited;
* the final state of each instance (``classify``) and the request's
  lifecycle (its spans in order across services).

Over a run (``aggregate``): min/median/p90/p95/p99/max per component
and end to end, throughput, success and retry rates, concurrency over
time, and mean component times per concurrency level (the study's
Figure 3-1), the level counting boots in flight only (per operation:
``sections.operations``).  Every figure lists the request ids it came
from in the JSON output.
"""

import array
import collections
import typing

import numpy

from instrument import _native
from instrument import schema
from instrument.analysis.model import classify
from instrument.analysis.model import damage
from instrument.analysis.model import operations
from instrument.analysis.model import spans as spans_mod
from instrument.analysis.model import waits as waits_mod

# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_HOST = spans_mod.S_HOST
S_SVC = spans_mod.S_SVC
S_PID = spans_mod.S_PID
S_START = spans_mod.S_START
S_DUR = spans_mod.S_DUR
S_PARENT = spans_mod.S_PARENT
S_ST = spans_mod.S_ST
S_ERR = spans_mod.S_ERR
S_ATTRS = spans_mod.S_ATTRS
SYNC = schema.SYNC_EVENTS
QUEUE = 'rpc.queue'
# the receiving side of a message: under an asynchronous send it is
# never covered by the sender, even in the sender's own process (a
# service casting to itself, or the demo's services sharing one pid)
DISPATCH = 'rpc.dispatch'
GAP = 'gap'
COMPONENT_ORDER = (
    'api',
    'rpc',
    QUEUE,
    'conductor',
    'scheduler',
    'scheduler.db',
    'scheduler.placement',
    'compute',
    'compute.claim',
    'compute.network',
    'compute.block_device',
    'compute.spawn',
    'sql',
    GAP,
)
PERCENTILES = (50, 90, 95, 99)


# The span loops of ``summarise`` and the critical path in C
# (instrument/_native/breakdown.c), or None: their pure-Python twins
# (``_times``, ``_critical_path``) run.
_native_breakdown = _native.load('_breakdown')
_native_times = None if _native_breakdown is None else _native_breakdown.times
_native_critical_path = (
    None if _native_breakdown is None else _native_breakdown.critical_path
)

_COMPONENTS = {}
EVENTS = schema.EVENTS
# the component of a call to another service (``ksa.request``), named
# ``service.<its service type>`` (``service`` alone: type unknown)
SERVICE: str = EVENTS[schema.EV_KSA_REQUEST] or 'service'
_SERVICES: dict = {}
# the service types of the service-types authority that some clients
# call by an alias (cinder's volumev3): one component per service
SERVICE_ALIASES = {
    'volume': 'block-storage',
    'volumev2': 'block-storage',
    'volumev3': 'block-storage',
    'block-store': 'block-storage',
}


def service_component(attrs: typing.Optional[dict]) -> str:
    """``service.<type>`` of a call to another service (its attrs'
    service type: ``service.placement``), ``service`` when the call
    recorded none."""
    stype = (attrs or {}).get(schema.ATTR_SERVICE_TYPE)
    if not stype or not isinstance(stype, str):
        return SERVICE
    name = _SERVICES.get(stype)
    if name is None:
        name = '%s.%s' % (SERVICE, SERVICE_ALIASES.get(stype, stype))
        if len(_SERVICES) < 1000:
            _SERVICES[stype] = name
    return name


def component_of(
    ev: str, svc: str, attrs: typing.Optional[dict] = None
) -> str:
    """The component a span's time is charged to: its event's
    (``schema.EVENTS``), a call to another service's by its type
    (``attrs``: ``service_component``), else its service's."""
    key = (ev, svc)
    name = _COMPONENTS.get(key)
    if name is None:
        name = schema.EVENTS.get(ev) or svc
        if len(_COMPONENTS) < 10000:
            _COMPONENTS[key] = name
    if name == SERVICE:
        return service_component(attrs)
    return name


# Shared key tuples of the compact times (most requests have the same
# components in the same order), bounded.
_KEYS = {}


def _compact(times: dict) -> tuple:
    """``{name: us}`` as ``(shared names tuple, array of us)``."""
    keys = tuple(times)
    keys = _KEYS.setdefault(keys, keys) if len(_KEYS) < 10000 else keys
    try:
        return keys, array.array('q', times.values())
    except (TypeError, OverflowError):  # not 64-bit integers: keep as is
        return keys, tuple(times.values())


class RequestSummary:
    """What is kept of a finished request.

    The times per component (``comp``, ``sql_in``, ``cp``) are kept
    compact (a shared tuple of names and an array of integers) and read
    back as dicts; read each once where many are read.
    """

    __slots__ = (
        'req',
        'kind',
        'state',
        'instances',
        'start',
        'end',
        '_comp',
        '_sql_in',
        'sql_us',
        'sql_n',
        '_cp',
        'attempts',
        'db_retries',
        'errors',
        'lifecycle',
        'hosts',
        'events',
        'critical',
        'lost_ends',
        'cells',
        'waits',
        'procs',
        'late',
        'loss',
        'if_lost',
        'gaps',
    )

    req: str
    kind: str
    state: str
    instances: list
    start: int
    end: int
    sql_us: int
    sql_n: int
    attempts: int
    db_retries: int
    errors: int
    hosts: list
    events: int
    # (t_us, dur_us, host, svc, ev, st, sql_us, err, critical) per span,
    # kept for the requests whose timeline is shown
    lifecycle: typing.Optional[list]
    # span ids on the critical path, until the lifecycle is made
    critical: typing.Optional[set]
    # spans that never ended in a request that reached an outcome: their
    # end was lost (an invalid record, a seq gap), so the request's
    # times are not known and it is left out of the timing statistics
    lost_ends: int
    # the cells a list/show queried (operations.cells), else None
    cells: typing.Optional[dict]
    # what its spans waited for (waits.of_request rows)
    waits: tuple
    # the stretches of its critical path no span covers (``gap``: a
    # wait nobody recorded), where they sit: ((event that ended, event
    # that started next or None: the request's end, us), ...), longest
    # first
    gaps: tuple
    # where it was, per process: (index in ``hosts``, pid, from, to,
    # from when a span there has no end or no parent read: -1 when
    # none) flat, five by five (``damage``)
    procs: array.array
    # its events read after it was finalised (not in its figures)
    late: int
    # what may be missing from it (``damage.mark``: ``lost`` records of
    # its processes, ``late`` events, ``repaired`` records), None:
    # nothing
    loss: typing.Optional[list]
    # (state, instance rows) it has if the ends of its open spans were
    # lost rather than never written (``damage.mark``), None: the same
    if_lost: typing.Optional[tuple]

    @property
    def comp(self) -> dict:
        """Exclusive time per component (us)."""
        return dict(zip(*self._comp, strict=True))

    @comp.setter
    def comp(self, times: dict) -> None:
        self._comp = _compact(times)

    @property
    def sql_in(self) -> dict:
        """SQL time inside each component (us)."""
        return dict(zip(*self._sql_in, strict=True))

    @sql_in.setter
    def sql_in(self, times: dict) -> None:
        self._sql_in = _compact(times)

    @property
    def cp(self) -> dict:
        """Critical-path time per component (us)."""
        return dict(zip(*self._cp, strict=True))

    @cp.setter
    def cp(self, times: dict) -> None:
        self._cp = _compact(times)

    def intern(self) -> None:
        """Share the name tuples again (after unpickling)."""
        for slot in ('_comp', '_sql_in', '_cp'):
            keys, values = getattr(self, slot)
            if len(_KEYS) < 10000 or keys in _KEYS:
                setattr(self, slot, (_KEYS.setdefault(keys, keys), values))

    @property
    def latency(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict:
        out = {
            'req': self.req,
            'kind': self.kind,
            'state': self.state,
            'start_us': self.start,
            'end_us': self.end,
            'latency_us': self.latency,
            'instances': self.instances,
            'components_us': self.comp,
            'sql_in_us': self.sql_in,
            'sql_us': self.sql_us,
            'sql_statements': self.sql_n,
            'critical_path_us': self.cp,
            'attempts': self.attempts,
            'db_retries': self.db_retries,
            'errors': self.errors,
            'hosts': self.hosts,
            'events': self.events,
            'lost_ends': getattr(self, 'lost_ends', 0),
        }
        if getattr(self, 'loss', None):
            out['loss'] = self.loss
        if self.cells is not None:
            out['cells'] = self.cells
        gaps = getattr(self, 'gaps', ())
        if gaps:
            out['gaps'] = [
                {'after': g[0], 'before': g[1], 'critical_us': g[2]}
                for g in gaps
            ]
        if self.waits:
            out['waits'] = [
                {
                    'in': w[0],
                    'kind': w[1],
                    'name': w[2],
                    'wait_us': w[3],
                    'critical_us': w[4],
                }
                for w in self.waits
            ]
        if self.lifecycle is not None:
            out['lifecycle'] = [_lifecycle_entry(e) for e in self.lifecycle]
        return out


def _lifecycle_entry(e: tuple) -> dict:
    """A lifecycle entry (``lifecycle``) as the JSON report has it: the
    component (``comp``) only where the event does not say it."""
    out = {
        't_us': e[0],
        'dur_us': e[1],
        'host': e[2],
        'svc': e[3],
        'ev': e[4],
        'st': e[5],
        'sql_us': e[6],
        'err': e[7],
        'critical': e[8],
    }
    if e[9] is not None:
        out['comp'] = e[9]
    return out


def _union(intervals: list) -> int:
    if not intervals:
        return 0
    intervals.sort()
    total = 0
    lo, hi = intervals[0]
    for a, b in intervals[1:]:
        if a > hi:
            total += hi - lo
            lo, hi = a, b
        elif b > hi:
            hi = b
    return total + hi - lo


def _times(spans: dict, sql: dict, children: dict, req_last: int) -> tuple:
    """The span loops of ``summarise`` (the pure-Python twin of
    ``instrument._native._breakdown.times``): ``(req_start, req_end,
    ends, names, open_ids, hosts, errors, where, comp, sql_in)``, the
    request's start and end, each span's end (an open span's: the
    request's), component (``names``) and the spans not ended, the
    hosts, the spans that failed, ``where`` (``(host, pid)``: ``[from,
    to, first start of a span without end or parent]``), each
    component's own time (``comp``) and the SQL time in the spans of
    each (``sql_in``, the statements under no span of the request left
    to the caller).  ``req_last``: when the request last did
    something."""
    events = EVENTS
    req_end = req_last
    req_start = None
    ends = {}
    names = {}
    open_ids = []
    hosts = set()
    errors = 0
    # (host, pid): [from, to, first start of a span without end or
    # parent] (``procs``)
    where: dict = {}
    for sid, s in spans.items():
        start = s[S_START]
        if req_start is None or start < req_start:
            req_start = start
        d = s[S_DUR]
        proc = (s[S_HOST], s[S_PID])
        w = where.get(proc)
        if w is None:
            w = where[proc] = [start, start, -1]
        elif start < w[0]:
            w[0] = start
        if d is not None:
            e = ends[sid] = start + d
            if e > req_end:
                req_end = e
            if e > w[1]:
                w[1] = e
        else:
            open_ids.append(sid)
            # d >= 0 for ended spans, so only an open span can start
            # after every end seen
            if start > req_end:
                req_end = start
        parent = s[S_PARENT]
        if d is None or parent is not None and parent not in spans:
            # its end, or its parent, may be a record lost there
            if w[2] < 0 or start < w[2]:
                w[2] = start
        ev = s[S_EV]
        name = events.get(ev) or s[S_SVC]
        names[sid] = name if name != SERVICE else service_component(s[S_ATTRS])
        hosts.add(s[S_HOST])
        if s[S_ST] == 'error':
            errors += 1
    if req_start is None:
        req_start = req_end
    for sid in open_ids:
        ends[sid] = req_end
        w = where[(spans[sid][S_HOST], spans[sid][S_PID])]
        w[1] = req_end
    comp = {}
    sql_in = {}
    sql_get = sql.get
    for sid, s in spans.items():
        start = s[S_START]
        end = ends[sid]
        name = names[sid]
        covered = 0
        kids = children.get(sid)
        if kids:
            sync = s[S_EV] in SYNC
            pid = s[S_PID]
            host = s[S_HOST]
            if len(kids) == 1:
                c = spans[kids[0]]
                cs = c[S_START]
                if sync or (
                    c[S_PID] == pid
                    and c[S_HOST] == host
                    and c[S_EV] != DISPATCH
                ):
                    ce = ends[kids[0]]
                    lo = cs if cs > start else start
                    hi = ce if ce < end else end
                    if hi > lo:
                        covered = hi - lo
                elif cs > end:
                    comp[QUEUE] = comp.get(QUEUE, 0) + cs - end
            else:
                intervals = []
                for k in kids:
                    c = spans[k]
                    cs = c[S_START]
                    if sync or (
                        c[S_PID] == pid
                        and c[S_HOST] == host
                        and c[S_EV] != DISPATCH
                    ):
                        ce = ends[k]
                        lo = cs if cs > start else start
                        hi = ce if ce < end else end
                        if hi > lo:
                            intervals.append((lo, hi))
                    elif cs > end:
                        comp[QUEUE] = comp.get(QUEUE, 0) + cs - end
                covered = _union(intervals)
        entry = sql_get(sid)
        sql_us = 0
        if entry is not None:
            sql_us = entry[0]
            sql_in[name] = sql_in.get(name, 0) + sql_us
        own = end - start - covered - sql_us
        if own > 0:
            comp[name] = comp.get(name, 0) + own
    return (
        req_start,
        req_end,
        ends,
        names,
        open_ids,
        hosts,
        errors,
        where,
        comp,
        sql_in,
    )


def _span_times(spans: dict, sql: dict, children: dict, req_last: int):
    """``_times`` in C when the extension is built (its answer, or, when
    it refuses what it was given, the twin's)."""
    if _native_times is not None:
        try:
            return _native_times(
                spans,
                sql,
                children,
                EVENTS,
                SERVICE,
                service_component,
                SYNC,
                DISPATCH,
                QUEUE,
                req_last,
            )
        except Exception:  # noqa: BLE001 - the twin gives Python's answer
            pass
    return _times(spans, sql, children, req_last)


def summarise(
    r: spans_mod.OpenRequest,
    tree: spans_mod.Tree,
    keep_lifecycle: bool = True,
    kind: typing.Optional[str] = None,
) -> RequestSummary:
    """Reduce a finished ``spans.OpenRequest`` to its summary
    (``kind``: its operation when known, ``operations.operation_of`` of
    its spans as they are).

    ``summary.critical`` holds the span ids on the critical path;
    without ``keep_lifecycle`` the lifecycle can still be made later
    with ``add_lifecycle(summary, r)`` while ``r`` has its spans.
    """
    spans = r.spans
    sql = r.sql
    (
        req_start,
        req_end,
        ends,
        names,
        open_ids,
        hosts,
        errors,
        where,
        comp,
        sql_in,
    ) = _span_times(spans, sql, tree.children, r.last)
    errors += len(r.sql_errors)
    sql_us = 0
    sql_n = 0
    for parent, entry in sql.items():
        sql_us += entry[0]
        sql_n += entry[1]
        if parent not in spans:
            sql_in[entry[2]] = sql_in.get(entry[2], 0) + entry[0]
    rows = []
    # the operation (never guessed: operations.operation_of) and its
    # own state machine; boots keep classify's
    if kind is None:
        kind = operations.operation_of(spans)
    if kind == operations.OTHER:
        state = classify.OTHER
    else:
        rows = operations.final_states(kind, tree)
        state = operations.request_state(kind, rows)
    gaps: dict = {}
    cp, critical = critical_path(tree, ends, req_start, req_end, names, gaps)
    out = RequestSummary()
    out.req = r.req
    out.kind = kind
    out.state = state
    out.instances = rows
    out.start = req_start
    out.end = req_end
    out.comp = comp
    out.sql_in = sql_in
    out.sql_us = sql_us
    out.sql_n = sql_n
    out.cp = cp
    out.critical = critical
    out.waits = waits_mod.of_request(spans, names, cp, critical)
    out.gaps = tuple(
        sorted(
            ((k[0], k[1], us) for k, us in gaps.items()), key=lambda g: -g[2]
        )
    )
    out.attempts = max((row['attempts'] for row in rows), default=0)
    db_retries = 0
    for i in r.instants:
        if i[0] == 'db.retry':
            db_retries += 1
    out.db_retries = db_retries
    out.errors = errors
    out.hosts = sorted(hosts)
    out.events = r.events
    # a request with an outcome whose spans did not all end lost ends
    # (one whose spans all stayed open has no outcome: nothing ended)
    out.lost_ends = (
        len(open_ids)
        if state != classify.INCOMPLETE and len(open_ids) < len(spans)
        else 0
    )
    index = {h: i for i, h in enumerate(out.hosts)}
    procs = array.array('q')
    for (host, pid), (lo, hi, loose) in where.items():
        procs.extend(
            (index[host], pid if pid.__class__ is int else -1, lo, hi, loose)
        )
    out.procs = procs
    out.late = 0
    out.loss = None
    # the state if its open spans' ends were lost (an API request whose
    # compute API call answered): ``damage.mark`` decides
    out.if_lost = None
    if (
        open_ids
        and state == classify.INCOMPLETE
        and len(open_ids) < len(spans)
        and kind != operations.OTHER
    ):
        alt = operations.final_states(kind, tree, ended=True)
        alt_state = operations.request_state(kind, alt)
        if alt_state != state:
            out.if_lost = (alt_state, alt, len(open_ids))
    out.cells = (
        operations.cells(spans, req_start)
        if kind in ('list', 'show')
        else None
    )
    out.lifecycle = (
        lifecycle(spans, ends, sql, req_start, critical)
        if keep_lifecycle
        else None
    )
    return out


def add_lifecycle(summary: RequestSummary, r: spans_mod.OpenRequest) -> None:
    """Give ``summary`` the lifecycle of its request ``r`` (whose spans
    ``summarise`` reduced without one)."""
    spans = r.spans
    end = summary.end
    ends = {
        sid: s[S_START] + s[S_DUR] if s[S_DUR] is not None else end
        for sid, s in spans.items()
    }
    summary.lifecycle = lifecycle(
        spans, ends, r.sql, summary.start, summary.critical or frozenset()
    )


def lifecycle(
    spans: dict,
    ends: dict,
    sql: dict,
    req_start: int,
    critical: typing.AbstractSet = frozenset(),
) -> list:
    """The request's spans in start order: ``(t, dur, host, svc, ev, st,
    sql_us, err_cls, on_critical_path, component)``; ``dur`` None for
    open spans; ``component`` only where the event alone does not say
    it (a call to another service: ``service.placement``), else
    None."""
    out = []
    for sid, s in spans.items():
        entry = sql.get(sid)
        err = s[S_ERR]
        ev = s[S_EV]
        out.append(
            (
                s[S_START] - req_start,
                s[S_DUR],
                s[S_HOST],
                s[S_SVC],
                ev,
                s[S_ST] or 'open',
                entry[0] if entry else 0,
                err.get('cls') if err else None,
                sid in critical,
                service_component(s[S_ATTRS])
                if ev == schema.EV_KSA_REQUEST
                else None,
            )
        )
    out.sort(key=lambda e: (e[0], -(e[1] or 0)))
    return out


def _by_end(kids: list, eff: dict) -> list:
    if len(kids) < 2:
        return kids
    return sorted(kids, key=eff.__getitem__, reverse=True)


def critical_path(
    tree: spans_mod.Tree,
    ends: dict,
    req_start: int,
    req_end: int,
    names: typing.Optional[dict] = None,
    gaps: typing.Optional[dict] = None,
) -> tuple:
    """``({component: us}, {span ids on the path})``.

    A stretch of the path that no span covers (a span ended, the next
    one on the path had not started) is ``rpc.queue`` when it is a
    message waiting for its dispatch (an asynchronous send's child that
    ``summarise`` charges to ``rpc.queue`` too), else ``gap``: a wait
    nobody recorded, never charged to a component.  ``gaps``, when
    given, gets each such stretch where it sits: ``{(event that ended,
    event that started next, or None: the request's end): us}``.
    """
    if names is None:
        names = {
            sid: component_of(s[S_EV], s[S_SVC], s[S_ATTRS])
            for sid, s in tree.spans.items()
        }
    if _native_critical_path is not None:
        # (a fresh ``gaps`` for C: the twin starts again from the
        # caller's when C refuses the request midway)
        mine = None if gaps is None else dict(gaps)
        try:
            cp, on_path = _native_critical_path(
                tree.spans,
                tree.children,
                tree.roots,
                ends,
                names,
                req_start,
                req_end,
                mine,
                SYNC,
                DISPATCH,
                QUEUE,
                GAP,
            )
        except Exception:  # noqa: BLE001 - the twin gives Python's answer
            pass
        else:
            if gaps is not None and mine is not None:
                gaps.clear()
                gaps.update(mine)
            return cp, on_path
    return _critical_path(tree, ends, req_start, req_end, names, gaps)


def _critical_path(
    tree: spans_mod.Tree,
    ends: dict,
    req_start: int,
    req_end: int,
    names: dict,
    gaps: typing.Optional[dict],
) -> tuple:
    """``critical_path``'s pure-Python twin of
    ``instrument._native._breakdown.critical_path``."""
    spans = tree.spans
    children = tree.children
    get_kids = children.get
    # effective end: the span or any descendant, whichever ends last.
    # Every span has one parent, so what is reached from the roots is a
    # forest: each span is visited once, children after their parent.
    order = list(tree.roots)
    for sid in order:
        kids = get_kids(sid)
        if kids:
            order.extend(kids)
    eff = {}
    for sid in reversed(order):
        e = ends[sid]
        kids = get_kids(sid)
        if kids:
            for k in kids:
                ke = eff[k]
                if ke > e:
                    e = ke
        eff[sid] = e
    cp = {}
    on_path = set()

    def unrecorded(before, nxt, us) -> None:
        """Charge ``us`` between the end of ``before`` (None: the
        request's start) and the start of ``nxt`` (None: its end)."""
        if (
            nxt is not None
            and before is not None
            and spans[nxt][S_PARENT] == before
            and _queued(spans[before], spans[nxt])
        ):
            cp[QUEUE] = cp.get(QUEUE, 0) + us
            return
        cp[GAP] = cp.get(GAP, 0) + us
        if gaps is not None:
            key = (
                spans[before][S_EV] if before is not None else None,
                spans[nxt][S_EV] if nxt is not None else None,
            )
            gaps[key] = gaps.get(key, 0) + us

    # Walk back from the end: at each span take the child that ended
    # last, charge the span for the stretch after it, descend, then go
    # on from the child's start; what no child covers is the span's
    # own.  An explicit stack (no recursion); a child without children
    # is charged on the spot (no frame), in the same order.  ``nxt`` is
    # the span on the path that starts at ``t`` (None: none does).
    stack = [(None, _by_end(tree.roots, eff), 0, req_start, req_end, None)]
    pop = stack.pop
    push = stack.append
    while stack:
        sid, kids, i, start, t, nxt = pop()
        n = len(kids)
        if sid is not None:
            end = ends[sid]
            name = names[sid]
        while True:
            # the next child that started before t, or none
            k = None
            while i < n and t > start:
                k = kids[i]
                i += 1
                ks = spans[k][S_START]
                if ks < t:
                    break
                k = None
            a = start if k is None else (eff[k] if eff[k] < t else t)
            # charge ``sid`` for [a, t)
            if t > a:
                if sid is None:
                    unrecorded(k, nxt, t - a)
                else:
                    if a < end:
                        cp[name] = (
                            cp.get(name, 0) + (t if t < end else end) - a
                        )
                    if t > end:
                        unrecorded(
                            k if k is not None and a > end else sid,
                            nxt,
                            t - (a if a > end else end),
                        )
            if k is None:
                break
            on_path.add(k)
            grand = get_kids(k)
            t2 = ks if ks > start else start
            if grand:
                push((sid, kids, i, start, t2, k))
                push(
                    (k, _by_end(grand, eff), 0, ks, a, nxt if a == t else None)
                )
                break
            # a leaf: all of [ks, a) is its own
            if a > ks:
                kend = ends[k]
                kname = names[k]
                if ks < kend:
                    cp[kname] = (
                        cp.get(kname, 0) + (a if a < kend else kend) - ks
                    )
                if a > kend:
                    unrecorded(
                        k,
                        nxt if a == t else None,
                        a - (ks if ks > kend else kend),
                    )
            t = t2
            nxt = k

    return cp, on_path


def _queued(parent: tuple, child: tuple) -> bool:
    """Is the time between ``parent``'s end and ``child``'s start a
    message in a queue (``rpc.queue``, as ``summarise`` counts it): an
    asynchronous send's dispatch, or a child in another process under a
    span that does not wait for it."""
    return parent[S_EV] not in SYNC and (
        child[S_EV] == DISPATCH
        or child[S_PID] != parent[S_PID]
        or child[S_HOST] != parent[S_HOST]
    )


# -- over a run ------------------------------------------------------------


def stats(values: typing.Iterable[float]) -> dict:
    """min/median/p90/p95/p99/max/mean/sum/count of ``values`` (us)."""
    arr = numpy.asarray(values, dtype=float)
    if arr.size == 0:
        return {'count': 0}
    pct = numpy.percentile(arr, PERCENTILES)
    return {
        'count': int(arr.size),
        'min': float(arr.min()),
        'median': float(pct[0]),
        'p90': float(pct[1]),
        'p95': float(pct[2]),
        'p99': float(pct[3]),
        'max': float(arr.max()),
        'mean': float(arr.mean()),
        'sum': float(arr.sum()),
    }


def components(summaries: typing.Iterable[RequestSummary]) -> list:
    """The components of ``summaries``' times, in report order."""
    names = set()
    for s in summaries:
        names.update(s._comp[0])
        names.update(s._cp[0])
    known = [c for c in COMPONENT_ORDER if c in names]
    return known + sorted(names - set(known))


def concurrency(
    start_times: typing.Iterable[int],
    end_times: typing.Iterable[int],
    points: int = 400,
    span: typing.Optional[tuple] = None,
) -> dict:
    """Requests in flight: a sampled series and the level seen by each
    request when it started; ``span``: ``(t0, t1)`` the series covers
    (default: from the first start to the last end of these)."""
    starts = numpy.asarray(start_times, dtype=numpy.int64)
    ends = numpy.asarray(end_times, dtype=numpy.int64)
    if starts.size == 0:
        return {
            'series': [],
            'at_start': numpy.zeros(0, dtype=int),
            'max': 0,
            'mean': 0.0,
        }
    s_sorted = numpy.sort(starts)
    e_sorted = numpy.sort(ends)
    if span is not None:
        t0, t1 = int(span[0]), int(max(span[1], span[0] + 1))
    else:
        t0 = int(s_sorted[0])
        t1 = int(max(e_sorted[-1], t0 + 1))
    grid = numpy.linspace(t0, t1, points)
    level = numpy.searchsorted(
        s_sorted, grid, side='right'
    ) - numpy.searchsorted(e_sorted, grid, side='right')
    at_start = numpy.searchsorted(
        s_sorted, starts, side='right'
    ) - numpy.searchsorted(e_sorted, starts, side='right')
    return {
        'series': [
            [round((float(g) - t0) / 1e6, 3), int(v)]
            for g, v in zip(grid, level, strict=True)
        ],
        'at_start': at_start,
        'max': int(at_start.max()),
        'mean': float(level.mean()),
    }


def level_label(n: int) -> str:
    if n <= 1:
        return '1'
    lo = 1 << (int(n).bit_length() - 1)
    hi = (lo << 1) - 1
    return '%d-%d' % (lo, hi)


def aggregate(summaries: list) -> dict:
    """Run-wide statistics of the finished requests."""
    boots = [s for s in summaries if s.kind == 'boot']
    others = [s for s in summaries if s.kind != 'boot']
    good = [s for s in boots if s.state in classify.GOOD_STATES]
    # requests whose times are not known (a span's end lost, records of
    # theirs maybe lost: ``damage``) count in the states, not in the
    # times
    degraded = [s for s in summaries if damage.marked(s)]
    succeeded = len(good)
    if degraded:
        good = [s for s in good if not damage.marked(s)]
    states = collections.Counter()
    causes = collections.Counter()
    inst_rows = 0
    rescheduled = 0
    built = 0
    for s in boots:
        for row in s.instances:
            inst_rows += 1
            states[row['state']] += 1
            if row['attempts'] >= 1:
                built += 1
                if row['attempts'] > 1:
                    rescheduled += 1
            if row['cause']:
                causes[(row['state'], row['cause']['cls'])] += 1
    every = boots + others
    t0 = min((s.start for s in every), default=0)
    t1 = max((s.end for s in every), default=0)
    duration = max(t1 - t0, 1) / 1e6
    names = components(good)
    comp_stats = {}
    sql_stats = {}
    cp_total = collections.Counter()
    comps = [s.comp for s in good]
    sql_ins = [s.sql_in for s in good]
    for name in names:
        comp_stats[name] = stats([c.get(name, 0) for c in comps])
        sql_stats[name] = stats([c.get(name, 0) for c in sql_ins])
    for s in good:
        cp_total.update(s.cp)
    lat_total = sum(s.latency for s in good) or 1
    # boots in flight: requests of other operations (the status polls
    # of a boot, lists...) are not counted (issue 13)
    conc = concurrency([s.start for s in boots], [s.end for s in boots])
    # the chart's series: boots, and requests of every operation, both
    # over the whole run (from the first request's start)
    run = (t0, max(t1, t0 + 1))
    boot_series = concurrency(
        [s.start for s in boots], [s.end for s in boots], span=run
    )['series']
    all_series = concurrency(
        [s.start for s in every], [s.end for s in every], span=run
    )['series']
    at_start = dict(zip((s.req for s in boots), conc['at_start'], strict=True))
    levels = {}
    for s, comp, sql_in in zip(good, comps, sql_ins, strict=True):
        label = level_label(int(at_start[s.req]))
        lv = levels.setdefault(
            label,
            {'requests': 0, 'sum': {}, 'latency': [], 'lo': at_start[s.req]},
        )
        lv['requests'] += 1
        lv['latency'].append(s.latency)
        lv['lo'] = min(lv['lo'], at_start[s.req])
        for name, us in comp.items():
            lv['sum'][name] = lv['sum'].get(name, 0) + us
        for us in sql_in.values():
            lv['sum']['sql'] = lv['sum'].get('sql', 0) + us
    level_rows = []
    for label, lv in sorted(levels.items(), key=lambda kv: kv[1]['lo']):
        n = lv['requests']
        level_rows.append(
            {
                'level': label,
                'requests': n,
                'mean_us': {k: v / n for k, v in lv['sum'].items()},
                'latency': stats(lv['latency']),
            }
        )
    by_state = {}
    for s in boots:
        by_state.setdefault(s.state, []).append(s.latency)
    return {
        'requests': len(every),
        'boots': len(boots),
        'other_requests': len(others),
        'instances': inst_rows,
        'states': dict(states),
        'causes': [
            {'state': st, 'cls': cls, 'count': n}
            for (st, cls), n in causes.most_common()
        ],
        'duration_s': duration,
        'throughput_rps': len(boots) / duration,
        'success_throughput_rps': succeeded / duration,
        'success_rate': (states['success'] + states['rescheduled_success'])
        / inst_rows
        if inst_rows
        else None,
        'reschedule_rate': rescheduled / built if built else None,
        # the reschedule rate's base: instances that reached a compute
        'instances_built': built,
        'db_retry_rate': (
            sum(1 for s in boots if s.db_retries) / len(boots)
            if boots
            else None
        ),
        'latency': stats([s.latency for s in good]),
        'latency_by_state': {k: stats(v) for k, v in by_state.items()},
        'components': comp_stats,
        'sql_in_components': sql_stats,
        'component_order': names,
        # successful boots of several instances: their instances' spans
        # (compute.*) ran side by side and their exclusive times add up
        'multi_instance_boots': sum(1 for s in good if len(s.instances) > 1),
        'critical_path_us': dict(cp_total),
        'critical_path_share': {k: v / lat_total for k, v in cp_total.items()},
        'gaps': gap_figures(good),
        # series: [seconds since the first request's start, boot
        # requests in flight], over the whole run; series_all: the same
        # of the requests of every operation
        'concurrency': {
            'series': boot_series,
            'max': conc['max'],
            'mean': conc['mean'],
            'series_all': all_series,
            'counted': 'boot requests in flight when the '
            'request started (other operations, '
            'e.g. status polls, not counted)',
        },
        'levels': level_rows,
        'start_us': t0,
        'end_us': t1,
        'degraded': _degraded(degraded),
    }


def gap_figures(
    summaries: typing.Iterable[RequestSummary],
    examples: int = 3,
    limit: int = 10,
) -> list:
    """Where the critical paths of ``summaries`` crossed time no span
    covers (``gap``), longest in total first: ``after`` (the event that
    had ended; None: the request's start), ``before`` (the event that
    started next; None: the request's end), ``requests`` (how many
    crossed it), ``critical_us`` (their total), ``mean_us`` (per such
    request), ``examples`` (request ids)."""
    rows: dict = {}
    for s in summaries:
        for after, before, us in getattr(s, 'gaps', ()) or ():
            row = rows.get((after, before))
            if row is None:
                row = rows[(after, before)] = [0, 0, []]
            row[0] += 1
            row[1] += us
            if len(row[2]) < examples:
                row[2].append(s.req)
    out = [
        {
            'after': k[0],
            'before': k[1],
            'requests': v[0],
            'critical_us': v[1],
            'mean_us': v[1] / v[0],
            'examples': v[2],
        }
        for k, v in rows.items()
    ]
    out.sort(
        key=lambda r: (-r['critical_us'], str(r['after']), str(r['before']))
    )
    return out[:limit]


def _degraded(degraded: list) -> dict:
    """The requests left out of the times: how many, how many boots,
    the span ends lost, examples; ``marked``: of them, those a loss may
    have touched (``damage.mark``; only when there are some)."""
    out = {
        'requests': len(degraded),
        'boots': sum(1 for s in degraded if s.kind == 'boot'),
        'lost_ends': sum(getattr(s, 'lost_ends', 0) for s in degraded),
        'examples': [s.req for s in degraded[:10]],
    }
    touched = sum(1 for s in degraded if getattr(s, 'loss', None))
    if touched:
        out['marked'] = touched
    return out
