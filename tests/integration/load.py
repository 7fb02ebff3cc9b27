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
"""The boot load, through nova's HTTP API, and what the API says after.

No keystone: every request carries the identity headers keystone's
auth_token middleware would have set (``X-User-Id``, ``X-Project-Id``,
``X-Roles``) and a token that nova forwards to glance and neutron (the
stand-ins accept any).  Each POST keeps the request id nova answered
with (``X-OpenStack-Request-ID``): the analyser's requests are keyed by
it.
"""

import concurrent.futures
import time

import requests

MICROVERSION = 'compute 2.latest'
HEADERS = {
    'X-Auth-Token': 'instrument-it-token',
    'X-User-Id': 'instrument-it-user',
    'X-Project-Id': 'instrument-it-project',
    'X-Roles': 'admin,member,reader',
    'OpenStack-API-Version': 'compute latest',
    'Content-Type': 'application/json',
}
BUILD_EVENT = 'compute__do_build_and_run_instance'


class ApiError(Exception):
    pass


class Boot:
    """One POST /servers and, later, what became of it."""

    def __init__(self, name: str, flavor: str, image: str) -> None:
        self.name = name
        self.flavor = flavor
        self.image = image
        self.status_code = None
        self.request_id = None
        self.server_id = None
        self.answer = None
        # filled by Api.settle / Api.build_hosts
        self.status = None
        self.fault = None
        self.host = None
        self.build_hosts = []


class Api:
    """A few calls of the compute API."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip('/')
        self.timeout = timeout

    def call(
        self, method: str, path: str, body=None, ok=(200, 201, 202, 204)
    ) -> requests.Response:
        resp = requests.request(
            method,
            self.url + path,
            json=body,
            headers=HEADERS,
            timeout=self.timeout,
        )
        if ok and resp.status_code not in ok:
            raise ApiError(
                '%s %s: %d %s'
                % (method, path, resp.status_code, resp.text[:500])
            )
        return resp

    def create_flavor(self, name: str, vcpus: int, ram: int, disk: int) -> str:
        body = {
            'flavor': {'name': name, 'vcpus': vcpus, 'ram': ram, 'disk': disk}
        }
        return self.call('POST', '/flavors', body).json()['flavor']['id']

    def boot(self, boot: Boot) -> Boot:
        body = {
            'server': {
                'name': boot.name,
                'imageRef': boot.image,
                'flavorRef': boot.flavor,
                'networks': 'none',
            }
        }
        resp = self.call('POST', '/servers', body, ok=None)
        boot.status_code = resp.status_code
        boot.request_id = resp.headers.get('X-OpenStack-Request-ID')
        try:
            boot.answer = resp.json()
        except ValueError:
            boot.answer = resp.text[:500]
        if resp.status_code == 202:
            boot.server_id = boot.answer['server']['id']
        return boot

    def boot_all(self, boots: list, concurrency: int) -> float:
        """POST every boot, ``concurrency`` at a time; returns seconds."""
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            for future in [pool.submit(self.boot, b) for b in boots]:
                future.result()
        return time.monotonic() - started

    def settle(self, boots: list, timeout: float) -> float:
        """Poll until every created server is ACTIVE, or ERROR with its
        fault; returns seconds waited.  Raises ApiError on time-out."""
        started = time.monotonic()
        pending = {b.server_id: b for b in boots if b.server_id}
        while pending:
            for server in self.call(
                'GET', '/servers/detail?limit=1000'
            ).json()['servers']:
                boot = pending.get(server['id'])
                if boot is None:
                    continue
                if server['status'] == 'ACTIVE' or (
                    server['status'] == 'ERROR' and server.get('fault')
                ):
                    boot.status = server['status']
                    boot.fault = server.get('fault')
                    boot.host = server.get('OS-EXT-SRV-ATTR:host')
                    del pending[server['id']]
            if not pending:
                break
            if time.monotonic() - started > timeout:
                raise ApiError(
                    '%d servers still building after %ds: %s'
                    % (len(pending), timeout, ', '.join(sorted(pending)))
                )
            time.sleep(1.0)
        return time.monotonic() - started

    def build_hosts(self, boot: Boot) -> list:
        """Hosts of the build attempts of a server's create action (the
        instance-action events, in order)."""
        resp = self.call(
            'GET',
            '/servers/%s/os-instance-actions/%s'
            % (boot.server_id, boot.request_id),
            ok=(200, 404),
        )
        if resp.status_code == 404:
            # buried in cell0 before any action was recorded
            return []
        events = resp.json()['instanceAction'].get('events') or []
        events.sort(key=lambda e: e.get('start_time') or '')
        return [e.get('host') for e in events if e['event'] == BUILD_EVENT]
