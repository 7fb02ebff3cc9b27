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
"""Per-process metrics folded by the writer thread from the records it
writes (``[instrument] metrics_dir``).

The buffer hands every batch it writes to ``Metrics.observe`` (in
``EventBuffer._write``, on the writer's thread, never on a calling
thread) and calls ``Metrics.tick`` at the end of each drain; ``tick``
writes the process's state file (``instrument.sinks.metrics``) at most
once per flush interval, and always at close.  Nothing here runs on an
instrumented call's path: the calling thread pays nothing new.

What is kept, per family (``FAMILIES``), is bounded: label values are
event names, exception class names, query ids (MD5 of the fingerprint,
never SQL text), database names, lock names with uuids and numbers
replaced, drop causes; each label set of a family is capped
(``max_series``): past it, the open-ended labels of a new label set
(event, error class, query class, lock, cause) are counted under the
value ``other``; database, kind and component are kept.  Never a
request id, an instance uuid or SQL text.

A forked child starts empty (its parent's counters stay in the parent's
file); the child writes its own file, named by its pid.
"""

import bisect
import os
import re
import weakref

from instrument import schema
from instrument.runtime import record

# Upper bounds of the latency histograms' buckets, seconds (1 ms to 10
# minutes; +Inf is implied).
LATENCY_BOUNDS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
# The same in microseconds (records' unit), for bisect.
_BOUNDS_US = tuple(int(round(b * 1000000)) for b in LATENCY_BOUNDS_S)
_NBUCKETS = len(_BOUNDS_US) + 1

# Label sets per family before the rest is counted as ``other``.
MAX_SERIES = 500
OTHER = 'other'

# Families: name -> (type, help, label names).  Counter names end in
# _total; histograms are in seconds.
SPAN = 'instrument_span_duration_seconds'
SPAN_ERRORS = 'instrument_span_errors_total'
SQL_STATEMENTS = 'instrument_sql_statements_total'
SQL_SECONDS = 'instrument_sql_duration_seconds_total'
SQL_ROWS = 'instrument_sql_rows_total'
SQL_ERRORS = 'instrument_sql_errors_total'
SQL_DEADLOCKS = 'instrument_sql_deadlocks_total'
DB_RETRIES = 'instrument_db_retries_total'
SQL_RETRIES = 'instrument_sql_retries_total'
LOCK_WAIT = 'instrument_lock_wait_seconds'
LOCK_HELD = 'instrument_lock_held_seconds_total'
POOL_WAIT = 'instrument_db_pool_wait_seconds'
POOL_TIMEOUTS = 'instrument_db_pool_timeouts_total'
DROPS = 'instrument_dropped_events_total'
BUF_FILL = 'instrument_buffer_events'
SERVICE_CALLS = 'instrument_service_request_duration_seconds'
PERIODIC = 'instrument_periodic_task_duration_seconds'
POINTS = 'instrument_points'

# The statuses of a patch point (instrument.patching.patcher's banner).
POINT_STATUSES = ('patched', 'pending', 'missing', 'failed')

