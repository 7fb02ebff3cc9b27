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
"""The sweep (``analysis.sweep``) as one self-contained HTML page.

Per operation: the elapsed-time stack against the load (one bar per
run: the mean time per finished request by component, retried and
failed requests apart; drawn by ``charts.stacked_bars`` in the
components' colours of the report, ``views.color``), the throughput
against the load (``charts.lines_chart``), a table of the rates and the
saturation point; then each service's CPU and memory per run.  No
script, nothing fetched; every string from the input is escaped.
"""

from instrument.analysis import sweep
from instrument.analysis.render import charts
from instrument.analysis.render import fmt
from instrument.analysis.render import html as report_html
from instrument.analysis.render import views

# the colours of the two series that are not components
APART = {sweep.RETRIED: '#bbbbbb', sweep.FAILED: '#b00000'}


def _load(run: dict) -> str:
    return sweep.run_value(run)


def _table(headers: list, rows: list) -> str:
    out = [
        '<table><tr>%s</tr>'
        % ''.join('<th>%s</th>' % fmt.esc(h) for h in headers)
    ]
    for row in rows:
        out.append(
            '<tr>%s</tr>'
            % ''.join(
                '<td%s>%s</td>'
                % (' class="l"' if i == 0 else '', fmt.esc(str(c)))
                for i, c in enumerate(row)
            )
        )
    out.append('</table>')
    return ''.join(out)


def operation_html(result: dict, op: str, extra: dict) -> list:
    """The stack, the throughput and the rates of ``op``."""
    key = result['key']
    runs = [r for r in result['runs'] if op in r['operations']]
    names = sweep.stack_order(result, op)
    colours = {n: APART.get(n) or views.color(n, extra) for n in names}
    out = ['<h2>%s</h2>' % fmt.esc(op)]
    if op in result['missing']:
        out.append(
            '<p class="note">not in: %s</p>'
            % fmt.esc(', '.join(result['missing'][op]))
        )
    sat = result['saturation'][op]
    out.append(
        '<p%s>%s</p>'
        % (
            '' if sat is None else ' class="bad"',
            fmt.esc(
                sweep.saturation_text(
                    op, sat, key, result.get('categorical', False)
                )
            ),
        )
    )
    out.append(
        charts.stacked_bars(
            [_load(r) for r in runs],
            [
                (n, [r['operations'][op]['stack_us'].get(n, 0) for r in runs])
                for n in names
            ],
            colours,
            'mean time per finished %s' % op,
            '%s (n: finished requests)' % key,
            unit='us',
            notes=['n=%d' % r['operations'][op]['finished'] for r in runs],
        )
    )
    out.append(charts.legend((colours[n], n) for n in reversed(names)))
    loads = [r['load'] for r in runs]
    if all(v is not None for v in loads):
        out.append(
            charts.lines_chart(
                [
                    (
                        'throughput',
                        [
                            (r['load'], r['operations'][op]['throughput_rps'])
                            for r in runs
                        ],
                        '#4e79a7',
                    )
                ],
                key,
                'finished requests per second',
                x_unit=None,
                y_unit=None,
            )
        )
    out.append(
        _table(
            [
                key,
                'requests',
                'finished',
                'req/s',
                'success',
                'failure',
                'retry',
                'median latency (s)',
            ],
            [
                [
                    _load(r),
                    f['requests'],
                    f['finished'],
                    '%.2f' % f['throughput_rps'],
                    sweep.pct(f['success_rate']),
                    sweep.pct(f['failure_rate']),
                    sweep.pct(f['retry_rate']),
                    sweep.secs(f['latency_median_us']),
                ]
                for r in runs
                for f in [r['operations'][op]]
            ],
        )
    )
    comps = [n for n in names if n not in sweep.APART]
    out.append(
        _table(
            ['component: median / mean critical path (s), share']
            + [_load(r) for r in runs],
            [
                [n]
                + [
                    '%s / %s, %s'
                    % (
                        sweep.secs(c['median_us']),
                        sweep.secs(c['mean_us']),
                        sweep.pct(c['share']),
                    )
                    if c
                    else '-'
                    for r in runs
                    for c in [r['operations'][op]['components'].get(n)]
                ]
                for n in comps
            ],
        )
    )
    return out


def resources_html(result: dict) -> list:
    """Each service's CPU and memory per run."""
    runs = result['runs']
    services = sorted({s for r in runs for s in r['resources']})
    if not services:
        return []
    rows = []
    for svc in services:
        for what, m, p, d in (
            ('CPU (cores)', 'cpu_mean', 'cpu_peak', 2),
            ('RSS (MB)', 'rss_mean_mb', 'rss_peak_mb', 0),
        ):
            cells = []
            for r in runs:
                res = r['resources'].get(svc)
                cells.append(
                    '%s / %s' % (sweep.num(res[m], d), sweep.num(res[p], d))
                    if res
                    else '-'
                )
            rows.append(['%s %s' % (svc, what)] + cells)
    return [
        '<h2>resources while requests ran (mean / peak)</h2>',
        _table(
            ['service'] + ['%s=%s' % (result['key'], _load(r)) for r in runs],
            rows,
        ),
    ]


def render(result: dict, title: str = 'instrument-report sweep') -> str:
    """The HTML page of the sweep ``result``."""
    key = result['key']
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<title>%s</title><style>%s</style></head><body>'
        % (fmt.esc(title), report_html.CSS + charts.CSS),
        '<h1>%s</h1>' % fmt.esc(title),
    ]
    same = sweep.same_labels(result['runs'])
    if same:
        out.append(
            '<p class="note">every run: %s</p>'
            % fmt.esc(', '.join('%s=%s' % kv for kv in same.items()))
        )
    out.append(
        _table(
            ['%s' % key, 'run', 'labels', 'nova'],
            [
                [
                    _load(r),
                    r['name'],
                    ', '.join(
                        '%s=%s' % kv
                        for kv in r['label'].items()
                        if kv[0] not in same
                    ),
                    ', '.join(r['releases']) or '-',
                ]
                for r in result['runs']
            ],
        )
    )
    extra: dict = {}
    for op in result['operations']:
        out.extend(operation_html(result, op, extra))
    out.extend(resources_html(result))
    out.append('</body></html>')
    return '\n'.join(out) + '\n'
