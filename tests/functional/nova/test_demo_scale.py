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
"""The demo's scale options on real nova, each run in a child process:
``--sweep schedulers=1,2`` (two scheduler services on one topic, the
conductor's calls to each in turn, then the sweep of the two runs by
``schedulers``) and ``--waves`` (each wave booted when the one before
is all ACTIVE or ERROR)."""

import json
import os
import subprocess
import sys

import fixtures
import testtools


def _records(spans_dir: str):
    for name in os.listdir(spans_dir):
        with open(os.path.join(spans_dir, name)) as f:
            for line in f:
                yield json.loads(line)


class DemoScaleTest(testtools.TestCase):
    def _demo(
        self, *args: str, status: int = 0
    ) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)
        proc = subprocess.run(
            [
                sys.executable,
                '-m',
                'instrument_demo',
                '--mode',
                'threads',
                '--fail',
                '0',
                '--reschedule',
                '0',
                '--boots-only',
            ]
            + list(args),
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        self.assertEqual(
            status,
            proc.returncode,
            '--- stderr\n%s\n--- stdout\n%s'
            % (proc.stderr[-3000:], proc.stdout[-3000:]),
        )
        return proc

    def test_a_sweep_of_schedulers(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        self._demo(
            '--output',
            tmp,
            '--servers',
            '4',
            '--concurrency',
            '4',
            '--computes',
            '2',
            '--sweep',
            'schedulers=2,1',
        )
        selected_by = {}
        for n in (1, 2):
            run = os.path.join(tmp, 'schedulers%d' % n)
            with open(os.path.join(run, 'run.json')) as f:
                self.assertEqual(n, json.load(f)['schedulers'])
            selected_by[n] = sorted(
                r['host']
                for r in _records(os.path.join(run, 'spans'))
                if r['ph'] == 'X'
                and r['ev'] == 'scheduler.select_destinations'
            )
        self.assertEqual(['scheduler'] * 4, selected_by[1])
        # the conductor's four calls, two to each scheduler in turn
        self.assertEqual(['sched2'] * 2 + ['scheduler'] * 2, selected_by[2])
        with open(os.path.join(tmp, 'sweep.json')) as f:
            result = json.load(f)
        self.assertEqual(
            ('schedulers', False, [1.0, 2.0]),
            (
                result['key'],
                result['categorical'],
                [r['load'] for r in result['runs']],
            ),
        )
        for run in result['runs']:
            boot = run['operations']['boot']
            self.assertEqual((4, 4), (boot['requests'], boot['successful']))
        with open(os.path.join(tmp, 'sweep.txt')) as f:
            self.assertIn('# sweep of 2 runs by schedulers', f.read())

    def test_boots_in_waves(self):
        out = self.useFixture(fixtures.TempDir()).path
        proc = self._demo(
            '--output',
            out,
            '--waves',
            '2',
            '--wave-count',
            '2',
            '--computes',
            '2',
        )
        self.assertIn('4 servers, 2 at a time in 2 waves of 2', proc.stdout)
        self.assertIn('wave 2: 2 servers in ', proc.stdout)
        with open(os.path.join(out, 'run.json')) as f:
            run = json.load(f)
        self.assertEqual(
            (4, 2, 2, 2),
            (
                run['servers'],
                run['concurrency'],
                run['waves'],
                run['wave_count'],
            ),
        )
        with open(os.path.join(out, 'servers.json')) as f:
            truth = json.load(f)
        first, second = truth['waves']
        self.assertEqual(
            (1, 2, 2, 2),
            (
                first['wave'],
                second['wave'],
                first['servers'],
                second['servers'],
            ),
        )
        self.assertEqual({'ACTIVE': 2}, second['counts'])
        # a wave starts once every server of the one before is done
        names = {s['name']: s for s in truth['servers']}
        self.assertEqual(['demo-%04d' % n for n in range(4)], sorted(names))
        wave1 = [names['demo-0000'], names['demo-0001']]
        wave2 = [names['demo-0002'], names['demo-0003']]
        self.assertLessEqual(
            max(s['finished'] for s in wave1), min(s['started'] for s in wave2)
        )
        self.assertLessEqual(first['finished'], second['started'])
        # and so the report has it: no boot of the second wave began
        # before the last of the first ended
        with open(os.path.join(out, 'report.json')) as f:
            report = json.load(f)
        ids = {s['id']: s['name'] for s in truth['servers']}
        boots = {
            ids[r['instances'][0]['inst']]: r
            for r in report['requests']
            if r['kind'] == 'boot'
        }
        self.assertEqual(4, len(boots))
        self.assertLessEqual(
            max(boots[s['name']]['end_us'] for s in wave1),
            min(boots[s['name']]['start_us'] for s in wave2),
        )

    def test_bad_wave_options(self):
        proc = self._demo('--waves', '2', '--servers', '5', status=1)
        self.assertIn(
            '--servers 5 is not --waves 2 x --wave-count 3', proc.stderr
        )
        proc = self._demo('--waves', '0', status=1)
        self.assertIn(
            '--waves and --wave-count must be at least 1', proc.stderr
        )
