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
"""The SQL digest on DuckDB against today's and pt-query-digest.

On the 1M-event set of ``bench/bench_report.py`` (generated there and
cached under the temp directory), each in a fresh subprocess:

* ``python``: today's digest path: every span file read in chunks, the
  ``sql.`` lines (a substring test) decoded by the analyser's decoder
  (``load.RecordDecoder``) and added to ``sqldigest.SqlDigest``, then
  the profile;
* ``duckdb``: ``instrument-report --engine duckdb``'s digest
  (``columnar.digest_of``): the ``sql.`` records and process starts
  read, typed and validated by DuckDB, duplicates left out, the classes
  aggregated in SQL, then the same profile;
* ``duckdb -j 1``: the same on one DuckDB thread (``instrument-report
  --engine duckdb -j 1``): the CPU that parallelism costs;
* ``duckdb load``: ``columnar.load_files`` on every line (the decode
  and validation of the columnar engine, bad lines counted by
  file:line), as events per second: the per-event cost of a columnar
  full report;
* ``--growth``: the peak RSS of ``duckdb load`` as the input grows
  (the half set, the 1M set, the 10M set of ``bench_engines.py``),
  with DuckDB's memory limit (``--memory-limit``, 1GB as
  ``instrument-report``) and, up to 1M events, without one;
* ``pt-query-digest`` (Percona Toolkit, when installed) on the same
  statements written as a MySQL slow log (``bench_report.slow_log``).

Prints seconds, statements (or events) per second of wall time and of
CPU, peak RSS, whether the two digests' profiles are equal, and the
ratios: DuckDB's digest rate over today's and over pt-query-digest's
(issue 17's target: at least 5).  The machine's load average is printed
with each row: the cores are shared.  Asserts nothing.  Usage::

    nice -n 10 python bench/bench_digest.py [--events 1000000] [--growth]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r'''
import json, resource, sys, time
sys.path.insert(0, %(root)r)
from instrument.analysis import load, sqldigest
kind = %(kind)r
logs = %(logs)r
paths, _ = load.discover([logs])
t0 = time.monotonic()
out = {}
if kind == 'python':
    from instrument.analysis import stream
    digest = sqldigest.SqlDigest()
    decode = load.RecordDecoder().decode
    n = 0
    for f, lines, first, _w in stream.chunks(stream.open_files(paths)):
        for raw in lines:
            if b'"ev":"sql.' not in raw:
                continue
            j = raw.find(b'{"v":')
            rec = decode(raw[j:] if j > 0 else raw)
            if rec is None:
                continue
            attrs = rec.attrs or {}
            if rec.ph == 'X' and rec.ev == 'sql.query':
                n += 1
                digest.add(rec.ts, rec.dur_us, attrs.get('fp'), rec.svc,
                           attrs.get('db'), attrs.get('call'),
                           attrs.get('rows'), rec.st == 'error',
                           attrs.get('kind'))
            elif rec.ph == 'C' and rec.ev == 'sql.agg':
                digest.add_agg(rec.ts, rec.svc, attrs)
            elif rec.ph == 'M' and rec.ev == 'sql.fingerprint':
                digest.fingerprint(attrs.get('fp'), attrs.get('text'),
                                   attrs.get('kind'))
    out['profile'] = digest.profile(limit=0)
elif kind in ('duckdb', 'duckdb -j 1'):
    from instrument.analysis import columnar
    digest = columnar.digest_of(paths, {}, None, None, threads=(
        1 if kind == 'duckdb -j 1' else None))
    out['profile'] = digest.profile(limit=0)
else:
    import shutil, tempfile
    from instrument.analysis import columnar
    tmp = tempfile.mkdtemp(prefix='bench-digest-')
    con = columnar.connect(%(limit)r, temp_directory=tmp + '/spill')
    loaded = columnar.load_files(con, paths, tmp=tmp)
    out['records'] = loaded.records
    out['lines'] = loaded.lines
    con.close()
    shutil.rmtree(tmp)
out['seconds'] = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
out['cpu'] = ru.ru_utime + ru.ru_stime
out['rss_mb'] = ru.ru_maxrss / 1024
with open('/proc/self/status') as f:
    out['rss_mb'] = max(out['rss_mb'], max(
        int(x.split()[1]) / 1024 for x in f if x.startswith('VmHWM')))
print(json.dumps(out, default=str))
'''


def _loadavg() -> str:
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def child(kind: str, logs: str, limit: str = None) -> dict:
    proc = subprocess.run(
        [sys.executable, '-c', CHILD % {'root': ROOT, 'kind': kind,
                                        'logs': logs, 'limit': limit}],
        capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def growth(base: str, info: dict, limit: str) -> None:
    """Peak RSS (VmHWM) of ``load_files`` on every line as the input
    grows, within DuckDB's memory limit and without one."""
    import bench_engines
    # the 10M set of bench_engines.py (its default --big-events)
    big, big_events, _sql = bench_engines.big_set(10_000_000)
    sets = ((os.path.join(base, 'half'), info['half_events']),
            (os.path.join(base, 'logs'), info['events']),
            (big, big_events))
    print('duckdb load, every line validated (memory_limit %s)' % limit)
    print('%12s %8s %10s %10s %8s %8s  %s' % (
        'events', 'limit', 'seconds', 'k ev/CPU s', 'peak MB', 'MB/M ev',
        'load'))
    for logs, events in sets:
        for lim in (limit, None):
            if lim is None and events > 2 * info['events']:
                continue
            r = child('duckdb load', logs, lim)
            print('%12d %8s %10.1f %10.1f %8.0f %8.0f  %s' % (
                events, lim or 'none', r['seconds'],
                events / max(r['cpu'], 1e-3) / 1e3, r['rss_mb'],
                r['rss_mb'] / (events / 1e6), _loadavg()))
            sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--events', type=int, default=1_000_000)
    parser.add_argument('--repeat', type=int, default=1,
                        help='runs of each kind; the fastest is kept')
    parser.add_argument('--memory-limit', default='1GB',
                        help="DuckDB's memory_limit for the loads "
                        '(default 1GB, as instrument-report)')
    parser.add_argument('--growth', action='store_true',
                        help='only the peak RSS of duckdb load on the '
                        'half set, the set and the 10M set of '
                        'bench_engines.py (generated if missing: about '
                        '4 minutes, 3 GB)')
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    import bench_report
    base, info = bench_report.generate(args.events)
    logs = os.path.join(base, 'logs')
    if args.growth:
        growth(base, info, args.memory_limit)
        return
    res = {}
    for kind in ('python', 'duckdb', 'duckdb -j 1', 'duckdb load'):
        runs = [child(kind, logs, args.memory_limit)
                for _ in range(args.repeat)]
        res[kind] = min(runs, key=lambda r: r['seconds'])
        res[kind]['load'] = _loadavg()
    # the statements written one by one (sql.query records; those the
    # runtime aggregated in sql.agg counters are not in the slow log)
    statements = sum(r['calls'] - r['aggregated']
                     for r in res['python']['profile']['rows'])
    print('set: %s, %d events, %d sql.query statements' % (
        logs, info['events'], statements))
    print('%-12s %8s %12s %12s %8s  %s' % (
        'run', 'seconds', 'per s', 'per CPU s', 'peak MB', 'load'))
    for kind, r in res.items():
        n = info['events'] if kind == 'duckdb load' else statements
        print('%-12s %8.2f %12.0f %12.0f %8.0f  %s' % (
            kind, r['seconds'], n / r['seconds'], n / max(r['cpu'], 1e-3),
            r['rss_mb'], r['load']))
    for kind in ('duckdb', 'duckdb -j 1'):
        same = res['python']['profile'] == res[kind]['profile']
        print('profiles equal (python, %s): %s' % (kind, same))
    py_rate = statements / res['python']['seconds']
    dd_rate = statements / res['duckdb']['seconds']
    print('duckdb digest rate / python digest rate: %.2f' % (
        dd_rate / py_rate))
    print('duckdb load: %.0f events/s (issue 17 full report target: '
          '1,000,000)' % (info['events'] / res['duckdb load']['seconds']))
    measured = bench_report.pt_query_digest(base, logs)
    if measured is None:
        print('pt-query-digest: not installed (Debian: percona-toolkit)')
        return
    pt, pt_cpu = measured
    pt_rate = statements / pt
    print('pt-query-digest: %d statements in %.2f s (%.0f statements/s, '
          '%.0f per CPU s, load %s)' % (statements, pt, pt_rate,
                                         statements / max(pt_cpu, 1e-3),
                                         _loadavg()))
    print('digest rate / pt-query-digest rate: duckdb %.2f, python %.2f '
          '(issue 17 target for the columnar digest: 5)' % (
              dd_rate / pt_rate, py_rate / pt_rate))
    pt_cpu_rate = statements / max(pt_cpu, 1e-3)
    print('per CPU second, rate / pt-query-digest rate: %s' % ', '.join(
        '%s %.2f' % (kind, statements / max(res[kind]['cpu'], 1e-3) /
                     pt_cpu_rate)
        for kind in ('duckdb', 'duckdb -j 1', 'python')))


if __name__ == '__main__':
    main()
