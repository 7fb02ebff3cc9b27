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
"""The self-contained HTML report: one file, inline CSS and SVG.

No script and nothing fetched from the network.  Figures (drawn by
``charts``: round ticks in one stated unit, titled axes, HTML legends):
mean time per component stacked per concurrency level, requests in
flight over time, and per-request timelines with a group of rows per
host and service (critical-path spans outlined, spans that never ended
drawn open, a legend under each).  Tables: final states, components,
failures, the SQL profile and class blocks, clock offsets, input
problems.  Headings say what a section shows, not which figure of a
paper it reproduces.  Every string that comes from the input (host
names, instance and request ids, error messages, SQL text) goes through
``esc``.
"""

import html
import typing

from instrument.analysis import charts
from instrument.analysis import classify
from instrument.analysis import periodic
from instrument.analysis import report_text
from instrument.analysis import resources
from instrument.analysis import services
from instrument.analysis import waits

fmt_us = report_text.fmt_us
fmt_pct = report_text.fmt_pct

PALETTE = {
    'api': '#4e79a7', 'rpc': '#a0cbe8', 'rpc.queue': '#bab0ac',
    'conductor': '#f28e2b', 'scheduler': '#59a14f',
    'scheduler.db': '#8cd17d', 'scheduler.placement': '#b6992d',
    'compute': '#e15759', 'compute.claim': '#ff9d9a',
    'compute.network': '#79706e', 'compute.block_device': '#d37295',
    'compute.spawn': '#b07aa1', 'sql': '#edc948', 'gap': '#dddddd'}
EXTRA = ('#9c755f', '#86bcb6', '#f1ce63', '#499894', '#d4a6c8')

CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
h3{font-size:15px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;
padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
pre{background:#f8f8f8;padding:8px;font-size:11px;overflow-x:auto}
.bad{color:#b00000}.note{color:#595959;font-size:13px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
"""


def esc(value: typing.Any) -> str:
    return html.escape('' if value is None else str(value), quote=True)


def color(name: str, extra: dict) -> str:
    if name in PALETTE:
        return PALETTE[name]
    if name not in extra:
        extra[name] = EXTRA[len(extra) % len(EXTRA)]
    return extra[name]


def wrap_points(value: typing.Any) -> str:
    """``value`` escaped, with line-break opportunities after the dots
    and underscores of dotted names (``nova.exception.QuotaError``), so
    that a narrow column wraps between words, never inside one."""
    return esc(value).replace('.', '.<wbr>').replace('_', '_<wbr>')


def _recovered(f: dict) -> str:
    """A failure row's recovered errors and how (``3 rescheduled``)."""
    n = f.get('recovered')
    if not n:
        return '-' if n is None else '0'
    return '%d %s' % (n, report_text.recovered_how(f))


def _table(headers, rows, left=(0,)) -> str:
    out = ['<table><tr>']
    for i, h in enumerate(headers):
        out.append('<th class="%s">%s</th>' % ('l' if i in left else '',
                                               esc(h)))
    out.append('</tr>')
    for row in rows:
        out.append('<tr>')
        for i, c in enumerate(row):
            out.append('<td class="%s">%s</td>' % (
                'l' if i in left else '',
                wrap_points(c) if i in left else esc(c)))
        out.append('</tr>')
    out.append('</table>')
    return ''.join(out)


def stacked_levels(levels: list, order: list, extra: dict,
                   subject: str = 'boot') -> str:
    """Mean exclusive time per component of the successful requests
    (``subject``: what they are, e.g. ``boot`` or ``resize``), stacked,
    one bar per concurrency level; its legend below."""
    names = [n for n in order if n != 'gap'] + ['sql']
    names = list(dict.fromkeys(names))
    if not levels:
        return '<p class="note">no successful %s</p>' % esc(subject)
    names = [n for n in names
             if any(lv['mean_us'].get(n, 0) > 0 for lv in levels)]
    colours = {n: color(n, extra) for n in names}
    svg = charts.stacked_bars(
        [lv['level'] for lv in levels],
        [(n, [lv['mean_us'].get(n, 0) for lv in levels]) for n in names],
        colours, 'mean time per successful %s' % subject,
        'requests in flight when the %s started (n: requests in the '
        'group)' % subject,
        unit='us', notes=['n=%d' % lv['requests'] for lv in levels])
    return svg + charts.legend((colours[n], n) for n in reversed(names))


def concurrency_chart(series: list) -> str:
    """API requests (boots and others) in flight over the run."""
    return charts.line_chart(
        [(t, v) for t, v in series],
        'time since the first request started',
        'requests in flight', x_unit='s', y_unit=None, y_integer=True)


# The keys of a timeline's drawing, after its component colours.
TIMELINE_KEYS = {
    'critical': ('critical', '#ffffff', 'black outline: on the critical '
                 'path (what set the end-to-end time); a span too short '
                 'for the scale shows as a thin black mark',
                 'border:2px solid #000'),
    'open': ('open', None, 'dashed red: started, never ended',
             'border:2px dashed #b00000'),
    'error': ('error', '#555555', 'faded colour: ended in an error',
              'opacity:.6'),
}


def timeline(req: dict, extra: dict) -> str:
    """One request's spans on a time axis, a group of rows per host and
    service (nested spans below their parents), bars labelled with
    their event when it fits, then a legend."""
    events = [e for e in req.get('lifecycle') or []
              if not e['ev'].startswith('sql.')]
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
        end = e['t_us'] + (e['dur_us'] if e['dur_us'] is not None
                           else total - e['t_us'])
        lane = 0
        for (k2, s2, e2, l2) in placed:
            if k2 == key and s2 <= e['t_us'] < e2 and l2 >= lane:
                lane = l2 + 1
        lanes[key] = max(lanes.get(key, 0), lane)
        placed.append((key, e['t_us'], end, lane))
    offsets = {}
    y = 8
    for key in rows:
        y += 18                     # the group's title line
        offsets[key] = y
        y += rh * (lanes[key] + 1) + 8
    height = y + 44
    ticks, div, unit = charts.axis(total, 'us')
    parts = [charts.svg_open(w, height, 'timeline of %s' % req['req'])]
    to_x = charts.x_axis(parts, ticks, left, right, y,
                         charts.titled('time since the request started',
                                       unit), grid_top=8)
    for key in rows:
        parts.append('<text x="%d" y="%d" font-size="13" fill="%s" '
                     'font-weight="bold">%s / %s</text>' % (
                         left, offsets[key] - 5, charts.INK, esc(key[0]),
                         esc(key[1])))
    used = []
    marks = set()
    for e, (key, start, end, lane) in zip(events, placed, strict=True):
        x = to_x(start / div)
        bw = max(to_x(end / div) - x, 2.0)
        yy = offsets[key] + lane * rh
        comp = _component(e['ev'], e['svc'])
        fill = color(comp, extra)
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
            e['ev'], e['host'],
            'open' if e['dur_us'] is None else fmt_us(e['dur_us']),
            ' (SQL %s)' % fmt_us(e['sql_us']) if e['sql_us'] else '',
            ' error %s' % e['err'] if e['err'] else '')
        parts.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" %s>'
                     '<title>%s</title></rect>' % (x, yy, bw, rh - 3,
                                                   style, esc(title)))
        label = report_text.clip_words(e['ev'], int((bw - 6) / 6.6),
                                       '._ ', '\u2026', hard=False)
        if label:
            parts.append('<text class="barlabel" x="%.1f" y="%d" '
                         'font-size="12" fill="%s" data-bg="%s">%s'
                         '</text>' % (
                             x + 3, yy + 14, charts.text_on(fill), fill,
                             esc(label)))
    parts.append('</svg>')
    keys: list = [(color(c, extra), c) for c in used]
    keys += [TIMELINE_KEYS[m][1:] for m in ('critical', 'open', 'error')
             if m in marks]
    return ''.join(parts) + charts.legend(keys)


def _component(ev: str, svc: str) -> str:
    from instrument import schema
    return schema.EVENTS.get(ev) or svc


def render(report: dict, title: str = 'instrument-report') -> str:
    extra = {}
    s = report['summary']
    inp = report['inputs']
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
           '<title>%s</title><style>%s</style></head><body>' % (
               esc(title), CSS + charts.CSS)]
    out.append('<h1>%s</h1><p class="note">%d files, %.1f MB, %d records; '
               'run %s .. %s (%.1f s)</p>' % (
                   esc(title), len(inp['files']), inp['bytes'] / 1e6,
                   inp['records'], esc(report_text.fmt_time(s['start_us'])),
                   esc(report_text.fmt_time(s['end_us'])),
                   s['duration_s']))
    out.extend(_data_quality(report))
    # summary
    out.append('<h2>Requests and final states</h2>')
    total = s['instances'] or 1
    out.append(_table(['final state', 'instances', 'share'], [
        (st, s['states'].get(st, 0), fmt_pct(s['states'].get(st, 0) /
                                             total))
        for st in report_text.STATE_ORDER]))
    out.append('<p>%d boot requests (%d instances), %d other API '
               'requests. %s.</p>' % (
                   s['boots'], s['instances'], s['other_requests'],
                   '. '.join(esc(line[0].upper() + line[1:])
                             for line in report_text.boot_rates(s))))
    # figure 3-1
    out.append('<h2>Where a successful boot spends its time, by load'
               '</h2>')
    out.append('<p class="note">Boots grouped by how many requests were '
               'in flight when each started; per group the mean time '
               'each component spent on a boot by itself (children '
               'excluded), stacked; the SQL time of every component in '
               'one band.</p>')
    out.append(stacked_levels(s['levels'], s['component_order'], extra))
    out.append('<h3>Requests in flight over the run</h3>')
    out.append('<p class="note">API requests (boots and others) started '
               'and not yet ended.</p>')
    out.append(concurrency_chart(s['concurrency']['series']))
    # components
    out.append('<h2>Components (successful boots)</h2>')
    note = report_text.multi_instance_note(s)
    if note:
        out.append('<p class="note">%s.</p>' % esc(note[0].upper() +
                                                    note[1:]))
    rows = []
    for name in s['component_order']:
        st = s['components'].get(name, {})
        if not st.get('count') or not st['max']:
            continue
        sq = s['sql_in_components'].get(name, {})
        rows.append((name, fmt_us(st['min']), fmt_us(st['median']),
                     fmt_us(st['p90']), fmt_us(st['p95']),
                     fmt_us(st['p99']), fmt_us(st['max']),
                     fmt_us(sq.get('mean', 0)),
                     fmt_pct(s['critical_path_share'].get(name, 0))))
    lat = s['latency']
    if lat.get('count'):
        rows.append(('end to end', fmt_us(lat['min']),
                     fmt_us(lat['median']), fmt_us(lat['p90']),
                     fmt_us(lat['p95']), fmt_us(lat['p99']),
                     fmt_us(lat['max']), '', '100%'))
    out.append(_table(['component', 'min', 'median', 'p90', 'p95', 'p99',
                       'max', 'SQL inside (mean)', 'critical path'], rows))
    out.append(waits.html_section(report.get('waits'), _table))
    out.append(periodic.html_section(report.get('periodic'), _table))
    # timelines
    picked = _pick_timelines(report.get('timelines') or [])
    labels = [label for label, _t in picked]
    out.append('<h2>Timelines of the %d slowest successful boots%s and of '
               'one request per failure state</h2>' % (
                   sum(1 for label in labels
                       if label.startswith('slowest successful boot ')),
                   ', the slowest first-attempt success'
                   if FIRST_ATTEMPT in labels else ''))
    out.append('<p class="note">The successful boot requests (success '
               'or rescheduled_success) with the longest end-to-end '
               'times, slowest first (the first one: the max of the '
               'components table), and the slowest that succeeded at its '
               'first attempt if none of them did; then the first '
               'request seen in each failure state. Each span of a '
               'request on a common time axis, grouped by host and '
               'service; a span nested in another is drawn below it. '
               'Colours are components; the legend under each timeline '
               'explains outlines and dashes. Hover a bar for its event, '
               'duration and error.</p>')
    for what, req in picked:
        states = ', '.join(
            '%s %s' % (i['inst'] or '-', i['state'])
            for i in req['instances']) or req['state']
        out.append('<h3>%s: %s &mdash; %s, %s</h3>' % (
            esc(what), esc(req['req']), esc(states),
            esc(fmt_us(req['latency_us']))))
        for inst in req['instances']:
            if inst.get('cause'):
                out.append('<p class="bad">%s: %s on %s: %s</p>' % (
                    esc(inst['state']), esc(inst['cause']['cls']),
                    esc(inst['cause']['host']), esc(inst['cause']['msg'])))
            if inst.get('stopped'):
                out.append('<p class="bad">stopped at %s on %s</p>' % (
                    esc(inst['stopped']['ev']),
                    esc(inst['stopped']['host'])))
        out.extend(periodic.held_notes(req, esc))
        out.append(timeline(req, extra))
    # one section per operation other than boot (issue 12)
    out.append(operations_html(report.get('operations') or {}, extra))
    # failures
    out.append('<h2>Failures: where each error was raised</h2>')
    out.append('<p class="note">One row per component, event, error '
               'class and message (numbers and ids in messages replaced '
               'by &lt;n&gt; and &lt;uuid&gt;).  raised: times raised '
               '(each error once, where raised; one error can end '
               'several instances); final: of those, the final cause of '
               'an instance or request; recovered: retried by oslo.db, '
               'rescheduled to another host, or in an instance that '
               'still succeeded.</p>')
    if report['failures']:
        out.append(_table(['operation', 'component', 'event', 'error',
                           'message', 'raised', 'final', 'recovered',
                           'e.g. request'], [
            (f.get('operation', '-'), f['component'], f['ev'], f['cls'],
             f['message'], f['count'], f.get('final', '-'),
             _recovered(f), (f['requests'] or [''])[0])
            for f in report['failures']],
            left=(0, 1, 2, 3, 4, 7, 8)))
    else:
        out.append('<p>none</p>')
    causes = report_text.final_cause_rows(report['summary'])
    if causes:
        out.append('<p>Final causes of the boot instances that failed '
                   '(other operations: their sections):</p>')
        out.append(_table(['final state', 'cause', 'instances'], causes,
                          left=(0, 1)))
    if report['retries']:
        out.append(_table(['DB retry in', 'cause', 'count'], [
            (r['func'], r['cls'], r['count']) for r in report['retries']],
            left=(0, 1)))
    # calls to other services, resources over time (issue 21)
    out.append(services.html_section(report))
    out.append(resources.html_section(report))
    # SQL
    sql = report['sql']
    out.append('<h2>SQL digest (grouped by %s, ordered by %s)</h2>' % (
        esc(sql['group_by']), esc(sql['order_by'])))
    out.append('<p class="note">%d statements in %d classes, %s. Query ID '
               '= MD5 of the fingerprint.</p>' % (
                   sql['calls'], sql['classes'],
                   esc(fmt_us(sql['total_us']))))
    out.append(_table(['Rank', 'Query ID', 'Response time', '%', 'Calls',
                       'R/Call', 'V/M', 'Item'], [
        (r['rank'], r['id'], fmt_us(r['total_us']),
         '%.1f%%' % (100 * r['pct']), r['calls'], fmt_us(r['r_call_us']),
         '%.2f' % r['v_m'], r['item']) for r in sql['rows']],
        left=(1, 7)))
    for r in sql['rows']:
        out.append('<pre>%s</pre>' % esc('\n'.join(
            report_text.class_block(r, sql['group_by']))))
    # clocks
    clk = report['clocks']
    out.append('<h2>Clock offsets</h2>')
    out.append(_table(['host', 'offset', 'low', 'high', 'group', 'pairs',
                       'status'], [
        (h, report_text.fmt_offset(i['offset_us']),
         '-' if i['low_us'] is None else report_text.fmt_offset(
             i['low_us']),
         '-' if i['high_us'] is None else report_text.fmt_offset(
             i['high_us']), '-' if i['group'] is None else i['group'],
         i['pairs'], i['status'])
        for h, i in sorted(clk['hosts'].items())], left=(0, 6)))
    for d in clk['dropped']:
        out.append('<p class="bad">inconsistent pair dropped: %s (%s)</p>'
                   % (esc(d['reason']), esc(d['origin'])))
    # input problems
    ld = report['load']
    out.append('<h2>Input</h2>')
    bad = {k: v for k, v in ld['counts'].items() if v}
    out.append('<p>%s</p>' % esc(', '.join(
        '%s: %d' % kv for kv in bad.items()) or 'every line valid'))
    samples = [(k, f, n, why) for k, lst in ld['samples'].items()
               for f, n, why in lst]
    if samples:
        out.append(_table(['kind', 'file', 'line', 'reason'], samples,
                          left=(0, 1, 3)))
    if ld['loss']:
        out.append(_table(['file', 'pid', 'records', 'missing (seq)',
                           'dropped (sink.drops)'], [
            (r['file'], r['pid'], r['records'], r['missing'], r['dropped'])
            for r in ld['loss']]))
    for row in ld.get('duplicates') or ():
        out.append('<p class="bad">%s: %d of its %d records were read '
                   'before (a copy, or records written twice); left out '
                   'of every figure</p>' % (esc(row['file']),
                                            row['duplicates'],
                                            row['records']))
    for problem in ld['problems']:
        out.append('<p class="bad">%s</p>' % esc(problem))
    out.append('</body></html>')
    return '\n'.join(out) + '\n'


