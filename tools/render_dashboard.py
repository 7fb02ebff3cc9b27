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
"""Render the Grafana dashboard's panels from a real Prometheus, without
Grafana: every panel of ``etc/grafana/instrument-dashboard.json`` (or
another dashboard of time series) in the dashboard's layout, its title,
unit and legend, drawn with matplotlib into one PNG or SVG.

Each target's ``expr`` is run with ``/api/v1/query_range`` over the
time span given, the dashboard's variables replaced as Grafana would
with "All" selected (``$service``, ``$instance``, ``$operation``:
``.*``; ``$__rate_interval``: ``--rate-interval``), and each series is
named by the target's ``legendFormat``.  The legend gives each series'
mean and max, as the dashboard's table legend does.  A panel whose
queries return no series says "No data", is listed on standard error
and, with ``--require-series``, makes the exit status 1.

``python tools/render_dashboard.py --prometheus http://127.0.0.1:9090
--start 2026-11-27T21:00:00Z --end 2026-11-27T21:05:00Z -o dash.png``;
``tools/dashboard_demo.py`` runs the demo under a Prometheus and calls
this (doc/source/metrics.rst).  matplotlib is not a requirement of the
library: ``tox -e dashboard-render`` has it.
"""

import argparse
import datetime
import json
import math
import os
import re
import sys
import time
import typing
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(ROOT, 'etc', 'grafana', 'instrument-dashboard.json')

# Grafana's variables with "All" selected (their allValue).
VARIABLES = {
    'service': '.*',
    'instance': '.*',
    'operation': '.*',
}
# Entries of a panel's legend at most; the rest are counted.
LEGEND_MAX = 5
# Grafana's dark theme.
BACKGROUND = '#111217'
PANEL = '#181b1f'
BORDER = '#2c3235'
TEXT = '#ccccdc'
MUTED = '#8e8e9c'
GRID = '#2c3235'
PALETTE = [
    '#73bf69',
    '#f2cc0c',
    '#8ab8ff',
    '#ff780a',
    '#f2495c',
    '#5794f2',
    '#b877d9',
    '#705da0',
    '#37872d',
    '#fade2a',
]
# One unit of Grafana's grid (24 columns; a panel of h=8 is 8 units
# high), in inches.
COLUMN_IN = 0.72
ROW_IN = 0.4


class Series(typing.NamedTuple):
    legend: str
    times: list  # seconds since the epoch
    values: list  # floats, NaN where Prometheus had NaN


class Panel(typing.NamedTuple):
    title: str
    unit: str
    grid: dict  # Grafana's gridPos: x, y, w, h
    kind: str  # 'row' or 'timeseries'
    series: list
    queries: list  # the PromQL run, variables replaced


def substitute(expr: str, rate_interval: str, variables: dict) -> str:
    """``expr`` with Grafana's variables replaced."""
    expr = expr.replace('$__rate_interval', rate_interval)
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace('${%s}' % name, value)
        expr = expr.replace('$' + name, value)
    return expr


def legend(fmt: str, labels: dict) -> str:
    """Grafana's ``legendFormat``: ``{{label}}`` replaced by the
    series' value of it (empty when it has none); without a format,
    the series' labels."""
    if not fmt:
        inner = ', '.join(
            '%s="%s"' % kv for kv in sorted(labels.items()) if kv[0] != 'job'
        )
        return '{%s}' % inner
    return re.sub(
        r'\{\{\s*(\w+)\s*\}\}', lambda m: labels.get(m.group(1), ''), fmt
    ).strip()


def query_range(
    url: str, expr: str, start: float, end: float, step: float
) -> list:
    """The matrix ``/api/v1/query_range`` answers for ``expr``."""
    params = urllib.parse.urlencode(
        {'query': expr, 'start': start, 'end': end, 'step': step}
    )
    with urllib.request.urlopen(  # noqa: S310 (the URL given)
        '%s/api/v1/query_range?%s' % (url.rstrip('/'), params), timeout=60
    ) as resp:
        doc = json.load(resp)
    if doc.get('status') != 'success':
        raise RuntimeError('%s: %s' % (expr, doc))
    return doc['data']['result']


