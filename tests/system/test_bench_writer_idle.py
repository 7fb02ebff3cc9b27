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
"""``bench/bench_writer_idle.py`` at a tiny size: it runs this tree
against a baseline tree (this one again: the comparison's plumbing, not
a figure), reads the writer thread's CPU clock and counts what the
children wrote (no timing is asserted)."""

import json
import os
import subprocess
import sys

import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
BENCH = os.path.join(ROOT, 'bench', 'bench_writer_idle.py')


class BenchWriterIdleTest(testtools.TestCase):
    def test_idle_and_trickle_against_a_baseline(self):
        out = subprocess.run(
            [sys.executable, BENCH, '--seconds', '1', '--rounds', '1']
            + ['--modes', 'idle,trickle', '--rate', '20']
            + ['--baseline', ROOT, '--json'],
            check=True,
            capture_output=True,
            text=True,
            timeout=240,
        ).stdout
        doc = json.loads(out)
        self.assertEqual(2, len(doc['load']))
        idle, trickle = doc['results']
        self.assertEqual(('idle', 'trickle'), (idle['mode'], trickle['mode']))
        for row in (idle, trickle):
            for tree in ('baseline', 'this'):
                fig = row[tree]
                # the writer woke, drained and sampled: some CPU
                self.assertGreater(fig['writer_us_per_s'], 0)
                # every thread's CPU, the writer's among them (read a
                # moment apart)
                self.assertGreater(
                    fig['process_us_per_s'], 0.9 * fig['writer_us_per_s']
                )
            self.assertGreater(row['writer_ratio'], 0)
        # 20 spans a second for about a second are written; idle, at
        # most a sample or two
        for tree in ('baseline', 'this'):
            self.assertGreater(trickle[tree]['records_per_s'], 10)
            self.assertLess(idle[tree]['records_per_s'], 5)
