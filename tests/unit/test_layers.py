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
"""The layers of the package, and what the wheel ships.

* The runtime half (everything a nova host loads: not ``analysis``, not
  ``cmd``) never imports the analyser, the demo or nova, neither at the
  top of a module (loaded in a fresh interpreter) nor inside a function
  (read from the source).
* No shipped module imports nova's tests, the demo (``instrument_demo``,
  a distribution of its own in ``demo/``) or this repository's tests.
* The wheel built from this tree holds the ``instrument`` package with
  its ``py.typed`` marker and nothing else: no demo, no tests, no
  ``instrument-demo`` console script.
"""

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile

import fixtures
import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, 'instrument')

# Not loaded by a nova host: the analyser and its command.
OFFLINE = ('instrument.analysis', 'instrument.cmd')
# Never imported by anything shipped.
FORBIDDEN = ('nova.tests', 'instrument_demo', 'tests')

CHECK = '''
import importlib
import json
import pkgutil
import sys

import instrument

# Every module a nova host loads: not the analyser, its commands, or
# the otlp extra.
skip = ('instrument.analysis', 'instrument.cmd',
        'instrument.sink.otlp', 'instrument.loader.notifier')
loaded = []
todo = [instrument]
while todo:  # walk_packages would import the skipped packages too
    package = todo.pop()
    for mod in pkgutil.iter_modules(package.__path__,
                                    package.__name__ + '.'):
        if mod.name.startswith(skip):
            continue
        module = importlib.import_module(mod.name)
        loaded.append(mod.name)
        if mod.ispkg:
            todo.append(module)
print(json.dumps({
    'loaded': loaded,
    'analysis': sorted(m for m in sys.modules
                       if m.startswith(('instrument.analysis',
                                        'instrument.cmd'))),
    'demo': sorted(m for m in sys.modules
                   if m.split('.')[0] in ('instrument_demo', 'tests')),
    'nova': sorted(m for m in sys.modules
                   if m == 'nova' or m.startswith('nova.')),
    'heavy': sorted(m for m in ('numpy', 'scipy', 'msgspec', 'duckdb')
                    if m in sys.modules)}))
'''


def _modules():
    """(dotted name, path) of every module of the package."""
    for top, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != '__pycache__')
        rel = os.path.relpath(top, ROOT).replace(os.sep, '.')
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            if name == '__init__.py':
                yield rel, os.path.join(top, name)
            else:
                yield rel + '.' + name[:-3], os.path.join(top, name)


def _imports(name: str, path: str):
    """(line, imported module) of every import statement in ``path``,
    those inside functions included; relative imports resolved."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith('__init__.py') else \
        name.rpartition('.')[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                parts = parts[:len(parts) - node.level + 1]
                base = '.'.join(parts + ([base] if base else []))
            yield node.lineno, base
            # "from instrument import analysis" imports a module too
            for alias in node.names:
                yield node.lineno, base + '.' + alias.name


def _under(module: str, prefixes: tuple) -> bool:
    return any(module == p or module.startswith(p + '.') for p in prefixes)


class LayersTest(testtools.TestCase):

    def test_runtime_imports_neither_analysis_nor_nova(self):
        proc = subprocess.run([sys.executable, '-c', CHECK],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(0, proc.returncode, proc.stderr)
        result = json.loads(proc.stdout)
        for name in ('runtime', 'recorder', 'wrappers', 'points',
                     'targets.base', 'targets.nova',
                     'targets.oslo_messaging', 'targets.sqlalchemy',
                     'targets.process'):
            self.assertIn('instrument.' + name, result['loaded'])
        self.assertEqual([], result['analysis'])
        self.assertEqual([], result['demo'])
        self.assertEqual([], result['nova'])
        self.assertEqual([], result['heavy'])

    def test_no_runtime_module_imports_the_analyser_even_lazily(self):
        found = []
        checked = 0
        for name, path in _modules():
            if _under(name, OFFLINE):
                continue
            checked += 1
            for line, module in _imports(name, path):
                if _under(module, OFFLINE + FORBIDDEN):
                    found.append('%s:%d imports %s' % (name, line, module))
        self.assertGreater(checked, 20)
        self.assertEqual([], found)

    def test_no_shipped_module_imports_tests_or_the_demo(self):
        found = []
        for name, path in _modules():
            for line, module in _imports(name, path):
                if _under(module, FORBIDDEN):
                    found.append('%s:%d imports %s' % (name, line, module))
        self.assertEqual([], found)

    def test_the_checks_see_lazy_and_relative_imports(self):
        # The scanner itself: an import inside a function and a relative
        # import are both reported.
        d = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(d, 'mod.py')
        with open(path, 'w') as f:
            f.write('def f():\n    from nova.tests import fixtures\n'
                    'from ..analysis import pipeline\n')
        found = [m for _line, m in _imports('instrument.db.mod', path)]
        self.assertIn('nova.tests.fixtures', found)
        self.assertIn('instrument.analysis.pipeline', found)


class WheelTest(testtools.TestCase):
    """The wheel an operator installs, built from this tree by pbr."""

    def _build(self) -> str:
        if shutil.which('git') is None:
            self.fail('git is needed: pbr lists the files of the wheel '
                      'from git')
        work = self.useFixture(fixtures.TempDir()).path
        src = os.path.join(work, 'src')
        # The tree as git sees it (committed or not, ignored files left
        # out), in a repository of its own: the build writes nothing
        # into this checkout.
        listed = subprocess.run(
            ['git', 'ls-files', '-z', '--cached', '--others',
             '--exclude-standard'], cwd=ROOT, capture_output=True,
            check=True).stdout.decode().split('\0')
        for rel in filter(None, listed):
            source = os.path.join(ROOT, rel)
            if not os.path.isfile(source):  # deleted, not yet committed
                continue
            target = os.path.join(src, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)
        git = ['git', '-c', 'user.name=t', '-c', 'user.email=t@example.com',
               '-c', 'commit.gpgsign=false']
        for args in (['init', '-q'], ['add', '-A'],
                     ['commit', '-q', '-m', 'tree']):
            subprocess.run(git + args, cwd=src, check=True,
                           capture_output=True)
        out = os.path.join(work, 'wheel')
        env = dict(os.environ)
        env.pop('PBR_VERSION', None)
        proc = subprocess.run(
            [sys.executable, '-m', 'pip', 'wheel', '--no-deps',
             '--no-build-isolation', '--no-index', '-q', '-w', out, src],
            capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        wheels = [n for n in os.listdir(out) if n.endswith('.whl')]
        self.assertEqual(1, len(wheels), wheels)
        return os.path.join(out, wheels[0])

    def test_the_wheel_ships_the_package_and_no_demo(self):
        with zipfile.ZipFile(self._build()) as whl:
            names = whl.namelist()
            entry_points = next(
                whl.read(n).decode() for n in names
                if n.endswith('.dist-info/entry_points.txt'))
        tops = {n.split('/')[0] for n in names
                if not n.split('/')[0].endswith('.dist-info')}
        self.assertEqual({'instrument'}, tops)
        self.assertIn('instrument/py.typed', names)
        self.assertIn('instrument/analysis/pipeline.py', names)
        self.assertEqual([], [n for n in names
                              if 'demo' in n or 'synthetic' in n])
        self.assertIn('instrument-report', entry_points)
        self.assertNotIn('instrument-demo', entry_points)
