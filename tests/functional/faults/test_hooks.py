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
"""A fault in each kind of hook leaves nova's answers as they were.

One class per kind of hook: the paste filter, span points, detail
points, HOOK points (the RPC traceparent, ``spawn_on``, the compute
driver), the SQL listeners, the notifier driver, the buffer's writer and
the OTLP exporter.  Each test injects a fault into the library's
internals, runs the scenario of ``base`` (a boot, a failed boot, views,
errors, deletes, notifications), checks the fault was counted and
logged once, and compares with the same scenario run uninstrumented in
the same cloud.
"""

import sys
import time

import fixtures

from instrument import loaders as loader
from instrument.loaders import paste
from instrument.patching import patcher
from instrument.runtime import faults
from instrument.runtime import lifecycle
from tests.functional.faults import base


class InjectedFault(Exception):
    """What the tests make the library's internals raise."""


def _boom(*args, **kwargs):
    raise InjectedFault('injected into the instrumentation')


def _point_name(module, target):
    return '%s:%s' % (module, target)


RPC_CAST = _point_name('oslo_messaging.rpc.client', '_BaseCallContext.cast')
RPC_CALL = _point_name('oslo_messaging.rpc.client', '_BaseCallContext.call')
SELECT = _point_name(
    'nova.scheduler.manager', 'SchedulerManager.select_destinations'
)
BUILD = _point_name(
    'nova.compute.manager', 'ComputeManager._do_build_and_run_instance'
)
FILTER = _point_name(
    'nova.scheduler.host_manager', 'HostManager.get_filtered_hosts'
)
SEND = _point_name('oslo_messaging.transport', 'Transport._send')
SPAWN_ON = _point_name('nova.thread_pool_factory', 'spawn_on')
DRIVER = _point_name('nova.virt.driver', 'load_compute_driver')


class PasteFilterFaultTest(base.FaultTestCase):
    def test_a_fault_recording_a_request_changes_no_answer(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.tracer.Tracer.begin', _boom
            )
        )
        faulted = self.scenario()
        self.assertGreaterEqual(paste.FAULTS.count, 12)
        self.assertEqual(1, self.log_count('fault in the paste filter'))
        self.assert_nova_unaffected(faulted)


class SpanPointFaultTest(base.FaultTestCase):
    def inject_before_start(self):
        # The points capture their functions when they are applied.
        for name in (
            'oslo_messaging._rpc_attrs',
            'nova.extract.selected',
            'nova.extract.compute_build_attrs',
        ):
            self.useFixture(
                fixtures.MonkeyPatch('instrument.targets.' + name, _boom)
            )

    def test_faults_in_span_points_change_no_answer(self):
        faulted = self.scenario()
        active = lifecycle.active()
        for name in (RPC_CAST, RPC_CALL, SELECT, BUILD):
            state = active.point_state(name)
            self.assertGreaterEqual(state.faults, 1, name)
            self.assertEqual(
                1, self.log_count('fault in point %s ' % name), name
            )
            self.assertEqual(
                state.faults < patcher.FAULT_LIMIT, state.active, name
            )
        self.assert_nova_unaffected(faulted)


class DetailPointTest(base.FaultTestCase):
    instrument_flags = {'detail_sample_rate': 0.0}

    def test_unsampled_detail_point_passes_nova_errors_through(self):
        # Issue 19 item 1: a scheduler filter raising made every boot
        # fail with "No valid host" (nova's call ran twice) instead of
        # its real error.
        self.useFixture(
            fixtures.MonkeyPatch(
                'nova.scheduler.filters.compute_filter.ComputeFilter.'
                'host_passes',
                _boom,
            )
        )
        faulted = self.failed_boot()
        self.assertEqual(0, lifecycle.active().point_state(FILTER).faults)
        self.assertEqual(0, self.log_count('fault in point'))
        clean = self.uninstrumented_boot()
        self.assertNotIn('No valid host', str(clean))
        self.assertIn('InjectedFault', str(clean))
        self.assertEqual(clean, faulted)

    def test_a_fault_sampling_changes_no_answer(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.recorder.Recorder.sampled', _boom
            )
        )
        faulted = self.scenario()
        self.assertGreaterEqual(
            lifecycle.active().point_state(FILTER).faults, 1
        )
        self.assertEqual(1, self.log_count('fault in point %s ' % FILTER))
        self.assert_nova_unaffected(faulted)

    def failed_boot(self):
        t = base.Transcript()
        server = self.request(
            t, 'POST', '/servers', {'server': self.ok_server}
        )['server']['id']
        self.wait_for(server, 'ERROR')
        self.request(t, 'GET', '/servers/%s' % server)
        self.request(t, 'DELETE', '/servers/%s' % server)
        self.wait_for(server, None)
        return t.entries

    def uninstrumented_boot(self):
        lifecycle.teardown()
        return self.failed_boot()


class HookPointFaultTest(base.FaultTestCase):
    def inject_before_start(self):
        for name in (
            'oslo_messaging._inject_traceparent',
            'nova.threads.carry_span',
            'nova.driver.patch_driver_spawn',
        ):
            self.useFixture(
                fixtures.MonkeyPatch('instrument.targets.' + name, _boom)
            )

    def test_faults_in_hooks_change_no_answer(self):
        faulted = self.scenario()
        active = lifecycle.active()
        for name in (SEND, SPAWN_ON, DRIVER):
            self.assertGreaterEqual(active.point_state(name).faults, 1, name)
            self.assertEqual(
                1, self.log_count('fault in point %s ' % name), name
            )
        self.assert_nova_unaffected(faulted)


