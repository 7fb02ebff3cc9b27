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
"""The switch of the optional compiled helpers (instrument._native)."""

import os
import subprocess
import sys

import testtools

from instrument import _native

_LOAD = (
    'from instrument import _native; '
    'print(_native.PURE_PYTHON, _native.load("__init__") is None)'
)


def _run(value):
    env = {'PATH': '/usr/bin:/bin'}
    if value is not None:
        env['INSTRUMENT_PURE_PYTHON'] = value
    env['PYTHONPATH'] = os.pathsep.join(sys.path)
    return subprocess.run(
        [sys.executable, '-c', _LOAD],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


class NativeSwitchTest(testtools.TestCase):
    def test_a_module_not_built_loads_as_none(self):
        self.assertIsNone(_native.load('_no_such_extension'))

    def test_the_environment_turns_compiled_helpers_off(self):
        # A module that imports (the package itself) stands in for a
        # built extension: loaded unless INSTRUMENT_PURE_PYTHON is set.
        self.assertEqual(['False', 'False'], _run(None))
        self.assertEqual(['False', 'False'], _run('0'))
        self.assertEqual(['True', 'True'], _run('1'))
