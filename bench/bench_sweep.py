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
"""What a sweep costs beside the analysis of its runs.

Generates ``--runs`` seeded synthetic clouds (``tests/synthetic``) of
``--requests`` requests each, arrivals doubling from one run to the
next, analyses each (``pipeline.analyse``, one worker: the baseline of
this run on this machine) and writes its JSON report, then times the
sweep of them: from the reports read back (what ``instrument-report
sweep`` does with the demo's output directories) and its text, JSON
and HTML forms.  Prints each time and the sweep's as a share of the
analyses'; asserts nothing.  Usage: ``python bench/bench_sweep.py
[--runs N] [--requests N]``.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from instrument.analysis import pipeline  # noqa: E402
from instrument.analysis import sweep  # noqa: E402
from instrument.analysis.render import json as report_json  # noqa: E402
from instrument.analysis.render import sweep as sweep_html  # noqa: E402
from tests import synthetic  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--runs', type=int, default=4)
    parser.add_argument('--requests', type=int, default=400)
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix='instrument-bench-sweep-')
    try:
        paths = []
        analyse_s = 0.0
        for i in range(args.runs):
            where = os.path.join(top, 'c%d' % i)
            synthetic.Cloud(seed=11).generate(
                where, requests=args.requests, rate=2.0 * 2**i, phases=1
            )
            t0 = time.perf_counter()
            report = pipeline.analyse([where], pipeline.Options(jobs=1))
            took = time.perf_counter() - t0
            analyse_s += took
            path = os.path.join(top, 'c%d.json' % i)
            report_json.write(report, path)
            paths.append(path)
            print(
                'analyse run %d: %d requests, %.2f s, report %.1f MB'
                % (
                    i,
                    len(report['requests']),
                    took,
                    os.path.getsize(path) / 1e6,
                )
            )
        t0 = time.perf_counter()
        runs = [
            (p, {'concurrency': str(2**i)}, report_json.read(p))
            for i, p in enumerate(paths)
        ]
        read_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = sweep.sweep(runs)
        sweep_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sweep.render(result)
        report_json.dumps(result)
        sweep_html.render(result)
        forms_s = time.perf_counter() - t0
        total = read_s + sweep_s + forms_s
        print(
            'analyses (baseline): %.2f s for %d runs' % (analyse_s, args.runs)
        )
        print(
            'sweep: read reports %.3f s, figures %.3f s, text+JSON+HTML '
            '%.3f s; total %.3f s = %.1f %% of the analyses'
            % (read_s, sweep_s, forms_s, total, 100 * total / analyse_s)
        )
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
