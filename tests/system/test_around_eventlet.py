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
"""Issue 21's runtime under eventlet, in a monkey-patched subprocess:
keystoneauth1 calls from greenthreads as spans of their own request,
a read time-out, and resource samples that count parked greenthreads
while the hub keeps running."""

import json

from tests.unit import base

GREEN_KSA = '''
import eventlet
eventlet.monkey_patch()

import http.server
import json
import sys
import time

from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import session as ksa_session
from oslo_config import cfg

import instrument
from instrument import opts
from instrument.runtime import tracer as tracer_mod
from instrument.targets import keystoneauth
from instrument.targets import resources


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith('/slow'):
            eventlet.sleep(1.0)
        try:
            self.send_response(200)
            self.send_header('Content-Length', '2')
            self.end_headers()
            self.wfile.write(b'{}')
        except OSError:
            pass


out = sys.argv[1]
conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in (('enabled', True), ('output_dir', out),
                   ('flush_interval', 0.05),
                   ('resource_sample_interval', 0.1)):
    conf.set_override(key, value, 'instrument')
rt = instrument.setup(conf, 'nova-compute', targets=[
    keystoneauth.KeystoneauthTarget(), resources.ResourcesTarget()])
server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
eventlet.spawn(server.serve_forever)
base = 'http://127.0.0.1:%d' % server.server_port
tracer = tracer_mod.Tracer(rt.recorder)


class Ctx:
    def __init__(self, n):
        self.request_id = 'req-green-%d' % n
        self.global_request_id = None


def work(n):
    sess = ksa_session.Session()
    rec = tracer.begin('compute.build', ctx=Ctx(n))
    try:
        if n == 0:
            try:
                sess.get(base + '/slow', timeout=0.2,
                         endpoint_filter={'service_type': 'image'})
            except ksa_exc.ConnectTimeout:
                pass
        else:
            sess.get(base + '/v2.0/ports/%d' % (1000 + n),
                     endpoint_filter={'service_type': 'network'})
    finally:
        tracer.end(rec)


ticks = [0]


def ticker():
    while True:
        ticks[0] += 1
        eventlet.sleep(0.01)


eventlet.spawn(ticker)
sleepers = [eventlet.spawn(eventlet.sleep, 30) for _ in range(50)]
pool = eventlet.GreenPool()
for n in range(8):
    pool.spawn(work, n)
pool.waitall()
eventlet.sleep(0.5)
instrument.teardown()
print(json.dumps({'ticks': ticks[0]}))
'''


class GreenKeystoneauthTest(base.TestCase):
    def test_greenthreads(self):
        out = self.tmp + '/spans'
        proc = self.run_script(GREEN_KSA, out, timeout=90)
        self.assertEqual(0, proc.returncode, proc.stderr)
        ticks = json.loads(proc.stdout)['ticks']
        records = [
            r for recs in base.read_span_files(out).values() for r in recs
        ]
        builds = {
            r['span']: r
            for r in records
            if r['ev'] == 'compute.build' and r['ph'] == 'X'
        }
        calls = [
            r for r in records if r['ev'] == 'ksa.request' and r['ph'] == 'X'
        ]
        self.assertEqual(8, len(calls))
        for call in calls:
            # each under its own greenthread's span and request
            self.assertEqual(builds[call['parent']]['req'], call['req'])
        failed = [c for c in calls if c['st'] == 'error']
        self.assertEqual(1, len(failed))
        self.assertEqual('req-green-0', failed[0]['req'])
        self.assertEqual('read_timeout', failed[0]['attrs']['failure'])
        self.assertEqual(
            {'/v2.0/ports/{id}'},
            {c['attrs']['route'] for c in calls if c['st'] == 'ok'},
        )
        samples = [r['attrs'] for r in records if r['ev'] == 'process.sample']
        self.assertTrue(samples)
        # the 50 sleepers (and the others) parked in the hub
        self.assertGreaterEqual(max(s['green'] for s in samples), 50)
        # the hub ran throughout (the sampler is on the writer's thread)
        self.assertGreater(ticks, 50)
