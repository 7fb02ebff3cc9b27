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
"""Added cost per oslo.concurrency lock acquisition (threads, eventlet).

Times uncontended acquisitions of real oslo.concurrency locks -- an
internal lock (``with lockutils.lock(name)``) and nova's way of taking
``compute_resources`` (a function decorated with
``synchronized(name, 'nova-', fair=True)``) -- uninstrumented and with
the ``oslo_concurrency`` target installed (one ``lock.wait`` record per
acquisition, file sink in a temp directory), in one run, in alternating
rounds (the same machine load for both; the best round of each
counts).  Prints ns per acquisition, the ratio to the uninstrumented
lock, the added ns on the calling thread, the writer thread's share
(encode and write) per acquisition, and the added cost against a
span's (``tracer.span`` around a no-op, measured in the same run: the
budget is "the same as a span"; the span target is 2 us).  Run with
``python bench/bench_locks.py`` (``tox -e bench`` runs it too).  The
eventlet figures come from a child process that monkey-patches first.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TARGET_NS = 2000


def _best(fn, calls: int, repeat: int) -> float:
    best = float('inf')
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def _workloads():
    from oslo_concurrency import lockutils

    def internal():
        with lockutils.lock('bench-internal'):
            pass

    def nova_fair():
        # made per call, like nova's decorator at import: synchronized
        # looks lockutils.lock up at each call, so it sees the patch
        return _fair()

    @lockutils.synchronized('compute_resources', 'nova-', fair=True)
    def _fair():
        return None

    return {'internal lock': internal, 'synchronized fair': nova_fair}


def _setup(out_dir: str, records: int):
    from oslo_config import cfg

    import instrument
    from instrument import opts
    from instrument.targets import oslo_concurrency

    conf = cfg.ConfigOpts()
    conf([], project='bench')
    opts.register_opts(conf)
    conf.set_override('enabled', True, 'instrument')
    conf.set_override('output_dir', out_dir, 'instrument')
    conf.set_override('flush_interval', 60.0, 'instrument')
    # room for every record: a drop is cheaper than a write
    conf.set_override('buffer_size', records + 1000, 'instrument')
    return instrument.setup(
        conf,
        'nova-compute',
        targets=[oslo_concurrency.OsloConcurrencyTarget()],
    )


def _lines(out_dir: str) -> int:
    n = 0
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name), 'rb') as f:
            n += sum(1 for line in f if b'"lock.wait"' in line)
    return n


def measure(calls: int, repeat: int) -> dict:
    """Rounds alternate between the original ``lockutils.lock`` and the
    patched one (``synchronized`` looks it up at each call), so both see
    the same machine load; the best round of each counts."""
    from oslo_concurrency import lockutils

    import instrument
    from instrument.targets import oslo_concurrency as lock_target

    work = _workloads()
    for fn in work.values():  # warm up (the first fair lock imports eventlet)
        fn()
    out_dir = tempfile.mkdtemp(prefix='instrument-bench-locks-')
    rt = _setup(out_dir, calls * repeat * len(work) + 10)
    target = rt.target('oslo_concurrency')
    patched = lockutils.lock
    original = target.patcher.original(lock_target.POINT)
    base = {}
    timed = {}
    writer = {}
    for name, fn in work.items():
        base[name] = timed[name] = writer[name] = float('inf')
        for _ in range(repeat):
            lockutils.lock = original
            base[name] = min(base[name], _best(fn, calls, 1))
            lockutils.lock = patched
            timed[name] = min(timed[name], _best(fn, calls, 1))
            start = time.perf_counter_ns()
            rt.buffer.drain()
            writer[name] = min(
                writer[name], (time.perf_counter_ns() - start) / calls
            )
    # a span's added cost (the budget), measured the same way
    tracer = rt.tracer
    span = tracer.span

    def noop():
        return None

    def one_span():
        with span('compute.noop'):
            return None

    span_ns = float('inf')
    for _ in range(repeat):
        plain = _best(noop, calls, 1)
        spanned = _best(one_span, calls, 1)
        span_ns = min(span_ns, max(spanned - plain, 1.0))
        rt.buffer.drain()
    dropped = dict(rt.buffer.counts())
    instrument.teardown()
    return {
        'base_ns': base,
        'instrumented_ns': timed,
        'writer_ns': writer,
        'span_ns': span_ns,
        'records': _lines(out_dir),
        'expected': calls * repeat * len(work),
        'dropped': dropped,
    }


def _report(mode: str, r: dict) -> None:
    for name, base in r['base_ns'].items():
        inst = r['instrumented_ns'][name]
        added = inst - base
        print(
            '%-9s %-18s uninstrumented %6.0f ns  instrumented %6.0f ns  '
            'ratio %.2fx  added %5.0f ns = %.2fx a span measured here '
            '(%.0f ns), %.2fx the %d ns budget; writer %5.0f ns/acq'
            % (
                mode,
                name,
                base,
                inst,
                inst / base,
                added,
                added / r['span_ns'],
                r['span_ns'],
                added / TARGET_NS,
                TARGET_NS,
                r['writer_ns'][name],
            )
        )
    print(
        '%-9s lock.wait records written %d of %d acquisitions, dropped '
        '%s' % (mode, r['records'], r['expected'], r['dropped'])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--calls', type=int, default=5000)
    parser.add_argument('--repeat', type=int, default=15)
    parser.add_argument(
        '--child', choices=['eventlet'], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child == 'eventlet':
        import eventlet

        eventlet.monkey_patch()
        print(json.dumps(measure(args.calls, args.repeat)))
        return
    print(
        'Cost per uncontended oslo.concurrency lock acquisition, best of '
        '%d x %d' % (args.repeat, args.calls)
    )
    _report('threads', measure(args.calls, args.repeat))
    child = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            '--child',
            'eventlet',
            '--calls',
            str(args.calls),
            '--repeat',
            str(args.repeat),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    _report('eventlet', json.loads(child.stdout.strip().splitlines()[-1]))


if __name__ == '__main__':
    main()
