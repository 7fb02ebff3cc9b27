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

``--services separate`` states the CPU per service instead: the cloud
of the integration tier (``tests/integration/cloud.py``: nova-api under
a threaded WSGI server, nova-conductor, nova-scheduler and two
``fake`` nova-computes as separate processes, placement, RabbitMQ at
127.0.0.1:5672 and MariaDB at 127.0.0.1:3306), started afresh for each
run, on the real clock (no libfaketime).  Variants ``none`` (no
notifier driver, no paste filter: nova as it ships) and ``instrument``
(the library switched on in nova.conf and api-paste.ini, every other
option at its default), rounds interleaved.  Each run creates a flavor,
boots one warm-up server, then reads every service's CPU time (user +
system of each process of its session, from ``/proc/<pid>/stat``,
children it reaped included), boots ``--servers`` servers
``--concurrency`` at a time, waits until each is active (polling
cell1's ``instances`` table, not the API, whose CPU the polls would
add to), then ``--drain`` seconds for the writers' last flush, reads
the CPU again and divides the difference by the boots.  Prints, per service,
the median CPU seconds per boot of each variant, the ratio
instrument/none and the added CPU as a multiple of the 2 % target, the
ratio of each round's pair, the spread, and the writer thread's share
of each instrumented service's CPU (its ``process.sample`` records).
``--variants none,off,instrument`` adds ``off``: the library's lines
in nova.conf and api-paste.ini but ``[instrument] enabled = false``
(what the loaders alone cost).  osprofiler is left out of this mode.
Run with the back ends up, in an environment with nova, placement and
PyMySQL (``tox -e bench-boot --
--services separate``, or ``.tox/integration/bin/python
bench/bench_boot_overhead.py --services separate``); each run takes
about a minute and a half on two cores (the cloud's start is most of
it).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ('none', 'instrument', 'osprofiler')
SEPARATE_VARIANTS = ('none', 'instrument')
# --variants may add "off": the library loaded by nova.conf and
# api-paste.ini as for "instrument", but [instrument] enabled = false
# (what nova pays for the loaders alone, notifier driver included)
OFF = {'instrument': {'enabled': False}}
REDIS = 'redis://127.0.0.1:6379'
TARGET = 0.02
# the services of the separate cloud, as its process names group them
# (the computes summed); placement is no nova service: not instrumented
SERVICES = (
    'nova-api',
    'nova-conductor',
    'nova-scheduler',
    'nova-compute',
    'placement-api',
)
COMPUTES = 2


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


# -- --services separate ----------------------------------------------------

BACKEND_COMMS = {
    'mariadbd': 'mariadb',
    'mysqld': 'mariadb',
    'beam.smp': 'rabbitmq',
}
SETTLE_TIMEOUT_S = 240


def proc_cpu() -> dict:
    """CPU seconds so far of every session and of the back-end servers.

    ``{('sid', session id) or ('backend', name): [cpu_s, processes]}``;
    a process's CPU is its user + system time plus that of the children
    it reaped (``/proc/<pid>/stat`` fields 14 to 17), so a service's
    session, summed, holds the workers it forked, the exited ones too.
    """
    tick = os.sysconf('SC_CLK_TCK')
    out: dict = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry, 'rb') as f:
                data = f.read().decode('ascii', 'replace')
        except OSError:  # ended meanwhile
            continue
        close = data.rindex(')')
        comm = data[data.index('(') + 1 : close]
        fields = data[close + 2 :].split()
        # fields[0] is field 3 (state): session 6, utime..cstime 14..17
        cpu = sum(int(v) for v in fields[11:15]) / tick
        keys = [('sid', int(fields[3]))]
        if comm in BACKEND_COMMS:
            keys.append(('backend', BACKEND_COMMS[comm]))
        for key in keys:
            slot = out.setdefault(key, [0.0, 0])
            slot[0] += cpu
            slot[1] += 1
    return out


def service_of(name: str) -> str:
    """The service a process of the separate cloud belongs to."""
    return 'nova-compute' if name.startswith('compute-') else name


