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
"""A pt-query-digest style profile of the SQL statements.

Statements are kept as statistics per fine class ``(query id, service,
database, enclosing call, kind)``; ``--group-by`` merges fine classes at
report time, so any grouping costs nothing more while reading.  The
kind tells why a statement was sent: its verb (``SELECT``...), or
``POOL_RESET`` (the pool's reset-on-return ROLLBACK) and ``CONNECT``
(a new connection's set-up): a class counts every statement of its
fingerprint, as the server's slow log does, and its ``kinds`` say how
many were which; ``--group-by kind`` shows them apart.  A class
holds count, total, sum of squares (standard deviation), min, max, rows
(and how many statements had a row count: sqlite's driver gives none
for a SELECT, and an unknown count is never shown as zero), errors,
first/last time and a log-scale histogram of 50 buckets per
decade (4.7 % wide, like pt-query-digest's 5 % buckets) from which the
median and 95th percentile are read.

``sql.query`` records (statements written one by one) and ``sql.agg``
counters (fast statements aggregated by the runtime: count, sum, min,
max, sum of squares, decade histogram) add to the same classes; for the
latter the percentile estimate uses the decade bucket's centre, clamped
to the record's min and max.  The query id is the MD5 of the
fingerprint (32 hex digits); the fingerprint text comes from the
``sql.fingerprint`` records.
"""

import math
import re
import typing

from instrument import schema

PER_DECADE = 50
# pt-query-digest's distribution rows: 1us 10us 100us 1ms 10ms 100ms 1s 10s+
DECADES = schema.SQL_DECADE_LABELS
GROUPS = ('fingerprint', 'service', 'database', 'call', 'kind')
ORDERS = ('sum', 'count', 'max', 'avg', 'p95', 'rows', 'errors')
_ORDER_ALIASES = {
    'query_time:sum': 'sum',
    'query_time:max': 'max',
    'query_time:avg': 'avg',
    'query_time:cnt': 'count',
    'rows_sent:sum': 'rows',
    'time': 'sum',
    'calls': 'count',
}
_ITEM = re.compile(r'\b(?:from|into|update|join|table)\s+`?([\w.]+)', re.I)
_log10 = math.log10

# positions in a class's statistics list
# (C_ROWS_N: statements whose row count is known, see ``add``)
(
    C_COUNT,
    C_SUM,
    C_SUMSQ,
    C_MIN,
    C_MAX,
    C_ROWS,
    C_ERRORS,
    C_HIST,
    C_FIRST,
    C_LAST,
    C_AGG,
    C_ROWS_N,
) = range(12)


def _new(ts: int) -> list:
    return [0, 0, 0, float('inf'), 0, 0, 0, {}, ts, ts, 0, 0]


def bucket(us: float) -> int:
    return int(_log10(us) * PER_DECADE) if us >= 1 else 0


# bucket(us) of durations below 32 ms, looked up instead of computed
_BUCKETS = [bucket(us) for us in range(1 << 15)]
_NBUCKETS = len(_BUCKETS)

# Where the statements of each bucket of a sql.agg histogram are put:
# bucket 0 ([0, 1 us)) at 0, bucket i at the middle (log scale) of the
# decade that starts at its lower bound.
_AGG_BUCKETS = (0,) + tuple(
    bucket(lower) + PER_DECADE // 2 for lower in schema.SQL_HIST_BOUNDS_US
)


def _agg_bucket(i: int) -> int:
    if i < len(_AGG_BUCKETS):
        return _AGG_BUCKETS[i]
    # a longer histogram (a newer runtime): decades go on
    return _AGG_BUCKETS[-1] + (i - len(_AGG_BUCKETS) + 1) * PER_DECADE


def normalise_order(order: str) -> str:
    key = order.strip().lower()
    key = _ORDER_ALIASES.get(key, key)
    if key not in ORDERS:
        raise ValueError(
            'unknown --order-by %r (one of %s)' % (order, ', '.join(ORDERS))
        )
    return key


