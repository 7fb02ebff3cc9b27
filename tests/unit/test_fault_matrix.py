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
"""The fault-injection matrix (issue 27): every point kind, every fault
site of the library's internals, ``raise`` and ``hang``.

A row is ``(point kind, fault site, fault kind)``; ``ROWS`` is made from
``KINDS``, one class per kind of place where the library runs code in
nova's call path (span points, detail points, HOOK points, the lock
wrapper and its decorator form, nova-compute's build slots, the DB pool
checkout, the SQL listeners, keystoneauth1's ``Session.request``,
periodic task runs, a cell's part of a scatter-gather, the paste
filter, spans by hand, the notifier driver's start, the ``os._exit``
hook, the DB retry recorder).  A kind names its sites and installs a
``tests.faultinject.Fault`` at one of them:

* ``clock``: every clock read of the kind;
* ``exit clock``: the clock reads once nova's call has run;
* ``recorder``: the enqueue / record / sampling call of the kind;
* ``extractor``: what picks values out of the call (attrs, names);
* ``exit``: the end of the span (or the kind's exit-side hook).

Each row calls nova's stand-in once with a value to return and once
with nova's own ``ValueError`` to raise (for the SQL listeners and
keystoneauth1: a real statement and a real HTTP call that succeed and
fail), and checks that the answer is the same object (or the same
answer), that nova's callable ran exactly once per call, that the site
was reached, that a ``raise`` is counted exactly once per fault by the
kind's ``Faults`` counter and a ``hang`` never is, and that no span is
left current.  Adding a point kind is one class in ``KINDS``.

``SINK_ROWS``: every sink (file, log, OTLP) whose I/O raises or hangs:
nova's answers are unchanged, and no call waits for a hanging sink
(the design: the calling thread only appends to the buffer; the sinks
run on the writer thread).
"""

import collections
import dataclasses
import http.server
import importlib
import os
import queue as queue_mod
import threading
import time

import fixtures
from keystoneauth1 import adapter
from keystoneauth1 import session as ksa_session
from keystoneauth1 import token_endpoint
from oslo_concurrency import lockutils
import sqlalchemy

from instrument import loaders as loader_mod
from instrument import sinks as sink_mod
from instrument.loaders import notifier as notifier_mod
from instrument.loaders import paste as paste_mod
from instrument.patching import patcher as patcher_mod
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracer_mod
from instrument.runtime import waits as waits_mod
from instrument.targets import base as targets_base
from instrument.targets import keystoneauth as ksa_target
from instrument.targets import nova as nova_target
from instrument.targets import oslo_concurrency as lock_target
from instrument.targets import periodic as periodic_target
from instrument.targets import process as process_target
from instrument.targets.nova import cells as nova_cells
from instrument.targets.nova import frames as nova_frames
from instrument.targets.nova import pools as nova_pools
from instrument.targets.nova import threads as nova_threads
from instrument.targets.sqlalchemy import pool as pool_mod
from instrument.targets.sqlalchemy import retries as retries_mod
from instrument.targets.sqlalchemy import timing as db_mod
from tests import faultinject
from tests.unit import base

RAISE = faultinject.RAISE
HANG = faultinject.HANG
CLOCK = 'clock'
EXIT_CLOCK = 'exit clock'
RECORDER = 'recorder'
EXTRACTOR = 'extractor'
EXIT = 'exit'

TARGET = '''
class Ctx:
    def __init__(self, request_id):
        self.request_id = request_id
        self.global_request_id = None


class Instance:
    uuid = '6f1b3c58-5c8e-4a3f-9a55-1d0f6cbd2a11'


class Manager:
    host = 'cmp-1'
    nova = None

    def work(self, context, instance, outcome):
        return self.nova(outcome)


def spawn_on(executor, func, *args):
    return func(*args)


def _exit(outcome, nova):
    return nova(outcome)
'''


class Result:
    """A value nova's callable returns (compared by identity)."""