def collect(
    url: str,
    dashboard: dict,
    start: float,
    end: float,
    step: float,
    rate_interval: str = '1m',
    variables: typing.Optional[dict] = None,
) -> list:
    """Every panel of ``dashboard`` (rows included, in order) with the
    series its targets returned between ``start`` and ``end``."""
    variables = dict(VARIABLES if variables is None else variables)
    panels = []
    for raw in dashboard['panels']:
        if raw.get('type') == 'row':
            panels.append(
                Panel(raw['title'], '', raw['gridPos'], 'row', [], [])
            )
            continue
        unit = raw.get('fieldConfig', {}).get('defaults', {}).get('unit', '')
        series = []
        queries = []
        for target in raw.get('targets', ()):
            expr = substitute(target['expr'], rate_interval, variables)
            queries.append(expr)
            for result in query_range(url, expr, start, end, step):
                times = [float(t) for t, _ in result['values']]
                values = [float(v) for _, v in result['values']]
                series.append(
                    Series(
                        legend(
                            target.get('legendFormat', ''), result['metric']
                        ),
                        times,
                        values,
                    )
                )
        panels.append(
            Panel(
                raw['title'],
                unit,
                raw['gridPos'],
                'timeseries',
                series,
                queries,
            )
        )
    return panels


def empty(panels: list) -> list:
    """The titles of the panels whose queries returned no series."""
    return [p.title for p in panels if p.kind != 'row' and not p.series]


def summary(panels: list) -> list:
    """Per panel: title, series and the points that are numbers."""
    return [
        {
            'title': p.title,
            'unit': p.unit,
            'series': len(p.series),
            'points': sum(
                1 for s in p.series for v in s.values if math.isfinite(v)
            ),
        }
        for p in panels
        if p.kind != 'row'
    ]


def _scaled(value: float, steps: list) -> str:
    for limit, div, suffix in steps:
        if abs(value) < limit:
            return '%.3g%s' % (value / div, suffix)
    limit, div, suffix = steps[-1]
    return '%.3g%s' % (value / div, suffix)


def format_value(value: float, unit: str) -> str:
    """A value in Grafana's unit ``unit`` (s, reqps, ops, short)."""
    if not math.isfinite(value):
        return '-'
    if value == 0:
        return '0' + (' s' if unit == 's' else '')
    if unit == 's':
        return _scaled(
            value,
            [
                (1e-3, 1e-6, ' µs'),
                (1.0, 1e-3, ' ms'),
                (60.0, 1.0, ' s'),
                (3600.0, 60.0, ' min'),
                (math.inf, 3600.0, ' h'),
            ],
        )
    text = _scaled(
        value,
        [
            (1e3, 1.0, ''),
            (1e6, 1e3, 'K'),
            (1e9, 1e6, 'M'),
            (math.inf, 1e9, 'G'),
        ],
    )
    return text + {'reqps': ' req/s', 'ops': ' ops/s'}.get(unit, '')


def _stats(values: list) -> tuple:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    return sum(finite) / len(finite), max(finite)