FAMILIES = {
    SPAN: (
        'histogram',
        'Duration of instrumented calls (spans), by component and event.',
        ('component', 'event'),
    ),
    SPAN_ERRORS: (
        'counter',
        'Instrumented calls that ended with an '
        'exception, by component, event and exception class.',
        ('component', 'event', 'error'),
    ),
    SQL_STATEMENTS: (
        'counter',
        'SQL statements, by database, statement '
        'kind and query class (MD5 of the fingerprint; '
        '"other" past the cap).',
        ('db', 'kind', 'query'),
    ),
    SQL_SECONDS: (
        'counter',
        'Time spent in SQL statements, by database, kind and query class.',
        ('db', 'kind', 'query'),
    ),
    SQL_ROWS: (
        'counter',
        'Rows returned or changed by SQL statements '
        'whose driver gave a count.',
        ('db', 'kind', 'query'),
    ),
    SQL_ERRORS: (
        'counter',
        'SQL statements that failed, by database, '
        'query class and exception class.',
        ('db', 'query', 'error'),
    ),
    SQL_DEADLOCKS: (
        'counter',
        'SQL statements that failed with a '
        'deadlock, by database and query class.',
        ('db', 'query'),
    ),
    DB_RETRIES: (
        'counter',
        'oslo.db retries (wrap_db_retry), by the '
        'exception class that caused them and whether the '
        'retries were exhausted.',
        ('error', 'exhausted'),
    ),
    SQL_RETRIES: (
        'counter',
        'oslo.db retries (wrap_db_retry) caused by a '
        'failed SQL statement, by its database and query class, '
        'and whether the retries were exhausted.',
        ('db', 'query', 'exhausted'),
    ),
    LOCK_WAIT: (
        'histogram',
        'Time waited to acquire an oslo.concurrency '
        'lock, by lock name (uuids and numbers replaced).',
        ('lock',),
    ),
    LOCK_HELD: (
        'counter',
        'Time oslo.concurrency locks were held, by lock '
        'name (uuids and numbers replaced).',
        ('lock',),
    ),
    POOL_WAIT: (
        'histogram',
        'Time a DB connection pool checkout waited '
        'for a free connection, by database.',
        ('db',),
    ),
    POOL_TIMEOUTS: (
        'counter',
        'DB connection pool checkouts that timed out, by database.',
        ('db',),
    ),
    DROPS: (
        'counter',
        'Events the instrumentation could not record, by '
        'cause (buffer_full, a sink name, sql_queue ...).',
        ('cause',),
    ),
    SERVICE_CALLS: (
        'histogram',
        'Calls to other OpenStack services '
        'through keystoneauth, by service type, HTTP method, '
        'route (ids replaced) and status class (2xx ... or '
        'the failure: read_timeout ...).',
        ('service_type', 'method', 'route', 'status'),
    ),
    PERIODIC: (
        'histogram',
        'Runs of oslo.service periodic tasks, by task.',
        ('task',),
    ),
    BUF_FILL: (
        'gauge',
        'Events queued in the instrumentation\'s buffer '
        'at the last process sample.',
        (),
    ),
    POINTS: (
        'gauge',
        'Patch points of the process by status (patched; '
        'pending: module not imported yet, or patched per object; '
        'missing: not in the installed release; failed), from its '
        'process.start record and the later process.points '
        'changes.  instrument-report points names them.',
        ('status',),
    ),
}

# The labels whose values are open-ended (replaced by ``other`` past
# the cap); the others (database, kind, component) are few by nature
# and kept.
_OPEN_LABELS = frozenset(
    ('event', 'error', 'query', 'lock', 'cause', 'route', 'task')
)
_CAPPED = {
    name: frozenset(
        n for n, label in enumerate(spec[2]) if label in _OPEN_LABELS
    )
    for name, spec in FAMILIES.items()
}

# Records that are waits or SQL, not calls of their own.
_NOT_SPANS = frozenset(
    (
        schema.EV_SQL_QUERY,
        schema.EV_SQL_TXN,
        schema.EV_LOCK_WAIT,
        schema.EV_DB_POOL_WAIT,
        schema.EV_POOL_WAIT,
    )
)
# The drop-count record of a drop source, and the cause it counts.
_SOURCE_CAUSES = {schema.EV_SQL_DROPPED: 'sql_queue'}

_UUID = re.compile(
    r'[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?'
    r'[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}'
)
_NUMBER = re.compile(r'\d+')

_LIVE = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for metrics in list(_LIVE):
        metrics.reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


def lock_label(name) -> str:
    """A lock's name with uuids and numbers replaced (``refresh_cache-
    <uuid>`` -> ``refresh_cache-{uuid}``): a bounded label."""
    if not isinstance(name, str):
        return OTHER
    return _NUMBER.sub('{n}', _UUID.sub('{uuid}', name))[:100]


def is_deadlock(cls) -> bool:
    """An exception class name that is a deadlock (oslo.db's DBDeadlock,
    a driver's error named so)."""
    return isinstance(cls, str) and 'deadlock' in cls.lower()


