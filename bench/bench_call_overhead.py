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
"""Per-call overhead of an instrumented method (threads and eventlet).

Times a no-op method unpatched and patched (file sink writing to a temp
directory) in one run, and prints ns/op for both and the difference:
on the calling thread alone, the writer thread's share per call
(encoding and writing, off the calling thread by design), their sum,
and the calls timed with the writer running beside them.  Target:
<= 2 us added per instrumented call.  Run with
``tox -e bench`` or ``python bench/bench_call_overhead.py``.  The
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


class Context:
    request_id = 'req-5d1f6c43-7b7e-4c84-9a51-9a8c6f6a0f11'
    global_request_id = None


class Instance:
    uuid = '0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77'


class Manager:
    host = 'compute-001'

    def noop(self, context, instance):
        return None


def _time_calls(fn, args, calls: int, repeat: int) -> float:
    best = float('inf')
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn(*args)
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def _setup(out_dir: str, calls: int, repeat: int, flush: float):
    from oslo_config import cfg

    import instrument
    from instrument import opts
    from instrument import patcher

    conf = cfg.ConfigOpts()
    conf([], project='bench')
    opts.register_opts(conf)
    conf.set_override('enabled', True, 'instrument')
    conf.set_override('output_dir', out_dir, 'instrument')
    conf.set_override('sql_timing', False, 'instrument')
    conf.set_override('flush_interval', flush, 'instrument')
    # Room for every record of the run: a drop would be cheaper than a
    # write and flatter the figures.
    conf.set_override('buffer_size', calls * repeat + 1000, 'instrument')
    point = patcher.PatchPoint(
        __name__, 'Manager.noop', 'compute.noop', 'compute',
        instances=patcher.uuids('instance', 1),
        host=patcher.self_attr('host'))
    return instrument.setup(conf, 'nova-compute', points=[point])


def _lines(out_dir: str) -> int:
    lines = 0
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name), 'rb') as f:
            lines += sum(1 for _ in f)
    return lines


def measure(calls: int, repeat: int) -> dict:
    import instrument

    manager = Manager()
    args = (Context(), Instance())
    base_ns = _time_calls(manager.noop, args, calls, repeat)

    # 1. The calling thread alone: the writer waits while the calls run,
    #    then the drain is timed on its own (its cost per call).
    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    rt = _setup(out_dir, calls, repeat, 60.0)
    caller_ns = float('inf')
    writer_ns = float('inf')
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(calls):
            manager.noop(*args)
        caller_ns = min(caller_ns, (time.perf_counter_ns() - start) / calls)
        start = time.perf_counter_ns()
        rt.buffer.drain()
        writer_ns = min(writer_ns, (time.perf_counter_ns() - start) / calls)
    dropped = dict(rt.buffer.counts())
    instrument.teardown()
    lines = _lines(out_dir)

    # 2. As in a service: the writer runs beside the calls (default
    #    flush interval) and shares the interpreter with them.
    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    _setup(out_dir, calls, repeat, 0.5)
    together_ns = _time_calls(manager.noop, args, calls, repeat)
    instrument.teardown()
    return {'base_ns': base_ns, 'caller_ns': caller_ns,
            'writer_ns': writer_ns, 'together_ns': together_ns,
            'lines': lines + _lines(out_dir), 'dropped': dropped,
            'expected': calls * repeat}


def _report(mode: str, r: dict) -> None:
    caller = r['caller_ns'] - r['base_ns']
    together = r['together_ns'] - r['base_ns']
    print('%-9s unpatched %6.0f ns/op\n'
          '          added on the calling thread        %6.0f ns/op  '
          '(%.2fx of the %d ns target)\n'
          '          writer thread, per call (encode+write) %6.0f ns/op\n'
          '          calling thread + writer             %6.0f ns/op  '
          '(%.2fx of the target)\n'
          '          measured with the writer running    %6.0f ns/op  '
          '(%.2fx of the target)\n'
          '          lines written %d for %d calls, dropped %s' % (
              mode, r['base_ns'], caller, caller / TARGET_NS, TARGET_NS,
              r['writer_ns'], caller + r['writer_ns'],
              (caller + r['writer_ns']) / TARGET_NS, together,
              together / TARGET_NS, r['lines'], 2 * r['expected'],
              r['dropped']))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--calls', type=int, default=100000)
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--child', choices=['eventlet'],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == 'eventlet':
        import eventlet
        eventlet.monkey_patch()
        print(json.dumps(measure(args.calls, args.repeat)))
        return
    print('Per-call overhead of one instrumented no-op method (one span, '
          'file sink), best of %d x %d calls; a plain lambda costs '
          '%.0f ns here' % (args.repeat, args.calls, _time_calls(
              lambda: None, (), args.calls, args.repeat)))
    _report('threads', measure(args.calls, args.repeat))
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), '--child', 'eventlet',
         '--calls', str(args.calls), '--repeat', str(args.repeat)],
        capture_output=True, text=True, check=True)
    _report('eventlet', json.loads(child.stdout.strip().splitlines()[-1]))


if __name__ == '__main__':
    main()