class Kind:
    """One kind of place in nova's call path (see the module
    docstring).  ``setup(site, fault)`` installs the kind with the
    fault, ``call(outcome)`` makes nova's call once and returns what
    nova's caller gets (``('value', x)`` or ``('raised', exc)``);
    ``counters()`` are the ``Faults`` that count its faults."""

    name = ''
    sites = ()
    #: answers compared by identity (else by equality)
    identity = True

    def __init__(self, test) -> None:
        self.test = test
        self.ran = 0
        self.after_nova = False

    # -- nova's side -------------------------------------------------------

    def nova(self, outcome):
        """nova's callable: runs once per call, returns or raises."""
        self.ran += 1
        self.after_nova = True
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def outcomes(self) -> list:
        """(what nova is told to do, what its caller must get)."""
        value = Result()
        error = ValueError('nova failed')
        return [(value, ('value', value)), (error, ('raised', error))]

    def answer(self, outcome) -> tuple:
        self.after_nova = False
        try:
            return 'value', self.call(outcome)
        except Exception as exc:
            return 'raised', exc

    # -- the library's side ------------------------------------------------

    def where_exit(self):
        """The scope of the ``exit clock`` site: after nova's call."""
        return lambda frame: self.after_nova

    def setup(self, site: str, fault) -> None:
        raise NotImplementedError

    def call(self, outcome):
        raise NotImplementedError

    def counters(self) -> list:
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------

    def recorder(self, site=None, fault=None, rate=1.0):
        """A recorder on a list, its clock or enqueue faulted at
        ``site``."""
        buf = base.ListBuffer()
        rec = recorder_mod.Recorder(
            buf,
            process.ProcessIdentity.create('nova-compute', 'cmp-1'),
            detail_sample_rate=rate,
        )
        if site in (CLOCK, EXIT_CLOCK):
            rec.clock = fault.wrap(rec.clock)
        elif site == RECORDER:
            rec.emit = fault.wrap(rec.emit)
        rec.begin, rec.end = rec._span_functions()
        self.buffer = buf
        return rec

    def patch(self, name: str, value) -> None:
        self.test.useFixture(fixtures.MonkeyPatch(name, value))

    def module(self):
        mod = importlib.import_module(self.test.make_module(TARGET))
        mod.Manager.nova = staticmethod(self.nova)
        return mod


# The clock read of a span wrapper's end: in the wrapper, once nova's
# call is over (the wrapper reads the start's too, doing begin's steps).
_span_end = faultinject.in_span_wrapper(depth=1, after_call=True)


class SpanPoint(Kind):
    """A span point (``PatchPoint`` of kind SPAN) on a method."""

    name = 'span point'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXTRACTOR, EXIT)
    detail = False

    def setup(self, site, fault):
        rec = self.recorder(site, fault, 0.5 if self.detail else 1.0)
        self.req = 'req-1'
        if self.detail:
            self.req = next(
                'req-%d' % n for n in range(1000) if rec.sampled('req-%d' % n)
            )
            if site == RECORDER:  # the sampling decision
                rec.sampled = fault.wrap(rec.sampled)
        if site == EXIT:
            rec.end = fault.wrap(rec.end)

        def on_enter(instance, args, kwargs):
            return {'role': 'dest'}

        def on_exit(instance, args, kwargs, result):
            return {'count': 1}

        if site == EXTRACTOR:
            on_enter = fault.wrap(on_enter)
        self.mod = self.module()
        point = patcher_mod.PatchPoint(
            self.mod.__name__,
            'Manager.work',
            'compute.build',
            'compute',
            instances=patcher_mod.uuids('instance'),
            host=patcher_mod.self_attr('host'),
            on_enter=on_enter,
            on_exit=on_exit,
            detail=self.detail,
        )
        patcher = patcher_mod.Patcher([point], rec)
        self.test.addCleanup(patcher.remove)
        patcher.apply()
        self.state = patcher.state(point.name)

    def call(self, outcome):
        return self.mod.Manager().work(
            self.mod.Ctx(self.req), self.mod.Instance(), outcome
        )

    def counters(self):
        return [self.state]