class SqlDigest:
    """Statistics per statement class."""

    def __init__(
        self,
        since: typing.Optional[int] = None,
        until: typing.Optional[int] = None,
    ) -> None:
        self.since = since
        self.until = until
        self.classes = {}
        # fp: (fingerprint text, kind)
        self.texts = {}
        self.kinds = {}
        self.filtered = 0

    # -- ingest (hot) ------------------------------------------------------

    def add(
        self,
        ts: int,
        dur: int,
        fp: typing.Optional[str],
        svc: str,
        db: typing.Optional[str],
        call: typing.Optional[str],
        rows: typing.Optional[int],
        error: bool,
        kind: typing.Optional[str] = None,
    ) -> None:
        """Count one statement of ``dur`` us that started at ``ts``."""
        if (
            self.since is not None
            and ts < self.since
            or self.until is not None
            and ts >= self.until
        ):
            self.filtered += 1
            return
        key = (fp, svc, db, call, kind)
        s = self.classes.get(key)
        if s is None:
            s = self.classes[key] = _new(ts)
        s[0] += 1
        s[1] += dur
        s[2] += dur * dur
        if dur < s[3]:
            s[3] = dur
        if dur > s[4]:
            s[4] = dur
        if rows is not None:
            # None: the driver did not say (sqlite's SELECTs); never
            # counted as zero rows
            s[11] += 1
            if rows > 0:
                s[5] += rows
        if error:
            s[6] += 1
        h = s[7]
        if 0 <= dur < _NBUCKETS:
            b = _BUCKETS[dur]
        else:
            b = int(_log10(dur) * PER_DECADE) if dur >= 1 else 0
        h[b] = h.get(b, 0) + 1
        if ts < s[8]:
            s[8] = ts
        elif ts > s[9]:
            s[9] = ts

    def add_agg(self, ts: int, svc: str, attrs: dict) -> None:
        """One ``sql.agg`` counter record."""
        count = int(attrs.get(schema.ATTR_COUNT) or 0)
        if (
            self.since is not None
            and ts < self.since
            or self.until is not None
            and ts >= self.until
        ):
            # statements outside --since/--until, as for ``add``
            self.filtered += max(count, 0)
            return
        if count <= 0:
            return
        key = (
            attrs.get(schema.ATTR_FP),
            svc,
            attrs.get(schema.ATTR_DB),
            attrs.get(schema.ATTR_CALL),
            attrs.get(schema.ATTR_KIND),
        )
        s = self.classes.get(key)
        if s is None:
            s = self.classes[key] = _new(ts)
        lo = int(attrs.get(schema.ATTR_MIN_US) or 0)
        hi = int(attrs.get(schema.ATTR_MAX_US) or 0)
        s[0] += count
        s[1] += int(attrs.get(schema.ATTR_SUM_US) or 0)
        s[2] += int(attrs.get(schema.ATTR_SUMSQ_US) or 0)
        s[3] = min(s[3], lo)
        s[4] = max(s[4], hi)
        rows = int(attrs.get(schema.ATTR_ROWS) or 0)
        s[5] += rows
        known = attrs.get(schema.ATTR_ROWS_KNOWN)
        if known is not None:
            s[11] += int(known)
        elif rows > 0:
            # before rows_known an aggregate did not say how many of its
            # statements had no row count: a sum of 0 may be "unknown"
            s[11] += count
        s[6] += int(attrs.get(schema.ATTR_ERRORS) or 0)
        s[8] = min(s[8], ts)
        s[9] = max(s[9], ts)
        s[10] += count
        hist = attrs.get(schema.ATTR_HIST) or []
        lo_b = bucket(lo) if lo else 0
        hi_b = bucket(hi) if hi else lo_b
        h = s[7]
        placed = 0
        for i, n in enumerate(hist):
            if not n:
                continue
            b = min(max(_agg_bucket(i), lo_b), hi_b)
            h[b] = h.get(b, 0) + n
            placed += n
        if placed < count:
            mean = int(attrs.get(schema.ATTR_SUM_US) or 0) / count
            b = bucket(mean) if mean >= 1 else 0
            h[b] = h.get(b, 0) + count - placed

    def fingerprint(
        self,
        fp: typing.Optional[str],
        text: typing.Optional[str],
        kind: typing.Optional[str],
    ) -> None:
        """Learn the text and kind of query id ``fp`` (first seen wins)."""
        if fp and fp not in self.texts:
            self.texts[fp] = text
            self.kinds[fp] = kind

    def merge(self, other: 'SqlDigest') -> None:
        for fp, text in other.texts.items():
            self.fingerprint(fp, text, other.kinds.get(fp))
        self.filtered += other.filtered
        for key, o in other.classes.items():
            s = self.classes.get(key)
            if s is None:
                self.classes[key] = [
                    o[0],
                    o[1],
                    o[2],
                    o[3],
                    o[4],
                    o[5],
                    o[6],
                    dict(o[7]),
                    o[8],
                    o[9],
                    o[10],
                    o[11],
                ]
                continue
            _combine(s, o)

    # -- report ------------------------------------------------------------

    def grouped(self, group_by: str = 'fingerprint') -> tuple:
        if group_by not in GROUPS:
            raise ValueError(
                'unknown --group-by %r (one of %s)'
                % (group_by, ', '.join(GROUPS))
            )
        pos = GROUPS.index(group_by)
        out = {}
        members = {}
        for key, s in self.classes.items():
            g = key[pos]
            cur = out.get(g)
            if cur is None:
                out[g] = [
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    s[4],
                    s[5],
                    s[6],
                    dict(s[7]),
                    s[8],
                    s[9],
                    s[10],
                    s[11],
                ]
            else:
                _combine(cur, s)
            members.setdefault(g, set()).add(key)
        return out, members

    def profile(
        self,
        group_by: str = 'fingerprint',
        order_by: str = 'sum',
        limit: int = 20,
    ) -> dict:
        """The profile table and one block per class, JSON-ready."""
        order = normalise_order(order_by)
        groups, members = self.grouped(group_by)
        total = sum(s[C_SUM] for s in groups.values()) or 1
        rows = []
        for g, s in groups.items():
            rows.append(self._block(g, s, members[g], group_by, total))
        rows.sort(key=lambda r: (-_order_value(r, order), str(r['id'])))
        all_count = sum(r['calls'] for r in rows)
        for rank, row in enumerate(rows, 1):
            row['rank'] = rank
            row['pct_calls'] = row['calls'] / all_count if all_count else 0
        shown = rows[:limit] if limit else rows
        rest = rows[len(shown) :]
        return {
            'group_by': group_by,
            'order_by': order,
            'limit': limit,
            'classes': len(rows),
            'calls': all_count,
            'total_us': sum(s[C_SUM] for s in groups.values()),
            'filtered_out': self.filtered,
            'rows': shown,
            'misc': {
                'classes': len(rest),
                'calls': sum(r['calls'] for r in rest),
                'total_us': sum(r['total_us'] for r in rest),
                'pct': sum(r['pct'] for r in rest),
            }
            if rest
            else None,
        }

    def _block(self, g, s, keys, group_by, total) -> dict:
        n = s[C_COUNT]
        mean = s[C_SUM] / n if n else 0.0
        var = max(s[C_SUMSQ] / n - mean * mean, 0.0) if n else 0.0
        std = math.sqrt(var)
        fps = sorted({k[0] for k in keys if k[0]})
        kinds = {}
        for k in keys:
            kind = k[4] or '?'
            kinds[kind] = kinds.get(kind, 0) + self.classes[k][C_COUNT]
        if group_by == 'fingerprint':
            text = self.texts.get(g)
            item = _item(self.kinds.get(g), text)
        elif group_by == 'kind':
            text = None
            item = '%s, %d quer%s' % (
                g or '?',
                len(fps),
                'y' if len(fps) == 1 else 'ies',
            )
        else:
            text = None
            item = '%d quer%s' % (len(fps), 'y' if len(fps) == 1 else 'ies')
        return {
            'id': g,
            'total_us': s[C_SUM],
            'pct': s[C_SUM] / total,
            'calls': n,
            'r_call_us': mean,
            # variance-to-mean ratio in seconds, as pt-query-digest
            'v_m': (var / 1e12) / (mean / 1e6) if mean else 0.0,
            'item': item,
            'fingerprint': text,
            'query_ids': fps,
            'services': sorted({k[1] for k in keys if k[1]}),
            'databases': sorted({k[2] for k in keys if k[2]}),
            'calls_from': sorted({k[3] for k in keys if k[3]}),
            'kinds': dict(sorted(kinds.items())),
            'min_us': s[C_MIN] if n else 0,
            'max_us': s[C_MAX],
            'avg_us': mean,
            'p95_us': percentile(s, 95),
            'median_us': percentile(s, 50),
            'stddev_us': std,
            # None when no statement of the class had a row count
            'rows': s[C_ROWS] if s[C_ROWS_N] else None,
            'rows_unknown': n - s[C_ROWS_N],
            'errors': s[C_ERRORS],
            'aggregated': s[C_AGG],
            'first_us': s[C_FIRST],
            'last_us': s[C_LAST],
            'histogram': decades(s[C_HIST]),
        }


