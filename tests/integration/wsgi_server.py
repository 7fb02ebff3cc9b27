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
"""Serve a WSGI application from a module, one thread per request.

Run as a script in the service's own process::

    python wsgi_server.py --port 8774 nova.wsgi.osapi_compute

The module's ``application`` is loaded the way uwsgi or mod_wsgi load
it (``nova.wsgi.osapi_compute`` reads ``OS_NOVA_CONFIG_DIR``;
``placement.wsgi.api`` reads ``OS_PLACEMENT_CONFIG_DIR``).  The server
is the standard library's ``wsgiref`` with a thread per request, at
most ``--threads`` at a time (more wait in the listen backlog): one
process like a uwsgi worker with that many threads.  The bound matters:
placement under unbounded threads exhausts its database pool (5 + 10
connections) and stalls for the pool timeout.  SIGTERM stops it through
``SystemExit`` so that exit handlers (the span buffer flush) run.

``gunicorn_app`` loads the same module's application for gunicorn
(``wsgi_server:gunicorn_app('nova.wsgi.osapi_compute')`` with
``--pythonpath`` this directory): a pre-forking server, whose workers
(forked from the master that loaded the application, under
``--preload``) exit after ``--max-requests`` and are replaced.
"""

import argparse
import importlib
import signal
import socketserver
import sys
import threading
from wsgiref import simple_server


class ThreadingWSGIServer(
    socketserver.ThreadingMixIn, simple_server.WSGIServer
):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True
    slots = threading.BoundedSemaphore(8)

    def process_request(self, request, client_address):
        self.slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class QuietHandler(simple_server.WSGIRequestHandler):
    def address_string(self):
        return self.client_address[0]


def gunicorn_app(module: str, attr: str = 'application'):
    """``module``'s WSGI application, for gunicorn: nova's WSGI module
    parses ``sys.argv`` with oslo.config, which must not see
    gunicorn's options (uwsgi's ``--pyargv`` does the same)."""
    sys.argv = [module]
    return getattr(importlib.import_module(module), attr)


def _stop(signum, frame):
    raise SystemExit(0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--attr', default='application')
    parser.add_argument(
        '--threads',
        type=int,
        default=8,
        help='requests served at once (default 8)',
    )
    parser.add_argument('module')
    args = parser.parse_args(argv)
    # The application sees only its own name in argv (oslo.config reads
    # it: no --config-file here, the modules use their environment).
    sys.argv = [args.module]
    app = getattr(importlib.import_module(args.module), args.attr)
    signal.signal(signal.SIGTERM, _stop)
    ThreadingWSGIServer.slots = threading.BoundedSemaphore(args.threads)
    server = simple_server.make_server(
        args.host,
        args.port,
        app,
        server_class=ThreadingWSGIServer,
        handler_class=QuietHandler,
    )
    print(
        'serving %s on http://%s:%d' % (args.module, args.host, args.port),
        flush=True,
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
