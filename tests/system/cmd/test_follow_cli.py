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
"""``instrument-report follow`` run as an operator runs it: the console
script in a subprocess, serving ``/metrics`` or writing a textfile
while span files grow, stopped by SIGTERM (its exit status, no
traceback)."""

import gzip
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import fixtures
from prometheus_client import parser
import testtools

SCRIPT = os.path.join(os.path.dirname(sys.executable), 'instrument-report')
RUN = os.path.join(
    os.path.dirname(__file__),
    os.pardir,
    os.pardir,
    'data',
    'fidelity',
    'demo-threads.jsonl.gz',
)


INJECTED = os.path.join(
    os.path.dirname(__file__),
    os.pardir,
    os.pardir,
    'data',
    'findings',
    'demo-inject-db-pool.jsonl.gz',
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _samples(text: str, name: str) -> list:
    return [
        s
        for f in parser.text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    ]


class FollowCliTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.assertTrue(
            os.access(SCRIPT, os.X_OK),
            'the console script is not installed: %s' % SCRIPT,
        )
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.spans = os.path.join(self.dir, 'spans')
        os.makedirs(self.spans)
        with gzip.open(RUN, 'rb') as src:
            self.lines = src.read().splitlines(keepends=True)

    def start(self, *args) -> subprocess.Popen:
        proc = subprocess.Popen(
            [SCRIPT, 'follow', '--interval', '0.2']
            + list(args)
            + [self.spans],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.dir,
        )
        self.addCleanup(self._stop, proc)
        return proc

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)

    def append(self, lines: list) -> None:
        with open(os.path.join(self.spans, 'demo.jsonl'), 'ab') as out:
            out.writelines(lines)

    def until(self, check, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            self.assertLess(time.monotonic(), deadline, what)
            time.sleep(0.1)

    def test_once(self):
        self.append(self.lines)
        proc = subprocess.run(
            [SCRIPT, 'follow', '--once', self.spans],
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)
        boots = [
            s
            for s in _samples(
                proc.stdout, 'instrument_operation_requests_total'
            )
            if s.labels['operation'] == 'boot'
        ]
        self.assertEqual(4, sum(s.value for s in boots))

    def test_findings_once_and_while_the_files_grow(self):
        # the demo's run with --inject db-pool: the finding names
        # [api_database] max_pool_size of the conductor, as the batch
        # report does; with --findings-window 0 there is none
        with gzip.open(INJECTED, 'rb') as src:
            lines = src.read().splitlines(keepends=True)
        self.append(lines)
        wanted = {
            'rule': 'db_pool_exhaustion',
            'section': 'api_database',
            'option': 'max_pool_size',
            'host': 'fake-mini',
            'service': 'conductor',
        }

        def held(text: str) -> bool:
            return any(
                s.labels == wanted and s.value == 1
                for s in _samples(text, 'instrument_finding')
            )

        once = subprocess.run(
            [SCRIPT, 'follow', '--once', self.spans],
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(0, once.returncode, once.stderr)
        self.assertTrue(held(once.stdout), once.stdout)
        off = subprocess.run(
            [SCRIPT, 'follow', '--once', '--findings-window', '0', self.spans],
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(0, off.returncode, off.stderr)
        self.assertEqual([], _samples(off.stdout, 'instrument_finding'))
        # live: the file written in two halves while it runs
        os.unlink(os.path.join(self.spans, 'demo.jsonl'))
        prom = os.path.join(self.dir, 'findings.prom')
        proc = self.start(
            '--textfile',
            prom,
            '--lag',
            '0',
            '--horizon',
            '0.5',
            '--findings-every',
            '0',
        )
        half = len(lines) // 2
        self.append(lines[:half])
        self.append(lines[half:])

        def text() -> str:
            if not os.path.exists(prom):
                return ''
            with open(prom, encoding='utf-8') as src:
                return src.read()

        self.until(lambda: held(text()), 'the finding exported')
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        self.assertEqual(0, proc.returncode, err)

    def test_textfile_while_the_files_grow_then_sigterm(self):
        prom = os.path.join(self.dir, 'follow.prom')
        proc = self.start('--textfile', prom, '--lag', '0', '--horizon', '0.5')
        half = len(self.lines) // 2
        self.append(self.lines[:half])

        def lines_read() -> float:
            if not os.path.exists(prom):
                return 0
            with open(prom, encoding='utf-8') as src:
                got = _samples(src.read(), 'instrument_follow_lines_total')
            return got[0].value if got else 0

        self.until(lambda: lines_read() == half, 'the first half read')
        self.append(self.lines[half:])
        self.until(
            lambda: lines_read() == len(self.lines), 'the second half read'
        )
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        self.assertEqual(0, proc.returncode, err)
        self.assertNotIn('Traceback', err)

    def test_serves_metrics(self):
        port = _free_port()
        proc = self.start('--port', str(port))
        self.append(self.lines)

        def scraped() -> str:
            try:
                with urllib.request.urlopen(  # noqa: S310 - local
                    'http://127.0.0.1:%d/metrics' % port, timeout=5
                ) as resp:
                    return resp.read().decode()
            except (OSError, urllib.error.URLError):
                return ''

        self.until(
            lambda: (
                'instrument_follow_lines_total %d' % len(self.lines)
                in scraped()
            ),
            'the lines served',
        )
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        self.assertEqual(0, proc.returncode, err)
