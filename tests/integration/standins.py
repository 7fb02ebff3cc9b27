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
"""Stand-ins for glance and neutron: the few calls nova makes of them.

Small HTTP servers (threads of the test process) that answer what a
boot with ``networks: none`` needs: glance serves one image, its schema
and the version document; neutron answers every list with an empty list
(no ports to clean up, no extensions) and a ``default`` security group.
Every request is logged to ``<log dir>/<name>.log``; a request they do
not know gets a 404 and is logged as such, so a nova release that needs
more says so in the log.
"""

import http.server
import json
import re
import threading
import uuid

IMAGE_ID = '155d900f-4e14-4e4c-a73d-069cbf4541e6'
IMAGE = {
    'id': IMAGE_ID,
    'name': 'cirros-fake',
    'status': 'active',
    'visibility': 'public',
    'protected': False,
    'owner': None,
    'container_format': 'bare',
    'disk_format': 'raw',
    'size': 25165824,
    'virtual_size': None,
    'min_disk': 0,
    'min_ram': 0,
    'checksum': None,
    'os_hash_algo': None,
    'os_hash_value': None,
    'os_hidden': False,
    'tags': [],
    'created_at': '2025-01-01T00:00:00Z',
    'updated_at': '2025-01-01T00:00:00Z',
    'self': '/v2/images/' + IMAGE_ID,
    'file': '/v2/images/%s/file' % IMAGE_ID,
    'schema': '/v2/schemas/image',
}
IMAGE_SCHEMA = {
    'name': 'image',
    'properties': {name: {} for name in IMAGE if name != 'schema'},
    'additionalProperties': {'type': 'string'},
    'links': [],
}


def _error(code: int, message: str) -> dict:
    # the shape glanceclient and neutronclient both read
    return {
        'error': {
            'code': code,
            'message': message,
            'type': 'NotFound',
            'detail': '',
        }
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'instrument-it-standin'
    standin = None

    def log_message(self, fmt, *args):
        self.standin.log('%s %s' % (self.address_string(), fmt % args))

    def _answer(self):
        length = int(self.headers.get('Content-Length') or 0)
        if length:
            self.rfile.read(length)
        status, body = self.standin.route(self.command, self.path)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.send_header('X-Openstack-Request-Id', 'req-' + str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer


class StandIn:
    """One stand-in HTTP service on 127.0.0.1 (a free port)."""

    name = 'standin'

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path
        self.unknown = []
        self._lock = threading.Lock()
        handler = type('Handler', (_Handler,), {'standin': self})
        self.server = http.server.ThreadingHTTPServer(
            ('127.0.0.1', 0), handler
        )
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, name=self.name, daemon=True
        )

    @property
    def url(self) -> str:
        return 'http://127.0.0.1:%d' % self.server.server_address[1]

    def start(self) -> 'StandIn':
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def log(self, line: str) -> None:
        with self._lock, open(self.log_path, 'a') as f:
            f.write(line + '\n')

    def route(self, method: str, path: str) -> tuple:
        found = self.answer(method, path.split('?', 1)[0].rstrip('/'))
        if found is None:
            self.unknown.append('%s %s' % (method, path))
            self.log('UNKNOWN %s %s -> 404' % (method, path))
            return 404, _error(
                404,
                'the %s stand-in does not know %s %s'
                % (self.name, method, path),
            )
        return found

    def answer(self, method: str, path: str):
        raise NotImplementedError


class Glance(StandIn):
    name = 'glance'

    def answer(self, method, path):
        if method != 'GET':
            return None
        if path in ('', '/versions'):
            return 200, {
                'versions': [
                    {
                        'id': 'v2.16',
                        'status': 'CURRENT',
                        'links': [{'rel': 'self', 'href': self.url + '/v2/'}],
                    }
                ]
            }
        if path == '/v2/schemas/image':
            return 200, IMAGE_SCHEMA
        if path == '/v2/images':
            return 200, {'images': [IMAGE]}
        if path == '/v2/images/' + IMAGE_ID:
            return 200, IMAGE
        if path.startswith('/v2/images/'):
            return 404, _error(
                404, 'No image found with ID %s' % path.rsplit('/', 1)[1]
            )
        return None


_NEUTRON_LIST = re.compile(r'^/v2\.0/([a-z_-]+)$')


class Neutron(StandIn):
    name = 'neutron'

    def answer(self, method, path):
        if method != 'GET':
            return None
        if path == '':
            return 200, {
                'versions': [
                    {
                        'id': 'v2.0',
                        'status': 'CURRENT',
                        'links': [
                            {'rel': 'self', 'href': self.url + '/v2.0/'}
                        ],
                    }
                ]
            }
        match = _NEUTRON_LIST.match(path)
        if match is None:
            return None
        resource = match.group(1)
        if resource == 'security-groups':
            return 200, {
                'security_groups': [
                    {
                        'id': 'a4a3ae4d-1b6b-4e51-8b8e-5a6b1e6d9f00',
                        'name': 'default',
                        'security_group_rules': [],
                    }
                ]
            }
        return 200, {resource.replace('-', '_'): []}
