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
environment build is doing (issue 14, item 9); and the test tiers of
``tox.ini`` and ``.ci/run`` (issue 28)."""

import configparser
import importlib.util
import io
import os
import pathlib

import fixtures
import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)


def _toxfile():
    spec = importlib.util.spec_from_file_location(
        'toxfile_under_test', os.path.join(ROOT, 'toxfile.py')
    )
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
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())
        ).new_value

    def test_the_demo_build_is_announced_once(self):
        deps = _deps('demo')
        self.toxfile.tox_on_install(
            _Env('demo', self.site), deps, 'deps', 'deps'
        )
        said = self.out.getvalue()
        self.assertTrue(said.startswith('demo: installing nova 34'), said)
        self.assertIn('tox -v', said)
        # once nova is in the environment: nothing
        os.makedirs(os.path.join(self.site, 'nova'))
        self.out.truncate(0)
        self.toxfile.tox_on_install(
            _Env('demo', self.site), deps, 'deps', 'deps'
        )
        self.assertEqual('', self.out.getvalue())

    def test_an_older_release_is_named(self):
        # the deps of functional-nova29 once tox has applied its factors
        deps = [
            '-c{toxinidir}/constraints/nova-29.txt',
            '-r{toxinidir}/requirements/nova-29.txt',
            '-r{toxinidir}/requirements.txt',
        ]
        self.toxfile.tox_on_install(
            _Env('functional-nova29', self.site), deps, 'deps', 'deps'
        )
        said = self.out.getvalue()
        self.assertTrue(
            said.startswith('functional-nova29: installing nova 29,'), said
        )

    def test_environments_without_nova_are_left_alone(self):
        for env in ('testenv:pep8', 'testenv:mypy'):
            self.toxfile.tox_on_install(
                _Env(env, self.site),
                ['ruff', '-rrequirements.txt'],
                'deps',
                'deps',
            )
        self.assertEqual('', self.out.getvalue())

    def test_a_failing_environment_never_stops_tox(self):
        class Broken(_Env):
            def env_site_package_dir(self):
                raise RuntimeError('no site-packages yet')

        self.toxfile.tox_on_install(
            Broken('demo', self.site), _deps('demo'), 'deps', 'deps'
        )
        self.assertEqual('', self.out.getvalue())


def _tox() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(ROOT, 'tox.ini'))
    return cfg


class TiersTest(testtools.TestCase):
    """README's test command is the unit tier and pep8 (ruff, mypy);
    the system tier has an environment of its own that CI runs right
    after it (issue 28, Gates)."""

    def test_the_readme_command_is_the_unit_tier_and_pep8(self):
        tox = _tox()
        self.assertEqual('py3,pep8', tox['tox']['envlist'])
        self.assertIn(
            'stestr --test-path=./tests/unit run', tox['testenv']['commands']
        )
        pep8 = tox['testenv:pep8']
        commands = pep8['commands'].split('\n')
        self.assertTrue(
            commands[-3].strip().startswith('ruff check '), commands
        )
        self.assertTrue(
            commands[-2].strip().startswith('ruff format --check '), commands
        )
        self.assertEqual('mypy', commands[-1].strip())
        # mypy reads the annotations of the libraries it imports
        self.assertIn('{[testenv]deps}', pep8['deps'])

    def test_mypy_is_strict_where_issue_28_asks(self):
        cfg = configparser.ConfigParser(interpolation=None)
        cfg.read(os.path.join(ROOT, 'setup.cfg'))
        self.assertEqual('True', cfg['mypy']['check_untyped_defs'])
        self.assertEqual('True', cfg['mypy']['no_implicit_optional'])
        self.assertNotIn(
            'implicit_optional',
            [key for key in cfg['mypy'] if key != 'no_implicit_optional'],
        )
        # no module is let off: only the element types of empty
        # containers are left to inference, everywhere alike
        self.assertEqual(
            [], [s for s in cfg.sections() if s.startswith('mypy-instrument')]
        )
        self.assertEqual('var-annotated', cfg['mypy']['disable_error_code'])

    def test_the_system_tier_runs_after_the_readme_command(self):
        self.assertIn(
            'stestr --test-path=./tests/system run',
            _tox()['testenv:system']['commands'],
        )
        with open(os.path.join(ROOT, '.ci', 'run'), encoding='utf-8') as f:
            lines = [line.strip() for line in f]
        readme = lines.index('bash -c "$readme_tests"')
        self.assertIn('tier system', lines[readme:])

    def test_the_test_packages_are_the_tiers(self):
        tiers = sorted(
            name
            for name in os.listdir(os.path.join(ROOT, 'tests'))
            if os.path.isfile(os.path.join(ROOT, 'tests', name, '__init__.py'))
        )
        self.assertEqual(
            ['functional', 'integration', 'synthetic', 'system', 'unit'], tiers
        )
