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
"""Views several sections of the report share.

* the warnings that go beside every figure computed from input with
  losses (``loss_text``, ``loss_note``; the report's ``quality.note``
  is ``loss_text``), or from requests whose span ends were lost
  (``degraded_note``), and the processes that did not end
  (``unended_lines``);
* where incomplete instances stopped, grouped (``stopped_groups``,
  ``stopped_lines``);
* the colours of components (``color``) and the chart of mean time
  per component by concurrency level (``stacked_levels``).

Functions of report dicts (or their parts), like every renderer.
"""

import typing

from instrument.analysis.render import charts
from instrument.analysis.render import fmt

# Every pair of these colours, and of EXTRA, is at least 15 apart in
# CIEDE2000 (``charts.ciede2000``; tested): components stacked side by
# side never look alike (the sql and wait.lock yellows, the compute
# reds and the scheduler greens did).  The first nine are Tableau's;
# the others were chosen to be farthest from those already taken.
PALETTE = {
    'api': '#4e79a7',
    'api.auth': '#006644',
    'api.cells': '#aa2266',
    'rpc': '#a0cbe8',
    'rpc.queue': '#8800cc',
    'conductor': '#f28e2b',
    'scheduler': '#59a14f',
    'scheduler.db': '#00eecc',
    'scheduler.placement': '#666600',
    'compute': '#e15759',
    'compute.claim': '#22ff00',
    'compute.network': '#79706e',
    'compute.block_device': '#884400',
    'compute.spawn': '#b07aa1',
    'service': '#ffccff',
    'service.placement': '#003399',
    'service.network': '#aa7755',
    'service.image': '#665577',
    'service.identity': '#9999aa',
    'service.block-storage': '#ff2299',
    'wait.lock': '#ee00ff',
    'wait.db_pool': '#448888',
    'wait.pool': '#ffaaaa',
    'sql': '#edc948',
    'gap': '#dddddd',
}
EXTRA = ('#aa8822', '#aa0022', '#aaaa88', '#aa88ff', '#aacc22')
# What each cause of lost records (``losses.LOSS_CAUSES``) is called.
LOSS_CAUSES = {
    'sink_dropped': 'dropped by a sink',
    'buffer_dropped': 'dropped by the buffer',
    'unreported_gaps': 'seq gaps nobody reported',
    'invalid': 'invalid lines',
}


def color(name: str, extra: dict) -> str:
    """The colour of component ``name``: the palette's, else the next
    of ``EXTRA`` (``extra``: those given so far, a page's)."""
    if name in PALETTE:
        return PALETTE[name]
    if name not in extra:
        extra[name] = EXTRA[len(extra) % len(EXTRA)]
    return extra[name]


def stacked_levels(
    levels: list, order: list, extra: dict, subject: str = 'boot'
) -> str:
    """Mean exclusive time per component of the successful requests
    (``subject``: what they are, e.g. ``boot`` or ``resize``), stacked,
    one bar per concurrency level; its legend below."""
    names = [n for n in order if n != 'gap'] + ['sql']
    names = list(dict.fromkeys(names))
    if not levels:
        return '<p class="note">no successful %s</p>' % fmt.esc(subject)
    names = [
        n for n in names if any(lv['mean_us'].get(n, 0) > 0 for lv in levels)
    ]
    colours = {n: color(n, extra) for n in names}
    svg = charts.stacked_bars(
        [lv['level'] for lv in levels],
        [(n, [lv['mean_us'].get(n, 0) for lv in levels]) for n in names],
        colours,
        'mean time per successful %s' % subject,
        'requests in flight when the %s started (n: requests in the '
        'group)' % subject,
        unit='us',
        notes=['n=%d' % lv['requests'] for lv in levels],
    )
    return svg + charts.legend((colours[n], n) for n in reversed(names))


