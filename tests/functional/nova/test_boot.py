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
"""Boots through real nova, asserted from the written span files."""

from tests.functional.nova import base


def _build_done(uuid, count=1):
    def check(spans):
        return len(spans.done('compute.build', inst=uuid)) >= count

    return check


class BootChainTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(
        computes=('host1', 'host2'), flush_interval=0.05
    )

    def test_each_boot_has_the_full_chain_under_one_request_id(self):
        servers = [self.boot(), self.boot()]
        spans = self.spans(
            until=lambda s: all(
                _build_done(server['id'])(s) for server in servers
            )
        )
        for server in servers:
            uuid = server['id']
            [create] = spans.done('api.compute.create', inst=uuid)
            req = create['req']
            self.assertTrue(req.startswith('req-'), req)
            self.assertEqual('api', create['svc'])
            # The HTTP span of the same request, from the paste filter.
            [http] = [
                r
                for r in spans.done('api.request', req=req)
                if r['attrs']['method'] == 'POST'
            ]
            self.assertEqual('/v2.1/servers', http['attrs']['route'])
            self.assertEqual(202, http['attrs']['status'])
            self.assertEqual(http['span'], create['parent'])
            # conductor -> scheduler -> compute, one request id.
            [conduct] = spans.done(
                'conductor.schedule_and_build_instances', inst=uuid
            )
            [select] = spans.done('scheduler.select_destinations', inst=uuid)
            [decide] = spans.done('conductor.schedule', inst=uuid)
            [build] = spans.done('compute.build', inst=uuid)
            for rec in (conduct, select, decide, build):
                self.assertEqual(req, rec['req'], rec['ev'])
            self.assertEqual('conductor', conduct['svc'])
            self.assertEqual('scheduler', select['svc'])
            # The scheduler's DB refresh: the compute nodes, then each
            # host's state (its instances read when no report came),
            # both in select_destinations, one host state per compute.
            [nodes] = spans.done('scheduler.host_states', req=req)
            [update] = spans.done('scheduler.host_states.update', req=req)
            self.assertEqual(
                (2, 2), (nodes['attrs']['count'], update['attrs']['count'])
            )
            for rec in (nodes, update):
                self.assertTrue(self._within(spans, rec, select), rec)
            self.assertEqual('compute', build['svc'])
            # The host the scheduler selected is the host that built it.
            host = server['OS-EXT-SRV-ATTR:host']
            self.assertEqual([host], select['attrs']['selected'])
            self.assertEqual([host], decide['attrs']['selected'])
            self.assertEqual(host, build['host'])
            self.assertEqual('active', build['attrs']['outcome'])
            self.assertEqual(1, build['attrs']['attempt'])
            # The build's stages, on the same host.
            for stage in ('compute.claim', 'compute.spawn'):
                [rec] = spans.done(stage, inst=uuid)
                self.assertEqual(host, rec['host'], stage)
                self.assertEqual('ok', rec['st'], stage)
            # Every hop has a send and a receive, linked by span id.
            self._assert_hop(
                spans,
                create,
                'rpc.cast',
                'schedule_and_build_instances',
                'conductor',
            )
            self._assert_hop(
                spans, decide, 'rpc.call', 'select_destinations', 'scheduler'
            )
            self._assert_hop(
                spans,
                conduct,
                'rpc.cast',
                'build_and_run_instance',
                'compute',
                server=host,
            )
            # The build thread carries the span of the RPC method.
            [entry] = spans.done('compute.build_and_run_instance', inst=uuid)
            self.assertEqual(entry['span'], build['parent'])

    def _assert_hop(self, spans, caller, ev, method, svc, server=None):
        sends = [
            r
            for r in spans.done(ev, req=caller['req'])
            if r['attrs']['method'] == method
        ]
        self.assertEqual(1, len(sends), (ev, method))
        [send] = sends
        self.assertTrue(
            self._within(spans, send, caller),
            '%s not inside %s' % (ev, caller['ev']),
        )
        if server is not None:
            self.assertEqual(server, send['attrs']['server'])
        [recv] = spans.received(send)
        self.assertEqual(method, recv['attrs']['method'])
        self.assertEqual(svc, recv['svc'])
        self.assertEqual(caller['req'], recv['req'])
        self.assertGreaterEqual(recv['ts'], send['ts'])
        if ev == 'rpc.call':
            self.assertLessEqual(
                recv['ts'] + recv['dur_us'], send['ts'] + send['dur_us']
            )

    @staticmethod
    def _within(spans, rec, ancestor):
        parent = rec.get('parent')
        while parent:
            if parent == ancestor['span']:
                return True
            records = [
                r for r in spans.by_span.get(parent, ()) if r['ph'] == 'X'
            ]
            parent = records[0].get('parent') if records else None
        return False


class SpawnFailureTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(
        driver='fake.FakeBuildAbortDriver', flush_interval=0.05
    )

    def test_failed_spawn_is_a_failed_lifecycle_with_its_class(self):
        server = self.boot(expected_state='ERROR')
        uuid = server['id']
        spans = self.spans(until=_build_done(uuid))
        [build] = spans.done('compute.build', inst=uuid)
        self.assertEqual('failed', build['attrs']['outcome'])
        [spawn] = spans.done('compute.spawn', inst=uuid)
        self.assertEqual('error', spawn['st'])
        self.assertEqual(
            'nova.exception.BuildAbortException', spawn['err']['cls']
        )
        [attempt] = spans.done('compute.build_and_run', inst=uuid)
        self.assertEqual(
            'nova.exception.BuildAbortException', attempt['err']['cls']
        )
        self.assertEqual(build['req'], spawn['req'])


class RescheduleTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(
        driver='fake.FakeRescheduleDriver',
        computes=('host1', 'host2'),
        flush_interval=0.05,
    )

    def test_reschedule_gives_two_attempts_under_one_request(self):
        server = self.boot()
        uuid = server['id']
        spans = self.spans(until=_build_done(uuid, 2))
        builds = sorted(
            spans.done('compute.build', inst=uuid), key=lambda r: r['ts']
        )
        self.assertEqual(
            ['rescheduled', 'active'], [b['attrs']['outcome'] for b in builds]
        )
        self.assertEqual([1, 2], [b['attrs']['attempt'] for b in builds])
        self.assertNotEqual(builds[0]['host'], builds[1]['host'])
        self.assertEqual(server['OS-EXT-SRV-ATTR:host'], builds[1]['host'])
        [first, retry] = builds
        self.assertEqual(first['req'], retry['req'])
        [again] = spans.done('conductor.build_instances', inst=uuid)
        self.assertEqual(2, again['attrs']['attempt'])
        self.assertTrue(again['attrs']['reschedule'])
        self.assertEqual(first['req'], again['req'])
        [failed] = spans.done('compute.build_and_run', inst=uuid, st='error')
        self.assertEqual(
            'nova.exception.RescheduledException', failed['err']['cls']
        )


class NoValidHostTest(base.InstrumentedCloud):
    def test_no_valid_host_is_a_scheduler_failure(self):
        flavor = self._create_flavor(
            memory_mb=512, vcpu=1, disk=100000, ephemeral=0
        )
        server = self.boot(flavor_id=flavor, expected_state='ERROR')
        uuid = server['id']
        spans = self.spans(
            until=lambda s: s.done('conductor.bury_in_cell0', inst=uuid)
        )
        [select] = spans.done('scheduler.select_destinations', inst=uuid)
        self.assertEqual('error', select['st'])
        self.assertEqual('nova.exception.NoValidHost', select['err']['cls'])
        [bury] = spans.done('conductor.bury_in_cell0', inst=uuid)
        self.assertEqual('nova.exception.NoValidHost', bury['attrs']['reason'])
        self.assertEqual(select['req'], bury['req'])
        self.assertEqual([], spans.done('compute.build', inst=uuid))
