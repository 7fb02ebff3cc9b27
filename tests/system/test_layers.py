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
"""What the wheel ships: the wheel built from this tree by pbr holds
the ``instrument`` package with its ``py.typed`` marker and nothing
else: no demo, no tests, no ``instrument-demo`` console script (the
layers of the package: ``tests/unit/test_layers.py``); and, built where
a C compiler is, the optional compiled helpers (``instrument._native``)."""

import ast
import os
import shutil
import subprocess
import sys
import zipfile

import fixtures
import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)


def _native_in_setup() -> list:
    """``_<name>`` of each extension that setup.py's ``NATIVE`` lists."""
    with open(os.path.join(ROOT, 'setup.py')) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [
            t.id for t in node.targets if isinstance(t, ast.Name)
        ] == ['NATIVE']:
            return sorted('_' + name for name in ast.literal_eval(node.value))
    raise AssertionError('setup.py has no NATIVE')


class WheelTest(testtools.TestCase):
    """The wheel an operator installs, built from this tree by pbr."""

    def _build(self) -> str:
        if shutil.which('git') is None:
            self.fail(
                'git is needed: pbr lists the files of the wheel from git'
            )
        work = self.useFixture(fixtures.TempDir()).path
        src = os.path.join(work, 'src')
        # The tree as git sees it (committed or not, ignored files left
        # out), in a repository of its own: the build writes nothing
        # into this checkout.
        listed = (
            subprocess.run(
                [
                    'git',
                    'ls-files',
                    '-z',
                    '--cached',
                    '--others',
                    '--exclude-standard',
                ],
                cwd=ROOT,
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .split('\0')
        )
        for rel in filter(None, listed):
            source = os.path.join(ROOT, rel)
            if not os.path.isfile(source):  # deleted, not yet committed
                continue
            target = os.path.join(src, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)
        git = [
            'git',
            '-c',
            'user.name=t',
            '-c',
            'user.email=t@example.com',
            '-c',
            'commit.gpgsign=false',
        ]
        for args in (
            ['init', '-q'],
            ['add', '-A'],
            ['commit', '-q', '-m', 'tree'],
        ):
            subprocess.run(
                git + args, cwd=src, check=True, capture_output=True
            )
        out = os.path.join(work, 'wheel')
        env = dict(os.environ)
        env.pop('PBR_VERSION', None)
        proc = subprocess.run(
            [
                sys.executable,
                '-m',
                'pip',
                'wheel',
                '--no-deps',
                '--no-build-isolation',
                '--no-index',
                '-q',
                '-w',
                out,
                src,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        wheels = [n for n in os.listdir(out) if n.endswith('.whl')]
        self.assertEqual(1, len(wheels), wheels)
        return os.path.join(out, wheels[0])

    def test_the_wheel_ships_the_package_and_no_demo(self):
        with zipfile.ZipFile(self._build()) as whl:
            names = whl.namelist()
            entry_points = next(
                whl.read(n).decode()
                for n in names
                if n.endswith('.dist-info/entry_points.txt')
            )
        tops = {
            n.split('/')[0]
            for n in names
            if not n.split('/')[0].endswith('.dist-info')
        }
        self.assertEqual({'instrument'}, tops)
        self.assertIn('instrument/py.typed', names)
        # the JSON report's schema, for tools that read reports
        self.assertIn('instrument/analysis/render/report.schema.json', names)
        self.assertIn('instrument/analysis/pipeline.py', names)
        self.assertEqual(
            [], [n for n in names if 'demo' in n or 'synthetic' in n]
        )
        self.assertIn('instrument-report', entry_points)
        self.assertNotIn('instrument-demo', entry_points)

    def test_the_wheel_ships_the_compiled_helpers(self):
        # Optional (a host without a compiler builds a wheel without
        # them), so they are looked for where a compiler is, and
        # always under CI=true.
        if os.environ.get('CI') != 'true' and not shutil.which('cc'):
            self.skipTest('no C compiler: the wheel is pure Python')
        with zipfile.ZipFile(self._build()) as whl:
            names = whl.namelist()
        native = sorted(
            n.split('/')[-1].split('.')[0]
            for n in names
            if n.startswith('instrument/_native/') and n.endswith('.so')
        )
        self.assertEqual(_native_in_setup(), native, names)
