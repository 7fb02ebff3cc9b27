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
"""The terminal report: plain text from a report dict.

Sections in reading order: input and data loss, clock offsets, final
states and rates of boots, time per component of boots, the operations
(an overview, then a section per operation other than boot that
occurred: its states, rates, times, cells), failures, SQL digest (the
pt-query-digest profile, then one block per class).  Numbers use
pt-query-digest's units (``us``, ``ms``, ``s``).
"""

import datetime
import typing

from instrument.analysis import periodic
from instrument.analysis import releases as releases_mod
from instrument.analysis import resources
from instrument.analysis import services
from instrument.analysis import sqldigest
from instrument.analysis import waits

STATE_ORDER = ('success', 'rescheduled_success', 'compute_failure',
               'scheduling_failure', 'api_failure', 'incomplete')


def fmt_us(us: typing.Optional[float]) -> str:
    """pt-query-digest style durations: ``850us``, ``12ms``, ``3s``."""
    if us is None:
        return '-'
    us = float(us)
    if abs(us) < 1000:
        return '%dus' % round(us)
    if abs(us) < 1_000_000:
        ms = us / 1000
        return ('%.1fms' % ms) if abs(ms) < 10 else '%dms' % round(ms)
    s = us / 1e6
    return ('%.2fs' % s) if abs(s) < 10 else '%.1fs' % s


def fmt_offset(us: float) -> str:
    """A clock offset in ms with microsecond precision."""
    return '%+.3fms' % (us / 1000.0)


def fmt_pct(value: typing.Optional[float]) -> str:
    """A share as a percentage with one decimal (``-`` for none)."""
    return '-' if value is None else '%.1f%%' % (100.0 * value)


def clip_words(text: str, width: int, seps: str = ' ',
               ellipsis: str = '...', hard: bool = True) -> str:
    """``text`` in at most ``width`` characters: whole, or cut after the
    last complete word that fits (words end at a character of ``seps``)
    followed by ``ellipsis``; a first word longer than the room is cut
    short with the ellipsis (empty instead when not ``hard``).  Empty
    when not even the ellipsis fits."""
    text = ' '.join(str(text).split())
    if len(text) <= width:
        return text
    room = width - len(ellipsis)
    if room <= 0:
        return ''
    cut = max(text.rfind(sep, 0, room + 1) for sep in seps)
    if cut <= 0:
        return text[:room] + ellipsis if hard else ''
    return text[:cut].rstrip() + ellipsis


def fmt_time(us: typing.Optional[int]) -> str:
    """Microseconds since the epoch as a UTC time to the millisecond."""
    if not us:
        return '-'
    return datetime.datetime.fromtimestamp(
        us / 1e6, datetime.UTC).strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]


