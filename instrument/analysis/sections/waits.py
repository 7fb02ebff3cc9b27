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
"""``waits``: work versus wait, and what was waited for.

The runtime writes one ``X`` record per wait (``schema.WAIT_EVENTS``:
``lock.wait``, ``db.pool.wait``, ``pool.wait``) as a child of the span
that waited; per request, what it waited for is ``model.waits``'
(``RequestSummary.waits``).  This section adds, over a run:

* per operation and component, the mean work (exclusive time) and the
  mean wait per thing waited for, in total and on the critical path,
  with request ids (``work_vs_wait``, from the finished requests);
* every wait record, with or without a request (``WaitTable``, fed by
  pass 2): the "top waits" table: count, total, p50/p95/max wait per
  lock (or database, or pool), and who held the lock longest (request,
  enclosing span, host).  Lock names that hold an instance uuid are
  one row (``{uuid}``, ``refresh_cache-{uuid}`` ...).  Memory per
  thing waited for is bounded (``model.durations``);
* the connections made, closed and invalidated per database
  (``db.pool.*`` instants).

The text and HTML forms show it with ``text_lines`` and
``html_section``.
"""

import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.model import durations
from instrument.analysis.model import waits as request_waits
from instrument.analysis.render import fmt
from instrument.analysis.render import views
from instrument.analysis.sections import base

WAIT_EVENTS = schema.WAIT_EVENTS
# Per-request wait rows (``model.waits``): (component that waited,
# kind, name, wait us, critical-path us).
W_IN = request_waits.W_IN
W_KIND = request_waits.W_KIND
W_NAME = request_waits.W_NAME
W_US = request_waits.W_US
W_CP = request_waits.W_CP
TOP = 20
KEEP_REQUESTS = 5
DB_POOL_INSTANTS = frozenset(
    (
        schema.EV_DB_POOL_CONNECT,
        schema.EV_DB_POOL_CLOSE,
        schema.EV_DB_POOL_INVALIDATE,
    )
)


def work_vs_wait(summaries: list) -> list:
    """Per operation and component that waited: mean work and mean wait
    (total and on the critical path) per request of the operation, the
    waits by name, and the requests that waited longest."""
    per_kind = {}
    for s in summaries:
        per_kind[s.kind] = per_kind.get(s.kind, 0) + 1
    acc: dict[tuple, dict[str, typing.Any]] = {}
    for s in summaries:
        rows = getattr(s, 'waits', None)
        if not rows:
            continue
        for row in rows:
            key = (s.kind, row[W_IN])
            a = acc.get(key)
            if a is None:
                a = acc[key] = {
                    'work': 0,
                    'cp_work': 0,
                    'seen': set(),
                    'waits': {},
                }
            a['seen'].add(s.req)
            w = a['waits'].get((row[W_KIND], row[W_NAME]))
            if w is None:
                w = a['waits'][(row[W_KIND], row[W_NAME])] = [0, 0, []]
            w[0] += row[W_US]
            w[1] += row[W_CP]
            w[2].append((row[W_US], s.req))
    # the work of those components, over every request of the operation
    wanted = {}
    for kind, where in acc:
        wanted.setdefault(kind, []).append(where)
    for s in summaries:
        where_list = wanted.get(s.kind)
        if not where_list:
            continue
        comp, cp = s.comp, s.cp
        for where in where_list:
            a = acc[(s.kind, where)]
            a['work'] += comp.get(where, 0)
            a['cp_work'] += cp.get(where, 0)
    out = []
    for (kind, where), a in acc.items():
        n = per_kind[kind]
        waits = []
        for (wkind, name), (us, cp_us, reqs) in a['waits'].items():
            reqs.sort(reverse=True)
            waits.append(
                {
                    'kind': wkind,
                    'name': name,
                    'mean_us': us / n,
                    'critical_mean_us': cp_us / n,
                    'requests': [r for _u, r in reqs[:KEEP_REQUESTS]],
                }
            )
        waits.sort(key=lambda w: -w['mean_us'])
        wait_us = sum(w['mean_us'] for w in waits)
        cp_wait = sum(w['critical_mean_us'] for w in waits)
        work = a['work'] / n
        cp_work = a['cp_work'] / n
        out.append(
            {
                'op': kind,
                'component': where,
                'requests': n,
                'waited': len(a['seen']),
                'work_mean_us': work,
                'wait_mean_us': wait_us,
                'wait_share': wait_us / (work + wait_us)
                if work + wait_us
                else None,
                'critical_work_mean_us': cp_work,
                'critical_wait_mean_us': cp_wait,
                'waits': waits,
            }
        )
    out.sort(key=lambda r: (r['op'], -r['wait_mean_us']))
    return out


# -- every wait record -----------------------------------------------------


