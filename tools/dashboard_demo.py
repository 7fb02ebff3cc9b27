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
"""The dashboard's panels from a real run: the demo under a real
Prometheus, then ``tools/render_dashboard.py``.

In ``WORK`` (``--work``, default a new temporary directory): a
Prometheus (Debian's ``prometheus``) scraping every ``--scrape``
seconds ``instrument-metrics serve WORK/metrics`` and
``instrument-report follow WORK/demo/spans``, and ``instrument-demo
-o WORK/demo --metrics-dir WORK/metrics`` with the arguments after
``--``; once the demo is done and follow has finalised its last
requests, every panel of the dashboard is rendered over the run into
``--output``.  ``tox -e dashboard-demo`` runs it (nova, the demo and
matplotlib installed); doc/source/images/dashboard.png is::

    python tools/dashboard_demo.py -o doc/source/images/dashboard.png \\
        -- --servers 12 --computes 4 --inject network-fail \\
        --inject db-pool --inject audit-collision --periodic-interval 5

Every process it starts listens on 127.0.0.1, on free ports, and is
ended when it exits.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import render_dashboard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def prometheus_config(path: str, scrape: float, targets: dict) -> None:
    """A prometheus.yml scraping each ``job: host:port`` (JSON is
    YAML)."""
    doc = {
        'global': {
            'scrape_interval': '%gs' % scrape,
            'evaluation_interval': '%gs' % scrape,
        },
        'scrape_configs': [
            {'job_name': job, 'static_configs': [{'targets': [target]}]}
            for job, target in sorted(targets.items())
        ],
    }
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(doc, f, indent=2)


def instant(url: str, expr: str) -> list:
    params = urllib.parse.urlencode({'query': expr})
    with urllib.request.urlopen(  # noqa: S310 (our own Prometheus)
        '%s/api/v1/query?%s' % (url, params), timeout=30
    ) as resp:
        return json.load(resp)['data']['result']


def version(tool: str) -> str:
    """``prometheus --version``'s number."""
    out = subprocess.run(  # noqa: S603 (the prometheus found)
        [tool, '--version'], capture_output=True, text=True, check=False
    )
    words = (out.stdout + out.stderr).split()
    return words[2] if len(words) > 2 else '?'


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, KeyError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit('dashboard_demo.py: %s: timed out' % what)
        time.sleep(0.5)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if '--' in argv:
        at = argv.index('--')
        argv, demo_args = argv[:at], argv[at + 1 :]
    else:
        demo_args = []
    parser = argparse.ArgumentParser(
        prog='dashboard_demo.py',
        description=__doc__.split('\n\n')[0].replace('\n', ' '),
    )
    parser.add_argument('-o', '--output', required=True, help='.png or .svg')
    parser.add_argument('--work', help='default: a new temporary directory')
    parser.add_argument(
        '--scrape',
        type=float,
        default=2.0,
        help='scrape interval, seconds (default 2)',
    )
    parser.add_argument(
        '--rate-interval',
        default='20s',
        help='$__rate_interval (default 20s)',
    )
    parser.add_argument(
        '--settle',
        type=float,
        default=12.0,
        help='seconds scraped after the demo (default 12)',
    )
    parser.add_argument('--prometheus', default='prometheus')
    parser.add_argument('--dpi', type=int, default=80)
    args = parser.parse_args(argv)
    tool = shutil.which(args.prometheus)
    if tool is None:
        raise SystemExit('dashboard_demo.py: no prometheus (apt-get install)')
    work = args.work or tempfile.mkdtemp(prefix='dashboard-demo-')
    os.makedirs(work, exist_ok=True)
    metrics_dir = os.path.join(work, 'metrics')
    demo_dir = os.path.join(work, 'demo')
    spans = os.path.join(demo_dir, 'spans')
    os.makedirs(metrics_dir, exist_ok=True)
    ports = {name: free_port() for name in ('prometheus', 'metrics', 'follow')}
    url = 'http://127.0.0.1:%d' % ports['prometheus']
    config = os.path.join(work, 'prometheus.yml')
    prometheus_config(
        config,
        args.scrape,
        {
            'instrument': '127.0.0.1:%d' % ports['metrics'],
            'instrument-follow': '127.0.0.1:%d' % ports['follow'],
        },
    )
    python = sys.executable
    env = dict(os.environ)
    # this checkout and its demo first
    env['PYTHONPATH'] = os.pathsep.join(
        [ROOT, os.path.join(ROOT, 'demo')]
        + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else [])
    )
    procs = []

    def start(name, cmd):
        log = open(os.path.join(work, name + '.log'), 'w')  # noqa: SIM115
        print('dashboard_demo.py: %s' % ' '.join(cmd), file=sys.stderr)
        proc = subprocess.Popen(  # noqa: S603 (our own commands)
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work
        )
        procs.append((proc, log))
        return proc

    try:
        start(
            'prometheus',
            [
                tool,
                '--config.file',
                config,
                '--storage.tsdb.path',
                os.path.join(work, 'tsdb'),
                '--web.listen-address',
                '127.0.0.1:%d' % ports['prometheus'],
            ],
        )
        start(
            'metrics',
            [
                python,
                '-m',
                'instrument.cmd.metrics',
                'serve',
                '--port',
                str(ports['metrics']),
                metrics_dir,
            ],
        )
        wait_for(
            'prometheus is up',
            lambda: instant(url, 'up{job="instrument"} == 1'),
            60,
        )
        begin = time.time()
        demo = start(
            'demo',
            [python, '-m', 'instrument_demo', '-o', demo_dir]
            + ['--metrics-dir', metrics_dir]
            + demo_args,
        )
        wait_for('the demo\'s span directory', lambda: os.listdir(spans), 300)
        start(
            'follow',
            [
                python,
                '-m',
                'instrument.cmd.report',
                'follow',
                '--port',
                str(ports['follow']),
                '--interval',
                '1',
                '--lag',
                '2',
                # the demo's requests end within seconds; after its end
                # nothing moves the watermark on
                '--horizon',
                '5',
                spans,
            ],
        )
        status = demo.wait()
        if status:
            raise SystemExit(
                'dashboard_demo.py: the demo exited %d (%s)'
                % (status, os.path.join(work, 'demo.log'))
            )
        # the last scrapes: follow's final requests, the rates' tails
        time.sleep(args.settle)
        end = time.time()
        with open(
            os.path.join(ROOT, 'etc', 'grafana', 'instrument-dashboard.json'),
            encoding='utf-8',
        ) as f:
            dashboard = json.load(f)
        panels = render_dashboard.collect(
            url,
            dashboard,
            begin,
            end,
            max(1.0, args.scrape),
            args.rate_interval,
        )
        render_dashboard.draw(
            panels,
            args.output,
            dashboard['title'],
            begin,
            end,
            args.dpi,
            'instrument-demo %s under Prometheus %s, scraped every %gs; '
            '$__rate_interval = %s'
            % (
                ' '.join(demo_args),
                version(tool),
                args.scrape,
                args.rate_interval,
            ),
        )
        for row in render_dashboard.summary(panels):
            print(
                '%-62s %3d series %5d points'
                % (row['title'][:62], row['series'], row['points'])
            )
        for name in render_dashboard.empty(panels):
            print('no data: %s' % name, file=sys.stderr)
        print(
            '%s (%.0f s of the run; %s)' % (args.output, end - begin, work),
            file=sys.stderr,
        )
    finally:
        for proc, log in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
