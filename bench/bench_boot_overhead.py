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
"""End-to-end overhead on nova boots: none vs this library vs osprofiler.

The same workload three ways, each in a fresh process, rounds
interleaved (A B C A B C ...) so that drift of a shared machine hits all
three alike: boot ``--servers`` servers ``--concurrency`` at a time on
the in-process nova 34 cloud of ``instrument-demo`` (three fake computes,
no injected faults) and measure boots/s and the mean boot latency (POST
to ACTIVE, as the API reports it), and the CPU seconds per boot: the
process's CPU time (every thread) over the boots, divided by the boots.
The in-process cloud runs nova-api, conductor, scheduler and the three
computes as threads of one process, so the CPU cannot be attributed to
a service: it is stated per boot for the whole cloud.  CPU time is what
the library costs a host, and unlike wall throughput it does not drown
in the noise of a shared machine.

* ``none``: nova uninstrumented.
* ``instrument``: this library, enabled from the configuration exactly
  as in the demo (file sink, SQL timing on).
* ``osprofiler``: nova's own profiler, ``[profiler] enabled``,
  ``trace_sqlalchemy``, redis driver at 127.0.0.1:6379, with a trace
  active for every request (the client sends signed trace headers).

Prints the median of the rounds per variant and the ratios against
``none``.  Target: ``instrument`` costs <= 2 % CPU per boot.  Run:
``tox -e bench-boot`` (``-- --rounds 5 --servers 60``).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ('none', 'instrument', 'osprofiler')
REDIS = 'redis://127.0.0.1:6379'


def _child(variant: str, servers: int, concurrency: int) -> dict:
    os.environ['OS_NOVA_DISABLE_EVENTLET_PATCHING'] = '1'
    for name in ('OS_STDOUT_CAPTURE', 'OS_STDERR_CAPTURE'):
        os.environ.pop(name, None)
    import unittest

    from instrument_demo import boots
    from instrument_demo import cloud

    if variant == 'osprofiler':  # after nova's test package chose its mode
        _trace_across_rpc()
    span_dir = tempfile.mkdtemp(prefix='bench-boot-')
    settings = cloud.Settings(
        span_dir=span_dir,
        computes=('cmp-01', 'cmp-02', 'cmp-03'),
        driver='fake.FakeDriver',
        instrument=variant == 'instrument',
        osprofiler=REDIS if variant == 'osprofiler' else None,
    )
    outcome = {}

    class Run(cloud.InstrumentedCloud):
        def run_boots(self):
            template = self._build_server(networks='none')
            api = self.api
            if variant == 'osprofiler':
                api = _TracingClient(api)
            # One warm-up boot: first-use costs are not the workload's.
            boots.boot_all(api, lambda n: dict(template, name=n), 1, 1)
            start = time.monotonic()
            cpu = time.process_time()
            writer = _writer_cpu()
            results = boots.boot_all(
                api, lambda n: dict(template, name=n), servers, concurrency
            )
            outcome['elapsed'] = time.monotonic() - start
            # every thread of the process: the services, their writer
            outcome['cpu'] = time.process_time() - cpu
            outcome['writer'] = _writer_cpu() - writer
            outcome['results'] = results

    Run.settings = settings
    result = unittest.TestResult()
    Run('run_boots').run(result)
    if result.errors or result.failures:
        raise SystemExit(
            ''.join(t for _c, t in result.errors + result.failures)
        )
    results = outcome['results']
    active = [r for r in results if r.status == 'ACTIVE']
    latency = [r.finished - r.started for r in active]
    return {
        'variant': variant,
        'boots': len(active),
        'failed': len(results) - len(active),
        'elapsed_s': outcome['elapsed'],
        'boots_per_s': len(active) / outcome['elapsed'],
        'cpu_per_boot_s': outcome['cpu'] / max(len(results), 1),
        'writer_cpu_per_boot_s': outcome['writer'] / max(len(results), 1),
        'mean_latency_s': statistics.mean(latency) if latency else 0.0,
    }


def _writer_cpu() -> float:
    """CPU seconds of the library's writer thread(s) so far (0 when
    there is none): the part of the cost that is off nova's threads."""
    import threading

    total = 0.0
    for thread in threading.enumerate():
        if thread.name == 'instrument-writer' and thread.ident:
            try:
                total += time.clock_gettime(
                    time.pthread_getcpuclockid(thread.ident)
                )
            except (OSError, AttributeError):  # ended meanwhile
                pass
    return total


def _trace_across_rpc() -> None:
    """Carry osprofiler's trace over RPC as a production nova does.

    With osprofiler installed nova's RPC uses ProfilerRequestContext-
    Serializer, which passes the trace to the next service; the in-process
    cloud's fixture serializer derives from the plain serializer, so
    without this only nova-api would be traced.
    """
    import importlib

    from nova import rpc

    nova_fixtures = importlib.import_module('nova.tests.fixtures.nova')
    nova_fixtures.CheatingSerializer.__bases__ = (
        rpc.ProfilerRequestContextSerializer,
    )


