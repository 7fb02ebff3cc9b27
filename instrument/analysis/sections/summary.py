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
"""``summary``: the boots of a run, end to end and per component.

From the finished requests (``model.breakdown.aggregate``): boot
requests and instances, final states and their causes, success,
reschedule and DB retry rates, throughput, latency and exclusive time
per component of the successful boots (min/median/p90/p95/p99/max),
SQL time inside each component, critical-path shares, boots in flight
over time and the time per component by concurrency level (the
study's Figure 3-1), and the requests left out of the times because a
span's end was lost (``degraded``).  The text form shows the states
("Requests") and the components; the HTML form adds the chart by load
and the requests in flight; ``compare`` compares the rates and the
latency per component (Mann-Whitney U).
"""

import typing

import numpy

from instrument.analysis.model import breakdown
from instrument.analysis.model import significance
from instrument.analysis.render import charts
from instrument.analysis.render import fmt
from instrument.analysis.render import glossary
from instrument.analysis.render import views
from instrument.analysis.sections import base

STATE_ORDER = (
    'success',
    'rescheduled_success',
    'compute_failure',
    'scheduling_failure',
    'api_failure',
    'incomplete',
)
GOOD = ('success', 'rescheduled_success')


def successful_boots(report: dict) -> list:
    """The request rows of the boots that succeeded."""
    return [
        r
        for r in report['requests']
        if r['kind'] == 'boot' and r['state'] in GOOD
    ]


class Summary(base.Section):
    """``report['summary']``: the boots, their states and times."""

    key = 'summary'

    def report(self, view: base.View) -> dict:
        return breakdown.aggregate(view.summaries)

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        out: list = []
        _states(report, out)
        _components(report, out, page.defined)
        return out

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return html_parts(report, page)

    @staticmethod
    def compare(a: dict, b: dict, how: base.Comparing) -> dict:
        return compare_runs(a, b, how)

    @staticmethod
    def compare_text(cmp: dict, reminder: list) -> list:
        return compare_lines(cmp, reminder)


def html_parts(report: dict, page: base.Page) -> list:
    """The HTML report's final states of boots, the chart of their
    time per component by load, requests in flight, the components."""
    us = fmt.fmt_us
    s = report['summary']
    out = []
    out.append('<h2>Requests and final states</h2>')
    total = s['instances'] or 1
    out.append(
        fmt.html_table(
            ['final state', 'instances', 'share'],
            [
                (
                    st,
                    s['states'].get(st, 0),
                    fmt.fmt_pct(s['states'].get(st, 0) / total),
                )
                for st in STATE_ORDER
            ],
        )
    )
    out.append(
        '<p>%d boot requests (%d instances), %d other API '
        'requests. %s.</p>'
        % (
            s['boots'],
            s['instances'],
            s['other_requests'],
            '. '.join(
                fmt.esc(line[0].upper() + line[1:]) for line in boot_rates(s)
            ),
        )
    )
    out.append('<h2>Where a successful boot spends its time, by load</h2>')
    out.append(
        '<p class="note">Boots grouped by how many requests were '
        'in flight when each started; per group the mean time '
        'each component spent on a boot by itself (children '
        'excluded), stacked; the SQL time of every component in '
        'one band.</p>'
    )
    out.append(
        views.stacked_levels(s['levels'], s['component_order'], page.extra)
    )
    out.append('<h3>Requests in flight over the run</h3>')
    out.append(
        '<p class="note">API requests started and not yet ended: '
        'every request (boots and every other operation, status '
        'polls included), and boot requests alone; from the first '
        'request\'s start to the last one\'s end.  Hover a line '
        'for the count at a time.</p>'
    )
    out.append(concurrency_chart(s['concurrency']))
    out.append('<h2>Components (successful boots)</h2>')
    out.extend(
        '<p class="note"><b>%s</b></p>' % fmt.esc(c)
        for c in views.setup_caveats(report)
    )
    note = multi_instance_note(s)
    if note:
        out.append(
            '<p class="note">%s.</p>' % fmt.esc(note[0].upper() + note[1:])
        )
    rows = []
    for name in s['component_order']:
        st = s['components'].get(name, {})
        if not st.get('count') or not st['max']:
            continue
        sq = s['sql_in_components'].get(name, {})
        rows.append(
            (
                name,
                us(st['min']),
                us(st['median']),
                us(st['p90']),
                us(st['p95']),
                us(st['p99']),
                us(st['max']),
                us(sq.get('mean', 0)),
                fmt.fmt_pct(s['critical_path_share'].get(name, 0)),
            )
        )
    lat = s['latency']
    if lat.get('count'):
        rows.append(
            (
                'end to end',
                us(lat['min']),
                us(lat['median']),
                us(lat['p90']),
                us(lat['p95']),
                us(lat['p99']),
                us(lat['max']),
                '',
                '100%',
            )
        )
    out.append(
        fmt.html_table(
            [
                'component',
                'min',
                'median',
                'p90',
                'p95',
                'p99',
                'max',
                'SQL inside (mean)',
                'critical path',
            ],
            rows,
            terms=(0,),
        )
    )
    out.append(views.gap_html(s))
    return out


