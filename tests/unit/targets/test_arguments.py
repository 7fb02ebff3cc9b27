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
"""Points read a call's arguments by name, never by literal position.

The oslo.messaging and keystoneauth1 points are put on stand-ins whose
parameters come in another order than the libraries': what they record
must be the same whether the call passes its arguments by position or
by keyword (issue 28).  And no code of ``instrument/targets`` or
``instrument/patching`` reads an argument at a position written down.
"""

import dataclasses
import importlib
import os
import re

from instrument.patching import patcher as patcher_mod
from instrument.targets import keystoneauth
from instrument.targets import oslo_messaging
from tests.unit import base

# The libraries' methods with their parameters in another order.
REORDERED = '''
class Target:
    topic = 'compute'
    server = 'cmp-1'
    fanout = False


class CallContext:
    target = Target()

    def cast(self, method, ctxt, **kwargs):
        return method

    def call(self, method, ctxt, **kwargs):
        return method


class Transport:
    def _send(self, message, ctxt, target, wait_for_reply=None):
        return ctxt


class Endpoint:
    host = 'cmp-7'


class Dispatcher:
    def _do_dispatch(self, ctxt, args, method, endpoint):
        return method


class Response:
    status_code = 201


class Session:
    def request(self, method, endpoint_override, url, endpoint_filter=None,
                **kwargs):
        return Response()

    def _send_request(self, method, url, **kwargs):
        return Response()
'''

PLACES = {
    'rpc.cast': 'CallContext.cast',
    'rpc.call': 'CallContext.call',
    'rpc.send': 'Transport._send',
    'rpc.dispatch': 'Dispatcher._do_dispatch',
    'ksa.request': 'Session.request',
    'ksa.send': 'Session._send_request',
}

CTXT = {'request_id': 'req-2b3c', 'global_request_id': None}


class ArgumentsByNameTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer, self.recorder = base.list_recorder()
        self.mod = importlib.import_module(self.make_module(REORDERED))
        services = {self.mod.__name__: 'compute'}
        points = [
            dataclasses.replace(
                point,
                module=self.mod.__name__,
                target=PLACES[point.event],
                alternatives=(),
            )
            for point in oslo_messaging.points(services)
            + list(keystoneauth.KSA_POINTS)
        ]
        self.patcher = patcher_mod.Patcher(points, self.recorder)
        self.addCleanup(self.patcher.remove)
        banner = self.patcher.apply()
        self.assertEqual(len(points), len(banner[patcher_mod.PATCHED]))

    def spans(self, ev):
        return [r for r in self.buffer.dicts() if r['ev'] == ev]

    def test_rpc_send_by_position_and_by_keyword(self):
        ctx = self.mod.CallContext()
        transport = self.mod.Transport()
        for cast in (
            lambda: ctx.cast('build_and_run_instance', dict(CTXT)),
            lambda: ctx.cast(ctxt=dict(CTXT), method='build_and_run_instance'),
        ):
            self.buffer.events.clear()
            self.assertEqual('build_and_run_instance', cast())
            [span] = self.spans('rpc.cast')
            self.assertEqual('build_and_run_instance', span['attrs']['method'])
            self.assertEqual('compute', span['attrs']['topic'])
            self.assertEqual('req-2b3c', span['req'])
        # the traceparent goes into the context sent from inside a span
        for send in (
            lambda c: transport._send({}, c, None),
            lambda c: transport._send(target=None, ctxt=c, message={}),
        ):
            sent = dict(CTXT)
            ctx.call('select_destinations', sent)  # no send: a stand-in
            rec = self.recorder.begin(
                'rpc.call', None, None, sent, None, None, None
            )
            try:
                send(sent)
            finally:
                self.recorder.end(rec, self.recorder.clock())
            self.assertIn(oslo_messaging.TRACEPARENT_KEY, sent)
        [call, *_] = self.spans('rpc.call')
        self.assertEqual('select_destinations', call['attrs']['method'])

    def test_rpc_dispatch_by_position_and_by_keyword(self):
        dispatcher = self.mod.Dispatcher()
        endpoint = self.mod.Endpoint()
        for dispatch in (
            lambda: dispatcher._do_dispatch(dict(CTXT), {}, 'build', endpoint),
            lambda: dispatcher._do_dispatch(
                endpoint=endpoint, method='build', ctxt=dict(CTXT), args={}
            ),
        ):
            self.buffer.events.clear()
            self.assertEqual('build', dispatch())
            [span] = self.spans('rpc.dispatch')
            self.assertEqual('build', span['attrs']['method'])
            self.assertEqual('req-2b3c', span['req'])
            self.assertEqual('cmp-7', span['host'])
            self.assertEqual('compute', span['svc'])

    def test_ksa_request_by_position_and_by_keyword(self):
        session = self.mod.Session()
        url = (
            'http://placement:8778/resource_providers/'
            '4e8e5957-649f-477b-9e5b-f1f75b21c03c'
        )
        for request in (
            lambda: session.request(
                'GET', None, url, endpoint_filter={'service_type': 'placement'}
            ),
            lambda: session.request(
                url=url,
                method='GET',
                endpoint_override=None,
                endpoint_filter={'service_type': 'placement'},
            ),
        ):
            self.buffer.events.clear()
            self.assertEqual(201, request().status_code)
            [span] = self.spans('ksa.request')
            self.assertEqual('GET', span['attrs']['method'])
            self.assertEqual('placement', span['attrs']['service_type'])
            self.assertEqual(
                '/resource_providers/{id}', span['attrs']['route']
            )
            self.assertEqual(201, span['attrs']['status'])
        # the endpoint's type, from the absolute URL by position
        self.buffer.events.clear()
        session.request('POST', None, 'http://neutron:9696/v2.0/ports')
        [span] = self.spans('ksa.request')
        self.assertEqual('network', span['attrs']['service_type'])
        self.assertEqual('POST', span['attrs']['method'])

    def test_a_signature_without_the_name_is_unread(self):
        # a place whose context is named otherwise: nothing is read in
        # its place, and the survey's check (PatchPoint.unread) names
        # what the point cannot read there
        [cast] = [p for p in self.patcher.points if p.event == 'rpc.cast']

        def renamed(self, context, verb):
            return verb

        def through_kwargs(self, context, verb, **kwargs):
            return verb

        self.assertEqual(
            ['ctxt', 'ctxt', 'method'], sorted(cast.unread(renamed))
        )
        self.assertEqual([], cast.unread(through_kwargs))


