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
"""Cost of the live findings of ``instrument-report follow``.

Generates a seeded synthetic cloud (``tests/synthetic``; ``--requests``
requests at ``--rate`` per second of input time: by default longer than
the findings window), then, each in a fresh subprocess:

* ``follow --once`` with the findings off (``--findings-window 0``) and
  on (600 s): CPU seconds and peak RSS, and their ratio;
* the same read in ``--steps`` polls with the rules run after every
  poll (``--findings-every 0``, the worst case): CPU per rule run;
* one rule run (``livefindings.Window.evaluate``: merging the window's
  slices on copies, then the rules) on the window at the end: its CPU
  milliseconds, the requests and slices it held.

Prints numbers and ratios; asserts nothing.  Usage:
``python bench/bench_follow_findings.py [--requests N] [--rate R]``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import json, os, resource, sys, time
from instrument.analysis import follow, livefindings
args = json.loads(sys.argv[1])
opts = follow.Options(
    findings_window_s=args['window'],
    findings_every_s=0,
)
cpu0 = time.process_time()
evals = 0
if args['steps'] <= 1:
    f = follow.once([args['dir']], opts)
else:
    # the files grown in steps: each poll reads one more part
    src = args['dir']
    names = sorted(os.listdir(src))
    data = {n: open(os.path.join(src, n), 'rb').read().splitlines(True)
            for n in names}
    dst = args['out']
    os.makedirs(dst, exist_ok=True)
    f = follow.Follower([dst], opts)
    for k in range(args['steps']):
        for n, lines in data.items():
            a = len(lines) * k // args['steps']
            b = len(lines) * (k + 1) // args['steps']
            with open(os.path.join(dst, n), 'ab') as out:
                out.writelines(lines[a:b])
        f.poll()
    f.finish()
cpu = time.process_time() - cpu0
w = f.findings
one = None
if w is not None:
    t0 = time.process_time()
    w.evaluate()
    one = time.process_time() - t0
print(json.dumps({
    'cpu_s': cpu,
    'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    'evaluations': w.evaluations if w else 0,
    'one_eval_ms': None if one is None else one * 1e3,
    'window_requests': len(w.requests()) if w else 0,
    'slices': len(w.slices) if w else 0,
    'findings': len(w.found) if w else 0,
    'lines': f.reader.lines,
}))
'''


def child(directory: str, window: float, steps: int, out: str) -> dict:
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
    proc = subprocess.run(
        [
            sys.executable,
            '-c',
            CHILD,
            json.dumps(
                {
                    'dir': directory,
                    'window': window,
                    'steps': steps,
                    'out': out,
                }
            ),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--requests', type=int, default=3000)
    parser.add_argument('--rate', type=float, default=2.0)
    parser.add_argument('--steps', type=int, default=40)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from tests import synthetic

    tmp = tempfile.mkdtemp(prefix='bench-follow-findings-')
    src = os.path.join(tmp, 'spans')
    synthetic.generate(src, seed=3, requests=args.requests, rate=args.rate)
    print(
        'synthetic cloud: %d requests at %.1f/s (%.0f s of input time)'
        % (args.requests, args.rate, args.requests / args.rate)
    )
    off = child(src, 0, 1, '')
    on = child(src, 600, 1, '')
    print(
        'follow --once, findings off: %.2f CPU s, %.0f MB peak RSS, '
        '%d lines' % (off['cpu_s'], off['rss_mb'], off['lines'])
    )
    print(
        'follow --once, findings on (600 s): %.2f CPU s, %.0f MB peak '
        'RSS; %d requests in the window, %d slices, %d findings'
        % (
            on['cpu_s'],
            on['rss_mb'],
            on['window_requests'],
            on['slices'],
            on['findings'],
        )
    )
    print(
        'ratio on/off: CPU %.2fx, peak RSS %.2fx'
        % (on['cpu_s'] / off['cpu_s'], on['rss_mb'] / off['rss_mb'])
    )
    print('one rule run on the final window: %.1f CPU ms' % on['one_eval_ms'])
    live_off = child(src, 0, args.steps, os.path.join(tmp, 'live-off'))
    live = child(src, 600, args.steps, os.path.join(tmp, 'live-on'))
    extra = live['cpu_s'] - live_off['cpu_s']
    print(
        'read in %d polls, rules after every poll: %.2f CPU s (off: '
        '%.2f): %d rule runs, %.1f CPU ms each (%.2fx the polls '
        'without findings); peak RSS %.0f MB (off: %.0f)'
        % (
            args.steps,
            live['cpu_s'],
            live_off['cpu_s'],
            live['evaluations'],
            extra / max(live['evaluations'], 1) * 1e3,
            live['cpu_s'] / live_off['cpu_s'],
            live['rss_mb'],
            live_off['rss_mb'],
        )
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
