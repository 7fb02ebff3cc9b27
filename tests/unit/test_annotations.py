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
"""Public functions of the analyser and its commands carry type hints.

mypy (``tox -e mypy``) checks what the annotations say; this test keeps
every public function and method of ``instrument.analysis`` and
``instrument.cmd`` (their sub-packages too) annotated (parameters and
return), so that mypy has something to check.
"""

import ast
import os

import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
PACKAGES = ('instrument/analysis', 'instrument/cmd')


def _unannotated(path: str) -> list:
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    out = []

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                if not child.name.startswith('_'):
                    visit(child, prefix + child.name + '.')
            elif isinstance(child, ast.FunctionDef):
                if child.name.startswith('_') and child.name not in (
                    '__init__',
                    '__call__',
                ):
                    continue
                args = (
                    child.args.posonlyargs
                    + child.args.args
                    + child.args.kwonlyargs
                )
                missing = [
                    a.arg
                    for a in args
                    if a.annotation is None and a.arg not in ('self', 'cls')
                ]
                if child.returns is None:
                    missing.append('return')
                if missing:
                    out.append(
                        '%s:%d %s%s: %s'
                        % (
                            os.path.relpath(path, ROOT),
                            child.lineno,
                            prefix,
                            child.name,
                            ', '.join(missing),
                        )
                    )

    visit(tree, '')
    return out


class PublicAnnotationsTest(testtools.TestCase):
    def test_public_functions_are_annotated(self):
        found = []
        checked = 0
        for package in PACKAGES:
            for top, dirs, files in os.walk(os.path.join(ROOT, package)):
                dirs[:] = sorted(d for d in dirs if d != '__pycache__')
                for name in sorted(files):
                    if name.endswith('.py'):
                        checked += 1
                        found += _unannotated(os.path.join(top, name))
        self.assertGreater(checked, 40)
        self.assertEqual([], found)