class DetailPoint(SpanPoint):
    """A detail point (sampled: the sampling is its recorder site)."""

    name = 'detail point'
    detail = True


class HookPoint(Kind):
    """A HOOK point: nova's thread hook carrying the span into the
    thread function (``threads.carry_span``, ``frames.run_in_frame``)."""

    name = 'hook point'
    sites = (RECORDER, EXTRACTOR, EXIT)

    def setup(self, site, fault):
        rec = self.recorder()
        on_enter = nova_threads.hook()

        def on_exit(instance, args, kwargs, result):
            return None

        if site == EXTRACTOR:
            on_enter = fault.wrap(on_enter)
        elif site == EXIT:
            on_exit = fault.wrap(on_exit)
        elif site == RECORDER:  # the frame switch in the thread
            self.patch(
                'instrument.runtime.recorder.set_frame',
                fault.wrap(recorder_mod.set_frame),
            )
        self.mod = self.module()
        point = patcher_mod.PatchPoint(
            self.mod.__name__,
            'spawn_on',
            'thread.spawn',
            kind=patcher_mod.HOOK,
            on_enter=on_enter,
            on_exit=on_exit,
        )
        patcher = patcher_mod.Patcher([point], rec)
        self.test.addCleanup(patcher.remove)
        patcher.apply()
        self.state = patcher.state(point.name)

    def call(self, outcome):
        # inside a span: the hook carries it into the function
        token = recorder_mod._CURRENT.set(
            (1, 'req-1', None, None, 'compute', 'cmp-1', 'compute.build')
        )
        try:
            return self.mod.spawn_on('pool', self.nova, outcome)
        finally:
            recorder_mod._CURRENT.reset(token)

    def counters(self):
        return [self.state, nova_frames.FAULTS]


class CellQuery(Kind):
    """One cell's part of an API scatter-gather (``cells.cell_query``)."""

    name = 'cell query'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXIT)

    def setup(self, site, fault):
        rec = self.recorder(site if site != RECORDER else None, fault)
        if site == RECORDER:
            rec.begin = fault.wrap(rec.begin)
        elif site == EXIT:
            rec.end = fault.wrap(rec.end)
        frame = (
            1,
            'req-1',
            None,
            None,
            'api',
            'ctl-1',
            nova_target.EV_SCATTER_GATHER,
        )
        self.run = nova_cells.cell_query(rec, frame, self.nova, 'cell-1', None)

    def call(self, outcome):
        return self.run(outcome)

    def counters(self):
        return [nova_frames.FAULTS]


class LockWrapper(Kind):
    """``with lockutils.lock(name):`` through the lock timing."""

    name = 'lock wrapper'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXTRACTOR)

    def setup(self, site, fault):
        rec = self.recorder()
        if site in (CLOCK, EXIT_CLOCK):
            self.patch(
                'instrument.targets.oslo_concurrency.clock',
                fault.wrap(lock_target.clock),
            )
        elif site == EXTRACTOR:
            self.patch(
                'instrument.targets.oslo_concurrency.lock_name',
                fault.wrap(lock_target.lock_name),
            )
        elif site == RECORDER:
            make = waits_mod.WaitRecorder._make_record
            self.patch(
                'instrument.runtime.waits.WaitRecorder._make_record',
                lambda waits: fault.wrap(make(waits)),
            )
        self.target = lock_target.OsloConcurrencyTarget()
        self.target.install(
            targets_base.Context(
                self.test.make_conf(),
                rec,
                tracer_mod.Tracer(rec),
                patcher_mod.Patcher([], rec),
                [self.target],
            )
        )
        self.test.addCleanup(self.target.remove)
        self.lock = 'lock-%s' % self.test.id()

    def call(self, outcome):
        with lockutils.lock(self.lock):
            return self.nova(outcome)

    def counters(self):
        return [self.target.waits.faults]


class LockDecorator(LockWrapper):
    """``lockutils.synchronized(name)`` (the lock as a decorator)."""

    name = 'lock decorator'

    def call(self, outcome):
        return lockutils.lock(self.lock)(self.nova)(outcome)


