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
"""``pip install openstack-instrument`` without extras, and the demo
without nova (issue 14, item 1): one line saying what to install, a
non-zero exit status, no traceback.

A real virtual environment, made in the test's temporary directory: the
wheels of this tree (the library's and the demo's, built by pbr) are
installed into it by pip, without their dependencies; the library's
requirements (``requirements.txt``) are this test environment's own
installed distributions, linked into the new environment's
site-packages, except the ``report`` extra's (NumPy, SciPy, msgspec;
orjson is a requirement) and nova, which the test environment does not
have.  The console scripts are the ones pip writes.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import fixtures
import testtools

from instrument.cmd import report

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
)
# Top-level names in site-packages the new environment must not see:
# the report extra, and this tree installed in development mode.
LEFT_OUT = re.compile(
    r'^(numpy|scipy|msgspec|openstack_instrument|'
    r'__editable__)[-_.]|^(numpy|scipy|msgspec)$'
)


def build_wheel(src_dir: str, work: str) -> str:
    """The wheel pbr builds from ``src_dir`` (a directory of this git
    tree): its files as git lists them, committed in a repository of
    their own (pbr takes the file list and version from git)."""
    listed = (
        subprocess.run(
            [
                'git',
                'ls-files',
                '-z',
                '--cached',
                '--others',
                '--exclude-standard',
                '--',
                '.',
            ],
            cwd=src_dir,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split('\0')
    )
    copy = os.path.join(work, 'src-' + os.path.basename(src_dir))
    for rel in filter(None, listed):
        source = os.path.join(src_dir, rel)
        if not os.path.isfile(source):  # deleted, not yet committed
            continue
        target = os.path.join(copy, rel)
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
    for args in (['init', '-q'], ['add', '-A'], ['commit', '-q', '-m', 't']):
        subprocess.run(git + args, cwd=copy, check=True, capture_output=True)
    out = os.path.join(work, 'wheels')
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
            copy,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if proc.returncode:
        raise RuntimeError(proc.stdout + proc.stderr)
    name = os.path.basename(src_dir.rstrip('/'))
    for wheel in sorted(os.listdir(out)):
        if wheel.endswith('.whl') and ('demo' in wheel) == (name == 'demo'):
            return os.path.join(out, wheel)
    raise RuntimeError('no wheel in %s' % out)


def make_env(work: str, wheels: list) -> str:
    """A virtual environment with ``wheels`` installed and this
    environment's other distributions linked in; returns its bin/."""
    env_dir = os.path.join(work, 'venv')
    subprocess.run(
        [sys.executable, '-m', 'venv', '--without-pip', env_dir],
        check=True,
        capture_output=True,
        timeout=120,
    )
    python = os.path.join(env_dir, 'bin', 'python')
    site = subprocess.run(
        [
            python,
            '-c',
            'import sysconfig; print(sysconfig.get_paths()["purelib"])',
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    mine = sysconfig.get_paths()['purelib']
    for name in os.listdir(mine):
        if (
            LEFT_OUT.search(name)
            or name.endswith('.pth')
            and 'instrument' in name
            or name == '__pycache__'
        ):
            continue
        os.symlink(os.path.join(mine, name), os.path.join(site, name))
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'pip',
            '--python',
            python,
            'install',
            '--no-deps',
            '--no-index',
            '-q',
        ]
        + wheels,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode:
        raise RuntimeError(proc.stdout + proc.stderr)
    return os.path.join(env_dir, 'bin')


class WithoutExtrasTest(testtools.TestCase):
    """The console scripts of a ``pip install`` without extras."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = fixtures.TempDir()
        cls.tmp.setUp()
        work = cls.tmp.path
        wheels = [
            build_wheel(ROOT, work),
            build_wheel(os.path.join(ROOT, 'demo'), work),
        ]
        cls.bin = make_env(work, wheels)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanUp()
        super().tearDownClass()

    def run_script(self, *argv) -> str:
        """The one line a script writes when it cannot run; it exits
        with status 1 and writes nothing else."""
        proc = subprocess.run(
            [os.path.join(self.bin, argv[0])] + list(argv[1:]),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.useFixture(fixtures.TempDir()).path,
        )
        self.assertEqual(1, proc.returncode, proc.stdout + proc.stderr)
        self.assertEqual('', proc.stdout)
        lines = proc.stderr.splitlines()
        self.assertEqual(1, len(lines), proc.stderr)
        return lines[0]

    def test_the_environment_is_what_pip_install_makes(self):
        python = os.path.join(self.bin, 'python')
        probe = (
            'import importlib.util, json, instrument, oslo_config, '
            'orjson; print(json.dumps([instrument.__file__, '
            '[importlib.util.find_spec(m) is not None for m in '
            '("numpy", "scipy", "msgspec", "nova")]]))'
        )
        proc = subprocess.run(
            [python, '-c', probe],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.useFixture(fixtures.TempDir()).path,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)
        where, found = json.loads(proc.stdout)
        self.assertFalse(where.startswith(ROOT), where)
        self.assertEqual([False] * 4, found)

    def test_report_names_the_extra(self):
        spans = self.useFixture(fixtures.TempDir()).path
        for argv in (
            ('instrument-report', spans),
            ('instrument-report', 'compare', spans, spans),
        ):
            line = self.run_script(*argv)
            self.assertTrue(
                line.startswith('instrument-report: error: '), line
            )
            self.assertIn('numpy', line)
            self.assertIn(report.INSTALL_HINT, line)

    def test_report_help_needs_no_extra(self):
        proc = subprocess.run(
            [os.path.join(self.bin, 'instrument-report'), '--help'],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.useFixture(fixtures.TempDir()).path,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertIn('--since', proc.stdout)

    def test_demo_without_nova_names_tox_e_demo(self):
        line = self.run_script('instrument-demo', '--servers', '1')
        self.assertTrue(line.startswith('instrument-demo: error: '), line)
        self.assertIn("nova's functional test package", line)
        self.assertIn('tox -e demo', line)
        self.assertIn('requirements/nova.txt', line)
