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
"""The span wrapper in C (``instrument._native._span``) against the
Python closure, in one process (issue 31).

``bench_call_overhead.py``'s no-op method is copied twice, each copy
patched from the same point with the same recorder: ``A`` with the
closure (the C extension hidden while it is patched), ``B`` with the C
``SpanCall``; then ``A`` and ``B`` both in C (the noise floor).  Rounds
of ``--calls`` calls alternate the order of the two, the buffer drained
between, thread CPU, the garbage collector disabled while a round is
timed unless ``--gc`` (the C path's records are untracked by the
collector: ``--gc`` shows what that saves, with the collections the
calls trigger).  Printed: the thread CPU each adds over the unpatched
method (medians), ``B - A`` of the same round (median and mean) and
``B / A``.  Threads, then eventlet in a child process that
monkey-patches first.

``--one python|c|plain --calls N`` makes ``N`` calls of one variant
(``plain``: the method unpatched) and exits, for ``valgrind
--tool=callgrind --separate-threads=yes``: the calling thread's
instructions in two runs of different ``N``, their difference over
the difference of ``N``, is what a call costs there, the collections
it sets off included.
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


def measure(a_python: bool, rounds: int, calls: int, keep_gc: bool) -> dict:
    from oslo_config import cfg

    import instrument
    from instrument import opts
    from instrument.patching import patcher
    from instrument.runtime import wrappers

    native = wrappers.native_span
    if native is None:
        raise SystemExit(
            'instrument._native._span is not built (or '
            'INSTRUMENT_PURE_PYTHON is set): nothing to compare'
        )
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
    for cls, python in ((ManagerA, a_python), (ManagerB, False)):
        point = patcher.PatchPoint(
            __name__,
            cls.__name__ + '.noop',
            'compute.noop',
            'compute',
            instances=patcher.uuids('instance'),
            host=patcher.self_attr('host'),
        )
        wrappers.native_span = None if python else native
        patches.append(patcher.Patcher([point], rt.recorder))
        patches[-1].apply()
        made = isinstance(cls.__dict__['noop'], native.SpanCall)
        assert made != python, (cls, python)
    wrappers.native_span = native
    args = (Context(), Instance())
    methods = {'A': ManagerA().noop, 'B': ManagerB().noop, 'P': Plain().noop}
    clock = time.thread_time_ns
    got: dict = {key: [] for key in methods}
    diffs = []
    ratios = []
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


def one(variant: str, calls: int) -> None:
    """``calls`` calls of one variant, the collector on (callgrind)."""
    from oslo_config import cfg

    import instrument
    from instrument import opts
    from instrument.patching import patcher
    from instrument.runtime import wrappers

    if variant == 'python':
        wrappers.native_span = None
    elif wrappers.native_span is None:
        raise SystemExit('instrument._native._span is not built')
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
    conf.set_override('buffer_size', calls + 2000, 'instrument')
    rt = instrument.setup(conf, 'nova-compute', points=[])
    point = patcher.PatchPoint(
        __name__,
        'ManagerB.noop',
        'compute.noop',
        'compute',
        instances=patcher.uuids('instance'),
        host=patcher.self_attr('host'),
    )
    patcher.Patcher([point], rt.recorder).apply()
    fn = Plain().noop if variant == 'plain' else ManagerB().noop
    args = (Context(), Instance())
    for _ in range(1000):  # warm-up: the writer started, caches filled
        fn(*args)
    for _ in range(calls):
        fn(*args)
    os._exit(0)  # no teardown: the writer would encode the records


def _both(rounds: int, calls: int, keep_gc: bool) -> dict:
    return {
        'native': measure(True, rounds, calls, keep_gc),
        'floor': measure(False, rounds, calls, keep_gc),
    }


def _report(mode: str, r: dict) -> None:
    s, f = r['native'], r['floor']
    print(
        '%-9s Python %5.0f ns added, C %5.0f: B - A median %+5.0f mean '
        '%+5.0f ns a call, B/A %.2f; noise floor (C both sides) median '
        '%+4.0f mean %+4.0f, B/A %.2f'
        % (
            mode,
            s['a_ns'],
            s['b_ns'],
            s['median_ns'],
            s['mean_ns'],
            s['ratio'],
            f['median_ns'],
            f['mean_ns'],
            f['ratio'],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--rounds', type=int, default=12)
    parser.add_argument('--calls', type=int, default=20000)
    parser.add_argument('--gc', action='store_true')
    parser.add_argument('--one', choices=['python', 'c', 'plain'])
    parser.add_argument(
        '--child', choices=['eventlet'], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        one(args.one, args.calls)
        return
    if args.child == 'eventlet':
        import eventlet

        eventlet.monkey_patch()
        print(json.dumps(_both(args.rounds, args.calls, args.gc)))
        return
    print(
        'Span wrapper, Python closure (A) vs C (B), one process, %d '
        'alternate rounds of %d calls, GC %s while timed; load average '
        '%.2f'
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