def _order_value(row: dict, order: str) -> float:
    return {
        'sum': row['total_us'],
        'count': row['calls'],
        'max': row['max_us'],
        'avg': row['avg_us'],
        'p95': row['p95_us'],
        'rows': row['rows'] or 0,
        'errors': row['errors'],
    }[order]


def _combine(s: list, o: list) -> None:
    s[0] += o[0]
    s[1] += o[1]
    s[2] += o[2]
    s[3] = min(s[3], o[3])
    s[4] = max(s[4], o[4])
    s[5] += o[5]
    s[6] += o[6]
    h = s[7]
    for b, n in o[7].items():
        h[b] = h.get(b, 0) + n
    s[8] = min(s[8], o[8])
    s[9] = max(s[9], o[9])
    s[10] += o[10]
    s[11] += o[11]


def percentile(s: list, pct: float) -> float:
    """The ``pct`` percentile read from the class's histogram."""
    n = s[C_COUNT]
    if not n:
        return 0.0
    rank = pct / 100.0 * n
    seen = 0
    value = s[C_MAX]
    for b in sorted(s[C_HIST]):
        seen += s[C_HIST][b]
        if seen >= rank:
            value = 10 ** ((b + 0.5) / PER_DECADE)
            break
    return float(min(max(value, s[C_MIN]), s[C_MAX]))


def decades(hist: dict) -> list:
    """Counts per pt-query-digest distribution row (1us ... 10s+)."""
    out = [0] * len(DECADES)
    for b, n in hist.items():
        i = min(max(b // PER_DECADE, 0), len(DECADES) - 1)
        out[i] += n
    return out


def _item(kind, text) -> str:
    if not text:
        return (kind or 'SQL') + ' ?'
    match = _ITEM.search(text)
    verb = kind or text.split(None, 1)[0].upper()
    return '%s %s' % (verb, match.group(1)) if match else verb
