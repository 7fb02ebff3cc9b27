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
"""Failures that came from another service, in the failure table and
the services-called table: HTTP errors that the client raised itself
(neutronclient and nova's placement client ask keystoneauth1 not to)."""

import os

import fixtures
import testtools

from instrument.analysis import pipeline
from tests.unit.analysis import test_services

MS = test_services.MS
S = test_services.S
_ksa = test_services._ksa
NEUTRON_500 = 'neutronclient.common.exceptions.InternalServerError'


class ApiComputeCase(testtools.TestCase):
    """Span files of an api and a compute process written by hand."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.api = test_services.Writer(
            os.path.join(self.dir, 'api.jsonl'), 'ctl', 'api', 11
        )
        self.cmp = test_services.Writer(
            os.path.join(self.dir, 'cmp.jsonl'), 'cmp1', 'compute', 22
        )
        for w, name in ((self.api, 'nova-api'), (self.cmp, 'nova-compute')):
            w.rec(
                ph='M',
                ts=test_services.T0 - 20 * S,
                ev='process.start',
                attrs={'service': name},
            )

    def _report(self) -> dict:
        self.api.f.close()
        self.cmp.f.close()
        return pipeline.analyse([self.dir], pipeline.Options())


class ServiceFailureTest(ApiComputeCase):
    def _boot(self, req: str, at: int):
        """A boot's API side; returns its create span id."""
        root = self.api.span(
            'api.request',
            at,
            20 * MS,
            req=req,
            attrs={'method': 'POST', 'route': '/servers', 'status': 202},
        )
        return self.api.span(
            'api.compute.create', at + 1 * MS, 15 * MS, parent=root, req=req
        )

    def _failed_build(self, req, at, after=None):
        """A build whose network allocation failed after neutron answered
        the port creation with a 500 (``after``: a span of nova's own
        started under the allocation afterwards); the spawn, waiting on
        the allocation, raises the same exception."""
        create = self._boot(req, at)
        err = {'cls': NEUTRON_500, 'msg': 'HTTP 500'}
        build = self.cmp.span(
            'compute.build',
            at + 30 * MS,
            100 * MS,
            parent=create,
            req=req,
            st='error',
            err={'cls': 'nova.exception.BuildAbortException', 'msg': 'x'},
        )
        net = self.cmp.span(
            'compute.network',
            at + 31 * MS,
            20 * MS,
            parent=build,
            req=req,
            st='error',
            err=err,
        )
        # a 404 nova handled, then the port creation's 500
        self.cmp.span(
            'ksa.request',
            at + 32 * MS,
            2 * MS,
            parent=net,
            req=req,
            attrs=_ksa('network', 'GET', '/v2.0/ports/{id}', status=404),
        )
        self.cmp.span(
            'ksa.request',
            at + 35 * MS,
            5 * MS,
            parent=net,
            req=req,
            attrs=_ksa('network', 'POST', '/v2.0/ports', status=500),
        )
        if after:
            self.cmp.span(after, at + 42 * MS, 1 * MS, parent=net, req=req)
        self.cmp.span(
            'compute.spawn',
            at + 60 * MS,
            30 * MS,
            parent=build,
            req=req,
            st='error',
            err=err,
        )

    def test_neutron_500_is_a_neutron_row(self):
        self._failed_build('req-1', 0)
        report = self._report()
        rows = [f for f in report['failures'] if 'req-1' in f['requests']]
        # one row: the spawn's re-raise of the same exception is not
        # counted again
        self.assertEqual(1, len(rows), rows)
        [row] = rows
        self.assertEqual(
            (
                'network',
                'ksa.request',
                NEUTRON_500,
                'network POST /v2.0/ports: HTTP 500',
            ),
            (row['component'], row['ev'], row['cls'], row['message']),
        )
        by = {(r['method'], r['route']): r for r in report['services']}
        self.assertEqual(
            {'http_500': 1}, by[('POST', '/v2.0/ports')]['errors']
        )
        self.assertEqual(
            {'http_404': 1}, by[('GET', '/v2.0/ports/{id}')]['errors']
        )

    def test_nova_work_after_the_call_is_nova_row(self):
        # nova did more of its own after neutron's answer: the failure
        # is not put on neutron
        self._failed_build('req-1', 0, after='lock.acquire')
        report = self._report()
        components = {
            f['component']
            for f in report['failures']
            if 'req-1' in f['requests']
        }
        self.assertEqual({'compute'}, components)

    def test_handled_http_error_is_no_failure(self):
        create = self._boot('req-2', 0)
        build = self.cmp.span(
            'compute.build', 30 * MS, 50 * MS, parent=create, req='req-2'
        )
        self.cmp.span(
            'ksa.request',
            32 * MS,
            2 * MS,
            parent=build,
            req='req-2',
            attrs=_ksa('placement', 'PUT', '/allocations/{id}', status=409),
        )
        report = self._report()
        self.assertEqual(
            [], [f for f in report['failures'] if 'req-2' in f['requests']]
        )
        [row] = [
            r for r in report['services'] if r['route'] == '/allocations/{id}'
        ]
        self.assertEqual({'http_409': 1}, row['errors'])
