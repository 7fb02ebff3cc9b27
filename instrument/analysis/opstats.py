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
"""Run-wide figures per nova operation (the report's ``operations``).

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
"""

import collections
import typing

from instrument.analysis import breakdown
from instrument.analysis import classify
from instrument.analysis import operations
from instrument import schema

EXAMPLES = 5
COUNTED = ('requests of the same operation in flight when the request '
           'started (other operations, e.g. status polls, not counted)')


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
        out[op] = _one(op, by_op[op], [
            f for f in failures if f.get('operation') == op])
    return out


def _one(op: str, reqs: list, failures: list) -> dict:
    # (the times: a request whose span end was lost is left out)
    good = [s for s in reqs if s.state in operations.GOOD_STATES and
            not getattr(s, 'lost_ends', 0)]
    states = collections.Counter()
    examples: dict = {}
    causes = collections.Counter()
    stopped: dict = {}
    rows = 0
    tried = 0
    retried = 0
    for s in reqs:
        insts = s.instances or [{'inst': None, 'state': s.state,
                                 'cause': None, 'stopped': None,
                                 'attempts': 0}]
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
    names = breakdown._components(good)
    comps = [s.comp for s in good]
    sql_ins = [s.sql_in for s in good]
    comp_stats = {}
    cp_total: collections.Counter = collections.Counter()
    for s in good:
        cp_total.update(s.cp)
    lat_total = sum(s.latency for s in good) or 1
    for name in names:
        comp_stats[name] = breakdown.stats([c.get(name, 0) for c in comps])
    conc = breakdown.concurrency([s.start for s in reqs],
                                 [s.end for s in reqs])
    at_start = dict(zip((s.req for s in reqs), conc['at_start'],
                        strict=True))
    levels: dict = {}
    for s, comp, sql_in in zip(good, comps, sql_ins, strict=True):
        n = int(at_start[s.req])
        lv = levels.setdefault(breakdown.level_label(n), {
            'requests': 0, 'sum': {}, 'latency': [], 'lo': n})
        lv['requests'] += 1
        lv['latency'].append(s.latency)
        lv['lo'] = min(lv['lo'], n)
        for name, us in comp.items():
            lv['sum'][name] = lv['sum'].get(name, 0) + us
        for us in sql_in.values():
            lv['sum']['sql'] = lv['sum'].get('sql', 0) + us
    level_rows = [{
        'level': label, 'requests': lv['requests'],
        'mean_us': {k: v / lv['requests'] for k, v in lv['sum'].items()},
        'latency': breakdown.stats(lv['latency'])}
        for label, lv in sorted(levels.items(),
                                key=lambda kv: kv[1]['lo'])]
    by_state: dict = {}
    for s in reqs:
        by_state.setdefault(s.state, []).append(s.latency)
    known = operations.states_of(op)
    state_order = list(known) + sorted(set(states) - set(known))
    figures = {
        'operation': op,
        'requests': len(reqs), 'instances': rows,
        'state_order': state_order,
        'states': dict(states), 'state_requests': examples,
        'causes': [{'state': st, 'cls': cls, 'count': n}
                   for (st, cls), n in causes.most_common()],
        'stopped': [{'ev': ev, 'host': host, 'open': is_open,
                     'count': len(r), 'requests': r[:EXAMPLES]}
                    for (ev, host, is_open), r in sorted(
                        stopped.items(), key=lambda kv: -len(kv[1]))],
        'failures': failures,
        'duration_s': duration,
        'throughput_rps': len(reqs) / duration,
        'success_rate': n_good / rows if rows and known else None,
        'retry_rate': retried / tried if tried else None,
        'db_retry_rate': sum(1 for s in reqs if s.db_retries) / len(reqs),
        'latency': breakdown.stats([s.latency for s in good]),
        'latency_by_state': {k: breakdown.stats(v)
                             for k, v in by_state.items()},
        'components': comp_stats, 'component_order': names,
        'critical_path_us': dict(cp_total),
        'critical_path_share': {k: v / lat_total
                                for k, v in cp_total.items()},
        'concurrency': {'counted': COUNTED, 'max': conc['max'],
                        'mean': conc['mean'], 'series': conc['series']},
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
            c = per_cell.setdefault(row['cell'], {
                'db': row['db'], 'durations': [], 'errors': 0})
            if row['dur_us'] is not None:
                c['durations'].append(row['dur_us'])
            if row['st'] != 'ok':
                c['errors'] += 1
    cells = {}
    for name, c in sorted(per_cell.items()):
        cells[name] = {'db': c['db'], 'errors': c['errors'],
                       'time': breakdown.stats(c['durations'])}
    slow = None
    if cells:
        slow = max(cells, key=lambda n: cells[n]['time'].get('median', 0))
    return {'modes': dict(modes), 'mode_requests': mode_reqs,
            'cells': cells, 'slow_cell': slow}
