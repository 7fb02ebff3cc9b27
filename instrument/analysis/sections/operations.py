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
"""``operations``: run-wide figures per nova operation.

For every operation that occurred (``operations.operation_of``): its
requests and instances, final states (``operations.states_of``) with
the request ids behind each, causes and failure-table rows, success and
retry rates (a retry is a second attempt on another host: a reschedule
of a boot or a resize, another destination of a live migration),
latency and exclusive time per component of its successful requests,
critical-path shares, where incomplete ones stopped, and the time per
component by concurrency level, where the level counts requests of the
same operation in flight (a boot's status polls are ``show`` requests
and do not count towards boots).  ``list`` and ``show`` add the cells
they queried: parallel or one after another, and each cell's timing.
The text and HTML forms give an overview of every operation, then a
section per operation other than boot (whose sections are
``summary``'s); ``compare`` compares each operation's rates and the
latency of its successful requests per component.
"""

import collections
import typing

import numpy

from instrument import schema
from instrument.analysis.model import breakdown
from instrument.analysis.model import classify
from instrument.analysis.model import damage
from instrument.analysis.model import operations
from instrument.analysis.model import significance
from instrument.analysis.render import fmt
from instrument.analysis.render import glossary
from instrument.analysis.render import views
from instrument.analysis.sections import base
from instrument.analysis.sections import summary

EXAMPLES = 5
COUNTED = (
    'requests of the same operation in flight when the request '
    'started (other operations, e.g. status polls, not counted)'
)


def order(ops: typing.Iterable[str]) -> list:
    """Operations in ``schema.OPERATIONS`` order, unknown ones last."""
    ops = set(ops)
    known = [op for op in schema.OPERATIONS if op in ops]
    return known + sorted(ops - set(known))


def summarise(summaries: list, failures: list) -> dict:
    """``{operation: figures}`` for every operation that occurred;
    ``failures`` are the report's failure rows (with ``operation``)."""
    by_op: dict = {}
    for s in summaries:
        by_op.setdefault(s.kind, []).append(s)
    out = {}
    for op in order(by_op):
        out[op] = _one(
            op, by_op[op], [f for f in failures if f.get('operation') == op]
        )
    return out


