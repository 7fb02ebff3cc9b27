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
"""Work versus wait: lock, DB pool and worker pool waits.

The runtime writes one ``X`` record per wait (``schema.WAIT_EVENTS``:
``lock.wait``, ``db.pool.wait``, ``pool.wait``) as a child of the span
that waited, so ``breakdown`` already takes the wait out of that span's
exclusive time and charges it to a ``wait.*`` component.  This module
says what was waited for, and where:

* per request (``of_request``, called by ``breakdown.summarise``): the
  wait inside each component, by thing waited for (lock name, database,
  pool), in total and on the critical path;
* over a run (``work_vs_wait``): per operation and component, the mean
  work (exclusive time) and the mean wait per thing waited for, in
  total and on the critical path, with request ids;
* every wait record, with or without a request (``WaitTable``, fed by
  the pipeline): the "top waits" table: count, total, p50/p95/max wait
  per lock (or database, or pool), and who held the lock longest
  (request, enclosing span, host).  Lock names that hold an instance
  uuid are one row (``{uuid}``, ``refresh_cache-{uuid}`` ...).  Memory
  per thing waited for is bounded: percentiles are exact up to
  ``EXACT_MAX`` waits, then read from a histogram of 2^(1/8) buckets
  (within 5 %).

The text, JSON and HTML writers show it with ``text_lines`` and
``html_section``.
"""

import math
import re
import typing

from instrument import schema

WAIT_EVENTS = schema.WAIT_EVENTS
# Positions in the span lists of ``requests`` (``breakdown.S_*``).
S_EV, S_HOST, S_SVC, S_PID, S_START, S_DUR, S_PARENT, S_ST, S_ERR, \
    S_ATTRS, S_INST = range(11)
# What a wait is named by, per kind.
NAME_KEYS = {'lock': schema.ATTR_LOCK, 'db_pool': schema.ATTR_DB,
             'pool': schema.ATTR_POOL}
# Per-request wait rows: (component that waited, kind, name, wait us,
# critical-path us).
W_IN, W_KIND, W_NAME, W_US, W_CP = range(5)

EXACT_MAX = 10000
HIST_STEPS = 8          # buckets per doubling
TOP = 20
KEEP_REQUESTS = 5


_UUID = re.compile(r'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
                   r'[0-9a-fA-F]{4}-[0-9a-fA-F]{12}')


def wait_name(kind: str, attrs: typing.Any) -> str:
    """What a wait record waited for; uuids in lock names become
    ``{uuid}`` (nova's per-instance locks: ``{uuid}``,
    ``refresh_cache-{uuid}``, ``{uuid}-events``), so that they add up
    to one row each and the table stays bounded."""
    if not isinstance(attrs, dict):
        return '?'
    name = attrs.get(NAME_KEYS.get(kind, ''))
    if not isinstance(name, str) or not name:
        return '?'
    if len(name) >= 36:
        name = _UUID.sub('{uuid}', name)
    return name


# -- per request -----------------------------------------------------------