def table(headers: list, rows: typing.Iterable[typing.Sequence],
          aligns: typing.Optional[str] = None) -> list:
    """The lines of a plain-text table: a header line, a rule and one
    line per row.  ``aligns`` has one letter per column, ``l`` (left) or
    ``r`` (right); by default the first column is left-aligned, the
    others right-aligned (numbers)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    aligns = aligns or ('l' + 'r' * (len(headers) - 1))

    def line(row):
        out = []
        for i, c in enumerate(row):
            out.append(c.ljust(widths[i]) if aligns[i] == 'l'
                       else c.rjust(widths[i]))
        return '  '.join(out).rstrip()
    return [line(headers), '  '.join('-' * w for w in widths)] + \
        [line(r) for r in cells]


# Lines that would grow with the cloud (one per process, host or
# file) show this many examples, then how many more; the JSON report
# keeps every one.
EXAMPLES = 3


def some(names: typing.Sequence, limit: int = EXAMPLES) -> str:
    """``a, b, c and 37 more``: the first ``limit`` of ``names``."""
    names = [str(n) for n in names]
    if len(names) <= limit:
        return ', '.join(names)
    return '%s and %d more' % (', '.join(names[:limit]),
                               len(names) - limit)


def unended_lines(ld: dict) -> list:
    """The processes without a ``process.end`` record (``load`` of the
    report): one line each when there are few, else one line for all of
    them and a few examples (those whose records stopped first)."""
    rows = ld.get('unended') or []
    why = ('killed, or still running when collected; up to one flush '
           'interval of %s events may be missing')
    if len(rows) <= EXAMPLES:
        return ['no end record from pid %s on %s (%s): %s; last record '
                'at %s' % (row['pid'], row['host'], row['file'],
                           why % 'its', fmt_time(row['last_us']))
                for row in rows]
    hosts = sorted({row['host'] for row in rows})
    first = sorted(rows, key=lambda r: (r['last_us'], r['host'], r['pid']))
    out = ['no end record from %d processes on %d hosts: %s; last '
           'records %s .. %s; e.g. (stopped first):' % (
               len(rows), len(hosts), why % 'each one\'s',
               fmt_time(first[0]['last_us']),
               fmt_time(first[-1]['last_us']))]
    out.extend('  pid %s on %s (%s), last record at %s' % (
        row['pid'], row['host'], row['file'], fmt_time(row['last_us']))
        for row in first[:EXAMPLES])
    out.append('  and %d more processes (every one in the JSON report, '
               'load.unended)' % (len(rows) - EXAMPLES))
    return out


def stopped_groups(rows: typing.Iterable[dict]) -> list:
    """Rows ``{ev, host, open, count, requests}`` of where incomplete
    instances stopped, grouped by event and open/ended across hosts:
    ``{ev, open, count, hosts, example}``, the most instances first,
    ``hosts`` too."""
    groups: dict = {}
    for row in rows:
        g = groups.setdefault((row['ev'], bool(row['open'])), {
            'ev': row['ev'], 'open': bool(row['open']), 'count': 0,
            'per_host': {}, 'example': row['requests'][0]})
        g['count'] += row['count']
        g['per_host'][row['host']] = g['per_host'].get(
            row['host'], 0) + row['count']
    out = []
    for g in sorted(groups.values(), key=lambda g: (-g['count'], g['ev'],
                                                    g['open'])):
        per_host = g.pop('per_host')
        g['hosts'] = sorted(per_host, key=lambda h: (-per_host[h], h))
        out.append(g)
    return out


def where_phrase(hosts: list) -> str:
    """``cmp-000`` or ``40 hosts (cmp-007, cmp-002, cmp-021 and 37
    more)``."""
    if len(hosts) == 1:
        return hosts[0]
    return '%d hosts (%s)' % (len(hosts), some(hosts))


def stopped_lines(rows: typing.Iterable[dict]) -> list:
    """The indented lines of ``stopped_groups``: one per event."""
    return ['  %-32s %-5s %5d instances on %s  e.g. %s' % (
        g['ev'], 'open' if g['open'] else 'ended', g['count'],
        where_phrase(g['hosts']), g['example'])
        for g in stopped_groups(rows)]


def boot_rates(s: dict) -> list:
    """The rates and throughput of boots (``summary``), each with its
    unit: instances or boot requests."""
    built = s.get('instances_built')
    return [
        'success rate %s of %d instances; reschedule rate %s of %s '
        'instances that reached a compute; DB retries in %s of %d boot '
        'requests' % (fmt_pct(s['success_rate']), s['instances'],
                      fmt_pct(s['reschedule_rate']),
                      'the' if built is None else built,
                      fmt_pct(s['db_retry_rate']), s['boots']),
        'throughput %.2f boot requests/s (%.2f successful boot requests/s) '
        'over %.1f s; boot requests in flight max %d, mean %.1f' % (
            s['throughput_rps'], s['success_throughput_rps'],
            s['duration_s'], s['concurrency']['max'],
            s['concurrency']['mean'])]


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
    rows = []
    every = []
    for op, f in ops.items():
        lat, all_reqs = op_latency(f)
        mark = '*' if all_reqs else ''
        if all_reqs:
            every.append(op)
        rows.append((op, f['requests'], f['instances'],
                     fmt_pct(f['success_rate']), fmt_pct(f['retry_rate']),
                     fmt_us(lat.get('median')) + mark,
                     fmt_us(lat.get('p95')) + mark,
                     f['concurrency']['max']))
    note = ('success: share of the instances (a request without one '
            'counts as one); retried: share of the instances tried on a '
            'host; median, p95: end to end of the successful requests')
    if every:
        note += ('; * of every request (%s: no success state)' %
                 ', '.join(every))
    return rows, note


def render(report: dict, sql_blocks: int = 5) -> str:
    """The text report of ``report`` (``pipeline.analyse``), with the
    ``sql_blocks`` costliest SQL classes in detail."""
    out = []
    _inputs(report, out)
    _load(report, out)
    _clocks(report, out)
    _states(report, out)
    _components(report, out)
    _operations(report, out)
    out.extend(waits.text_lines(report.get('waits')))
    out.extend(periodic.text_lines(report.get('periodic')))
    _failures(report, out)
    services.text(report, out)
    resources.text(report, out)
    _sql(report, out, sql_blocks)
    return '\n'.join(out) + '\n'


def _title(out: list, text: str) -> None:
    out.extend(['', text, '=' * len(text)])


def _inputs(report: dict, out: list) -> None:
    inp = report['inputs']
    summary = report['summary']
    out.append('# instrument-report: %d files, %.1f MB, %d lines, %d '
               'records' % (len(inp['files']), inp['bytes'] / 1e6,
                            inp['lines'], inp['records']))
    # the run's duration: one definition, the demo's too
    out.append('# run %s .. %s UTC: %.1f s from the first request\'s start '
               'to the last request\'s end (corrected clocks)' % (
                   fmt_time(summary['start_us']),
                   fmt_time(summary['end_us']), summary['duration_s']))
    win = report.get('window') or {}
    if win.get('since_us') is not None or win.get('until_us') is not None:
        out.append('# --since/--until %s .. %s: %d requests that started '
                   'outside and %d SQL statements outside left out' % (
                       fmt_time(win['since_us']), fmt_time(win['until_us']),
                       win['requests_outside'], win['sql_outside']))
    mixed = releases_mod.text(report.get('releases') or [])
    if mixed:
        out.append(mixed)
    out.append('# analysed in %.1f s with %d worker(s)' % (
        report.get('run', {}).get('seconds', 0.0),
        report.get('run', {}).get('jobs', 1)))


def _load(report: dict, out: list) -> None:
    ld = report['load']
    bad = {k: v for k, v in ld['counts'].items() if v}
    if not bad and not ld['loss'] and not ld['problems'] and \
            not ld.get('duplicate_spans') and not ld.get('unended'):
        out.append('# every line valid; no data loss reported')
        return
    _title(out, 'Input problems')
    for problem in ld['problems']:
        out.append('! ' + problem)
    out.extend(('  ' if line.startswith(' ') else '! ') + line
               for line in unended_lines(ld))
    dups = ld.get('duplicates') or []
    for row in dups[:EXAMPLES]:
        out.append('! %s: %d of its %d records were read before (a '
                   'copy, or records written twice); left out of every '
                   'figure' % (row['file'], row['duplicates'],
                               row['records']))
    if len(dups) > EXAMPLES:
        out.append('! and %d more files with records read before (every '
                   'one in the JSON report, load.duplicates)' % (
                       len(dups) - EXAMPLES))
    if bad:
        out.append('bad lines: ' + ', '.join(
            '%s %d' % (k, v) for k, v in bad.items()))
        for kind, samples in ld['samples'].items():
            for fname, lineno, reason in samples:
                out.append('  %s:%d: %s: %s' % (fname, lineno, kind,
                                                 reason))
    if ld['loss']:
        out.append('data loss per process (seq gaps, sink.drops):')
        out.extend('  ' + line for line in table(
            ['file', 'pid', 'records', 'missing', 'dropped'],
            [(r['file'], r['pid'], r['records'], r['missing'],
              r['dropped']) for r in ld['loss']]))
    if ld.get('duplicate_spans'):
        out.append('duplicate span records ignored: %d' %
                   ld['duplicate_spans'])


def loss_note(report: dict) -> typing.Optional[str]:
    """The warning that goes beside every figure computed from input
    with losses, None without losses."""
    q = report.get('quality') or {}
    cut = q.get('unreadable') or []
    if not q.get('lost_records') and not cut:
        return None
    lost = ['%d records lost in %d process(es)' % (
        q['lost_records'], len(q['processes']))] if q['lost_records'] else []
    # what a file lost after the point it could not be read past is
    # not known: named, not counted
    lost.extend('the rest of %s after line %d' % (u['file'], u['after_line'])
                for u in cut[:3])
    if len(cut) > 3:
        lost.append('the rest of %d more file(s)' % (len(cut) - 3))
    return ('! computed from input with losses: %s%s; %d of %d requests '
            '(%s) have events there and may be incomplete or mis-timed '
            '(see Input problems)' % (
                ' and '.join(lost),
                ' on ' + ', '.join(q['hosts']) if q['hosts'] else '',
                q['requests_affected'], q['requests'],
                fmt_pct(q['requests_affected'] / (q['requests'] or 1))))


def _loss_note(report: dict, out: list) -> None:
    note = loss_note(report)
    if note:
        out.append(note)


def degraded_note(report: dict) -> typing.Optional[str]:
    """Requests left out of the times: a span's end was lost."""
    deg = report['summary'].get('degraded') or {}
    if not deg.get('requests'):
        return None
    return ('! %d request(s) (%d boots) left out of these times: the end '
            'of %d span(s) was lost (e.g. %s); their states still count' % (
                deg['requests'], deg['boots'], deg['lost_ends'],
                deg['examples'][0]))