class _Slots:
    """nova-compute's build semaphore (its acquisition is nova's)."""

    def __init__(self, kind) -> None:
        self.kind = kind
        self.sem = threading.Semaphore(2)

    def __enter__(self):
        value = self.sem.__enter__()
        self.kind.after_nova = True
        return value

    def __exit__(self, *exc):
        return self.sem.__exit__(*exc)


class BuildSlot(Kind):
    """nova-compute's build semaphore behind ``TimedSemaphore``."""

    name = 'build slot'
    sites = (CLOCK, EXIT_CLOCK, RECORDER)

    def setup(self, site, fault):
        rec = self.recorder()
        if site in (CLOCK, EXIT_CLOCK):
            self.patch(
                'instrument.targets.nova.pools.clock',
                fault.wrap(nova_pools.clock),
            )
        self.target = nova_pools.NovaPoolsTarget()
        self.target.waits = waits_mod.WaitRecorder(rec, 'the build slots')
        self.target.record = self.target.waits.record
        if site == RECORDER:
            self.target.record = fault.wrap(self.target.record)
        self.sem = nova_pools.TimedSemaphore(
            _Slots(self), 'max_concurrent_builds', 2, self.target
        )

    def call(self, outcome):
        with self.sem:
            return self.nova(outcome)

    def counters(self):
        return [self.target.waits.faults]


class _Pool:
    """A QueuePool whose checkout has to wait (the state ``_do_get``
    reads)."""

    _max_overflow = 0
    _overflow = 0

    def __init__(self) -> None:
        self._pool = queue_mod.Queue()

    def size(self) -> int:
        return 1


class PoolCheckout(Kind):
    """A DB pool checkout that waits (``QueuePool._do_get``)."""

    name = 'pool checkout'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXTRACTOR)

    def setup(self, site, fault):
        rec = self.recorder()
        if site in (CLOCK, EXIT_CLOCK):
            self.patch(
                'instrument.targets.sqlalchemy.pool.clock',
                fault.wrap(pool_mod.clock),
            )
        elif site == EXTRACTOR:
            self.patch(
                'instrument.targets.sqlalchemy.pool._attrs',
                fault.wrap(pool_mod._attrs),
            )
        self.waits = pool_mod.PoolWaits(rec)
        if site == RECORDER:
            self.waits.waits.record = fault.wrap(self.waits.waits.record)
        self.do_get = self.waits._timed(lambda pool: self.nova(pool.outcome))
        self.pool = _Pool()

    def call(self, outcome):
        self.pool.outcome = outcome
        return self.do_get(self.pool)

    def counters(self):
        return [self.waits.faults]


class _FaultyDeque(collections.deque):
    """The SQL listeners' queue, its append faulted."""


class SqlListeners(Kind):
    """SQLAlchemy engine listeners around a real statement (sqlite)."""

    name = 'SQL listeners'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXTRACTOR, EXIT)
    identity = False

    def setup(self, site, fault):
        rec = self.recorder()
        if site in (CLOCK, EXIT_CLOCK):
            from instrument.targets.sqlalchemy import listeners

            self.patch(
                'instrument.targets.sqlalchemy.listeners._perf_ns',
                fault.wrap(listeners._perf_ns),
            )
        elif site == EXTRACTOR:
            self.patch(
                'instrument.runtime.recorder.current_frame',
                fault.wrap(recorder_mod.current_frame),
            )
        elif site == EXIT:
            self.patch(
                'instrument.runtime.tracer.error_of',
                fault.wrap(tracer_mod.error_of),
            )
        self.fault = fault
        timing = db_mod.SqlTiming(rec)
        if site == RECORDER:
            pending = timing.listeners.pending = _FaultyDeque()
            pending.append = fault.wrap(
                collections.deque.append.__get__(pending)
            )
            timing.listeners._build()
        timing.install()
        self.test.addCleanup(timing.remove)
        self.timing = timing
        self.engine = sqlalchemy.create_engine('sqlite://')
        self.test.addCleanup(self.engine.dispose)

    def where_exit(self):
        return faultinject.in_functions(
            'after_cursor_execute', 'early_error', depth=2
        )

    def outcomes(self):
        ok = 'SELECT 1'
        bad = 'SELECT * FROM no_such_table'
        self.fault.armed = False  # nova's answers, uninstrumented
        try:
            expected = [(ok, self.answer(ok)), (bad, self.answer(bad))]
        finally:
            self.fault.armed = True
            self.ran = 0
        return expected

    def answer(self, statement):
        kind, got = super().answer(statement)
        if kind == 'raised':
            return kind, type(got), str(got.orig)
        return kind, got

    def call(self, statement):
        self.ran += 1
        with self.engine.connect() as conn:
            return [
                tuple(row) for row in conn.execute(sqlalchemy.text(statement))
            ]

    def counters(self):
        return [self.timing.listeners.faults]


