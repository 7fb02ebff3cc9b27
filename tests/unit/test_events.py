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
"""The event table (``instrument.events``) against the source: every
event written anywhere in ``instrument/`` is declared, by the module
that writes it, and every declared event is written.

An event is written where the runtime's source passes it to the
recorder (``begin``, ``instant``, ``meta``, ``counter``, ``complete``,
a wait's ``record``...) or names it as a span point's event
(``PatchPoint(module, target, event, ...)``, HOOK, REPLACE and LISTEN
points recording nothing); the nova target's step points are generated
from the operation catalogue, so theirs are read from its points.
"""

import ast
import importlib
import os

import testtools

from instrument import catalogue
from instrument import events
from instrument import schema
from instrument.patching import points as points_mod
from instrument.targets import nova

ROOT = os.path.join(os.path.dirname(__file__), '..', '..', 'instrument')
# Not the runtime: the analyser, the command line, and the contract
# (which declares events, writes none).
SKIP = ('analysis', 'cmd')
CONTRACT = ('schema.py', 'events.py', 'catalogue.py')
# The recorder's calls that write an event named by their first
# argument.
WRITERS = frozenset(
    (
        'begin',
        'instant',
        'meta',
        'counter',
        'complete',
        'record',
        '_instant',
        'span',
    )
)
POINTS = frozenset(('P', 'PatchPoint'))
SILENT_KINDS = frozenset(('HOOK', 'REPLACE', 'LISTEN'))


def _runtime_files():
    for top, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(top, ROOT)
        if rel.split(os.sep)[0] in SKIP:
            dirs[:] = []
            continue
        for name in sorted(files):
            if name.endswith('.py') and not (rel == '.' and name in CONTRACT):
                yield os.path.join(top, name)


def _module_of(path: str) -> str:
    rel = os.path.relpath(path, os.path.join(ROOT, '..'))
    name = rel[:-3].replace(os.sep, '.')
    return name[: -len('.__init__')] if name.endswith('.__init__') else name


def _aliases(tree: ast.Module, module: str) -> dict:
    """Local name -> the module it imports."""
    found = {}
    package = module.rsplit('.', 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found[a.asname or a.name.split('.')[0]] = (
                    a.name if a.asname else a.name.split('.')[0]
                )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                base = '.'.join(
                    package.split('.')[
                        : len(package.split('.')) - node.level + 1
                    ]
                    + ([base] if base else [])
                )
            for a in node.names:
                found[a.asname or a.name] = base + '.' + a.name
    return found


def _value(node, module, aliases):
    """The string ``node`` stands for: a literal, a constant of the
    module, or ``alias.NAME`` of a module it imports; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        value = getattr(importlib.import_module(module), node.id, None)
        return value if isinstance(value, str) else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        target = aliases.get(node.value.id)
        if target is None:
            return None
        try:
            owner = importlib.import_module(target)
        except ImportError:
            return None
        value = getattr(owner, node.attr, None)
        return value if isinstance(value, str) else None
    return None


def _called(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _silent(node: ast.Call) -> bool:
    for kw in node.keywords:
        if kw.arg == 'kind':
            value = kw.value
            name = (
                value.attr
                if isinstance(value, ast.Attribute)
                else (value.id if isinstance(value, ast.Name) else None)
            )
            return name in SILENT_KINDS
    return False


def written_in(path: str) -> set:
    """The events the module at ``path`` writes (see module doc)."""
    module = _module_of(path)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    aliases = _aliases(tree, module)
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = _called(node)
        arg = None
        if called in POINTS and not _silent(node):
            arg = (
                node.args[2]
                if len(node.args) > 2
                else next(
                    (kw.value for kw in node.keywords if kw.arg == 'event'),
                    None,
                )
            )
        elif called in WRITERS and node.args:
            arg = node.args[0]
        if arg is None:
            continue
        value = _value(arg, module, aliases)
        if value:
            found.add(value)
    return found


def written() -> dict:
    """event -> the modules that write it."""
    found: dict = {}
    for path in _runtime_files():
        for ev in written_in(path):
            found.setdefault(ev, set()).add(_module_of(path))
    # the nova target's step points, generated from the catalogue
    for point in nova.points() + nova.release_points('29.4.0'):
        if point.kind == points_mod.SPAN:
            found.setdefault(point.event, set()).add(nova.__name__)
    return found


def _within(module: str, emitter: str) -> bool:
    return module == emitter or module.startswith(emitter + '.')


class EventTableTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.written = written()

    def test_every_event_written_is_declared_by_its_writer(self):
        for ev, modules in sorted(self.written.items()):
            self.assertIn(
                ev,
                events.BY_NAME,
                '%s (written by %s) is not in the event table'
                % (ev, ', '.join(sorted(modules))),
            )
            emitter = events.BY_NAME[ev].emitter
            for module in modules:
                self.assertTrue(
                    _within(module, emitter),
                    '%s is written by %s, declared by %s'
                    % (ev, module, emitter),
                )

    def test_every_declared_event_is_written(self):
        self.assertEqual([], sorted(set(events.BY_NAME) - set(self.written)))

    def test_each_event_declared_once(self):
        names = [e.name for e in events.TABLE]
        self.assertEqual(sorted(set(names)), sorted(names))

    def test_schema_events_are_the_table(self):
        self.assertEqual(
            {e.name: e.component for e in events.TABLE}, schema.EVENTS
        )
        for name in dir(schema):
            if name.startswith('EV_'):
                self.assertIn(getattr(schema, name), events.BY_NAME, name)

    def test_the_steps_are_declared_by_the_catalogue(self):
        for step in catalogue.STEPS:
            self.assertEqual(events.NOVA, events.BY_NAME[step.event].emitter)
            self.assertEqual(
                step.charged_to, events.BY_NAME[step.event].component
            )

    def test_the_scan_sees_what_it_looks_for(self):
        # a literal, a module constant and a schema constant passed to
        # the recorder, a span point's event; not a HOOK's name
        path = os.path.join(
            self.useFixture(__import__('fixtures').TempDir()).path, 'probe.py'
        )
        with open(path, 'w') as f:
            f.write(
                'from instrument import schema\n'
                'from instrument import points\n'
                'def f(rec):\n'
                "    rec.begin('x.literal')\n"
                '    rec.counter(schema.EV_SQL_AGG, {})\n'
                "    points.PatchPoint('m', 't', 'x.span', 'api')\n"
                "    points.PatchPoint('m', 't', 'x.hook',\n"
                '                      kind=points.HOOK)\n'
            )
        tree = ast.parse(open(path).read())
        aliases = _aliases(tree, 'probe')
        self.assertEqual('instrument.schema', aliases['schema'])
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = _called(node)
                if called in POINTS and not _silent(node):
                    found.add(node.args[2].value)
                elif called in WRITERS:
                    found.add(
                        _value(node.args[0], 'instrument.schema', aliases)
                    )
        self.assertEqual({'x.literal', 'sql.agg', 'x.span'}, found)
