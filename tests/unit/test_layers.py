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
"""The runtime half never imports the analysis half (nor nova)."""

import json
import subprocess
import sys

import testtools

CHECK = '''
import importlib
import json
import pkgutil
import sys

import instrument

# Every module a nova host loads: not the analyser, its commands, the
# demo (which needs nova's test package) or the otlp extra.
skip = ('instrument.analysis', 'instrument.cmd', 'instrument.demo',
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
                       if m.startswith('instrument.analysis')),
    'nova': sorted(m for m in sys.modules
                   if m == 'nova' or m.startswith('nova.')),
    'heavy': sorted(m for m in ('numpy', 'scipy', 'msgspec')
                    if m in sys.modules)}))
'''


class LayersTest(testtools.TestCase):

    def test_runtime_imports_neither_analysis_nor_nova(self):
        proc = subprocess.run([sys.executable, '-c', CHECK],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(0, proc.returncode, proc.stderr)
        result = json.loads(proc.stdout)
        self.assertIn('instrument.runtime', result['loaded'])
        self.assertIn('instrument.targets.nova', result['loaded'])
        self.assertEqual([], result['analysis'])
        self.assertEqual([], result['nova'])
        self.assertEqual([], result['heavy'])