def loss_text(q: dict) -> typing.Optional[str]:
    """What the input lost (``quality``), in one sentence, and the
    requests it may have touched; None when it lost nothing and no
    request is marked."""
    cut = q.get('unreadable') or []
    sql_dropped = q.get('sql_dropped') or 0
    if not q.get('lost_records') and not cut and not sql_dropped:
        return _marked_text(q)
    lost = []
    if q.get('lost_records'):
        causes = q.get('causes') or {}
        lost.append(
            '%d records lost in %d process(es)%s'
            % (
                q['lost_records'],
                sum(1 for p in q.get('processes') or () if p.get('lost', 1)),
                ' (%s)'
                % ', '.join(
                    '%d %s' % (causes[k], name)
                    for k, name in LOSS_CAUSES.items()
                    if causes.get(k)
                )
                if causes
                else '',
            )
        )
    if sql_dropped:
        lost.append(
            '%d SQL statements dropped before they became '
            'records' % sql_dropped
        )
    # what a file lost after the point it could not be read past is
    # not known: named, not counted
    lost.extend(
        'the rest of %s after line %d' % (u['file'], u['after_line'])
        for u in cut[:3]
    )
    if len(cut) > 3:
        lost.append('the rest of %d more file(s)' % (len(cut) - 3))
    if 'why' not in q:
        # (a report of an analyser that did not mark requests)
        return (
            'computed from input with losses: %s%s; %d of %d '
            'requests (%s) have events there and may be incomplete '
            'or mis-timed (see Input problems)'
            % (
                ' and '.join(lost),
                ' on ' + ', '.join(q['hosts']) if q.get('hosts') else '',
                q.get('requests_affected') or 0,
                q.get('requests') or 0,
                fmt.fmt_pct(
                    (q.get('requests_affected') or 0)
                    / (q.get('requests') or 1)
                ),
            )
        )
    return 'computed from input with losses: %s%s; %s' % (
        ' and '.join(lost),
        ' on ' + ', '.join(q['hosts']) if q.get('hosts') else '',
        _marked_text(q, True),
    )


# Why a request is marked (``model.damage``), as said.
MARKED_WHY = {
    'lost': 'doing something in a process when it lost records',
    'late': 'with events read after it was finalised (its records out '
    'of order beyond --horizon)',
    'repaired': 'with a record whose time was missing (estimated from '
    'the records around it)',
}


def _marked_text(q: dict, lossy: bool = False) -> typing.Optional[str]:
    """The requests a loss may have touched (``quality``), in one
    clause; None when none is marked and ``lossy`` is False."""
    n = q.get('requests_affected') or 0
    if not n:
        if not lossy:
            return None
        return (
            'no request was doing something in those processes when '
            'they lost records: no request figure is touched%s'
            % (
                ''
                if not (q.get('sql_touched') or q.get('sql_dropped'))
                else ' (the SQL profile may miss statements)'
            )
        )
    why = q.get('why') or {}
    return (
        '%d of %d requests (%s) may miss some of their records: %s; '
        'marked in the request table (loss), left out of the times, '
        'counted in the states (e.g. %s)'
        % (
            n,
            q.get('requests') or 0,
            fmt.fmt_pct(n / (q.get('requests') or 1)),
            ', '.join(
                '%d %s' % (why[k], text)
                for k, text in MARKED_WHY.items()
                if why.get(k)
            ),
            (q.get('examples') or ['?'])[0],
        )
    )


def loss_note(report: dict) -> typing.Optional[str]:
    """The warning of the input's losses (``quality.note``), None
    without losses."""
    text = loss_text(report.get('quality') or {})
    return None if text is None else '! ' + text


def marked_line(
    report: dict,
    op: typing.Optional[str] = None,
    total: typing.Optional[int] = None,
) -> typing.Optional[str]:
    """The warning beside the figures of operation ``op``'s requests
    (None: of every request; ``total``: how many there are), when a
    loss may have touched some of them (``quality``), else None."""
    q = report.get('quality') or {}
    if 'why' not in q:
        return loss_note(report)
    n = q.get('requests_affected') or 0
    if op is not None:
        n = (q.get('by_operation') or {}).get(op, 0)
    if not n:
        return None
    return (
        '! %d of the %d %srequests here may miss records lost on the '
        'way (marked in the request table: loss): left out of the '
        'times, counted in the states (see Input problems)'
        % (
            n,
            total if total is not None else q.get('requests') or 0,
            '' if op is None else op + ' ',
        )
    )


