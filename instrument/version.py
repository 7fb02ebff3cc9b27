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
"""Versions: this library's, the nova releases it supports, and what
is installed beside it.

* ``version()``: the installed ``openstack-instrument`` (the start
  record's ``version``, the OTLP instrumentation scope's);
* ``TESTED_NOVA`` and ``NOVA_VERSIONS``: the nova releases the points
  were verified on (the banner warns about another) and the oldest
  one patched at all (``instrument.targets.nova`` requires it); what
  verifies each release is test metadata (``tests/releases.py``);
* ``releases()``: the versions of ``RELEASE_DISTRIBUTIONS`` installed
  here (the start record's ``releases``).

Read from package metadata only: nothing is imported.
"""

from importlib import metadata

# The nova releases verified (tests/releases.py holds what each one is
# verified by; doc/source/releases.rst).
TESTED_NOVA = ('34.0.0', '33.0.2', '31.3.1', '29.4.0')
# The oldest release the points were surveyed on (doc/source/releases.rst);
# older ones are not patched.
NOVA_VERSIONS = '>=29.0.0'

# Distributions whose versions process.start names (those installed).
RELEASE_DISTRIBUTIONS = (
    'nova',
    'oslo.messaging',
    'oslo.db',
    'SQLAlchemy',
    'eventlet',
)

DISTRIBUTION = 'openstack-instrument'
UNKNOWN = 'unknown'


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None; reads
    its metadata only (the package is not imported)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def version() -> str:
    """This library's installed version (``unknown`` from a source tree
    without metadata)."""
    try:
        return metadata.version(DISTRIBUTION)
    except Exception:  # running from a source tree without metadata
        return UNKNOWN


_RELEASES: dict | None = None


def releases() -> dict:
    """{distribution: version} of ``RELEASE_DISTRIBUTIONS`` installed
    here (package metadata, read once per process)."""
    global _RELEASES
    if _RELEASES is None:
        found = {}
        for dist in RELEASE_DISTRIBUTIONS:
            found_version = distribution_version(dist)
            if found_version is not None:
                found[dist] = found_version
        _RELEASES = found
    return dict(_RELEASES)