def compare_runs(a: dict, b: dict, how: base.Comparing) -> dict:
    """The rates of boots, and the latency of the successful ones
    end to end and per component."""
    sa, sb = a['summary'], b['summary']
    ga, gb = successful_boots(a), successful_boots(b)
    rates = {}
    for key in (
        'throughput_rps',
        'success_throughput_rps',
        'success_rate',
        'reschedule_rate',
        'db_retry_rate',
    ):
        rates[key] = {
            'a': sa.get(key),
            'b': sb.get(key),
            'change': significance.change(sa.get(key), sb.get(key)),
        }
    latency = []
    names = list(dict.fromkeys(sa['component_order'] + sb['component_order']))
    series = [
        (
            'end to end',
            [r['latency_us'] for r in ga],
            [r['latency_us'] for r in gb],
        )
    ]
    for name in names:
        series.append(
            (
                name,
                [r['components_us'].get(name, 0) for r in ga],
                [r['components_us'].get(name, 0) for r in gb],
            )
        )
    for name, va, vb in series:
        if not va and not vb:
            continue
        ma = float(numpy.median(va)) if va else None
        mb = float(numpy.median(vb)) if vb else None
        p = how.p_value(va, vb)
        latency.append(
            {
                'component': name,
                'median_a': ma,
                'median_b': mb,
                'p95_a': float(numpy.percentile(va, 95)) if va else None,
                'p95_b': float(numpy.percentile(vb, 95)) if vb else None,
                'change': significance.change(ma, mb),
                'p_value': p,
                'significant': p is not None and p < how.alpha,
            }
        )
    return {'rates': rates, 'latency': latency}


# the columns of the comparison's latency table
LATENCY_HEADERS = [
    'component',
    'median A',
    'median B',
    'change',
    'p95 A',
    'p95 B',
    'p',
    'significant',
]


def compare_lines(cmp: dict, reminder: list) -> list:
    """The comparison's rates and latency of boots."""
    us = fmt.fmt_us
    out: list = []
    rates = []
    for key, v in cmp['rates'].items():

        def show(x, key=key):
            if x is None:
                return '-'
            return '%.3f/s' % x if key.endswith('rps') else fmt.fmt_pct(x)

        rates.append(
            (key, show(v['a']), show(v['b']), fmt.fmt_change(v['change']))
        )
    out.extend(reminder)
    out.extend(fmt.table(['rate', 'A', 'B', 'change'], rates))
    out.append('')
    out.append(
        'Latency of successful boots (Mann-Whitney U, two-sided, '
        'alpha %.2f)' % cmp['alpha']
    )
    out.extend(reminder)
    latency = []
    for r in cmp['latency']:
        latency.append(
            (
                r['component'],
                us(r['median_a']),
                us(r['median_b']),
                fmt.fmt_change(r['change']),
                us(r['p95_a']),
                us(r['p95_b']),
                '-' if r['p_value'] is None else '%.3g' % r['p_value'],
                'yes' if r['significant'] else 'no',
            )
        )
    out.extend(fmt.table(LATENCY_HEADERS, latency))
    out.extend(glossary.legend_lines([r[0] for r in latency], LATENCY_HEADERS))
    return out


def boot_rates(s: dict) -> list:
    """The rates and throughput of boots (``summary``), each with its
    unit: instances or boot requests."""
    built = s.get('instances_built')
    return [
        'success rate %s of %d instances; reschedule rate %s of %s '
        'instances that reached a compute; DB retries in %s of %d boot '
        'requests'
        % (
            fmt.fmt_pct(s['success_rate']),
            s['instances'],
            fmt.fmt_pct(s['reschedule_rate']),
            'the' if built is None else built,
            fmt.fmt_pct(s['db_retry_rate']),
            s['boots'],
        ),
        'throughput %.2f boot requests/s (%.2f successful boot requests/s) '
        'over %.1f s; boot requests in flight max %d, mean %.1f'
        % (
            s['throughput_rps'],
            s['success_throughput_rps'],
            s['duration_s'],
            s['concurrency']['max'],
            s['concurrency']['mean'],
        ),
    ]


def multi_instance_note(summary: dict) -> str:
    """Why a component's time can exceed end to end: the successful
    boots that built several instances, whose builds ran side by side
    and whose exclusive times are summed ('' when there is none)."""
    n = summary.get('multi_instance_boots') or 0
    if not n:
        return ''
    return (
        '%d of the %d boots built several instances at once: the '
        'exclusive times of their instances (compute.*) are added '
        'up, so a component can exceed end to end; crit.path is the '
        'share of wall time' % (n, summary['latency']['count'])
    )


