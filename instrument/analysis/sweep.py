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
"""A sweep: N runs of one cloud under growing load, side by side.

Each run is a report dict (``pipeline.analyse``, or a JSON report read
back) with a label (``{'concurrency': '20'}``, ``{'schedulers': '5'}``
...).  Nothing is analysed again: the figures come from each report's
``requests`` rows and ``resources`` section.

Per operation and run (``operation_figures``):

* the requests, the finished ones (any outcome but ``incomplete``),
  the busy window (the first request's start to the last one's end)
  and the throughput: finished requests per second of that window;
* success, failure and retry rates (a retry: a request one of whose
  instances needed more than one attempt, or whose request did);
* the median and mean critical-path time per component of the
  successful requests that no loss of records touched, and each
  component's share of their critical path;
* the elapsed-time stack: the mean, over the finished requests, of
  the time each spent, by where: a successful first-try request's
  critical path per component, a retried one's whole latency as
  ``retried``, a failed one's as ``failed`` (the stack adds up to the
  mean latency of the finished requests).

A run the demo booted in waves (``--waves``) carries each wave's
servers, time and boots per second (``waves``, from the demo's
``servers.json``; the command reads it, ``demo_waves`` of the report
given here).

Per run: each service's mean and peak CPU (cores) and RSS (MB) while
requests ran (the ``load`` phase of ``resources``), and the share of
its CPU the library's writer thread took (over the whole run; None
without ``writer_cpu_s`` samples).

The sweep key's values are the load when they are all numbers: the
runs are put in load order.  Otherwise (``--by scheduler`` over
``caching`` and ``default``, say) the key is categorical: the runs keep
the order they were given in, each shown by its value, and there is no
saturation point (no step up in load to judge by).

The saturation point of an operation (``saturation``): the runs in
load order (the numeric value of the sweep key), the first run where a
step up in load raised the throughput by less than ``GROWTH`` (5 %),
or where a component's share of the critical path grew by
``SHARE_JUMP`` (10 points) or more; it is named with the component
whose share grew most from the run before, and that component's group
(``scheduler`` of ``scheduler.placement``) with the group's share.
"""

import itertools
import statistics
import typing

from instrument import schema
from instrument.analysis.model import operations
from instrument.analysis.render import schema as report_schema

# below this growth of the throughput for a step up in load, it has
# stopped growing
GROWTH = 0.05
# a component's share of the critical path that grows this much (in
# points of 1.0) from one load to the next has jumped
SHARE_JUMP = 0.10
RETRIED = 'retried'
FAILED = 'failed'
# the series of the stack that are not components
APART = (RETRIED, FAILED)
SWEEP_VERSION = 1


