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
"""Instructions per one-statement transaction, counted by callgrind.

``python bench/callgrind_sql.py VARIANT`` runs, for each of two counts
of transactions (200 and 1,200 by default), one process under
``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``) that makes
``bench_sql.py``'s sqlite engine, sets the variant up, warms up with
100 one-statement transactions (``engine.begin()``, one cached
SELECT), runs the count, and for ``instrument-file`` drains the
buffer (the writer's work is counted: the whole process); it prints
the difference of the two totals over the difference of the counts.
The machine's load does not change the counts.

Variants: ``none`` (no listener), ``instrument-file`` (this library,
``timing.install`` with the file sink and ``flush_interval`` 60, so
that the writer runs at the drain only), ``osprofiler``
(``add_tracing`` on the engine, notifier discarding; osprofiler must
be importable).  ``--child VARIANT N`` is the process run under
callgrind.
"""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
COUNTS = (200, 1200)
WARMUP = 100


def child(variant: str, n: int) -> None:
    sys.path.insert(0, HERE)
    import bench_sql

    from instrument.runtime import process
    from instrument.sinks import file as file_sink

    engine, stmt = bench_sql._make_engine('sqlite://')
    lib = None
    if variant == 'instrument-file':
        tmpdir = tempfile.mkdtemp(prefix='callgrind-sql-')
        lib = bench_sql.Instrument(
            file_sink.FileSink(
                bench_sql._conf(output_dir=tmpdir),
                process.ProcessIdentity.create('bench', 'benchhost'),
            ),
            flush_interval=60.0,
        )
        lib.on()
    elif variant == 'osprofiler':
        bench_sql._osprofiler(engine)
    elif variant != 'none':
        raise SystemExit('unknown variant %r' % variant)
    for _ in range(WARMUP):
        with engine.begin() as conn:
            conn.execute(stmt, {'id': 1}).fetchall()
    if lib is not None:
        lib.settle()
    for _ in range(n):
        with engine.begin() as conn:
            conn.execute(stmt, {'id': 1}).fetchall()
    if lib is not None:
        lib.settle()
    os._exit(0)


def count(variant: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'callgrind.out')
        env = dict(os.environ, PYTHONHASHSEED='0')
        proc = subprocess.run(
            [
                'valgrind',
                '--tool=callgrind',
                '--callgrind-out-file=' + out,
                sys.executable,
                os.path.abspath(__file__),
                '--child',
                variant,
                str(n),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        match = re.search(r'Collected : (\d+)', proc.stderr)
        if proc.returncode or match is None:
            raise SystemExit(proc.stderr[-2000:])
        return int(match.group(1))


def main(argv) -> int:
    if argv[:1] == ['--child']:
        child(argv[1], int(argv[2]))
        return 0
    for variant in argv or ['none', 'instrument-file']:
        low, high = (count(variant, n) for n in COUNTS)
        per = (high - low) / (COUNTS[1] - COUNTS[0])
        print('%-16s %10.1fk instr/txn' % (variant, per / 1000), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