def bucket(dur_us: int) -> int:
    """Index of the histogram bucket of ``dur_us`` (``le`` inclusive)."""
    return bisect.bisect_left(_BOUNDS_US, dur_us)


class Metrics:
    """The aggregates of one process, fed batch by batch."""

    def __init__(
        self, writer=None, interval: float = 0.0, max_series: int = MAX_SERIES
    ) -> None:
        """``writer``: called with ``state()`` by ``tick`` (the state
        file, ``instrument.sinks.metrics.StateFile``); ``interval``:
        the least seconds between two writes; ``max_series``: label
        sets per family before ``other``."""
        self.writer = writer
        self.interval = interval
        self.max_series = max_series
        self.reset()
        _LIVE.add(self)

    def reset(self) -> None:
        """Start empty (at creation and in a forked child)."""
        # {family: {label tuple: value}}; histogram values are
        # [bucket counts..., sum seconds]
        self.families: dict = {name: {} for name in FAMILIES}
        # {point name: status}, of the start record and later changes
        self.points: dict = {}
        self._last_write: float | None = None
        self._changed = True

    # -- folding (writer thread) -------------------------------------------

    def _key(self, family: str, labels: tuple) -> tuple:
        series = self.families[family]
        if labels in series or len(series) < self.max_series:
            return labels
        capped = _CAPPED[family]
        return tuple(
            OTHER if n in capped else value for n, value in enumerate(labels)
        )

    def _add(self, family: str, labels: tuple, value) -> None:
        series = self.families[family]
        key = self._key(family, labels)
        series[key] = series.get(key, 0) + value

    def _hist(self, family: str, labels: tuple) -> list:
        series = self.families[family]
        key = self._key(family, labels)
        hist = series.get(key)
        if hist is None:
            # bucket counts, then the sum in microseconds
            hist = series[key] = [0] * (_NBUCKETS + 1)
        return hist

    def _observe(self, family: str, labels: tuple, dur_us) -> None:
        hist = self._hist(family, labels)
        dur_us = dur_us or 0
        hist[bisect.bisect_left(_BOUNDS_US, dur_us)] += 1
        hist[-1] += dur_us

    def observe(
        self,
        batch,
        complete=schema.PH_COMPLETE,
        not_spans=_NOT_SPANS,
        bounds=_BOUNDS_US,
        where=bisect.bisect_left,
        extra=None,
    ) -> None:
        """Fold the records of ``batch`` (event tuples as the sinks get
        them; ``B`` snapshots are skipped: a span counts when it ends).
        Spans, the bulk of them, take the short way.  The state counts
        as changed (``tick`` writes it) only when a value did: a
        ``process.sample`` whose buffer fill is the one already kept,
        an unchanged drop count, a record no family folds, change
        nothing (an idle process's samples do not rewrite its file)."""
        spans = self.families[SPAN]
        extra = _EXTRA if extra is None else extra
        changed = False
        for rec in batch:
            ph = rec[0]
            if ph == complete:
                changed = True
                ev = rec[6]
                if ev in not_spans:
                    self._complete(rec)
                    continue
                labels = (rec[4], ev)
                hist = spans.get(labels)
                if hist is None:
                    hist = self._hist(SPAN, labels)
                dur = rec[2] or 0
                hist[where(bounds, dur)] += 1
                hist[-1] += dur
                if rec[13] is not None:
                    self._add(SPAN_ERRORS, labels + (rec[13][0],), 1)
                if ev in extra:
                    extra[ev](self, rec)
            elif ph == schema.PH_COUNTER:
                if self._counter(rec):
                    changed = True
            elif ph == schema.PH_META:
                if self._meta(rec):
                    changed = True
            elif (
                ph == schema.PH_INSTANT
                and rec[record.I_EV] == schema.EV_DB_RETRY
            ):
                changed = True
                attrs = rec[record.I_ATTRS] or {}
                exhausted = (
                    'true' if attrs.get(schema.ATTR_EXHAUSTED) else 'false'
                )
                self._add(
                    DB_RETRIES,
                    (attrs.get(schema.ATTR_CLS) or '', exhausted),
                    1,
                )
                query = attrs.get(schema.ATTR_FP)
                if query:
                    self._add(
                        SQL_RETRIES,
                        (
                            str(attrs.get(schema.ATTR_DB) or ''),
                            str(query),
                            exhausted,
                        ),
                        1,
                    )
        if changed:
            self._changed = True

    def _complete(self, rec) -> None:
        ev = rec[record.I_EV]
        attrs = rec[record.I_ATTRS] or {}
        err = rec[record.I_ERR]
        if ev == schema.EV_SQL_QUERY:
            self._statement(
                attrs,
                1,
                rec[record.I_DUR] or 0,
                attrs.get(schema.ATTR_ROWS),
                err,
            )
        elif ev == schema.EV_SQL_TXN:
            # the round trips a transaction's record carries: counted
            # as the sql.query records they stand for
            if schema.ATTR_END in attrs or schema.ATTR_RESET in attrs:
                for _ts, dur, qattrs in schema.folded(
                    rec[record.I_TS], attrs, None
                ):
                    self._statement(qattrs, 1, dur, None, None)
        elif ev == schema.EV_LOCK_WAIT:
            lock = lock_label(attrs.get(schema.ATTR_LOCK))
            self._observe(LOCK_WAIT, (lock,), rec[record.I_DUR])
            held = attrs.get(schema.ATTR_HELD_US)
            if held:
                self._add(LOCK_HELD, (lock,), held / 1000000)
        elif ev == schema.EV_DB_POOL_WAIT:
            db = str(attrs.get(schema.ATTR_DB) or '')
            self._observe(POOL_WAIT, (db,), rec[record.I_DUR])
            if err is not None:
                self._add(POOL_TIMEOUTS, (db,), 1)

    def _service_call(self, rec) -> None:
        attrs = rec[record.I_ATTRS] or {}
        status = attrs.get(schema.ATTR_STATUS)
        if status.__class__ is int:
            status = '%dxx' % (status // 100)
        else:
            status = attrs.get(schema.ATTR_FAILURE) or (
                'error' if rec[record.I_ERR] is not None else ''
            )
        self._observe(
            SERVICE_CALLS,
            (
                attrs.get(schema.ATTR_SERVICE_TYPE) or '',
                attrs.get(schema.ATTR_METHOD) or '',
                attrs.get(schema.ATTR_ROUTE) or '',
                status,
            ),
            rec[record.I_DUR],
        )

    def _periodic(self, rec) -> None:
        attrs = rec[record.I_ATTRS] or {}
        self._observe(
            PERIODIC, (attrs.get(schema.ATTR_TASK) or '',), rec[record.I_DUR]
        )

    def _statement(self, attrs, count, dur_us, rows, err) -> None:
        db = str(attrs.get(schema.ATTR_DB) or '')
        kind = str(attrs.get(schema.ATTR_KIND) or '')
        query = str(attrs.get(schema.ATTR_FP) or '')
        labels = (db, kind, query)
        self._add(SQL_STATEMENTS, labels, count)
        self._add(SQL_SECONDS, labels, dur_us / 1000000)
        if rows is not None and rows.__class__ is int and rows >= 0:
            self._add(SQL_ROWS, labels, rows)
        if err is not None:
            self._add(SQL_ERRORS, (db, query, str(err[0])), 1)
            if is_deadlock(err[0]):
                self._add(SQL_DEADLOCKS, (db, query), 1)

    def _counter(self, rec) -> bool:
        """Fold a ``C`` record; True when a value changed."""
        ev = rec[record.I_EV]
        attrs = rec[record.I_ATTRS] or {}
        if ev == schema.EV_SQL_AGG:
            db = str(attrs.get(schema.ATTR_DB) or '')
            kind = str(attrs.get(schema.ATTR_KIND) or '')
            query = str(attrs.get(schema.ATTR_FP) or '')
            labels = (db, kind, query)
            self._add(
                SQL_STATEMENTS, labels, attrs.get(schema.ATTR_COUNT) or 0
            )
            self._add(
                SQL_SECONDS,
                labels,
                (attrs.get(schema.ATTR_SUM_US) or 0) / 1000000,
            )
            if attrs.get(schema.ATTR_ROWS_KNOWN):
                self._add(SQL_ROWS, labels, attrs.get(schema.ATTR_ROWS) or 0)
            errors = attrs.get(schema.ATTR_ERRORS) or 0
            if errors:  # aggregated failures carry no class
                self._add(SQL_ERRORS, (db, query, OTHER), errors)
            return True
        if ev == schema.EV_SINK_DROPS:
            # cumulative counts per cause: set, not added
            changed = False
            for cause, count in attrs.items():
                if self._set(DROPS, (str(cause),), count):
                    changed = True
            return changed
        if ev in _SOURCE_CAUSES:
            return self._set(
                DROPS, (_SOURCE_CAUSES[ev],), attrs.get(schema.ATTR_COUNT) or 0
            )
        if ev == schema.EV_PROCESS_SAMPLE:
            fill = attrs.get(schema.ATTR_BUF_FILL)
            gauge = self.families[BUF_FILL]
            if fill is not None and gauge.get(()) != fill:
                gauge[()] = fill
                return True
        return False

    def _meta(self, rec) -> bool:
        """``process.start`` (every point by status: the start-up
        banner) and ``process.points`` (the points whose status changed
        since): the ``POINTS`` gauge.  True when it was folded."""
        ev = rec[record.I_EV]
        if ev == schema.EV_PROCESS_START:
            banner = (rec[record.I_ATTRS] or {}).get(schema.ATTR_POINTS)
            if not isinstance(banner, dict):
                return False
            self.points = {}
        elif ev == schema.EV_PROCESS_POINTS:
            banner = rec[record.I_ATTRS] or {}
        else:
            return False
        for status, names in banner.items():
            if status not in POINT_STATUSES or not isinstance(names, list):
                continue
            for name in names:
                # a failed point's name carries its reason: "name (...)"
                self.points[str(name).split(' (', 1)[0]] = status
        counts = dict.fromkeys(POINT_STATUSES, 0)
        for status in self.points.values():
            counts[status] += 1
        self.families[POINTS] = {
            (status,): count for status, count in counts.items()
        }
        return True

    def _set(self, family: str, labels: tuple, value) -> bool:
        """Set a series' value; True when it changed."""
        series = self.families[family]
        key = self._key(family, labels)
        if isinstance(value, (int, float)) and series.get(key) != value:
            series[key] = value
            return True
        return False

    # -- output ------------------------------------------------------------

    def state(self) -> dict:
        """The families as JSON-able data: ``{family: [[labels...,
        value], ...]}`` (a histogram's value: its bucket counts, not
        cumulative, then the sum in seconds); label values as strings,
        None as empty."""
        out = {}
        for name, series in self.families.items():
            if not series:
                continue
            rows = out[name] = []
            for labels, value in series.items():
                row = ['' if v is None else str(v) for v in labels]
                if isinstance(value, list):
                    value = value[:-1] + [value[-1] / 1000000]
                row.append(value)
                rows.append(row)
        return out

    def tick(self, now: float, final: bool = False) -> bool:
        """From the writer, after a drain: write the state when it
        changed and ``interval`` seconds went by since the last write
        (always when ``final``).  True when it was written."""
        if self.writer is None or not (self._changed or final):
            return False
        last = self._last_write
        if not final and last is not None and now - last < self.interval:
            return False
        self._last_write = now
        self._changed = False
        self.writer(self.state(), final)
        return True


# Spans that feed a family of their own too (by their attrs).
_EXTRA = {
    schema.EV_KSA_REQUEST: Metrics._service_call,
    schema.EV_PERIODIC_TASK: Metrics._periodic,
}