class _Armed:
    """A stand-in for a library function that raises once armed."""

    def __init__(self, real):
        self.real = real
        self.armed = False

    def __call__(self, *args, **kwargs):
        if self.armed:
            raise InjectedFault('injected into the instrumentation')
        return self.real(*args, **kwargs)


class SqlListenerFaultTest(base.FaultTestCase):
    def listener_faults(self):
        return (
            lifecycle.active()
            .target('sqlalchemy')
            .timing.listeners.faults.count
        )

    def test_a_fault_timing_statements_changes_no_answer(self):
        self.clock.armed = True
        self.addCleanup(setattr, self.clock, 'armed', False)
        faulted = self.scenario()
        self.clock.armed = False
        self.assertGreaterEqual(self.listener_faults(), 1)
        self.assertEqual(1, self.log_count('fault in the SQL listeners'))
        self.assert_nova_unaffected(faulted)

    def inject_before_start(self):
        if self._testMethodName.startswith('test_a_fault_timing'):
            from instrument.targets.sqlalchemy import listeners

            self.clock = _Armed(listeners._perf_ns)
            self.useFixture(
                fixtures.MonkeyPatch(
                    'instrument.targets.sqlalchemy.listeners._perf_ns',
                    self.clock,
                )
            )

    def test_a_fault_in_transaction_listeners_changes_no_answer(self):
        # the start of every transaction fails: the BEGIN listener
        # (``on_begin``, SQLAlchemy 1.4), or under 2.0 the statement
        # timer's ``_begun`` (oslo.db's sqlite engines send BEGIN from a
        # begin listener, before the dialect's do_begin); the
        # COMMIT/ROLLBACK timer then finds no transaction state
        from instrument.targets.sqlalchemy import listeners

        real = listeners._current_frame

        def current_frame():
            if sys._getframe(1).f_code.co_name in ('on_begin', '_begun'):
                _boom()
            return real()

        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.listeners._current_frame',
                current_frame,
            )
        )
        faulted = self.scenario()
        self.assertGreaterEqual(self.listener_faults(), 1)
        self.assertEqual(1, self.log_count('fault in the SQL listeners'))
        self.assert_nova_unaffected(faulted)

    def test_a_fault_in_the_error_listeners_changes_no_answer(self):
        # The duplicate flavor of the scenario is an IntegrityError that
        # oslo.db turns into DBDuplicateEntry (nova: 409).
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.tracer.error_of', _boom)
        )
        faulted = self.scenario()
        self.assertGreaterEqual(self.listener_faults(), 1)
        self.assertEqual(1, self.log_count('fault in the SQL listeners'))
        self.assert_nova_unaffected(faulted)


class NotifierDriverFaultTest(base.FaultTestCase):
    require_instrumentation = False

    def inject_before_start(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.lifecycle.setup', _boom)
        )

    def test_a_fault_starting_leaves_nova_running_uninstrumented(self):
        self.assertIsNone(lifecycle.active())
        faulted = self.scenario()
        # The driver of each notifier nova made, and the paste filter.
        self.assertGreaterEqual(loader.FAULTS.count, 2)
        self.assertEqual(
            1, self.log_count('fault in the start of the instrumentation')
        )
        self.assert_nova_unaffected(faulted)


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


class WriterFaultTest(base.FaultTestCase):
    def test_a_failing_sink_changes_no_answer(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.sinks.file.FileSink.write', _boom)
        )
        faulted = self.scenario()
        buf = lifecycle.active().buffer
        buf.drain()
        self.assertGreater(buf.counts()['file'], 0)
        self.assertTrue(
            _wait(lambda: self.log_count('sink file failed') == 1),
            self.stdlog.logger.output[-2000:],
        )
        self.assert_nova_unaffected(faulted)


class FailingExporter:
    """The SDK exporter, failing every export."""

    def export(self, batch):
        raise InjectedFault('injected into the exporter')

    def shutdown(self):
        pass


class OtlpExporterFaultTest(base.FaultTestCase):
    instrument_flags = {
        'sinks': ['file', 'otlp'],
        'otlp_endpoint': 'http://127.0.0.1:9/v1/traces',
    }

    def inject_before_start(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.sinks.otlp.exporters.make_exporter',
                lambda *args, **kwargs: FailingExporter(),
            )
        )

    def test_a_failing_export_changes_no_answer(self):
        faulted = self.scenario()
        active = lifecycle.active()
        [otlp] = [s for s in active.buffer.sinks if s.name == 'otlp']
        active.buffer.drain()
        self.assertTrue(_wait(lambda: otlp.wait_idle(0.1)))
        self.assertGreater(otlp.dropped, 0)
        self.assertEqual(0, otlp.exported)
        self.assertTrue(
            _wait(lambda: self.log_count('cannot export spans') == 1),
            self.stdlog.logger.output[-2000:],
        )
        self.assert_nova_unaffected(faulted)


class FaultRecordTest(base.FaultTestCase):
    """Faults are counted in the span log, not only in memory."""

    def inject_before_start(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.nova.extract.compute_build_attrs', _boom
            )
        )

    def test_faults_are_written_as_counter_records(self):
        self.scenario()
        spans = self.spans()
        counts = [r['attrs'] for r in spans.records if r['ev'] == faults.EVENT]
        self.assertTrue(counts)
        self.assertGreaterEqual(counts[-1].get('point %s' % BUILD, 0), 1)