def writer_share(span_dir: str, since: float, until: float) -> dict:
    """Per service, the writer thread's CPU and the process's CPU over
    the boots, from the ``process.sample`` records (every 5 s by
    default): between the last sample of each process at or before
    ``since`` and its first at or after ``until`` (wall seconds), the
    window widened to whole sampling intervals.  ``{svc: [writer_s,
    cpu_s]}``."""
    samples: dict = {}
    for name in sorted(os.listdir(span_dir)):
        with open(os.path.join(span_dir, name), errors='replace') as f:
            for line in f:
                if '"process.sample"' not in line:
                    continue
                rec = json.loads(line)
                attrs = rec.get('attrs') or {}
                if 'writer_cpu_s' not in attrs:  # the one at exit
                    continue
                samples.setdefault((rec.get('svc'), rec['pid']), []).append(
                    (
                        rec['ts'] / 1e6,
                        attrs['cpu_user_s'] + attrs['cpu_sys_s'],
                        attrs['writer_cpu_s'],
                    )
                )
    out: dict = {}
    for (svc, _pid), rows in samples.items():
        rows.sort()
        first = ([r for r in rows if r[0] <= since] or rows)[-1]
        last = ([r for r in rows if r[0] >= until] or rows[-1:])[0]
        slot = out.setdefault('nova-%s' % svc, [0.0, 0.0])
        slot[0] += last[2] - first[2]
        slot[1] += last[1] - first[1]
    return out


def settle_db(the_cloud, boots: list, timeout: float) -> None:
    """Wait until every created server is active or in error, reading
    cell1's ``instances`` table, not the API: polling nova-api would add
    CPU to it for every second the boots take, and the variants' boots
    do not take the same time."""
    started = time.monotonic()
    pending = {b.server_id: b for b in boots if b.server_id}
    while pending:
        for uuid, vm_state in the_cloud._query(
            'SELECT uuid, vm_state FROM instances WHERE deleted = 0'
        ):
            boot = pending.get(uuid)
            if boot is not None and vm_state in ('active', 'error'):
                boot.status = vm_state.upper()
                del pending[uuid]
        if not pending:
            return
        if time.monotonic() - started > timeout:
            raise RuntimeError(
                '%d servers still building after %ds' % (len(pending), timeout)
            )
        time.sleep(0.2)


def separate_run(variant: str, args, work_root: str) -> dict:
    """Start the separate cloud for ``variant``, boot, read the CPU."""
    from tests.integration import cloud
    from tests.integration import load
    from tests.integration import standins

    work = tempfile.mkdtemp(prefix='%s-' % variant, dir=work_root)
    computes = [
        cloud.Compute('compute-%d' % (n + 1), 'fake.FakeDriver', 0.0)
        for n in range(COMPUTES)
    ]
    the_cloud = cloud.Cloud(
        computes,
        work,
        instrument=variant != 'none',
        skew=False,
        controller=OFF if variant == 'off' else None,
        compute=OFF if variant == 'off' else None,
    )
    started = time.monotonic()
    the_cloud.start()
    try:
        up_s = time.monotonic() - started
        api = load.Api(the_cloud.api_url)
        flavor = api.create_flavor('bench.tiny', 1, 64, 1)
        # One warm-up boot: first-use costs are not the workload's.
        warm = api.boot(load.Boot('warm-up', flavor, standins.IMAGE_ID))
        settle_db(the_cloud, [warm], SETTLE_TIMEOUT_S)
        time.sleep(args.drain)
        boots = [
            load.Boot('bench-%03d' % n, flavor, standins.IMAGE_ID)
            for n in range(args.servers)
        ]
        since = time.time()
        before = proc_cpu()
        t0 = time.monotonic()
        api.boot_all(boots, args.concurrency)
        settle_db(the_cloud, boots, SETTLE_TIMEOUT_S)
        elapsed = time.monotonic() - t0
        time.sleep(args.drain)  # the writers' last flush of the boots
        after = proc_cpu()
        until = time.time()
        for service in the_cloud.services:
            service.check()
    finally:
        problems = the_cloud.stop()
    cpu: dict = {}
    procs: dict = {}
    for service in the_cloud.services:
        key = ('sid', service.pid)
        name = service_of(service.name)
        cpu[name] = cpu.get(name, 0.0) + (after[key][0] - before[key][0])
        procs[name] = procs.get(name, 0) + after[key][1]
    backend = {
        name: after[('backend', name)][0] - before[('backend', name)][0]
        for name in set(BACKEND_COMMS.values())
        if ('backend', name) in after and ('backend', name) in before
    }
    active = [b for b in boots if b.status == 'ACTIVE']
    return {
        'variant': variant,
        'boots': len(active),
        'failed': len(boots) - len(active),
        'elapsed_s': elapsed,
        'up_s': up_s,
        'boots_per_s': len(active) / elapsed,
        'cpu_per_boot_s': {k: v / len(boots) for k, v in cpu.items()},
        'processes': procs,
        'backend_per_boot_s': {k: v / len(boots) for k, v in backend.items()},
        'writer': writer_share(the_cloud.span_dir, since, until)
        if variant == 'instrument'
        else {},
        'problems': problems,
        'work_dir': work,
        'window': [since, until],
    }


