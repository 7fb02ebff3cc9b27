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
"""Assembling requests from their events, and finalising them.

Events arrive grouped by request id (``req``) in any order within the
streaming horizon.  An open request keeps its spans (compact lists, see
``classify.S_*``), its SQL time summed per enclosing span (statements
are not kept one by one), its SQL errors and its instant events.

A request is finalised when nothing happened to it for ``idle`` seconds
of input time (the watermark of ``stream.chunks``) and it reached an
outcome (a terminal state, no open span), or, without an outcome, for
``hung`` seconds; at the end of the input all are finalised.  The
finished request is reduced to a ``breakdown.RequestSummary`` and its
spans are freed, so memory is bounded by the requests still open.
Events for a request finalised shortly before are counted as ``late``
(raise ``--horizon`` if there are many).
"""

import collections
import typing

from instrument.analysis import breakdown
from instrument.analysis import classify
from instrument.analysis import operations
from instrument.analysis import services
from instrument import schema

RECENT = 100_000


class OpenRequest:
    __slots__ = ('req', 'spans', 'sql', 'sql_errors', 'instants', 'last',
                 'open', 'terminal', 'greq', 'events')

    def __init__(self, req: str) -> None:
        self.req = req
        self.spans = {}
        # parent span: [us, count, svc, host, pid]
        self.sql = {}
        self.sql_errors = []
        self.instants = []
        self.last = 0
        self.open = 0
        self.terminal = False
        self.greq = None
        self.events = 0