def _one(op: str, reqs: list, failures: list) -> dict:
    # (the times: a request whose span end was lost, or that a loss
    # may have touched, is left out)
    good = [
        s
        for s in reqs
        if s.state in operations.GOOD_STATES and not damage.marked(s)
    ]
    states = collections.Counter()
    examples: dict = {}
    causes = collections.Counter()
    stopped: dict = {}
    rows = 0
    tried = 0
    retried = 0
    for s in reqs:
        insts = s.instances or [
            {
                'inst': None,
                'state': s.state,
                'cause': None,
                'stopped': None,
                'attempts': 0,
            }
        ]
        for row in insts:
            rows += 1
            states[row['state']] += 1
            ex = examples.setdefault(row['state'], [])
            if len(ex) < EXAMPLES and s.req not in ex:
                ex.append(s.req)
            if row['attempts'] >= 1:
                tried += 1
                if row['attempts'] > 1:
                    retried += 1
            if row['cause']:
                causes[(row['state'], row['cause']['cls'])] += 1
            if row['state'] == classify.INCOMPLETE and row['stopped']:
                st = row['stopped']
                key = (st['ev'], st['host'], bool(st['open']))
                stopped.setdefault(key, []).append(s.req)
    n_good = sum(states[x] for x in operations.GOOD_STATES)
    t0 = min((s.start for s in reqs), default=0)
    t1 = max((s.end for s in reqs), default=0)
    duration = max(t1 - t0, 1) / 1e6
    names = breakdown.components(good)
    comps = [s.comp for s in good]
    sql_ins = [s.sql_in for s in good]
    comp_stats = {}
    cp_total: collections.Counter = collections.Counter()
    for s in good:
        cp_total.update(s.cp)
    lat_total = sum(s.latency for s in good) or 1
    for name in names:
        comp_stats[name] = breakdown.stats([c.get(name, 0) for c in comps])
    conc = breakdown.concurrency(
        [s.start for s in reqs], [s.end for s in reqs]
    )
    at_start = dict(zip((s.req for s in reqs), conc['at_start'], strict=True))
    levels: dict = {}
    for s, comp, sql_in in zip(good, comps, sql_ins, strict=True):
        n = int(at_start[s.req])
        lv = levels.setdefault(
            breakdown.level_label(n),
            {'requests': 0, 'sum': {}, 'latency': [], 'lo': n},
        )
        lv['requests'] += 1
        lv['latency'].append(s.latency)
        lv['lo'] = min(lv['lo'], n)
        for name, us in comp.items():
            lv['sum'][name] = lv['sum'].get(name, 0) + us
        for us in sql_in.values():
            lv['sum']['sql'] = lv['sum'].get('sql', 0) + us
    level_rows = [
        {
            'level': label,
            'requests': lv['requests'],
            'mean_us': {k: v / lv['requests'] for k, v in lv['sum'].items()},
            'latency': breakdown.stats(lv['latency']),
        }
        for label, lv in sorted(levels.items(), key=lambda kv: kv[1]['lo'])
    ]
    by_state: dict = {}
    for s in reqs:
        by_state.setdefault(s.state, []).append(s.latency)
    known = operations.states_of(op)
    state_order = list(known) + sorted(set(states) - set(known))
    figures = {
        'operation': op,
        'requests': len(reqs),
        'instances': rows,
        'state_order': state_order,
        'states': dict(states),
        'state_requests': examples,
        'causes': [
            {'state': st, 'cls': cls, 'count': n}
            for (st, cls), n in causes.most_common()
        ],
        'stopped': [
            {
                'ev': ev,
                'host': host,
                'open': is_open,
                'count': len(r),
                'requests': r[:EXAMPLES],
            }
            for (ev, host, is_open), r in sorted(
                stopped.items(), key=lambda kv: -len(kv[1])
            )
        ],
        'failures': failures,
        'duration_s': duration,
        'throughput_rps': len(reqs) / duration,
        'success_rate': n_good / rows if rows and known else None,
        'retry_rate': retried / tried if tried else None,
        'db_retry_rate': sum(1 for s in reqs if s.db_retries) / len(reqs),
        'latency': breakdown.stats([s.latency for s in good]),
        'latency_by_state': {
            k: breakdown.stats(v) for k, v in by_state.items()
        },
        'components': comp_stats,
        'component_order': names,
        'critical_path_us': dict(cp_total),
        'critical_path_share': {k: v / lat_total for k, v in cp_total.items()},
        'gaps': breakdown.gap_figures(good),
        'concurrency': {
            'counted': COUNTED,
            'max': conc['max'],
            'mean': conc['mean'],
            'series': conc['series'],
        },
        'levels': level_rows,
    }
    if op in ('list', 'show'):
        figures['cells'] = cell_figures(reqs)
    return figures


def cell_figures(reqs: list) -> dict:
    """How a list/show queried its cells: requests per mode (parallel,
    serial, single) and per cell its query times; the slow cell is the
    one with the highest median."""
    modes = collections.Counter()
    mode_reqs: dict = {}
    per_cell: dict = {}
    for s in reqs:
        info = s.cells
        if not info:
            continue
        modes[info['mode']] += 1
        ex = mode_reqs.setdefault(info['mode'], [])
        if len(ex) < EXAMPLES:
            ex.append(s.req)
        for row in info['cells']:
            c = per_cell.setdefault(
                row['cell'], {'db': row['db'], 'durations': [], 'errors': 0}
            )
            if row['dur_us'] is not None:
                c['durations'].append(row['dur_us'])
            if row['st'] != 'ok':
                c['errors'] += 1
    cells = {}
    for name, c in sorted(per_cell.items()):
        cells[name] = {
            'db': c['db'],
            'errors': c['errors'],
            'time': breakdown.stats(c['durations']),
        }
    slow = None
    if cells:
        slow = max(cells, key=lambda n: cells[n]['time'].get('median', 0))
    return {
        'modes': dict(modes),
        'mode_requests': mode_reqs,
        'cells': cells,
        'slow_cell': slow,
    }