_S = report_schema
_FIGURES = _S.obj(
    "one operation's figures in one run",
    {
        'requests': _S.INT,
        'finished': _S.INT,
        'successful': _S.INT,
        'failed': _S.INT,
        'retried': _S.INT,
        'busy_s': _S.NUM,
        'throughput_rps': _S.NUM,
        'success_rps': _S.NUM,
        'success_rate': _S.NUM_OR_NULL,
        'failure_rate': _S.NUM_OR_NULL,
        'retry_rate': _S.NUM_OR_NULL,
        'latency_median_us': _S.NUM_OR_NULL,
        'timed': {
            'type': 'integer',
            'description': 'successful requests no loss touched',
        },
        'components': _S.mapping(
            _S.obj(
                'critical path of the timed',
                {'median_us': _S.NUM, 'mean_us': _S.NUM, 'share': _S.NUM},
            ),
            'component: its critical-path time',
        ),
        'stack_us': _S.mapping(
            _S.NUM,
            'component, retried or failed: mean '
            'microseconds per finished request',
        ),
    },
)
_SATURATION = _S.either(
    {'type': 'null'},
    _S.obj(
        'where it stops scaling',
        {
            'run': _S.STR,
            'label': _S.mapping(_S.STR, 'key: value'),
            'load': _S.NUM,
            'after': _S.NUM,
            'why': {'enum': ['throughput', 'share']},
            'growth': _S.NUM_OR_NULL,
            'throughput_rps': _S.NUM,
            'component': _S.STR_OR_NULL,
            'share_before': _S.NUM_OR_NULL,
            'share': _S.NUM_OR_NULL,
            'group': _S.STR_OR_NULL,
            'group_share_before': _S.NUM_OR_NULL,
            'group_share': _S.NUM_OR_NULL,
        },
    ),
)
# The JSON Schema of ``sweep()`` (``instrument-report sweep --json``).
SCHEMA: dict = {
    '$schema': _S.DIALECT,
    'title': 'instrument-report sweep',
    'type': 'object',
    'additionalProperties': False,
    'properties': {
        'sweep_version': _S.INT,
        'key': _S.STR,
        'categorical': {
            'type': 'boolean',
            'description': 'the key\'s values are not all '
            'numbers: runs in the order '
            'given, no saturation point',
        },
        'thresholds': _S.obj(
            'of the saturation point', {'growth': _S.NUM, 'share_jump': _S.NUM}
        ),
        'runs': _S.arr(
            _S.obj(
                'a run, in load order',
                {
                    'name': _S.STR,
                    'label': _S.mapping(_S.STR, 'key: value'),
                    'value': _S.STR,
                    'load': _S.NUM_OR_NULL,
                    'releases': _S.STRS,
                    'waves': _S.arr(
                        _S.obj(
                            'a wave of the demo\'s boots',
                            {
                                'wave': _S.INT,
                                'servers': _S.INT,
                                'duration_s': _S.NUM,
                                'boots_per_s': _S.NUM,
                            },
                        )
                    ),
                    'operations': _S.mapping(_FIGURES, 'operation: figures'),
                    'resources': _S.mapping(
                        _S.obj(
                            'a service',
                            {
                                'processes': _S.INT_OR_NULL,
                                'cpu_mean': _S.NUM_OR_NULL,
                                'cpu_peak': _S.NUM_OR_NULL,
                                'rss_mean_mb': _S.NUM_OR_NULL,
                                'rss_peak_mb': _S.NUM_OR_NULL,
                                'library_share': _S.NUM_OR_NULL,
                            },
                        ),
                        'service: CPU (cores) and RSS while requests ran',
                    ),
                },
            )
        ),
        'operations': _S.STRS,
        'missing': _S.mapping(_S.STRS, 'operation: runs without it'),
        'saturation': _S.mapping(_SATURATION, 'operation: its point'),
    },
}
SCHEMA['required'] = list(SCHEMA['properties'])


class SweepError(ValueError):
    """Runs that make no sweep: the message says which and why."""


def _retried(row: dict) -> bool:
    if (row.get('attempts') or 0) > 1:
        return True
    return any(
        (inst.get('attempts') or 0) > 1 for inst in row.get('instances') or ()
    )


def _damaged(row: dict) -> bool:
    return bool(row.get('loss')) or bool(row.get('lost_ends'))


def operation_figures(op: str, rows: list) -> dict:
    """The figures of one operation's request rows in one run (an
    operation without known states, ``other``: no rates, every finished
    request's critical path in the stack)."""
    known = bool(operations.states_of(op))
    finished = [r for r in rows if r['state'] != operations.INCOMPLETE]
    good = [
        r
        for r in finished
        if r['state'] in operations.GOOD_STATES or not known
    ]
    failed = [
        r
        for r in finished
        if known and r['state'] not in operations.GOOD_STATES
    ]
    retried = [r for r in rows if _retried(r)]
    start = min((r['start_us'] for r in rows), default=0)
    end = max((r['end_us'] for r in rows), default=0)
    busy_s = max(end - start, 1) / 1e6
    timed = [r for r in good if not _damaged(r)]
    names = sorted({c for r in timed for c in r['critical_path_us']})
    components = {}
    cp_sum = {
        n: sum(r['critical_path_us'].get(n, 0) for r in timed) for n in names
    }
    cp_total = sum(cp_sum.values())
    for n in names:
        values = [r['critical_path_us'].get(n, 0) for r in timed]
        components[n] = {
            'median_us': float(statistics.median(values)),
            'mean_us': float(statistics.fmean(values)),
            'share': cp_sum[n] / cp_total if cp_total else 0.0,
        }
    stack: dict = {}
    counted = [r for r in finished if not _damaged(r)]
    for r in counted:
        if known and r['state'] not in operations.GOOD_STATES:
            stack[FAILED] = stack.get(FAILED, 0) + r['latency_us']
        elif _retried(r):
            stack[RETRIED] = stack.get(RETRIED, 0) + r['latency_us']
        else:
            for n, us in r['critical_path_us'].items():
                stack[n] = stack.get(n, 0) + us
    n = len(rows)
    return {
        'requests': n,
        'finished': len(finished),
        'successful': len(good),
        'failed': len(failed),
        'retried': len(retried),
        'busy_s': busy_s,
        'throughput_rps': len(finished) / busy_s,
        'success_rps': len(good) / busy_s,
        'success_rate': len(good) / n if n and known else None,
        'failure_rate': len(failed) / n if n and known else None,
        'retry_rate': len(retried) / n if n else None,
        'latency_median_us': float(
            statistics.median([r['latency_us'] for r in timed])
        )
        if timed
        else None,
        'timed': len(timed),
        'components': components,
        'stack_us': {k: v / len(counted) for k, v in stack.items()}
        if counted
        else {},
    }


