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
"""The span wrapper's inline start and end against ``begin``/``end``
called, in one process (issue 31).

``bench_call_overhead.py``'s no-op method is copied twice, each copy
patched from the same point with its own ``Recorder`` on one buffer:
``A`` a recorder whose ``begin`` and ``end`` carry no ``steps`` (the
wrapper calls them), ``B`` a stock one (the wrapper does their steps
itself); then ``A`` and ``B`` both stock (the noise floor).  Rounds of
``--calls`` calls alternate the order of the two, the buffer drained
between, thread CPU, the garbage collector disabled while a round is
timed (``--gc`` leaves it on: its full collections move single rounds
by about 1 us); printed: the thread CPU each adds over the unpatched
method (medians) and ``B - A`` of the same round (median and mean).
Threads, then eventlet in a child process that monkey-patches first.
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
# directory is on sys.path when the script runs)
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


def _recorder(rt, called: bool):
    from instrument.runtime import recorder as recorder_mod

    rec = recorder_mod.Recorder(rt.buffer, rt.identity)
    if called:
        # begin and end without their steps: the wrapper calls them
        del rec.begin.steps
        del rec.end.steps
    return rec


def measure(a_called: bool, rounds: int, calls: int, keep_gc: bool) -> dict:
    from oslo_config import cfg

    import instrument
    from instrument import opts
    from instrument.patching import patcher

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
    conf.set_override('buffer_size', 2 * calls + 1000, 'instrument')
    rt = instrument.setup(conf, 'nova-compute', points=[])
    patches = []
    for cls, called in ((ManagerA, a_called), (ManagerB, False)):
        point = patcher.PatchPoint(
            __name__,
            cls.__name__ + '.noop',
            'compute.noop',
            'compute',
            instances=patcher.uuids('instance'),
            host=patcher.self_attr('host'),
        )
        patches.append(patcher.Patcher([point], _recorder(rt, called)))
        patches[-1].apply()
    args = (Context(), Instance())
    methods = {'A': ManagerA().noop, 'B': ManagerB().noop, 'P': Plain().noop}
    clock = time.thread_time_ns
    got: dict = {key: [] for key in methods}
    diffs = []
    for n in range(rounds):
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
    for one in patches:
        one.remove()
    instrument.teardown()
    plain = statistics.median(got['P'])
    return {
        'a_ns': statistics.median(got['A']) - plain,
        'b_ns': statistics.median(got['B']) - plain,
        'median_ns': statistics.median(diffs),
        'mean_ns': statistics.mean(diffs),
    }


def _both(rounds: int, calls: int, keep_gc: bool) -> dict:
    return {
        'steps': measure(True, rounds, calls, keep_gc),
        'floor': measure(False, rounds, calls, keep_gc),
    }


def _report(mode: str, r: dict) -> None:
    s, f = r['steps'], r['floor']
    print(
        '%-9s begin/end called %6.0f ns added, inline %6.0f: B - A median '
        '%+5.0f mean %+5.0f ns a call; noise floor (inline both sides) '
        'median %+5.0f mean %+5.0f'
        % (
            mode,
            s['a_ns'],
            s['b_ns'],
            s['median_ns'],
            s['mean_ns'],
            f['median_ns'],
            f['mean_ns'],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--rounds', type=int, default=12)
    parser.add_argument('--calls', type=int, default=20000)
    parser.add_argument('--gc', action='store_true')
    parser.add_argument(
        '--child', choices=['eventlet'], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child == 'eventlet':
        import eventlet

        eventlet.monkey_patch()
        print(json.dumps(_both(args.rounds, args.calls, args.gc)))
        return
    print(
        'Span wrapper, begin/end called (A) vs inline (B), one process, '
        '%d alternate rounds of %d calls, GC %s while timed; load '
        'average %.2f'
        % (
            args.rounds,
            args.calls,
            'on' if args.gc else 'off',
            os.getloadavg()[0],
        )
    )
    _report('threads', _both(args.rounds, args.calls, args.gc))
    child = [
        sys.executable,
        os.path.abspath(__file__),
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
    _report('eventlet', json.loads(out.stdout.strip().splitlines()[-1]))


if __name__ == '__main__':
    main()
