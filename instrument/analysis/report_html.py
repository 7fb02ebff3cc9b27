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

No script and nothing fetched from the network.  Figures: mean time per
component stacked per concurrency level (the study's Figure 3-1),
requests in flight over time, and per-request timelines with one row per
host and service (Figure 3-3; critical-path spans outlined, spans that
never ended drawn open).  Tables: final states, components, failures
(Table 1), the SQL profile and class blocks, clock offsets, input
problems.  Every string that comes from the input (host names, instance
and request ids, error messages, SQL text) goes through ``esc``.
"""

import html
import typing

from instrument.analysis import report_text
from instrument.analysis import resources
from instrument.analysis import services

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
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;
padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
pre{background:#f8f8f8;padding:8px;font-size:11px;overflow-x:auto}
.bad{color:#b00}.note{color:#666;font-size:12px}
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
                'l' if i in left else '', esc(c)))
        out.append('</tr>')
    out.append('</table>')
    return ''.join(out)


def stacked_levels(levels: list, order: list, extra: dict) -> str:
    """Figure 3-1: mean component time (stacked) per concurrency level."""
    names = [n for n in order if n != 'gap'] + ['sql']
    names = list(dict.fromkeys(names))
    if not levels:
        return '<p class="note">no successful boot</p>'
    totals = [sum(lv['mean_us'].get(n, 0) for n in names) for lv in levels]
    top = max(totals) or 1
    w, h, left, bottom = 760, 320, 70, 40
    bw = min(80, (w - left - 20) / len(levels) * 0.7)
    step = (w - left - 20) / len(levels)
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" '
             'height="%d" role="img">' % (w + 220, h + bottom)]
    for i in range(5):
        v = top * i / 4
        y = h - (h - 20) * i / 4
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" '
                     'stroke="#eee"/><text x="%d" y="%.1f" font-size="10" '
                     'text-anchor="end">%s</text>' % (
                         left, w, y, y, left - 4, y + 3, esc(fmt_us(v))))
    for i, lv in enumerate(levels):
        x = left + step * i + (step - bw) / 2
        y = h
        for n in names:
            v = lv['mean_us'].get(n, 0)
            if v <= 0:
                continue
            bh = (h - 20) * v / top
            y -= bh
            parts.append('<rect x="%.1f" y="%.1f" width="%.1f" '
                         'height="%.1f" fill="%s"><title>%s: %s</title>'
                         '</rect>' % (x, y, bw, bh, color(n, extra),
                                      esc(n), esc(fmt_us(v))))
        parts.append('<text x="%.1f" y="%d" font-size="11" '
                     'text-anchor="middle">%s</text>' % (
                         x + bw / 2, h + 14, esc(lv['level'])))
        parts.append('<text x="%.1f" y="%d" font-size="9" fill="#666" '
                     'text-anchor="middle">n=%d</text>' % (
                         x + bw / 2, h + 26, lv['requests']))
    parts.append('<text x="%d" y="%d" font-size="11" text-anchor="middle">'
                 'requests in flight when the boot started</text>' % (
                     left + (w - left) / 2, h + 38))
    _legend(parts, names, extra, w + 10, 20)
    parts.append('</svg>')
    return ''.join(parts)


def _legend(parts, names, extra, x, y) -> None:
    for i, n in enumerate(names):
        parts.append('<rect x="%d" y="%d" width="10" height="10" '
                     'fill="%s"/><text x="%d" y="%d" font-size="11">%s'
                     '</text>' % (x, y + 16 * i, color(n, extra), x + 14,
                                  y + 16 * i + 9, esc(n)))


def concurrency_chart(series: list) -> str:
    if not series:
        return ''
    w, h, left = 760, 160, 50
    tmax = series[-1][0] or 1
    vmax = max(v for _t, v in series) or 1
    pts = ' '.join('%.1f,%.1f' % (left + (w - left) * t / tmax,
                                  h - (h - 10) * v / vmax)
                   for t, v in series)
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" '
            'height="%d" role="img"><polyline fill="none" stroke="#4e79a7" '
            'points="%s"/><line x1="%d" x2="%d" y1="%d" y2="%d" '
            'stroke="#999"/><text x="%d" y="14" font-size="10" '
            'text-anchor="end">%d</text><text x="%d" y="%d" '
            'font-size="10" text-anchor="end">%.0f s</text></svg>' % (
                w, h + 16, pts, left, w, h, h, left - 4, vmax, w, h + 14,
                tmax))


def timeline(req: dict, extra: dict) -> str:
    """Figure 3-3: one request's spans, a row per host and service."""
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
    w, left, rh = 1000, 210, 22
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
    y = 24
    for key in rows:
        offsets[key] = y
        y += rh * (lanes[key] + 1) + 6
    height = y + 24
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" '
             'height="%d" role="img">' % (w + 10, height)]
    for key in rows:
        parts.append('<text x="4" y="%d" font-size="11">%s / %s</text>' % (
            offsets[key] + 14, esc(key[0]), esc(key[1])))
        parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d" '
                     'stroke="#eee"/>' % (left, w, offsets[key] - 3,
                                          offsets[key] - 3))
    scale = (w - left) / total
    for e, (key, start, end, lane) in zip(events, placed, strict=True):
        x = left + start * scale
        bw = max((end - start) * scale, 1.0)
        yy = offsets[key] + lane * rh
        comp = _component(e['ev'], e['svc'])
        style = 'fill="%s"' % color(comp, extra)
        if e['dur_us'] is None:
            style = 'fill="none" stroke="#b00" stroke-dasharray="4,2"'
        elif e['critical']:
            style += ' stroke="#000" stroke-width="1.5"'
        if e['st'] == 'error':
            style += ' fill-opacity="0.6"'
        title = '%s on %s: %s%s%s' % (
            e['ev'], e['host'],
            'open' if e['dur_us'] is None else fmt_us(e['dur_us']),
            ' (SQL %s)' % fmt_us(e['sql_us']) if e['sql_us'] else '',
            ' error %s' % e['err'] if e['err'] else '')
        parts.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" %s>'
                     '<title>%s</title></rect>' % (x, yy, bw, rh - 4,
                                                   style, esc(title)))
        if bw > 60:
            parts.append('<text x="%.1f" y="%d" font-size="9" '
                         'fill="#fff">%s</text>' % (
                             x + 2, yy + 12, esc(e['ev'][:int(bw / 6)])))
    parts.append('<text x="%d" y="%d" font-size="10">0</text><text x="%d" '
                 'y="%d" font-size="10" text-anchor="end">%s</text>' % (
                     left, height - 6, w, height - 6, esc(fmt_us(total))))
    parts.append('</svg>')
    return ''.join(parts)