def of_request(spans: dict, names: dict, cp: dict,
               critical: typing.AbstractSet) -> tuple:
    """The waits of one request: rows ``(component, kind, name, us,
    critical us)`` summed per (component, kind, name).

    ``names`` are the components of the spans (``breakdown``), ``cp``
    the critical-path time per component, ``critical`` the span ids on
    the critical path.  A wait's critical-path time is its component's
    (``wait.lock`` ...) shared among the waits on the path in proportion
    to their durations.
    """
    rows = {}
    on_path = {}
    for sid, s in spans.items():
        kind = WAIT_EVENTS.get(s[S_EV])
        if kind is None:
            continue
        dur = s[S_DUR] or 0
        parent = spans.get(s[S_PARENT])
        where = names.get(s[S_PARENT]) if parent is not None else None
        if where is None:
            attrs = s[S_ATTRS]
            where = (attrs.get(schema.ATTR_CALL) if isinstance(attrs, dict)
                     else None) or s[S_SVC]
            where = schema.EVENTS.get(where) or where
        key = (where, kind, wait_name(kind, s[S_ATTRS]))
        row = rows.get(key)
        if row is None:
            row = rows[key] = [0, 0.0]
        row[0] += dur
        if sid in critical and dur:
            comp = names.get(sid)
            on_path.setdefault(comp, []).append((key, dur))
    for comp, items in on_path.items():
        total = sum(d for _k, d in items)
        charged = cp.get(comp, 0)
        for key, dur in items:
            rows[key][1] += charged * dur / total
    return tuple((k[0], k[1], k[2], v[0], int(round(v[1])))
                 for k, v in rows.items())


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
                a = acc[key] = {'work': 0, 'cp_work': 0, 'seen': set(),
                                'waits': {}}
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
            waits.append({'kind': wkind, 'name': name, 'mean_us': us / n,
                          'critical_mean_us': cp_us / n,
                          'requests': [r for _u, r in
                                       reqs[:KEEP_REQUESTS]]})
        waits.sort(key=lambda w: -w['mean_us'])
        wait_us = sum(w['mean_us'] for w in waits)
        cp_wait = sum(w['critical_mean_us'] for w in waits)
        work = a['work'] / n
        cp_work = a['cp_work'] / n
        out.append({
            'op': kind, 'component': where, 'requests': n,
            'waited': len(a['seen']),
            'work_mean_us': work, 'wait_mean_us': wait_us,
            'wait_share': wait_us / (work + wait_us)
            if work + wait_us else None,
            'critical_work_mean_us': cp_work,
            'critical_wait_mean_us': cp_wait,
            'waits': waits})
    out.sort(key=lambda r: (r['op'], -r['wait_mean_us']))
    return out


# -- every wait record -----------------------------------------------------

def _bucket(us: int) -> int:
    return int(math.log2(us + 1) * HIST_STEPS)


def _bucket_value(b: int) -> float:
    # geometric middle of the bucket
    return 2 ** ((b + 0.5) / HIST_STEPS) - 1


class _Stat:
    __slots__ = ('count', 'errors', 'total', 'max', 'max_req', 'values',
                 'hist', 'held_max', 'holder', 'held_total')

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.total = 0
        self.max = -1
        self.max_req = None
        self.values: list | None = []
        self.hist: dict = {}
        self.held_max = -1
        self.holder = None
        self.held_total = 0

    def merge(self, other: '_Stat') -> None:
        self.count += other.count
        self.errors += other.errors
        self.total += other.total
        if other.max > self.max:
            self.max, self.max_req = other.max, other.max_req
        if self.values is not None and other.values is not None and \
                len(self.values) + len(other.values) <= EXACT_MAX:
            self.values.extend(other.values)
        else:
            self.values = None
        for b, n in other.hist.items():
            self.hist[b] = self.hist.get(b, 0) + n
        if other.held_max > self.held_max:
            self.held_max, self.holder = other.held_max, other.holder
        self.held_total += other.held_total

    def percentile(self, p: float) -> float | None:
        if not self.count:
            return None
        if self.values is not None:
            ordered = sorted(self.values)
            rank = max(0, math.ceil(p / 100.0 * len(ordered)) - 1)
            return float(ordered[rank])
        want = max(1, math.ceil(p / 100.0 * self.count))
        seen = 0
        for b in sorted(self.hist):
            seen += self.hist[b]
            if seen >= want:
                return min(_bucket_value(b), float(self.max))
        return float(self.max)