def resources(report: dict) -> dict:
    """Each service's mean and peak CPU (cores) and RSS (MB) while
    requests ran (the ``load`` phase; else over every phase)."""
    out = {}
    services = (report.get('resources') or {}).get('services') or {}
    for svc, entry in sorted(services.items()):
        phases = entry.get('phases') or {}
        picked = (
            [phases['load']] if 'load' in phases else list(phases.values())
        )
        if not picked:
            continue

        def fig(what, which, picked=picked):
            values = [
                p[what][which]
                for p in picked
                if p.get(what, {}).get(which) is not None
            ]
            if not values:
                return None
            return max(values) if which == 'peak' else statistics.fmean(values)

        lib = entry.get('library') or {}
        out[svc] = {
            'processes': entry.get('processes'),
            'cpu_mean': fig('cpu_cores', 'mean'),
            'cpu_peak': fig('cpu_cores', 'peak'),
            'rss_mean_mb': fig('rss_mb', 'mean'),
            'rss_peak_mb': fig('rss_mb', 'peak'),
            'library_share': lib['writer_cpu_s'] / lib['process_cpu_s']
            if lib.get('process_cpu_s')
            else None,
        }
    return out


def releases(report: dict) -> list:
    """The nova releases (and modes) the run's processes ran."""
    return sorted(
        {
            '%s%s'
            % (
                r.get('nova') or '?',
                ' (%s)' % r['mode'] if r.get('mode') else '',
            )
            for r in report.get('releases') or ()
        }
    )


def _number(value: typing.Any) -> typing.Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def sweep_key(labels: list, by: typing.Optional[str] = None) -> str:
    """The label the runs are swept by: ``by``, else the first label
    key (``concurrency`` first) whose values differ between the runs and
    are all numbers, else the one label every run has whose values
    differ (categorical: ``scheduler=caching``, ``scheduler=default``).
    """
    keys = list(dict.fromkeys(k for label in labels for k in label))
    if by is not None:
        missing = [i for i, label in enumerate(labels) if by not in label]
        if missing:
            raise SweepError(
                'run %d has no label %r (its labels: %s)'
                % (missing[0] + 1, by, _label_text(labels[missing[0]]))
            )
        return by
    keys.sort(key=lambda k: k != 'concurrency')
    differ = [k for k in keys if len({label.get(k) for label in labels}) > 1]
    for k in differ:
        if all(_number(label.get(k)) is not None for label in labels):
            return k
    # no numeric one: the one categorical label that every run has
    every = [k for k in differ if all(k in label for label in labels)]
    if len(every) == 1:
        return every[0]
    raise SweepError(
        'no label that is a number and differs between the '
        'runs%s (labels: %s); give one as KEY=VALUE:RUN or '
        'name it with --by'
        % (
            ', and more than one that is not (%s)' % ', '.join(every)
            if every
            else '',
            '; '.join(_label_text(label) for label in labels),
        )
    )


