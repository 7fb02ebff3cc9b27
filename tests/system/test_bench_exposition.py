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
"""``bench/bench_exposition.py`` at a tiny size: it runs, prints every
design's figures, and its correctness columns say what the design
table of doc/source/metrics.rst says (no timing is asserted)."""

import json
import os
import subprocess
import sys

import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
BENCH = os.path.join(ROOT, 'bench', 'bench_exposition.py')
DESIGNS = ['multiproc', 'statefile', 'textfile', 'textfile+pid']
WHEN = ['phase 1', 'exit, kill, respawn', 'phase 2', 'all exited']


def run(*args: str) -> str:
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [ROOT] + [p for p in [env.get('PYTHONPATH')] if p]
    )
    return subprocess.run(
        [sys.executable, BENCH, '--workers', '2', '--records', '200']
        + ['--flush-every', '100', '--scrapes', '1']
        + list(args),
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    ).stdout


def exact(compared: dict) -> bool:
    return compared['lost'] == 0 and compared['over'] == 0


class BenchExpositionTest(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.results = {r['design']: r for r in json.loads(run('--json'))}

    def test_shape(self):
        self.assertEqual(DESIGNS, list(self.results))
        for r in self.results.values():
            self.assertEqual(WHEN, [s['when'] for s in r['scrapes']])
            # two workers, one exited and one killed, both replaced
            self.assertEqual(4, r['processes'])
            self.assertGreater(r['fold_ns_per_record'], 0)
            self.assertGreater(r['scrape_bytes'], 0)
            for s in r['scrapes']:
                self.assertGreater(s['label_sets'], 0)
                self.assertEqual(0, s['repeated'])
        # the killed worker folded 150 records (a flush every 100),
        # then was killed: 50 after its last flush
        # (prometheus_client's values are on disk at once: none)
        for design, r in self.results.items():
            self.assertEqual(
                0 if design == 'multiproc' else 50, r['lost_on_kill']
            )

    def test_statefile_sums_what_was_flushed(self):
        r = self.results['statefile']
        for s in r['scrapes']:
            self.assertTrue(exact(s['flushed']), s)
        final = r['scrapes'][-1]['recorded']
        # only what the killed worker had not flushed is missing
        self.assertEqual(r['lost_on_kill'], final['true'] - final['scraped'])
        self.assertEqual(0, r['went_down'])
        self.assertEqual(0, r['scrapes'][-1]['duplicates_dropped'])

    def test_multiproc_loses_nothing(self):
        r = self.results['multiproc']
        for s in r['scrapes']:
            self.assertTrue(exact(s['recorded']), s)
            self.assertTrue(exact(s['flushed']), s)
        self.assertEqual(0, r['went_down'])
        # the same label sets as the chosen design's exposition
        self.assertEqual(
            self.results['statefile']['scrapes'][-1]['label_sets'],
            r['scrapes'][-1]['label_sets'],
        )

    def test_textfile_drops_duplicates(self):
        r = self.results['textfile']
        final = r['scrapes'][-1]
        self.assertGreater(final['duplicates_dropped'], 0)
        self.assertGreater(final['flushed']['lost'], 0)
        self.assertLess(final['flushed']['scraped'], final['flushed']['true'])

    def test_textfile_pid_sums_with_more_series(self):
        r = self.results['textfile+pid']
        for s in r['scrapes']:
            self.assertTrue(exact(s['flushed']), s)
        self.assertGreater(
            r['scrapes'][-1]['label_sets'],
            2 * self.results['statefile']['scrapes'][-1]['label_sets'],
        )

    def test_table(self):
        text = run()
        for design in DESIGNS:
            self.assertIn('\n%s ' % design, text)
        self.assertIn('ratios to statefile', text)
        self.assertIn('all exited', text)
        self.assertIn('share of a core', text)