class WaitTable:
    """Every wait record read (``add``), by kind and name; partial
    tables of pipeline workers ``merge``."""

    def __init__(self, since: int | None = None,
                 until: int | None = None) -> None:
        self.since = since
        self.until = until
        self.stats: dict = {}
        self.connects: dict = {}

    def add(self, rec: typing.Any, ts: int) -> None:
        """An ``X`` record of a wait event (``load``'s decoded record,
        ``ts`` on corrected clocks)."""
        if (self.since is not None and ts < self.since) or \
                (self.until is not None and ts >= self.until):
            return
        kind = WAIT_EVENTS.get(rec.ev)
        if kind is None:
            return
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        key = (kind, wait_name(kind, attrs))
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = _Stat()
        dur = rec.dur_us if isinstance(rec.dur_us, int) else 0
        st.count += 1
        if rec.st == schema.ST_ERROR:
            st.errors += 1
        st.total += dur
        if dur > st.max:
            st.max = dur
            st.max_req = rec.req
        if st.values is not None:
            if len(st.values) < EXACT_MAX:
                st.values.append(dur)
            else:
                st.values = None
        b = _bucket(dur)
        st.hist[b] = st.hist.get(b, 0) + 1
        held = attrs.get(schema.ATTR_HELD_US)
        if isinstance(held, int) and not isinstance(held, bool):
            st.held_total += held
            if held > st.held_max:
                st.held_max = held
                st.holder = (rec.req, attrs.get(schema.ATTR_CALL),
                             rec.host, rec.svc, ts)

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
            row = {'kind': kind, 'name': name, 'count': st.count,
                   'errors': st.errors, 'total_us': st.total,
                   'mean_us': st.total / st.count if st.count else None,
                   'p50_us': st.percentile(50), 'p95_us': st.percentile(95),
                   'max_us': st.max if st.count else None,
                   'longest_wait_request': st.max_req,
                   'exact': st.values is not None}
            if st.holder is not None:
                req, call, host, svc, ts = st.holder
                row['held_total_us'] = st.held_total
                row['longest_hold'] = {
                    'held_us': st.held_max, 'request': req, 'call': call,
                    'host': host, 'svc': svc, 'ts': ts,
                    # the holder named, when a periodic task's run
                    'periodic_task': schema.periodic_task_of(req)}
            rows.append(row)
        rows.sort(key=lambda r: (-r['total_us'], r['kind'], r['name']))
        return rows[:limit]

    def connections(self) -> list:
        """Connections made/closed/invalidated per database."""
        dbs = {}
        for (what, db), n in self.connects.items():
            dbs.setdefault(db, {'db': db, 'connect': 0, 'close': 0,
                                'invalidate': 0})[what] = n
        return [dbs[k] for k in sorted(dbs)]


def report(table: WaitTable, summaries: list) -> dict:
    """The ``waits`` section of the report dict."""
    return {'top': table.top(), 'work_vs_wait': work_vs_wait(summaries),
            'connections': table.connections(),
            'counted': 'wait records of every process; work vs wait per '
                       'request of each operation (means over all its '
                       'requests)'}


# -- writers -----------------------------------------------------------------

def _fmt(us) -> str:
    from instrument.analysis import report_text
    return report_text.fmt_us(us)


def _holder(hold: dict) -> str:
    """The span a lock was held longest in: the periodic task's name
    for a periodic run (``periodic.task ComputeManager.update_...``)."""
    task = hold.get('periodic_task')
    if task:
        return 'periodic.task %s' % task
    return hold.get('call') or '-'