# A literal position read of a call's arguments: ``args[0]``,
# ``args[1:]``, ``len(args) > 1``, ``arg('context', 0)``.
LITERAL = re.compile(
    r'\bargs\[\s*-?\d'
    r'|\blen\(args\)\s*[<>=]'
    r'|\b(?:arg|Arg|uuids)\([^()]*,\s*-?\d+\s*[,)]'
)


class NoLiteralPositionTest(base.TestCase):
    """No code of targets/ or patching/ reads an argument of a call at
    a position written down (issue 28)."""

    def test_no_literal_position_is_read(self):
        import instrument

        root = os.path.dirname(instrument.__file__)
        found = []
        checked = 0
        for sub in ('targets', 'patching'):
            for path, _dirs, files in os.walk(os.path.join(root, sub)):
                for name in files:
                    if not name.endswith('.py'):
                        continue
                    checked += 1
                    with open(os.path.join(path, name)) as f:
                        for n, line in enumerate(f, 1):
                            code = line.split('#', 1)[0]
                            if LITERAL.search(code):
                                found.append(
                                    '%s:%d: %s'
                                    % (
                                        os.path.relpath(
                                            os.path.join(path, name), root
                                        ),
                                        n,
                                        line.strip(),
                                    )
                                )
        self.assertGreater(checked, 20)
        self.assertEqual([], found)

    def test_the_pattern_finds_what_it_is_for(self):
        for line in (
            "ctxt = kwargs.get('ctxt', args[0] if args else None)",
            "method = args[1] if len(args) > 1 else None",
            "CONTEXT = arg('context', 0)",
            "instances=uuids('instance', 1),",
            "rest = args[2:]",
        ):
            self.assertTrue(LITERAL.search(line), line)
        for line in (
            'value = args[pos]',
            "arg('instance', 'uuid')",
            "uuids('request_specs', attr='instance_uuid')",
        ):
            self.assertFalse(LITERAL.search(line), line)