class Operations(base.Section):
    """``report['operations']``: per operation that occurred."""

    key = 'operations'

    def report(self, view: base.View) -> dict:
        return summarise(view.summaries, view['failures'])

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report, page.defined)

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return [html_section(report.get('operations') or {}, page.extra)]

    @staticmethod
    def compare(a: dict, b: dict, how: base.Comparing) -> dict:
        return {'operations': compare_operations(a, b, how)}

    @staticmethod
    def compare_text(cmp: dict, reminder: list) -> list:
        return compare_lines(cmp, reminder)


# -- text and HTML ------------------------------------------------------------


def op_latency(f: dict) -> tuple:
    """The end-to-end times an operation's row shows (``operations``):
    ``(stats, every)``, of its successful requests, or of every request
    (``every`` True) when the operation has no success state (``other``)
    and all its requests share one state; else ``({}, False)``."""
    if f['latency'].get('count'):
        return f['latency'], False
    by_state = f.get('latency_by_state') or {}
    if f.get('success_rate') is None and len(by_state) == 1:
        return next(iter(by_state.values())), True
    return {}, False


def op_rows(ops: dict) -> tuple:
    """The overview rows of the operations and the note under them."""
    pct = fmt.fmt_pct
    rows = []
    every = []
    for op, f in ops.items():
        lat, all_reqs = op_latency(f)
        mark = '*' if all_reqs else ''
        if all_reqs:
            every.append(op)
        rows.append(
            (
                op,
                f['requests'],
                f['instances'],
                pct(f['success_rate']),
                pct(f['retry_rate']),
                fmt.fmt_us(lat.get('median')) + mark,
                fmt.fmt_us(lat.get('p95')) + mark,
                f['concurrency']['max'],
            )
        )
    note = (
        'success: share of the instances (a request without one '
        'counts as one); retried: share of the instances tried on a '
        'host; median, p95: end to end of the successful requests'
    )
    if every:
        note += '; * of every request (%s: no success state)' % ', '.join(
            every
        )
    return rows, note


def text_lines(report: dict, defined: typing.Optional[set] = None) -> list:
    """The overview of every operation, then one section per operation
    other than boot (whose sections come first); the legend of the
    terms of each table not in ``defined`` (explained above)."""
    defined = set() if defined is None else defined
    out: list = []
    ops = report.get('operations') or {}
    if not ops:
        return out
    out.extend(
        fmt.title('Operations (every request named by what it reached)')
    )
    note = views.marked_line(report)
    if note:
        out.append(note)
    rows, rows_note = op_rows(ops)
    out.extend(
        fmt.table(
            [
                'operation',
                'requests',
                'instances',
                'success',
                'retried',
                'median',
                'p95',
                'max in flight',
            ],
            rows,
        )
    )
    out.append('(%s)' % rows_note)
    out.append(
        '(in flight counts %s)'
        % next(iter(ops.values()))['concurrency']['counted']
    )
    for op, f in ops.items():
        if op in ('boot', 'other'):
            continue
        operation_section(
            op, f, out, views.marked_line(report, op, f['requests']), defined
        )
    return out


# The per-cell query table of a cell-list operation (text and HTML).
CELL_HEADER = ['cell', 'database', 'queries', 'median', 'p95', 'max', 'errors']


def _cell_rows(cells: dict) -> list:
    us = fmt.fmt_us
    return [
        (
            name,
            c['db'] or '-',
            c['time'].get('count', 0),
            us(c['time'].get('median')),
            us(c['time'].get('p95')),
            us(c['time'].get('max')),
            c['errors'],
        )
        for name, c in cells['cells'].items()
    ]


