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
"""``toxfile.py``: the first ``tox -e demo`` says what its long, silent
environment build is doing (issue 14, item 9)."""

import configparser
import importlib.util
import io
import os
import pathlib

import fixtures
import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _toxfile():
    spec = importlib.util.spec_from_file_location(
        'toxfile_under_test', os.path.join(ROOT, 'toxfile.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _deps(env: str) -> list:
    """The ``deps`` lines of a tox environment, as tox.ini writes them."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(ROOT, 'tox.ini'))
    return cfg['testenv:' + env]['deps'].splitlines()


class _Env:
    """What the hook reads of a tox environment."""

    def __init__(self, name: str, site: str) -> None:
        self.name = name
        self._site = site

    def env_site_package_dir(self):
        return pathlib.Path(self._site)


class ToxfileTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.toxfile = _toxfile()
        self.site = self.useFixture(fixtures.TempDir()).path
        self.out = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())).new_value

    def test_the_demo_build_is_announced_once(self):
        deps = _deps('demo')
        self.toxfile.tox_on_install(_Env('demo', self.site), deps,
                                    'deps', 'deps')
        said = self.out.getvalue()
        self.assertTrue(said.startswith('demo: installing nova 34'), said)
        self.assertIn('tox -v', said)
        # once nova is in the environment: nothing
        os.makedirs(os.path.join(self.site, 'nova'))
        self.out.truncate(0)
        self.toxfile.tox_on_install(_Env('demo', self.site), deps,
                                    'deps', 'deps')
        self.assertEqual('', self.out.getvalue())

    def test_an_older_release_is_named(self):
        # the deps of functional-nova29 once tox has applied its factors
        deps = ['-c{toxinidir}/constraints/nova-29.txt',
                '-r{toxinidir}/nova-requirements-29.txt',
                '-r{toxinidir}/requirements.txt']
        self.toxfile.tox_on_install(_Env('functional-nova29', self.site),
                                    deps, 'deps', 'deps')
        said = self.out.getvalue()
        self.assertTrue(said.startswith(
            'functional-nova29: installing nova 29,'), said)

    def test_environments_without_nova_are_left_alone(self):
        for env in ('testenv:pep8', 'testenv:mypy'):
            self.toxfile.tox_on_install(
                _Env(env, self.site), ['ruff', '-rrequirements.txt'],
                'deps', 'deps')
        self.assertEqual('', self.out.getvalue())

    def test_a_failing_environment_never_stops_tox(self):
        class Broken(_Env):
            def env_site_package_dir(self):
                raise RuntimeError('no site-packages yet')
        self.toxfile.tox_on_install(Broken('demo', self.site),
                                    _deps('demo'), 'deps', 'deps')
        self.assertEqual('', self.out.getvalue())
