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
"""Stand-in OpenTelemetry collectors for the OTLP sink tests.

All listen on 127.0.0.1, on an ephemeral port, and are started and
stopped by the test (they are ``fixtures.Fixture``):

* ``HttpCollector``: an OTLP/HTTP receiver (``http.server``) that decodes
  every ``ExportTraceServiceRequest`` with opentelemetry-proto.
* ``GrpcCollector``: the OTLP/gRPC ``TraceService`` on a grpcio server.
* ``HangingCollector``: accepts TCP connections and never answers, until
  the test calls ``release()``.
* ``RefusingEndpoint``: a bound port nobody listens on (connection
  refused).

``decode`` turns what a collector received into plain dicts.
"""

import http.server
import os
import socket
import threading

import fixtures
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

_KINDS = {
    0: 'UNSPECIFIED',
    1: 'INTERNAL',
    2: 'SERVER',
    3: 'CLIENT',
    4: 'PRODUCER',
    5: 'CONSUMER',
}


def _any_value(value):
    which = value.WhichOneof('value')
    if which is None:
        return None
    if which == 'array_value':
        return [_any_value(v) for v in value.array_value.values]
    if which == 'kvlist_value':
        return {
            kv.key: _any_value(kv.value) for kv in value.kvlist_value.values
        }
    return getattr(value, which)


def _attrs(key_values) -> dict:
    return {kv.key: _any_value(kv.value) for kv in key_values}


def decode(requests) -> list:
    """Every span of ``requests`` (ExportTraceServiceRequest messages) as a
    dict: ids in hex, attributes, resource attributes, status, events."""
    out = []
    for req in requests:
        for rs in req.resource_spans:
            resource = _attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for span in ss.spans:
                    out.append(
                        {
                            'trace': span.trace_id.hex(),
                            'span': span.span_id.hex(),
                            'parent': span.parent_span_id.hex() or None,
                            'name': span.name,
                            'kind': _KINDS[span.kind],
                            'start': span.start_time_unix_nano,
                            'end': span.end_time_unix_nano,
                            'attrs': _attrs(span.attributes),
                            'resource': resource,
                            'scope': ss.scope.name,
                            'status': (span.status.code, span.status.message),
                            # (not in opentelemetry-proto < 1.26)
                            'flags': getattr(span, 'flags', None),
                            'events': [
                                (
                                    e.name,
                                    e.time_unix_nano,
                                    _attrs(e.attributes),
                                )
                                for e in span.events
                            ],
                        }
                    )
    return out


class _Collector(fixtures.Fixture):
    """What every collector has: received requests, a way to wait."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = []
        self._cond = threading.Condition()

    def received(self, message) -> None:
        with self._cond:
            self.requests.append(message)
            self._cond.notify_all()

    def spans(self) -> list:
        with self._cond:
            return decode(list(self.requests))

    def wait_spans(self, count: int, timeout: float = 15.0) -> list:
        """Wait until at least ``count`` spans arrived; returns them all."""
        with self._cond:
            self._cond.wait_for(
                lambda: len(decode(self.requests)) >= count, timeout
            )
            return decode(list(self.requests))


class _Handler(http.server.BaseHTTPRequestHandler):
    collector = None

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        if self.path != '/v1/traces':
            self.send_error(404)
            return
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.collector.received(message)
        reply = trace_service_pb2.ExportTraceServiceResponse()
        data = reply.SerializeToString()
        self.send_response(200)
        self.send_header('Content-Type', 'application/x-protobuf')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 - keep tests quiet
        pass


class HttpCollector(_Collector):
    """OTLP/HTTP receiver on 127.0.0.1; ``endpoint`` is its traces URL.
    ``port`` 0 takes an ephemeral one."""

    def __init__(self, port: int = 0) -> None:
        super().__init__()
        self.port = port

    def _setUp(self) -> None:
        handler = type('Handler', (_Handler,), {'collector': self})
        self.server = http.server.ThreadingHTTPServer(
            ('127.0.0.1', self.port), handler
        )
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = 'http://127.0.0.1:%d/v1/traces' % self.port
        thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={'poll_interval': 0.05},
            daemon=True,
        )
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)


class GrpcCollector(_Collector):
    """OTLP/gRPC TraceService on 127.0.0.1 (grpcio, in process)."""

    def _setUp(self) -> None:
        from concurrent import futures

        # grpc's C core logs connection teardown at INFO on stderr.
        os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')
        import grpc
        from opentelemetry.proto.collector.trace.v1 import (
            trace_service_pb2_grpc,
        )

        collector = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 - proto name
                collector.received(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            Service(), self.server
        )
        self.port = self.server.add_insecure_port('127.0.0.1:0')
        self.endpoint = 'http://127.0.0.1:%d' % self.port
        self.server.start()
        self.addCleanup(lambda: self.server.stop(None).wait(5))


class HangingCollector(fixtures.Fixture):
    """Accepts connections on 127.0.0.1 and never answers until
    ``release()``, which closes them (and every later one at once)."""

    def _setUp(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(('127.0.0.1', 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.endpoint = 'http://127.0.0.1:%d/v1/traces' % self.port
        self.grpc_endpoint = 'http://127.0.0.1:%d' % self.port
        self.accepted = 0
        self.connected = threading.Event()
        self.released = threading.Event()
        self._conns = []
        self._stop = threading.Event()
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(self._close)

    def _accept(self) -> None:
        self.listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            if self.released.is_set():
                conn.close()
            else:
                self._conns.append(conn)
            self.connected.set()

    def holding(self) -> int:
        """Connections accepted and still left unanswered."""
        return 0 if self.released.is_set() else len(self._conns)

    def release(self) -> None:
        self.released.set()
        for conn in self._conns:
            conn.close()

    def _close(self) -> None:
        self._stop.set()
        self.release()
        self.listener.close()


class RefusingEndpoint(fixtures.Fixture):
    """A port bound on 127.0.0.1 that nobody listens on: connecting is
    refused at once, and no other test can take the port meanwhile."""

    def _setUp(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(('127.0.0.1', 0))
        self.addCleanup(self.sock.close)
        self.port = self.sock.getsockname()[1]
        self.endpoint = 'http://127.0.0.1:%d/v1/traces' % self.port
        self.grpc_endpoint = 'http://127.0.0.1:%d' % self.port
