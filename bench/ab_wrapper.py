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
"""The in-process A/B of two span wrappers that ``ab_span_steps.py`` and
``ab_native_span.py`` share (issue 31).

``bench_call_overhead.py``'s no-op method is copied twice (``ManagerA``,
``ManagerB``), each patched from the same point; a script says how each
copy is wrapped.  Rounds of ``calls`` calls alternate the order of the
two, the buffer drained between, thread CPU, the garbage collector
disabled while a round is timed unless ``keep_gc``; the result: the
thread CPU each adds over the unpatched method (medians), ``B - A`` of
the same round (median and mean) and ``B / A`` of what each adds
(median).  ``main`` runs a script's pair under threads, then under
eventlet in a child process that monkey-patches first.
"""

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# the same request and instance as bench_call_overhead.py (this
# directory is on sys.path when a script of it runs)
from bench_call_overhead import Context  # noqa: E402
from bench_call_overhead import Instance  # noqa: E402


class Plain:
    host = 'compute-001'

    def noop(self, context, instance):
        return None


class ManagerA(Plain):
    def noop(self, context, instance):
        return None


class ManagerB(Plain):
    def noop(self, context, instance):
        return None


def runtime(buffer_size: int):
    """``instrument.setup`` of a compute with the file sink, no SQL
    timing, no flush during a round."""
    from oslo_config import cfg

    import instrument
    from instrument import opts

    conf = cfg.ConfigOpts()
    conf([], project='bench')
    opts.register_opts(conf)
    conf.set_override('enabled', True, 'instrument')
    conf.set_override(
        'output_dir',
        tempfile.mkdtemp(prefix='instrument-bench-'),
        'instrument',
    )
    conf.set_override('sql_timing', False, 'instrument')
    conf.set_override('flush_interval', 60.0, 'instrument')
    conf.set_override('buffer_size', buffer_size, 'instrument')
    return instrument.setup(conf, 'nova-compute', points=[])


def patch(cls, recorder, **extra):
    """``cls.noop`` patched as the bench's compute method, applied
    (``extra``: more of the point's fields, its hooks)."""
    from instrument.patching import patcher

    point = patcher.PatchPoint(
        __name__,
        cls.__name__ + '.noop',
        'compute.noop',
        'compute',
        instances=patcher.uuids('instance'),
        host=patcher.self_attr('host'),
        **extra,
    )
    one = patcher.Patcher([point], recorder)
    one.apply()
    return one


def rounds(rt, patches, count: int, calls: int, keep_gc: bool) -> dict:
    """The alternate rounds of ``ManagerA`` and ``ManagerB`` (patched
    by ``patches``), which are removed after, with the runtime."""
    import instrument

    args = (Context(), Instance())
    methods = {'A': ManagerA().noop, 'B': ManagerB().noop, 'P': Plain().noop}
    clock = time.thread_time_ns
    got: dict = {key: [] for key in methods}
    diffs = []
    ratios = []
    for n in range(count):
        ns = {}
        for key in 'PAB' if n % 2 == 0 else 'PBA':
            fn = methods[key]
            gc.collect()
            if not keep_gc:
                gc.disable()
            start = clock()
            for _ in range(calls):
                fn(*args)
            ns[key] = (clock() - start) / calls
            gc.enable()
            rt.buffer.drain()
        for key, value in ns.items():
            got[key].append(value)
        diffs.append(ns['B'] - ns['A'])
        ratios.append((ns['B'] - ns['P']) / max(ns['A'] - ns['P'], 1.0))
    for one in patches:
        one.remove()
    instrument.teardown()
    plain = statistics.median(got['P'])
    return {
        'a_ns': statistics.median(got['A']) - plain,
        'b_ns': statistics.median(got['B']) - plain,
        'median_ns': statistics.median(diffs),
        'mean_ns': statistics.mean(diffs),
        'ratio': statistics.median(ratios),
    }


def parser(doc: str) -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=doc)
    out.add_argument('--rounds', type=int, default=12)
    out.add_argument('--calls', type=int, default=20000)
    out.add_argument('--gc', action='store_true')
    out.add_argument('--child', choices=['eventlet'], help=argparse.SUPPRESS)
    return out


def main(args, script: str, title: str, both, report) -> None:
    """``both(rounds, calls, keep_gc)`` under threads and eventlet (in
    a child: ``script --child eventlet``), each printed by ``report``."""
    if args.child == 'eventlet':
        import eventlet

        eventlet.monkey_patch()
        print(json.dumps(both(args.rounds, args.calls, args.gc)))
        return
    print(
        '%s, one process, %d alternate rounds of %d calls, GC %s while '
        'timed; load average %.2f'
        % (
            title,
            args.rounds,
            args.calls,
            'on' if args.gc else 'off',
            os.getloadavg()[0],
        )
    )
    report('threads', both(args.rounds, args.calls, args.gc))
    child = [
        sys.executable,
        os.path.abspath(script),
        '--child',
        'eventlet',
        '--rounds',
        str(args.rounds),
        '--calls',
        str(args.calls),
    ]
    if args.gc:
        child.append('--gc')
    out = subprocess.run(child, capture_output=True, text=True, check=True)
    report('eventlet', json.loads(out.stdout.strip().splitlines()[-1]))