class _Server(http.server.BaseHTTPRequestHandler):
    """200 on /ok, 404 elsewhere; counts what it answers."""

    served = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        _Server.served.append(self.path)
        status = 200 if self.path.endswith('/ok') else 404
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', '2')
        self.end_headers()
        self.wfile.write(b'{}')


class Keystoneauth(Kind):
    """``Session.request`` of keystoneauth1 against a local server."""

    name = 'keystoneauth'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXTRACTOR, EXIT)
    identity = False

    def setup(self, site, fault):
        rec = self.recorder(site, fault)
        request, send = ksa_target.KSA_POINTS
        if site == EXTRACTOR:
            request = dataclasses.replace(
                request, on_enter=fault.wrap(request.on_enter)
            )
        elif site == EXIT:
            request = dataclasses.replace(
                request,
                on_exit=fault.wrap(request.on_exit),
                on_error=fault.wrap(request.on_error),
            )
        server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _Server)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.test.addCleanup(server.server_close)
        self.test.addCleanup(server.shutdown)
        patcher = patcher_mod.Patcher([request, send], rec)
        self.test.addCleanup(patcher.remove)
        patcher.apply()
        self.state = patcher.state(request.name)
        endpoint = 'http://127.0.0.1:%d/placement' % server.server_port
        self.placement = adapter.Adapter(
            ksa_session.Session(auth=token_endpoint.Token(endpoint, 'tok')),
            service_type='placement',
        )

    def where_exit(self):
        return _span_end

    def outcomes(self):
        return [
            ('/ok', ('value', 200)),
            ('/missing', ('raised', 'NotFound', 404)),
        ]

    def answer(self, path):
        kind, got = super().answer(path)
        if kind == 'raised':
            return kind, type(got).__name__, got.http_status
        return kind, got.status_code

    def call(self, path):
        served = len(_Server.served)
        try:
            return self.placement.get(path)
        finally:
            self.ran += len(_Server.served) - served
            self.after_nova = True

    def counters(self):
        return [self.state]


class PeriodicTask(Kind):
    """A periodic task run recorded as a span (``traced``)."""

    name = 'periodic task'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXTRACTOR, EXIT)

    def setup(self, site, fault):
        rec = self.recorder(site, fault)
        if site == EXIT:
            rec.end = fault.wrap(rec.end)
        elif site == EXTRACTOR:
            from instrument import schema

            self.patch(
                'instrument.schema.periodic_req',
                fault.wrap(schema.periodic_req),
            )
        self.run = periodic_target.traced(
            rec,
            'ComputeManager',
            'update_available_resource',
            lambda service, context, outcome: self.nova(outcome),
        )

    def call(self, outcome):
        return self.run(object(), object(), outcome)

    def counters(self):
        return [periodic_target._FAULTS]