def text_lines(section: dict | None) -> list:
    """The text report's lines for ``report['waits']``."""
    from instrument.analysis import report_text
    fmt = report_text.fmt_us
    if not section or not (section.get('top') or
                           section.get('work_vs_wait')):
        return []
    title = 'Waits: locks, DB pool, worker pools'
    out = ['', title, '=' * len(title)]
    top = section.get('top') or []
    if top:
        rows = []
        for r in top:
            hold = r.get('longest_hold') or {}
            holder = '-' if not hold else '%s %s %s@%s' % (
                fmt(hold.get('held_us')), _holder(hold),
                hold.get('svc') or '-', hold.get('host') or '-')
            rows.append((r['kind'], r['name'], r['count'],
                         fmt(r['total_us']), fmt(r['p50_us']),
                         fmt(r['p95_us']), fmt(r['max_us']), holder,
                         (hold.get('request') or '-') if hold else '-'))
        out.append('top waits (every wait record, with or without a '
                   'request):')
        out.extend(report_text.table(
            ['kind', 'name', 'count', 'total', 'p50', 'p95', 'max',
             'held longest (by)', 'held by request'], rows,
            'llrrrrrll'))
    wvw = section.get('work_vs_wait') or []
    if wvw:
        out.append('')
        out.append('work vs wait, mean per request of the operation '
                   '(crit. = on the critical path):')
        rows = []
        for r in wvw:
            names = ', '.join('%s %s %s' % (w['kind'], w['name'],
                                            fmt(w['mean_us']))
                              for w in r['waits'][:3])
            rows.append((r['op'], r['component'], r['waited'],
                         fmt(r['work_mean_us']), fmt(r['wait_mean_us']),
                         report_text.fmt_pct(r['wait_share']),
                         fmt(r['critical_work_mean_us']),
                         fmt(r['critical_wait_mean_us']), names))
        out.extend(report_text.table(
            ['op', 'component', 'waited', 'work', 'wait', 'wait %',
             'crit. work', 'crit. wait', 'waits'], rows, 'llrrrrrrl'))
    conns = section.get('connections') or []
    if conns:
        out.append('')
        out.append('DB connections: ' + '; '.join(
            '%s: %d made, %d closed, %d invalidated' % (
                c['db'] or '?', c['connect'], c['close'], c['invalidate'])
            for c in conns))
    return out


def html_section(section: dict | None,
                 table: typing.Callable[..., str]) -> str:
    """The HTML report's section for ``report['waits']``; ``table``
    (``report_html._table``) makes the tables, escaping every cell."""
    if not section or not (section.get('top') or
                           section.get('work_vs_wait')):
        return ''
    parts = ['<h2>Waits: locks, DB pool, worker pools</h2>']
    top = section.get('top') or []
    if top:
        rows = []
        for r in top:
            hold = r.get('longest_hold') or {}
            rows.append((
                r['kind'], r['name'], r['count'], _fmt(r['total_us']),
                _fmt(r['p50_us']), _fmt(r['p95_us']), _fmt(r['max_us']),
                _fmt(hold.get('held_us')) if hold else '-',
                _holder(hold) if hold else '-',
                '%s@%s' % (hold.get('svc'), hold.get('host')) if hold
                else '-', hold.get('request') or '-'))
        parts.append('<h3>Top waits</h3><p class="note">Every wait '
                     'record, with or without a request; "held longest": '
                     'the acquisition that held the lock longest, the '
                     'span it was taken in and its request.</p>')
        parts.append(table(['kind', 'name', 'count', 'total', 'p50', 'p95',
                            'max', 'held longest', 'in span', 'on',
                            'request'], rows, (0, 1, 8, 9, 10)))
    wvw = section.get('work_vs_wait') or []
    if wvw:
        rows2 = []
        for r in wvw:
            names = '; '.join('%s %s %s' % (w['kind'], w['name'],
                                            _fmt(w['mean_us']))
                              for w in r['waits'][:5])
            rows2.append((r['op'], r['component'], r['waited'],
                          _fmt(r['work_mean_us']), _fmt(r['wait_mean_us']),
                          _fmt(r['critical_work_mean_us']),
                          _fmt(r['critical_wait_mean_us']), names))
        parts.append('<h3>Work vs wait</h3><p class="note">Exclusive time '
                     'of each component that waited, mean per request of '
                     'the operation; crit. = on the critical path.</p>')
        parts.append(table(['op', 'component', 'requests that waited',
                            'work', 'wait', 'crit. work', 'crit. wait',
                            'waits'], rows2, (0, 1, 7)))
    return ''.join(parts)