def _label_text(label: dict) -> str:
    return ','.join('%s=%s' % kv for kv in label.items()) or '(none)'


def sweep(runs: list, by: typing.Optional[str] = None) -> dict:
    """The sweep of ``runs``: ``(name, label, report)`` each, ``label``
    a dict of strings; SweepError when they make no sweep (fewer than
    two runs, a run without a label, no load to order them by, a run
    with no finished request)."""
    if len(runs) < 2:
        raise SweepError('a sweep needs two runs or more, got %d' % len(runs))
    for name, label, _report in runs:
        if not label:
            raise SweepError(
                '%s: no label (give KEY=VALUE:%s, or a '
                'run.json beside it)' % (name, name)
            )
    key = sweep_key([label for _n, label, _r in runs], by)
    categorical = any(_number(label[key]) is None for _n, label, _r in runs)
    # categorical: in the order given
    ordered = (
        runs
        if categorical
        else sorted(runs, key=lambda run: _number(run[1][key]) or 0.0)
    )
    out_runs = []
    ops: list = []
    for name, label, report in ordered:
        by_op: dict = {}
        for row in report.get('requests') or ():
            by_op.setdefault(row['kind'], []).append(row)
        figures = {
            op: operation_figures(op, rows) for op, rows in by_op.items()
        }
        if not any(f['finished'] for f in figures.values()):
            raise SweepError(
                '%s: no finished request (%d requests, none '
                'with an outcome)' % (name, len(report.get('requests') or ()))
            )
        for op in figures:
            if op not in ops:
                ops.append(op)
        out_runs.append(
            {
                'name': name,
                'label': dict(label),
                'value': label[key],
                'load': None if categorical else _number(label[key]),
                'releases': releases(report),
                'waves': list(report.get('demo_waves') or ()),
                'operations': figures,
                'resources': resources(report),
            }
        )
    shared = [
        op for op in ops if sum(op in r['operations'] for r in out_runs) > 1
    ]
    if not shared:
        raise SweepError(
            'no operation is in two runs or more (%s): '
            'nothing to put side by side'
            % '; '.join(
                '%s: %s' % (r['name'], ', '.join(sorted(r['operations'])))
                for r in out_runs
            )
        )
    known = [op for op in schema.OPERATIONS if op in ops]
    ops = known + sorted(set(ops) - set(known))
    return {
        'sweep_version': SWEEP_VERSION,
        'key': key,
        'categorical': categorical,
        'thresholds': {'growth': GROWTH, 'share_jump': SHARE_JUMP},
        'runs': out_runs,
        'operations': ops,
        'missing': {
            op: [r['name'] for r in out_runs if op not in r['operations']]
            for op in ops
            if any(op not in r['operations'] for r in out_runs)
        },
        'saturation': {op: saturation(out_runs, op) for op in ops},
    }


def _grown(before: dict, after: dict) -> typing.Optional[tuple]:
    """The component whose share of the critical path grew most from
    ``before`` to ``after``, and by how much (None: none grew)."""
    best = None
    for n, c in after['components'].items():
        was = before['components'].get(n, {}).get('share', 0.0)
        delta = c['share'] - was
        if delta > 0 and (best is None or delta > best[1]):
            best = (n, delta)
    return best


def group_share(figures: dict, group: str) -> float:
    """The share of the critical path of the components of ``group``
    (``scheduler``: ``scheduler``, ``scheduler.db``...)."""
    return sum(
        c['share']
        for n, c in figures['components'].items()
        if n.split('.')[0] == group
    )


