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
"""Two runs side by side: a tuning experiment's before and after.

Throughput, success and reschedule rates; end-to-end and per-component
latency of successful boots (medians, p95, and a two-sided Mann-Whitney
U test from ``scipy.stats`` on the per-request distributions, so a
change is called significant only when p < ``alpha``); the same per
operation (``operations``: states, success and retry rates, latency per
component); and the top SQL classes (calls and time per call) in either
run.
"""

import typing

import numpy
from scipy import stats as sstats

from instrument.analysis import opstats
from instrument.analysis import report_text

fmt_us = report_text.fmt_us


def _good(report: dict) -> list:
    return [r for r in report['requests'] if r['kind'] == 'boot' and
            r['state'] in ('success', 'rescheduled_success')]


def _test(a: list, b: list) -> typing.Optional[float]:
    if len(a) < 2 or len(b) < 2:
        return None
    if numpy.ptp(a + b) == 0:
        return 1.0
    return float(sstats.mannwhitneyu(a, b, alternative='two-sided').pvalue)


def _change(a, b):
    if a is None or b is None or not a:
        return None
    return (b - a) / a


def compare(a: dict, b: dict, alpha: float = 0.05, top: int = 10) -> dict:
    """The differences between run ``a`` and run ``b``."""
    sa, sb = a['summary'], b['summary']
    ga, gb = _good(a), _good(b)
    out = {'alpha': alpha, 'runs': {
        'a': {'boots': sa['boots'], 'successful': len(ga)},
        'b': {'boots': sb['boots'], 'successful': len(gb)}}}
    rates = {}
    for key in ('throughput_rps', 'success_throughput_rps',
                'success_rate', 'reschedule_rate', 'db_retry_rate'):
        rates[key] = {'a': sa.get(key), 'b': sb.get(key),
                      'change': _change(sa.get(key), sb.get(key))}
    out['rates'] = rates
    latency = []
    names = list(dict.fromkeys(sa['component_order'] +
                               sb['component_order']))
    series = [('end to end', [r['latency_us'] for r in ga],
               [r['latency_us'] for r in gb])]
    for name in names:
        series.append((name,
                       [r['components_us'].get(name, 0) for r in ga],
                       [r['components_us'].get(name, 0) for r in gb]))
    for name, va, vb in series:
        if not va and not vb:
            continue
        ma = float(numpy.median(va)) if va else None
        mb = float(numpy.median(vb)) if vb else None
        p = _test(va, vb)
        latency.append({
            'component': name, 'median_a': ma, 'median_b': mb,
            'p95_a': float(numpy.percentile(va, 95)) if va else None,
            'p95_b': float(numpy.percentile(vb, 95)) if vb else None,
            'change': _change(ma, mb), 'p_value': p,
            'significant': p is not None and p < alpha})
    out['latency'] = latency
    rows_a = {r['id']: r for r in a['sql']['rows']}
    rows_b = {r['id']: r for r in b['sql']['rows']}
    ids = [r['id'] for r in a['sql']['rows'][:top]]
    ids += [i for i in (r['id'] for r in b['sql']['rows'][:top])
            if i not in ids]
    sql = []
    for qid in ids:
        ra, rb = rows_a.get(qid), rows_b.get(qid)
        item = (ra if ra is not None else rows_b[qid])['item']
        sql.append({
            'id': qid, 'item': item,
            'calls_a': ra['calls'] if ra else 0,
            'calls_b': rb['calls'] if rb else 0,
            'r_call_a_us': ra['r_call_us'] if ra else None,
            'r_call_b_us': rb['r_call_us'] if rb else None,
            'total_a_us': ra['total_us'] if ra else 0,
            'total_b_us': rb['total_us'] if rb else 0,
            'change': _change(ra['r_call_us'] if ra else None,
                              rb['r_call_us'] if rb else None)})
    out['sql'] = sql
    out['operations'] = compare_operations(a, b, alpha)
    return out


def _op_good(report: dict, op: str) -> list:
    return [r for r in report['requests'] if r['kind'] == op and
            r['state'] in ('success', 'rescheduled_success')]


def _latency_rows(ga: list, gb: list, alpha: float) -> list:
    names = []
    for r in ga + gb:
        for name in r['components_us']:
            if name not in names:
                names.append(name)
    series = [('end to end', [r['latency_us'] for r in ga],
               [r['latency_us'] for r in gb])]
    series += [(name, [r['components_us'].get(name, 0) for r in ga],
                [r['components_us'].get(name, 0) for r in gb])
               for name in names]
    rows = []
    for name, va, vb in series:
        ma = float(numpy.median(va)) if va else None
        mb = float(numpy.median(vb)) if vb else None
        p = _test(va, vb)
        rows.append({'component': name, 'median_a': ma, 'median_b': mb,
                     'change': _change(ma, mb), 'p_value': p,
                     'significant': p is not None and p < alpha})
    return rows


