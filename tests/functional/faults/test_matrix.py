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
"""The fault-injection matrix on real nova (issue 27).

A row is ``(point kind, fault site, fault kind)``: ``MATRIX`` holds,
for each kind of place where the library runs code in nova's call path,
how a ``tests.faultinject.Fault`` is put at each of its sites (the
clock, the clock read once nova's call has run, the recorder, the
extractor, the exit path) and which ``Faults`` counters count what it
raises.

A span point's wrapper does the recorder's ``begin`` and ``end`` steps
itself (``instrument.runtime.wrappers``, issue 31): its recorder and
exit sites are the parts those steps call (``SpanSteps``: the enqueue's
``append``, the frame's ``reset_frame``), put where only the inline
steps reach them (``Site.reach``: each must be reached); the ``called
recorder`` site replaces ``begin`` and ``end`` themselves, which makes
the wrapper call them.

Each row runs the scenario of ``base`` (boots that succeed and fail,
views, errors, deletes, notifications; with a compute's periodic
resource audit for the periodic task rows) with the fault armed, and
checks:

* nova's answers, errors and notifications are those of the same
  scenario uninstrumented (run once per process and kept: every row
  compares with it);
* the site was reached; a ``raise`` is counted exactly once per fault,
  by the kind's own counters, each counter logged once; a ``hang``
  (each of the first three calls blocks for a while) is no fault.

``SINK_ROWS``: every sink (file, log, OTLP) raising or hanging in its
I/O.  A hanging sink is still stuck when the scenario has ended: no
call of nova waited for it.

Both modes: ``tox -e functional`` runs the tier under eventlet and
under native threads (in CI the call path's hang rows under native
threads only, and the older releases' tiers the raise rows: tox.ini
says why).  A row that cannot happen in a mode (the build slots are
eventlet's) says so and is skipped in that mode only.
"""

import dataclasses
import importlib
import os
import threading
import time

import fixtures

from instrument import schema
from instrument.loaders import paste as paste_mod
from instrument.runtime import faults as faults_mod
from instrument.runtime import lifecycle
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import threads
from instrument.runtime import waits as waits_mod
from instrument.sinks import log as log_sink
from instrument.targets import keystoneauth as ksa_target
from instrument.targets.nova import frames as nova_frames
from instrument.targets.nova import pools as nova_pools
from instrument.targets.sqlalchemy import listeners as sql_listeners
from tests import faultinject
from tests.functional.faults import base

RAISE = faultinject.RAISE
HANG = faultinject.HANG
CLOCK = 'clock'
EXIT_CLOCK = 'exit clock'
RECORDER = 'recorder'
CALLED = 'called recorder'
EXTRACTOR = 'extractor'
EXIT = 'exit'
EVENTLET = 'eventlet'
THREADS = 'threads'

POINTS = 'point '  # every patch point's counter ("point <name>")
PASTE = paste_mod.FAULTS.name
LOCKS = 'the lock timing'
SLOTS = 'the build slot timing'
SQL = 'the SQL listeners'
CELLS = nova_frames.FAULTS.name
PERIODIC = 'a periodic task span'
START = 'the start of the instrumentation'


def _mode() -> str:
    return EVENTLET if threads.eventlet_patched() else THREADS


def _after_statement(frame) -> bool:
    """A ``where`` (SQLAlchemy 2.0): the clock read of the dialect's
    statement timer once the statement ran (its result is a local)."""
    return (
        frame is not None
        and frame.f_code.co_name in ('do_execute', 'do_execute_no_params')
        and 'result' in frame.f_locals
    )


@dataclasses.dataclass(frozen=True)
class Site:
    """How a fault is put at one site of a kind (``inject(test,
    fault)``, before nova and the instrumentation start) and the names
    of the ``Faults`` counters that count it (a name ending with a
    space: every counter whose name starts with it)."""

    inject: object
    counters: tuple
    #: reached while nova starts (armed from the start)
    at_start: bool = False
    modes: tuple = (EVENTLET, THREADS)
    #: the scenario runs a compute's periodic resource audit
    periodic: bool = False
    #: the functions wrapped (their ``Fault.wrap`` names) that must each
    #: be reached, not only one of them
    reach: tuple = ()


