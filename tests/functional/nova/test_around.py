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
"""Around nova on real nova: placement calls through keystoneauth1 as
spans under the boot's request, a compute periodic task, resource
samples.

nova's functional PlacementFixture serves placement in-process behind
wsgi-intercept at the requests level, so nova's report client goes
through a real keystoneauth1 ``Session.request``: those calls are
``ksa.request`` spans.  neutron's are too, the demo cloud serving the
NeutronFixture to nova's own client over HTTP (test_services).
nova's GlanceFixture replaces the image service itself, so no glance
call reaches keystoneauth1 in these tests.
"""

from keystonemiddleware import auth_token
from nova import context as nova_context
import testtools
import webob

from instrument.analysis import pipeline
from instrument.patching import patcher as patcher_mod
from instrument.runtime import lifecycle
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.targets import keystoneauth
from tests.functional.nova import base
from tests.unit import base as unit_base


class AroundTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def test_boot_shows_placement_calls_under_its_request(self):
        uuid, req, spans, calls = self.boot_calls()
        self.assertTrue(calls, 'no ksa.request under %s' % req)
        by_svc = {}
        for call in calls:
            self.assertEqual('placement', call['attrs']['service_type'], call)
            self.assertNotIn('?', call['attrs']['route'])
            self.assertNotIn(uuid, call['attrs']['route'])
            by_svc.setdefault(call['svc'], []).append(
                (
                    call['attrs']['method'],
                    call['attrs']['route'],
                    call['attrs']['status'],
                )
            )
        # The scheduler asks for candidates and claims.
        self.assertIn(
            ('GET', '/allocation_candidates', 200), by_svc['scheduler']
        )
        self.assertIn(('PUT', '/allocations/{id}', 204), by_svc['scheduler'])
        [select] = spans.done('scheduler.select_destinations', inst=uuid)
        parents = {r['span']: r for r in spans.records if r.get('span')}
        for call in calls:
            if call['svc'] != 'scheduler':
                continue
            # under select_destinations, through its sub-spans
            node = call
            while node is not None and node['span'] != select['span']:
                node = parents.get(node.get('parent'))
            self.assertIsNotNone(node, call)
        report = pipeline.analyse([self.span_dir], pipeline.Options())
        rows = [
            r
            for r in report['services']
            if r['operation'] == 'boot'
            and r['route'] == '/allocation_candidates'
        ]
        self.assertEqual(1, rows[0]['count'])
        self.assertIn(req, rows[0]['requests'])

    def test_compute_periodic_task_and_samples(self):
        server = self.boot()
        self.spans(until=lambda s: s.done('compute.build', inst=server['id']))
        manager = self.compute.manager
        # Every task due now, as if its spacing had passed.
        manager._periodic_last_run = dict.fromkeys(manager._periodic_last_run)
        manager.run_periodic_tasks(nova_context.get_admin_context())
        lifecycle.active().buffer.drain()
        spans = self.spans(until=lambda s: s.done('periodic.task'))
        tasks = {r['attrs']['task'] for r in spans.done('periodic.task')}
        self.assertIn('ComputeManager.update_available_resource', tasks)
        samples = [r for r in spans.records if r['ev'] == 'process.sample']
        self.assertTrue(samples)
        attrs = samples[-1]['attrs']
        self.assertGreater(attrs['rss_kb'], 10 * 1024)
        self.assertGreater(attrs['threads'], 0)
        report = pipeline.analyse([self.span_dir], pipeline.Options())
        self.assertIn(
            'ComputeManager.update_available_resource',
            {m['task'] for m in report['resources']['periodic']},
        )


class KeystoneMiddlewareTest(testtools.TestCase):
    """The api.auth_token point on the keystonemiddleware nova's
    requirements install (nova's functional cloud runs without it)."""

    def test_token_validation_is_a_span(self):
        buf = unit_base.ListBuffer()
        recorder = recorder_mod.Recorder(
            buf, process.ProcessIdentity.create('nova-api', 'ctl')
        )
        patcher = patcher_mod.Patcher(
            list(keystoneauth.AUTH_TOKEN_POINTS),
            recorder,
            'keystonemiddleware',
        )
        patcher.apply()
        self.addCleanup(patcher.remove)
        self.assertEqual(
            ['keystonemiddleware.auth_token:AuthProtocol.process_request'],
            patcher.banner()['patched'],
        )

        def app(environ, start_response):
            start_response('200 OK', [])
            return [b'ok']

        middleware = auth_token.AuthProtocol(
            app,
            {
                'delay_auth_decision': 'true',
                'www_authenticate_uri': 'http://127.0.0.1:9/identity',
            },
        )
        resp = webob.Request.blank('/v2.1/servers').get_response(middleware)
        self.assertEqual(200, resp.status_int)
        [span] = [r for r in buf.dicts() if r['ev'] == 'api.auth_token']
        self.assertEqual(('api', 'ok'), (span['svc'], span['st']))