def operation_section(
    op: str,
    f: dict,
    out: list,
    note: typing.Optional[str] = None,
    defined: typing.Optional[set] = None,
) -> None:
    """The text section of one operation (``report['operations'][op]``);
    ``note``: the warning that a loss may have touched some of its
    requests (``views.marked_line``); ``defined``: the terms explained
    above (``glossary.legend_lines``)."""
    pct = fmt.fmt_pct
    us = fmt.fmt_us
    out.extend(fmt.title('Operation: %s' % op))
    if note:
        out.append(note)
    out.append(
        '%d requests (%d instances) over %.1f s, %.2f requests/s; '
        'success rate %s of the instances, retried on another '
        'host %s of the instances tried on a host, DB retries in '
        '%s of the requests; requests in flight max %d, mean %.1f'
        % (
            f['requests'],
            f['instances'],
            f['duration_s'],
            f['throughput_rps'],
            pct(f['success_rate']),
            pct(f['retry_rate']),
            pct(f['db_retry_rate']),
            f['concurrency']['max'],
            f['concurrency']['mean'],
        )
    )
    total = f['instances'] or 1
    rows = [
        (
            state,
            f['states'].get(state, 0),
            pct(f['states'].get(state, 0) / total),
            ' '.join(f['state_requests'].get(state, [])[:1]),
        )
        for state in f['state_order']
        if f['states'].get(state)
    ]
    out.extend(
        fmt.table(['final state', 'count', 'share', 'e.g.'], rows, 'lrrl')
    )
    if f['causes']:
        out.append('causes:')
        for c in f['causes']:
            out.append(
                '  %-22s %-48s %4d' % (c['state'], c['cls'], c['count'])
            )
    if f['stopped']:
        out.append('incomplete, stopped at:')
        out.extend(views.stopped_lines(f['stopped']))
    lat = f['latency']
    if lat.get('count'):
        comp_rows: list = []
        for name in f['component_order']:
            st = f['components'].get(name, {})
            if not st.get('count') or not st['max']:
                continue
            comp_rows.append(
                (
                    name,
                    us(st['median']),
                    us(st['p95']),
                    us(st['max']),
                    us(st['mean']),
                    pct(f['critical_path_share'].get(name, 0)),
                )
            )
        comp_rows.append(
            (
                'end to end',
                us(lat['median']),
                us(lat['p95']),
                us(lat['max']),
                us(lat['mean']),
                '100%',
            )
        )
        out.append(
            'time per successful request, exclusive, per '
            'component (%d requests):' % lat['count']
        )
        headers = ['component', 'median', 'p95', 'max', 'mean', 'crit.path']
        out.extend(fmt.table(headers, comp_rows))
        out.extend(views.gap_lines(f))
        out.extend(
            glossary.legend_lines([r[0] for r in comp_rows], headers, defined)
        )
    if len(f['levels']) > 1:
        out.append(
            'median end to end by %s in flight at start: %s'
            % (
                op,
                ', '.join(
                    '%s: %s (%d)'
                    % (
                        lv['level'],
                        us(lv['latency']['median']),
                        lv['requests'],
                    )
                    for lv in f['levels']
                ),
            )
        )
    cells = f.get('cells')
    if cells and cells['cells']:
        modes = ', '.join(
            '%s %d' % kv for kv in sorted(cells['modes'].items())
        )
        out.append(
            'cells queried: %s (requests); slow cell: %s'
            % (modes, cells['slow_cell'])
        )
        out.extend(
            fmt.table(
                CELL_HEADER,
                _cell_rows(cells),
                'llrrrrr',
            )
        )


