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
"""Per-statement cost of SQL timing, against a floor and two peers.

One run, on sqlite in memory and (when reachable) on MariaDB at
127.0.0.1:3306 (root, no password, database ``test``; override with
``INSTRUMENT_BENCH_MYSQL_URL``), of the same cached SELECT:

* ``none``: no listeners;
* ``floor``: a bare pair of timing listeners (before stores the
  monotonic start on the connection, after appends the duration to a
  bounded deque);
* ``instrument``: this library as installed by ``instrument.setup``
  (every statement written as a ``sql.query`` record to the buffer; the
  writer thread runs, its sink discards) -- the hot path;
* ``instrument-agg``: the same with a slow-query threshold that sends
  every statement to the per-class aggregates instead;
* ``instrument-file``: every statement written, file sink (JSON encoding
  in the writer thread competes for the GIL);
* ``otel``: OpenTelemetry's SQLAlchemyInstrumentor, SDK tracer provider,
  in-memory exporter (simple span processor);
* ``osprofiler``: osprofiler's ``add_tracing``, profiler initialised,
  notifier discarding.

Two workloads: statements inside one open transaction, and one-statement
transactions (``engine.begin()``: checkout, BEGIN, statement, COMMIT).
Prints µs per statement (median of several interleaved rounds), the cost
added over ``none``, and that cost as a multiple of the floor's.  Asserts
nothing.  Usage: ``python bench/bench_sql.py [--quick]``.
"""

import collections
import gc
import os
import statistics
import sys
import tempfile
import time

from oslo_config import cfg
import sqlalchemy as sa

from instrument import opts
from instrument import sinks as sink_mod
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.sinks import file as file_sink
from instrument.targets.sqlalchemy import timing as instrument_db

MYSQL_URL = os.environ.get(
    'INSTRUMENT_BENCH_MYSQL_URL', 'mysql+pymysql://root@127.0.0.1:3306/test'
)


class DiscardSink(sink_mod.Sink):
    """Takes batches and drops them (the hot path is what is measured)."""

    name = 'discard'

    def write(self, batch, first_seq, pid):
        pass


def _conf(**overrides):
    conf = cfg.ConfigOpts()
    conf([], project='instrument-bench')
    opts.register_opts(conf)
    for key, value in overrides.items():
        conf.set_override(key, value, opts.GROUP)
    return conf


class Floor:
    """The bare pair of timing listeners."""

    def __init__(self, engine) -> None:
        self.durations = collections.deque(maxlen=100000)
        append = self.durations.append
        perf_ns = time.perf_counter_ns

        def before(conn, cursor, statement, parameters, context, many):
            conn._floor_t0 = perf_ns()
            return statement, parameters

        def after(conn, cursor, statement, parameters, context, many):
            append(perf_ns() - conn._floor_t0)

        sa.event.listen(engine, 'before_cursor_execute', before, retval=True)
        sa.event.listen(engine, 'after_cursor_execute', after)


class Instrument:
    """This library, installed the way ``instrument.setup`` does."""

    def __init__(self, sink, **overrides) -> None:
        self.conf = _conf(**overrides)
        identity = process.ProcessIdentity.create('bench', 'benchhost')
        self.buffer = buffer_mod.EventBuffer(
            [sink],
            self.conf.instrument.buffer_size,
            self.conf.instrument.flush_interval,
            identity,
        )
        self.recorder = recorder_mod.Recorder(self.buffer, identity)
        self.handle = None

    def on(self) -> None:
        self.handle = instrument_db.install(self.recorder, self.conf)

    def settle(self) -> None:
        """Inside the timed section: the writer's share of the work
        (records built and handed to the sink) is counted in process
        CPU."""
        self.buffer.drain()

    def off(self) -> None:
        self.handle.remove()
        self.buffer.drain()


def _otel(engine):
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace import export
    from opentelemetry.sdk.trace.export import in_memory_span_exporter

    exporter = in_memory_span_exporter.InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    instrumentor = SQLAlchemyInstrumentor()
    instrumentor.uninstrument()
    instrumentor.instrument(engine=engine, tracer_provider=provider)
    return exporter


def _osprofiler(engine):
    from osprofiler import notifier
    from osprofiler import profiler
    from osprofiler import sqlalchemy as osp_sqlalchemy

    notifier.set(lambda info, *args, **kwargs: None)
    profiler.init('bench-hmac-key')
    osp_sqlalchemy.add_tracing(sa, engine, 'db')


def _make_engine(url):
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    table = sa.Table(
        'instrument_bench',
        meta,
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('name', sa.String(64)),
    )
    with engine.begin() as conn:
        meta.drop_all(conn)
        meta.create_all(conn)
        conn.execute(table.insert(), [{'id': 1, 'name': 'one'}])
    stmt = sa.select(table.c.name).where(table.c.id == sa.bindparam('id'))
    return engine, stmt


class Clocks:
    """Wall and calling-thread CPU of the statements, and process CPU
    (all threads) of the statements plus the writer's share (``settle``),
    per statement, microseconds."""

    def __init__(self, settle) -> None:
        self.settle = settle

    def __enter__(self):
        self.t = (time.perf_counter(), time.thread_time(), time.process_time())
        return self

    def __exit__(self, *exc):
        wall, thread = time.perf_counter(), time.thread_time()
        self.settle()
        now = (wall, thread, time.process_time())
        self.elapsed = [b - a for a, b in zip(self.t, now, strict=True)]
        return False

    def per(self, n):
        return [e / n * 1e6 for e in self.elapsed]