def _states(report: dict, out: list) -> None:
    """The final states of boots, their rates, where the incomplete
    ones stopped."""
    s = report['summary']
    out.extend(fmt.title('Requests'))
    out.extend(views.marked_lines(report, 'boot', s['boots']))
    out.append(
        '%d boot requests (%d instances), %d other API requests'
        % (s['boots'], s['instances'], s['other_requests'])
    )
    total = s['instances'] or 1
    rows = [
        (
            state,
            s['states'].get(state, 0),
            fmt.fmt_pct(s['states'].get(state, 0) / total),
        )
        for state in STATE_ORDER
    ]
    out.extend(fmt.table(['final state', 'instances', 'share'], rows))
    out.extend(boot_rates(s))
    if s['concurrency'].get('counted'):
        out.append('(in flight counts %s)' % s['concurrency']['counted'])
    stopped = {}
    for row in report['requests']:
        if row['kind'] != 'boot':
            continue
        for inst in row['instances']:
            if inst['state'] == 'incomplete' and inst['stopped']:
                key = (
                    inst['stopped']['ev'],
                    inst['stopped']['host'],
                    bool(inst['stopped']['open']),
                )
                stopped.setdefault(key, []).append(row['req'])
    if stopped:
        out.append('incomplete instances stopped at:')
        out.extend(
            views.stopped_lines(
                {
                    'ev': ev,
                    'host': host,
                    'open': is_open,
                    'count': len(reqs),
                    'requests': reqs,
                }
                for (ev, host, is_open), reqs in stopped.items()
            )
        )


def _components(
    report: dict, out: list, defined: typing.Optional[set] = None
) -> None:
    """The time per component of the successful boots, and by
    concurrency level, each table with the legend of its terms (those
    not in ``defined``: already explained above)."""
    us = fmt.fmt_us
    s = report['summary']
    out.extend(fmt.title('Time per successful boot, exclusive, per component'))
    degraded = views.degraded_note(report)
    if degraded:
        out.append(degraded)
    out.extend(views.setup_caveats(report))
    lat = s['latency']
    if not lat.get('count'):
        out.append('no successful boot')
        return
    note = multi_instance_note(s)
    if note:
        out.append('(%s)' % note)
    rows = []
    for name in s['component_order']:
        st = s['components'].get(name, {})
        sq = s['sql_in_components'].get(name, {})
        if not st.get('count') or not st['max']:
            continue
        rows.append(
            (
                name,
                us(st['median']),
                us(st['p90']),
                us(st['p95']),
                us(st['p99']),
                us(st['max']),
                us(st['mean']),
                us(sq.get('mean', 0)),
                fmt.fmt_pct(s['critical_path_share'].get(name, 0)),
            )
        )
    rows.append(
        (
            'end to end',
            us(lat['median']),
            us(lat['p90']),
            us(lat['p95']),
            us(lat['p99']),
            us(lat['max']),
            us(lat['mean']),
            '',
            '100%',
        )
    )
    headers = [
        'component',
        'median',
        'p90',
        'p95',
        'p99',
        'max',
        'mean',
        'sql mean',
        'crit.path',
    ]
    out.extend(fmt.table(headers, rows))
    out.append(
        'min end to end %s; times of %d successful boot requests'
        % (us(lat['min']), lat['count'])
    )
    out.extend(views.gap_lines(s))
    out.extend(glossary.legend_lines([r[0] for r in rows], headers, defined))
    if s['levels']:
        out.append('')
        out.append('mean time per component by concurrency at start:')
        names = [n for n in s['component_order'] if n != 'gap']
        top = sorted(
            names,
            key=lambda n: -sum(lv['mean_us'].get(n, 0) for lv in s['levels']),
        )[:6]
        levels = []
        for lv in s['levels']:
            levels.append(
                [lv['level'], lv['requests'], us(lv['latency']['median'])]
                + [us(lv['mean_us'].get(n, 0)) for n in top]
            )
        out.extend(
            fmt.table(
                ['in flight', 'boot requests', 'median e2e'] + top, levels
            )
        )
        out.extend(
            glossary.legend_lines(top, ['in flight', 'median e2e'], defined)
        )


# the colours of the in-flight chart's lines
IN_FLIGHT_COLOURS = {'every request': '#4e79a7', 'boot requests': '#e15759'}


def concurrency_chart(conc: dict) -> str:
    """API requests in flight over the run: every request (boots and
    others), and boots alone; its legend below."""
    lines = [
        (name, series, IN_FLIGHT_COLOURS[name])
        for name, series in (
            ('every request', conc.get('series_all')),
            ('boot requests', conc.get('series')),
        )
        if series
    ]
    if not lines:
        return ''
    svg = charts.lines_chart(
        lines,
        'time since the first request started',
        'requests in flight',
        x_unit='s',
        y_unit=None,
        y_integer=True,
        y_what='in flight',
    )
    return svg + charts.legend((c, n) for n, _s, c in lines)
