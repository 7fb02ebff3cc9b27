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
"""The request model: requests assembled from their events, finalised.

Events arrive grouped by request id (``req``) in any order within the
streaming horizon.  An open request (``spans.OpenRequest``) keeps its
spans (compact lists, ``spans.S_*``), its SQL time summed per enclosing
span (statements are not kept one by one), its SQL errors and its
instant events.

A request is finalised when nothing happened to it for ``idle`` seconds
of input time (the watermark of ``stream.chunks``) and it reached an
outcome (a terminal state, no open span), or, without an outcome, for
``hung`` seconds; at the end of the input all are finalised.  The
finished request is reduced to a ``breakdown.RequestSummary`` and its
spans are freed, so memory is bounded by the requests still open; just
before, it is handed (``Done``) to each hook (the sections that read
finished requests: the failure table, the causality checks, the calls
to other services, the timelines kept).  Events for a request
finalised shortly before are counted as ``late`` (raise ``--horizon``
if there are many), and the request is marked (``damage``): its
figures miss them.

The records it reads are declared in ``Assembler.routes``: the spans
of requests (and those without a request id, counted per event), the
SQL statements of requests, every instant event and metadata record
(the host names the failure messages are normalised with).
"""

import collections
import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.model import breakdown
from instrument.analysis.model import classify
from instrument.analysis.model import operations
from instrument.analysis.model import spans as spans_mod

RECENT = 100_000
# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_DUR = spans_mod.S_DUR
S_ST = spans_mod.S_ST
S_ERR = spans_mod.S_ERR
S_ATTRS = spans_mod.S_ATTRS
S_INST = spans_mod.S_INST


class Done(typing.NamedTuple):
    """A request the model finalised, as its hooks get it: its
    ``summary`` (``breakdown.RequestSummary``), its spans
    (``request``: ``spans.OpenRequest``), their ``tree``
    (``spans.Tree``) and the model's message normaliser."""

    summary: breakdown.RequestSummary
    request: spans_mod.OpenRequest
    tree: spans_mod.Tree
    normalise: classify.Normaliser