def _degraded_note(report: dict, out: list) -> None:
    note = degraded_note(report)
    if note:
        out.append(note)


def _clocks(report: dict, out: list) -> None:
    clk = report['clocks']
    _title(out, 'Clock offsets (added to each host\'s timestamps)')
    rows = []
    for host, info in sorted(clk['hosts'].items()):
        low, high = info['low_us'], info['high_us']
        if info['status'] == 'uncorrected':
            spread = 'no causal pairs'
        elif info['status'] == 'reference':
            spread = 'reference'
        elif low is None or high is None:
            spread = 'one-sided: [%s, %s]' % (
                '-inf' if low is None else fmt_offset(low),
                '+inf' if high is None else fmt_offset(high))
        else:
            spread = '-%dus/+%dus' % (info['offset_us'] - low,
                                      high - info['offset_us'])
        rows.append((host, fmt_offset(info['offset_us']), spread,
                     '-' if info['group'] is None else info['group'],
                     info['pairs'], info['status']))
    out.extend(table(['host', 'offset', 'uncertainty', 'group', 'pairs',
                      'status'], rows, 'lrlrrl'))
    out.append('%d causal pairs from %d hops, %d group(s)' % (
        clk['pairs'], clk['hops']['hops'], clk['groups']))
    out.extend(clock_notes(clk))
    for d in clk['dropped']:
        origin = d['origin']
        out.append('! inconsistent pair dropped: %s (%s:%s %s)' % (
            d['reason'], origin[0], origin[1], origin[2] or ''))
    caus = report['causality']
    if caus['violations']:
        out.append('! %d of %d cross-host hops still violate causality '
                   'after correction' % (caus['violations'],
                                         caus['checked']))