def html_section(ops: dict, extra: dict) -> str:
    """The overview of every operation and a section per operation other
    than boot (``report['operations']``, see ``summarise``)."""
    pct = fmt.fmt_pct
    esc = fmt.esc
    table = fmt.html_table
    us = fmt.fmt_us
    if not ops:
        return ''
    out = [
        '<h2>Operations</h2>',
        '<p class="note">Every request is named by the compute API '
        'method it reached (else its conductor and compute steps). '
        'In flight counts %s.</p>'
        % esc(next(iter(ops.values()))['concurrency']['counted']),
    ]
    rows, note = op_rows(ops)
    out.append(
        table(
            [
                'operation',
                'requests',
                'instances',
                'success',
                'retried',
                'median',
                'p95',
                'max in flight',
            ],
            rows,
        )
    )
    out.append('<p class="note">%s.</p>' % esc(note[0].upper() + note[1:]))
    for op, f in ops.items():
        if op in ('boot', 'other'):
            continue
        out.append(
            '<section id="op-%s"><h3>Operation: %s</h3>' % (esc(op), esc(op))
        )
        total = f['instances'] or 1
        out.append(
            table(
                ['final state', 'count', 'share', 'e.g. request'],
                [
                    (
                        st,
                        f['states'].get(st, 0),
                        pct(f['states'].get(st, 0) / total),
                        ' '.join(f['state_requests'].get(st, [])[:1]),
                    )
                    for st in f['state_order']
                    if f['states'].get(st)
                ],
                left=(0, 3),
            )
        )
        out.append(
            '<p>%d requests; success rate %s, retried on another '
            'host %s, DB retries in %s; in flight max %d.</p>'
            % (
                f['requests'],
                esc(pct(f['success_rate'])),
                esc(pct(f['retry_rate'])),
                esc(pct(f['db_retry_rate'])),
                f['concurrency']['max'],
            )
        )
        if f['stopped']:
            out.append(
                table(
                    [
                        'incomplete, stopped at',
                        'open',
                        'instances',
                        'hosts',
                        'e.g. request',
                    ],
                    [
                        (
                            g['ev'],
                            'yes' if g['open'] else 'no',
                            g['count'],
                            fmt.where_phrase(g['hosts']),
                            g['example'],
                        )
                        for g in views.stopped_groups(f['stopped'])
                    ],
                    left=(0, 1, 3, 4),
                )
            )
        if f['causes']:
            out.append(
                table(
                    ['state', 'cause', 'count'],
                    [(c['state'], c['cls'], c['count']) for c in f['causes']],
                    left=(0, 1),
                )
            )
        lat = f['latency']
        if lat.get('count'):
            rows = []
            for name in f['component_order']:
                st = f['components'].get(name, {})
                if not st.get('count') or not st['max']:
                    continue
                rows.append(
                    (
                        name,
                        us(st['median']),
                        us(st['p95']),
                        us(st['max']),
                        pct(f['critical_path_share'].get(name, 0)),
                    )
                )
            rows.append(
                (
                    'end to end',
                    us(lat['median']),
                    us(lat['p95']),
                    us(lat['max']),
                    '100%',
                )
            )
            out.append(
                table(
                    [
                        'component (successful)',
                        'median',
                        'p95',
                        'max',
                        'critical path',
                    ],
                    rows,
                    terms=(0,),
                )
            )
            out.append(views.gap_html(f))
        if len(f['levels']) > 1:
            out.append(
                views.stacked_levels(
                    f['levels'], f['component_order'], extra, subject=op
                )
            )
        cells = f.get('cells')
        if cells and cells['cells']:
            out.append(
                '<p>Cells queried: %s; slow cell: <b>%s</b>.</p>'
                % (
                    esc(
                        ', '.join(
                            '%s %d' % kv
                            for kv in sorted(cells['modes'].items())
                        )
                    ),
                    esc(cells['slow_cell']),
                )
            )
            out.append(
                table(
                    CELL_HEADER,
                    _cell_rows(cells),
                    left=(0, 1),
                )
            )
        out.append('</section>')
    return ''.join(out)


# -- two runs ---------------------------------------------------------------


def _op_good(report: dict, op: str) -> list:
    return [
        r
        for r in report['requests']
        if r['kind'] == op and r['state'] in ('success', 'rescheduled_success')
    ]


