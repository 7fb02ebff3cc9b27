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
"""``failures``: every error, counted once where it was raised.

A failure's *origin* is an error span none of whose children (on any
host) failed (``spans.Tree.origins``): an exception that travels up
through nested spans and RPC hops is counted once, where it was raised.
One row per (operation, component, event, error class, normalised
message) over the finished requests: how many times it was raised, the
five slowest of its requests (by the request's end-to-end time, then
its start and id: the same at any ``-j``), and of those how many were
*final* or *recovered*.  A failure that came from another service is that
service's row (``services.failure``).

Each error is told apart by its fate (``Fates``): ``final`` when it
was the final cause of an instance (or of the request: the ``cause`` of
its final state), else recovered when it was retried by oslo.db
(``db_retry``: a ``db.retry`` of the same process that was not the
last), rescheduled to another host (``rescheduled``: under a
``compute.build`` whose outcome is ``rescheduled``) or raised in an
instance that still succeeded (``succeeded``), else neither (a request
without an outcome, or one another error ended).  The text and HTML
forms add the final causes of the boot instances that failed and the
DB retries (``retries``).
"""

import typing

from instrument import schema
from instrument.analysis.model import operations
from instrument.analysis.model import spans as spans_mod
from instrument.analysis.render import fmt
from instrument.analysis.render import views
from instrument.analysis.sections import base
from instrument.analysis.sections import services

# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_HOST = spans_mod.S_HOST
S_SVC = spans_mod.S_SVC
S_START = spans_mod.S_START
S_DUR = spans_mod.S_DUR
S_PARENT = spans_mod.S_PARENT
S_ST = spans_mod.S_ST
S_ERR = spans_mod.S_ERR
S_ATTRS = spans_mod.S_ATTRS
S_INST = spans_mod.S_INST

FINAL = 'final'
DB_RETRY = 'db_retry'
RESCHEDULED = 'rescheduled'
SUCCEEDED = 'succeeded'
# Request ids kept per failure row: the slowest.
KEEP = 5


class Failures(base.Section):
    """``report['failures']``: the failure table."""

    key = 'failures'

    def __init__(self, ctx: base.Context) -> None:
        # (operation, svc, ev, cls, normalised message):
        # [count, [(-request us, start, request id)], final,
        # {how recovered: count}]: the KEEP slowest requests
        self.table: dict = {}

    def _add(self, key, req, fate=None, summary=None) -> None:
        row = self.table.get(key)
        if row is None:
            row = self.table[key] = [0, [], 0, {}]
        row[0] += 1
        if summary is None:
            example = (0, 0, req)
        else:
            example = (summary.start - summary.end, summary.start, req)
        base.keep_best(row[1], example, KEEP)
        if fate == FINAL:
            row[2] += 1
        elif fate is not None:
            row[3][fate] = row[3].get(fate, 0) + 1

    def finished(self, done: typing.Any) -> None:
        """The failure rows of a finished request: one per (operation,
        component, event, error, message)."""
        r, tree, summary = done.request, done.tree, done.summary
        op = summary.kind
        norm = done.normalise
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
        # An error caught below and raised again above (nova's
        # scatter_gather returns a cell's InstanceNotFound as a result;
        # compute.API.get raises it again): the same class and message
        # in an origin under another origin is one error, counted at
        # the deepest place; final there when it was final above.
        keyed = {}
        for sid in rest:
            err = r.spans[sid][S_ERR] or {}
            keyed[sid] = (err.get('cls'), norm(err.get('msg')))
        again = _raised_again(tree, keyed)
        at = {}
        for sid in rest:
            s = r.spans[sid]
            err = s[S_ERR] or {}
            cls = err.get('cls')
            if cls in from_services:
                if fates.is_final(sid):
                    rows[from_services[cls]][1] = FINAL
                continue
            if sid in again:
                continue
            at[sid] = len(rows)
            rows.append(
                [
                    (
                        op,
                        s[S_SVC],
                        s[S_EV],
                        cls or 'error',
                        norm(err.get('msg')),
                    ),
                    fates.of_span(sid),
                ]
            )
        for sid, below in again.items():
            if below in at and fates.is_final(sid):
                rows[at[below]][1] = FINAL
        for i, (_parent, cls, msg, svc, _host) in enumerate(r.sql_errors):
            rows.append(
                [
                    (op, svc, 'sql.query', cls or 'error', norm(msg)),
                    fates.of_sql(i),
                ]
            )
        for key, fate in rows:
            self._add(key, r.req, fate, summary)

    def merge(self, other: 'Failures') -> None:
        for key, (n, reqs, final, recovered) in other.table.items():
            row = self.table.setdefault(key, [0, [], 0, {}])
            row[0] += n
            base.merge_best(row[1], reqs, KEEP)
            row[2] += final
            for how, k in recovered.items():
                row[3][how] = row[3].get(how, 0) + k

    def report(self, view: base.View) -> list:
        # count: times raised; final: of those, the final cause of an
        # instance or request (summary.causes counts the instances);
        # recovered: retried (oslo.db, a reschedule) or the instance
        # still succeeded (``Fates``)
        failures = [
            {
                'operation': op,
                'component': svc,
                'ev': ev,
                'cls': cls,
                'message': msg,
                'count': n,
                'requests': [example[2] for example in reqs],
                'final': final,
                'recovered': sum(recovered.values()),
                'recovered_by': dict(sorted(recovered.items())),
            }
            for (op, svc, ev, cls, msg), (
                n,
                reqs,
                final,
                recovered,
            ) in self.table.items()
        ]
        failures.sort(
            key=lambda r: (
                -r['count'],
                r['operation'],
                r['component'],
                r['cls'],
                r['message'],
            )
        )
        return failures

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report)

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return html_parts(report)