class PasteFilter(Kind):
    """nova-api's paste filter around nova's WSGI app."""

    name = 'paste filter'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXTRACTOR, EXIT)

    def setup(self, site, fault):
        rec = self.recorder(site, fault)
        tracer = tracer_mod.Tracer(rec)
        if site == EXTRACTOR:
            self.patch(
                'instrument.loaders.paste.route_of',
                fault.wrap(paste_mod.route_of),
            )
        elif site == EXIT:
            tracer.end = fault.wrap(tracer.end)
        self.middleware = paste_mod.InstrumentMiddleware(self.app)
        self.middleware._tracer = lambda: tracer
        self.started = []

    def app(self, environ, start_response):
        outcome = environ['test.outcome']
        if not isinstance(outcome, BaseException):
            start_response('200 OK', [('X-Test', '1')])
        return self.nova(outcome)

    def call(self, outcome):
        environ = {
            'REQUEST_METHOD': 'GET',
            'SCRIPT_NAME': '/v2.1',
            'PATH_INFO': '/servers/42',
            'test.outcome': outcome,
            'openstack.request_id': 'req-1',
        }
        started = len(self.started)
        try:
            return self.middleware(environ, lambda *a: self.started.append(a))
        finally:
            if not isinstance(outcome, BaseException):
                # nova's start_response got what nova's app gave
                self.test.assertEqual(
                    [('200 OK', [('X-Test', '1')])], self.started[started:]
                )

    def counters(self):
        return [paste_mod.FAULTS]


class SpanByHand(Kind):
    """``with tracer.span(...)`` around nova's code."""

    name = 'tracer.span'
    sites = (CLOCK, EXIT_CLOCK, RECORDER, EXIT)

    def setup(self, site, fault):
        rec = self.recorder(site, fault)
        self.tracer = tracer_mod.Tracer(rec)
        if site == EXIT:
            self.tracer.end = fault.wrap(self.tracer.end)

    def call(self, outcome):
        with self.tracer.span('compute.build', attrs={'n': 1}):
            return self.nova(outcome)

    def counters(self):
        return [tracer_mod.span_faults()]


class NotifierDriver(Kind):
    """The notifier driver: its start never fails nova's notifier."""

    name = 'notifier driver'
    sites = (RECORDER, EXTRACTOR)

    def setup(self, site, fault):
        # the start itself stands in: nothing is set up for real
        if site == RECORDER:
            self.patch(
                'instrument.runtime.lifecycle.setup',
                fault.wrap(lambda conf, name: None),
            )
        else:
            self.patch(
                'instrument.runtime.lifecycle.setup', lambda conf, name: None
            )
            self.patch(
                'instrument.loaders.program_of',
                fault.wrap(loader_mod.program_of),
            )
        self.conf = self.test.make_conf(programs=['*'])

    def outcomes(self):
        return [(None, ('value', None))]

    def call(self, outcome):
        driver = notifier_mod.InstrumentDriver(
            self.conf, ['notifications'], None
        )
        self.ran += 1
        self.after_nova = True
        return driver.notify({}, {'event_type': 'x'}, 'INFO', None)

    def counters(self):
        return [loader_mod.FAULTS]


class ExitHook(Kind):
    """The HOOK on ``os._exit`` that writes the buffers first."""

    name = 'exit hook'
    sites = (RECORDER,)

    def setup(self, site, fault):
        self.patch(
            'instrument.runtime.buffer.flush_before_exit',
            fault.wrap(lambda: True),
        )
        rec = self.recorder()
        self.mod = self.module()
        [point] = process_target.EXIT_POINTS
        point = dataclasses.replace(point, module=self.mod.__name__)
        patcher = patcher_mod.Patcher([point], rec)
        self.test.addCleanup(patcher.remove)
        patcher.apply()
        self.state = patcher.state(point.name)

    def call(self, outcome):
        return self.mod._exit(outcome, self.nova)

    def counters(self):
        return [self.state]


class _RetryDecorator:
    """oslo.db's ``wrap_db_retry`` instance (what the recorder reads)."""

    max_retries = 5

    def _is_exception_expected(self, exc):
        return True