def _data_quality(report: dict) -> list:
    """Warnings that hold for every figure below: losses, requests
    left out of the times, duplicates, processes without an end."""
    out = []
    for note in (report_text.loss_note(report),
                 report_text.degraded_note(report)):
        if note:
            out.append('<p class="bad">%s</p>' % esc(note.lstrip('! ')))
    lines = report_text.unended_lines(report['load'])
    if lines:
        out.append('<p class="bad">%s</p>' % '<br>'.join(
            esc(line.strip()) for line in lines))
    return out


FIRST_ATTEMPT = 'slowest boot that succeeded at its first attempt'


def _pick_timelines(timelines: list, slowest: int = 4,
                    limit: int = 10) -> list:
    """``[(label, timeline)]``: the ``slowest`` successful boots by
    end-to-end time, slowest first (of the kept lifecycles; a boot whose
    span end was lost is left out, as in the components table), the
    slowest boot that succeeded at its first attempt when none of those
    did, then the first request of each failure state, up to ``limit``
    in all."""
    good = sorted((t for t in timelines
                   if t.get('kind', 'boot') == 'boot' and
                   t['state'] in classify.GOOD_STATES and
                   not t.get('lost_ends')),
                  key=lambda t: (-t['latency_us'], t['req']))
    out = [('slowest successful boot %d' % (i + 1), t)
           for i, t in enumerate(good[:slowest])]
    first = [t for t in good if t['state'] == classify.SUCCESS]
    if first and first[0] not in good[:slowest]:
        out.append((FIRST_ATTEMPT, first[0]))
    seen_states = set()
    for t in timelines:
        if len(out) >= limit:
            break
        if t['state'] not in classify.GOOD_STATES + (classify.OTHER,) \
                and t['state'] not in seen_states:
            seen_states.add(t['state'])
            out.append(('%s %s, first seen' % (t.get('kind', 'boot'),
                                                t['state']), t))
    return out


