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
"""The writer thread's fixed cost: its CPU per second in a process that
records nothing, or a trickle (issue 31).

In a real nova service most of the writer's CPU is not the encoding of
records: it wakes every ``flush_interval`` and samples the process
every ``resource_sample_interval`` whether or not anything is recorded
(doc/source/cost.rst, "Per boot, per service").  Each measurement here
is a child process that starts the runtime as a service does
(``instrument.setup`` with every installed target, the file sink,
``[instrument]`` defaults), lets it settle, then reads the writer
thread's CPU clock (``time.pthread_getcpuclockid``) and the process's
CPU over ``--seconds`` of idleness (``idle``) or of ``--rate`` spans a
second (``trickle``), with ``[instrument] metrics_dir`` on
(``idle+metrics``) and under eventlet (``eventlet``).

The same children run against a baseline tree (``--baseline DIR``, by
default a snapshot of the ``main`` branch: ``git archive main``) in the
same run, the two trees side by side in each round (which one starts
first alternates); printed: µs of CPU per second (medians of the
rounds) for both trees, the writer's and the process's, their ratio
this tree / baseline, the records written per second, and the load
average.  ``--json`` prints the same as JSON.  Run as ``python
bench/bench_writer_idle.py [--seconds 30] [--rounds 3]``.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ('idle', 'trickle', 'idle+metrics', 'eventlet')

CHILD = r'''
import json
import os
import sys
import time

mode, out, seconds, rate = (
    sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
)
if mode == 'eventlet':
    import eventlet

    eventlet.monkey_patch()

from oslo_config import cfg

import instrument
from instrument import opts

conf = cfg.ConfigOpts()
conf([], project='bench')
opts.register_opts(conf)
conf.set_override('enabled', True, 'instrument')
conf.set_override('output_dir', os.path.join(out, 'spans'), 'instrument')
if mode == 'idle+metrics':
    conf.set_override(
        'metrics_dir', os.path.join(out, 'metrics'), 'instrument'
    )
rt = instrument.setup(conf, 'nova-scheduler')
# Settle: the first drains write the header and the first sample.
time.sleep(1.5)
writer = rt.buffer.writer
clock = time.pthread_getcpuclockid(writer.ident)
span = rt.tracer.span
spans = os.path.join(out, 'spans')


def count_lines():
    lines = 0
    for name in os.listdir(spans):
        with open(os.path.join(spans, name), 'rb') as f:
            lines += sum(1 for _ in f)
    return lines


lines0 = count_lines()
w0 = time.clock_gettime_ns(clock)
p0 = time.process_time_ns()
t0 = time.monotonic()
if mode == 'trickle':
    step = 1.0 / rate
    due = t0
    while True:
        now = time.monotonic()
        if now - t0 >= seconds:
            break
        if now >= due:
            with span('bench.trickle'):
                pass
            due += step
        time.sleep(max(0.0, min(due, t0 + seconds) - time.monotonic()))
else:
    time.sleep(seconds)
w1 = time.clock_gettime_ns(clock)
p1 = time.process_time_ns()
wall = time.monotonic() - t0
# what the window wrote (the last flush interval of it included)
time.sleep(2 * rt.buffer.flush_interval)
lines = count_lines() - lines0
instrument.teardown()
print(json.dumps({
    'writer_ns': w1 - w0, 'process_ns': p1 - p0, 'wall': wall,
    'lines': lines,
}))
'''


def snapshot(branch: str) -> str:
    """A temporary directory holding ``git archive branch`` of ROOT."""
    where = tempfile.mkdtemp(prefix='instrument-baseline-')
    archive = subprocess.run(
        ['git', '-C', ROOT, 'archive', branch],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(['tar', '-x', '-C', where], input=archive, check=True)
    return where


def start(tree: str, mode: str, seconds: float, rate: float):
    out = tempfile.mkdtemp(prefix='instrument-bench-idle-')
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [tree] + [p for p in [env.get('PYTHONPATH')] if p]
    )
    proc = subprocess.Popen(
        [sys.executable, '-c', CHILD, mode, out, str(seconds), str(rate)],
        cwd=out,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out


def finish(started) -> dict:
    proc, out = started
    stdout, stderr = proc.communicate(timeout=600)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode:
        raise RuntimeError('child failed:\n%s' % stderr)
    return json.loads(stdout.strip().splitlines()[-1])


def loadavg() -> str:
    try:
        with open('/proc/loadavg') as f:
            return ' '.join(f.read().split()[:3])
    except OSError:
        return '?'


def per_second(runs: list, key: str) -> float:
    """Median µs of CPU per second of wall time."""
    return statistics.median(r[key] / 1000 / r['wall'] for r in runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seconds', type=float, default=30.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument(
        '--rate', type=float, default=10.0, help='spans a second (trickle)'
    )
    parser.add_argument('--modes', default=','.join(MODES))
    parser.add_argument(
        '--baseline',
        default='main',
        help='a tree to compare with, or a branch of this repository '
        'to snapshot (default main); "none": this tree only',
    )
    parser.add_argument('--json', action='store_true')
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(',') if m]
    for mode in modes:
        if mode not in MODES:
            parser.error('unknown mode %s' % mode)
    made = None
    trees = {'this': ROOT}
    if args.baseline != 'none':
        base = args.baseline
        if not os.path.isdir(base):
            base = made = snapshot(base)
        trees = {'baseline': base, 'this': ROOT}
    loads = [loadavg()]
    results = {mode: {name: [] for name in trees} for mode in modes}
    try:
        for n in range(args.rounds):
            for mode in modes:
                names = list(trees)
                if n % 2:
                    names.reverse()
                # The trees side by side: the same load for both.
                started = {
                    name: start(trees[name], mode, args.seconds, args.rate)
                    for name in names
                }
                for name in names:
                    results[mode][name].append(finish(started[name]))
            loads.append(loadavg())
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
    summary = []
    for mode in modes:
        row = {'mode': mode}
        for name, runs in results[mode].items():
            row[name] = {
                'writer_us_per_s': per_second(runs, 'writer_ns'),
                'process_us_per_s': per_second(runs, 'process_ns'),
                'records_per_s': statistics.median(
                    r['lines'] / r['wall'] for r in runs
                ),
                'writer_us_per_s_rounds': [
                    round(r['writer_ns'] / 1000 / r['wall'], 1) for r in runs
                ],
            }
        if 'baseline' in row:
            for key in ('writer_us_per_s', 'process_us_per_s'):
                before = row['baseline'][key]
                row[key.replace('us_per_s', 'ratio')] = (
                    row['this'][key] / before if before else None
                )
        summary.append(row)
    if args.json:
        print(json.dumps({'load': loads, 'results': summary}, indent=1))
        return 0
    print(
        'writer thread / process CPU, us per second of wall time, '
        'medians of %d rounds of %.0f s (%s spans/s in trickle)'
        % (args.rounds, args.seconds, args.rate)
    )
    print('load average: %s' % ' -> '.join(loads))
    head = '%-14s %-9s %12s %12s %10s' % (
        'mode',
        'tree',
        'writer us/s',
        'process us/s',
        'records/s',
    )
    print(head)
    for row in summary:
        for name in trees:
            fig = row[name]
            print(
                '%-14s %-9s %12.1f %12.1f %10.2f   writer rounds %s'
                % (
                    row['mode'],
                    name,
                    fig['writer_us_per_s'],
                    fig['process_us_per_s'],
                    fig['records_per_s'],
                    fig['writer_us_per_s_rounds'],
                )
            )
        if 'baseline' in row:
            print(
                '%-14s %-9s %12s %12s'
                % (
                    '',
                    'ratio',
                    _ratio(row['writer_ratio']),
                    _ratio(row['process_ratio']),
                )
            )
    return 0


def _ratio(value) -> str:
    return '--' if value is None else '%.3fx' % value


if __name__ == '__main__':
    sys.exit(main())
