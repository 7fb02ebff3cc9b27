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
"""``instrument-report points`` against the installed nova, in a process
of its own as an operator runs it: every point of the release resolved
(none missing: ``tests.releases`` says which a release may miss, none
so far), exit status 0; and a point taken away from nova in that
process makes it CRITICAL (2), the point named in the summary line."""

import json
import os
import subprocess
import sys
import textwrap

import fixtures
import testtools

from instrument.targets import base as targets_base
from tests import releases

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
)

# A point of every release (tests.releases): nova-api's create.
TAKEN = 'nova.compute.api:API.create'


class PointsCommandTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.conf = os.path.join(self.tmp, 'nova.conf')
        with open(self.conf, 'w', encoding='utf-8') as f:
            f.write(
                '[instrument]\nenabled = True\noutput_dir = %s\n'
                'metrics_dir = %s\n'
                % (
                    os.path.join(self.tmp, 'spans'),
                    os.path.join(self.tmp, 'metrics'),
                )
            )

    def run_python(self, *args) -> subprocess.CompletedProcess:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([ROOT] + sys.path),
            PYTHONWARNINGS='ignore',
        )
        return subprocess.run(
            [sys.executable] + list(args),
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
            cwd=self.tmp,
        )

    def test_every_point_of_the_installed_release_resolves(self):
        result = self.run_python(
            '-m',
            'instrument.cmd.report',
            'points',
            '--config-file',
            self.conf,
            '--json',
        )
        doc = json.loads(result.stdout)
        found = targets_base.distribution_version('nova')
        release = releases.release_of(found)
        self.assertIsNotNone(release, found)
        missing = sorted(
            p['point']
            for p in doc['points']
            if p['status'] in ('missing', 'failed')
        )
        self.assertEqual(sorted(release.missing), missing, doc['summary'])
        self.assertEqual(0, result.returncode, doc['summary'])
        self.assertEqual('OK', doc['status'])
        self.assertEqual(found, doc['releases']['nova'])
        self.assertEqual('surveyed', doc['surveyed']['nova %s' % found])
        self.assertEqual(0, doc['counts']['missing'])
        # the nova target's points are there, patched
        nova = [p for p in doc['points'] if p['target'] == 'nova']
        self.assertGreater(len(nova), 40)
        self.assertEqual({'patched'}, {p['status'] for p in nova})
        self.assertIn(TAKEN, {p['point'] for p in nova})
        self.assertTrue(
            doc['summary'].startswith('INSTRUMENT POINTS OK - '),
            doc['summary'],
        )
        self.assertEqual('installed', doc['targets']['nova'])

    def test_a_point_taken_away_is_critical_and_named(self):
        script = os.path.join(self.tmp, 'taken.py')
        module, attr = TAKEN.split(':')
        cls, method = attr.split('.')
        with open(script, 'w', encoding='utf-8') as f:
            f.write(
                textwrap.dedent(
                    '''\
                import importlib
                import sys

                from instrument.cmd import points

                owner = getattr(importlib.import_module(%r), %r)
                delattr(owner, %r)
                sys.exit(points.main(sys.argv[1:]))
                '''
                    % (module, cls, method)
                )
            )
        result = self.run_python(script, '--config-file', self.conf)
        self.assertEqual(2, result.returncode, result.stdout[:2000])
        first = result.stdout.splitlines()[0]
        self.assertTrue(
            first.startswith(
                'INSTRUMENT POINTS CRITICAL - 1 point missing: %s (nova '
                % TAKEN
            ),
            first,
        )
        self.assertIn('missing=1', first)
        self.assertIn('%s has no %s' % (module, attr), result.stdout)