def marked_lines(
    report: dict,
    op: typing.Optional[str] = None,
    total: typing.Optional[int] = None,
) -> list:
    """``marked_line`` as the lines of a text section."""
    line = marked_line(report, op, total)
    return [line] if line else []


def sql_loss_line(report: dict) -> typing.Optional[str]:
    """The warning beside the SQL profile when it may miss statements
    (a process that wrote SQL lost records, statements dropped), else
    None."""
    q = report.get('quality') or {}
    if 'why' not in q:
        return loss_note(report)
    lost = q.get('sql_touched') or 0
    dropped = q.get('sql_dropped') or 0
    if not lost and not dropped:
        return None
    said = []
    if lost:
        said.append(
            '%d records were lost by processes that wrote these '
            'statements' % lost
        )
    if dropped:
        said.append(
            '%d statements were dropped before they became records' % dropped
        )
    return (
        '! %s (see Input problems): the counts and times below may '
        'be short' % ' and '.join(said)
    )


def loss_lines(report: dict) -> list:
    """``loss_note`` as the lines of a text section (none without
    losses)."""
    note = loss_note(report)
    return [note] if note else []


def degraded_note(report: dict) -> typing.Optional[str]:
    """Requests left out of the times: a span's end was lost, or a loss
    may have touched them."""
    deg = report['summary'].get('degraded') or {}
    if not deg.get('requests'):
        return None
    if deg.get('marked'):
        return (
            '! %d request(s) (%d boots) left out of these times: '
            '%d may miss records lost on the way (see Input '
            'problems), the end of %d span(s) was lost (e.g. %s); '
            'their states still count'
            % (
                deg['requests'],
                deg['boots'],
                deg['marked'],
                deg['lost_ends'],
                deg['examples'][0],
            )
        )
    return (
        '! %d request(s) (%d boots) left out of these times: the end '
        'of %d span(s) was lost (e.g. %s); their states still count'
        % (deg['requests'], deg['boots'], deg['lost_ends'], deg['examples'][0])
    )


def unended_lines(ld: dict) -> list:
    """The processes without a ``process.end`` record (``load`` of the
    report): one line each when there are few, else one line for all of
    them and a few examples (those whose records stopped first)."""
    rows = ld.get('unended') or []
    why = (
        'killed, or still running when collected; up to one flush '
        'interval of %s events may be missing'
    )
    if len(rows) <= fmt.EXAMPLES:
        return [
            'no end record from pid %s on %s (%s): %s; last record '
            'at %s'
            % (
                row['pid'],
                row['host'],
                row['file'],
                why % 'its',
                fmt.fmt_time(row['last_us']),
            )
            for row in rows
        ]
    hosts = sorted({row['host'] for row in rows})
    first = sorted(rows, key=lambda r: (r['last_us'], r['host'], r['pid']))
    out = [
        'no end record from %d processes on %d hosts: %s; last '
        'records %s .. %s; e.g. (stopped first):'
        % (
            len(rows),
            len(hosts),
            why % 'each one\'s',
            fmt.fmt_time(first[0]['last_us']),
            fmt.fmt_time(first[-1]['last_us']),
        )
    ]
    out.extend(
        '  pid %s on %s (%s), last record at %s'
        % (row['pid'], row['host'], row['file'], fmt.fmt_time(row['last_us']))
        for row in first[: fmt.EXAMPLES]
    )
    out.append(
        '  and %d more processes (every one in the JSON report, '
        'load.unended)' % (len(rows) - fmt.EXAMPLES)
    )
    return out


# nova's own interval of the periodic tasks the demo runs (the resource
# audit's; the power state sync's is 600 s)
NOVA_PERIODIC_S = 60.0