def clock_notes(clk: dict) -> list:
    """What the offsets are and which figures depend on them."""
    hosts = clk['hosts']
    widths = [i['high_us'] - i['low_us'] for i in hosts.values()
              if i['status'] == 'corrected']
    out = ['offset: the raw clock where causality allows it, else the '
           'centre of the feasible interval (else its one end); times '
           'between hosts (rpc, rpc.queue, the critical path, causality '
           'checks) depend on it' + (
               ', each uncertain by up to the widest interval involved '
               '(widest here %s)' % fmt_us(max(widths)) if widths else '')]
    one = sorted(h for h, i in hosts.items() if i['status'] == 'one-sided')
    if one:
        out.append('! bounded on one side only: %s (a clock off in the '
                   'other direction is not seen; times across these '
                   'hosts may be wrong)' % ', '.join(one))
    none = sorted(h for h, i in hosts.items()
                  if i['status'] == 'uncorrected')
    if none and len(none) < len(hosts):
        out.append('! no causal pairs: %s (their raw clocks are used '
                   'as they are)' % ', '.join(none))
    return out


def _states(report: dict, out: list) -> None:
    s = report['summary']
    _title(out, 'Requests')
    _loss_note(report, out)
    out.append('%d boot requests (%d instances), %d other API requests' % (
        s['boots'], s['instances'], s['other_requests']))
    total = s['instances'] or 1
    rows = [(state, s['states'].get(state, 0),
             fmt_pct(s['states'].get(state, 0) / total))
            for state in STATE_ORDER]
    out.extend(table(['final state', 'instances', 'share'], rows))
    out.extend(boot_rates(s))
    if s['concurrency'].get('counted'):
        out.append('(in flight counts %s)' % s['concurrency']['counted'])
    stopped = {}
    for row in report['requests']:
        if row['kind'] != 'boot':
            continue
        for inst in row['instances']:
            if inst['state'] == 'incomplete' and inst['stopped']:
                key = (inst['stopped']['ev'], inst['stopped']['host'],
                       bool(inst['stopped']['open']))
                stopped.setdefault(key, []).append(row['req'])
    if stopped:
        out.append('incomplete instances stopped at:')
        out.extend(stopped_lines(
            {'ev': ev, 'host': host, 'open': is_open, 'count': len(reqs),
             'requests': reqs}
            for (ev, host, is_open), reqs in stopped.items()))


