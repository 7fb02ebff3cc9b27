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
"""``timelines``: the lifecycles of a few requests, span by span.

Which requests keep their lifecycle (``Keeper``, as the request model
finalises them, in bounded memory): with ``--all-lifecycles`` every
one, else the ``KEEP_SLOWEST`` slowest successful requests of each
operation and good state, and up to ``KEEP_PER_STATE`` requests of each
other final state (the first by start and id); the same at any
``-j``.  The report's rows are theirs (as in ``requests``,
with ``lifecycle``: each span's start, duration, host, service, event,
status, SQL time, error and whether it was on the critical path).  The
HTML page draws the slowest successful boots and one request per
failure state on a time axis (``pick``, ``timeline``).
"""

import bisect
import typing

from instrument import schema
from instrument.analysis.model import classify
from instrument.analysis.render import charts
from instrument.analysis.render import fmt
from instrument.analysis.render import views
from instrument.analysis.sections import base
from instrument.analysis.sections import periodic

KEEP_SLOWEST = 12
KEEP_PER_STATE = 40
FIRST_ATTEMPT = 'slowest boot that succeeded at its first attempt'


class Keeper:
    """Chooses the requests whose lifecycle is kept for timelines.

    Called with each finished request's summary before its lifecycle is
    made; returns whether to make it (and drops the lifecycle of a
    request it stops keeping).  The choice is by a total key of the
    request, never by the order requests finished in: the slowest
    (end-to-end time, then start and id) of each operation and good
    state, the first (start, id) of each other state; ``merge`` keeps
    the same of the workers' (the same lifecycles at any ``-j``).
    """

    def __init__(self, keep_all: bool) -> None:
        self.keep_all = keep_all
        # (operation, good state) or (None, other state):
        # [sorted keys, {key: summary}]
        self.groups: dict = {}

    @staticmethod
    def _key(summary: typing.Any) -> tuple:
        if summary.state not in classify.GOOD_STATES:
            return (None, summary.state), (summary.start, summary.req)
        return (summary.kind, summary.state), (
            -summary.latency,
            summary.start,
            summary.req,
        )

    def _offer(self, group: tuple, key: tuple, summary: typing.Any) -> bool:
        limit = KEEP_SLOWEST if group[0] is not None else KEEP_PER_STATE
        keys, kept = self.groups.setdefault(group, ([], {}))
        if key in kept or (len(keys) >= limit and not key < keys[-1]):
            return False
        bisect.insort(keys, key)
        kept[key] = summary
        if len(keys) > limit:
            kept.pop(keys.pop()).lifecycle = None
        return True

    def __call__(
        self, summary: typing.Any, r: typing.Any, tree: typing.Any
    ) -> bool:
        if self.keep_all:
            return True
        if summary.state in classify.GOOD_STATES and summary.kind == 'other':
            return False
        group, key = self._key(summary)
        return self._offer(group, key, summary)

    def merge(self, other: 'Keeper') -> None:
        for group, (keys, kept) in other.groups.items():
            for key in keys:
                summary = kept[key]
                if not self._offer(group, key, summary):
                    summary.lifecycle = None


class Timelines(base.Section):
    """``report['timelines']``."""

    key = 'timelines'

    def __init__(self, ctx: base.Context) -> None:
        self.keeper = Keeper(
            bool(ctx.opts is not None and ctx.opts.all_lifecycles)
        )

    def finished(self, done: typing.Any) -> bool:
        """Keep this request's lifecycle?"""
        return self.keeper(done.summary, done.request, done.tree)

    def merge(self, other: 'Timelines') -> None:
        self.keeper.merge(other.keeper)

    def report(self, view: base.View) -> list:
        return view.part('periodic').annotate(
            [s.to_dict() for s in view.summaries if s.lifecycle is not None]
        )

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return html_parts(report, page)


# -- HTML ---------------------------------------------------------------------

# The keys of a timeline's drawing, after its component colours.
TIMELINE_KEYS = {
    'critical': (
        'critical',
        '#ffffff',
        'black outline: on the critical '
        'path (what set the end-to-end time); a span too short '
        'for the scale shows as a thin black mark',
        'border:2px solid #000',
    ),
    'open': (
        'open',
        None,
        'dashed red: started, never ended',
        'border:2px dashed #b00000',
    ),
    'error': (
        'error',
        '#555555',
        'faded colour: ended in an error',
        'opacity:.6',
    ),
}