def _latency_rows(ga: list, gb: list, how: base.Comparing) -> list:
    names = []
    for r in ga + gb:
        for name in r['components_us']:
            if name not in names:
                names.append(name)
    series = [
        (
            'end to end',
            [r['latency_us'] for r in ga],
            [r['latency_us'] for r in gb],
        )
    ]
    series += [
        (
            name,
            [r['components_us'].get(name, 0) for r in ga],
            [r['components_us'].get(name, 0) for r in gb],
        )
        for name in names
    ]
    rows = []
    for name, va, vb in series:
        ma = float(numpy.median(va)) if va else None
        mb = float(numpy.median(vb)) if vb else None
        p = how.p_value(va, vb)
        rows.append(
            {
                'component': name,
                'median_a': ma,
                'median_b': mb,
                'change': significance.change(ma, mb),
                'p_value': p,
                'significant': p is not None and p < how.alpha,
            }
        )
    return rows


def compare_operations(a: dict, b: dict, how: base.Comparing) -> list:
    """Per operation in either run (``other`` left out): requests,
    success and retry rates, and the latency of its successful requests
    per component (Mann-Whitney U as for boots)."""
    oa = a.get('operations') or {}
    ob = b.get('operations') or {}
    kinds = {r['kind'] for r in a['requests']} | {
        r['kind'] for r in b['requests']
    }
    out = []
    for op in order(kinds - {'other'}):
        fa, fb = oa.get(op) or {}, ob.get(op) or {}
        ga, gb = _op_good(a, op), _op_good(b, op)
        rates = {}
        for key in ('success_rate', 'retry_rate', 'db_retry_rate'):
            rates[key] = {
                'a': fa.get(key),
                'b': fb.get(key),
                'change': significance.change(fa.get(key), fb.get(key)),
            }
        out.append(
            {
                'operation': op,
                'requests_a': sum(1 for r in a['requests'] if r['kind'] == op),
                'requests_b': sum(1 for r in b['requests'] if r['kind'] == op),
                'successful_a': len(ga),
                'successful_b': len(gb),
                'states_a': fa.get('states', {}),
                'states_b': fb.get('states', {}),
                'rates': rates,
                'latency': _latency_rows(ga, gb, how),
            }
        )
    return out


def compare_lines(cmp: dict, reminder: list) -> list:
    """Per operation other than boot: its requests, states, rates and
    the latency of its successful requests per component."""
    us = fmt.fmt_us
    out: list = []
    # the terms the boots' latency table above defined
    seen: set = set()
    glossary.legend_lines(
        [r['component'] for r in cmp.get('latency') or ()],
        summary.LATENCY_HEADERS,
        seen,
    )
    for op in cmp.get('operations') or []:
        if op['operation'] == 'boot':
            continue  # summary's
        if out:
            out.append('')
        out.append(
            'Operation %s: A %d requests (%d successful), B %d (%d)'
            % (
                op['operation'],
                op['requests_a'],
                op['successful_a'],
                op['requests_b'],
                op['successful_b'],
            )
        )
        out.extend('  ' + line for line in reminder)
        out.append('  states A: %s' % _states(op['states_a']))
        out.append('  states B: %s' % _states(op['states_b']))
        out.extend(
            '  ' + line
            for line in fmt.table(
                ['rate', 'A', 'B', 'change'],
                [
                    (
                        key,
                        fmt.fmt_pct(v['a']),
                        fmt.fmt_pct(v['b']),
                        fmt.fmt_change(v['change']),
                    )
                    for key, v in op['rates'].items()
                ],
            )
        )
        rows = [
            (
                r['component'],
                us(r['median_a']),
                us(r['median_b']),
                fmt.fmt_change(r['change']),
                '-' if r['p_value'] is None else '%.3g' % r['p_value'],
                'yes' if r['significant'] else 'no',
            )
            for r in op['latency']
            if r['median_a'] or r['median_b']
        ]
        headers = [
            'component',
            'median A',
            'median B',
            'change',
            'p',
            'significant',
        ]
        out.extend('  ' + line for line in fmt.table(headers, rows))
        out.extend(
            '  ' + line
            for line in glossary.legend_lines(
                [r[0] for r in rows], headers, seen, width=77
            )
        )
    return out


def _states(states: dict) -> str:
    return ', '.join('%s %d' % kv for kv in sorted(states.items())) or '-'