def multi_instance_note(summary: dict) -> str:
    """Why a component's time can exceed end to end: the successful
    boots that built several instances, whose builds ran side by side
    and whose exclusive times are summed ('' when there is none)."""
    n = summary.get('multi_instance_boots') or 0
    if not n:
        return ''
    return ('%d of the %d boots built several instances at once: the '
            'exclusive times of their instances (compute.*) are added '
            'up, so a component can exceed end to end; crit.path is the '
            'share of wall time' % (n, summary['latency']['count']))


def _components(report: dict, out: list) -> None:
    s = report['summary']
    _title(out, 'Time per successful boot, exclusive, per component')
    _loss_note(report, out)
    _degraded_note(report, out)
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
        rows.append((name, fmt_us(st['median']), fmt_us(st['p90']),
                     fmt_us(st['p95']), fmt_us(st['p99']),
                     fmt_us(st['max']), fmt_us(st['mean']),
                     fmt_us(sq.get('mean', 0)),
                     fmt_pct(s['critical_path_share'].get(name, 0))))
    rows.append(('end to end', fmt_us(lat['median']), fmt_us(lat['p90']),
                 fmt_us(lat['p95']), fmt_us(lat['p99']),
                 fmt_us(lat['max']), fmt_us(lat['mean']), '', '100%'))
    out.extend(table(['component', 'median', 'p90', 'p95', 'p99', 'max',
                      'mean', 'sql mean', 'crit.path'], rows))
    out.append('min end to end %s; times of %d successful boot requests'
               % (fmt_us(lat['min']), lat['count']))
    if s['levels']:
        out.append('')
        out.append('mean time per component by concurrency at start:')
        names = [n for n in s['component_order'] if n != 'gap']
        top = sorted(names, key=lambda n: -sum(
            lv['mean_us'].get(n, 0) for lv in s['levels']))[:6]
        levels = []
        for lv in s['levels']:
            levels.append([lv['level'], lv['requests'],
                           fmt_us(lv['latency']['median'])] +
                          [fmt_us(lv['mean_us'].get(n, 0)) for n in top])
        out.extend(table(['in flight', 'boot requests', 'median e2e'] +
                         top,
                         levels))


# how a recovered error was recovered (requests.Fates), as printed
RECOVERED_BY = (('db_retry', 'db retry'), ('rescheduled', 'rescheduled'),
                ('succeeded', 'succeeded'))
FAILED_STATES = ('compute_failure', 'scheduling_failure', 'api_failure')


def _failures(report: dict, out: list) -> None:
    _title(out, 'Failures (where raised, messages normalised)')
    _loss_note(report, out)
    failures = report['failures']
    if not failures:
        out.append('none')
    else:
        rows = [(f.get('operation', '-'), f['component'], f['ev'],
                 f['cls'].rsplit('.', 1)[-1], f['count'],
                 f.get('final', '-'), f.get('recovered', '-'),
                 recovered_how(f), clip_words(f['message'], 70))
                for f in failures]
        out.extend(table(['operation', 'component', 'event', 'error',
                          'raised', 'final', 'recovered', 'how',
                          'message'], rows, 'llllrrrll'))
        out.append('')
        out.extend([
            'raised: times raised, each error once where it was raised '
            '(one can end several instances)',
            'final: of those, the final cause of an instance or request '
            '(boots: per instance below)',
            'recovered: retried by oslo.db, rescheduled to another host, '
            'or raised in an instance that still succeeded'])
        rest = sum(f['count'] - f['final'] - f['recovered']
                   for f in failures if 'final' in f)
        if rest:
            out.append('%d raised neither final nor recovered (in a '
                       'request without an outcome, or one that another '
                       'error ended)' % rest)
    _final_causes(report, out)
    if report['retries']:
        out.append('')
        out.append('DB retries (oslo.db wrap_db_retry):')
        out.extend(table(['function', 'cause', 'count'], [
            (r['func'], r['cls'], r['count']) for r in report['retries']],
            'llr'))