def operations_html(ops: dict, extra: dict) -> str:
    """The overview of every operation and a section per operation other
    than boot (``report['operations']``, see ``opstats``)."""
    if not ops:
        return ''
    out = ['<h2>Operations</h2>',
           '<p class="note">Every request is named by the compute API '
           'method it reached (else its conductor and compute steps). '
           'In flight counts %s.</p>' % esc(next(iter(ops.values()))[
               'concurrency']['counted'])]
    rows, note = report_text.op_rows(ops)
    out.append(_table(['operation', 'requests', 'instances', 'success',
                       'retried', 'median', 'p95', 'max in flight'], rows))
    out.append('<p class="note">%s.</p>' % esc(note[0].upper() + note[1:]))
    for op, f in ops.items():
        if op in ('boot', 'other'):
            continue
        out.append('<section id="op-%s"><h3>Operation: %s</h3>' % (
            esc(op), esc(op)))
        total = f['instances'] or 1
        out.append(_table(['final state', 'count', 'share', 'e.g. request'],
                          [(st, f['states'].get(st, 0),
                            fmt_pct(f['states'].get(st, 0) / total),
                            ' '.join(f['state_requests'].get(st, [])[:1]))
                           for st in f['state_order']
                           if f['states'].get(st)], left=(0, 3)))
        out.append('<p>%d requests; success rate %s, retried on another '
                   'host %s, DB retries in %s; in flight max %d.</p>' % (
                       f['requests'], esc(fmt_pct(f['success_rate'])),
                       esc(fmt_pct(f['retry_rate'])),
                       esc(fmt_pct(f['db_retry_rate'])),
                       f['concurrency']['max']))
        if f['stopped']:
            out.append(_table(['incomplete, stopped at', 'open',
                               'instances', 'hosts', 'e.g. request'], [
                (g['ev'], 'yes' if g['open'] else 'no', g['count'],
                 report_text.where_phrase(g['hosts']), g['example'])
                for g in report_text.stopped_groups(f['stopped'])],
                left=(0, 1, 3, 4)))
        if f['causes']:
            out.append(_table(['state', 'cause', 'count'], [
                (c['state'], c['cls'], c['count']) for c in f['causes']],
                left=(0, 1)))
        lat = f['latency']
        if lat.get('count'):
            rows = []
            for name in f['component_order']:
                st = f['components'].get(name, {})
                if not st.get('count') or not st['max']:
                    continue
                rows.append((name, fmt_us(st['median']), fmt_us(st['p95']),
                             fmt_us(st['max']),
                             fmt_pct(f['critical_path_share'].get(name, 0))))
            rows.append(('end to end', fmt_us(lat['median']),
                         fmt_us(lat['p95']), fmt_us(lat['max']), '100%'))
            out.append(_table(['component (successful)', 'median', 'p95',
                               'max', 'critical path'], rows))
        if len(f['levels']) > 1:
            out.append(stacked_levels(f['levels'], f['component_order'],
                                      extra, subject=op))
        cells = f.get('cells')
        if cells and cells['cells']:
            out.append('<p>Cells queried: %s; slow cell: <b>%s</b>.</p>' % (
                esc(', '.join('%s %d' % kv for kv in sorted(
                    cells['modes'].items()))), esc(cells['slow_cell'])))
            out.append(_table(['cell', 'database', 'queries', 'median',
                               'p95', 'max', 'errors'], [
                (name, c['db'] or '-', c['time'].get('count', 0),
                 fmt_us(c['time'].get('median')),
                 fmt_us(c['time'].get('p95')),
                 fmt_us(c['time'].get('max')), c['errors'])
                for name, c in cells['cells'].items()], left=(0, 1)))
        out.append('</section>')
    return ''.join(out)