class DbRetry(Kind):
    """The ``db.retry`` recorder on ``_is_exception_expected``."""

    name = 'DB retry'
    sites = (RECORDER, EXTRACTOR)

    def setup(self, site, fault):
        rec = self.recorder()
        if site == RECORDER:
            rec.instant = fault.wrap(rec.instant)
        else:
            self.patch(
                'instrument.targets.sqlalchemy.retries._retry_loop_locals',
                fault.wrap(retries_mod._retry_loop_locals),
            )
        self.retries = retries_mod.RetryRecorder(rec)
        self.retries._active = True
        # the place of the exception, from the method's signature
        self.retries._replacement(
            _RetryDecorator._is_exception_expected, None, _RetryDecorator
        )

    def call(self, outcome):
        return self.retries._wrapper(
            lambda exc: self.nova(outcome), _RetryDecorator(), (outcome,), {}
        )

    def counters(self):
        return [self.retries.faults]


KINDS = (
    SpanPoint,
    DetailPoint,
    HookPoint,
    CellQuery,
    LockWrapper,
    LockDecorator,
    BuildSlot,
    PoolCheckout,
    SqlListeners,
    Keystoneauth,
    PeriodicTask,
    PasteFilter,
    SpanByHand,
    NotifierDriver,
    ExitHook,
    DbRetry,
)

ROWS = tuple(
    (kind, site, fault_kind)
    for kind in KINDS
    for site in kind.sites
    for fault_kind in faultinject.KINDS
)


class FaultMatrixTest(base.TestCase):
    """One test per row of ``ROWS`` (made below)."""

    def counted(self, kind) -> int:
        return sum(counter.count for counter in kind.counters())

    def setUp(self):
        super().setUp()
        # No current span, whatever an earlier test left behind.
        token = recorder_mod._CURRENT.set(None)
        self.addCleanup(recorder_mod._CURRENT.reset, token)

    def check(self, kind_cls, site: str, fault_kind: str) -> None:
        kind = kind_cls(self)
        fault = faultinject.Fault(
            fault_kind,
            hang_s=0.02,
            where=kind.where_exit() if site == EXIT_CLOCK else None,
        )
        kind.setup(site, fault)
        before = self.counted(kind)
        outcomes = kind.outcomes()
        for n, (outcome, expected) in enumerate(outcomes):
            got = kind.answer(outcome)
            if kind.identity:
                self.assertEqual(expected[0], got[0], got)
                self.assertIs(expected[1], got[1], 'nova\'s answer changed')
                if got[0] == 'raised':
                    self.assertIsNone(
                        got[1].__context__,
                        'nova\'s exception chained to a fault',
                    )
            else:
                self.assertEqual(expected, got)
            self.assertEqual(
                n + 1, kind.ran, 'nova\'s call must run exactly once'
            )
            self.assertIsNone(
                recorder_mod._CURRENT.get(), 'a span was left current'
            )
        self.assertGreaterEqual(fault.hits, 1, 'the site was not reached')
        counted = self.counted(kind) - before
        if fault_kind == RAISE:
            self.assertGreaterEqual(fault.raised, 1)
            self.assertEqual(
                fault.raised, counted, 'each fault is counted once'
            )
        else:
            self.assertGreaterEqual(fault.hung, 1)
            self.assertEqual(0, counted, 'a hang is not a fault')


def _row_test(kind, site, fault_kind):
    def test(self):
        self.check(kind, site, fault_kind)

    test.__doc__ = '%s, fault at its %s: %s' % (kind.name, site, fault_kind)
    return test


def _test_name(*parts) -> str:
    return (
        'test_'
        + '_'.join(
            part.replace(' ', '_').replace('.', '_') for part in parts
        ).lower()
    )


for _kind, _site, _fault_kind in ROWS:
    setattr(
        FaultMatrixTest,
        _test_name(_kind.name, _site, _fault_kind),
        _row_test(_kind, _site, _fault_kind),
    )


# -- the sinks ----------------------------------------------------------------

HANG_S = 60.0
# A call that waited for the hanging sink would take HANG_S: a bound far
# below it, far above what a loaded machine's scheduling adds.
SINK_CALL_BOUND_S = 10.0
CALLS = 3000


