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
"""One scenario through nova's API, and its transcript.

``FaultTestCase.scenario()`` drives the instrumented cloud through the
API the way a user does: flavors, a boot that succeeds, one that fails
in the scheduler (``No valid host``), a duplicate flavor (a database
error nova turns into 409), a server that does not exist, a bad
request, the server and list views, and deletes.  It returns a
transcript: every request's method, path, HTTP status and body, and the
event types of nova's versioned notifications (its side effects), with
what differs between any two runs anyway (uuids, times, instance names,
reservation ids, passwords) replaced by stable placeholders.

A test injects a fault, runs the scenario, checks the fault was counted
and logged once, then tears the instrumentation down
(``lifecycle.teardown()``: patches, listeners and paste recording gone)
and runs the scenario again in the same cloud: the two transcripts must
be equal.
"""

import json
import re
import time

from instrument.runtime import lifecycle
from instrument.runtime import threads
from tests.functional.nova import base

UUID = re.compile(
    r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
    r'[0-9a-f]{12}'
)
TIME = re.compile(
    r'\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?'
    r'(Z|[+-]\d{2}:?\d{2})?'
)
INSTANCE_NAME = re.compile(r'instance-[0-9a-f]{8}')
REQUEST_ID = re.compile(r'req-<uuid-\d+>')
# Values that differ between two runs by design.
MASKED = {'adminPass', 'OS-EXT-SRV-ATTR:reservation_id'}
# A frame of the library's wrappers in a traceback nova stored (an
# instance fault's details, admins only): the one difference a wrapper
# cannot avoid.  Everything else in the traceback must be the same.
WRAPPER_FRAME = re.compile(
    r'  File "[^"]*/instrument/[^"]*", line \d+, '
    r'in \w+\n(?:    [^\n]*\n)*'
)
POLL = 0.05


class Transcript:
    """Requests and answers of one run, normalised as they come."""

    def __init__(self) -> None:
        self.entries = []
        self._uuids = {}

    def _uuid(self, match) -> str:
        return self._uuids.setdefault(
            match.group(0), '<uuid-%d>' % (len(self._uuids) + 1)
        )

    def text(self, value: str) -> str:
        value = UUID.sub(self._uuid, value)
        value = TIME.sub('<time>', value)
        return INSTANCE_NAME.sub('instance-<n>', value)

    def norm(self, value, key=None):
        if key in MASKED:
            return '<masked>'
        if key == 'details' and isinstance(value, str):
            value = WRAPPER_FRAME.sub('', value)
        if key == 'servers' and isinstance(value, list):
            # Listed newest first: servers created in the same instant
            # come in either order.
            value = sorted(value, key=lambda s: str(s.get('name')))
        if key == 'flavors' and isinstance(value, list):
            # Listed by flavor id: where a flavor with a random id lands
            # differs from one cloud to the next.
            value = sorted(value, key=lambda f: str(f.get('name')))
        if isinstance(value, dict):
            return {
                self.text(k): self.norm(v, k) for k, v in sorted(value.items())
            }
        if isinstance(value, list):
            return [self.norm(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def add(self, *entry) -> None:
        self.entries.append(self.norm(list(entry)))


class FaultTestCase(base.InstrumentedCloud):
    """The instrumented cloud (one compute), the scenario, the checks."""

    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)
    #: Extra ``[instrument]`` options of the class (before nova starts).
    instrument_flags = {}

    def setUp(self):
        self.inject_before_start()
        super().setUp()
        # Built first: it takes the first flavor, which the big one
        # might otherwise be.
        self.ok_server = self._build_server(
            name='fault-tier-ok', networks='none'
        )
        self.big_flavor = self._create_flavor(
            name='fault-tier-too-big',
            memory_mb=512,
            vcpu=1,
            disk=100000,
            ephemeral=0,
        )
        self.big_server = self._build_server(
            name='fault-tier-big', flavor_id=self.big_flavor, networks='none'
        )

    def _configure_instrument(self, settings) -> None:
        super()._configure_instrument(settings)
        if self.instrument_flags:
            self.flags(group='instrument', **self.instrument_flags)

    def inject_before_start(self) -> None:
        """Faults into what the start of the instrumentation captures."""

    # -- the scenario --------------------------------------------------------

    def request(self, t: Transcript, method: str, path: str, body=None):
        response = self.api.api_request(
            path,
            method=method,
            body=json.dumps(body) if body is not None else None,
            check_response_status=None,
        )
        try:
            answer = response.json() if response.content else None
        except ValueError:
            answer = response.text
        t.add(method, path, response.status_code, answer)
        return answer

    def wait_for(self, server_id: str, status: str, timeout=20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = self.api.api_request(
                '/servers/%s' % server_id, check_response_status=None
            )
            if status is None and response.status_code == 404:
                return
            if response.status_code >= 500:
                self.fail(
                    'GET server %s: %s %s'
                    % (server_id, response.status_code, response.text[:500])
                )
            if response.status_code == 200:
                server = response.json()['server']
                if server['status'] == status and (
                    status != 'ERROR' or 'fault' in server
                ):
                    return
            time.sleep(POLL)
        self.fail('server %s never reached %s' % (server_id, status))

    def scenario(self) -> list:
        """The transcript of one run (see the module docstring)."""
        self.notifier.reset()
        t = Transcript()
        self.request(t, 'GET', '/flavors')
        ok = self.request(t, 'POST', '/servers', {'server': self.ok_server})[
            'server'
        ]['id']
        self.wait_for(ok, 'ACTIVE')
        big = self.request(t, 'POST', '/servers', {'server': self.big_server})[
            'server'
        ]['id']
        self.wait_for(big, 'ERROR')
        self.request(t, 'GET', '/servers/%s' % ok)
        self.request(t, 'GET', '/servers/%s' % big)
        self.request(t, 'GET', '/servers/detail')
        self.request(
            t,
            'POST',
            '/flavors',
            {
                'flavor': {
                    'name': 'fault-tier-too-big',
                    'ram': 64,
                    'vcpus': 1,
                    'disk': 1,
                }
            },
        )
        self.request(
            t, 'GET', '/servers/%s' % ('00000000-0000-0000-0000-00000000f00d')
        )
        self.request(
            t,
            'POST',
            '/servers',
            {'server': dict(self.ok_server, flavorRef='no-such-flavor')},
        )
        for server in (ok, big):
            self.request(t, 'DELETE', '/servers/%s' % server)
            self.wait_for(server, None)
        self.notifier.wait_for_versioned_notifications('instance.delete.end')
        self.request(t, 'GET', '/servers/detail')
        t.add(
            'notifications',
            sorted(
                n['event_type'] for n in self.notifier.versioned_notifications
            ),
        )
        return t.entries

    def uninstrumented(self) -> list:
        """The scenario again with the instrumentation torn down."""
        lifecycle.teardown()
        self.assertIsNone(lifecycle.active())
        return self.scenario()

    def assert_nova_unaffected(self, faulted: list) -> None:
        """``faulted`` equals an uninstrumented run, and is a real run."""
        clean = self.uninstrumented()
        statuses = [e[2] for e in clean if e[0] != 'notifications']
        self.assertEqual(
            [200, 202, 202, 200, 200, 200, 409, 404, 400, 204, 204, 200],
            statuses,
        )
        self.assertIn('No valid host', json.dumps(clean[4]))
        self.assertEqual(clean, faulted)

    def log_count(self, text: str) -> int:
        # a fault is logged from another thread (threads.defer)
        threads.wait_deferred()
        return self.stdlog.logger.output.count(text)
