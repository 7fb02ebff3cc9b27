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
"""Speed and memory of a full ``instrument-report`` on a large log.

Generates (once, cached under the temp directory) a seeded synthetic
cloud of about 1,000,000 events (``tests/synthetic`` of this repository:
40 computes, skewed clocks, failures, reschedules, hung builds, SQL), then
measures, each in a fresh subprocess:

* ``decode floor``: reading every line and ``json.loads`` on it, nothing
  else -- the baseline of this run on this machine; and the ceilings
  any Python analyser of these files meets: reading the lines
  (``readlines``) alone, and with ``orjson.loads`` or the analyser's
  msgspec decoder (``decode.RecordDecoder``) on each;
* ``report -j1`` and ``report`` (default workers): the full analysis
  (both passes, text report generated and discarded), wall time, events
  per second and peak RSS (``ru_maxrss`` of the process and its
  workers);
* ``report half``: the same on the first half of the requests, to show
  how peak memory grows with the input;
* ``pt-query-digest`` (when installed): the same log's individually
  written SQL statements as a MySQL slow log, timed with the Percona
  Toolkit's digest; printed as statements/s and as a ratio to the
  report's throughput (which digests them besides everything else).

Then the targets, each as a ratio to what this run measured: the
full report >= 500,000 events/s on two cores (issue 31), ``-j 2``
>= 1.8x ``-j 1`` (issue 31), SQL digest >= 5x pt-query-digest's rate,
peak RSS <= 2 GB (run with ``--events 10000000`` for the 10M-event set;
``half -> full`` is the growth).  CPU seconds (user + system of the
child and its workers) are printed beside wall time, and the CPU
microseconds per event: the cores may be shared, and CPU time is far
less sensitive to the other processes than wall time.  So the scaling
from ``-j 1`` to ``-j 2`` is printed twice: in wall time, and as the
*critical path* of the ``-j 2`` run, the wall time it would take on two
idle cores: the parent's CPU (imports, pass 1's matching, the merge,
the report; everything that is not parallel) less the partition of
pass 2 it read itself, plus the busiest partition's CPU, plus pass 1's
workers' CPU per worker (what the workers spent outside ``run_part``:
pass 1, and pickling pass 2's results), plus what the process that
made some of the report's sections spent beyond the parent's CPU
meanwhile.  Run it from outside the checkout (``cd /tmp;
PYTHONPATH=<checkout> python <this file>``): ``python -c`` imports
from the current directory first.

The children read the analyser's modules as compiled bytecode, as an
installed package does: they run without ``PYTHONDONTWRITEBYTECODE``
(which tox sets) and with ``PYTHONPYCACHEPREFIX`` a cache directory
under the temp directory (nothing is written into the checkout), and
one child imports the analyser before the measured runs.  Otherwise
each run compiles some 60 modules from source, about 0.12 CPU s that
only one process can spend, in ``-j 1`` and ``-j 2`` alike.

Prints numbers and ratios; asserts nothing.  Usage:
``python bench/bench_report.py [--events N]`` (the log is cached in
the temp directory for the next run).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import typing

# issue 31's targets (issue 17's was 1,000,000 events/s)
TARGET_EVENTS_PER_S = 500_000
TARGET_SCALING = 1.8
TARGET_DIGEST_X_PT = 5.0
TARGET_PEAK_MB = 2048


def generate(events: int) -> tuple:
    # The generator is test code of this repository, not shipped.
    sys.path.insert(
        0, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
    from tests import synthetic

    requests = max(50, events // 67)
    base = os.path.join(
        tempfile.gettempdir(), 'instrument-bench-report-%d' % requests
    )
    marker = os.path.join(base, 'truth.json')
    if os.path.exists(marker):
        with open(marker) as f:
            info = json.load(f)
        return base, info
    if os.environ.get('INSTRUMENT_BENCH_CHILD') != '1':
        # generate in a child: this process stays small
        subprocess.run(
            [
                sys.executable,
                __file__,
                '--generate-only',
                '--events',
                str(events),
            ],
            check=True,
            env=dict(os.environ, INSTRUMENT_BENCH_CHILD='1'),
        )
        with open(marker) as f:
            return base, json.load(f)
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.monotonic()
    logs = os.path.join(base, 'logs')
    truth = synthetic.generate(
        logs, seed=11, requests=requests, rate=3.0, computes=40
    )
    half = os.path.join(base, 'half')
    htruth = synthetic.generate(
        half, seed=11, requests=requests // 2, rate=3.0, computes=40
    )
    info = {
        'events': truth.events,
        'half_events': htruth.events,
        'requests': requests,
        'sql': sum(v[0] for v in truth.sql.values()),
        'generated_s': time.monotonic() - t0,
    }
    with open(marker, 'w') as f:
        json.dump(info, f)
    print(
        'generated %d events in %.0f s' % (truth.events, info['generated_s'])
    )
    return base, info


# where the children's bytecode goes (``PYTHONPYCACHEPREFIX``)
PYCACHE = os.path.join(tempfile.gettempdir(), 'instrument-bench-pycache')
# what a report imports: one child compiles it before the measured runs
WARM = (
    'from instrument.analysis import pipeline\n'
    'from instrument.analysis.render import text\n'
)


def child_env() -> dict:
    """The children's environment: bytecode written and read under
    ``PYCACHE``, as an installed package reads its own."""
    env = dict(os.environ)
    env.pop('PYTHONDONTWRITEBYTECODE', None)
    env['PYTHONPYCACHEPREFIX'] = PYCACHE
    return env


def measure(code: str, details: typing.Optional[dict] = None) -> tuple:
    """Wall seconds, peak RSS (MB) and CPU seconds of ``python -c
    code``; ``details`` gets what else the child printed."""
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, '-c', code],
        capture_output=True,
        text=True,
        check=False,
        env=child_env(),
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if details is not None:
        details.update(out)
    return wall, out['rss_mb'], out['cpu_s']


# VmHWM is the process's own peak (ru_maxrss survives exec from this
# bench process); workers report theirs through RUSAGE_CHILDREN.
PEAK = (
    'import resource, json\n'
    'hwm = [int(l.split()[1]) for l in open("/proc/self/status") '
    'if l.startswith("VmHWM")][0]\n'
    's = resource.getrusage(resource.RUSAGE_SELF)\n'
    'c = resource.getrusage(resource.RUSAGE_CHILDREN)\n'
    'print(json.dumps({"rss_mb": max(hwm, c.ru_maxrss) / 1024,\n'
    '                  "parent_cpu_s": s.ru_utime + s.ru_stime,\n'
    '                  "parts_cpu_s": globals().get("_parts", []),\n'
    '                  "elsewhere_cpu_s": globals().get("_elsewhere", []),\n'
    '                  "cpu_s": s.ru_utime + s.ru_stime + c.ru_utime'
    ' + c.ru_stime}))\n'
)


def decode_floor(logs: str) -> str:
    return (
        'import glob, gzip, json\n'
        'n = 0\n'
        'for p in sorted(glob.glob(%r + "/*")):\n'
        '    f = gzip.open(p, "rb") if p.endswith(".gz") else '
        'open(p, "rb")\n'
        '    for line in f:\n'
        '        i = line.find(b"{")\n'
        '        if i >= 0:\n'
        '            json.loads(line[i:]); n += 1\n' % logs
    ) + PEAK


def ceiling(logs: str, decode: str) -> str:
    """Reading every line in the analyser's chunks, and ``decode``:
    ``none``, ``orjson`` or ``msgspec`` (``ingest.codec.RecordDecoder``).
    """
    return (
        'import glob, gzip\n'
        'from instrument.analysis.ingest import codec\n'
        'decode = {"none": None, "orjson": codec.loads,\n'
        '          "msgspec": codec.RecordDecoder().decode}[%r]\n'
        'for p in sorted(glob.glob(%r + "/*")):\n'
        '    f = gzip.open(p, "rb") if p.endswith(".gz") else '
        'open(p, "rb")\n'
        '    while True:\n'
        '        lines = f.readlines(1 << 18)\n'
        '        if not lines:\n'
        '            break\n'
        '        if decode is not None:\n'
        '            for line in lines:\n'
        '                i = line.find(b"{")\n'
        '                if i >= 0:\n'
        '                    decode(line[i:])\n' % (decode, logs)
    ) + PEAK


# The CPU seconds of each partition of pass 2 (``pipeline.run_part``),
# noted on the Part it returns with whether this process (the parent)
# ran it (the child prints them); and, with -j > 1, the CPU of the
# forked process that made some sections of the report and the
# parent's own CPU meanwhile (``pipeline.received``).  With the
# parent's own CPU and pass 1's workers' they make the critical path
# of a run, the wall time it would take on idle cores.
PARTS = (
    'import os as _os, time as _time\n'
    'from instrument.analysis import pipeline\n'
    '_run_part = pipeline.run_part\n'
    '_parts = []\n'
    '_elsewhere = []\n'
    '_parent = _os.getpid()\n'
    'def _timed(*a, **k):\n'
    '    c0 = _time.process_time()\n'
    '    p = _run_part(*a, **k)\n'
    '    p.bench_cpu = _time.process_time() - c0\n'
    '    p.bench_here = _os.getpid() == _parent\n'
    '    return p\n'
    'pipeline.run_part = _timed\n'
    '_merge = pipeline.merge\n'
    'def _noted(parts, ctx):\n'
    '    _parts.extend([p.bench_cpu, p.bench_here] for p in parts)\n'
    '    return _merge(parts, ctx)\n'
    'pipeline.merge = _noted\n'
    '_received = getattr(pipeline, "received", None)\n'
    'def _got(conn, here_s):\n'
    '    out = _received(conn, here_s)\n'
    '    _elsewhere.append([out[1], here_s])\n'
    '    return out\n'
    'if _received is not None:\n'
    '    pipeline.received = _got\n'
)


def report_code(logs: str, jobs: int) -> str:
    return (
        PARTS + 'from instrument.analysis.render import text as report_text\n'
        'rep = pipeline.analyse([%r], pipeline.Options(jobs=%d))\n'
        # as the command line does (instrument.cmd.report.main)
        'import gc; gc.freeze()\n'
        'report_text.render(rep)\n' % (logs, jobs)
    ) + PEAK


def slow_log(logs: str, path: str) -> int:
    """The individually written statements as a MySQL slow log."""
    from instrument.analysis.ingest import spanfiles

    texts = {}
    statements = []
    paths, _ = spanfiles.discover([logs])
    for p in paths:
        import gzip

        f = gzip.open(p, 'rb') if p.endswith('.gz') else open(p, 'rb')
        with f:
            for line in f:
                i = line.find(b'{"v":')
                if i < 0 or b'sql.' not in line:
                    continue
                rec = json.loads(line[i:])
                attrs = rec.get('attrs') or {}
                if rec['ev'] == 'sql.fingerprint':
                    texts[attrs['fp']] = attrs['text']
                elif rec['ev'] == 'sql.query' and rec['ph'] == 'X':
                    statements.append(
                        (
                            rec['ts'],
                            rec['dur_us'],
                            attrs.get('fp'),
                            attrs.get('rows') or 0,
                        )
                    )
    statements.sort()
    with open(path, 'w') as out:
        for ts, dur, fp, rows in statements:
            text = texts.get(fp, 'select 1').replace('?+', '1, 2')
            text = text.replace('?', "'1'")
            out.write(
                '# Time: %s\n# User@Host: nova[nova] @ localhost []  '
                'Id: 1\n# Query_time: %.6f  Lock_time: 0.000000 '
                'Rows_sent: %d  Rows_examined: %d\nSET timestamp=%d;'
                '\n%s;\n'
                % (
                    time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(ts / 1e6))
                    + '.%06dZ' % (ts % 1_000_000),
                    dur / 1e6,
                    rows,
                    rows,
                    ts // 1_000_000,
                    text,
                )
            )
    return len(statements)


def _loadavg() -> str:
    try:
        with open('/proc/loadavg') as f:
            return ' '.join(f.read().split()[:3])
    except OSError:
        return '?'


def pt_query_digest(base: str, logs: str) -> typing.Optional[tuple]:
    """``(wall s, CPU s)`` of pt-query-digest on the log's statements
    (None when it is not installed)."""
    digest = shutil.which('pt-query-digest')
    if digest is None:
        return None
    slow = os.path.join(base, 'slow.log')
    if not os.path.exists(slow):
        slow_log(logs, slow + '.tmp')
        os.rename(slow + '.tmp', slow)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run(
        [digest, '--limit', '20', slow],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (
        after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--events', type=int, default=1_000_000)
    parser.add_argument(
        '--generate-only', action='store_true', help=argparse.SUPPRESS
    )
    parser.add_argument(
        '--no-ceilings',
        action='store_true',
        help='skip the decode floor and ceilings',
    )
    parser.add_argument(
        '--quick',
        action='store_true',
        help='only -j1 and -j2 (no ceilings, default '
        'workers, half set or pt-query-digest)',
    )
    args = parser.parse_args()
    base, info = generate(args.events)
    if args.generate_only:
        return
    logs = os.path.join(base, 'logs')
    events = info['events']
    print(
        'log: %d events, %d requests, %d SQL statements, %.0f MB, '
        '%d CPUs'
        % (
            events,
            info['requests'],
            info['sql'],
            sum(
                os.path.getsize(os.path.join(logs, f))
                for f in os.listdir(logs)
            )
            / 1e6,
            len(os.sched_getaffinity(0)),
        )
    )
    print('load average before: %s' % _loadavg())
    measure(WARM + PEAK)  # (the bytecode, as installed: PYCACHE)
    rows = []
    floor = None
    if not (args.no_ceilings or args.quick):
        wall, rss, cpu = measure(decode_floor(logs))
        rows.append(('decode floor (json.loads)', wall, events, rss, cpu))
        floor = wall
        for decode in ('none', 'orjson', 'msgspec'):
            wall, rss, cpu = measure(ceiling(logs, decode))
            rows.append(
                (
                    'ceiling: readlines%s'
                    % ('' if decode == 'none' else ' + ' + decode),
                    wall,
                    events,
                    rss,
                    cpu,
                )
            )
    results = {}
    details: dict = {}
    runs = [
        ('report -j1', report_code(logs, 1), events),
        ('report -j2', report_code(logs, 2), events),
    ]
    if not args.quick:
        runs += [
            ('report (default workers)', report_code(logs, 0), events),
            (
                'report -j1, half the requests',
                report_code(os.path.join(base, 'half'), 1),
                info['half_events'],
            ),
        ]
    for label, code, n in runs:
        details[label] = {}
        wall, rss, cpu = measure(code, details[label])
        rows.append((label, wall, n, rss, cpu))
        results[label] = (wall, rss, cpu)
        sys.stdout.flush()
    print(
        '%-34s %8s %8s %10s %10s %8s %8s %8s'
        % (
            'run',
            'seconds',
            'CPU s',
            'events/s',
            'ev/CPU s',
            'CPU us/ev',
            'peak MB',
            'x floor',
        )
    )
    for label, wall, n, rss, cpu in rows:
        print(
            '%-34s %8.2f %8.2f %10.0f %10.0f %8.2f %8.0f %8s'
            % (
                label,
                wall,
                cpu,
                n / wall,
                n / max(cpu, 1e-3),
                cpu / n * 1e6,
                rss,
                '-' if floor is None else '%.2f' % (wall / floor),
            )
        )
    crit = {}
    for label in ('report -j1', 'report -j2'):
        d = details[label]
        # [CPU s, run by the parent]; an older tree notes the CPU only
        parts = [
            p if isinstance(p, list) else [p, False]
            for p in d.get('parts_cpu_s') or [0.0]
        ]
        cpus = [c for c, _here in parts]
        here = sum(c for c, h in parts if h)
        # the report's sections made by a forked process: its CPU, and
        # the parent's own meanwhile (what it did not wait for)
        other, meanwhile = (d.get('elsewhere_cpu_s') or [[0.0, 0.0]])[0]
        pass1 = max(
            0.0,
            d['cpu_s'] - d['parent_cpu_s'] - (sum(cpus) - here) - other,
        )
        crit[label] = (
            d['cpu_s']
            if label == 'report -j1'
            else d['parent_cpu_s']
            - here
            + max(cpus)
            + pass1 / len(parts)
            + max(0.0, other - meanwhile)
        )
        print(
            '  %s: parent %.2f CPU s (%.2f of it pass 2), pass 2 %s CPU '
            's, pass 1 workers (and the pass 2 workers\' pickling) %.2f '
            'CPU s, report sections made elsewhere %.2f CPU s (parent '
            'meanwhile %.2f): critical path %.2f s'
            % (
                label,
                d['parent_cpu_s'],
                here,
                ' + '.join('%.2f' % c for c in cpus),
                pass1,
                other,
                meanwhile,
                crit[label],
            )
        )
    print('load average after: %s' % _loadavg())
    today = min(
        results[k][0]
        for k in ('report -j1', 'report -j2', 'report (default workers)')
        if k in results
    )
    print()
    print("the targets (ratios to what this run measured):")
    wall = results['report -j2'][0]
    print(
        '  full report -j2: %.0f events/s = %.2f of the target (%d on '
        'two cores); on idle cores (critical path) %.0f events/s = %.2f '
        'of it; best of -j1, -j2 and default: %.0f events/s'
        % (
            events / wall,
            events / wall / TARGET_EVENTS_PER_S,
            TARGET_EVENTS_PER_S,
            events / crit['report -j2'],
            events / crit['report -j2'] / TARGET_EVENTS_PER_S,
            events / today,
        )
    )
    j1 = results['report -j1']
    scaling = crit['report -j1'] / crit['report -j2']
    print(
        '  -j2 / -j1: %.2fx in wall time, %.2fx by critical path = %.2f '
        'of the target (%.1fx); CPU %.2f us/event with -j1, %.2f with '
        '-j2'
        % (
            j1[0] / wall,
            scaling,
            scaling / TARGET_SCALING,
            TARGET_SCALING,
            j1[2] / events * 1e6,
            results['report -j2'][2] / events * 1e6,
        )
    )
    print(
        '  events per CPU second (-j1, one core): %.0f = %.2f of half '
        'the target (%d on each of two cores)'
        % (
            events / j1[2],
            events / j1[2] / (TARGET_EVENTS_PER_S / 2),
            TARGET_EVENTS_PER_S // 2,
        )
    )
    if args.quick:
        return
    half = results['report -j1, half the requests'][1]
    full = results['report -j1'][1]
    peak = max(
        r[1]
        for k, r in results.items()
        if k != 'report -j1, half the requests'
    )
    print(
        '  peak RSS: %.0f MB at %d events (target %d MB: %s); half '
        '-> full input: %.0f -> %.0f MB (x%.2f for x2 input)'
        % (
            peak,
            events,
            TARGET_PEAK_MB,
            'met' if peak <= TARGET_PEAK_MB else 'NOT met',
            half,
            full,
            full / max(half, 1),
        )
    )
    pt = pt_query_digest(base, logs)
    if pt is None:
        print('  pt-query-digest: not installed (Debian: percona-toolkit)')
        return
    n = info['sql']
    pt_wall, pt_cpu = pt
    print(
        '  SQL digest: pt-query-digest %d statements in %.2f s (%.2f '
        'CPU s); the full report digested them and read %d other '
        'events in %.2f s: %.2fx pt-query-digest\'s rate (target '
        '%.0fx)'
        % (
            n,
            pt_wall,
            pt_cpu,
            events - n,
            today,
            pt_wall / today,
            TARGET_DIGEST_X_PT,
        )
    )


if __name__ == '__main__':
    main()
