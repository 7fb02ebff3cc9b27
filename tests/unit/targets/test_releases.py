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
"""README.rst's support matrix is ``tests.releases.RELEASES``, whose claims
each release's functional tier checks (tests/functional/nova/
test_releases.py); the release-only points follow the release.

``python -m tests.unit.targets.test_releases`` prints the matrix.
"""

import os
import re

import testtools

from instrument import version
from instrument.targets import nova
from tests import releases

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
)
MODES = ('eventlet', 'threads')


def _table(rows: list) -> list:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    rule = '  '.join('=' * w for w in widths)

    def line(row):
        return '  '.join(
            c.ljust(w) for c, w in zip(row, widths, strict=True)
        ).rstrip()

    return [rule, line(rows[0]), rule] + [line(r) for r in rows[1:]] + [rule]


def support_matrix() -> str:
    """The support matrix (an RST table and the moved code) made from
    RELEASES."""
    rows = [('nova', 'series', 'mode', 'points', 'verified by')]
    moved = []
    for release in releases.RELEASES:
        for mode in MODES:
            if mode in release.modes:
                rows.append(
                    (
                        release.version,
                        release.series,
                        mode,
                        'all, %d missing' % len(release.missing),
                        'tox -e %s' % release.env_of(mode),
                    )
                )
            else:
                rows.append(
                    (
                        release.version,
                        release.series,
                        mode,
                        '-',
                        release.unverified.get(mode, 'not verified'),
                    )
                )
        moved.append(
            '* nova %s: %s'
            % (
                release.version,
                ', '.join(
                    '``%s``' % place
                    for place in sorted(set(release.used.values()))
                ),
            )
        )
        if release.missing:
            moved[-1] += '; missing: ' + ', '.join(
                '``%s``' % name for name in sorted(release.missing)
            )
    lines = (
        _table(rows)
        + ['', 'Where the moved code (the thread hook) is patched:', '']
        + moved
    )
    return '\n'.join(lines) + '\n'


def _readme_matrix() -> str:
    with open(os.path.join(ROOT, 'README.rst'), encoding='utf-8') as f:
        text = f.read()
    match = re.search(
        r'^\.\. support-matrix-begin\n\n(.*?)\n'
        r'\.\. support-matrix-end$',
        text,
        re.M | re.S,
    )
    assert match, 'README.rst has no support matrix'
    return match.group(1)


class SupportMatrixTest(testtools.TestCase):
    def test_readme_matrix_is_the_releases(self):
        expected = support_matrix()
        self.assertEqual(
            expected,
            _readme_matrix(),
            'README.rst support matrix is stale; `python -m '
            'tests.unit.targets.test_releases` prints it',
        )

    def test_every_release_has_its_tox_env_and_constraints(self):
        with open(os.path.join(ROOT, 'tox.ini')) as f:
            tox_ini = f.read()
        envs = {'functional'}
        for numbers in re.findall(
            r'^\[testenv:functional-nova\{([\d,]+)\}\]', tox_ini, re.M
        ):
            envs.update('functional-nova%s' % n for n in numbers.split(','))
        for release in releases.RELEASES:
            major = release.version.split('.')[0]
            self.assertTrue(
                os.path.exists(
                    os.path.join(ROOT, 'constraints', 'nova-%s.txt' % major)
                ),
                major,
            )
            self.assertIn(release.tox_env, envs)
            for mode, env in release.mode_envs.items():
                self.assertIn(mode, release.modes)
                # an env of its own on that release's constraints
                section = re.search(
                    r'^\[testenv:%s\]\n(.*?)(?=^\[)' % re.escape(env),
                    tox_ini,
                    re.M | re.S,
                )
                self.assertIsNotNone(section, env)
                self.assertIn(
                    'constraints/nova-%s.txt' % major, section.group(1), env
                )
        self.assertEqual(
            tuple(r.version for r in releases.RELEASES), version.TESTED_NOVA
        )

    def test_modes_are_verified_or_explained(self):
        for release in releases.RELEASES:
            for mode in MODES:
                self.assertTrue(
                    mode in release.modes or release.unverified.get(mode),
                    (release.version, mode),
                )


class ReleasePointsTest(testtools.TestCase):
    def test_spawn_n_only_before_nova_32(self):
        for found, expected in (
            ('29.4.0', [nova.SPAWN_N]),
            ('31.3.1', [nova.SPAWN_N]),
            ('32.0.0', []),
            ('33.0.2', []),
            ('34.0.0', []),
            (None, []),
            ('local', []),
        ):
            self.assertEqual(
                expected, [p.name for p in nova.release_points(found)], found
            )

    def test_thread_hook_alternatives_name_every_used_place(self):
        [hook] = [p for p in nova.points() if p.name == nova.THREAD_HOOK]
        places = {'%s:%s' % c for c in hook.candidates()}
        for release in releases.RELEASES:
            self.assertIn(release.used[nova.THREAD_HOOK], places)

    def test_release_of(self):
        self.assertEqual('29.4.0', releases.release_of('29.2.1').version)
        self.assertIsNone(releases.release_of('30.0.0'))
        self.assertIsNone(releases.release_of(None))


class OlderLibrariesTest(testtools.TestCase):
    """What the older releases' libraries hand the runtime."""

    def test_tuple_lock_names_are_strings(self):
        from instrument.targets import oslo_concurrency

        self.assertEqual(
            'host1,node1', oslo_concurrency.lock_name(('host1', 'node1'))
        )
        self.assertEqual(
            'compute_resources',
            oslo_concurrency.lock_name('compute_resources'),
        )

    def test_engine_connect_listener_of_this_sqlalchemy(self):
        from instrument.targets.sqlalchemy import listeners

        seen = []
        listener = listeners.engine_connect_listener(seen.append)
        if listeners.DIALECT_HANDLE_ERROR:  # SQLAlchemy 2.0: (conn)
            listener('conn')
        else:  # 1.4: (conn, branch)
            listener('conn', False)
        self.assertEqual(['conn'], seen)


if __name__ == '__main__':
    print(support_matrix(), end='')