class Assembler:
    """Open requests, keyed by request id."""

    routes = (
        routes.Route(
            'X',
            None,
            (routes.NONE, routes.REQUEST),
            'complete',
            exclude=spans_mod.NOT_SPANS,
        ),
        routes.Route('B', None, (routes.NONE, routes.REQUEST), 'begin'),
        routes.Route(
            'X', frozenset((schema.EV_SQL_QUERY,)), (routes.REQUEST,), 'sql'
        ),
        routes.Route('I', None, routes.ALL, 'instant'),
        routes.Route('M', None, routes.ALL, 'metadata'),
    )

    def __init__(
        self,
        idle_us: int = 30_000_000,
        hung_us: int = 600_000_000,
        normaliser: typing.Optional[classify.Normaliser] = None,
        hooks: typing.Iterable[
            typing.Callable[[Done], typing.Optional[bool]]
        ] = (),
        keep_lifecycles: bool = True,
        window: typing.Any = None,
    ) -> None:
        # hook(done) -> False: do not keep its lifecycle
        self.idle_us = idle_us
        self.hung_us = hung_us
        self.open = {}
        self.recent = collections.OrderedDict()
        self.normalise = normaliser or classify.Normaliser()
        self.hooks = tuple(hooks)
        self.keep_lifecycles = keep_lifecycles
        self.summaries = []
        self.late = 0
        self.duplicates = 0
        self.no_request = collections.Counter()
        # --since/--until (a window.Window, None: everything): requests
        # that started outside are left out, and counted
        self.window = window
        self.outside = 0
        self._swept: typing.Optional[int] = None

    # -- ingest (hot) ------------------------------------------------------

    def _get(self, req: str):
        r = self.open.get(req)
        if r is None:
            if req in self.recent:
                self.late += 1
                # its figures miss this event: marked (``damage``)
                summary = self.recent[req]
                if summary is not None:
                    summary.late += 1
                return None
            r = self.open[req] = spans_mod.OpenRequest(req)
        return r

    def complete(
        self, rec: typing.Any, ts: int, cursor: typing.Any = None
    ) -> bool:
        """An ``X`` record of a span (``codec.RecordDecoder``); False
        for a duplicate."""
        req = rec.req
        if req is None:
            self.no_request[rec.ev] += 1
            return True
        r = self.open.get(req)
        if r is None:
            r = self._get(req)
            if r is None:
                return True
        r.events += 1
        sid = rec.span
        spans = r.spans
        s = spans.get(sid)
        dur = rec.dur_us
        if s is None:
            # the fields in the order of spans.S_*
            spans[sid] = [
                rec.ev,
                rec.host,
                rec.svc,
                rec.pid,
                ts,
                dur,
                rec.parent,
                rec.st,
                rec.err,
                rec.attrs,
                rec.inst,
            ]
        elif s[S_DUR] is None:
            s[S_DUR] = dur
            s[S_ST] = rec.st
            s[S_ERR] = rec.err
            s[S_ATTRS] = rec.attrs or s[S_ATTRS]
            r.open -= 1
            # its start was read (a second one is a duplicate)
            begun = r.begun
            if begun is None:
                begun = r.begun = set()
            begun.add(sid)
        else:
            self.duplicates += 1
            return False
        end = ts + dur
        if end > r.last:
            r.last = end
        return True

    def begin(
        self, rec: typing.Any, ts: int, cursor: typing.Any = None
    ) -> bool:
        """A ``B`` record: a span started; False for a duplicate."""
        req = rec.req
        if req is None:
            self.no_request[rec.ev] += 1
            return True
        r = self.open.get(req)
        if r is None:
            r = self._get(req)
            if r is None:
                return True
        r.events += 1
        sid = rec.span
        spans = r.spans
        s = spans.get(sid)
        if s is not None:
            begun = r.begun
            if (
                s[S_DUR] is not None
                and s[S_EV] == rec.ev
                and (begun is None or sid not in begun)
            ):
                # the start of a span whose end was read first (the
                # order of a process's records does not matter): not a
                # duplicate; a second one is
                if begun is None:
                    begun = r.begun = set()
                begun.add(sid)
                return True
            self.duplicates += 1
            return False
        # the fields in the order of spans.S_*
        spans[sid] = [
            rec.ev,
            rec.host,
            rec.svc,
            rec.pid,
            ts,
            None,
            rec.parent,
            None,
            None,
            rec.attrs,
            rec.inst,
        ]
        r.open += 1
        if ts > r.last:
            r.last = ts
        return True

    def sql(self, rec: typing.Any, ts: int, cursor: typing.Any = None) -> None:
        """An ``sql.query`` record of a request."""
        r = self.open.get(rec.req)
        if r is None:
            r = self._get(rec.req)
            if r is None:
                return
        r.events += 1
        parent = rec.parent
        dur = rec.dur_us
        entry = r.sql.get(parent)
        if entry is None:
            r.sql[parent] = [dur, 1, rec.svc, rec.host, rec.pid]
        else:
            entry[0] += dur
            entry[1] += 1
        end = ts + dur
        if end > r.last:
            r.last = end
        if rec.st == 'error':
            err = rec.err or {}
            r.sql_errors.append(
                (parent, err.get('cls'), err.get('msg'), rec.svc, rec.host)
            )

    def instant(
        self, rec: typing.Any, ts: int, cursor: typing.Any = None
    ) -> None:
        """An ``I`` record (``db.retry``, ``db.pool.*``...)."""
        req = rec.req
        if req is None:
            return
        r = self._get(req)
        if r is None:
            return
        r.events += 1
        r.instants.append((rec.ev, ts, rec.host, rec.svc, rec.attrs))
        if ts > r.last:
            r.last = ts

    def metadata(
        self, rec: typing.Any, ts: int, cursor: typing.Any = None
    ) -> None:
        """An ``M`` record: the host it names is one failure messages
        are normalised with."""
        self.normalise.add_hosts((rec.host,))

    def event_of(self, req: str, sid: typing.Any) -> typing.Optional[str]:
        """The event of span ``sid`` of open request ``req``, if its
        start was read (the reader repairs a record without its event
        with it: ``ingest.codec.repair``)."""
        r = self.open.get(req)
        s = None if r is None else r.spans.get(sid)
        return None if s is None else s[S_EV]

    # -- finalisation ------------------------------------------------------

    def sweep(self, watermark: int) -> None:
        """Finalise requests that the horizon says are done."""
        if watermark is None or watermark < 0:
            return
        if (
            self._swept is not None
            and watermark - self._swept < self.idle_us // 4
        ):
            return
        self._swept = watermark
        idle_cut = watermark - self.idle_us
        hung_cut = watermark - self.hung_us
        done: list = []
        for req, r in self.open.items():
            if r.last >= idle_cut:
                continue
            if r.last < hung_cut:
                done.append((req, None))
            elif r.open == 0:
                # (its operation, found once: summarise needs it too)
                op = operations.operation_of(r.spans)
                if _terminal(r, op):
                    done.append((req, op))
        for req, op in done:
            self.finalise(self.open.pop(req), op)

    def finish(self) -> None:
        """Finalise every request still open (the end of the input)."""
        for r in list(self.open.values()):
            self.finalise(r)
        self.open.clear()

    def finalise(
        self, r: spans_mod.OpenRequest, kind: typing.Optional[str] = None
    ) -> None:
        """Reduce ``r`` to its summary, hand it to the hooks (``kind``:
        its operation, when just found from its spans)."""
        self.recent[r.req] = None
        if len(self.recent) > RECENT:
            self.recent.popitem(last=False)
        if not r.spans and not r.sql:
            return
        tree = spans_mod.Tree(r.spans, r.sql_errors)
        summary = breakdown.summarise(r, tree, keep_lifecycle=False, kind=kind)
        if self.window is not None and not self.window.contains(summary.start):
            self.outside += 1
            return
        self.summaries.append(summary)
        self.recent[r.req] = summary
        keep = self.keep_lifecycles
        done = Done(summary, r, tree, self.normalise)
        for hook in self.hooks:
            if hook(done) is False:
                keep = False
        if keep:
            breakdown.add_lifecycle(summary, r)
        summary.critical = None