def compare_operations(a: dict, b: dict, alpha: float = 0.05) -> list:
    """Per operation in either run (``other`` left out): requests,
    success and retry rates, and the latency of its successful requests
    per component (Mann-Whitney U as for boots)."""
    oa = a.get('operations') or {}
    ob = b.get('operations') or {}
    kinds = {r['kind'] for r in a['requests']} | \
        {r['kind'] for r in b['requests']}
    out = []
    for op in opstats.order(kinds - {'other'}):
        fa, fb = oa.get(op) or {}, ob.get(op) or {}
        ga, gb = _op_good(a, op), _op_good(b, op)
        rates = {}
        for key in ('success_rate', 'retry_rate', 'db_retry_rate'):
            rates[key] = {'a': fa.get(key), 'b': fb.get(key),
                          'change': _change(fa.get(key), fb.get(key))}
        out.append({
            'operation': op,
            'requests_a': sum(1 for r in a['requests'] if r['kind'] == op),
            'requests_b': sum(1 for r in b['requests'] if r['kind'] == op),
            'successful_a': len(ga), 'successful_b': len(gb),
            'states_a': fa.get('states', {}),
            'states_b': fb.get('states', {}),
            'rates': rates, 'latency': _latency_rows(ga, gb, alpha)})
    return out


def _pct(change) -> str:
    return '-' if change is None else '%+.1f%%' % (100 * change)


def render(cmp: dict, name_a: str = 'A', name_b: str = 'B') -> str:
    out = ['# compare %s (A) -> %s (B)' % (name_a, name_b),
           '# A: %(boots)d boots, %(successful)d successful' %
           cmp['runs']['a'],
           '# B: %(boots)d boots, %(successful)d successful' %
           cmp['runs']['b'], '']
    rates = []
    for key, v in cmp['rates'].items():
        def show(x, key=key):
            if x is None:
                return '-'
            return '%.3f/s' % x if key.endswith('rps') else \
                report_text.fmt_pct(x)
        rates.append((key, show(v['a']), show(v['b']),
                      _pct(v['change'])))
    out.extend(report_text.table(['rate', 'A', 'B', 'change'], rates))
    out.append('')
    out.append('Latency of successful boots (Mann-Whitney U, two-sided, '
               'alpha %.2f)' % cmp['alpha'])
    latency = []
    for r in cmp['latency']:
        latency.append((r['component'], fmt_us(r['median_a']),
                     fmt_us(r['median_b']), _pct(r['change']),
                     fmt_us(r['p95_a']), fmt_us(r['p95_b']),
                     '-' if r['p_value'] is None else '%.3g' % r['p_value'],
                     'yes' if r['significant'] else 'no'))
    out.extend(report_text.table(['component', 'median A', 'median B',
                                  'change', 'p95 A', 'p95 B', 'p',
                                  'significant'], latency))
    out.append('')
    out.append('Top SQL classes')
    sql = [(r['id'], r['item'], r['calls_a'], r['calls_b'],
             fmt_us(r['r_call_a_us']), fmt_us(r['r_call_b_us']),
             _pct(r['change'])) for r in cmp['sql']]
    out.extend(report_text.table(['Query ID', 'Item', 'calls A',
                                  'calls B', 'R/Call A', 'R/Call B',
                                  'change'], sql, 'llrrrrr'))
    for op in cmp.get('operations') or []:
        if op['operation'] == 'boot':
            continue  # the sections above
        out.append('')
        out.append('Operation %s: A %d requests (%d successful), B %d (%d)'
                   % (op['operation'], op['requests_a'],
                      op['successful_a'], op['requests_b'],
                      op['successful_b']))
        out.append('  states A: %s' % _states(op['states_a']))
        out.append('  states B: %s' % _states(op['states_b']))
        out.extend('  ' + line for line in report_text.table(
            ['rate', 'A', 'B', 'change'], [
                (key, report_text.fmt_pct(v['a']),
                 report_text.fmt_pct(v['b']), _pct(v['change']))
                for key, v in op['rates'].items()]))
        out.extend('  ' + line for line in report_text.table(
            ['component', 'median A', 'median B', 'change', 'p',
             'significant'], [
                (r['component'], fmt_us(r['median_a']),
                 fmt_us(r['median_b']), _pct(r['change']),
                 '-' if r['p_value'] is None else '%.3g' % r['p_value'],
                 'yes' if r['significant'] else 'no')
                for r in op['latency'] if r['median_a'] or r['median_b']]))
    return '\n'.join(out) + '\n'


def _states(states: dict) -> str:
    return ', '.join('%s %d' % kv for kv in sorted(states.items())) or '-'
