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
"""``bench_call_overhead.py`` from two trees, alternately, in one run.

On a shared machine the figures of one run move with the load; what a
change does is the ratio of the two trees measured back to back.
``python bench/ab_call_overhead.py A B [--pairs N]`` runs ``python
bench/bench_call_overhead.py --calls 20000 --repeat 5`` in tree ``A``
and tree ``B`` (each on ``PYTHONPATH``), alternating which goes first,
``N`` times each, and prints the medians of the runs' medians and
``B/A`` for the calling thread, the writer and their sum (with the sum
as a ratio to the 2 us target), and the load average.  A snapshot of a
branch to compare with: ``git archive main | tar -x -C A``.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

TARGET_NS = 2000
KEYS = (
    'added on the calling thread',
    'writer, per call, batch encoder',
    'calling thread + writer',
)


def run(tree: str, calls: int, repeat: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            'bench/bench_call_overhead.py',
            '--calls',
            str(calls),
            '--repeat',
            str(repeat),
        ],
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {}
    mode = None
    for line in out.splitlines():
        match = re.match(r'(threads|eventlet)', line)
        if match:
            mode = match.group(1)
        for key in KEYS:
            if key in line:
                found[mode, key] = float(line.split(key)[1].split()[0])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('a')
    parser.add_argument('b')
    parser.add_argument('--pairs', type=int, default=4)
    parser.add_argument('--calls', type=int, default=20000)
    parser.add_argument('--repeat', type=int, default=5)
    args = parser.parse_args()
    trees = [os.path.abspath(args.a), os.path.abspath(args.b)]
    runs: dict = {tree: {} for tree in trees}
    start = os.getloadavg()[0]
    for n in range(args.pairs):
        for tree in trees if n % 2 == 0 else trees[::-1]:
            for k, v in run(tree, args.calls, args.repeat).items():
                runs[tree].setdefault(k, []).append(v)
    print(
        'A %s, B %s: %d runs each, alternately; medians of the runs\' '
        'medians, ns of CPU per call; load average %.2f at the start, '
        '%.2f at the end'
        % (trees[0], trees[1], args.pairs, start, os.getloadavg()[0])
    )
    for mode in ('threads', 'eventlet'):
        for key in KEYS:
            a, b = (statistics.median(runs[t][mode, key]) for t in trees)
            extra = ''
            if key == KEYS[-1]:
                extra = '  (target: A %.2fx, B %.2fx)' % (
                    a / TARGET_NS,
                    b / TARGET_NS,
                )
            print(
                '%-8s %-32s A %6.0f  B %6.0f  B/A %.2f%s'
                % (mode, key, a, b, b / a, extra)
            )


if __name__ == '__main__':
    main()