class _TracingClient:
    """The API client, starting an osprofiler trace for every request."""

    def __init__(self, api) -> None:
        self._api = api

    def _headers(self) -> dict:
        from osprofiler import profiler
        from osprofiler import web

        profiler.clean()
        profiler.init(cloud_key())
        return web.get_trace_id_headers()

    def post_server(self, body):
        return self._api.api_post(
            '/servers', body, headers=self._headers()
        ).body['server']

    def get_server(self, server_id):
        return self._api.api_get(
            '/servers/%s' % server_id, headers=self._headers()
        ).body['server']


def cloud_key() -> str:
    from instrument_demo import cloud

    return cloud.OSPROFILER_KEY


def _run_child(variant: str, args) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            '--child',
            variant,
            '--servers',
            str(args.servers),
            '--concurrency',
            str(args.concurrency),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(
            'bench-boot: %s run failed:\n%s' % (variant, proc.stderr[-4000:])
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--servers', type=int, default=40)
    parser.add_argument('--concurrency', type=int, default=8)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--child', choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.servers, args.concurrency)))
        return
    runs = {v: [] for v in VARIANTS}
    print(
        'Boot throughput, %d servers at concurrency %d, %d rounds '
        '(fresh process per run, rounds interleaved)'
        % (args.servers, args.concurrency, args.rounds),
        flush=True,
    )
    for n in range(args.rounds):
        for variant in VARIANTS:
            run = _run_child(variant, args)
            runs[variant].append(run)
            print(
                '  round %d %-10s %5.2f boots/s  mean boot %5.2f s  '
                'CPU %.3f s/boot  (%d ok, %d failed)'
                % (
                    n + 1,
                    variant,
                    run['boots_per_s'],
                    run['mean_latency_s'],
                    run['cpu_per_boot_s'],
                    run['boots'],
                    run['failed'],
                ),
                flush=True,
            )
    base_rate = statistics.median(r['boots_per_s'] for r in runs['none'])
    base_lat = statistics.median(r['mean_latency_s'] for r in runs['none'])
    print(
        '\nvariant      boots/s  vs none   mean boot  vs none   '
        'throughput cost'
    )
    for variant in VARIANTS:
        rate = statistics.median(r['boots_per_s'] for r in runs[variant])
        lat = statistics.median(r['mean_latency_s'] for r in runs[variant])
        print(
            '%-10s  %7.2f  %6.3fx  %8.2fs  %6.3fx  %+6.1f %%'
            % (
                variant,
                rate,
                rate / base_rate,
                lat,
                lat / base_lat,
                (1 - rate / base_rate) * 100,
            )
        )
    base_cpu = statistics.median(r['cpu_per_boot_s'] for r in runs['none'])
    print(
        '\nCPU per boot, whole process (every service is a thread of '
        'the in-process cloud: not attributable per service)'
    )
    print(
        'variant     CPU s/boot  vs none   added   x target (2 %)  '
        'paired  writer thread'
    )
    for variant in VARIANTS:
        cpu = statistics.median(r['cpu_per_boot_s'] for r in runs[variant])
        added = (cpu / base_cpu - 1) * 100
        # each round's ratio to the none run beside it: drift of the
        # shared machine cancels
        paired = statistics.median(
            r['cpu_per_boot_s'] / n['cpu_per_boot_s']
            for r, n in zip(runs[variant], runs['none'], strict=True)
        )
        writer = statistics.median(
            r.get('writer_cpu_per_boot_s', 0.0) for r in runs[variant]
        )
        print(
            '%-10s  %10.3f  %6.3fx  %+5.1f %%  %-14s  %5.3fx  %s'
            % (
                variant,
                cpu,
                cpu / base_cpu,
                added,
                '' if variant == 'none' else '%.2f' % (added / 2.0),
                paired,
                '%.4f s/boot (%.1f %% of none\'s CPU)'
                % (writer, writer / base_cpu * 100)
                if writer
                else '',
            )
        )
    print(
        '\ntarget: instrument costs <= 2 % CPU per boot; the spread of '
        'each variant over the rounds:'
    )
    for variant in VARIANTS:
        rates = [r['boots_per_s'] for r in runs[variant]]
        cpus = [r['cpu_per_boot_s'] for r in runs[variant]]
        print(
            '  %-10s %.2f .. %.2f boots/s, %.3f .. %.3f CPU s/boot'
            % (variant, min(rates), max(rates), min(cpus), max(cpus))
        )
    print('load average at the end: %.2f' % os.getloadavg()[0])


if __name__ == '__main__':
    main()