class WaitTable:
    """Every wait record read (``add``), by kind and name; partial
    tables of pipeline workers ``merge``."""

    def __init__(
        self, since: int | None = None, until: int | None = None
    ) -> None:
        self.since = since
        self.until = until
        self.stats: dict = {}
        self.connects: dict = {}

    def add(self, rec: typing.Any, ts: int) -> None:
        """An ``X`` record of a wait event (``load``'s decoded record,
        ``ts`` on corrected clocks)."""
        if (self.since is not None and ts < self.since) or (
            self.until is not None and ts >= self.until
        ):
            return
        kind = WAIT_EVENTS.get(rec.ev)
        if kind is None:
            return
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        key = (kind, request_waits.wait_name(kind, attrs))
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = durations.Durations()
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        st.add(dur, rec.st == schema.ST_ERROR, rec.req, ts)
        held = attrs.get(schema.ATTR_HELD_US)
        if isinstance(held, int) and not isinstance(held, bool):
            st.held_total += held
            if held >= st.held_max:
                holder = (
                    rec.req,
                    attrs.get(schema.ATTR_CALL),
                    rec.host,
                    rec.svc,
                    ts,
                )
                # of equal holds, the first by (start, request id)
                if (
                    held > st.held_max
                    or st.holder is None
                    or durations.held_key(holder)
                    < durations.held_key(st.holder)
                ):
                    st.held_max = held
                    st.holder = holder

    def instant(self, rec: typing.Any) -> None:
        """A ``db.pool.connect``/``close``/``invalidate`` record."""
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        key = (rec.ev.rsplit('.', 1)[-1], attrs.get(schema.ATTR_DB) or '?')
        self.connects[key] = self.connects.get(key, 0) + 1

    def merge(self, other: 'WaitTable') -> None:
        for key, st in other.stats.items():
            mine = self.stats.get(key)
            if mine is None:
                self.stats[key] = st
            else:
                mine.merge(st)
        for key, n in other.connects.items():
            self.connects[key] = self.connects.get(key, 0) + n

    def top(self, limit: int = TOP) -> list:
        """The things waited for longest in total, with their stats."""
        rows = []
        for (kind, name), st in self.stats.items():
            row = {
                'kind': kind,
                'name': name,
                'count': st.count,
                'errors': st.errors,
                'total_us': st.total,
                'mean_us': st.total / st.count if st.count else None,
                'p50_us': st.percentile(50),
                'p95_us': st.percentile(95),
                'max_us': st.max if st.count else None,
                'longest_wait_request': st.max_req,
                'exact': st.values is not None,
            }
            if st.holder is not None:
                req, call, host, svc, ts = st.holder
                row['held_total_us'] = st.held_total
                row['longest_hold'] = {
                    'held_us': st.held_max,
                    'request': req,
                    'call': call,
                    'host': host,
                    'svc': svc,
                    'ts': ts,
                    # the holder named, when a periodic task's run
                    'periodic_task': schema.periodic_task_of(req),
                }
            rows.append(row)
        rows.sort(key=lambda r: (-r['total_us'], r['kind'], r['name']))
        return rows[:limit]

    def connections(self) -> list:
        """Connections made/closed/invalidated per database."""
        dbs = {}
        for (what, db), n in self.connects.items():
            dbs.setdefault(
                db, {'db': db, 'connect': 0, 'close': 0, 'invalidate': 0}
            )[what] = n
        return [dbs[k] for k in sorted(dbs)]


def report(table: WaitTable, summaries: list) -> dict:
    """The ``waits`` section of the report dict."""
    return {
        'top': table.top(),
        'work_vs_wait': work_vs_wait(summaries),
        'connections': table.connections(),
        'counted': 'wait records of every process; work vs wait per '
        'request of each operation (means over all its '
        'requests)',
    }