def _raised_again(tree: spans_mod.Tree, keyed: dict) -> dict:
    """``{origin: the origin under it it raised again}``: of the
    origins ``keyed`` (span id: (class, normalised message)), those
    with a descendant origin of the same class and message (the
    deepest such one, itself not raised again)."""
    if len(keyed) < 2:
        return {}
    out = {}
    for sid, key in keyed.items():
        below = [
            d for d in tree.subtree(sid) if d != sid and keyed.get(d) == key
        ]
        if below:
            out[sid] = max(below, key=tree.depth)
    return out


class Fates:
    """What became of each error of a finished request: ``FINAL`` (the
    cause of an instance's final state, ``summary.instances``), else
    how it was recovered (``DB_RETRY``, ``RESCHEDULED``,
    ``SUCCEEDED``), else None."""

    def __init__(
        self,
        r: spans_mod.OpenRequest,
        tree: spans_mod.Tree,
        summary: typing.Any,
    ) -> None:
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
        self.good_insts = {row['inst'] for row in rows if row['state'] in good}
        self.all_good = bool(rows) and all(
            row['state'] in good for row in rows
        )
        # oslo.db retries per process (svc, host), in order; one that
        # was not the last (``exhausted``) retried one failed statement
        retries = {}
        for ev, _ts, host, svc, attrs in r.instants:
            if (
                ev == schema.EV_DB_RETRY
                and (attrs or {}).get(schema.ATTR_EXHAUSTED) is not True
            ):
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
            if c[S_EV] == 'compute.build' and str(
                (c[S_ATTRS] or {}).get(schema.ATTR_OUTCOME)
            ).startswith('rescheduled'):
                return RESCHEDULED
            cur = c[S_PARENT]
        insts = s[S_INST] if s is not None else None
        if insts:
            if all(i in self.good_insts for i in insts):
                return SUCCEEDED
        elif self.all_good:
            return SUCCEEDED
        return None


def _cause_span(tree: spans_mod.Tree, cause: dict) -> typing.Any:
    """The error span a final state's ``cause`` names (``spans.cause``):
    the one of its event, host, class and message that ended last; None
    for a cause without a span (an HTTP status, a reason)."""
    best = None
    for sid, s in tree.spans.items():
        err = s[S_ERR]
        if (
            s[S_EV] != cause['ev']
            or s[S_HOST] != cause['host']
            or (err is None and s[S_ST] != 'error')
        ):
            continue
        err = err or {}
        if (err.get('cls') or 'error') != cause['cls'] or (
            err.get('msg') or ''
        ) != cause['msg']:
            continue
        key = (s[S_START] + (s[S_DUR] or 0), s[S_START])
        if best is None or key > best[0]:
            best = (key, sid)
    return None if best is None else best[1]


# -- text and HTML ------------------------------------------------------------

# how a recovered error was recovered (requests.Fates), as printed
RECOVERED_BY = (
    ('db_retry', 'db retry'),
    ('rescheduled', 'rescheduled'),
    ('succeeded', 'succeeded'),
)
FAILED_STATES = ('compute_failure', 'scheduling_failure', 'api_failure')