def saturation(runs: list, op: str) -> typing.Optional[dict]:
    """Where ``op`` stops scaling in ``runs`` (in load order): the first
    run whose throughput grew by less than ``GROWTH`` for a step up in
    load, or in which a component's share jumped by ``SHARE_JUMP``;
    None when neither happened."""
    seen = [r for r in runs if op in r['operations']]
    for prev, run in itertools.pairwise(seen):
        a, b = prev['operations'][op], run['operations'][op]
        if (
            run['load'] is None
            or prev['load'] is None
            or run['load'] <= prev['load']
        ):
            continue
        growth = (
            b['throughput_rps'] / a['throughput_rps'] - 1
            if a['throughput_rps']
            else None
        )
        grown = _grown(a, b)
        why = None
        if growth is not None and growth < GROWTH:
            why = 'throughput'
        elif grown is not None and grown[1] >= SHARE_JUMP:
            why = 'share'
        if why is None:
            continue
        group = grown[0].split('.')[0] if grown else None
        return {
            'run': run['name'],
            'label': run['label'],
            'load': run['load'],
            'after': prev['load'],
            'why': why,
            'growth': growth,
            'throughput_rps': b['throughput_rps'],
            'component': grown[0] if grown else None,
            'share_before': a['components'].get(grown[0], {}).get('share', 0.0)
            if grown
            else None,
            'share': b['components'][grown[0]]['share'] if grown else None,
            'group': group,
            'group_share_before': group_share(a, group) if group else None,
            'group_share': group_share(b, group) if group else None,
        }
    return None


def pct(value: typing.Optional[float]) -> str:
    return '-' if value is None else '%.0f%%' % (value * 100)


def secs(us: typing.Optional[float]) -> str:
    return '-' if us is None else '%.2f' % (us / 1e6)


def num(value: typing.Optional[float], digits: int = 2) -> str:
    return '-' if value is None else '%.*f' % (digits, value)


def run_value(run: dict) -> str:
    """A run's value of the sweep key as shown: its load (``20``), or
    its label when the key is categorical (``caching``)."""
    if run.get('load') is None:
        return str(run.get('value', '-'))
    return fmt_load(run['load'])


def fmt_load(load: typing.Optional[float]) -> str:
    """A load as a label: ``20``, ``2.5``."""
    if load is None:
        return '-'
    return '%d' % load if load == int(load) else '%g' % load


def saturation_text(
    op: str, sat: typing.Optional[dict], key: str, categorical: bool = False
) -> str:
    """One line: where ``op`` saturates, or that it did not."""
    if categorical:
        return (
            '%s: %s is not a number: the runs in the order given, no '
            'saturation point' % (op, key)
        )
    if sat is None:
        return (
            '%s: no saturation: throughput grew by %d %% or more at '
            'every step up in %s and no component\'s share jumped'
            % (op, GROWTH * 100, key)
        )
    if sat['why'] == 'throughput':
        what = (
            'throughput stopped growing (%+.0f %%, %.2f requests/s) '
            'from %s=%s'
            % (
                sat['growth'] * 100,
                sat['throughput_rps'],
                key,
                fmt_load(sat['after']),
            )
        )
    else:
        what = 'a component\'s share of the critical path jumped'
    if sat['component'] is not None:
        what += '; %s grew from %s to %s of the critical path' % (
            sat['component'],
            pct(sat['share_before']),
            pct(sat['share']),
        )
        if sat['group'] != sat['component']:
            what += ' (%s as a whole: %s to %s)' % (
                sat['group'],
                pct(sat['group_share_before']),
                pct(sat['group_share']),
            )
    return '%s saturates at %s=%s: %s' % (op, key, fmt_load(sat['load']), what)


def stack_order(result: dict, op: str) -> list:
    """The elapsed-time stack's series of ``op``: components by their
    largest mean, then ``retried`` and ``failed``."""
    most: dict = {}
    for run in result['runs']:
        f = run['operations'].get(op)
        for n, us in (f['stack_us'] if f else {}).items():
            if n not in (RETRIED, FAILED):
                most[n] = max(most.get(n, 0), us)
    names = sorted(most, key=lambda n: -most[n])
    return names + [
        n
        for n in (RETRIED, FAILED)
        if any(
            n in (run['operations'].get(op) or {}).get('stack_us', {})
            for run in result['runs']
        )
    ]


def same_labels(runs: list) -> dict:
    """The labels every run has with the same value."""
    first = runs[0]['label']
    return {
        k: v
        for k, v in first.items()
        if all(run['label'].get(k) == v for run in runs)
    }