def draw(
    panels: list,
    path: str,
    title: str = '',
    start: float = 0.0,
    end: float = 0.0,
    dpi: int = 80,
    subtitle: str = '',
) -> None:
    """The panels in the dashboard's grid into ``path`` (PNG or SVG by
    its extension), under ``title`` and ``subtitle``."""
    import matplotlib

    matplotlib.use('Agg')
    from matplotlib import dates as mdates
    from matplotlib import patches
    from matplotlib import pyplot
    from matplotlib import ticker

    header = 2.0  # grid units above the first row, for the titles
    bottom = max(p.grid['y'] + p.grid['h'] for p in panels) + header
    width_in = 24 * COLUMN_IN
    height_in = bottom * ROW_IN
    fig = pyplot.figure(figsize=(width_in, height_in), facecolor=BACKGROUND)

    def box(x, y, w, h):
        # grid units (y down from the top) to figure fractions
        return (
            x / 24,
            1 - (y + header + h) / bottom,
            w / 24,
            h / bottom,
        )

    span = ''
    if start and end:
        span = '%s to %s UTC' % (
            datetime.datetime.fromtimestamp(start, datetime.UTC).strftime(
                '%Y-%m-%d %H:%M:%S'
            ),
            datetime.datetime.fromtimestamp(end, datetime.UTC).strftime(
                '%H:%M:%S'
            ),
        )
    fig.text(
        0.005,
        1 - 0.6 / bottom,
        title,
        color=TEXT,
        fontsize=15,
        va='center',
        weight='bold',
    )
    fig.text(
        0.995, 1 - 0.6 / bottom, span, color=MUTED, fontsize=11, ha='right'
    )
    fig.text(
        0.005,
        1 - 1.45 / bottom,
        subtitle,
        color=MUTED,
        fontsize=10,
        va='center',
    )
    pad = 0.12  # grid units between panels
    for panel in panels:
        g = panel.grid
        if panel.kind == 'row':
            x0, y0, _, h = box(g['x'], g['y'], g['w'], g['h'])
            fig.text(
                x0 + 0.004,
                y0 + h / 2,
                panel.title,
                color=TEXT,
                fontsize=12.5,
                weight='bold',
                va='center',
            )
            continue
        x0, y0, w, h = box(
            g['x'] + pad, g['y'] + pad, g['w'] - 2 * pad, g['h'] - 2 * pad
        )
        fig.patches.append(
            patches.Rectangle(
                (x0, y0),
                w,
                h,
                transform=fig.transFigure,
                facecolor=PANEL,
                edgecolor=BORDER,
                linewidth=1,
                # under the plot (the figure draws its axes first)
                zorder=-1,
            )
        )
        fig.text(
            x0 + 0.004,
            y0 + h - 0.35 / bottom,
            panel.title,
            color=TEXT,
            fontsize=10.5,
            weight='bold',
            va='center',
        )
        # the plot in the top 60 % under the title, the legend below
        legend_h = 0.38 * h
        ax = fig.add_axes(
            (
                x0 + 0.045,
                y0 + legend_h,
                w - 0.055,
                h - legend_h - 0.8 / bottom,
            ),
            facecolor=PANEL,
        )
        for side in ax.spines.values():
            side.set_visible(False)
        ax.tick_params(colors=MUTED, labelsize=8.5, length=0)
        ax.grid(True, color=GRID, linewidth=0.6)
        ax.yaxis.set_major_formatter(
            ticker.FuncFormatter(
                lambda v, _pos, unit=panel.unit: format_value(v, unit)
            )
        )
        ax.yaxis.set_major_locator(ticker.MaxNLocator(4))
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(maxticks=6))
        ax.xaxis.set_major_formatter(mdates.DateFormatter('%H:%M:%S'))
        if start and end:
            ax.set_xlim(
                datetime.datetime.fromtimestamp(start, datetime.UTC),
                datetime.datetime.fromtimestamp(end, datetime.UTC),
            )
        if not panel.series:
            ax.text(
                0.5,
                0.5,
                'No data',
                transform=ax.transAxes,
                color=MUTED,
                fontsize=13,
                ha='center',
                va='center',
            )
            ax.set_yticks([])
            continue
        # the legend's order: Grafana's "sort desc", by mean
        ranked = sorted(panel.series, key=_rank)
        handles = []
        labels = []
        any_finite = False
        for n, s in enumerate(ranked):
            color = PALETTE[n % len(PALETTE)]
            times = [
                datetime.datetime.fromtimestamp(t, datetime.UTC)
                for t in s.times
            ]
            (line,) = ax.plot(times, s.values, color=color, linewidth=1.3)
            mean, peak = _stats(s.values)
            any_finite = any_finite or math.isfinite(mean)
            if n < LEGEND_MAX:
                handles.append(line)
                labels.append(
                    '%s   mean %s   max %s'
                    % (
                        _shorten(s.legend, 58),
                        format_value(mean, panel.unit),
                        format_value(peak, panel.unit),
                    )
                )
        if not any_finite:
            ax.set_yticks([])
        elif max(_stats(s.values)[1] for s in ranked) <= 0:
            # all 0: an axis of 0 to 1, not of matplotlib's +-0.05
            ax.set_ylim(0, 1)
        if len(ranked) > LEGEND_MAX:
            handles.append(patches.Patch(color=PANEL))
            labels.append('... %d more series' % (len(ranked) - LEGEND_MAX))
        if ax.get_ylim()[0] < 0:
            ax.set_ylim(bottom=0)
        leg = fig.legend(
            handles,
            labels,
            loc='upper left',
            bbox_to_anchor=(x0 + 0.004, y0 + legend_h - 0.45 / bottom),
            bbox_transform=fig.transFigure,
            frameon=False,
            fontsize=8.5,
            labelcolor=TEXT,
            handlelength=1.2,
            borderaxespad=0,
            labelspacing=0.25,
        )
        leg.set_zorder(3)
    if path.lower().endswith('.png'):
        # a palette of 256 colours: a third of the size, the same look
        import io

        from PIL import Image

        buf = io.BytesIO()
        fig.savefig(buf, format='png', dpi=dpi, facecolor=BACKGROUND)
        pyplot.close(fig)
        buf.seek(0)
        with Image.open(buf) as image:
            image.convert('RGB').quantize(colors=256).save(path, optimize=True)
        return
    fig.savefig(path, dpi=dpi, facecolor=BACKGROUND)
    pyplot.close(fig)


