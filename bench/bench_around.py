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
"""Cost of issue 21's runtime: a ``ksa.request`` span, a resource sample.

1. keystoneauth1 ``Session.request`` to a local ``http.server``: calls
   timed unpatched and patched (``ksa.request`` span + ``_send_request``
   hook) in the same run, interleaved; prints us/call for both, the
   difference and the ratio.
   The same with the network stubbed (a prepared response from the
   requests session inside keystoneauth1): the span's own cost.
2. ``Sampler.sample()`` (what the writer thread does every
   ``resource_sample_interval`` seconds): us per sample, and that cost
   as a share of one writer thread's time at the default 5 s interval.
3. A no-op span (the library's baseline per-call cost) measured beside
   them, so the figures can be read against bench_call_overhead.

Prints numbers and ratios, asserts nothing.  ``tox -e bench -- ...`` is
bench_call_overhead's; run this one with ``python bench/bench_around.py``
in any environment that has keystoneauth1 (``tox -e py3``'s).
"""

import argparse
import http.server
import statistics
import threading
import time

from keystoneauth1 import session as ksa_session
import requests

from instrument import sinks as sink_mod
from instrument.patching import patcher as patcher_mod
from instrument.patching import points as points_mod
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import resources
from instrument.targets import keystoneauth


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    # Keep-alive without Nagle: no 40 ms delayed-ACK stall per call.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b'{}'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class NullSink(sink_mod.Sink):
    name = 'null'

    def write(self, batch, first_seq, pid):
        pass


class Manager:
    def noop(self, context):
        return None


def _time(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--calls', type=int, default=300)
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--samples', type=int, default=300)
    args = parser.parse_args()

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = 'http://127.0.0.1:%d/resource_providers/%s/allocations' % (
        server.server_port,
        '8a3e6d4c-2b1f-4e55-9c7a-0f1e2d3c4b5a',
    )
    sess = ksa_session.Session()

    buf = buffer_mod.EventBuffer([NullSink(None, None)], 10**6, 0.05)
    recorder = recorder_mod.Recorder(
        buf, process.ProcessIdentity.create('nova-compute', 'bench')
    )

    def call():
        sess.get(url, endpoint_filter={'service_type': 'placement'})

    for _ in range(50):  # warm the connection pool
        call()
    patcher = patcher_mod.Patcher(
        list(keystoneauth.KSA_POINTS), recorder, 'keystoneauth1'
    )
    plain, patched = [], []
    for _ in range(args.rounds):
        plain.append(_time(call, args.calls))
        patcher.apply()
        patched.append(_time(call, args.calls))
        patcher.remove()
    p_plain = statistics.median(plain)
    p_patched = statistics.median(patched)
    print(
        'ksa Session.request to a local server, median of %d rounds of '
        '%d calls:' % (args.rounds, args.calls)
    )
    print('  unpatched   %8.1f us/call' % p_plain)
    print('  ksa.request %8.1f us/call' % p_patched)
    print(
        '  added       %8.1f us/call (ratio %.3f)'
        % (p_patched - p_plain, p_patched / p_plain)
    )

    # The same without the network: the requests session inside
    # keystoneauth1 answers a prepared response, so the difference is
    # the span's (on_enter, on_exit, route memo, attempts hook).
    canned = requests.Response()
    canned.status_code = 200
    canned._content = b'{}'
    canned.url = url
    offline = ksa_session.Session()
    offline.session.request = lambda method, u, **kw: canned

    def offline_call():
        offline.get(
            url, endpoint_filter={'service_type': 'placement'}, log=False
        )

    plain, patched = [], []
    for _ in range(args.rounds):
        plain.append(_time(offline_call, 2000))
        patcher.apply()
        patched.append(_time(offline_call, 2000))
        patcher.remove()
    o_plain = statistics.median(plain)
    o_patched = statistics.median(patched)
    print('ksa Session.request, network stubbed (keystoneauth1 alone):')
    print('  unpatched   %8.2f us/call' % o_plain)
    print('  ksa.request %8.2f us/call' % o_patched)
    print(
        '  added       %8.2f us/call (ratio %.3f)'
        % (o_patched - o_plain, o_patched / o_plain)
    )

    noop_patcher = patcher_mod.Patcher(
        [
            points_mod.PatchPoint(
                __name__,
                'Manager.noop',
                'bench.noop',
                None,
                context=points_mod.arg('context'),
            )
        ],
        recorder,
        None,
    )
    m = Manager()
    bare = _time(lambda: m.noop(None), 20000)
    noop_patcher.apply()
    spanned = _time(lambda: m.noop(None), 20000)
    noop_patcher.remove()
    print(
        'no-op span (baseline of the library): %.2f us/call added'
        % (spanned - bare)
    )

    sampler = resources.Sampler(recorder, 5.0)
    sampler.pools.attach(sampler.patcher)
    costs = [_time(sampler.sample, 1) for _ in range(args.samples)]
    sample_us = statistics.median(costs)
    print(
        'process.sample: median %.1f us per sample, p95 %.1f us; at '
        'the default 5 s interval %.5f%% of the writer thread'
        % (
            sample_us,
            sorted(costs)[int(0.95 * len(costs))],
            sample_us / 5e6 * 100,
        )
    )
    if spanned > bare:
        print(
            '  a sample costs as much as %.0f no-op spans'
            % (sample_us / (spanned - bare))
        )
    sampler.stop()
    buf.close()
    server.shutdown()


if __name__ == '__main__':
    main()
