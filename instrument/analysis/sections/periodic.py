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
"""``periodic``: what each periodic task cost, the requests it held up.

Each run of an oslo.service periodic task is a ``periodic.task`` span
with a request id of its own, ``periodic-<task>-<hex>``
(``schema.periodic_req``), which its SQL statements, lock waits and
calls to other services inherit.  Pass 2 hands every record of
such an id here instead of to the request model: a periodic run is
never a user request (no operation, no state, no row in the requests
or operations tables).

``PeriodicTable`` rolls the records up per task name, streaming (memory
per task, not per run): runs, errors, duration percentiles (exact up
to ``durations.EXACT_MAX`` runs, then a histogram), SQL statements and
their time, and per lock the acquisitions, the time spent waiting for
it and the time it was held.  It also keeps, bounded, the intervals in
which a periodic run held a lock, and the lock waits of user requests
(at least ``MIN_WAIT_US`` long): ``report`` joins them, per lock and
process (a lock of oslo.concurrency is a process's), so that a request
that waited while a periodic task held the lock names that task as the
holder, with the time of its wait that the task's hold covered.

``text_lines`` and ``html_section`` render ``report['periodic']``.
"""

import bisect
import html
import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.model import durations
from instrument.analysis.model import spans as spans_mod
from instrument.analysis.model import waits as request_waits
from instrument.analysis.render import fmt
from instrument.analysis.sections import base

TASK_OF = schema.periodic_task_of
EV_TASK = schema.EV_PERIODIC_TASK
EV_LOCK = schema.EV_LOCK_WAIT
# A request's lock wait shorter than this is not looked at (an
# uncontended acquisition takes microseconds).
MIN_WAIT_US = 1000
# Lock holds of periodic runs, and request lock waits, kept for the
# holder join (each); more are counted as dropped.
MAX_INTERVALS = 200_000
# Request ids (or run ids) kept per row.
KEEP = 5
# Runs ("periodic-..." ids) whose periodic.task start was read but not
# yet its end, kept at most.
MAX_OPEN = 100_000


class _Task:
    """What the runs of one periodic task added up to."""

    __slots__ = (
        'durs',
        'svcs',
        'hosts',
        'sql',
        'sql_us',
        'sql_errors',
        'calls',
        'calls_us',
        'locks',
        'runs_seen',
    )

    def __init__(self) -> None:
        # durations of the ended runs (count, errors, percentiles)
        self.durs = durations.Durations()
        self.svcs: set = set()
        self.hosts: set = set()
        self.sql = 0
        self.sql_us = 0
        self.sql_errors = 0
        # calls to other services (ksa.request) made by the runs
        self.calls = 0
        self.calls_us = 0
        # lock name: [acquisitions, wait us, held us]
        self.locks: dict = {}
        # a few runs (every number traced to its records): the KEEP
        # first (start, run id), whatever the order of arrival
        self.runs_seen: list = []

    def merge(self, other: '_Task') -> None:
        self.durs.merge(other.durs)
        self.svcs |= other.svcs
        self.hosts |= other.hosts
        self.sql += other.sql
        self.sql_us += other.sql_us
        self.sql_errors += other.sql_errors
        self.calls += other.calls
        self.calls_us += other.calls_us
        for name, (n, w, h) in other.locks.items():
            mine = self.locks.setdefault(name, [0, 0, 0])
            mine[0] += n
            mine[1] += w
            mine[2] += h
        base.merge_best(self.runs_seen, other.runs_seen, KEEP)


def _int(value) -> int:
    return value if value.__class__ is int else 0