def _terminal(r: spans_mod.OpenRequest, op: str) -> bool:
    """Has the request reached an outcome (no more events expected)?
    ``op``: its operation (``operations.operation_of`` of its spans)."""
    spans = r.spans
    if op != operations.OP_BOOT:
        if op == operations.OTHER:
            return any(
                s[S_EV] == 'api.request' and s[S_DUR] is not None
                for s in spans.values()
            )
        return operations.terminal(op, spans)
    boot = False
    api_done = False
    insts = set()
    done = set()
    for s in spans.values():
        ev = s[S_EV]
        if s[S_INST]:
            insts.update(s[S_INST])
        if ev == 'api.request':
            api_done = s[S_DUR] is not None
        elif ev == 'api.compute.create':
            boot = True
            if s[S_ST] == 'error':
                return True
        elif ev == 'compute.build' and s[S_DUR] is not None:
            boot = True
            if (s[S_ATTRS] or {}).get(schema.ATTR_OUTCOME) in (
                'active',
                'failed',
            ):
                done.update(s[S_INST] or ())
        elif (
            ev in ('conductor.bury_in_cell0', classify.EV_RESCHEDULE_FAILED)
            and s[S_DUR] is not None
        ):
            boot = True
            done.update(s[S_INST] or ())
        elif ev in classify.BOOT_EVENTS:
            boot = True
    if not boot:
        return api_done
    return bool(insts) and insts <= done