def pick(timelines: list, slowest: int = 4, limit: int = 10) -> list:
    """``[(label, timeline)]``: the ``slowest`` successful boots by
    end-to-end time, slowest first (of the kept lifecycles; a boot whose
    span end was lost is left out, as in the components table), the
    slowest boot that succeeded at its first attempt when none of those
    did, then the first request of each failure state, up to ``limit``
    in all."""
    good = sorted(
        (
            t
            for t in timelines
            if t.get('kind', 'boot') == 'boot'
            and t['state'] in classify.GOOD_STATES
            and not t.get('lost_ends')
            and not t.get('loss')
        ),
        key=lambda t: (-t['latency_us'], t['req']),
    )
    out = [
        ('slowest successful boot %d' % (i + 1), t)
        for i, t in enumerate(good[:slowest])
    ]
    first = [t for t in good if t['state'] == classify.SUCCESS]
    if first and first[0] not in good[:slowest]:
        out.append((FIRST_ATTEMPT, first[0]))
    seen_states = set()
    for t in timelines:
        if len(out) >= limit:
            break
        if (
            t['state'] not in classify.GOOD_STATES + (classify.OTHER,)
            and t['state'] not in seen_states
        ):
            seen_states.add(t['state'])
            out.append(
                ('%s %s, first seen' % (t.get('kind', 'boot'), t['state']), t)
            )
    return out


def html_parts(report: dict, page: base.Page) -> list:
    """The HTML report's timelines (``pick``): a heading, a note, then
    per request its states, causes and spans."""
    esc = fmt.esc
    out: list = []
    picked = pick(report.get('timelines') or [])
    labels = [label for label, _t in picked]
    out.append(
        '<h2>Timelines of the %d slowest successful boots%s and of '
        'one request per failure state</h2>'
        % (
            sum(
                1
                for label in labels
                if label.startswith('slowest successful boot ')
            ),
            ', the slowest first-attempt success'
            if FIRST_ATTEMPT in labels
            else '',
        )
    )
    out.append(
        '<p class="note">The successful boot requests (success '
        'or rescheduled_success) with the longest end-to-end '
        'times, slowest first (the first one: the max of the '
        'components table), and the slowest that succeeded at its '
        'first attempt if none of them did; then the first '
        'request seen in each failure state. Each span of a '
        'request on a common time axis, grouped by host and '
        'service; a span nested in another is drawn below it. '
        'Colours are components; the legend under each timeline '
        'explains outlines and dashes. Hover a bar for its event, '
        'duration and error.</p>'
    )
    for what, req in picked:
        states = (
            ', '.join(
                '%s %s' % (i['inst'] or '-', i['state'])
                for i in req['instances']
            )
            or req['state']
        )
        # the findings link a request to its lifecycle here
        out.append('<a id="req-%s"></a>' % esc(req['req']))
        out.append(
            '<h3>%s: %s &mdash; %s, %s</h3>'
            % (
                esc(what),
                esc(req['req']),
                esc(states),
                esc(fmt.fmt_us(req['latency_us'])),
            )
        )
        for inst in req['instances']:
            if inst.get('cause'):
                out.append(
                    '<p class="bad">%s: %s on %s: %s</p>'
                    % (
                        esc(inst['state']),
                        esc(inst['cause']['cls']),
                        esc(inst['cause']['host']),
                        esc(inst['cause']['msg']),
                    )
                )
            if inst.get('stopped'):
                out.append(
                    '<p class="bad">stopped at %s on %s</p>'
                    % (
                        esc(inst['stopped']['ev']),
                        esc(inst['stopped']['host']),
                    )
                )
        out.extend(periodic.held_notes(req, esc))
        chart = timeline(req, page.extra)
        if chart:
            # a name unique in the page: the request's place here
            chart = charts.zoomable(chart, 'tl%d' % len(out))
        out.append(chart)
    return out


