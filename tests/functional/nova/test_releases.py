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
"""The installed nova release is what ``targets.nova.RELEASES`` (and so
README.rst's support matrix) says: run in its mode, every point patched
(none missing or failed), moved code patched where the entry says, and
``process.start`` naming the release."""

from instrument import patcher as patcher_mod
from instrument import runtime
from instrument.targets import base as targets_base
from instrument.targets import nova as nova_target
from instrument import threads
from tests.functional.nova import base


class ReleaseTest(base.InstrumentedCloud):

    def test_release_matches_the_support_matrix(self):
        found = targets_base.distribution_version('nova')
        release = nova_target.release_of(found)
        self.assertIsNotNone(release, 'nova %s is not in RELEASES' % found)
        self.assertEqual(release.version, found,
                         'RELEASES names another point release')
        mode = 'eventlet' if threads.eventlet_patched() else 'threads'
        self.assertIn(mode, release.modes)
        # A boot imports every module the points name.
        server = self.boot()
        self.spans(until=lambda s: s.done('compute.build', inst=server['id']))
        active = runtime.active()
        banner = active.banner()
        # A point added to the targets must be found in every release
        # (or get an alternative, or be named in the release's missing).
        self.assertEqual(sorted(release.missing),
                         sorted(banner[patcher_mod.MISSING]))
        self.assertEqual([], banner[patcher_mod.FAILED])
        for point, place in release.used.items():
            self.assertEqual(place, active.point_state(point).used, point)
        # The span files name the release of the process that wrote them.
        spans = self.spans()
        starts = [r for r in spans.records if r['ev'] == 'process.start']
        self.assertTrue(starts)
        for rec in starts:
            self.assertEqual(found, rec['attrs']['releases']['nova'])
        # SQL under this release's SQLAlchemy (1.4 for nova 29): the
        # COMMIT round trips timed, the database named, no listener
        # fault.
        queries = [r for r in spans.records if r['ev'] == 'sql.query']
        self.assertIn('COMMIT', {r['attrs']['kind'] for r in queries})
        self.assertIn('nova_cell1', {r['attrs']['db'] for r in queries})
        for rec in spans.records:
            if rec['ev'] == 'instrument.faults':
                self.assertNotIn('the SQL listeners', rec['attrs'])