def recovered_how(f: dict) -> str:
    """How the recovered errors of a failure row were recovered."""
    by = f.get('recovered_by') or {}
    return ', '.join(label for key, label in RECOVERED_BY
                     if by.get(key)) or '-'


def final_cause_rows(summary: dict) -> list:
    """``(state, cause class, instances)`` of the boot instances that
    failed (``summary.causes``), with those of no cause recorded."""
    causes = summary.get('causes') or []
    rows = [(c['state'], c['cls'].rsplit('.', 1)[-1], c['count'])
            for c in causes]
    states = summary.get('states') or {}
    for state in FAILED_STATES:
        missing = states.get(state, 0) - sum(
            c['count'] for c in causes if c['state'] == state)
        if missing > 0:
            rows.append((state, '(none recorded)', missing))
    return rows


def _final_causes(report: dict, out: list) -> None:
    rows = final_cause_rows(report['summary'])
    if not rows:
        return
    out.append('')
    out.append('final causes of the boot instances that failed (other '
               'operations: their sections):')
    out.extend(table(['final state', 'cause', 'instances'], rows, 'llr'))


def _sql(report: dict, out: list, blocks: int) -> None:
    sql = report['sql']
    _title(out, 'SQL profile (grouped by %s, ordered by %s)' % (
        sql['group_by'], sql['order_by']))
    _loss_note(report, out)
    if not sql['rows']:
        out.append('no SQL statements')
        return
    out.append('# %d statements in %d classes, %s total%s' % (
        sql['calls'], sql['classes'], fmt_us(sql['total_us']),
        ', %d outside --since/--until' % sql['filtered_out']
        if sql['filtered_out'] else ''))
    rows = []
    for r in sql['rows']:
        rows.append((r['rank'], r['id'], '%.4f' % (r['total_us'] / 1e6),
                     '%.1f%%' % (100 * r['pct']), r['calls'],
                     '%.4f' % (r['r_call_us'] / 1e6), '%.2f' % r['v_m'],
                     r['item']))
    misc = sql['misc']
    if misc:
        rows.append(('MISC', '0xMISC', '%.4f' % (misc['total_us'] / 1e6),
                     '%.1f%%' % (100 * misc['pct']), misc['calls'], '',
                     '', '<%d ITEMS>' % misc['classes']))
    out.extend(table(['Rank', 'Query ID', 'Response time', '%', 'Calls',
                      'R/Call', 'V/M', 'Item'], rows, 'rlrrrrrl'))
    for r in sql['rows'][:blocks]:
        out.append('')
        out.extend(class_block(r, sql['group_by']))


# Statements sent for the pool or a new connection, not by a caller.
SIDE_KINDS = {'POOL_RESET', 'CONNECT'}


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
            unknown, r['calls'])
    return str(rows), ''


def class_block(r: dict, group_by: str) -> list:
    """One pt-query-digest style block for a class."""
    lines = ['# Query %d: ID %s (%s %s)' % (
        r['rank'], r['id'], group_by, r['item'])]
    lines.append('# services %s; databases %s; called from %s' % (
        ', '.join(r['services']) or '-', ', '.join(r['databases']) or '-',
        ', '.join(r['calls_from'][:4]) or '-'))
    kinds = r.get('kinds') or {}
    if len(kinds) > 1 or set(kinds) & SIDE_KINDS:
        # e.g. ROLLBACKs of transactions and of the pool's resets
        lines.append('# kinds %s' % ', '.join(
            '%s %d' % item for item in kinds.items()))
    lines.append('# Attribute    pct   total     min     max     avg     '
                 '95%  stddev  median')
    lines.append('# ============ === ======= ======= ======= ======= '
                 '======= ======= =======')
    lines.append('# Count        %3d %7d' % (round(100 * r['pct_calls'])
                                             if 'pct_calls' in r else 0,
                                             r['calls']))
    lines.append('# Exec time    %3d %7s %7s %7s %7s %7s %7s %7s' % (
        round(100 * r['pct']), fmt_us(r['total_us']), fmt_us(r['min_us']),
        fmt_us(r['max_us']), fmt_us(r['avg_us']), fmt_us(r['p95_us']),
        fmt_us(r['stddev_us']), fmt_us(r['median_us'])))
    lines.append('# Rows             %7s%s' % rows_cell(r))
    lines.append('# Errors           %7d' % r['errors'])
    if r['aggregated']:
        lines.append('# (%d statements from sql.agg aggregates: their '
                     'percentiles are estimated)' % r['aggregated'])
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