def _in_transaction(engine, stmt, n, settle):
    with engine.connect() as conn:
        for _ in range(50):
            conn.execute(stmt, {'id': 1}).fetchall()
        with Clocks(settle) as clocks:
            for _ in range(n):
                conn.execute(stmt, {'id': 1}).fetchall()
        conn.commit()
    return clocks.per(n)


def _one_per_transaction(engine, stmt, n, settle):
    for _ in range(20):
        with engine.begin() as conn:
            conn.execute(stmt, {'id': 1}).fetchall()
    with Clocks(settle) as clocks:
        for _ in range(n):
            with engine.begin() as conn:
                conn.execute(stmt, {'id': 1}).fetchall()
    return clocks.per(n)


WORKLOADS = (
    ('statement in open transaction', _in_transaction),
    ('one-statement transaction', _one_per_transaction),
)


def _reachable(url) -> str | None:
    try:
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            conn.exec_driver_sql('SELECT 1')
        engine.dispose()
        return None
    except Exception as exc:  # report why and go on with sqlite
        return '%s: %s' % (exc.__class__.__name__, str(exc)[:120])


NAMES = [
    'none',
    'floor',
    'instrument',
    'instrument-agg',
    'instrument-file',
    'otel',
    'osprofiler',
]


def run_backend(label, url, n, rounds, tmpdir, names=None):
    names = names or NAMES
    engines = {name: _make_engine(url) for name in names}
    libs = {
        'instrument': Instrument(DiscardSink(None, None)),
        'instrument-agg': Instrument(
            DiscardSink(None, None), slow_query_threshold=60000.0
        ),
        'instrument-file': Instrument(
            file_sink.FileSink(
                _conf(output_dir=tmpdir),
                process.ProcessIdentity.create('bench', 'benchhost'),
            )
        ),
    }
    exporter = (
        _otel(engines['otel'][0]) if 'otel' in engines else _NoExporter()
    )
    if 'floor' in engines:
        Floor(engines['floor'][0])
    if 'osprofiler' in engines:
        _osprofiler(engines['osprofiler'][0])
    results = {}
    for wname, workload in WORKLOADS:
        rounds_of = {name: [] for name in names}
        count = n if workload is _in_transaction else max(n // 4, 100)
        for _ in range(rounds):
            for name in names:
                engine, stmt = engines[name]
                lib = libs.get(name) if name in names else None
                settle = lib.settle if lib is not None else _nothing
                if lib is not None:
                    lib.on()
                gc.collect()
                try:
                    us = workload(engine, stmt, count, settle)
                finally:
                    if lib is not None:
                        lib.off()
                rounds_of[name].append(us)
                exporter.clear()
        results[wname] = {
            name: [
                statistics.median(column) for column in zip(*rows, strict=True)
            ]
            for name, rows in rounds_of.items()
        }
    for engine, _stmt in engines.values():
        engine.dispose()
    for lib in libs.values():
        lib.buffer.close()
    return results


class _NoExporter:
    def clear(self) -> None:
        pass


def _nothing():
    pass


def report(label, results) -> None:
    for wname, best in results.items():
        print(
            '\n%s, %s: us per statement, median of rounds; "added" is'
            ' over none, "x" is added / floor\'s added' % (label, wname)
        )
        print(
            '  %-16s %s'
            % (
                '',
                '  '.join(
                    '%-26s' % head
                    for head in (
                        'wall',
                        'calling-thread CPU',
                        'process CPU (all threads)',
                    )
                ),
            )
        )
        print(
            '  %-16s %s'
            % ('', '  '.join(['%8s %8s %8s' % ('us', 'added', 'x')] * 3))
        )
        for name, values in best.items():
            cols = []
            for i, us in enumerate(values):
                added = us - best['none'][i]
                floor_added = (
                    best['floor'][i] - best['none'][i]
                    if 'floor' in best
                    else 0
                )
                ratio = (
                    '%8.2f' % (added / floor_added)
                    if floor_added > 0 and name != 'none'
                    else '%8s' % ''
                )
                cols.append('%8.2f %8.2f %s' % (us, added, ratio))
            print('  %-16s %s' % (name, '  '.join(cols)))
        peer = best.get('osprofiler')
        mine = best.get('instrument-file')
        if peer is not None and mine is not None:
            peer_added = peer[2] - best['none'][2]
            added = mine[2] - best['none'][2]
            if peer_added > 0:
                print(
                    '  instrument-file added process CPU = %.2fx '
                    'osprofiler\'s (target <= 0.5x)' % (added / peer_added)
                )


def main(argv) -> int:
    quick = '--quick' in argv
    names = None
    rounds_override = None
    for arg in argv:
        if arg.startswith('--only='):
            names = ['none'] + [
                name for name in arg[7:].split(',') if name != 'none'
            ]
        elif arg.startswith('--rounds='):
            rounds_override = int(arg[9:])
    tmpdir = tempfile.mkdtemp(prefix='instrument-bench-')
    backends = [
        (
            'sqlite :memory:',
            'sqlite://',
            2000 if quick else 5000,
            5 if quick else 25,
        )
    ]
    why = _reachable(MYSQL_URL)
    if why is None:
        backends.append(
            (
                'MariaDB (PyMySQL, 127.0.0.1)',
                MYSQL_URL,
                500 if quick else 1500,
                5 if quick else 15,
            )
        )
    print(
        'SQL timing benchmark: python %s, SQLAlchemy %s'
        % (sys.version.split()[0], sa.__version__)
    )
    if why is not None:
        print('MariaDB not reachable (%s): sqlite only' % why)
    print('load average %.2f' % os.getloadavg()[0])
    for label, url, n, rounds in backends:
        report(
            label,
            run_backend(
                label, url, n, rounds_override or rounds, tmpdir, names
            ),
        )
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