def text_lines(report: dict) -> list:
    """The text report's failure table, final causes and DB retries."""
    out: list = []
    out.extend(fmt.title('Failures (where raised, messages normalised)'))
    out.extend(views.marked_lines(report))
    failures = report['failures']
    if not failures:
        out.append('none')
    else:
        messages = fmt.clip_distinct([f['message'] for f in failures], 70)
        rows = [
            (
                f.get('operation', '-'),
                f['component'],
                f['ev'],
                f['cls'].rsplit('.', 1)[-1],
                f['count'],
                f.get('final', '-'),
                f.get('recovered', '-'),
                recovered_how(f),
                message,
            )
            for f, message in zip(failures, messages, strict=True)
        ]
        out.extend(
            fmt.table(
                [
                    'operation',
                    'component',
                    'event',
                    'error',
                    'raised',
                    'final',
                    'recovered',
                    'how',
                    'message',
                ],
                rows,
                'llllrrrll',
            )
        )
        out.append('')
        out.extend(
            [
                'raised: times raised, each error once where it was raised '
                '(one can end several instances)',
                'final: of those, the final cause of an instance or request '
                '(boots: per instance below)',
                'recovered: retried by oslo.db, rescheduled to another host, '
                'or raised in an instance that still succeeded',
            ]
        )
        rest = sum(
            f['count'] - f['final'] - f['recovered']
            for f in failures
            if 'final' in f
        )
        if rest:
            out.append(
                '%d raised neither final nor recovered (in a '
                'request without an outcome, or one that another '
                'error ended)' % rest
            )
    out.extend(_final_causes(report))
    if report['retries']:
        out.append('')
        out.append('DB retries (oslo.db wrap_db_retry):')
        out.extend(
            fmt.table(
                ['function', 'cause', 'count'],
                [(r['func'], r['cls'], r['count']) for r in report['retries']],
                'llr',
            )
        )
    return out


def recovered_how(f: dict) -> str:
    """How the recovered errors of a failure row were recovered."""
    by = f.get('recovered_by') or {}
    return (
        ', '.join(label for key, label in RECOVERED_BY if by.get(key)) or '-'
    )


def final_cause_rows(summary: dict) -> list:
    """``(state, cause class, instances)`` of the boot instances that
    failed (``summary.causes``), with those of no cause recorded."""
    causes = summary.get('causes') or []
    rows = [
        (c['state'], c['cls'].rsplit('.', 1)[-1], c['count']) for c in causes
    ]
    states = summary.get('states') or {}
    for state in FAILED_STATES:
        missing = states.get(state, 0) - sum(
            c['count'] for c in causes if c['state'] == state
        )
        if missing > 0:
            rows.append((state, '(none recorded)', missing))
    return rows


def _final_causes(report: dict) -> list:
    rows = final_cause_rows(report['summary'])
    if not rows:
        return []
    out = ['']
    out.append(
        'final causes of the boot instances that failed (other '
        'operations: their sections):'
    )
    out.extend(fmt.table(['final state', 'cause', 'instances'], rows, 'llr'))
    return out


def _recovered(f: dict) -> str:
    """A failure row's recovered errors and how (``3 rescheduled``)."""
    n = f.get('recovered')
    if not n:
        return '-' if n is None else '0'
    return '%d %s' % (n, recovered_how(f))


def html_parts(report: dict) -> list:
    """The HTML report's failure table, final causes and DB retries."""
    table = fmt.html_table
    out: list = []
    out.append('<h2>Failures: where each error was raised</h2>')
    out.append(
        '<p class="note">One row per component, event, error '
        'class and message (numbers and ids in messages replaced '
        'by &lt;n&gt; and &lt;uuid&gt;).  raised: times raised '
        '(each error once, where raised; one error can end '
        'several instances); final: of those, the final cause of '
        'an instance or request; recovered: retried by oslo.db, '
        'rescheduled to another host, or in an instance that '
        'still succeeded.</p>'
    )
    if report['failures']:
        out.append(
            table(
                [
                    'operation',
                    'component',
                    'event',
                    'error',
                    'message',
                    'raised',
                    'final',
                    'recovered',
                    'e.g. request',
                ],
                [
                    (
                        f.get('operation', '-'),
                        f['component'],
                        f['ev'],
                        f['cls'],
                        f['message'],
                        f['count'],
                        f.get('final', '-'),
                        _recovered(f),
                        (f['requests'] or [''])[0],
                    )
                    for f in report['failures']
                ],
                left=(0, 1, 2, 3, 4, 7, 8),
            )
        )
    else:
        out.append('<p>none</p>')
    causes = final_cause_rows(report['summary'])
    if causes:
        out.append(
            '<p>Final causes of the boot instances that failed '
            '(other operations: their sections):</p>'
        )
        out.append(
            table(['final state', 'cause', 'instances'], causes, left=(0, 1))
        )
    if report['retries']:
        out.append(
            table(
                ['DB retry in', 'cause', 'count'],
                [(r['func'], r['cls'], r['count']) for r in report['retries']],
                left=(0, 1),
            )
        )
    return out