class PeriodicTable:
    """The records of periodic runs (``span``, ``sql``) and the lock
    waits of requests (``request_wait``) of a pass; partial tables of
    pipeline workers ``merge``."""

    def __init__(
        self, since: int | None = None, until: int | None = None
    ) -> None:
        self.since = since
        self.until = until
        self.tasks: dict = {}
        # span ids of runs started, not (yet) ended: task name
        self.open: dict = {}
        # records of periodic runs read
        self.records = 0
        # (lock, process, start, end, task, run id, host) of holds
        self.holds: list = []
        # (lock, process, start, end, request id) of request waits
        self.waits: list = []
        self.dropped = 0
        self._held: list | None = None

    def _task(self, req: str) -> _Task:
        name = TASK_OF(req) or '?'
        task = self.tasks.get(name)
        if task is None:
            task = self.tasks[name] = _Task()
        return task

    def _outside(self, ts: int) -> bool:
        return (self.since is not None and ts < self.since) or (
            self.until is not None and ts >= self.until
        )

    def span(
        self,
        rec: typing.Any,
        ts: int,
        complete: bool,
        process_of: typing.Callable,
    ) -> None:
        """A ``B`` or ``X`` record of a periodic run (any event: the
        task's span, a lock wait, a call to another service...);
        ``process_of(host, pid, ts)`` names the process of a lock."""
        if self._outside(ts):
            return
        self.records += 1
        req = rec.req
        ev = rec.ev
        if ev == EV_TASK:
            if not complete:
                if len(self.open) < MAX_OPEN:
                    self.open[rec.span] = TASK_OF(req) or '?'
                return
            self.open.pop(rec.span, None)
            task = self._task(req)
            task.durs.add(_int(rec.dur_us), rec.st == schema.ST_ERROR, req, ts)
            task.svcs.add(rec.svc)
            task.hosts.add(rec.host)
            base.keep_best(task.runs_seen, (ts, str(req)), KEEP)
            return
        if not complete:
            return
        task = self._task(req)
        if ev == EV_LOCK:
            attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
            name = request_waits.wait_name('lock', attrs)
            dur = _int(rec.dur_us)
            held = _int(attrs.get(schema.ATTR_HELD_US))
            row = task.locks.setdefault(name, [0, 0, 0])
            row[0] += 1
            row[1] += dur
            row[2] += held
            if held > 0 and rec.st != schema.ST_ERROR:
                if len(self.holds) < MAX_INTERVALS:
                    start = ts + dur
                    self.holds.append(
                        (
                            name,
                            process_of(rec.host, rec.pid, ts),
                            start,
                            start + held,
                            TASK_OF(req) or '?',
                            req,
                            rec.host,
                        )
                    )
                else:
                    self.dropped += 1
        elif ev == schema.EV_KSA_REQUEST:
            task.calls += 1
            task.calls_us += _int(rec.dur_us)

    def sql(self, rec: typing.Any, ts: int, dur: int, error: bool) -> None:
        """An ``sql.query`` record of a periodic run."""
        if self._outside(ts):
            return
        self.records += 1
        task = self._task(rec.req)
        task.sql += 1
        task.sql_us += _int(dur)
        if error:
            task.sql_errors += 1

    def request_wait(
        self, rec: typing.Any, ts: int, process_of: typing.Callable
    ) -> None:
        """A wait record of a user request (or of no request): its
        lock waits long enough to matter are kept for the holder
        join."""
        if rec.ev != EV_LOCK or rec.req is None or self._outside(ts):
            return
        dur = _int(rec.dur_us)
        if dur < MIN_WAIT_US:
            return
        if len(self.waits) >= MAX_INTERVALS:
            self.dropped += 1
            return
        attrs = rec.attrs if isinstance(rec.attrs, dict) else {}
        self.waits.append(
            (
                request_waits.wait_name('lock', attrs),
                process_of(rec.host, rec.pid, ts),
                ts,
                ts + dur,
                rec.req,
            )
        )

    def merge(self, other: 'PeriodicTable') -> None:
        for name, task in other.tasks.items():
            mine = self.tasks.get(name)
            if mine is None:
                self.tasks[name] = task
            else:
                mine.merge(task)
        self.open.update(other.open)
        self.records += other.records
        room = MAX_INTERVALS - len(self.holds)
        self.holds.extend(other.holds[:room])
        self.dropped += max(0, len(other.holds) - room)
        room = MAX_INTERVALS - len(self.waits)
        self.waits.extend(other.waits[:room])
        self.dropped += max(0, len(other.waits) - room)
        self.dropped += other.dropped

    # -- the holder join ---------------------------------------------------

    def held_up(self) -> list:
        """Per request lock wait that a periodic run's hold covered:
        ``(task, lock, request id, covered us, host)``, one per (wait,
        run); computed once, after the merge."""
        if self._held is None:
            self._held = self._join()
        return self._held

    def _join(self) -> list:
        by_lock: dict = {}
        for hold in self.holds:
            by_lock.setdefault((hold[0], hold[1]), []).append(hold)
        index = {}
        for key, holds in by_lock.items():
            holds.sort(key=lambda h: h[2])
            index[key] = ([h[2] for h in holds], holds)
        out = []
        for name, proc, ws, we, req in self.waits:
            found = index.get((name, proc))
            if found is None:
                continue
            starts, holds = found
            i = bisect.bisect_left(starts, we) - 1
            # holds of one lock do not overlap: walk back to the first
            # that ended before the wait began (a few steps at most)
            steps = 0
            while i >= 0 and steps < 64:
                _n, _p, hs, he, task, _run, host = holds[i]
                if he <= ws:
                    break
                covered = min(we, he) - max(ws, hs)
                if covered > 0:
                    out.append((task, name, req, covered, host))
                i -= 1
                steps += 1
        return out

    def annotate(self, rows: list) -> list:
        """The report's request rows, each held up by a periodic run
        with ``held_by_periodic``: ``[{task, lock, wait_us}]`` (the
        time of its waits on that lock the task's runs covered)."""
        held: dict = {}
        for task, lock, req, covered, _host in self.held_up():
            per = held.setdefault(req, {})
            per[(task, lock)] = per.get((task, lock), 0) + covered
        if not held:
            return rows
        for row in rows:
            per = held.get(row.get('req'))
            if per:
                row['held_by_periodic'] = [
                    {'task': task, 'lock': lock, 'wait_us': us}
                    for (task, lock), us in sorted(
                        per.items(), key=lambda kv: -kv[1]
                    )
                ]
        return rows

    # -- the report --------------------------------------------------------

    def report(self, summaries: typing.Iterable = ()) -> dict:
        """The ``periodic`` section of the report (empty without a
        periodic run)."""
        if not self.tasks and not self.open:
            return {}
        kinds = {s.req: s.kind for s in summaries}
        delayed: dict = {}
        for task, lock, req, covered, host in self.held_up():
            row = delayed.get((task, lock))
            if row is None:
                row = delayed[(task, lock)] = {
                    'task': task,
                    'lock': lock,
                    'waits': 0,
                    'requests': set(),
                    'wait_us': 0,
                    'max_us': 0,
                    'hosts': set(),
                    'operations': {},
                    'longest': [],
                }
            row['waits'] += 1
            row['wait_us'] += covered
            row['max_us'] = max(row['max_us'], covered)
            row['hosts'].add(host)
            if req not in row['requests']:
                row['requests'].add(req)
                kind = kinds.get(req, 'other')
                row['operations'][kind] = row['operations'].get(kind, 0) + 1
            row['longest'].append((covered, req))
        delayed_rows = []
        per_task: dict = {}
        for row in delayed.values():
            longest = sorted(row['longest'], reverse=True)
            examples = []
            for _us, req in longest:
                if req not in examples:
                    examples.append(req)
                if len(examples) >= KEEP:
                    break
            entry = per_task.setdefault(row['task'], [set(), 0])
            entry[0] |= row['requests']
            entry[1] += row['wait_us']
            delayed_rows.append(
                {
                    'task': row['task'],
                    'lock': row['lock'],
                    'hosts': sorted(h for h in row['hosts'] if h),
                    'requests': len(row['requests']),
                    'waits': row['waits'],
                    'wait_us': row['wait_us'],
                    'max_us': row['max_us'],
                    'operations': dict(sorted(row['operations'].items())),
                    'examples': examples,
                }
            )
        delayed_rows.sort(key=lambda r: (-r['wait_us'], r['task'], r['lock']))
        unfinished: dict = {}
        for name in self.open.values():
            unfinished[name] = unfinished.get(name, 0) + 1
        rows = []
        for name in sorted(set(self.tasks) | set(unfinished)):
            task = self.tasks.get(name) or _Task()
            st = task.durs
            reqs, wait_us = per_task.get(name, (set(), 0))
            locks = [
                {'lock': lock, 'acquisitions': n, 'wait_us': w, 'held_us': h}
                for lock, (n, w, h) in sorted(
                    task.locks.items(), key=lambda kv: -kv[1][2]
                )
            ]
            rows.append(
                {
                    'task': name,
                    'services': sorted(s for s in task.svcs if s),
                    'hosts': len(task.hosts),
                    'runs': st.count,
                    'errors': st.errors,
                    'unfinished': unfinished.get(name, 0),
                    'mean_us': st.total / st.count if st.count else None,
                    'p50_us': st.percentile(50),
                    'p95_us': st.percentile(95),
                    'max_us': st.max if st.count else None,
                    'total_us': st.total,
                    'longest_run': st.max_req,
                    'sql_count': task.sql,
                    'sql_us': task.sql_us,
                    'sql_errors': task.sql_errors,
                    'calls': task.calls,
                    'calls_us': task.calls_us,
                    'lock_wait_us': sum(x['wait_us'] for x in locks),
                    'lock_held_us': sum(x['held_us'] for x in locks),
                    'locks': locks,
                    'delayed_requests': len(reqs),
                    'delayed_wait_us': wait_us,
                    'runs_e_g': [run for _ts, run in task.runs_seen],
                }
            )
        rows.sort(key=lambda r: (-r['total_us'], r['task']))
        return {
            'tasks': rows,
            'delayed': delayed_rows,
            'records': self.records,
            'dropped': self.dropped,
            'counted': 'periodic.task runs (never requests) and the '
            'records of their request ids; delayed: lock '
            'waits of requests (at least %d us) covered by '
            'a periodic run\'s hold of that lock in the '
            'same process' % MIN_WAIT_US,
        }