def _patch(test, name, value):
    test.useFixture(fixtures.MonkeyPatch(name, value))


def _wrap(test, fault, name, real):
    _patch(test, name, fault.wrap(real))


def _clock(where):
    """The recorder's clock (spans' starts and ends), in scope; never
    the read of ``abandon``, which ends a span on a fault path (a
    fault there counts nothing, by design)."""

    def inject(test, fault):
        fault.where = _not_in('abandon', where)
        _wrap(
            test,
            fault,
            'instrument.runtime.recorder._perf_ns',
            recorder_mod._perf_ns,
        )

    return inject


def _span_functions(where, which=('begin',)):
    """The recorder's ``begin`` (and/or ``end``), in scope: replaced,
    they carry no ``steps``, and the span wrappers call them."""
    real = recorder_mod.Recorder._span_functions

    def inject(test, fault):
        fault.where = where

        def span_functions(recorder):
            begin, end = real(recorder)
            if 'begin' in which:
                begin = fault.wrap(begin)
            if 'end' in which:
                end = fault.wrap(end)
            return begin, end

        _patch(
            test,
            'instrument.runtime.recorder.Recorder._span_functions',
            span_functions,
        )

    return inject


def _span_steps(where, step):
    """One of the parts a span's start or end calls (``SpanSteps``:
    ``append`` the start's enqueue, after its frame is set;
    ``reset_frame`` the end's), in scope: the same parts run the span
    wrappers' inline steps and ``Recorder.begin`` and ``end``, whose
    ``steps`` stay theirs (the wrappers keep doing the steps inline)."""
    real = recorder_mod.Recorder._span_steps

    def inject(test, fault):
        fault.where = where

        def span_steps(recorder):
            steps = real(recorder)
            return steps._replace(
                **{step: fault.wrap(getattr(steps, step), step)}
            )

        _patch(
            test,
            'instrument.runtime.recorder.Recorder._span_steps',
            span_steps,
        )

    return inject