def render(result: dict) -> str:
    """The sweep as text."""
    key = result['key']
    runs = result['runs']
    out = ['# sweep of %d runs by %s' % (len(runs), key)]
    same = same_labels(runs)
    if same:
        out.append(
            '# every run: %s' % ', '.join('%s=%s' % kv for kv in same.items())
        )
    for run in runs:
        out.append(
            '# %s=%s: %s (%s)%s'
            % (
                key,
                run_value(run),
                run['name'],
                ', '.join(
                    '%s=%s' % kv
                    for kv in run['label'].items()
                    if kv[0] not in same
                ),
                '; nova %s' % ', '.join(run['releases'])
                if run['releases']
                else '',
            )
        )
    for op in result['operations']:
        out.append('')
        out.append('## %s' % op)
        if op in result['missing']:
            out.append('! not in: %s' % ', '.join(result['missing'][op]))
        out.append(
            '%-10s %8s %7s %8s %7s %7s %7s %9s'
            % (
                key[:10],
                'requests',
                'done',
                'req/s',
                'ok',
                'failed',
                'retried',
                'median s',
            )
        )
        for run in runs:
            f = run['operations'].get(op)
            if f is None:
                continue
            out.append(
                '%-10s %8d %7d %8.2f %7s %7s %7s %9s'
                % (
                    run_value(run),
                    f['requests'],
                    f['finished'],
                    f['throughput_rps'],
                    pct(f['success_rate']),
                    pct(f['failure_rate']),
                    pct(f['retry_rate']),
                    secs(f['latency_median_us']),
                )
            )
        names = stack_order(result, op)
        if names:
            out.append(
                'mean time per finished request, s (critical path '
                'of first-try successes; retried and failed '
                'requests whole):'
            )
            out.append(
                '%-22s %s'
                % (
                    '',
                    ' '.join(
                        '%9s' % run_value(run)
                        for run in runs
                        if op in run['operations']
                    ),
                )
            )
            for n in names:
                out.append(
                    '%-22s %s'
                    % (
                        n[:22],
                        ' '.join(
                            '%9s'
                            % secs(run['operations'][op]['stack_us'].get(n))
                            for run in runs
                            if op in run['operations']
                        ),
                    )
                )
        out.append(
            saturation_text(
                op,
                result['saturation'][op],
                key,
                result.get('categorical', False),
            )
        )
    if any(run.get('waves') for run in runs):
        out.append('')
        out.append(
            '## waves (the demo\'s --waves: boots per second of '
            'each wave, from its first request to its last '
            'answer)'
        )
        for run in runs:
            if run.get('waves'):
                out.append(
                    '%-10s %s'
                    % (
                        run_value(run)[:10],
                        ' '.join(
                            '%d: %.2f' % (w['wave'], w['boots_per_s'])
                            for w in run['waves']
                        ),
                    )
                )
    services = sorted({s for run in runs for s in run['resources']})
    if services:
        out.append('')
        out.append(
            '## resources while requests ran (CPU: cores, RSS: MB; mean/peak)'
        )
        out.append(
            '%-22s %s'
            % (
                'service',
                ' '.join(
                    '%17s' % ('%s=%s' % (key[:6], run_value(run)))
                    for run in runs
                ),
            )
        )
        for svc in services:
            for what, m, p, d in (
                ('cpu', 'cpu_mean', 'cpu_peak', 2),
                ('rss', 'rss_mean_mb', 'rss_peak_mb', 0),
            ):
                cells = []
                for run in runs:
                    r = run['resources'].get(svc)
                    cells.append(
                        '%17s'
                        % (
                            '%s/%s' % (num(r[m], d), num(r[p], d))
                            if r
                            else '-'
                        )
                    )
                out.append(
                    '%-22s %s'
                    % (('%s %s' % (svc, what))[:22], ' '.join(cells))
                )
            shares = [
                (run['resources'].get(svc) or {}).get('library_share')
                for run in runs
            ]
            if any(v is not None for v in shares):
                out.append(
                    '%-22s %s'
                    % (
                        ('%s library' % svc)[:22],
                        ' '.join(
                            '%17s'
                            % ('-' if v is None else '%.1f%%' % (v * 100))
                            for v in shares
                        ),
                    )
                )
        out.append(
            '(library: the share of the CPU the library\'s writer '
            'thread took over the run)'
        )
    return '\n'.join(out) + '\n'
