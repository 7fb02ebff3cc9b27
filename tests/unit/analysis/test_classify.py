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
"""Final-state rules, failure origins and message normalisation."""

import testtools

from instrument.analysis.model import classify
from instrument.analysis.model import spans as spans_mod


def span(
    ev,
    start,
    dur,
    parent=None,
    svc='conductor',
    host='ctl',
    st='ok',
    err=None,
    attrs=None,
    inst=('i1',),
    pid=1,
):
    return [
        ev,
        host,
        svc,
        pid,
        start,
        dur,
        parent,
        st if dur is not None else None,
        err,
        attrs,
        list(inst) if inst else None,
    ]


def state(spans):
    return classify.final_states(spans_mod.Tree(spans))


class NormaliserTest(testtools.TestCase):
    def test_variable_parts_replaced(self):
        norm = classify.Normaliser(['cmp-007', 'ctl-0'])
        self.assertEqual(
            'Binding failed for port <uuid> on <host> (<ip>), req '
            'req-<uuid>, took <n> s, id <hex>, x86_64 kept',
            norm(
                'Binding failed for port 3f1e2d3c-0000-4000-8000-'
                '123456789abc on cmp-007 (10.0.0.12:5672), req req-3f1e2d3'
                'c-0000-4000-8000-123456789abc, took 12.5 s, id '
                'deadbeef42, x86_64 kept'
            ),
        )
        self.assertEqual('', norm(None))

    def test_new_hosts_picked_up(self):
        norm = classify.Normaliser()
        self.assertEqual(
            'down: node12 after <n> s', norm('down: node12 after 3 s')
        )
        norm.add_hosts(['node12'])
        self.assertEqual('down: <host>', norm('down: node12'))