class Periodic(base.Section):
    """``report['periodic']``: per periodic task, and the requests its
    runs held up; the runs' records are never a request's."""

    key = 'periodic'
    routes = (
        routes.Route(
            'X',
            None,
            (routes.PERIODIC,),
            'complete',
            exclude=spans_mod.NOT_SPANS,
        ),
        routes.Route('B', None, (routes.PERIODIC,), 'begin'),
        routes.Route(
            'X', frozenset((schema.EV_SQL_QUERY,)), (routes.PERIODIC,), 'sql'
        ),
        # the lock waits of requests, for the holder join
        routes.Route(
            'X', frozenset((EV_LOCK,)), (routes.REQUEST,), 'request_wait'
        ),
    )

    def __init__(self, ctx: base.Context) -> None:
        self.table = PeriodicTable(ctx.since, ctx.until)

    def complete(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.table.span(rec, ts, True, cursor.process_of)

    def begin(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.table.span(rec, ts, False, cursor.process_of)

    def sql(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.table.sql(rec, ts, rec.dur_us, rec.st == 'error')

    def request_wait(
        self, rec: typing.Any, ts: int, cursor: typing.Any
    ) -> None:
        self.table.request_wait(rec, ts, cursor.process_of)

    def merge(self, other: 'Periodic') -> None:
        self.table.merge(other.table)

    def annotate(self, rows: list) -> list:
        """The request rows, each held up by a periodic run with
        ``held_by_periodic`` (``PeriodicTable.annotate``)."""
        return self.table.annotate(rows)

    def report(self, view: base.View) -> dict:
        return self.table.report(view.summaries)

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report.get('periodic'))

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return [html_section(report.get('periodic'), fmt.html_table)]


# -- writers -----------------------------------------------------------------

TASK_HEADERS = [
    'periodic task',
    'runs',
    'err',
    'p50',
    'p95',
    'max',
    'SQL',
    'SQL time',
    'lock wait',
    'lock held',
    'locks',
    'requests held up',
]
DELAYED_HEADERS = [
    'periodic task (holder)',
    'lock',
    'requests',
    'waits',
    'waited',
    'max',
    'operations',
    'e.g.',
]


def _locks(row: dict, us: typing.Callable) -> str:
    return (
        ', '.join(
            '%s %dx held %s' % (x['lock'], x['acquisitions'], us(x['held_us']))
            for x in row['locks'][:3]
        )
        or '-'
    )


def _task_rows(section: dict, us: typing.Callable) -> list:
    rows = []
    for r in section.get('tasks') or ():
        rows.append(
            (
                r['task'],
                r['runs'],
                r['errors'],
                us(r['p50_us']),
                us(r['p95_us']),
                us(r['max_us']),
                r['sql_count'],
                us(r['sql_us']),
                us(r['lock_wait_us']),
                us(r['lock_held_us']),
                _locks(r, us),
                '%d (%s)' % (r['delayed_requests'], us(r['delayed_wait_us']))
                if r['delayed_requests']
                else '-',
            )
        )
    return rows


def _delayed_rows(section: dict, us: typing.Callable, keep: int = 1) -> list:
    return [
        (
            r['task'],
            r['lock'],
            r['requests'],
            r['waits'],
            us(r['wait_us']),
            us(r['max_us']),
            ', '.join('%s %d' % kv for kv in r['operations'].items()),
            ', '.join(r['examples'][:keep]) or '-',
        )
        for r in section.get('delayed') or ()
    ]


def _unfinished(section: dict) -> list:
    runs = [
        '%s %d' % (r['task'], r['unfinished'])
        for r in section.get('tasks') or ()
        if r['unfinished']
    ]
    if not runs:
        return []
    return [
        'runs started and not ended in the files (not in the figures '
        'above): ' + ', '.join(runs)
    ]


def text_lines(section: dict | None) -> list:
    """The text report's lines for ``report['periodic']``."""
    if not section or not section.get('tasks'):
        return []
    us = fmt.fmt_us
    title = 'Periodic tasks (not requests)'
    out = ['', title, '=' * len(title)]
    out.extend(
        fmt.table(TASK_HEADERS, _task_rows(section, us), 'lrrrrrrrrrll')
    )
    out.append(
        'SQL, locks: what the runs did under their own ids; '
        'requests held up: requests whose lock wait a run\'s hold '
        'covered (waited time covered)'
    )
    out.extend(_unfinished(section))
    if section.get('delayed'):
        out.append('')
        out.append(
            'requests that waited for a lock a periodic task held '
            '(the holder named):'
        )
        out.extend(
            fmt.table(DELAYED_HEADERS, _delayed_rows(section, us), 'llrrrrll')
        )
    return out


def held_notes(req: dict, esc: typing.Callable[[typing.Any], str]) -> list:
    """HTML notes for a request's timeline: the periodic tasks that
    held a lock it waited for (``held_by_periodic``)."""
    return [
        '<p class="note">waited %s for lock %s held by periodic task '
        '%s</p>'
        % (esc(fmt.fmt_us(h['wait_us'])), esc(h['lock']), esc(h['task']))
        for h in req.get('held_by_periodic') or ()
    ]


def html_section(
    section: dict | None, table: typing.Callable[..., str]
) -> str:
    """The HTML report's section for ``report['periodic']``; ``table``
    (``fmt.html_table``) makes the tables, escaping every cell."""
    if not section or not section.get('tasks'):
        return ''
    us = fmt.fmt_us
    parts = [
        '<h2>Periodic tasks</h2><p class="note">Each run of an '
        'oslo.service periodic task, with the SQL and the lock '
        'waits and holds made under its own id; never counted as a '
        'request.</p>',
        table(TASK_HEADERS, _task_rows(section, us), (0, 10, 11)),
    ]
    parts.extend(
        '<p class="note">%s</p>' % html.escape(line)
        for line in _unfinished(section)
    )
    if section.get('delayed'):
        parts.append(
            '<h3>Requests held up by a periodic task</h3>'
            '<p class="note">Lock waits of requests covered by '
            'a periodic run\'s hold of that lock in the same '
            'process: the periodic task is the holder; '
            '"waited": the time of the waits it covered.</p>'
        )
        parts.append(
            table(
                DELAYED_HEADERS, _delayed_rows(section, us, KEEP), (0, 1, 6, 7)
            )
        )
    return ''.join(parts)