def setup_caveats(report: dict) -> list:
    """What the run's own set-up did to its lock figures (the
    ``setup`` of its processes' start records: the demo's), as
    sentences; none for a deployment."""
    computes = 0
    interval = None
    for row in report.get('processes') or ():
        setup = row.get('setup') or {}
        n = setup.get('computes')
        if isinstance(n, int):
            computes = max(computes, n)
        value = setup.get('periodic_interval_s')
        if isinstance(value, (int, float)) and value > 0:
            interval = value if interval is None else min(interval, value)
    out = []
    if computes > 1:
        out.append(
            'caveat: %d compute services ran in one process, so nova\'s '
            'process-wide named locks (compute_resources, taken by every '
            'claim and by the resource audit) were shared by all of them: '
            'a deployment runs one nova-compute per host, each with its '
            'own; lock waits here are higher than one host\'s would be'
            % computes
        )
    if interval is not None and interval < NOVA_PERIODIC_S:
        out.append(
            'caveat: the computes\' periodic tasks (resource audit, power '
            'state sync) ran every %gs, not at nova\'s intervals (60s, '
            '600s): their holds of compute_resources are more frequent '
            'than in a deployment' % interval
        )
    return out


GAP_NOTE = (
    'unrecorded: time on the critical path that no span covers '
    '(a wait nobody recorded, e.g. a queue nova keeps without a '
    'wait record), charged to no component'
)


def _gap_where(row: dict) -> str:
    return 'after %s, before %s' % (
        row['after'] or "the request's start",
        row['before'] or "the request's end",
    )


def gap_lines(f: dict) -> list:
    """The text lines naming the unrecorded gaps on the critical paths
    of ``f`` (the boot summary or an operation's figures: ``gaps``,
    ``critical_path_share``), none when there are none."""
    rows = f.get('gaps') or []
    if not rows:
        return []
    out = [
        'gap (%s): %s of the critical path:'
        % (GAP_NOTE, fmt.fmt_pct(f['critical_path_share'].get('gap', 0)))
    ]
    for r in rows:
        out.append(
            '  %s: mean %s in %d requests (e.g. %s)'
            % (
                _gap_where(r),
                fmt.fmt_us(r['mean_us']),
                r['requests'],
                r['examples'][0] if r['examples'] else '-',
            )
        )
    return out


def gap_html(f: dict) -> str:
    """``gap_lines`` as an HTML table ('' when there are none)."""
    rows = f.get('gaps') or []
    if not rows:
        return ''
    return '<p class="note">gap, %s: %s of the critical path.</p>%s' % (
        fmt.esc(GAP_NOTE),
        fmt.esc(fmt.fmt_pct(f['critical_path_share'].get('gap', 0))),
        fmt.html_table(
            ['unrecorded gap', 'mean', 'requests', 'e.g. request'],
            [
                (
                    _gap_where(r),
                    fmt.fmt_us(r['mean_us']),
                    r['requests'],
                    r['examples'][0] if r['examples'] else '-',
                )
                for r in rows
            ],
            left=(0, 3),
        ),
    )


def stopped_groups(rows: typing.Iterable[dict]) -> list:
    """Rows ``{ev, host, open, count, requests}`` of where incomplete
    instances stopped, grouped by event and open/ended across hosts:
    ``{ev, open, count, hosts, example}``, the most instances first,
    ``hosts`` too."""
    groups: dict = {}
    for row in rows:
        g = groups.setdefault(
            (row['ev'], bool(row['open'])),
            {
                'ev': row['ev'],
                'open': bool(row['open']),
                'count': 0,
                'per_host': {},
                'example': row['requests'][0],
            },
        )
        g['count'] += row['count']
        g['per_host'][row['host']] = (
            g['per_host'].get(row['host'], 0) + row['count']
        )
    out = []
    for g in sorted(
        groups.values(), key=lambda g: (-g['count'], g['ev'], g['open'])
    ):
        per_host = g.pop('per_host')
        g['hosts'] = sorted(per_host, key=lambda h: (-per_host[h], h))
        out.append(g)
    return out


def stopped_lines(rows: typing.Iterable[dict]) -> list:
    """The indented lines of ``stopped_groups``: one per event."""
    return [
        '  %-32s %-5s %5d instances on %s  e.g. %s'
        % (
            g['ev'],
            'open' if g['open'] else 'ended',
            g['count'],
            fmt.where_phrase(g['hosts']),
            g['example'],
        )
        for g in stopped_groups(rows)
    ]
