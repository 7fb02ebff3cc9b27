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
"""``sql``: a pt-query-digest style profile of the SQL statements.

Every ``sql.query`` record (a statement written one by one), ``sql.agg``
counter (fast statements aggregated by the runtime) and
``sql.fingerprint`` record (the text of a query id) goes to the SQL
digest (``model.sqldigest``), whatever request, periodic task run or
none it belongs to; ``--since``/``--until`` keep the statements that
started in the window.  The report is its profile
(``--group-by``, ``--order-by``, ``--limit``) and the statements the
runtime dropped before they became records (``dropped``, the
``quality`` section's count).  The text form shows the profile and the
costliest classes' blocks; ``compare`` the top classes of either run.
"""

import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.model import significance
from instrument.analysis.model import sqldigest
from instrument.analysis.render import fmt
from instrument.analysis.render import views
from instrument.analysis.sections import base

# Statements sent for the pool or a new connection, not by a caller.
SIDE_KINDS = {'POOL_RESET', 'CONNECT'}


class Sql(base.Section):
    """``report['sql']``: the SQL profile."""

    key = 'sql'
    routes = (
        routes.Route(
            'X', frozenset((schema.EV_SQL_QUERY,)), routes.ALL, 'query'
        ),
        routes.Route('C', frozenset((schema.EV_SQL_AGG,)), routes.ALL, 'agg'),
        routes.Route(
            'M',
            frozenset((schema.EV_SQL_FINGERPRINT,)),
            routes.ALL,
            'fingerprint',
            shared=True,
        ),
    )

    def __init__(self, ctx: base.Context) -> None:
        self.digest = sqldigest.SqlDigest(ctx.since, ctx.until)
        # the processes that wrote statements (``quality``: the profile
        # may miss some when one of them lost records)
        self.writers: set = set()
        self._writer: typing.Any = None

    def query(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        """An ``sql.query`` record: one statement."""
        if cursor is not None and cursor.process is not self._writer:
            self._writer = cursor.process
            self.writers.add(self._writer.key)
        attrs = rec.attrs or {}
        self.digest.add(
            ts,
            rec.dur_us,
            attrs.get('fp'),
            rec.svc,
            attrs.get('db'),
            attrs.get('call'),
            attrs.get('rows'),
            rec.st == 'error',
            attrs.get('kind'),
        )

    def agg(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        """An ``sql.agg`` counter: statements the runtime aggregated."""
        if cursor is not None:
            self.writers.add(cursor.process.key)
        self.digest.add_agg(ts, rec.svc, rec.attrs or {})

    def fingerprint(
        self, rec: typing.Any, ts: int, cursor: typing.Any
    ) -> None:
        """A ``sql.fingerprint`` record: the text of a query id."""
        attrs = rec.attrs or {}
        self.digest.fingerprint(
            attrs.get('fp'), attrs.get('text'), attrs.get('kind')
        )

    def merge(self, other: 'Sql') -> None:
        self.digest.merge(other.digest)
        self.writers |= other.writers

    def report(self, view: base.View) -> dict:
        opts = view.opts
        return dict(
            self.digest.profile(opts.group_by, opts.order_by, opts.limit),
            dropped=view['quality']['sql_dropped'],
        )

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report, page.sql_blocks)

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return html_parts(report)

    @staticmethod
    def compare(a: dict, b: dict, how: base.Comparing) -> dict:
        """The top ``how.top`` classes of either run: calls and time per
        call in each, and the change."""
        top = how.top
        rows_a = {r['id']: r for r in a['sql']['rows']}
        rows_b = {r['id']: r for r in b['sql']['rows']}
        ids = [r['id'] for r in a['sql']['rows'][:top]]
        ids += [
            i
            for i in (r['id'] for r in b['sql']['rows'][:top])
            if i not in ids
        ]
        sql = []
        for qid in ids:
            ra, rb = rows_a.get(qid), rows_b.get(qid)
            item = (ra if ra is not None else rows_b[qid])['item']
            sql.append(
                {
                    'id': qid,
                    'item': item,
                    'calls_a': ra['calls'] if ra else 0,
                    'calls_b': rb['calls'] if rb else 0,
                    'r_call_a_us': ra['r_call_us'] if ra else None,
                    'r_call_b_us': rb['r_call_us'] if rb else None,
                    'total_a_us': ra['total_us'] if ra else 0,
                    'total_b_us': rb['total_us'] if rb else 0,
                    'change': significance.change(
                        ra['r_call_us'] if ra else None,
                        rb['r_call_us'] if rb else None,
                    ),
                }
            )
        return {'sql': sql}

    @staticmethod
    def compare_text(cmp: dict, reminder: list) -> list:
        out = ['Top SQL classes']
        out.extend(reminder)
        sql = [
            (
                r['id'],
                r['item'],
                r['calls_a'],
                r['calls_b'],
                fmt.fmt_us(r['r_call_a_us']),
                fmt.fmt_us(r['r_call_b_us']),
                fmt.fmt_change(r['change']),
            )
            for r in cmp['sql']
        ]
        out.extend(
            fmt.table(
                [
                    'Query ID',
                    'Item',
                    'calls A',
                    'calls B',
                    'R/Call A',
                    'R/Call B',
                    'change',
                ],
                sql,
                'llrrrrr',
            )
        )
        return out


def sql_dropped_text(sql: dict) -> str:
    """``, and N more dropped ...`` after the count of SQL statements
    profiled: those the runtime dropped before they became records
    (empty when none)."""
    dropped = sql.get('dropped') or 0
    if not dropped:
        return ''
    return (
        '; %d more statements were dropped before they became '
        'records and are not profiled (sql.dropped)' % dropped
    )


def text_lines(report: dict, blocks: int) -> list:
    """The text report's SQL profile and its ``blocks`` costliest
    classes in detail."""
    us = fmt.fmt_us
    out: list = []
    sql = report['sql']
    out.extend(
        fmt.title(
            'SQL profile (grouped by %s, ordered by %s)'
            % (sql['group_by'], sql['order_by'])
        )
    )
    note = views.sql_loss_line(report)
    if note:
        out.append(note)
    if not sql['rows']:
        out.append('no SQL statements' + sql_dropped_text(sql))
        return out
    out.append(
        '# %d statements in %d classes, %s total%s%s'
        % (
            sql['calls'],
            sql['classes'],
            us(sql['total_us']),
            ', %d outside --since/--until' % sql['filtered_out']
            if sql['filtered_out']
            else '',
            sql_dropped_text(sql),
        )
    )
    rows = []
    for r in sql['rows']:
        rows.append(
            (
                r['rank'],
                r['id'],
                '%.4f' % (r['total_us'] / 1e6),
                '%.1f%%' % (100 * r['pct']),
                r['calls'],
                '%.4f' % (r['r_call_us'] / 1e6),
                '%.2f' % r['v_m'],
                r['item'],
            )
        )
    misc = sql['misc']
    if misc:
        rows.append(
            (
                'MISC',
                '0xMISC',
                '%.4f' % (misc['total_us'] / 1e6),
                '%.1f%%' % (100 * misc['pct']),
                misc['calls'],
                '',
                '',
                '<%d ITEMS>' % misc['classes'],
            )
        )
    out.extend(
        fmt.table(
            [
                'Rank',
                'Query ID',
                'Response time',
                '%',
                'Calls',
                'R/Call',
                'V/M',
                'Item',
            ],
            rows,
            'rlrrrrrl',
        )
    )
    for r in sql['rows'][:blocks]:
        out.append('')
        out.extend(class_block(r, sql['group_by']))
    return out


def rows_cell(r: dict) -> tuple:
    """The rows of a SQL class and a note: ``unknown`` when no statement
    had a row count (sqlite's driver gives none for a SELECT; BEGIN and
    COMMIT have none), never a false zero; the note says how many had
    none when only some had one."""
    rows = r.get('rows')
    if rows is None:
        return 'unknown', ''
    unknown = r.get('rows_unknown') or 0
    if unknown:
        return str(rows), '  (%d of %d statements without a row count)' % (
            unknown,
            r['calls'],
        )
    return str(rows), ''


def class_block(r: dict, group_by: str) -> list:
    """One pt-query-digest style block for a class."""
    us = fmt.fmt_us
    lines = [
        '# Query %d: ID %s (%s %s)' % (r['rank'], r['id'], group_by, r['item'])
    ]
    lines.append(
        '# services %s; databases %s; called from %s'
        % (
            ', '.join(r['services']) or '-',
            ', '.join(r['databases']) or '-',
            ', '.join(r['calls_from'][:4]) or '-',
        )
    )
    kinds = r.get('kinds') or {}
    if len(kinds) > 1 or set(kinds) & SIDE_KINDS:
        # e.g. ROLLBACKs of transactions and of the pool's resets
        lines.append(
            '# kinds %s' % ', '.join('%s %d' % item for item in kinds.items())
        )
    lines.append(
        '# Attribute    pct   total     min     max     avg     '
        '95%  stddev  median'
    )
    lines.append(
        '# ============ === ======= ======= ======= ======= '
        '======= ======= ======='
    )
    lines.append(
        '# Count        %3d %7d'
        % (round(100 * r['pct_calls']) if 'pct_calls' in r else 0, r['calls'])
    )
    lines.append(
        '# Exec time    %3d %7s %7s %7s %7s %7s %7s %7s'
        % (
            round(100 * r['pct']),
            us(r['total_us']),
            us(r['min_us']),
            us(r['max_us']),
            us(r['avg_us']),
            us(r['p95_us']),
            us(r['stddev_us']),
            us(r['median_us']),
        )
    )
    lines.append('# Rows             %7s%s' % rows_cell(r))
    lines.append('# Errors           %7d' % r['errors'])
    if r['aggregated']:
        lines.append(
            '# (%d statements from sql.agg aggregates: their '
            'percentiles are estimated)' % r['aggregated']
        )
    lines.append('# Query_time distribution')
    hist = r['histogram']
    peak = max(hist) or 1
    for label, n in zip(sqldigest.DECADES, hist, strict=True):
        bar = '#' * (round(60 * n / peak) if n else 0)
        if n and not bar:
            bar = '#'
        lines.append('# %5s  %s' % (label, bar))
    if r.get('fingerprint'):
        lines.append(r['fingerprint'] + '\\G')
    return lines


def html_parts(report: dict) -> list:
    """The HTML report's SQL digest: the profile, then every class's
    block."""
    esc = fmt.esc
    sql = report['sql']
    out = [
        '<h2>SQL digest (grouped by %s, ordered by %s)</h2>'
        % (esc(sql['group_by']), esc(sql['order_by']))
    ]
    out.append(
        '<p class="note">%d statements in %d classes, %s%s. Query '
        'ID = MD5 of the fingerprint.</p>'
        % (
            sql['calls'],
            sql['classes'],
            esc(fmt.fmt_us(sql['total_us'])),
            esc(sql_dropped_text(sql)),
        )
    )
    out.append(
        fmt.html_table(
            [
                'Rank',
                'Query ID',
                'Response time',
                '%',
                'Calls',
                'R/Call',
                'V/M',
                'Item',
            ],
            [
                (
                    r['rank'],
                    r['id'],
                    fmt.fmt_us(r['total_us']),
                    '%.1f%%' % (100 * r['pct']),
                    r['calls'],
                    fmt.fmt_us(r['r_call_us']),
                    '%.2f' % r['v_m'],
                    r['item'],
                )
                for r in sql['rows']
            ],
            left=(1, 7),
        )
    )
    for r in sql['rows']:
        out.append(
            '<pre>%s</pre>' % esc('\n'.join(class_block(r, sql['group_by'])))
        )
    return out
