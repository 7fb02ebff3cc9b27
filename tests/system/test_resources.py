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
"""``process.sample`` in a forked child: the child samples itself (a
child process; the rest: ``tests/unit/test_resources.py``)."""

import json
import os

from instrument import schema
from tests.unit import base

FORKED = '''
import json
import os
import sys
import time

from oslo_config import cfg

import instrument
from instrument import opts
from instrument.targets import process
from instrument.targets import resources

out = sys.argv[1]
conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in (('enabled', True), ('output_dir', out),
                   ('flush_interval', 0.05),
                   ('resource_sample_interval', 0.1)):
    conf.set_override(key, value, 'instrument')
rt = instrument.setup(conf, 'nova-conductor', targets=[
    resources.ResourcesTarget(), process.ProcessTarget()])
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    rt.recorder.counter('child.hello', {})
    blob = bytearray(64 * 1024 * 1024)  # the child's own RSS
    blob[::4096] = b'x' * len(blob[::4096])
    time.sleep(0.5)
    os._exit(0)
os.waitpid(pid, 0)
instrument.teardown()
print(json.dumps({'parent': os.getpid(), 'child': pid}))
'''


class ForkTest(base.TestCase):
    def test_child_samples_itself(self):
        out = os.path.join(self.tmp, 'spans')
        done = self.run_script(FORKED, out)
        self.assertEqual(0, done.returncode, done.stderr)
        pids = json.loads(done.stdout)
        samples = {}
        for recs in base.read_span_files(out).values():
            for r in recs:
                if r['ev'] == schema.EV_PROCESS_SAMPLE:
                    samples.setdefault(r['pid'], []).append(r['attrs'])
        self.assertIn(pids['parent'], samples)
        self.assertIn(pids['child'], samples)
        self.assertGreaterEqual(len(samples[pids['child']]), 2)
        self.assertGreater(
            max(s['rss_kb'] for s in samples[pids['child']]),
            max(s['rss_kb'] for s in samples[pids['parent']]) + 32 * 1024,
        )
