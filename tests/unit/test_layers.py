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
"""The layers of the package (what the wheel ships:
``tests/system/test_layers.py``).

* The runtime half (everything a nova host loads: not ``analysis``, not
  ``cmd``) never imports the analyser, the demo or nova, neither at the
  top of a module (loaded in a fresh interpreter) nor inside a function
  (read from the source).
* No shipped module imports nova's tests, the demo (``instrument_demo``,
  a distribution of its own in ``demo/``) or this repository's tests.
* The analyser (``instrument.analysis``) is a graph without a cycle:
  no module imports one that (through others) imports it back, none
  imports inside a function (which would hide such a cycle), and none
  uses a private name (``_name``) of another module of the package.
* The whole package has no cycle either, its imports inside functions
  counted (the runtime imports optional libraries where it uses them,
  never to dodge a cycle), and no module of it uses a private name of
  another.
"""

import ast
import json
import os
import subprocess
import sys

import fixtures
import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
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
        'instrument.sinks.otlp', 'instrument.loaders.notifier')
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
    # (msgspec is a runtime requirement: the writer's batch encoder)
    'heavy': sorted(m for m in ('numpy', 'scipy', 'duckdb', 'pyarrow',
                                'polars')
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
    package = name if path.endswith('__init__.py') else name.rpartition('.')[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                parts = parts[: len(parts) - node.level + 1]
                base = '.'.join(parts + ([base] if base else []))
            yield node.lineno, base
            # "from instrument import analysis" imports a module too
            for alias in node.names:
                yield node.lineno, base + '.' + alias.name


def _under(module: str, prefixes: tuple) -> bool:
    return any(module == p or module.startswith(p + '.') for p in prefixes)


ANALYSIS = 'instrument.analysis'


def _tree(path: str) -> ast.Module:
    with open(path, encoding='utf-8') as f:
        return ast.parse(f.read(), path)


def _function_imports(tree: ast.Module):
    """Line numbers of the imports inside a function or a class."""

    def walk(node, inside):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and inside:
                yield child.lineno
            yield from walk(
                child,
                inside
                or isinstance(
                    child,
                    (
                        ast.FunctionDef,
                        ast.AsyncFunctionDef,
                        ast.ClassDef,
                        ast.Lambda,
                    ),
                ),
            )

    yield from walk(tree, False)


def _bound_modules(name: str, path: str, tree: ast.Module, known: set) -> dict:
    """``{local name: module}`` of the package's modules ``path``
    imports as modules (``from instrument.analysis import load``,
    ``import instrument.schema as schema``)."""
    out = {}
    package = name if path.endswith('__init__.py') else name.rpartition('.')[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    out[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                parts = parts[: len(parts) - node.level + 1]
                base = '.'.join(parts + ([base] if base else []))
            for alias in node.names:
                full = base + '.' + alias.name
                if full in known:
                    out[alias.asname or alias.name] = full
    return out


# Private to the package, for its modules: the optional compiled
# helpers, each module loading its own through ``_native.load``.
SHARED_PRIVATE = {'instrument._native'}


def _private_uses(name: str, path: str, tree: ast.Module, known: set):
    """``(line, what)`` of each use of another module's private name:
    ``from x import _y`` or ``x._y`` with ``x`` one of the package's
    modules (but ``SHARED_PRIVATE``)."""
    bound = _bound_modules(name, path, tree, known)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (
                    alias.name.startswith('_')
                    and not alias.name.startswith('__')
                    and '%s.%s' % (node.module, alias.name)
                    not in SHARED_PRIVATE
                ):
                    yield node.lineno, '%s.%s' % (node.module, alias.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith('_')
            and not node.attr.startswith('__')
        ):
            yield node.lineno, '%s.%s' % (bound[node.value.id], node.attr)


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (or
    one importing itself): each is a cycle of imports."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    out = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _names_of(path: str) -> set:
    """The names a module assigns at its top level."""
    out = set()
    for node in _tree(path).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for t in (
                    target.elts if isinstance(target, ast.Tuple) else [target]
                ):
                    if isinstance(t, ast.Name):
                        out.add(t.id)
    return out


def _analysis_graph() -> dict:
    """Module -> the package's modules it imports, for the analyser
    (imports under ``if typing.TYPE_CHECKING`` too: a cycle of names
    is a cycle of the design)."""
    modules = dict(_modules())
    graph = {}
    for name, path in modules.items():
        if not _under(name, (ANALYSIS,)):
            continue
        deps = set()
        for _line, module in _imports(name, path):
            # "from instrument.analysis import x": the module x, not
            # the package's __init__
            if (
                module in modules
                and module != name
                and _under(module, (ANALYSIS,))
                and module != ANALYSIS
            ):
                deps.add(module)
        graph[name] = deps
    return graph


class LayersTest(testtools.TestCase):
    def test_runtime_imports_neither_analysis_nor_nova(self):
        proc = subprocess.run(
            [sys.executable, '-c', CHECK],
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)
        result = json.loads(proc.stdout)
        for name in (
            'runtime.lifecycle',
            'runtime.recorder',
            'runtime.wrappers',
            'patching.points',
            'patching.patcher',
            'sinks.file',
            'loaders.paste',
            'targets.base',
            'targets.nova',
            'targets.oslo_messaging',
            'targets.sqlalchemy',
            'targets.process',
        ):
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
            f.write(
                'def f():\n    from nova.tests import fixtures\n'
                'from ..analysis import pipeline\n'
            )
        found = [m for _line, m in _imports('instrument.db.mod', path)]
        self.assertIn('nova.tests.fixtures', found)
        self.assertIn('instrument.analysis.pipeline', found)


def _package_graph() -> dict:
    """Module -> the package's modules it imports, every import
    counted: at the top, inside a function (a lazy import that would
    hide a cycle) or under ``typing.TYPE_CHECKING``.  A package's
    ``__init__`` is no edge (``from instrument.runtime import x``
    names the module ``x``)."""
    modules = dict(_modules())
    packages = {n for n, p in modules.items() if p.endswith('__init__.py')}
    graph = {}
    for name, path in modules.items():
        graph[name] = {
            module
            for _line, module in _imports(name, path)
            if module in modules and module != name and module not in packages
        }
    return graph


class PackageGraphTest(testtools.TestCase):
    """The whole package, the runtime half included: no cycle, even
    through an import inside a function, and no module that uses a
    private name of another (issue 28)."""

    def test_no_import_cycle_even_lazily(self):
        graph = _package_graph()
        self.assertGreater(len(graph), 100)
        self.assertEqual([], _cycles(graph))

    def test_no_private_name_of_another_module(self):
        modules = dict(_modules())
        known = set(modules)
        found = []
        for name, path in modules.items():
            found.extend(
                '%s:%d uses %s' % (name, line, what)
                for line, what in _private_uses(name, path, _tree(path), known)
            )
        self.assertEqual([], found)


class AnalysisGraphTest(testtools.TestCase):
    """The analyser's modules: no cycle, nothing hidden in a function,
    no private name of another module."""

    def test_no_import_cycle(self):
        graph = _analysis_graph()
        self.assertGreater(len(graph), 20)
        self.assertEqual([], _cycles(graph))

    # (module, line): a third-party module imported where it is used,
    # named here.  clocks imports scipy for clouds of more than
    # clocks.DENSE_HOSTS hosts only: a quarter of a CPU second of every
    # report's serial part otherwise.
    LAZY = {
        'instrument.analysis.model.clocks': 'from scipy.sparse import csgraph'
    }

    def test_no_import_inside_a_function(self):
        found = []
        for name, path in _modules():
            if _under(name, (ANALYSIS,)):
                with open(path) as f:
                    text = f.read().splitlines()
                found.extend(
                    '%s:%d' % (name, line)
                    for line in _function_imports(_tree(path))
                    if text[line - 1].strip() != self.LAZY.get(name)
                )
        self.assertEqual([], found)

    def test_no_private_name_of_another_module(self):
        modules = dict(_modules())
        known = set(modules)
        found = []
        for name, path in modules.items():
            if _under(name, (ANALYSIS,)):
                found.extend(
                    '%s:%d uses %s' % (name, line, what)
                    for line, what in _private_uses(
                        name, path, _tree(path), known
                    )
                )
        self.assertEqual([], found)

    def test_the_span_layout_is_declared_once(self):
        # the positions of a span entry are model.spans'; every other
        # module names those it reads from there, by name
        spans = 'instrument.analysis.model.spans'
        found = []
        for name, path in _modules():
            if not _under(name, (ANALYSIS,)) or name == spans:
                continue
            for node in _tree(path).body:
                if not isinstance(node, ast.Assign):
                    continue
                for target in node.targets:
                    names = (
                        target.elts
                        if isinstance(target, ast.Tuple)
                        else [target]
                    )
                    for t in names:
                        if not (
                            isinstance(t, ast.Name) and t.id.startswith('S_')
                        ):
                            continue
                        value = node.value
                        if not (
                            isinstance(value, ast.Attribute)
                            and value.attr == t.id
                        ):
                            found.append(
                                '%s:%d %s' % (name, node.lineno, t.id)
                            )
        self.assertEqual([], found)
        self.assertIn('S_EV', _names_of(dict(_modules())[spans]))

    def test_the_checks_see_what_they_look_for(self):
        # the checks themselves, on a small made-up package
        self.assertEqual(
            [['a', 'b', 'c']],
            _cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}),
        )
        self.assertEqual([], _cycles({'a': {'b'}, 'b': set()}))
        tree = ast.parse(
            'import os\n'
            'def f():\n    from x import y\n'
            'class C:\n    import z\n'
        )
        self.assertEqual([3, 5], list(_function_imports(tree)))
        tree = ast.parse(
            'from instrument.analysis import load\n'
            'from instrument.analysis.load import _p\n'
            'load._q(load.r)\n'
        )
        uses = list(
            _private_uses(
                'instrument.analysis.x',
                'x.py',
                tree,
                {'instrument.analysis.load'},
            )
        )
        self.assertEqual(
            [
                (2, 'instrument.analysis.load._p'),
                (3, 'instrument.analysis.load._q'),
            ],
            uses,
        )
