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
"""The OpenTelemetry SDK's OTLP span exporters, as the sink uses them.

Owns the choice between OTLP/HTTP (protobuf) and OTLP/gRPC, the default
endpoint of each, and keeping the SDK's per-batch error and retry lines
out of the service log while the sink's exporter thread exports (the
sink logs one line per cause instead).  Only the chosen protocol's
exporter is imported: grpcio is never loaded for ``http/protobuf``.
"""

import contextlib
import importlib
import logging
import threading

HTTP = 'http/protobuf'
GRPC = 'grpc'
DEFAULT_HTTP_ENDPOINT = 'http://127.0.0.1:4318/v1/traces'
DEFAULT_GRPC_ENDPOINT = 'http://127.0.0.1:4317'

_MODULES = {
    HTTP: 'opentelemetry.exporter.otlp.proto.http.trace_exporter',
    GRPC: 'opentelemetry.exporter.otlp.proto.grpc.trace_exporter',
}

# Loggers whose records are kept out of the service log while our thread
# exports; other threads (nova's own OpenTelemetry use) are not affected.
_QUIET_LOGGERS = (
    'opentelemetry.exporter.otlp.proto.http.trace_exporter',
    'opentelemetry.exporter.otlp.proto.http._common',
    'opentelemetry.exporter.otlp.common.http',
    'opentelemetry.exporter.otlp.proto.grpc.exporter',
    'opentelemetry.exporter.otlp.proto.grpc.trace_exporter',
    'opentelemetry.exporter.otlp.proto.common._internal',
    'opentelemetry.exporter.http.transport._requests',
    'urllib3.connectionpool',
)


def endpoint_for(protocol: str, endpoint: str) -> str:
    """The endpoint to use: the HTTP default means the gRPC default when
    the protocol is gRPC (ports 4318 and 4317 of the same collector)."""
    if protocol == GRPC and endpoint == DEFAULT_HTTP_ENDPOINT:
        return DEFAULT_GRPC_ENDPOINT
    return endpoint


def exporter_class(protocol: str):
    """The SDK's ``OTLPSpanExporter`` for ``protocol`` (imports it)."""
    return importlib.import_module(_MODULES[protocol]).OTLPSpanExporter


def make_exporter(protocol: str, endpoint: str, timeout: float):
    """A new SDK exporter.  ``http://`` gRPC endpoints are plaintext,
    ``https://`` ones use TLS (the SDK's rule)."""
    return exporter_class(protocol)(
        endpoint=endpoint_for(protocol, endpoint), timeout=timeout
    )


class _QuietFilter(logging.Filter):
    """Drops records made while the current thread is exporting, and
    remembers the first and the last warning or error: the cause of a
    failed export (e.g. "connection refused", then "gave up")."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, rec: logging.LogRecord) -> bool:
        local = self.local
        if not getattr(local, 'active', False):
            return True
        if rec.levelno >= logging.WARNING:
            try:
                text = rec.getMessage()
            except Exception:
                text = str(rec.msg)
            if local.first is None:
                local.first = text[:300]
            else:
                local.last = text[:300]
        return False


_FILTER = _QuietFilter()
_INSTALLED = []


def _install() -> None:
    if _INSTALLED:
        return
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)
    _INSTALLED.append(True)


@contextlib.contextmanager
def quiet_logs():
    """Keep the SDK's log lines out while the block runs in this thread;
    yields a callable returning the cause they gave (or None)."""
    _install()
    local = _FILTER.local
    local.active = True
    local.first = local.last = None
    try:
        yield (
            lambda: (
                ' / '.join(t for t in (local.first, local.last) if t) or None
            )
        )
    finally:
        local.active = False
