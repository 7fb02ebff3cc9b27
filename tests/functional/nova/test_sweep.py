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
"""A small real sweep: ``instrument-demo --sweep`` runs the demo at two
loads, then ``instrument-report sweep`` over their output directories,
labelled by their ``run.json``."""

import json
import os
import subprocess
import sys

import fixtures
import testtools

SERVERS = 4
LEVELS = (1, 4)


class SweepDemoTest(testtools.TestCase):
    def _run(self, *args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)
        proc = subprocess.run(
            [sys.executable, '-m'] + list(args),
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        self.assertEqual(
            0,
            proc.returncode,
            '--- stderr\n%s\n--- stdout\n%s'
            % (proc.stderr[-3000:], proc.stdout[-3000:]),
        )
        return proc

    def test_two_demo_runs_swept(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        self._run(
            'instrument_demo',
            '--output',
            tmp,
            '--mode',
            'threads',
            '--servers',
            str(SERVERS),
            '--fail',
            '0',
            '--reschedule',
            '0',
            '--boots-only',
            '--sweep',
            ','.join(str(c) for c in reversed(LEVELS)),
        )
        for level in LEVELS:
            with open(os.path.join(tmp, 'c%d' % level, 'run.json')) as f:
                meta = json.load(f)
            self.assertEqual(
                (SERVERS, level, 'threads'),
                (meta['servers'], meta['concurrency'], meta['mode']),
            )
            self.assertTrue(meta['nova'])
        with open(os.path.join(tmp, 'sweep.json')) as f:
            result = json.load(f)
        self.assertEqual('concurrency', result['key'])
        self.assertEqual(list(LEVELS), [r['load'] for r in result['runs']])
        for run in result['runs']:
            boot = run['operations']['boot']
            self.assertEqual(
                (SERVERS, SERVERS, 1.0),
                (boot['requests'], boot['successful'], boot['success_rate']),
            )
            self.assertGreater(boot['throughput_rps'], 0)
            self.assertGreater(boot['stack_us'].get('scheduler', 0), 0)
            self.assertTrue(run['resources'])
        self.assertIn('boot', result['saturation'])
        with open(os.path.join(tmp, 'sweep.html')) as f:
            page = f.read()
        self.assertIn('<svg', page)
        self.assertIn('mean time per finished boot', page)
        with open(os.path.join(tmp, 'sweep.txt')) as f:
            self.assertIn('# sweep of 2 runs by concurrency', f.read())

    def test_a_sweep_needs_two_levels(self):
        proc = subprocess.run(
            [sys.executable, '-m', 'instrument_demo', '--sweep', '4'],
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(2, proc.returncode)
        self.assertIn('--sweep: two levels or more', proc.stderr)