def _rank(series: Series) -> float:
    """Grafana's legend sorted by mean, descending: the key."""
    mean = _stats(series.values)[0]
    return -mean if math.isfinite(mean) else math.inf


def _shorten(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 3] + '...'


def parse_time(text: str) -> float:
    """Seconds since the epoch, or an ISO 8601 time (UTC if it has no
    zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    when = datetime.datetime.fromisoformat(text.replace('Z', '+00:00'))
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='render_dashboard.py',
        description=__doc__.split('\n\n')[0].replace('\n', ' '),
    )
    parser.add_argument(
        '--prometheus',
        required=True,
        metavar='URL',
        help='the Prometheus to query, e.g. http://127.0.0.1:9090',
    )
    parser.add_argument(
        '--dashboard',
        default=DASHBOARD,
        help='the dashboard JSON (default: etc/grafana/'
        'instrument-dashboard.json)',
    )
    parser.add_argument(
        '--start', type=parse_time, help='default: --end less --last'
    )
    parser.add_argument('--end', type=parse_time, help='default: now')
    parser.add_argument(
        '--last',
        type=float,
        default=900.0,
        metavar='SECONDS',
        help='the span without --start (default 900)',
    )
    parser.add_argument(
        '--step',
        type=float,
        default=None,
        metavar='SECONDS',
        help='resolution (default: the span / 240, at least 1)',
    )
    parser.add_argument(
        '--rate-interval',
        default='1m',
        help='what $__rate_interval stands for (default 1m; Grafana '
        'takes 4 scrape intervals at least)',
    )
    parser.add_argument(
        '--var',
        action='append',
        default=[],
        metavar='NAME=VALUE',
        help='a dashboard variable\'s value (default: all, .*)',
    )
    parser.add_argument(
        '--title', default=None, help='default: the dashboard\'s title'
    )
    parser.add_argument(
        '--subtitle', default='', help='a line under the title'
    )
    parser.add_argument(
        '--dpi', type=int, default=80, help='PNG resolution (default 80)'
    )
    parser.add_argument(
        '--summary',
        metavar='PATH',
        help='write per panel its series and points as JSON '
        '(- for standard output)',
    )
    parser.add_argument(
        '--require-series',
        action='store_true',
        help='exit 1 when a panel got no series',
    )
    parser.add_argument(
        '-o',
        '--output',
        required=True,
        help='the image: .png or .svg',
    )
    return parser


def main(argv: typing.Optional[list] = None) -> int:
    args = build_parser().parse_args(argv)
    end = args.end if args.end is not None else time.time()
    start = args.start if args.start is not None else end - args.last
    if start >= end:
        sys.stderr.write('render_dashboard.py: --start is not before --end\n')
        return 2
    step = args.step or max(1.0, round((end - start) / 240.0))
    variables = dict(VARIABLES)
    for item in args.var:
        name, _, value = item.partition('=')
        variables[name] = value
    with open(args.dashboard, encoding='utf-8') as f:
        dashboard = json.load(f)
    panels = collect(
        args.prometheus,
        dashboard,
        start,
        end,
        step,
        args.rate_interval,
        variables,
    )
    draw(
        panels,
        args.output,
        args.title if args.title is not None else dashboard.get('title', ''),
        start,
        end,
        args.dpi,
        args.subtitle,
    )
    if args.summary:
        text = json.dumps(summary(panels), indent=2) + '\n'
        if args.summary == '-':
            sys.stdout.write(text)
        else:
            with open(args.summary, 'w', encoding='utf-8') as f:
                f.write(text)
    missing = empty(panels)
    for name in missing:
        sys.stderr.write('render_dashboard.py: no data: %s\n' % name)
    print(
        '%s: %d panels, %d without data'
        % (args.output, len(summary(panels)), len(missing)),
        file=sys.stderr,
    )
    return 1 if missing and args.require_series else 0


if __name__ == '__main__':
    sys.exit(main())