class Waits(base.Section):
    """``report['waits']``: the top waits, work vs wait, connections."""

    key = 'waits'
    routes = (
        routes.Route('X', frozenset(WAIT_EVENTS), routes.ALL, 'add'),
        routes.Route('I', DB_POOL_INSTANTS, routes.ALL, 'instant'),
    )

    def __init__(self, ctx: base.Context) -> None:
        self.table = WaitTable(ctx.since, ctx.until)

    def add(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.table.add(rec, ts)

    def instant(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.table.instant(rec)

    def merge(self, other: 'Waits') -> None:
        self.table.merge(other.table)

    def report(self, view: base.View) -> dict:
        return report(self.table, view.summaries)

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        lines = text_lines(report.get('waits'))
        if lines:
            lines[3:3] = views.setup_caveats(report)
        return lines

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        out = html_section(report.get('waits'), fmt.html_table)
        caveats = views.setup_caveats(report)
        if out and caveats:
            out = (
                ''.join(
                    '<p class="note"><b>%s</b></p>' % fmt.esc(c)
                    for c in caveats
                )
                + out
            )
        return [out]


# -- writers -----------------------------------------------------------------


def _holder(hold: dict) -> str:
    """The span a lock was held longest in: the periodic task's name
    for a periodic run (``periodic.task ComputeManager.update_...``)."""
    task = hold.get('periodic_task')
    if task:
        return 'periodic.task %s' % task
    return hold.get('call') or '-'


def text_lines(section: dict | None) -> list:
    """The text report's lines for ``report['waits']``."""
    us = fmt.fmt_us
    if not section or not (section.get('top') or section.get('work_vs_wait')):
        return []
    title = 'Waits: locks, DB pool, worker pools'
    out = ['', title, '=' * len(title)]
    top = section.get('top') or []
    if top:
        rows = []
        for r in top:
            hold = r.get('longest_hold') or {}
            holder = (
                '-'
                if not hold
                else '%s %s %s@%s'
                % (
                    us(hold.get('held_us')),
                    _holder(hold),
                    hold.get('svc') or '-',
                    hold.get('host') or '-',
                )
            )
            rows.append(
                (
                    r['kind'],
                    r['name'],
                    r['count'],
                    us(r['total_us']),
                    us(r['p50_us']),
                    us(r['p95_us']),
                    us(r['max_us']),
                    holder,
                    (hold.get('request') or '-') if hold else '-',
                )
            )
        out.append('top waits (every wait record, with or without a request):')
        out.extend(
            fmt.table(
                [
                    'kind',
                    'name',
                    'count',
                    'total',
                    'p50',
                    'p95',
                    'max',
                    'held longest (by)',
                    'held by request',
                ],
                rows,
                'llrrrrrll',
            )
        )
    wvw = section.get('work_vs_wait') or []
    if wvw:
        out.append('')
        out.append(
            'work vs wait, mean per request of the operation '
            '(crit. = on the critical path):'
        )
        rows = []
        for r in wvw:
            names = ', '.join(
                '%s %s %s' % (w['kind'], w['name'], us(w['mean_us']))
                for w in r['waits'][:3]
            )
            rows.append(
                (
                    r['op'],
                    r['component'],
                    r['waited'],
                    us(r['work_mean_us']),
                    us(r['wait_mean_us']),
                    fmt.fmt_pct(r['wait_share']),
                    us(r['critical_work_mean_us']),
                    us(r['critical_wait_mean_us']),
                    names,
                )
            )
        out.extend(
            fmt.table(
                [
                    'op',
                    'component',
                    'waited',
                    'work',
                    'wait',
                    'wait %',
                    'crit. work',
                    'crit. wait',
                    'waits',
                ],
                rows,
                'llrrrrrrl',
            )
        )
    conns = section.get('connections') or []
    if conns:
        out.append('')
        out.append(
            'DB connections: '
            + '; '.join(
                '%s: %d made, %d closed, %d invalidated'
                % (c['db'] or '?', c['connect'], c['close'], c['invalidate'])
                for c in conns
            )
        )
    return out


def html_section(
    section: dict | None, table: typing.Callable[..., str]
) -> str:
    """The HTML report's section for ``report['waits']``; ``table``
    (``fmt.html_table``) makes the tables, escaping every cell."""
    if not section or not (section.get('top') or section.get('work_vs_wait')):
        return ''
    us = fmt.fmt_us
    parts = ['<h2>Waits: locks, DB pool, worker pools</h2>']
    top = section.get('top') or []
    if top:
        rows = []
        for r in top:
            hold = r.get('longest_hold') or {}
            rows.append(
                (
                    r['kind'],
                    r['name'],
                    r['count'],
                    us(r['total_us']),
                    us(r['p50_us']),
                    us(r['p95_us']),
                    us(r['max_us']),
                    us(hold.get('held_us')) if hold else '-',
                    _holder(hold) if hold else '-',
                    '%s@%s' % (hold.get('svc'), hold.get('host'))
                    if hold
                    else '-',
                    hold.get('request') or '-',
                )
            )
        parts.append(
            '<h3>Top waits</h3><p class="note">Every wait '
            'record, with or without a request; "held longest": '
            'the acquisition that held the lock longest, the '
            'span it was taken in and its request.</p>'
        )
        parts.append(
            table(
                [
                    'kind',
                    'name',
                    'count',
                    'total',
                    'p50',
                    'p95',
                    'max',
                    'held longest',
                    'in span',
                    'on',
                    'request',
                ],
                rows,
                (0, 1, 8, 9, 10),
            )
        )
    wvw = section.get('work_vs_wait') or []
    if wvw:
        rows2 = []
        for r in wvw:
            names = '; '.join(
                '%s %s %s' % (w['kind'], w['name'], us(w['mean_us']))
                for w in r['waits'][:5]
            )
            rows2.append(
                (
                    r['op'],
                    r['component'],
                    r['waited'],
                    us(r['work_mean_us']),
                    us(r['wait_mean_us']),
                    us(r['critical_work_mean_us']),
                    us(r['critical_wait_mean_us']),
                    names,
                )
            )
        parts.append(
            '<h3>Work vs wait</h3><p class="note">Exclusive time '
            'of each component that waited, mean per request of '
            'the operation; crit. = on the critical path.</p>'
        )
        parts.append(
            table(
                [
                    'op',
                    'component',
                    'requests that waited',
                    'work',
                    'wait',
                    'crit. work',
                    'crit. wait',
                    'waits',
                ],
                rows2,
                (0, 1, 7),
            )
        )
    return ''.join(parts)
