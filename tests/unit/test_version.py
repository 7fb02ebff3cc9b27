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
"""``instrument.version``: the library's version, the nova releases it
supports, the versions the start record names."""

from importlib import metadata

import fixtures
import testtools

from instrument import version
from instrument.targets import nova
from instrument.targets.nova import pools


class VersionTest(testtools.TestCase):
    def test_version_from_metadata(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'importlib.metadata.version',
                lambda name: {'openstack-instrument': '9.8.7'}[name],
            )
        )
        self.assertEqual('9.8.7', version.version())

    def test_version_unknown_without_metadata(self):
        def missing(name):
            raise metadata.PackageNotFoundError(name)

        self.useFixture(
            fixtures.MonkeyPatch('importlib.metadata.version', missing)
        )
        self.assertEqual('unknown', version.version())

    def test_releases_names_what_is_installed_once(self):
        found = {'nova': '34.0.0', 'SQLAlchemy': '2.0.36'}
        asked = []

        def read(name):
            asked.append(name)
            if name not in found:
                raise metadata.PackageNotFoundError(name)
            return found[name]

        self.useFixture(
            fixtures.MonkeyPatch('importlib.metadata.version', read)
        )
        self.useFixture(
            fixtures.MonkeyPatch('instrument.version._RELEASES', None)
        )
        self.assertEqual(found, version.releases())
        self.assertEqual(list(version.RELEASE_DISTRIBUTIONS), asked)
        # read once per process; a copy each time
        version.releases()['nova'] = 'changed'
        self.assertEqual(found, version.releases())
        self.assertEqual(len(version.RELEASE_DISTRIBUTIONS), len(asked))

    def test_nova_targets_require_the_supported_releases(self):
        for target in (nova.NovaTarget, pools.NovaPoolsTarget):
            self.assertEqual({'nova': version.NOVA_VERSIONS}, target.requires)
            self.assertEqual({'nova': version.TESTED_NOVA}, target.surveyed)