def _file_site(test, fault, sink):
    sink._os_write = fault.wrap(os.write)


def _log_site(test, fault, sink):
    from instrument.sinks import log

    test.useFixture(
        fixtures.MonkeyPatch(
            'instrument.sinks.log._log_lines', fault.wrap(log._log_lines)
        )
    )


class _Exporter:
    """The OTLP exporter, its export faulted."""

    def __init__(self, fault):
        from instrument.sinks.otlp import spans

        self.export = fault.wrap(lambda batch: spans.EXPORT_SUCCESS)

    def shutdown(self):
        pass


def _otlp_site(test, fault, sink):
    pass  # make_exporter is patched before the sink is made


SINKS = {'file': _file_site, 'log': _log_site, 'otlp': _otlp_site}
SINK_ROWS = tuple(
    (name, fault_kind) for name in SINKS for fault_kind in faultinject.KINDS
)


class SinkFaultMatrixTest(base.TestCase):
    """Each sink's I/O raising or hanging; nova never waits for it."""

    def check(self, name: str, fault_kind: str) -> None:
        release = threading.Event()
        fault = faultinject.Fault(
            fault_kind, hang_s=HANG_S, hang_times=1, sleep=release.wait
        )
        if name == 'otlp':
            self.useFixture(
                fixtures.MonkeyPatch(
                    'instrument.sinks.otlp.exporters.make_exporter',
                    lambda *args, **kwargs: _Exporter(fault),
                )
            )
        conf = self.make_conf(
            sinks=[name], otlp_endpoint='http://127.0.0.1:9/v1/traces'
        )
        identity = process.ProcessIdentity.create('nova-compute', 'cmp-1')
        [sink] = sink_mod.load([name], conf, identity)
        SINKS[name](self, fault, sink)
        buf = buffer_mod.EventBuffer([sink], 1000, 0.01, identity)
        self.addCleanup(buf.close, timeout=2.0)
        self.addCleanup(release.set)
        rec = recorder_mod.Recorder(buf, identity)
        kind = SpanPoint(self)
        kind.recorder = lambda *args: rec
        kind.setup(None, None)
        slowest = 0.0
        deadline = time.monotonic() + 10.0
        n = 0
        while n < CALLS or (fault.hits == 0 and time.monotonic() < deadline):
            outcome = Result() if n % 2 else ValueError('nova failed')
            t0 = time.monotonic()
            got = kind.answer(outcome)
            slowest = max(slowest, time.monotonic() - t0)
            self.assertIs(outcome, got[1], 'nova\'s answer changed')
            n += 1
            if n % 500 == 0:
                time.sleep(0.02)  # the writer gets to the sink
        self.assertEqual(n, kind.ran)
        self.assertGreaterEqual(fault.hits, 1, 'the sink was not reached')
        # nova's thread never reaches the sink, and no call waited for
        # one that hangs (HANG_S); a wall-clock bound of its own would
        # measure the machine's load (a call of the raising case once
        # took 1.6 s on a machine at load 10)
        self.assertNotIn(
            threading.get_ident(),
            fault.thread_ids,
            'the sink was written from nova\'s thread',
        )
        self.assertLess(
            slowest, SINK_CALL_BOUND_S, 'a call waited for the sink'
        )
        if fault_kind == HANG:
            # still stuck in the sink as nova's calls went on
            self.assertTrue(_wait(lambda: fault.hanging == 1))
        else:
            self.assertTrue(
                _wait(
                    lambda: (
                        buf.drain(1.0)
                        and (sink.dropped or buf.counts().get(name))
                    )
                )
            )


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def _sink_test(name, fault_kind):
    def test(self):
        self.check(name, fault_kind)

    test.__doc__ = 'the %s sink: %s' % (name, fault_kind)
    return test


for _name, _fault_kind in SINK_ROWS:
    setattr(
        SinkFaultMatrixTest,
        _test_name(_name, _fault_kind),
        _sink_test(_name, _fault_kind),
    )