def _nova_total(run: dict) -> float:
    return sum(
        v for k, v in run['cpu_per_boot_s'].items() if k != 'placement-api'
    )


def _span(values) -> str:
    values = list(values)
    return '%.4f..%.4f' % (min(values), max(values))


def main_separate(args) -> None:
    sys.path.insert(0, ROOT)
    rounds = args.rounds or 2
    args.servers = args.servers or 10
    args.concurrency = args.concurrency or 5
    work_root = tempfile.mkdtemp(prefix='bench-boot-separate-')
    print(
        'CPU per boot per service, separate processes (tests/integration '
        'cloud, %d fake computes, real clock), %d servers at concurrency '
        '%d after one warm-up boot, %d rounds (a fresh cloud per run, '
        'rounds interleaved); load average at the start: %.2f'
        % (
            COMPUTES,
            args.servers,
            args.concurrency,
            rounds,
            os.getloadavg()[0],
        ),
        flush=True,
    )
    variants = args.variants.split(',')
    if (
        not set(SEPARATE_VARIANTS)
        <= set(variants)
        <= {'off'}.union(SEPARATE_VARIANTS)
    ):
        raise SystemExit(
            '--variants: none and instrument, and optionally off, in the '
            'order of a round'
        )
    runs: dict = {v: [] for v in variants}
    for n in range(rounds):
        for variant in variants:
            run = separate_run(variant, args, work_root)
            runs[variant].append(run)
            print(
                '  round %d %-10s %5.2f boots/s (%d ok, %d failed, cloud '
                'up in %.0f s)  CPU s/boot: %s  nova %.3f  load %.2f%s'
                % (
                    n + 1,
                    variant,
                    run['boots_per_s'],
                    run['boots'],
                    run['failed'],
                    run['up_s'],
                    '  '.join(
                        '%s %.3f' % (s, run['cpu_per_boot_s'][s])
                        for s in SERVICES
                    ),
                    _nova_total(run),
                    os.getloadavg()[0],
                    ''.join('\n    ' + p for p in run['problems']),
                ),
                flush=True,
            )
    if args.json:
        print(json.dumps(runs))

    def med(variant, key):
        return statistics.median(key(r) for r in runs[variant])

    rows = [
        (s, lambda r, s=s: r['cpu_per_boot_s'][s], s != 'placement-api')
        for s in SERVICES
    ]
    rows.append(('nova total', _nova_total, True))
    rows.append(
        ('cloud total', lambda r: sum(r['cpu_per_boot_s'].values()), True)
    )
    print(
        '\nCPU s per boot, median of the rounds (x target: the added CPU '
        'as a multiple of the 2 % target, 1.00 = at it; paired: the '
        "median of each round's instrument/none)"
    )
    print(
        '%-14s %8s %10s %8s %8s %8s %8s  %-14s  %-14s'
        % (
            'service',
            'none',
            'instrument',
            'ratio',
            'added',
            'x target',
            'paired',
            'none spread',
            'instr. spread',
        )
    )
    for label, key, instrumented in rows:
        none = med('none', key)
        inst = med('instrument', key)
        ratio = inst / none if none else float('nan')
        paired = statistics.median(
            key(i) / key(z) if key(z) else float('nan')
            for i, z in zip(runs['instrument'], runs['none'], strict=True)
        )
        print(
            '%-14s %8.4f %10.4f %7.3fx %+7.1f%% %8s %7.3fx  %-14s  %-14s'
            % (
                label,
                none,
                inst,
                ratio,
                (ratio - 1) * 100,
                '%.2f' % ((ratio - 1) / TARGET) if instrumented else '-',
                paired,
                _span(map(key, runs['none'])),
                _span(map(key, runs['instrument'])),
            )
        )
    print('(placement-api is not instrumented: its row shows the noise)')
    if 'off' in runs:
        print(
            '\n"off" (the loaders, [instrument] enabled = false), CPU s per '
            'boot, median, ratio and paired ratio to none, spread:'
        )
        for label, key, _instrumented in rows:
            off = med('off', key)
            none = med('none', key)
            print(
                '%-14s %8.4f %7.3fx %7.3fx  %-14s'
                % (
                    label,
                    off,
                    off / none if none else float('nan'),
                    statistics.median(
                        key(o) / key(z) if key(z) else float('nan')
                        for o, z in zip(runs['off'], runs['none'], strict=True)
                    ),
                    _span(map(key, runs['off'])),
                )
            )
    print(
        'back ends (shared with the rest of the machine; indicative), '
        'none -> instrument: '
        + '  '.join(
            '%s %.4f -> %.4f s/boot'
            % (
                name,
                med('none', lambda r, n=name: r['backend_per_boot_s'][n]),
                med(
                    'instrument',
                    lambda r, n=name: r['backend_per_boot_s'][n],
                ),
            )
            for name in sorted(set(BACKEND_COMMS.values()))
            if all(
                name in r['backend_per_boot_s']
                for v in SEPARATE_VARIANTS
                for r in runs[v]
            )
        )
    )
    print(
        "\nwriter thread's share of each instrumented service's CPU "
        '(its process.sample records around the boots):'
    )
    for service in SERVICES[:4]:
        writer = cpu = 0.0
        for r in runs['instrument']:
            w, c = r['writer'].get(service, (0.0, 0.0))
            writer += w
            cpu += c
        print(
            '  %-14s %s'
            % (
                service,
                '%.1f %% (%.3f of %.3f CPU s sampled)'
                % (writer / cpu * 100, writer, cpu)
                if cpu
                else 'no samples in the window',
            )
        )
    print(
        'boots/s (wall, noisy): none %.2f, instrument %.2f'
        % (
            med('none', lambda r: r['boots_per_s']),
            med('instrument', lambda r: r['boots_per_s']),
        )
    )
    print('load average at the end: %.2f' % os.getloadavg()[0])
    if args.keep:
        print('work directories (logs, confs, span files): %s' % work_root)
    else:
        shutil.rmtree(work_root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--services',
        choices=('together', 'separate'),
        default='together',
        help='together: the in-process demo cloud, CPU for the whole '
        'process (default); separate: each service its own process, CPU '
        'per service',
    )
    parser.add_argument('--servers', type=int, help='40 together, 10 separate')
    parser.add_argument(
        '--concurrency', type=int, help='8 together, 5 separate'
    )
    parser.add_argument('--rounds', type=int, help='3 together, 2 separate')
    parser.add_argument(
        '--drain',
        type=float,
        default=1.0,
        help='separate: seconds to wait after the boots before the CPU '
        'is read (the writers flush every 0.5 s)',
    )
    parser.add_argument(
        '--keep',
        action='store_true',
        help='separate: keep the work directories (logs, span files)',
    )
    parser.add_argument(
        '--json',
        action='store_true',
        help='separate: print every run as one JSON line too',
    )
    parser.add_argument(
        '--variants',
        default=','.join(SEPARATE_VARIANTS),
        help='separate: the variants of a round, in order: none and '
        'instrument, and optionally off (the loaders in nova.conf and '
        'api-paste.ini with [instrument] enabled = false)',
    )
    parser.add_argument('--child', choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.services == 'separate':
        main_separate(args)
        return
    args.servers = args.servers or 40
    args.concurrency = args.concurrency or 8
    args.rounds = args.rounds or 3
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
