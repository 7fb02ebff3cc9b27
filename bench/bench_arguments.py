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
"""What reading arguments by name costs a patched call (issue 28).

The real ``rpc.cast`` and ``ksa.request`` points
(``instrument.targets.oslo_messaging``, ``instrument.targets.
keystoneauth``), which read their arguments by name at their places in
the signature resolved when the point is applied, against the same
points with hooks that read them at positions written down (the way
they were written before), each put on a stand-in of the library's
method and called with its arguments by position, in alternating
rounds (the same machine load for both; the best round counts).
Prints us per call and the ratio by name / by position.  Run with
``python bench/bench_arguments.py``.
"""

import argparse
import collections
import dataclasses
import sys
import time
import types

STAND_INS = '''
class Target:
    topic = 'compute'
    server = None
    fanout = False


class CallContext:
    target = Target()

    def cast(self, ctxt, method, **kwargs):
        return method


class Session:
    def request(self, url, method, json=None, endpoint_filter=None,
                **kwargs):
        return None
'''


def _positional(om, ksa):
    """The two points with hooks that read literal positions."""

    def context(instance, args, kwargs):
        if om._in_periodic_run():
            return None
        return kwargs.get('ctxt', args[0] if args else None)

    def attrs(instance, args, kwargs):
        ctxt = kwargs.get('ctxt', args[0] if args else None)
        method = kwargs.get('method', args[1] if len(args) > 1 else None)
        return om._rpc_attrs(instance, ctxt, method)

    def request(instance, args, kwargs):
        url = kwargs.get('url', args[0] if args else None)
        method = kwargs.get('method', args[1] if len(args) > 1 else None)
        return ksa._request_attrs(instance, url, method, kwargs)

    [cast] = [p for p in om.points() if p.event == 'rpc.cast']
    return (
        dataclasses.replace(cast, context=context, on_enter=attrs),
        dataclasses.replace(ksa.KSA_POINTS[0], on_enter=request),
    )


def _calls(points, label):
    from instrument.patching import patcher as patcher_mod
    from instrument.runtime import process
    from instrument.runtime import recorder as recorder_mod

    class Buffer:
        """Keeps the last records, writes nothing (the cost compared
        is the calling thread's)."""

        max_records = 10**9
        writer = 'no writer thread'

        def __init__(self) -> None:
            self.events = self.queue = collections.deque(maxlen=10000)
            self.emit = self.events.append

    mod = types.ModuleType('bench_arguments_' + label)
    exec(STAND_INS, mod.__dict__)  # noqa: S102 - the stand-ins above
    sys.modules[mod.__name__] = mod
    cast, request = points
    placed = [
        dataclasses.replace(
            cast,
            module=mod.__name__,
            target='CallContext.cast',
            alternatives=(),
        ),
        dataclasses.replace(
            request,
            module=mod.__name__,
            target='Session.request',
            alternatives=(),
        ),
    ]
    buf = Buffer()
    recorder = recorder_mod.Recorder(
        buf, process.ProcessIdentity.create('nova-compute', 'bench')
    )
    patcher = patcher_mod.Patcher(placed, recorder)
    patcher.apply()
    context = mod.CallContext()
    session = mod.Session()
    ctxt = {'request_id': 'req-bench'}
    flt = {'service_type': 'compute'}
    return (
        lambda: context.cast(ctxt, 'build_and_run_instance'),
        lambda: session.request('/servers', 'GET', endpoint_filter=flt),
    )


def _best(fn, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1000.0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--calls', type=int, default=3000)
    parser.add_argument('--rounds', type=int, default=40)
    args = parser.parse_args(argv)
    from instrument.targets import keystoneauth as ksa
    from instrument.targets import oslo_messaging as om

    [cast] = [p for p in om.points() if p.event == 'rpc.cast']
    by_name = _calls((cast, ksa.KSA_POINTS[0]), 'name')
    by_pos = _calls(_positional(om, ksa), 'position')
    best = {}
    for _ in range(args.rounds):
        for label, fns in (('name', by_name), ('position', by_pos)):
            for n, fn in enumerate(fns):
                key = (label, n)
                best[key] = min(best.get(key, float('inf')), _best(fn, 200))
                best[key] = min(best[key], _best(fn, args.calls))
    print('%-12s %10s %12s %6s' % ('point', 'by name', 'by position', 'ratio'))
    for n, name in enumerate(('rpc.cast', 'ksa.request')):
        named, positional = best[('name', n)], best[('position', n)]
        print(
            '%-12s %7.2f us %9.2f us %6.2f'
            % (name, named, positional, named / positional)
        )


if __name__ == '__main__':
    main()