def _component(ev: str, svc: str) -> str:
    from instrument import schema
    return schema.EVENTS.get(ev) or svc


def render(report: dict, title: str = 'instrument-report') -> str:
    extra = {}
    s = report['summary']
    inp = report['inputs']
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
           '<title>%s</title><style>%s</style></head><body>' % (
               esc(title), CSS)]
    out.append('<h1>%s</h1><p class="note">%d files, %.1f MB, %d records; '
               'run %s .. %s (%.1f s)</p>' % (
                   esc(title), len(inp['files']), inp['bytes'] / 1e6,
                   inp['records'], esc(report_text.fmt_time(s['start_us'])),
                   esc(report_text.fmt_time(s['end_us'])),
                   s['duration_s']))
    # summary
    out.append('<h2>Requests and final states</h2>')
    total = s['instances'] or 1
    out.append(_table(['final state', 'instances', 'share'], [
        (st, s['states'].get(st, 0), fmt_pct(s['states'].get(st, 0) /
                                             total))
        for st in report_text.STATE_ORDER]))
    out.append('<p>%d boot requests, %d other API requests. Success rate '
               '%s, reschedule rate %s, DB retries in %s of boots. '
               'Throughput %.2f boots/s. Concurrency max %d.</p>' % (
                   s['boots'], s['other_requests'],
                   esc(fmt_pct(s['success_rate'])),
                   esc(fmt_pct(s['reschedule_rate'])),
                   esc(fmt_pct(s['db_retry_rate'])), s['throughput_rps'],
                   s['concurrency']['max']))
    # figure 3-1
    out.append('<h2>Time per component by concurrency (Figure 3-1)</h2>')
    out.append('<p class="note">Mean exclusive time of successful boots, '
               'stacked; SQL time of all components in one band.</p>')
    out.append(stacked_levels(s['levels'], s['component_order'], extra))
    out.append('<h3>Requests in flight over time</h3>')
    out.append(concurrency_chart(s['concurrency']['series']))
    # components
    out.append('<h2>Components (successful boots)</h2>')
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
    # timelines
    out.append('<h2>Request timelines (Figure 3-3)</h2>')
    out.append('<p class="note">One row per host and service; outlined: '
               'on the critical path; dashed red: started, never ended. '
               'Hover a bar for details.</p>')
    for req in _pick_timelines(report.get('timelines') or []):
        states = ', '.join(
            '%s %s' % (i['inst'] or '-', i['state'])
            for i in req['instances']) or req['state']
        out.append('<h3>%s &mdash; %s, %s</h3>' % (
            esc(req['req']), esc(states), esc(fmt_us(req['latency_us']))))
        for inst in req['instances']:
            if inst.get('cause'):
                out.append('<p class="bad">%s: %s on %s: %s</p>' % (
                    esc(inst['state']), esc(inst['cause']['cls']),
                    esc(inst['cause']['host']), esc(inst['cause']['msg'])))
            if inst.get('stopped'):
                out.append('<p class="bad">stopped at %s on %s</p>' % (
                    esc(inst['stopped']['ev']),
                    esc(inst['stopped']['host'])))
        out.append(timeline(req, extra))
    # failures
    out.append('<h2>Failures (Table 1)</h2>')
    if report['failures']:
        out.append(_table(['component', 'event', 'error', 'message',
                           'count', 'e.g. request'], [
            (f['component'], f['ev'], f['cls'], f['message'], f['count'],
             (f['requests'] or [''])[0]) for f in report['failures']],
            left=(0, 1, 2, 3, 5)))
    else:
        out.append('<p>none</p>')
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
    for problem in ld['problems']:
        out.append('<p class="bad">%s</p>' % esc(problem))
    out.append('</body></html>')
    return '\n'.join(out) + '\n'


def _pick_timelines(timelines: list, limit: int = 8) -> list:
    """The slowest successful boots and one example of each failure."""
    chosen = []
    seen_states = set()
    for t in timelines:
        if t['state'] not in ('success', 'rescheduled_success', 'other') \
                and t['state'] not in seen_states:
            seen_states.add(t['state'])
            chosen.append(t)
    resched = [t for t in timelines if t['state'] == 'rescheduled_success']
    chosen.extend(resched[:1])
    good = sorted((t for t in timelines if t['state'] == 'success'),
                  key=lambda t: -t['latency_us'])
    chosen.extend(good[:max(1, limit - len(chosen))])
    return chosen[:limit]
