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
"""Every library a shipped module imports is declared.

requirements.txt for what a nova host loads; the ``otlp`` extra for the
OTLP sink; the ``report`` extra for the analyser and its command.  Only
eventlet is imported without being declared: by processes that already
run it.
"""

import ast
import configparser
import importlib.metadata
import os
import re
import sys

import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
# Used only where the process already imported it.
UNDECLARED = {'eventlet'}


def _canonical(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def _names(lines) -> set:
    out = set()
    for line in lines:
        line = line.split('#')[0].strip()
        if line and not line.startswith('-'):
            out.add(_canonical(re.split(r'[\s<>=!~;\[]', line)[0]))
    return out


def _declared() -> dict:
    with open(os.path.join(ROOT, 'requirements.txt')) as f:
        runtime = _names(f)
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, 'setup.cfg'))
    extras = {
        name: _names(value.splitlines())
        for name, value in cfg['extras'].items()
    }
    return {
        'runtime': runtime,
        'otlp': runtime | extras['otlp'],
        'report': runtime | extras['report'],
    }


def _part(module: str) -> str:
    if module.startswith(('instrument.analysis', 'instrument.cmd')):
        return 'report'
    if module.startswith('instrument.sinks.otlp'):
        return 'otlp'
    return 'runtime'


def _third_party_imports():
    """(module, top-level name imported) for every shipped module."""
    package = os.path.join(ROOT, 'instrument')
    for top, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != '__pycache__']
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(top, name)
            module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, '.')
            with open(path, encoding='utf-8') as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    tops = [a.name.split('.')[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    tops = [(node.module or '').split('.')[0]]
                else:
                    continue
                for top_name in tops:
                    if (
                        top_name in sys.stdlib_module_names
                        or top_name == 'instrument'
                    ):
                        continue
                    yield module, top_name


class RequirementsTest(testtools.TestCase):
    def test_every_import_is_declared(self):
        declared = _declared()
        dists = importlib.metadata.packages_distributions()
        missing = []
        seen = set()
        for module, top_name in _third_party_imports():
            seen.add(top_name)
            if top_name in UNDECLARED:
                continue
            names = {_canonical(d) for d in dists.get(top_name, ())}
            self.assertTrue(
                names,
                '%s imports %s, which is not installed '
                'here' % (module, top_name),
            )
            if not names & declared[_part(module)]:
                missing.append(
                    '%s: %s (%s)'
                    % (module, top_name, ', '.join(sorted(names)))
                )
        self.assertEqual([], missing)
        # the scan sees the imports it is about
        self.assertTrue(
            {'oslo_messaging', 'sqlalchemy', 'wrapt', 'numpy', 'opentelemetry'}
            <= seen,
            seen,
        )
