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
directory, default options) in one run, and prints ns/op for both and
the difference.  Target: <= 2 us added per instrumented call.  Run with
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


def measure(calls: int, repeat: int) -> dict:
    from oslo_config import cfg

    import instrument
    from instrument import opts
    from instrument import patcher

    manager = Manager()
    args = (Context(), Instance())
    base_ns = _time_calls(manager.noop, args, calls, repeat)

    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    conf = cfg.ConfigOpts()
    conf([], project='bench')
    opts.register_opts(conf)
    conf.set_override('enabled', True, 'instrument')
    conf.set_override('output_dir', out_dir, 'instrument')
    conf.set_override('sql_timing', False, 'instrument')
    conf.set_override('buffer_size', calls * 2 + 100, 'instrument')
    point = patcher.PatchPoint(
        __name__, 'Manager.noop', 'compute.noop', 'compute',
        instances=patcher.uuids('instance', 1),
        host=patcher.self_attr('host'))
    rt = instrument.setup(conf, 'nova-compute', points=[point])
    patched_ns = _time_calls(manager.noop, args, calls, repeat)
    rt.buffer.drain()
    dropped = rt.buffer.counts()
    instrument.teardown()
    lines = 0
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name), 'rb') as f:
            lines += sum(1 for _ in f)
    return {'base_ns': base_ns, 'patched_ns': patched_ns,
            'added_ns': patched_ns - base_ns, 'lines': lines,
            'dropped': dropped}


def _report(mode: str, result: dict) -> None:
    added = result['added_ns']
    print('%-9s unpatched %7.0f ns/op   instrumented %7.0f ns/op   '
          'added %6.0f ns/op   (%.2fx of the %d ns target)   '
          'lines written %d, dropped %s' % (
              mode, result['base_ns'], result['patched_ns'], added,
              added / TARGET_NS, TARGET_NS, result['lines'],
              result['dropped']))


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
    print('Per-call overhead of one instrumented no-op method '
          '(B + X events, file sink), best of %d x %d calls' % (
              args.repeat, args.calls))
    _report('threads', measure(args.calls, args.repeat))
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), '--child', 'eventlet',
         '--calls', str(args.calls), '--repeat', str(args.repeat)],
        capture_output=True, text=True, check=True)
    _report('eventlet', json.loads(child.stdout.strip().splitlines()[-1]))


if __name__ == '__main__':
    main()
