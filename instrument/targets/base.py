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
"""One lifecycle for everything instrumented: the ``Target`` plugin.

Each instrumented library is a ``Target`` subclass found through the
``instrument.targets`` entry point (doc/source/targets.rst says how to
add one).  ``instrument.runtime.lifecycle`` runs every target the same way:

1. ``check(conf)``: the distributions it ``requires`` are installed in
   a supported version (read from package metadata: nothing is
   imported) and its options are on; otherwise it is skipped, and the
   reason is in the start-up banner;
2. ``install(ctx)``: by default applies ``points(ctx)`` through the
   target's own ``Patcher`` (post-import hooks: nothing of the library
   is imported before the process imports it); a target may do more.
   A target whose install raises is counted as a fault, undone and
   reported; the others run;
3. ``remove()``: undoes ``install``, in reverse order of install, at
   teardown.

``ctx`` (``Context``) hands a target what it records with: the
configuration, the recorder and tracer, its patcher (hooks that add
points at run time use it) and the other targets of the process.
"""

from oslo_log import log as logging
from packaging import specifiers
from packaging import version as versions

from instrument import opts
from instrument import version

LOG = logging.getLogger(__name__)

INSTALLED = 'installed'
SKIPPED = 'skipped'
FAILED = 'failed'


# The installed version of a distribution, or None (``check`` looks
# it up here: tests put other versions in its place).
distribution_version = version.distribution_version


class Context:
    """What a target installs with.  ``targets`` are every target of
    this process's set-up, for the few that read another's data."""

    def __init__(self, conf, recorder, tracer, patcher, targets=()) -> None:
        self.conf = conf
        self.recorder = recorder
        self.tracer = tracer
        self.patcher = patcher
        self.targets = tuple(targets)

    def wanted(self, point) -> bool:
        """Is ``point`` for a nova component this process records
        (``[instrument] services``)?  Points of no component are."""
        service = point.service
        return (
            service is None
            or service not in opts.SERVICES
            or service in self.conf.instrument.services
        )


class Target:
    """Base class of the instrumentation of one library.

    Subclasses set ``name`` (the entry point's), ``requires`` and, when
    they record calls at patch points, ``points()``.
    """

    #: Entry point name; set from the entry point when left None.
    name: str | None = None
    #: Distributions needed: {name: version specifier ('' for any)}.
    requires: dict[str, str] = {}
    #: Versions the points were surveyed on: {distribution: versions};
    #: another installed version runs, with a warning.
    surveyed: dict[str, tuple] = {}
    #: True for a target that taps the process as a whole (every SQL
    #: engine, the exit) rather than given calls of a library: it runs
    #: even when ``setup()`` is given points of its own.
    process_wide = False

    def __init__(self) -> None:
        self.patcher = None

    @property
    def release(self) -> str | None:
        """The distribution the points follow (names it in warnings
        about points missing in the installed release)."""
        return next(iter(self.requires), None)

    def check(self, conf) -> str | None:
        """Why this target cannot run here, or None when it can.

        Reads distribution metadata and options; imports nothing.
        """
        for dist, spec in self.requires.items():
            found = distribution_version(dist)
            if found is None:
                return '%s is not installed' % dist
            if spec and not _satisfies(found, spec):
                LOG.warning(
                    'instrument: %s %s is not supported by the '
                    '%s target (needs %s); it is not instrumented',
                    dist,
                    found,
                    self.name,
                    spec,
                )
                return '%s %s is not supported (needs %s)' % (
                    dist,
                    found,
                    spec,
                )
            surveyed = self.surveyed.get(dist)
            if surveyed and found not in surveyed:
                _report_unsurveyed(dist, found, surveyed)
        return None

    def points(self, ctx: Context) -> list:
        """Patch points (``instrument.patching.points.PatchPoint``) to
        apply."""
        return []

    def install(self, ctx: Context) -> None:
        """Start instrumenting: apply the points that ``ctx`` wants."""
        self.patcher = ctx.patcher
        ctx.patcher.add_points([p for p in self.points(ctx) if ctx.wanted(p)])
        ctx.patcher.apply()

    def remove(self) -> None:
        """Undo ``install`` (idempotent)."""
        if self.patcher is not None:
            self.patcher.remove()

    def banner(self) -> dict | None:
        """Its points by status (``Patcher.banner``), if it has any."""
        return self.patcher.banner() if self.patcher is not None else None


class PointsTarget(Target):
    """Points given to ``instrument.setup(points=...)`` (tests, other
    projects), in place of the targets that record a library's calls."""

    name = 'points'

    def __init__(self, points) -> None:
        super().__init__()
        self._points = list(points)

    def points(self, ctx: Context) -> list:
        return list(self._points)


# (distribution, version) pairs reported as not surveyed in this process:
# several targets follow one distribution (nova, nova_pools), and set-up
# may run more than once.
_REPORTED = set()


def _report_unsurveyed(dist: str, found: str, surveyed: tuple) -> None:
    """Warn once per process that ``found`` of ``dist`` was not
    surveyed; a point release of a surveyed release (same major.minor:
    34.0.1 of 34.0.0) is only an INFO line."""
    key = (dist, found)
    if key in _REPORTED:
        return
    _REPORTED.add(key)
    series = _series(found)
    same = [v for v in surveyed if series is not None and _series(v) == series]
    if same:
        LOG.info(
            'instrument: %s %s is a point release of %s, on which '
            'the points were surveyed',
            dist,
            found,
            ', '.join(same),
        )
        return
    LOG.warning(
        'instrument: %s %s was not surveyed (points are for %s); '
        'the start-up banner lists points that are missing in '
        'this release',
        dist,
        found,
        ', '.join(surveyed),
    )


def _series(found: str) -> tuple | None:
    """(major, minor) of a version, None when it cannot be read."""
    try:
        release = versions.Version(found).release
    except versions.InvalidVersion:
        return None
    return release[:2] if len(release) >= 2 else None


def _satisfies(found: str, spec: str) -> bool:
    try:
        return specifiers.SpecifierSet(spec).contains(
            versions.Version(found), prereleases=True
        )
    except (versions.InvalidVersion, specifiers.InvalidSpecifier):
        # A version that cannot be compared (a local build): try it; the
        # banner tells what is missing.
        return True
