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
"""``instrument-metrics``: one host's metrics in Prometheus text format.

``dump DIR...`` prints (or writes atomically with ``--output``, e.g.
into node_exporter's textfile-collector directory) the sum of the
per-process state files that the services write into their
``[instrument] metrics_dir``; ``serve DIR... --port N`` answers
``GET /metrics`` with the same, read afresh at each scrape.  See
``doc/source/metrics.rst``.
"""

import argparse
import http.server
import os
import sys
import typing

from instrument.sinks import metrics as metrics_sink

CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8'


def exposition(
    directories: typing.Sequence[str], prune_after: float | None = None
) -> str:
    """The merged exposition of ``directories``; with ``prune_after``,
    the files of processes gone for that many seconds are removed
    first."""
    states = []
    for directory in directories:
        if prune_after is not None:
            metrics_sink.prune(directory, prune_after)
        states.extend(metrics_sink.read_states(directory))
    return metrics_sink.render(metrics_sink.merge(states))


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it
    and a rename: a reader (node_exporter's textfile collector) never
    sees half a file."""
    tmp = '%s.%d.tmp' % (path, os.getpid())
    with open(tmp, 'w', encoding='utf-8') as out:
        out.write(text)
    os.replace(tmp, path)


def make_server(
    directories: typing.Sequence[str],
    address: str,
    port: int,
    prune_after: float | None = None,
) -> http.server.ThreadingHTTPServer:
    """An HTTP server whose ``/metrics`` is ``exposition()``."""
    return text_server(
        lambda: exposition(directories, prune_after), address, port
    )


def text_server(
    body: typing.Callable[[], str], address: str, port: int
) -> http.server.ThreadingHTTPServer:
    """An HTTP server whose ``/metrics`` (and ``/``) answers ``body()``,
    called at each scrape, as Prometheus text."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            if self.path.split('?', 1)[0] not in ('/metrics', '/'):
                self.send_error(404)
                return
            text = body().encode('utf-8')
            self.send_response(200)
            self.send_header('Content-Type', CONTENT_TYPE)
            self.send_header('Content-Length', str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, format, *args):  # noqa: A002
            pass

    return http.server.ThreadingHTTPServer((address, port), Handler)


def parse_args(argv: typing.Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog='instrument-metrics',
        description='The metrics of every instrumented process of this '
        'host (their [instrument] metrics_dir), summed per '
        'program, in Prometheus text format.',
    )
    sub = parser.add_subparsers(dest='command', required=True)
    dump = sub.add_parser('dump', help='print the exposition once')
    dump.add_argument('directories', nargs='+', metavar='DIR')
    dump.add_argument(
        '--output',
        '-o',
        help='write it to this file atomically (for '
        'node_exporter\'s textfile collector: a '
        'name ending in .prom)',
    )
    serve = sub.add_parser('serve', help='serve /metrics over HTTP')
    serve.add_argument('directories', nargs='+', metavar='DIR')
    serve.add_argument('--port', type=int, required=True)
    serve.add_argument(
        '--address',
        default='127.0.0.1',
        help='address to listen on (default 127.0.0.1)',
    )
    for p in (dump, serve):
        p.add_argument(
            '--prune-after',
            type=float,
            default=None,
            metavar='SECONDS',
            help='remove the files of processes that are gone '
            'and whose file did not change for this long '
            '(their counts leave the sums: a counter '
            'reset for rate())',
        )
    return parser.parse_args(argv)


def main(argv: typing.Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == 'dump':
        text = exposition(args.directories, args.prune_after)
        if args.output:
            write_atomic(args.output, text)
        else:
            sys.stdout.write(text)
        return 0
    server = make_server(
        args.directories, args.address, args.port, args.prune_after
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