class Assembler:
    """Open requests, keyed by request id."""

    def __init__(self, idle_us: int = 30_000_000,
                 hung_us: int = 600_000_000,
                 normaliser: typing.Optional[classify.Normaliser] = None,
                 on_summary: typing.Optional[typing.Callable[
                     [breakdown.RequestSummary, 'OpenRequest',
                      classify.Tree], bool]] = None,
                 keep_lifecycles: bool = True,
                 window: typing.Any = None) -> None:
        # on_summary(summary, request, tree) -> keep its lifecycle?
        self.idle_us = idle_us
        self.hung_us = hung_us
        self.open = {}
        self.recent = collections.OrderedDict()
        self.normalise = normaliser or classify.Normaliser()
        self.on_summary = on_summary
        self.keep_lifecycles = keep_lifecycles
        self.summaries = []
        # (operation, svc, ev, cls, normalised message):
        # [count, [request ids]]
        self.failures = {}
        # (func, cls): count
        self.retries = collections.Counter()
        self.late = 0
        self.duplicates = 0
        self.causality: dict[str, typing.Any] = {
            'checked': 0, 'violations': 0, 'examples': []}
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
                return None
            r = self.open[req] = OpenRequest(req)
        return r

    def span(self, rec: typing.Any, ts: int, complete: bool) -> bool:
        """Add a ``B`` or ``X`` record (``load.RecordDecoder``); False
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
        if complete:
            dur = rec.dur_us
            if s is None:
                spans[sid] = [rec.ev, rec.host, rec.svc, rec.pid, ts, dur,
                              rec.parent, rec.st, rec.err, rec.attrs,
                              rec.inst]
            elif s[5] is None:
                s[5] = dur
                s[7] = rec.st
                s[8] = rec.err
                s[9] = rec.attrs or s[9]
                r.open -= 1
            else:
                self.duplicates += 1
                return False
            end = ts + dur
            if end > r.last:
                r.last = end
        else:
            if s is not None:
                self.duplicates += 1
                return False
            spans[sid] = [rec.ev, rec.host, rec.svc, rec.pid, ts, None,
                          rec.parent, None, None, rec.attrs, rec.inst]
            r.open += 1
            if ts > r.last:
                r.last = ts
        return True

    def sql(self, req: str, parent: typing.Optional[str], dur: int,
            end: int, rec: typing.Any, error: bool) -> None:
        r = self.open.get(req)
        if r is None:
            r = self._get(req)
            if r is None:
                return
        r.events += 1
        entry = r.sql.get(parent)
        if entry is None:
            r.sql[parent] = [dur, 1, rec.svc, rec.host, rec.pid]
        else:
            entry[0] += dur
            entry[1] += 1
        if end > r.last:
            r.last = end
        if error:
            err = rec.err or {}
            r.sql_errors.append((parent, err.get('cls'), err.get('msg'),
                                 rec.svc, rec.host))

    def instant(self, rec: typing.Any, ts: int) -> None:
        ev = rec.ev
        if ev == 'db.retry' and (self.window is None or
                                 self.window.contains(ts)):
            attrs = rec.attrs or {}
            self.retries[(attrs.get(schema.ATTR_FUNC) or '?',
                          attrs.get(schema.ATTR_CLS) or '?')] += 1
        req = rec.req
        if req is None:
            return
        r = self._get(req)
        if r is None:
            return
        r.events += 1
        r.instants.append((ev, ts, rec.host, rec.svc, rec.attrs))
        if ts > r.last:
            r.last = ts

    # -- finalisation ------------------------------------------------------

    def sweep(self, watermark: int) -> None:
        """Finalise requests that the horizon says are done."""
        if watermark is None or watermark < 0:
            return
        if self._swept is not None and \
                watermark - self._swept < self.idle_us // 4:
            return
        self._swept = watermark
        idle_cut = watermark - self.idle_us
        hung_cut = watermark - self.hung_us
        done = []
        for req, r in self.open.items():
            if r.last >= idle_cut:
                continue
            if r.last < hung_cut or (r.open == 0 and _terminal(r)):
                done.append(req)
        for req in done:
            self.finalise(self.open.pop(req))

    def finish(self) -> None:
        for r in list(self.open.values()):
            self.finalise(r)
        self.open.clear()

    def finalise(self, r: OpenRequest) -> None:
        self.recent[r.req] = None
        if len(self.recent) > RECENT:
            self.recent.popitem(last=False)
        if not r.spans and not r.sql:
            return
        tree = classify.Tree(r.spans, r.sql_errors)
        summary = breakdown.summarise(r, tree, keep_lifecycle=False)
        if self.window is not None and not self.window.contains(
                summary.start):
            self.outside += 1
            return
        self._failures(r, tree, summary.kind)
        self._causality(r, tree)
        self.summaries.append(summary)
        keep = self.keep_lifecycles
        if self.on_summary is not None:
            keep = self.on_summary(summary, r, tree) and keep
        if keep:
            breakdown.add_lifecycle(summary, r)
        summary.critical = None

    def _add_failure(self, key, req) -> None:
        row = self.failures.get(key)
        if row is None:
            row = self.failures[key] = [0, []]
        row[0] += 1
        if len(row[1]) < 5 and req not in row[1]:
            row[1].append(req)

    def _failures(self, r: OpenRequest, tree, op: str) -> None:
        # one row per (operation, component, event, error, message)
        norm = self.normalise
        # A failure that came from another service is that service's
        # row (its message, the route template and status, is kept);
        # the same exception raised again elsewhere in the request (the
        # network allocation's, in the spawn that waited for it: the
        # same class) is not counted twice.
        from_services = set()
        rest = []
        for sid in tree.origins():
            called = services.failure(tree, sid)
            if called is None:
                rest.append(sid)
                continue
            self._add_failure((op,) + called, r.req)
            from_services.add(called[2])
        for sid in rest:
            s = r.spans[sid]
            err = s[classify.S_ERR] or {}
            if err.get('cls') in from_services:
                continue
            self._add_failure((op, s[classify.S_SVC], s[classify.S_EV],
                               err.get('cls') or 'error',
                               norm(err.get('msg'))), r.req)
        for _parent, cls, msg, svc, _host in r.sql_errors:
            self._add_failure((op, svc, 'sql.query', cls or 'error',
                               norm(msg)), r.req)

    def _causality(self, r: OpenRequest, tree) -> None:
        """Check cross-host hops against the corrected clocks."""
        spans = r.spans
        c = self.causality
        for s in spans.values():
            parent = s[classify.S_PARENT]
            if parent is None:
                continue
            p = spans.get(parent)
            if p is None or p[classify.S_HOST] == s[classify.S_HOST]:
                continue
            c['checked'] += 1
            bad = s[classify.S_START] < p[classify.S_START]
            if not bad and p[classify.S_EV] in breakdown.SYNC and \
                    p[classify.S_DUR] is not None and \
                    s[classify.S_DUR] is not None:
                bad = (s[classify.S_START] + s[classify.S_DUR] >
                       p[classify.S_START] + p[classify.S_DUR])
            if bad:
                c['violations'] += 1
                if len(c['examples']) < 10:
                    c['examples'].append({
                        'req': r.req, 'parent': p[classify.S_EV],
                        'parent_host': p[classify.S_HOST],
                        'child': s[classify.S_EV],
                        'child_host': s[classify.S_HOST]})


def _terminal(r: OpenRequest) -> bool:
    """Has the request reached an outcome (no more events expected)?"""
    spans = r.spans
    op = operations.operation_of(spans)
    if op != operations.OP_BOOT:
        if op == operations.OTHER:
            return any(s[0] == 'api.request' and s[5] is not None
                       for s in spans.values())
        return operations.terminal(op, spans)
    boot = False
    api_done = False
    insts = set()
    done = set()
    for s in spans.values():
        ev = s[0]
        if s[10]:
            insts.update(s[10])
        if ev == 'api.request':
            api_done = s[5] is not None
        elif ev == 'api.compute.create':
            boot = True
            if s[7] == 'error':
                return True
        elif ev == 'compute.build' and s[5] is not None:
            boot = True
            if (s[9] or {}).get(schema.ATTR_OUTCOME) in ('active',
                                                         'failed'):
                done.update(s[10] or ())
        elif ev == 'conductor.bury_in_cell0' and s[5] is not None:
            boot = True
            done.update(s[10] or ())
        elif ev in classify.BOOT_EVENTS:
            boot = True
    if not boot:
        return api_done
    return bool(insts) and insts <= done
