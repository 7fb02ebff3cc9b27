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

Each error counted in the failure table is also told apart by its fate
(``fate``): ``final`` when it was the final cause of an instance (or of
the request: the ``cause`` of its final state), else recovered when it
was retried by oslo.db (``db_retry``: a ``db.retry`` of the same
process that was not the last), rescheduled to another host
(``rescheduled``: under a ``compute.build`` whose outcome is
``rescheduled``) or raised in an instance that still succeeded
(``succeeded``), else neither (a request without an outcome, or one
another error ended).
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
        # [count, [request ids], final, {how recovered: count}]
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
        self._failures(r, tree, summary)
        self._causality(r, tree)
        self.summaries.append(summary)
        keep = self.keep_lifecycles
        if self.on_summary is not None:
            keep = self.on_summary(summary, r, tree) and keep
        if keep:
            breakdown.add_lifecycle(summary, r)
        summary.critical = None

    def _add_failure(self, key, req, fate=None) -> None:
        row = self.failures.get(key)
        if row is None:
            row = self.failures[key] = [0, [], 0, {}]
        row[0] += 1
        if len(row[1]) < 5 and req not in row[1]:
            row[1].append(req)
        if fate == FINAL:
            row[2] += 1
        elif fate is not None:
            row[3][fate] = row[3].get(fate, 0) + 1

    def _failures(self, r: OpenRequest, tree,
                  summary: breakdown.RequestSummary) -> None:
        # one row per (operation, component, event, error, message)
        op = summary.kind
        norm = self.normalise
        origins = list(tree.origins())
        if not origins and not r.sql_errors:
            return
        fates = Fates(r, tree, summary)
        # A failure that came from another service is that service's
        # row (its message, the route template and status, is kept);
        # the same exception raised again elsewhere in the request (the
        # network allocation's, in the spawn that waited for it: the
        # same class) is not counted twice, but when it was the final
        # cause, that service's row was.
        from_services = {}
        rows = []
        rest = []
        for sid in origins:
            called = services.failure(tree, sid)
            if called is None:
                rest.append(sid)
                continue
            from_services[called[2]] = len(rows)
            rows.append([(op,) + called, fates.of_span(sid)])
        for sid in rest:
            s = r.spans[sid]
            err = s[classify.S_ERR] or {}
            cls = err.get('cls')
            if cls in from_services:
                if fates.is_final(sid):
                    rows[from_services[cls]][1] = FINAL
                continue
            rows.append([(op, s[classify.S_SVC], s[classify.S_EV],
                          cls or 'error', norm(err.get('msg'))),
                         fates.of_span(sid)])
        for i, (_parent, cls, msg, svc, _host) in enumerate(r.sql_errors):
            rows.append([(op, svc, 'sql.query', cls or 'error', norm(msg)),
                         fates.of_sql(i)])
        for key, fate in rows:
            self._add_failure(key, r.req, fate)

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


FINAL = 'final'
DB_RETRY = 'db_retry'
RESCHEDULED = 'rescheduled'
SUCCEEDED = 'succeeded'


class Fates:
    """What became of each error of a finished request: ``FINAL`` (the
    cause of an instance's final state, ``summary.instances``), else
    how it was recovered (``DB_RETRY``, ``RESCHEDULED``,
    ``SUCCEEDED``), else None."""

    def __init__(self, r: OpenRequest, tree: classify.Tree,
                 summary: breakdown.RequestSummary) -> None:
        self.r = r
        self.tree = tree
        self.finals = set()
        rows = summary.instances
        for row in rows:
            cause = row.get('cause')
            if cause:
                sid = _cause_span(tree, cause)
                if sid is not None:
                    self.finals.add(sid)
        good = operations.GOOD_STATES
        self.good_insts = {row['inst'] for row in rows
                           if row['state'] in good}
        self.all_good = bool(rows) and all(row['state'] in good
                                           for row in rows)
        # oslo.db retries per process (svc, host), in order; one that
        # was not the last (``exhausted``) retried one failed statement
        retries = {}
        for ev, _ts, host, svc, attrs in r.instants:
            if ev == schema.EV_DB_RETRY and \
                    (attrs or {}).get(schema.ATTR_EXHAUSTED) is not True:
                retries[(svc, host)] = retries.get((svc, host), 0) + 1
        self.retried = set()
        for i, e in enumerate(r.sql_errors):
            key = (e[3], e[4])
            if retries.get(key):
                retries[key] -= 1
                self.retried.add(i)

    def is_final(self, sid: typing.Any) -> bool:
        return sid in self.finals

    def of_span(self, sid: typing.Any) -> typing.Optional[str]:
        if sid in self.finals:
            return FINAL
        return self._recovered(sid)

    def of_sql(self, i: int) -> typing.Optional[str]:
        if i in self.retried:
            return DB_RETRY
        parent = self.r.sql_errors[i][0]
        if parent in self.finals:
            # the statement's error failed the span that ended it
            return FINAL
        return self._recovered(parent)

    def _recovered(self, sid: typing.Any) -> typing.Optional[str]:
        spans = self.tree.spans
        s = spans.get(sid)
        cur = sid
        seen = set()
        while cur is not None and cur not in seen:
            c = spans.get(cur)
            if c is None:
                break
            seen.add(cur)
            if c[classify.S_EV] == 'compute.build' and str(
                    (c[classify.S_ATTRS] or {}).get(schema.ATTR_OUTCOME)
                    ).startswith('rescheduled'):
                return RESCHEDULED
            cur = c[classify.S_PARENT]
        insts = s[classify.S_INST] if s is not None else None
        if insts:
            if all(i in self.good_insts for i in insts):
                return SUCCEEDED
        elif self.all_good:
            return SUCCEEDED
        return None


def _cause_span(tree: classify.Tree, cause: dict) -> typing.Any:
    """The error span a final state's ``cause`` names (``classify
    ._cause``): the one of its event, host, class and message that
    ended last; None for a cause without a span (an HTTP status, a
    reason)."""
    best = None
    for sid, s in tree.spans.items():
        err = s[classify.S_ERR]
        if s[classify.S_EV] != cause['ev'] or \
                s[classify.S_HOST] != cause['host'] or \
                (err is None and s[classify.S_ST] != 'error'):
            continue
        err = err or {}
        if (err.get('cls') or 'error') != cause['cls'] or \
                (err.get('msg') or '') != cause['msg']:
            continue
        key = (s[classify.S_START] + (s[classify.S_DUR] or 0),
               s[classify.S_START])
        if best is None or key > best[0]:
            best = (key, sid)
    return None if best is None else best[1]


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