def timeline(req: dict, extra: dict) -> str:
    """One request's spans on a time axis, a group of rows per host and
    service (nested spans below their parents), bars labelled with
    their event when it fits, then a legend."""
    events = [
        e for e in req.get('lifecycle') or [] if not e['ev'].startswith('sql.')
    ]
    if not events:
        return ''
    rows = []
    for e in events:
        key = (e['host'], e['svc'])
        if key not in rows:
            rows.append(key)
    total = max(req['latency_us'], 1)
    w, left, right, rh = 880, 10, 864, 22
    # nesting depth within a row, so children show under parents
    lanes = {}
    placed = []
    for e in events:
        key = (e['host'], e['svc'])
        end = e['t_us'] + (
            e['dur_us'] if e['dur_us'] is not None else total - e['t_us']
        )
        lane = 0
        for k2, s2, e2, l2 in placed:
            if k2 == key and s2 <= e['t_us'] < e2 and l2 >= lane:
                lane = l2 + 1
        lanes[key] = max(lanes.get(key, 0), lane)
        placed.append((key, e['t_us'], end, lane))
    offsets = {}
    y = 8
    for key in rows:
        y += 18  # the group's title line
        offsets[key] = y
        y += rh * (lanes[key] + 1) + 8
    height = y + 44
    ticks, div, unit = charts.axis(total, 'us')
    # x as shares of the width: a zoom widens the time axis only
    parts = [charts.stretched_open(w, height, 'timeline of %s' % req['req'])]
    at = charts.xs(w)
    to_x = charts.x_axis(
        parts,
        ticks,
        left,
        right,
        y,
        charts.titled('time since the request started', unit),
        grid_top=8,
        width=w,
    )
    for key in rows:
        parts.append(
            '<text x="%s" y="%d" font-size="13" fill="%s" '
            'font-weight="bold">%s / %s</text>'
            % (
                at(left),
                offsets[key] - 5,
                charts.INK,
                fmt.esc(key[0]),
                fmt.esc(key[1]),
            )
        )
    used = []
    marks = set()
    for e, (key, start, end, lane) in zip(events, placed, strict=True):
        x = to_x(start / div)
        bw = max(to_x(end / div) - x, 2.0)
        yy = offsets[key] + lane * rh
        comp = e.get('comp') or component_of(e['ev'], e['svc'])
        fill = views.color(comp, extra)
        if comp not in used:
            used.append(comp)
        style = 'fill="%s"' % fill
        if e['dur_us'] is None:
            style = 'fill="none" stroke="#b00000" stroke-dasharray="4,2"'
            fill = charts.PAPER
            marks.add('open')
        elif e['critical']:
            style += ' stroke="#000" stroke-width="1"'
            marks.add('critical')
        if e['st'] == 'error' and e['dur_us'] is not None:
            style += ' fill-opacity="0.6"'
            fill = charts.blend(fill, 0.6)
            marks.add('error')
        title = '%s on %s: %s%s%s' % (
            e['ev'],
            e['host'],
            'open' if e['dur_us'] is None else fmt.fmt_us(e['dur_us']),
            ' (SQL %s)' % fmt.fmt_us(e['sql_us']) if e['sql_us'] else '',
            ' error %s' % e['err'] if e['err'] else '',
        )
        parts.append(
            '<rect x="%s" y="%d" width="%s" height="%d" %s>'
            '<title>%s</title></rect>'
            % (at(x), yy, at(bw), rh - 3, style, fmt.esc(title))
        )
        label = fmt.clip_words(
            e['ev'], int((bw - 6) / 6.6), '._ ', '\u2026', hard=False
        )
        if label:
            parts.append(
                '<text class="barlabel" x="%s" dx="3" y="%d" '
                'font-size="12" fill="%s" data-bg="%s">%s'
                '</text>'
                % (at(x), yy + 14, charts.text_on(fill), fill, fmt.esc(label))
            )
    parts.append('</svg>')
    keys: list = [(views.color(c, extra), c) for c in used]
    keys += [
        TIMELINE_KEYS[m][1:]
        for m in ('critical', 'open', 'error')
        if m in marks
    ]
    return ''.join(parts) + charts.legend(keys)


def component_of(ev: str, svc: str) -> str:
    """The component a span's time is charged to."""
    return schema.EVENTS.get(ev) or svc
