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
"""The installed nova release is what ``tests.releases.RELEASES`` (and so
README.rst's support matrix) says: run in its mode, every point patched
(none missing or failed), moved code patched where the entry says, and
``process.start`` naming the release."""

import importlib

import testtools

from instrument.patching import patcher as patcher_mod
from instrument.patching import points as points_mod
from instrument.runtime import lifecycle
from instrument.runtime import threads
from instrument.targets import base as targets_base
from instrument.targets import keystoneauth as keystoneauth_target
from instrument.targets import nova as nova_target
from instrument.targets import oslo_messaging as oslo_messaging_target
from tests import releases
from tests.functional.nova import base


class ReleaseTest(base.InstrumentedCloud):
    def test_release_matches_the_support_matrix(self):
        found = targets_base.distribution_version('nova')
        release = releases.release_of(found)
        self.assertIsNotNone(release, 'nova %s is not in RELEASES' % found)
        self.assertEqual(
            release.version, found, 'RELEASES names another point release'
        )
        mode = 'eventlet' if threads.eventlet_patched() else 'threads'
        self.assertIn(mode, release.modes)
        # A boot imports every module the points name.
        server = self.boot()
        self.spans(until=lambda s: s.done('compute.build', inst=server['id']))
        active = lifecycle.active()
        banner = active.banner()
        # A point added to the targets must be found in every release
        # (or get an alternative, or be named in the release's missing).
        self.assertEqual(
            sorted(release.missing), sorted(banner[patcher_mod.MISSING])
        )
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


class PointArgumentsTest(testtools.TestCase):
    """Every argument a point of nova, oslo.messaging or keystoneauth1
    reads by name (``Arg`` specs, ``reads`` hooks and extractors) is a
    parameter of its target in the installed release, at a position
    the wrapper can resolve, or one it can only get by keyword through
    ``**kwargs`` (issue 28: no literal positions; decorated RPC
    endpoints included)."""

    def test_every_argument_read_is_a_parameter(self):
        checked = 0
        everything = (
            nova_target.points()
            + oslo_messaging_target.points()
            + list(keystoneauth_target.KSA_POINTS)
        )
        for point in everything:
            specs = point.arguments()
            if not specs or point.kind not in (
                points_mod.SPAN,
                points_mod.HOOK,
            ):
                continue
            target = _resolve(point)
            if target is None:  # missing in this release: the banner's
                continue
            params = points_mod.parameters(target)
            self.assertIsNotNone(params, point.name)
            names = {p.name: p.kind for p in params}
            for spec in specs:
                self.assertTrue(spec.found(target), (point.name, spec.name))
                pos = spec.position(target)
                self.assertIsNotNone(pos, point.name)
                if spec.name in names:
                    self.assertGreaterEqual(
                        pos,
                        0,
                        '%s: %s is not a positional parameter'
                        % (point.name, spec.name),
                    )
                checked += 1
        self.assertGreater(checked, 70)


def _resolve(point):
    for module, target in point.candidates():
        try:
            obj = importlib.import_module(module)
            for part in target.split('.'):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            continue
        return obj
    return None