def _resolve(dotted: str):
    """The object named ``dotted`` (a module, then attributes)."""
    parts = dotted.split('.')
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:n]))
        except ImportError:
            continue
        for attr in parts[n:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _functions(*names, where=None):
    """Functions or methods (``module.attr`` or ``module.Class.attr``
    under ``instrument``)."""

    def inject(test, fault):
        fault.where = where
        for name in names:
            name = 'instrument.' + name
            _wrap(test, fault, name, _resolve(name))

    return inject


def _all(*injects):
    def inject(test, fault):
        for one in injects:
            one(test, fault)

    return inject


def _wait_records(where):
    """The ``record`` of every ``WaitRecorder``, in scope."""
    make = waits_mod.WaitRecorder._make_record

    def inject(test, fault):
        fault.where = where
        _patch(
            test,
            'instrument.runtime.waits.WaitRecorder._make_record',
            lambda waits: fault.wrap(make(waits)),
        )

    return inject


def _ksa_points(**hooks):
    """keystoneauth1's span point with its ``hooks`` faulted."""

    def inject(test, fault):
        request, send = ksa_target.KSA_POINTS
        request = dataclasses.replace(
            request,
            **{name: fault.wrap(getattr(request, name)) for name in hooks},
        )
        _patch(
            test, 'instrument.targets.keystoneauth.KSA_POINTS', (request, send)
        )

    return inject


def _in_file(path, depth=3):
    return faultinject.in_files(os.path.join('instrument', path), depth=depth)


def _not_in(name, where=None):
    """``where``, for calls not made by the function ``name``."""
    return lambda frame: (
        frame.f_code.co_name != name and (where is None or where(frame))
    )


SPAN_POINT = faultinject.in_span_wrapper(detail=False)
DETAIL_POINT = faultinject.in_span_wrapper(detail=True)
KSA = faultinject.in_span_wrapper(ev=schema.EV_KSA_REQUEST)
# Called by the span wrapper itself: its inline start or end (a step
# called by Recorder.begin or end is one frame further).
SPAN_INLINE = faultinject.in_span_wrapper(depth=1, detail=False)
KSA_INLINE = faultinject.in_span_wrapper(depth=1, ev=schema.EV_KSA_REQUEST)

MATRIX = {
    'paste filter': {
        CLOCK: Site(_clock(_in_file('loaders/paste.py')), (PASTE,)),
        EXIT_CLOCK: Site(
            _clock(
                faultinject.all_of(
                    _in_file('loaders/paste.py'),
                    faultinject.in_functions('_end', depth=2),
                )
            ),
            (PASTE,),
        ),
        RECORDER: Site(_functions('runtime.tracer.Tracer.begin'), (PASTE,)),
        EXTRACTOR: Site(_functions('loaders.paste.route_of'), (PASTE,)),
        EXIT: Site(_functions('runtime.tracer.Tracer.end'), (PASTE,)),
    },
    'span point': {
        CLOCK: Site(_clock(SPAN_POINT), (POINTS,)),
        EXIT_CLOCK: Site(
            _clock(
                faultinject.in_span_wrapper(
                    depth=1, after_call=True, detail=False
                )
            ),
            (POINTS,),
        ),
        # the inline start's enqueue (its frame set: released)
        RECORDER: Site(
            _span_steps(SPAN_INLINE, 'append'), (POINTS,), reach=('append',)
        ),
        # begin and end of another recorder's: called
        CALLED: Site(_span_functions(SPAN_POINT, ('begin', 'end')), (POINTS,)),
        EXTRACTOR: Site(
            _functions(
                'targets.nova.extract.compute_build_attrs',
                'targets.nova.extract.count',
                'targets.oslo_messaging._rpc_attrs',
                'targets.oslo_messaging._rpc_context',
            ),
            (POINTS,),
        ),
        # the inline end's frame reset (not Recorder.end's: called for
        # a call that raised), the on_exit hooks (called before it)
        EXIT: Site(
            _all(
                _span_steps(_not_in('end', SPAN_POINT), 'reset_frame'),
                _functions(
                    'targets.nova.extract.selected',
                    'targets.nova.extract.outcome',
                    'targets.nova.extract.created_attrs',
                    where=_not_in('end', SPAN_POINT),
                ),
            ),
            (POINTS,),
            reach=('reset_frame',),
        ),
    },
    'detail point': {
        CLOCK: Site(_clock(DETAIL_POINT), (POINTS,)),
        EXIT_CLOCK: Site(
            _clock(
                faultinject.in_span_wrapper(
                    depth=1, after_call=True, detail=True
                )
            ),
            (POINTS,),
        ),
        RECORDER: Site(
            _functions('runtime.recorder.Recorder.wants'), (POINTS,)
        ),
        # (the inline end's reset, after the on_exit)
        EXIT: Site(
            _all(
                _span_steps(DETAIL_POINT, 'reset_frame'),
                _functions(
                    'targets.nova.extract.len_result', where=DETAIL_POINT
                ),
            ),
            (POINTS,),
        ),
    },
    'hook point': {
        # the frame switch in a thread nova started
        RECORDER: Site(
            _functions(
                'runtime.recorder.set_frame',
                where=_in_file('targets/nova/frames.py', 1),
            ),
            (CELLS,),
        ),
        EXTRACTOR: Site(
            _functions(
                'targets.nova.threads.carry_span',
                'targets.oslo_messaging._inject_traceparent',
            ),
            (POINTS,),
        ),
        # the compute driver's hook: when nova-compute starts
        EXIT: Site(
            _functions('targets.nova.driver.patch_driver_spawn'),
            (POINTS,),
            at_start=True,
        ),
    },
    'lock wrapper': {
        CLOCK: Site(_functions('targets.oslo_concurrency.clock'), (LOCKS,)),
        EXIT_CLOCK: Site(
            _functions(
                'targets.oslo_concurrency.clock',
                where=faultinject.all_of(
                    faultinject.in_functions('__exit__', depth=1),
                    _in_file('targets/oslo_concurrency.py', 1),
                ),
            ),
            (LOCKS,),
        ),
        RECORDER: Site(
            _wait_records(_in_file('targets/oslo_concurrency.py', 2)), (LOCKS,)
        ),
        EXTRACTOR: Site(
            _functions('targets.oslo_concurrency.lock_name'), (LOCKS,)
        ),
    },
    'build slot': {
        CLOCK: Site(
            _functions('targets.nova.pools.clock'), (SLOTS,), modes=(EVENTLET,)
        ),
        EXIT_CLOCK: Site(
            _functions(
                'targets.nova.pools.clock',
                where=faultinject.after_line(
                    nova_pools.TimedSemaphore.__enter__,
                    'value = self.__wrapped__.__enter__()',
                ),
            ),
            (SLOTS,),
            modes=(EVENTLET,),
        ),
        RECORDER: Site(
            _wait_records(_in_file('targets/nova/pools.py', 1)),
            (SLOTS,),
            modes=(EVENTLET,),
        ),
    },
    'SQL listeners': {
        # (the writer's reads are not nova's: its process())
        CLOCK: Site(
            _functions(
                'targets.sqlalchemy.listeners._perf_ns',
                where=_not_in('process'),
            ),
            (SQL,),
        ),
        EXIT_CLOCK: Site(
            _functions(
                'targets.sqlalchemy.listeners._perf_ns',
                where=_after_statement
                if sql_listeners.DIALECT_EXEC
                else faultinject.in_functions('after_cursor_execute', depth=1),
            ),
            (SQL,),
        ),
        # (no RECORDER row: a statement is queued by an append inside
        # the listener closures, under their guard, with no call a fault
        # can be put in; tests/unit/test_fault_matrix.py holds the
        # guard of every listener)
        EXTRACTOR: Site(
            _functions(
                'runtime.recorder.current_frame',
                where=_in_file('targets/sqlalchemy/listeners.py', 1),
            ),
            (SQL,),
        ),
        # the error listeners (the duplicate flavor, a DB error that
        # nova answers with 409)
        EXIT: Site(
            _functions(
                'runtime.tracer.error_of',
                where=_in_file('targets/sqlalchemy/listeners.py', 1),
            ),
            (SQL,),
        ),
    },
    'keystoneauth': {
        CLOCK: Site(_clock(KSA), (POINTS,)),
        EXIT_CLOCK: Site(
            _clock(
                faultinject.in_span_wrapper(
                    depth=1, after_call=True, ev=schema.EV_KSA_REQUEST
                )
            ),
            (POINTS,),
        ),
        RECORDER: Site(
            _span_steps(KSA_INLINE, 'append'), (POINTS,), reach=('append',)
        ),
        EXTRACTOR: Site(_ksa_points(on_enter=True), (POINTS,)),
        EXIT: Site(_ksa_points(on_exit=True, on_error=True), (POINTS,)),
    },
    'periodic task': {
        CLOCK: Site(
            _clock(_in_file('targets/periodic.py')), (PERIODIC,), periodic=True
        ),
        EXIT_CLOCK: Site(
            _clock(faultinject.in_functions('_end', depth=1)),
            (PERIODIC,),
            periodic=True,
        ),
        RECORDER: Site(
            _span_functions(_in_file('targets/periodic.py', 1)),
            (PERIODIC,),
            periodic=True,
        ),
        EXTRACTOR: Site(
            _functions(
                'schema.periodic_req', where=_in_file('targets/periodic.py', 1)
            ),
            (PERIODIC,),
            periodic=True,
        ),
        EXIT: Site(
            _span_functions(_in_file('targets/periodic.py', 1), ('end',)),
            (PERIODIC,),
            periodic=True,
        ),
    },
    'notifier driver': {
        RECORDER: Site(
            _functions('runtime.lifecycle.setup'), (START,), at_start=True
        ),
    },
}

ROWS = tuple(
    (kind, site, fault_kind)
    for kind, sites in MATRIX.items()
    for site in sites
    for fault_kind in faultinject.KINDS
)

# What the scenario answers uninstrumented, per process (one mode):
# {periodic: transcript}.
_CLEAN = {}


def _counted_by(name: str, names) -> bool:
    return any(
        name == n or (n.endswith(' ') and name.startswith(n)) for n in names
    )


def _counted(names) -> int:
    """Faults counted by the counters ``names`` (see ``Site``)."""
    return sum(
        count
        for name, count in faults_mod.totals().items()
        if _counted_by(name, names)
    )


class MatrixTestCase(base.FaultTestCase):
    """The scenario with one fault armed, checked against the clean
    run (see the module docstring)."""

    def inject_before_start(self):
        row = self.row()
        if row is None:
            return
        self.fault = self.make_fault()
        self.setup_fault()

    def row(self):
        return None

    def assert_unaffected(self, faulted, periodic=False):
        """``faulted`` equals the clean run of this process (made in
        this cloud, now uninstrumented, when there is none yet)."""
        clean = _CLEAN.get(periodic)
        if clean is None:
            clean = _CLEAN[periodic] = self.uninstrumented(periodic)
            statuses = [
                e[2]
                for e in clean
                if e[0] not in ('notifications', 'periodic')
            ]
            self.assertEqual(
                [200, 202, 202, 200, 200, 200, 409, 404, 400, 204, 204, 200],
                statuses,
            )
            self.assertIn('No valid host', str(clean[4]))
        self.assertEqual(clean, faulted)

    def uninstrumented(self, periodic=False):
        lifecycle.teardown()
        self.assertIsNone(lifecycle.active())
        return self.run_scenario(periodic)

    def run_scenario(self, periodic=False):
        entries = self.scenario()
        if periodic:
            entries.append(self.periodic_audit())
        return entries

    def periodic_audit(self):
        """nova-compute's resource audit, run as nova runs it (through
        ``run_periodic_tasks``): ``('periodic', times the driver was
        audited, task errors nova logged)``."""
        from nova import context as nova_context
        from oslo_service import periodic_task

        manager = self.compute.manager
        driver = manager.driver
        original = driver.update_provider_tree
        audited = []

        def update_provider_tree(*args, **kwargs):
            audited.append(1)
            return original(*args, **kwargs)

        driver.update_provider_tree = update_provider_tree
        errors = self.log_count('Error during ')
        try:
            manager._periodic_last_run = {
                name: None
                if name == 'update_available_resource'
                else periodic_task.now()
                for name in manager._periodic_last_run
            }
            manager.run_periodic_tasks(nova_context.get_admin_context())
        finally:
            driver.update_provider_tree = original
        return [
            'periodic',
            len(audited),
            self.log_count('Error during ') - errors,
        ]


class FaultMatrixTest(MatrixTestCase):
    """One test per row of ``ROWS`` (made below)."""

    def row(self):
        return getattr(self, '_row', None)

    def make_fault(self):
        kind, site, fault_kind = self._row
        spec = MATRIX[kind][site]
        if _mode() not in spec.modes:
            self.skipTest(
                '%s: not in %s mode (nova does not use it)' % (kind, _mode())
            )
        fault = faultinject.Fault(fault_kind, hang_s=0.05, hang_times=3)
        fault.armed = spec.at_start
        self.spec = spec
        return fault

    def setup_fault(self):
        self.spec.inject(self, self.fault)

    def _configure_instrument(self, settings):
        super()._configure_instrument(settings)
        if (
            self.row() is not None
            and self.spec.at_start
            and self.fault.kind == RAISE
            and self.spec.counters == (START,)
        ):
            self.require_instrumentation = False

    def check(self):
        fault = self.fault
        spec = self.spec
        fault.armed = True
        faulted = self.run_scenario(spec.periodic)
        fault.armed = False
        self.assertGreaterEqual(fault.hits, 1, 'the site was not reached')
        for name in spec.reach:
            self.assertGreaterEqual(
                fault.reached[name], 1, '%s was not reached' % name
            )
        counted = _counted(spec.counters)
        if fault.kind == RAISE:
            self.assertGreaterEqual(fault.raised, 1)
            self.assertEqual(
                fault.raised, counted, 'each fault is counted once by its kind'
            )
            for name in faults_mod.totals():
                if _counted_by(name, spec.counters):
                    self.assertEqual(
                        1, self.log_count('fault in %s (' % name), name
                    )
        else:
            self.assertGreaterEqual(fault.hung, 1, 'nothing hung')
            self.assertEqual(0, counted, 'a hang is not a fault')
        self.assert_unaffected(faulted, spec.periodic)


def _row_test(doc):
    def test(self):
        self.check()

    test.__doc__ = doc
    return test


def _test_name(*parts) -> str:
    return (
        'test_'
        + '_'.join(
            part.replace(' ', '_').replace('.', '_') for part in parts
        ).lower()
    )


# One class per row: a row's fault is put in place before its cloud
# starts (``inject_before_start``).
for _row in ROWS:
    _name = _test_name(*_row)
    _doc = '%s, fault at its %s: %s' % _row
    globals()['FaultMatrix_' + _name[5:]] = type(
        'FaultMatrix_' + _name[5:],
        (FaultMatrixTest,),
        {'_row': _row, _name: _row_test(_doc), '__doc__': _doc},
    )


# -- the sinks ----------------------------------------------------------------

# Longer than any scenario: a call that waited for the sink would never
# have finished before it is released.
SINK_HANG_S = 300.0


class _Exporter:
    """The OTLP exporter, its export faulted."""

    def __init__(self, fault):
        from instrument.sinks.otlp import spans

        self.export = fault.wrap(lambda batch: spans.EXPORT_SUCCESS)

    def shutdown(self):
        pass


def _file_site(test, fault):
    from instrument.sinks import file as file_sink

    _patch(
        test,
        'instrument.sinks.file.FileSink._os_write',
        staticmethod(fault.wrap(file_sink.FileSink._os_write)),
    )


def _log_site(test, fault):
    _wrap(test, fault, 'instrument.sinks.log._log_lines', log_sink._log_lines)


def _otlp_site(test, fault):
    _patch(
        test,
        'instrument.sinks.otlp.exporters.make_exporter',
        lambda *args, **kwargs: _Exporter(fault),
    )


# sink: (its site, [instrument] sinks, the event its hang waits on)
SINKS = {
    'file': (_file_site, ['file'], threads.os_event),
    # logged from the hub under eventlet, from the writer otherwise
    'log': (_log_site, ['log'], lambda: threading.Event()),
    'otlp': (_otlp_site, ['file', 'otlp'], threads.os_event),
}
SINK_ROWS = tuple(
    (name, fault_kind) for name in SINKS for fault_kind in faultinject.KINDS
)


class SinkMatrixTest(MatrixTestCase):
    """One test per row of ``SINK_ROWS`` (made below)."""

    def row(self):
        return getattr(self, '_row', None)

    def make_fault(self):
        name, fault_kind = self._row
        site, sinks, event = SINKS[name]
        self.release = event()
        self.addCleanup(self.release.set)
        self.instrument_flags = {'sinks': sinks}
        if name == 'otlp':
            self.instrument_flags['otlp_endpoint'] = (
                'http://127.0.0.1:9/v1/traces'
            )
        return faultinject.Fault(
            fault_kind,
            hang_s=SINK_HANG_S,
            hang_times=1,
            sleep=self.release.wait,
        )

    def setup_fault(self):
        SINKS[self._row[0]][0](self, self.fault)

    def check(self):
        name, fault_kind = self._row
        fault = self.fault
        faulted = self.run_scenario()
        active = lifecycle.active()
        [sink] = [s for s in active.buffer.sinks if s.name == name]
        self.assertTrue(
            _wait(lambda: fault.hits >= 1), 'the sink was not reached'
        )
        if fault_kind == HANG:
            # nova's scenario is over; the sink is still stuck
            self.assertEqual(1, fault.hanging, fault)
        else:
            self.assertTrue(
                _wait(
                    lambda: (
                        active.buffer.drain(1.0)
                        and active.buffer.counts().get(name)
                    )
                )
            )
        self.release.set()
        fault.armed = False
        self.assert_unaffected(faulted)


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


for _row in SINK_ROWS:
    _name = _test_name(*_row)
    _doc = 'the %s sink: %s' % _row
    globals()['SinkMatrix_' + _name[5:]] = type(
        'SinkMatrix_' + _name[5:],
        (SinkMatrixTest,),
        {'_row': _row, _name: _row_test(_doc), '__doc__': _doc},
    )
