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
"""Chart helpers for the HTML report: inline SVG, no script, no library.

Every chart takes its data plus axis titles and units and returns one
``<svg>`` element that scales down to the page's width (``viewBox``).
Value axes get round ticks (1, 2, 2.5 or 5 times a power of ten) in one
unit that the axis title states (``time (ms)``), never one unit per
tick.  Legends are HTML (``legend``) so they wrap on a narrow page.
Text drawn on a coloured bar takes black or white, whichever contrasts
more (``text_on``); ``contrast`` is the WCAG 2 contrast ratio.

Used by the HTML parts of the sections; the functions are meant for
any section that plots a series: ``stacked_bars`` (components per group),
``line_chart`` (a value over time), ``hbars`` (a ranked list, e.g. the
top waits), ``legend``.
"""

import math
import typing

from instrument.analysis.render import fmt
from instrument.analysis.render import glossary

# The text colour of the page and the background of every chart.
INK = '#222222'
PAPER = '#ffffff'
MUTED = '#595959'  # secondary text: 7:1 on white

CSS = """
.chart{max-width:100%;height:auto;display:block}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;
margin:4px 0 12px;max-width:980px}
.legend span{white-space:nowrap}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;
vertical-align:-1px;box-sizing:border-box}"""

# Units of a time axis, from microseconds.
TIME_UNITS = ((1e6, 's'), (1e3, 'ms'), (1.0, 'us'))