def _operations(report: dict, out: list) -> None:
    """The overview of every operation, then one section per operation
    other than boot (whose sections come first)."""
    ops = report.get('operations') or {}
    if not ops:
        return
    _title(out, 'Operations (every request named by what it reached)')
    note = loss_note(report)
    if note:
        out.append(note)
    rows, rows_note = op_rows(ops)
    out.extend(table(['operation', 'requests', 'instances', 'success',
                      'retried', 'median', 'p95', 'max in flight'], rows))
    out.append('(%s)' % rows_note)
    out.append('(in flight counts %s)' % next(iter(ops.values()))[
        'concurrency']['counted'])
    for op, f in ops.items():
        if op in ('boot', 'other'):
            continue
        operation_section(op, f, out, note)


def operation_section(op: str, f: dict, out: list,
                      note: typing.Optional[str] = None) -> None:
    """The text section of one operation (``report['operations'][op]``);
    ``note``: the warning of a lossy input (``loss_note``)."""
    _title(out, 'Operation: %s' % op)
    if note:
        out.append(note)
    out.append('%d requests (%d instances) over %.1f s, %.2f requests/s; '
               'success rate %s of the instances, retried on another '
               'host %s of the instances tried on a host, DB retries in '
               '%s of the requests; requests in flight max %d, mean %.1f'
               % (f['requests'], f['instances'], f['duration_s'],
                  f['throughput_rps'], fmt_pct(f['success_rate']),
                  fmt_pct(f['retry_rate']), fmt_pct(f['db_retry_rate']),
                  f['concurrency']['max'], f['concurrency']['mean']))
    total = f['instances'] or 1
    rows = [(state, f['states'].get(state, 0),
             fmt_pct(f['states'].get(state, 0) / total),
             ' '.join(f['state_requests'].get(state, [])[:1]))
            for state in f['state_order'] if f['states'].get(state)]
    out.extend(table(['final state', 'count', 'share', 'e.g.'], rows,
                     'lrrl'))
    if f['causes']:
        out.append('causes:')
        for c in f['causes']:
            out.append('  %-22s %-48s %4d' % (c['state'], c['cls'],
                                               c['count']))
    if f['stopped']:
        out.append('incomplete, stopped at:')
        out.extend(stopped_lines(f['stopped']))
    lat = f['latency']
    if lat.get('count'):
        comp_rows: list = []
        for name in f['component_order']:
            st = f['components'].get(name, {})
            if not st.get('count') or not st['max']:
                continue
            comp_rows.append((name, fmt_us(st['median']),
                              fmt_us(st['p95']), fmt_us(st['max']),
                              fmt_us(st['mean']),
                              fmt_pct(f['critical_path_share'].get(name,
                                                                   0))))
        comp_rows.append(('end to end', fmt_us(lat['median']),
                          fmt_us(lat['p95']), fmt_us(lat['max']),
                          fmt_us(lat['mean']), '100%'))
        out.append('time per successful request, exclusive, per '
                   'component (%d requests):' % lat['count'])
        out.extend(table(['component', 'median', 'p95', 'max', 'mean',
                          'crit.path'], comp_rows))
    if len(f['levels']) > 1:
        out.append('median end to end by %s in flight at start: %s' % (
            op, ', '.join('%s: %s (%d)' % (
                lv['level'], fmt_us(lv['latency']['median']),
                lv['requests']) for lv in f['levels'])))
    cells = f.get('cells')
    if cells and cells['cells']:
        modes = ', '.join('%s %d' % kv for kv in sorted(
            cells['modes'].items()))
        out.append('cells queried: %s (requests); slow cell: %s' % (
            modes, cells['slow_cell']))
        out.extend(table(['cell', 'database', 'queries', 'median', 'p95',
                          'max', 'errors'], [
            (name, c['db'] or '-', c['time'].get('count', 0),
             fmt_us(c['time'].get('median')), fmt_us(c['time'].get('p95')),
             fmt_us(c['time'].get('max')), c['errors'])
            for name, c in cells['cells'].items()], 'llrrrrr'))