class FinalStateTest(testtools.TestCase):
    def test_success_and_rescheduled(self):
        spans = {
            'b1': span(
                'compute.build',
                0,
                10,
                svc='compute',
                attrs={'outcome': 'active'},
            )
        }
        self.assertEqual('success', state(spans)[0]['state'])
        spans['b0'] = span(
            'compute.build',
            -50,
            10,
            svc='compute',
            attrs={'outcome': 'rescheduled'},
        )
        row = state(spans)[0]
        self.assertEqual('rescheduled_success', row['state'])
        self.assertEqual(2, row['attempts'])

    def test_rescheduled_and_nothing_after_is_incomplete(self):
        spans = {
            'b0': span(
                'compute.build',
                0,
                10,
                svc='compute',
                host='cmp-1',
                attrs={'outcome': 'rescheduled'},
            )
        }
        row = state(spans)[0]
        self.assertEqual('incomplete', row['state'])
        self.assertEqual(
            {'ev': 'compute.build', 'host': 'cmp-1', 'open': False},
            row['stopped'],
        )

    def test_compute_failure_cause_is_deepest_error(self):
        err = {'cls': 'nova.exception.PortBindingFailed', 'msg': 'm'}
        spans = {
            'b': span(
                'compute.build',
                0,
                100,
                svc='compute',
                attrs={'outcome': 'failed'},
            ),
            'r': span(
                'compute.build_and_run',
                1,
                90,
                'b',
                svc='compute',
                st='error',
                err={'cls': 'BuildAbortException'},
            ),
            'n': span(
                'compute.network',
                2,
                50,
                'r',
                svc='compute',
                st='error',
                err=err,
            ),
        }
        row = state(spans)[0]
        self.assertEqual('compute_failure', row['state'])
        self.assertEqual(
            'nova.exception.PortBindingFailed', row['cause']['cls']
        )
        self.assertEqual(['n'], list(spans_mod.Tree(spans).origins()))

    def test_scheduling_failure_by_burial_only(self):
        spans = {
            'x': span(
                'conductor.bury_in_cell0',
                0,
                5,
                attrs={'reason': 'NoValidHost'},
            )
        }
        row = state(spans)[0]
        self.assertEqual('scheduling_failure', row['state'])
        self.assertEqual('NoValidHost', row['cause']['cls'])

    def test_api_failure_needs_no_conductor_work(self):
        spans = {
            'a': span(
                'api.request',
                0,
                5,
                svc='api',
                attrs={'status': 403},
                inst=None,
            )
        }
        rows = state(spans)
        self.assertEqual([None], [r['inst'] for r in rows])
        self.assertEqual('api_failure', rows[0]['state'])
        self.assertEqual('HTTP 403', rows[0]['cause']['cls'])
        spans['c'] = span('conductor.schedule_and_build_instances', 10, 5)
        self.assertEqual('incomplete', state(spans)[0]['state'])

    def test_reschedule_given_up_is_a_scheduling_failure(self):
        # issue 32 item 10: the conductor gave up rescheduling (no
        # alternate left: MaxRetriesExceeded; its claim on one failed:
        # AllocationUpdateFailed); the instance is in ERROR
        for cls in ('MaxRetriesExceeded', 'AllocationUpdateFailed'):
            spans = {
                'b0': span(
                    'compute.build',
                    0,
                    30,
                    svc='compute',
                    host='cmp-1',
                    attrs={'outcome': 'rescheduled'},
                ),
                'bi': span(
                    'conductor.build_instances',
                    10,
                    15,
                    attrs={'attempt': 2, 'reschedule': True},
                ),
                'rf': span(
                    'conductor.reschedule_failed',
                    12,
                    5,
                    'bi',
                    attrs={
                        'reason': 'nova.exception.' + cls,
                        'msg': 'Exceeded maximum number',
                    },
                ),
            }
            row = state(spans)[0]
            self.assertEqual('scheduling_failure', row['state'], cls)
            self.assertEqual('nova.exception.' + cls, row['cause']['cls'])
            self.assertEqual('Exceeded maximum number', row['cause']['msg'])
            self.assertEqual('conductor.reschedule_failed', row['cause']['ev'])
            self.assertEqual(1, row['attempts'])
            # the build's span ended after the conductor gave up (it
            # cast the reschedule, then cleaned up): still given up
            spans['b0'][4] = 1
            spans['b0'][5] = 100
            self.assertEqual('scheduling_failure', state(spans)[0]['state'])

    def test_a_later_build_outlives_an_earlier_reschedule_failure(self):
        # another attempt of the same instance after an earlier give-up
        # never happens in nova; but a build that started after it
        # decides, as every later outcome does
        spans = {
            'rf': span(
                'conductor.reschedule_failed',
                0,
                5,
                attrs={'reason': 'MaxRetriesExceeded'},
            ),
            'b1': span(
                'compute.build',
                10,
                10,
                svc='compute',
                attrs={'outcome': 'active'},
            ),
        }
        self.assertEqual('success', state(spans)[0]['state'])

    def test_open_build_is_incomplete_where_it_hangs(self):
        spans = {
            'b': span('compute.build', 0, None, svc='compute', host='c9'),
            's': span('compute.spawn', 5, None, 'b', svc='compute', host='c9'),
        }
        row = state(spans)[0]
        self.assertEqual('incomplete', row['state'])
        self.assertEqual(
            {'ev': 'compute.spawn', 'host': 'c9', 'open': True}, row['stopped']
        )

    def test_instances_followed_separately(self):
        spans = {
            'b1': span(
                'compute.build',
                0,
                10,
                svc='compute',
                inst=['i1'],
                attrs={'outcome': 'active'},
            ),
            'b2': span(
                'compute.build',
                0,
                10,
                svc='compute',
                inst=['i2'],
                attrs={'outcome': 'failed'},
            ),
        }
        rows = {r['inst']: r['state'] for r in state(spans)}
        self.assertEqual({'i1': 'success', 'i2': 'compute_failure'}, rows)
        self.assertEqual(
            'compute_failure', classify.request_state(state(spans))
        )
