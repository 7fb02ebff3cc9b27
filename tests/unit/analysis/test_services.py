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
"""The analyser's services-called table, resources and periodic tasks."""

import json
import os
import re

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text

T0 = 1_700_000_000_000_000
MS = 1000
S = 1_000_000


class Writer:
    def __init__(self, path: str, host: str, svc: str, pid: int) -> None:
        self.f = open(path, 'w')
        self.base = {'v': 1, 'host': host, 'svc': svc, 'pid': pid}
        self.seq = 0
        self.spans = 0

    def rec(self, **kw) -> str:
        self.seq += 1
        rec = dict(self.base, seq=self.seq)
        rec.update(kw)
        self.f.write(json.dumps(rec) + '\n')
        return rec.get('span')

    def span(
        self,
        ev,
        start,
        dur,
        parent=None,
        req=None,
        st='ok',
        err=None,
        attrs=None,
        inst=None,
    ) -> str:
        self.spans += 1
        sid = '%08x%08x' % (self.base['pid'], self.spans)
        more = {'inst': inst} if inst else {}
        return self.rec(
            ph='X',
            ts=T0 + start,
            dur_us=dur,
            ev=ev,
            span=sid,
            parent=parent,
            req=req,
            st=st,
            err=err,
            attrs=attrs,
            **more,
        )

    def sample(
        self, at, user, system, rss_kb, pools=None, writer=None
    ) -> None:
        attrs = {
            'cpu_user_s': user,
            'cpu_sys_s': system,
            'rss_kb': rss_kb,
            'threads': 7,
            'green': None,
            'fds': 20,
            'pools': pools or {},
            'buf_fill': 3,
            'buf_size': 50000,
            'buf_drops': 0,
        }
        if writer is not None:
            attrs['writer_cpu_s'] = writer
        self.rec(ph='C', ts=T0 + at, ev='process.sample', attrs=attrs)


def _ksa(stype, method, route, status=200, **more):
    attrs = {
        'service_type': stype,
        'method': method,
        'route': route,
        'status': status,
        'attempts': 1,
    }
    attrs.update(more)
    return attrs


class ServicesReportTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        api = Writer(os.path.join(self.dir, 'api.jsonl'), 'ctl', 'api', 11)
        cmp_ = Writer(
            os.path.join(self.dir, 'cmp.jsonl'), 'cmp1', 'compute', 22
        )
        api.rec(
            ph='M',
            ts=T0 - 20 * S,
            ev='process.start',
            attrs={'service': 'nova-api'},
        )
        cmp_.rec(
            ph='M',
            ts=T0 - 20 * S,
            ev='process.start',
            attrs={'service': 'nova-compute'},
        )
        for n, req in enumerate(('req-1', 'req-2')):
            at = n * 200 * MS
            root = api.span(
                'api.request',
                at,
                100 * MS,
                req=req,
                attrs={'method': 'POST', 'route': '/servers', 'status': 202},
            )
            api.span(
                'api.auth_token', at + 1 * MS, 2 * MS, parent=root, req=req
            )
            create = api.span(
                'api.compute.create',
                at + 5 * MS,
                90 * MS,
                parent=root,
                req=req,
            )
            api.span(
                'ksa.request',
                at + 10 * MS,
                20 * MS,
                parent=create,
                req=req,
                attrs=_ksa('placement', 'GET', '/allocation_candidates'),
            )
            if req == 'req-1':
                api.span(
                    'ksa.request',
                    at + 40 * MS,
                    50 * MS,
                    parent=create,
                    req=req,
                    st='error',
                    err={
                        'cls': 'keystoneauth1.exceptions.connection.'
                        'ConnectTimeout',
                        'msg': 'network POST /v2.0/ports: read timeout',
                    },
                    attrs=_ksa(
                        'network',
                        'POST',
                        '/v2.0/ports',
                        status=None,
                        attempts=3,
                        failure='read_timeout',
                    ),
                )
            else:
                # cinder, by the alias type nova's cinder client uses
                api.span(
                    'ksa.request',
                    at + 40 * MS,
                    10 * MS,
                    parent=create,
                    req=req,
                    attrs=_ksa('volumev3', 'GET', '/volumes/{id}'),
                )
        # req-2's build on cmp1, while a periodic task runs there
        cmp_.span('compute.build', 220 * MS, 60 * MS, req='req-2')
        cmp_.span(
            'periodic.task',
            210 * MS,
            30 * MS,
            attrs={'task': 'ComputeManager.update_available_resource'},
        )
        # outside any request: a placement call
        cmp_.span(
            'ksa.request',
            160 * MS,
            10 * MS,
            attrs=_ksa(
                'placement', 'GET', '/resource_providers/{id}/inventories'
            ),
        )
        # compute: 0.5 then 1.0 cores busy; api idle
        for k, (user, system, rss) in enumerate(
            (
                (1.0, 0.0, 100 * 1024),
                (1.25, 0.25, 110 * 1024),
                (2.0, 0.5, 120 * 1024),
            )
        ):
            # the writer's CPU in the first two samples only (a final
            # sample taken by another thread has none)
            cmp_.sample(
                -2 * S + k * S // 5,
                user,
                system,
                rss,
                pools={'nova_cell1': [k, 0, 5]},
                writer=(0.05, 0.075, None)[k],
            )
            api.sample(-2 * S + k * S // 5, 0.5, 0.1, 80 * 1024)
        api.f.close()
        cmp_.f.close()
        self.report = pipeline.analyse([self.dir], pipeline.Options())

    def test_services_called(self):
        rows = self.report['services']
        kind = self.report['requests'][0]['kind']
        by = {
            (r['operation'], r['service'], r['method'], r['route']): r
            for r in rows
        }
        placement = by[(kind, 'placement', 'GET', '/allocation_candidates')]
        self.assertEqual(2, placement['count'])
        self.assertEqual(20 * MS, placement['p50_us'])
        self.assertEqual({}, placement['errors'])
        network = by[(kind, 'network', 'POST', '/v2.0/ports')]
        self.assertEqual({'read_timeout': 1}, network['errors'])
        self.assertEqual(2, network['retries'])
        self.assertEqual(['req-1'], network['requests'])
        auth = by[
            (kind, 'identity', '-', 'token validation (keystonemiddleware)')
        ]
        self.assertEqual(2, auth['count'])
        orphan = by[
            (
                '(no request)',
                'placement',
                'GET',
                '/resource_providers/{id}/inventories',
            )
        ]
        self.assertEqual(1, orphan['count'])
        self.assertIsNone(orphan['critical_share'])
        # network on the critical path of req-1: 50 of 200 ms of the
        # operation's two requests
        self.assertAlmostEqual(0.25, network['critical_share'])

    def test_failure_names_the_service(self):
        msgs = [
            f['message']
            for f in self.report['failures']
            if f['ev'] == 'ksa.request'
        ]
        self.assertEqual(['network POST /v2.0/ports: read timeout'], msgs)

    def test_resources(self):
        res = self.report['resources']
        compute = res['services']['compute']
        before = compute['phases']['before']
        self.assertAlmostEqual(5.0, before['cpu_cores']['peak'])
        self.assertAlmostEqual(3.75, before['cpu_cores']['mean'])
        self.assertAlmostEqual(120.0, before['rss_mb']['peak'])
        self.assertEqual(2, before['db_in_use_peak'])
        self.assertEqual(7, before['threads_peak'])
        self.assertEqual(
            0.0,
            res['services']['api']['phases']['before']['cpu_cores']['peak'],
        )
        [mark] = res['periodic']
        self.assertEqual(
            'ComputeManager.update_available_resource', mark['task']
        )
        # req-2 ran on cmp1 meanwhile; req-1 never ran there
        self.assertEqual(1, mark['overlapped'])
        self.assertEqual(['req-2'], mark['requests'])
        self.assertGreater(max(res['in_flight']), 0)
        # the writer's CPU at the last sample that has it, beside the
        # process's there (1.25 + 0.25 s)
        self.assertEqual(
            {'writer_cpu_s': 0.075, 'process_cpu_s': 1.5, 'processes': 1},
            compute['library'],
        )
        self.assertIsNone(res['services']['api']['library'])

    def test_text_and_html_carry_them(self):
        text = report_text.render(self.report)
        self.assertIn('Services called', text)
        self.assertIn('/v2.0/ports', text)
        self.assertIn('read_timeout 1', text)
        self.assertIn('Resources per service', text)
        self.assertIn('ComputeManager.update_available_resource', text)
        self.assertIn(
            "compute: 0.07 s of CPU in the library's writer "
            "thread of 1.50 s of the process (5.0%)",
            text,
        )
        page = report_html.render(self.report)
        self.assertIn('<h2>Services called</h2>', page)
        self.assertIn('<h2>Resources over time</h2>', page)
        self.assertIn('<polyline', page)

    def test_service_types_by_readable_name(self):
        # issue 32: the JSON keeps the type recorded, the text and HTML
        # tables name the service and its project
        kind = self.report['requests'][0]['kind']
        services = {
            (r['operation'], r['service']) for r in self.report['services']
        }
        self.assertIn((kind, 'volumev3'), services)
        self.assertIn((kind, 'network'), services)
        text = report_text.render(self.report)
        section = text.split('Services called')[1].split('\n\n')[0]
        self.assertIn('block-storage (cinder)', section)
        self.assertIn('network (neutron)', section)
        self.assertIn('identity (keystone)', section)
        self.assertNotIn('volumev3', section)
        page = report_html.render(self.report)
        section = page.split('<h2>Services called</h2>')[1].split('</table>')[
            0
        ]
        self.assertIn(
            '<td class="l" title="service type volumev3">'
            'block-storage (cinder)</td>',
            section,
        )
        self.assertIn('>network (neutron)</td>', section)
        self.assertIn('>placement</td>', section)

    def test_every_resource_chart_has_its_axes(self):
        # issue 32, item 8: a y axis with ticks and a unit, a hover value
        page = report_html.render(self.report)
        section = page.split('<h2>Resources over time</h2>')[1]
        section = section.split('<table')[0]
        svgs = re.findall(r'<svg .*?</svg>', section, re.S)
        # requests: in flight, latency; per service: CPU, RSS
        self.assertEqual(
            2 + 2 * len(self.report['resources']['services']), len(svgs)
        )
        titles = []
        for svg in svgs:
            # (an all-zero series: 0 and 1)
            self.assertGreaterEqual(svg.count('class="ytick"'), 2)
            self.assertGreaterEqual(svg.count('class="xtick"'), 3)
            titles += re.findall(r'class="ytitle"[^>]*>([^<]+)<', svg)
            self.assertIn('<circle class="hover"', svg)
        self.assertIn('CPU (% of one core)', titles)
        self.assertIn('RSS (MB)', titles)
        self.assertIn(
            '<title>ComputeManager.update_available_resource '
            '(periodic task on cmp1)',
            section,
        )


class ServiceComponentsTest(testtools.TestCase):
    """A call to another service is the component of its service type
    (issue 32, item 7): the scheduler's placement call is
    ``service.placement`` beside ``scheduler.placement``, not hidden
    under ``service``."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        sch = Writer(
            os.path.join(self.dir, 'sch.jsonl'), 'ctl', 'scheduler', 33
        )
        for n, req in enumerate(('req-1', 'req-2')):
            at = n * 200 * MS
            inst = ['0000000%d-0000-0000-0000-000000000000' % n]
            root = sch.span(
                'api.request',
                at,
                100 * MS,
                req=req,
                attrs={'method': 'POST', 'route': '/servers', 'status': 202},
            )
            create = sch.span(
                'api.compute.create',
                at + 1 * MS,
                95 * MS,
                parent=root,
                req=req,
                inst=inst,
            )
            cand = sch.span(
                'scheduler.placement.candidates',
                at + 5 * MS,
                40 * MS,
                parent=create,
                req=req,
            )
            # 30 of its 40 ms: the HTTP call to placement
            sch.span(
                'ksa.request',
                at + 10 * MS,
                30 * MS,
                parent=cand,
                req=req,
                attrs=_ksa('placement', 'GET', '/allocation_candidates'),
            )
            sch.span(
                'ksa.request',
                at + 50 * MS,
                10 * MS,
                parent=create,
                req=req,
                attrs=_ksa('volumev3', 'GET', '/volumes'),
            )
            # a call whose service type was not recorded
            sch.span(
                'ksa.request',
                at + 70 * MS,
                5 * MS,
                parent=create,
                req=req,
                attrs={'method': 'GET', 'route': '/x'},
            )
            sch.span(
                'compute.build',
                at + 80 * MS,
                10 * MS,
                parent=create,
                req=req,
                inst=inst,
                attrs={'outcome': 'active'},
            )
        sch.f.close()
        self.report = pipeline.analyse([self.dir], pipeline.Options())

    def test_components_by_service_type(self):
        for row in self.report['requests']:
            comp = row['components_us']
            self.assertEqual(30 * MS, comp['service.placement'])
            self.assertEqual(10 * MS, comp['scheduler.placement'])
            self.assertEqual(10 * MS, comp['service.block-storage'])
            self.assertEqual(5 * MS, comp['service'])
        self.assertEqual(
            {'success': 2},
            {k: v for k, v in self.report['summary']['states'].items() if v},
        )
        order = self.report['summary']['component_order']
        for name in (
            'service',
            'service.placement',
            'service.block-storage',
            'scheduler.placement',
        ):
            self.assertIn(name, order)

    def test_shown_and_defined(self):
        text = report_text.render(self.report)
        page = report_html.render(self.report)
        self.assertIn('  service.placement: HTTP calls to placement', text)
        self.assertIn('service.placement', page)