def nice_ticks(vmax: float, count: int = 5, integer: bool = False) -> list:
    """Round ticks from 0 to at least ``vmax``: about ``count`` steps of
    1, 2, 2.5 or 5 times a power of ten (``nice_ticks(21.7)`` is
    ``[0, 5, 10, 15, 20, 25]``); whole steps only when ``integer`` (a
    count)."""
    if not vmax or vmax <= 0 or not math.isfinite(vmax):
        return [0.0, 1.0]
    raw = vmax / max(count, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = mag * 10
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * mag >= raw * (1 - 1e-9) and (
            not integer or (m * mag).is_integer()
        ):
            step = m * mag
            break
    if integer:
        step = max(step, 1.0)
    n = math.ceil(vmax / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def fmt_tick(value: float) -> str:
    """A tick label: no trailing zeros (``2.5``, ``10``, ``0.25``)."""
    if value == int(value):
        return '%d' % value
    return ('%.6f' % value).rstrip('0').rstrip('.')


def time_unit(vmax_us: float) -> tuple:
    """``(divisor, unit)`` for a time axis whose largest value is
    ``vmax_us`` microseconds: the largest unit in which it is >= 1."""
    for div, unit in TIME_UNITS:
        if vmax_us >= div:
            return div, unit
    return 1.0, 'us'


def axis(
    vmax: float,
    unit: typing.Optional[str] = None,
    count: int = 5,
    integer: bool = False,
) -> tuple:
    """``(ticks, divisor, unit)`` of a value axis up to ``vmax``.

    ``unit`` ``'us'`` or ``'s'`` is a time (given in that unit), shown
    in the unit ``time_unit`` picks; any other ``unit`` is kept as
    given (``None``: no unit); ``integer``: whole ticks (a count).
    Ticks are in the shown unit; divide a value by ``divisor`` to place
    it."""
    if unit in ('us', 's'):
        scale = 1e6 if unit == 's' else 1.0
        div, shown = time_unit(vmax * scale)
        div = div / scale
        return nice_ticks(vmax / div, count), div, shown
    return nice_ticks(vmax, count, integer), 1.0, unit


def titled(title: str, unit: typing.Optional[str]) -> str:
    """An axis title with its unit: ``time (ms)``."""
    return '%s (%s)' % (title, unit) if unit else title


def _lin(rgb: int) -> float:
    c = rgb / 255.0
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _rgb(colour: str) -> tuple:
    c = colour.lstrip('#')
    if len(c) == 3:
        c = ''.join(ch * 2 for ch in c)
    return tuple(int(c[i : i + 2], 16) for i in (0, 2, 4))


def luminance(colour: str) -> float:
    """The WCAG 2 relative luminance of ``#rrggbb`` (or ``#rgb``)."""
    r, g, b = (_lin(v) for v in _rgb(colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg: str, bg: str) -> float:
    """The WCAG 2 contrast ratio of two colours, 1 to 21."""
    a, b = luminance(fg), luminance(bg)
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def blend(colour: str, alpha: float, under: str = PAPER) -> str:
    """``colour`` drawn with opacity ``alpha`` over ``under``."""
    top, bottom = _rgb(colour), _rgb(under)
    return '#%02x%02x%02x' % tuple(
        round(alpha * t + (1 - alpha) * b)
        for t, b in zip(top, bottom, strict=True)
    )


def lab(colour: str) -> tuple:
    """CIE L*a*b* (D65) of an sRGB ``#rrggbb``."""
    r, g, b = (_lin(v) for v in _rgb(colour))
    x = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047
    y = 0.2126729 * r + 0.7151522 * g + 0.0721750 * b
    z = (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def ciede2000(one: str, other: str) -> float:
    """The CIEDE2000 colour difference of two ``#rrggbb`` colours: about
    1 is just noticeable side by side; colours stacked next to each
    other in a chart want 15 or more."""
    l1, a1, b1 = lab(one)
    l2, a2, b2 = lab(other)
    c7 = ((math.hypot(a1, b1) + math.hypot(a2, b2)) / 2) ** 7
    g = 0.5 * (1 - math.sqrt(c7 / (c7 + 25**7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1 = math.degrees(math.atan2(b1, a1)) % 360 if c1 else 0.0
    h2 = math.degrees(math.atan2(b2, a2)) % 360 if c2 else 0.0
    dh = 0.0
    if c1 * c2:
        dh = h2 - h1
        dh = dh - 360 if dh > 180 else dh + 360 if dh < -180 else dh
    d_h = 2 * math.sqrt(c1 * c2) * math.sin(math.radians(dh) / 2)
    lm, cm = (l1 + l2) / 2, (c1 + c2) / 2
    if not c1 * c2:
        hm = h1 + h2
    elif abs(h1 - h2) <= 180:
        hm = (h1 + h2) / 2
    else:
        hm = (h1 + h2 + (360 if h1 + h2 < 360 else -360)) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(hm - 30))
        + 0.24 * math.cos(math.radians(2 * hm))
        + 0.32 * math.cos(math.radians(3 * hm + 6))
        - 0.20 * math.cos(math.radians(4 * hm - 63))
    )
    rot = 30 * math.exp(-(((hm - 275) / 25) ** 2))
    rc = 2 * math.sqrt(cm**7 / (cm**7 + 25**7))
    sl = 1 + 0.015 * (lm - 50) ** 2 / math.sqrt(20 + (lm - 50) ** 2)
    sc = 1 + 0.045 * cm
    sh = 1 + 0.015 * cm * t
    rt = -math.sin(math.radians(2 * rot)) * rc
    dl, dc = (l2 - l1) / sl, (c2 - c1) / sc
    dhs = d_h / sh
    return math.sqrt(dl * dl + dc * dc + dhs * dhs + rt * dc * dhs)


def text_on(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (at least
    4.58:1 for any fill)."""
    return (
        '#000000'
        if contrast('#000000', fill) >= contrast('#ffffff', fill)
        else '#ffffff'
    )


def legend(items: typing.Iterable[tuple]) -> str:
    """An HTML legend: ``(colour, label)`` or ``(colour, label, css)``
    items; ``css`` styles the swatch (e.g. an outline); a component's
    entry has its definition as a tooltip (``glossary``)."""
    out = ['<div class="legend">']
    for item in items:
        colour, label = item[0], item[1]
        style = 'background:%s' % colour if colour else ''
        if len(item) > 2 and item[2]:
            style += (';' if style else '') + item[2]
        out.append(
            '<span%s><i style="%s"></i>%s</span>'
            % (
                fmt.tip(glossary.component(label)),
                fmt.esc(style),
                fmt.esc(label),
            )
        )
    out.append('</div>')
    return ''.join(out)


def svg_open(width: float, height: float, label: str) -> str:
    """An ``<svg>`` that scales down with the page, ``label`` for
    screen readers."""
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" class="chart" '
        'viewBox="0 0 %d %d" width="%d" height="%d" role="img" '
        'aria-label="%s" font-family="sans-serif">'
        % (width, height, width, height, fmt.esc(label))
    )


def y_axis(
    parts: list,
    ticks: list,
    left: float,
    right: float,
    top: float,
    bottom: float,
    title: str,
) -> typing.Callable:
    """Grid lines, tick labels and a rotated title of a value axis from
    ``bottom`` (0) to ``top`` (the last tick); returns the function
    that maps a value (in ticks' unit) to y."""
    span = ticks[-1] or 1.0

    def to_y(v: float) -> float:
        return bottom - (bottom - top) * v / span

    for t in ticks:
        y = to_y(t)
        parts.append(
            '<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" '
            'stroke="%s"/>'
            % (left, right, y, y, '#888888' if t == 0 else '#e4e4e4')
        )
        parts.append(
            '<text class="ytick" x="%.1f" y="%.1f" '
            'font-size="12" fill="%s" text-anchor="end">%s'
            '</text>' % (left - 6, y + 4, INK, fmt.esc(fmt_tick(t)))
        )
    mid = (top + bottom) / 2
    parts.append(
        '<text class="ytitle" x="14" y="%.1f" font-size="12" '
        'fill="%s" text-anchor="middle" '
        'transform="rotate(-90 14 %.1f)">'
        '%s</text>' % (mid, INK, mid, fmt.esc(title))
    )
    return to_y


def x_axis(
    parts: list,
    ticks: list,
    left: float,
    right: float,
    y: float,
    title: str,
    grid_top: typing.Optional[float] = None,
    width: typing.Optional[float] = None,
) -> typing.Callable:
    """Tick marks, labels and a title of a value axis along ``y`` from
    ``left`` (0) to ``right`` (the last tick); vertical grid lines up to
    ``grid_top`` when given.  Returns the value-to-x function.  With
    ``width`` (a chart that stretches: ``stretched_open``) the x of
    each part is written as a share of it (``12.5%``)."""
    span = ticks[-1] or 1.0
    at = xs(width)

    def to_x(v: float) -> float:
        return left + (right - left) * v / span

    parts.append(
        '<line x1="%s" x2="%s" y1="%.1f" y2="%.1f" '
        'stroke="#888888"/>' % (at(left), at(right), y, y)
    )
    for t in ticks:
        x = at(to_x(t))
        if grid_top is not None:
            parts.append(
                '<line x1="%s" x2="%s" y1="%.1f" y2="%.1f" '
                'stroke="#e4e4e4"/>' % (x, x, grid_top, y)
            )
        parts.append(
            '<line x1="%s" x2="%s" y1="%.1f" y2="%.1f" '
            'stroke="#888888"/>' % (x, x, y, y + 4)
        )
        parts.append(
            '<text class="xtick" x="%s" y="%.1f" '
            'font-size="12" fill="%s" text-anchor="middle">%s'
            '</text>' % (x, y + 17, INK, fmt.esc(fmt_tick(t)))
        )
    parts.append(
        '<text class="xtitle" x="%s" y="%.1f" font-size="12" '
        'fill="%s" text-anchor="middle">%s</text>'
        % (at((left + right) / 2), y + 34, INK, fmt.esc(title))
    )
    return to_x


def xs(width: typing.Optional[float]) -> typing.Callable[[float], str]:
    """How an x is written: ``12.5`` px, or with ``width`` its share of
    it, ``1.420%`` (a chart that stretches)."""
    if width is None:
        return lambda x: '%.1f' % x
    return lambda x: '%.3f%%' % (100.0 * x / width)


def stretched_open(width: float, height: float, label: str) -> str:
    """An ``<svg>`` without a viewBox whose x are shares of its width
    (``xs``): it is ``width`` px wide at most and narrower with the
    page, and a zoom (``zoomable``) widens it, text unscaled, by the
    factor chosen; ``height`` px high whatever its width."""
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" class="chart '
        'stretch" width="%d" height="%d" style="height:%dpx;'
        'max-width:min(100%%,%dpx)" role="img" aria-label="%s" '
        'font-family="sans-serif">'
        % (width, height, height, width, fmt.esc(label))
    )


# Zoom levels of a stretched chart, and the CSS that applies them: no
# script; radio buttons, the chart in a box that scrolls when wider.
ZOOMS = (1, 2, 4, 8)
ZOOM_CSS = ''.join(
    [
        '.zoom{margin:4px 0}.zoom>input{position:absolute;opacity:0}',
        '.zoom>label{font-size:12px;border:1px solid #bbb;padding:0 6px;',
        'margin-right:3px;cursor:pointer;user-select:none}',
        '.zoom>input:checked+label{background:#e4e4e4;font-weight:bold}',
        '.zoom>input:focus-visible+label{outline:2px solid #4e79a7}',
        '.zbox{overflow-x:auto}',
    ]
    + [
        '.zoom>.z%d:checked~.zbox>.stretch{width:%d%%;max-width:none!important}'
        % (z, 100 * z)
        for z in ZOOMS[1:]
    ]
)


def zoomable(chart: str, name: str) -> str:
    """``chart`` (a ``stretched_open`` SVG, its legend after it) with
    zoom buttons (``ZOOMS``) above it; ``name`` unique in the page."""
    buttons = []
    for z in ZOOMS:
        ident = '%s-z%d' % (name, z)
        buttons.append(
            '<input type="radio" class="z%d" name="%s" id="%s"%s>'
            '<label for="%s" title="time axis %d times as wide">%d&times;'
            '</label>'
            % (
                z,
                fmt.esc(name),
                fmt.esc(ident),
                ' checked' if z == 1 else '',
                fmt.esc(ident),
                z,
                z,
            )
        )
    svg, _, rest = chart.partition('</svg>')
    return (
        '<div class="zoom"><span class="note">zoom </span>%s'
        '<div class="zbox">%s</svg></div></div>%s'
        % (''.join(buttons), svg, rest)
    )


def stacked_bars(
    groups: list,
    series: list,
    colours: dict,
    y_title: str,
    x_title: str,
    unit: typing.Optional[str] = 'us',
    notes: typing.Optional[list] = None,
    width: int = 760,
    height: int = 340,
) -> str:
    """Vertical bars, one per group, each stacking the series' values.

    ``groups``: the labels under the bars; ``series``: ``(name,
    values)`` with one value per group, stacked bottom-up in this
    order; ``colours``: name -> ``#rrggbb``; ``unit``: of the values
    (``'us'``/``'s'`` pick a readable time unit for the axis, which the
    y title states); ``notes``: a second, muted line under each group
    label (e.g. ``n=12``).  Hover a segment for its name and value.
    The legend is separate (``legend``)."""
    totals = [
        sum(vals[i] or 0 for _n, vals in series) for i in range(len(groups))
    ]
    ticks, div, shown = axis(max(totals, default=0), unit)
    left, right, top, bottom = 64, width - 10, 14, height - 58
    parts = [svg_open(width, height, titled(y_title, shown))]
    to_y = y_axis(
        parts, ticks, left, right, top, bottom, titled(y_title, shown)
    )
    step = (right - left) / max(len(groups), 1)
    bw = min(80.0, step * 0.7)
    for i, group in enumerate(groups):
        x = left + step * i + (step - bw) / 2
        base = 0.0
        for name, vals in series:
            v = vals[i] or 0
            if v <= 0:
                continue
            y1, y0 = to_y((base + v) / div), to_y(base / div)
            base += v
            if unit in ('us', 's'):
                value = fmt.fmt_us(v * (1e6 if unit == 's' else 1))
            else:
                value = '%s %s' % (fmt_tick(round(v, 3)), unit or '')
            parts.append(
                '<rect x="%.1f" y="%.1f" width="%.1f" '
                'height="%.1f" fill="%s"><title>%s: %s</title>'
                '</rect>'
                % (
                    x,
                    y1,
                    bw,
                    max(y0 - y1, 0.0),
                    colours.get(name, '#999999'),
                    fmt.esc(name),
                    fmt.esc(value.strip()),
                )
            )
        parts.append(
            '<text x="%.1f" y="%.1f" font-size="12" fill="%s" '
            'text-anchor="middle">%s</text>'
            % (x + bw / 2, bottom + 16, INK, fmt.esc(group))
        )
        if notes:
            parts.append(
                '<text x="%.1f" y="%.1f" font-size="11" '
                'fill="%s" text-anchor="middle">%s</text>'
                % (x + bw / 2, bottom + 30, MUTED, fmt.esc(notes[i]))
            )
    parts.append(
        '<text class="xtitle" x="%.1f" y="%.1f" font-size="12" '
        'fill="%s" text-anchor="middle">%s</text>'
        % ((left + right) / 2, height - 8, INK, fmt.esc(x_title))
    )
    parts.append('</svg>')
    return ''.join(parts)


def line_chart(
    points: list,
    x_title: str,
    y_title: str,
    x_unit: typing.Optional[str] = 's',
    y_unit: typing.Optional[str] = None,
    colour: str = '#4e79a7',
    width: int = 760,
    height: int = 220,
    y_integer: bool = False,
) -> str:
    """A line through ``(x, y)`` points (x ascending, from 0) with both
    axes ticked and titled; units as in ``axis`` (``y_integer``: y is
    a count, whole ticks only)."""
    if not points:
        return ''
    xt, xdiv, xshown = axis(max(p[0] for p in points), x_unit)
    yt, ydiv, yshown = axis(max(p[1] for p in points), y_unit, 4, y_integer)
    left, right, top, bottom = 64, width - 16, 12, height - 44
    parts = [svg_open(width, height, titled(y_title, yshown))]
    to_y = y_axis(parts, yt, left, right, top, bottom, titled(y_title, yshown))
    to_x = x_axis(parts, xt, left, right, bottom, titled(x_title, xshown))
    parts.append(
        '<polyline fill="none" stroke="%s" stroke-width="1.5" '
        'points="%s"/>'
        % (
            colour,
            ' '.join(
                '%.1f,%.1f' % (to_x(x / xdiv), to_y(y / ydiv))
                for x, y in points
            ),
        )
    )
    parts.append('</svg>')
    return ''.join(parts)


# hover markers per line at most (each a point with its value)
MAX_HOVER = 120


def _value(v: float, unit: typing.Optional[str]) -> str:
    """A value as a hover shows it, in its unit."""
    if unit in ('us', 's'):
        return fmt.fmt_us(v * (1e6 if unit == 's' else 1))
    return ('%s %s' % (fmt_tick(round(v, 3)), unit or '')).strip()


def lines_chart(
    lines: list,
    x_title: str,
    y_title: str,
    x_unit: typing.Optional[str] = 's',
    y_unit: typing.Optional[str] = None,
    width: int = 760,
    height: int = 220,
    y_integer: bool = False,
    marks: typing.Sequence[tuple] = (),
    y_what: typing.Optional[str] = None,
) -> str:
    """Lines through ``(x, y)`` points (x ascending, from 0), one per
    ``(name, points, colour)`` of ``lines`` (y None: no value there),
    with both axes ticked and titled (units as in ``axis``; ``y_integer``:
    a count).  Hover a line for its name, a point for its value (at most
    ``MAX_HOVER`` points a line); ``marks``: ``(x, label, colour)``
    vertical lines (their label on hover), in the x unit of the points.
    ``y_what`` names the value in a hover (default ``y_title``).  The
    legend is separate (``legend``)."""
    pts = [p for _n, points, _c in lines for p in points if p[1] is not None]
    if not pts:
        return ''
    xmax = max([p[0] for p in pts] + [m[0] for m in marks])
    xt, xdiv, xshown = axis(xmax, x_unit)
    yt, ydiv, yshown = axis(max(p[1] for p in pts), y_unit, 4, y_integer)
    left, right, top, bottom = 64, width - 16, 12, height - 44
    parts = [svg_open(width, height, titled(y_title, yshown))]
    to_y = y_axis(parts, yt, left, right, top, bottom, titled(y_title, yshown))
    to_x = x_axis(parts, xt, left, right, bottom, titled(x_title, xshown))
    what = y_what or y_title
    for x, label, colour in marks:
        xx = to_x(x / xdiv)
        parts.append(
            '<line class="mark" x1="%.1f" x2="%.1f" y1="%.1f" '
            'y2="%.1f" stroke="%s" stroke-width="1.5">'
            '<title>%s</title></line>'
            % (xx, xx, top, bottom, colour, fmt.esc(label))
        )
    for name, points, colour in lines:
        runs: list = [[]]
        for x, y in points:
            if y is None:
                if runs[-1]:
                    runs.append([])
                continue
            runs[-1].append('%.1f,%.1f' % (to_x(x / xdiv), to_y(y / ydiv)))
        for run in runs:
            if run:
                parts.append(
                    '<polyline fill="none" stroke="%s" '
                    'stroke-width="1.5" points="%s"><title>%s'
                    '</title></polyline>'
                    % (colour, ' '.join(run), fmt.esc(name))
                )
        shown = [p for p in points if p[1] is not None]
        step = max(1, math.ceil(len(shown) / MAX_HOVER))
        for x, y in shown[::step]:
            parts.append(
                '<circle class="hover" cx="%.1f" cy="%.1f" r="4" '
                'fill="%s" fill-opacity="0" stroke="none">'
                '<title>%s at %s: %s %s</title></circle>'
                % (
                    to_x(x / xdiv),
                    to_y(y / ydiv),
                    colour,
                    fmt.esc(name),
                    fmt.esc(_value(x, x_unit)),
                    fmt.esc(_value(y, y_unit)),
                    fmt.esc(what),
                )
            )
    parts.append('</svg>')
    return ''.join(parts)


def hbars(
    items: list,
    x_title: str,
    unit: typing.Optional[str] = 'us',
    colours: typing.Optional[dict] = None,
    colour: str = '#4e79a7',
    width: int = 760,
    label_width: int = 220,
) -> str:
    """Horizontal bars, one per ``(label, value)`` item in the given
    order (e.g. the top waits, largest first), a ticked and titled value
    axis below; labels too long for ``label_width`` are cut after a word
    (the whole label on hover); each bar ends with its value."""
    if not items:
        return ''
    ticks, div, shown = axis(max(v for _l, v in items), unit)
    rh = 22
    top, left, right = 6, label_width + 8, width - 70
    bottom = top + rh * len(items) + 4
    parts = [svg_open(width, bottom + 44, titled(x_title, shown))]
    to_x = x_axis(
        parts, ticks, left, right, bottom, titled(x_title, shown), grid_top=top
    )
    for i, (label, v) in enumerate(items):
        y = top + rh * i
        text = str(label)
        short = fmt.clip_words(text, int(label_width / 6.6), '._ /', '\u2026')
        if unit in ('us', 's'):
            value = fmt.fmt_us(v * (1e6 if unit == 's' else 1))
        else:
            value = '%s %s' % (fmt_tick(round(v, 3)), unit or '')
        fill = (colours or {}).get(text, colour)
        parts.append(
            '<text class="ylabel" x="%d" y="%d" font-size="12" '
            'fill="%s" text-anchor="end"><title>%s</title>%s'
            '</text>' % (left - 6, y + 15, INK, fmt.esc(text), fmt.esc(short))
        )
        x1 = to_x((v or 0) / div)
        parts.append(
            '<rect x="%d" y="%d" width="%.1f" height="%d" '
            'fill="%s"><title>%s: %s</title></rect>'
            % (
                left,
                y + 3,
                max(x1 - left, 1.0),
                rh - 6,
                fill,
                fmt.esc(text),
                fmt.esc(value.strip()),
            )
        )
        parts.append(
            '<text class="value" x="%.1f" y="%d" font-size="12" '
            'fill="%s">%s</text>'
            % (x1 + 4, y + 15, INK, fmt.esc(value.strip()))
        )
    parts.append('</svg>')
    return ''.join(parts)
