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
"""``process.sample``: figures that agree with ``/proc``, the off switch,
SQL pools (forked children: ``tests/system/test_resources.py``)."""

import gc
import os
import threading
import time

import sqlalchemy
from sqlalchemy import pool as sa_pool

from instrument import schema
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import faults
from instrument.runtime import lifecycle
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import resources
from instrument.targets import resources as resources_target
from instrument.targets.sqlalchemy import listeners
from tests.unit import base


def _status_kb(field: str) -> int:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    raise AssertionError(field)


class SamplerTest(base.TestCase):
    def setUp(self):
        super().setUp()
        # (SQLAlchemy 2.0: the engines alive at start are the process's,
        # those of earlier tests included until collected)
        gc.collect()
        self.sink = base.MemorySink()
        self.buffer = buffer_mod.EventBuffer([self.sink], 1000, 3600.0)
        self.addCleanup(self.buffer.close)
        self.recorder = recorder_mod.Recorder(
            self.buffer, process.ProcessIdentity.create('nova-api', 'ctl')
        )
        self.sampler = resources.Sampler(self.recorder, 3600.0)
        self.addCleanup(self.sampler.stop)

    def samples(self) -> list:
        return [
            r for r in self.sink.records if r['ev'] == schema.EV_PROCESS_SAMPLE
        ]

    def test_figures_agree_with_proc(self):
        # Work that shows: a thread that waits, CPU burnt, fds opened.
        stop = threading.Event()
        waiter = threading.Thread(target=stop.wait)
        waiter.start()
        self.addCleanup(waiter.join)
        self.addCleanup(stop.set)
        files = [open(os.devnull) for _ in range(5)]
        for f in files:
            self.addCleanup(f.close)
        sum(i * i for i in range(200000))
        self.sampler.start()
        self.buffer.drain()
        [sample] = self.samples()
        attrs = sample['attrs']
        self.assertEqual('C', sample['ph'])
        rss = _status_kb('VmRSS')
        self.assertLess(abs(attrs['rss_kb'] - rss), rss * 0.2)
        self.assertEqual(len(os.listdir('/proc/self/task')), attrs['threads'])
        # The listing itself opens one more fd for a moment.
        self.assertLessEqual(
            abs(len(os.listdir('/proc/self/fd')) - attrs['fds']), 1
        )
        times = os.times()
        self.assertGreater(attrs['cpu_user_s'], 0)
        # both in clock ticks of 0.01 s; the sum of two floats rounds
        self.assertLessEqual(attrs['cpu_user_s'], times.user + 0.015)
        self.assertLessEqual(attrs['cpu_sys_s'], times.system + 0.015)
        self.assertIsNone(attrs['green'])  # not under eventlet
        self.assertEqual(1000, attrs['buf_size'])
        self.assertEqual(0, attrs['buf_drops'])
        # drained here, not by the writer: no writer CPU to tell
        self.assertNotIn(schema.ATTR_WRITER_CPU_S, attrs)
        # On the spans' clock.
        self.assertLess(abs(sample['ts'] - self.recorder.now_us()), 60 * 10**6)

    def test_interval_and_final_sample(self):
        now = [100.0]
        self.sampler.clock = lambda: now[0]
        self.sampler.interval = 5.0
        self.sampler.start()
        self.buffer.drain()
        now[0] += 1.0
        self.buffer.drain()
        self.assertEqual(1, len(self.samples()))
        now[0] += 5.0
        self.buffer.drain()
        self.assertEqual(2, len(self.samples()))
        self.buffer.close()
        self.assertEqual(3, len(self.samples()))

    def test_one_final_sample_when_two_drains_are_final(self):
        # At close the woken writer and the closing thread both drain
        # with ``final``: the last sample is written once.
        self.sampler.start()
        self.buffer.drain()
        self.buffer._closed = True  # what close sets before its drains
        self.buffer.drain()
        self.buffer.drain()
        self.buffer._closed = False
        self.buffer.close()
        self.assertEqual(2, len(self.samples()))

    def test_buffer_fill_and_drops(self):
        small = buffer_mod.EventBuffer([self.sink], 16, 3600.0)
        self.addCleanup(small.close)
        small.hold()  # nothing written: the queue fills
        recorder = recorder_mod.Recorder(
            small, process.ProcessIdentity.create('nova-api', 'ctl')
        )
        for _ in range(20):
            recorder.counter('x', {})
        sampler = resources.Sampler(recorder, 3600.0)
        attrs = sampler.sample()
        self.assertEqual(16, attrs['buf_fill'])
        self.assertEqual(4, attrs['buf_drops'])

    def test_sql_pools(self):
        engine = sqlalchemy.create_engine(
            'sqlite:///%s' % os.path.join(self.tmp, 'nova_cell1.db'),
            poolclass=sa_pool.QueuePool,
            pool_size=2,
            max_overflow=2,
        )
        self.addCleanup(engine.dispose)
        self.sampler.start()
        conns = [engine.connect() for _ in range(3)]
        try:
            pools = self.sampler.sample()['pools']
        finally:
            for conn in conns:
                conn.close()
        # the database's name as the SQL records give it (issue 32,
        # item 7): the file's name, not its path
        self.assertEqual(listeners.database_name(engine.url), 'nova_cell1.db')
        self.assertEqual([3, 1, 2], pools['nova_cell1.db'])
        # The overflow connection is closed on return (the pool is full).
        self.assertEqual(
            [0, 0, 2], self.sampler.sample()['pools']['nova_cell1.db']
        )
        self.sampler.stop()
        engine2 = sqlalchemy.create_engine('sqlite://')
        engine2.connect().close()
        self.assertEqual(1, len(self.sampler.sample()['pools']))

    def test_a_database_is_named_as_the_sql_records_name_it(self):
        self.sampler.start()
        names = []
        for url in (
            'sqlite://',
            'sqlite:///%s' % os.path.join(self.tmp, 'nova_api'),
        ):
            engine = sqlalchemy.create_engine(url)
            self.addCleanup(engine.dispose)
            engine.connect().close()
            names.append(listeners.database_name(engine.url))
        self.assertEqual([':memory:', 'nova_api'], names)
        self.assertEqual(sorted(names), sorted(self.sampler.sample()['pools']))

    def test_a_fault_of_the_engine_listener_never_fails_a_connect(self):
        # Issue 27 item 1: the engine_connect listener runs in nova's
        # thread; what it raises would fail nova's connect.
        class Broken(dict):
            def __contains__(self, key):
                raise RuntimeError('instrumentation bug')

        self.sampler.start()
        self.sampler.pools.pools = Broken()
        name = 'the resource sampler\'s engine listener'
        before = faults.totals().get(name, 0)
        # SQLAlchemy 2.0: the engine is seen when it is made
        self.sampler.pools.engines = Broken()
        engine = sqlalchemy.create_engine('sqlite://')
        self.addCleanup(engine.dispose)
        with engine.connect() as conn:
            self.assertEqual(
                [(1,)], list(conn.execute(sqlalchemy.text('SELECT 1')))
            )
        self.assertEqual(before + 1, faults.totals().get(name))
        self.assertIn('fault in ' + name, self.logged())


class OffSwitchTest(base.TestCase):
    def test_zero_switches_it_off(self):
        conf = self.make_conf(
            resource_sample_interval=0.0, flush_interval=0.05
        )
        target = resources_target.ResourcesTarget()
        self.assertEqual(
            '[instrument] resource_sample_interval is 0', target.check(conf)
        )
        rt = lifecycle.setup(conf, 'nova-api', targets=[target])
        self.addCleanup(lifecycle.teardown)
        self.assertIn('skipped', rt.status['resources'])
        time.sleep(0.2)
        lifecycle.teardown()
        records = [
            r
            for recs in base.read_span_files(
                os.path.join(self.tmp, 'spans')
            ).values()
            for r in recs
        ]
        self.assertTrue(records)
        self.assertNotIn(schema.EV_PROCESS_SAMPLE, {r['ev'] for r in records})

    def test_on_by_default_in_a_runtime(self):
        conf = self.make_conf(flush_interval=0.05)
        self.assertEqual(5.0, conf.instrument.resource_sample_interval)
        lifecycle.setup(
            conf, 'nova-api', targets=[resources_target.ResourcesTarget()]
        )
        self.addCleanup(lifecycle.teardown)
        lifecycle.teardown()
        records = [
            r
            for recs in base.read_span_files(
                os.path.join(self.tmp, 'spans')
            ).values()
            for r in recs
        ]
        self.assertIn(schema.EV_PROCESS_SAMPLE, {r['ev'] for r in records})

    def test_the_writer_threads_cpu(self):
        conf = self.make_conf(
            flush_interval=0.02, resource_sample_interval=0.02
        )
        rt = lifecycle.setup(
            conf, 'nova-api', targets=[resources_target.ResourcesTarget()]
        )
        self.addCleanup(lifecycle.teardown)
        # work for the writer: records to encode and write
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            for _ in range(200):
                rt.recorder.counter('x', {'n': 1})
            time.sleep(0.01)
        lifecycle.teardown()
        samples = [
            r['attrs']
            for recs in base.read_span_files(
                os.path.join(self.tmp, 'spans')
            ).values()
            for r in recs
            if r['ev'] == schema.EV_PROCESS_SAMPLE
        ]
        writer = [
            a[schema.ATTR_WRITER_CPU_S]
            for a in samples
            if schema.ATTR_WRITER_CPU_S in a
        ]
        self.assertGreater(len(writer), 2, samples)
        self.assertEqual(sorted(writer), writer)
        self.assertGreater(writer[-1], 0)
        # a part of the process's CPU, not all of it
        last = [a for a in samples if schema.ATTR_WRITER_CPU_S in a][-1]
        self.assertLess(writer[-1], last['cpu_user_s'] + last['cpu_sys_s'])

    def _idle_runtime(self, **overrides):
        rt = lifecycle.setup(
            self.make_conf(**overrides),
            'nova-api',
            targets=[resources_target.ResourcesTarget()],
        )
        self.addCleanup(lifecycle.teardown)
        spans = os.path.join(self.tmp, 'spans')

        def records():
            return [
                r
                for recs in base.read_span_files(spans).values()
                for r in recs
            ]

        return rt, records

    def test_an_idle_process_samples_every_interval(self):
        _rt, records = self._idle_runtime(
            flush_interval=0.05, resource_sample_interval=0.2
        )
        time.sleep(1.5)
        samples = [r for r in records() if r['ev'] == schema.EV_PROCESS_SAMPLE]
        # 7 or 8 are due; a loaded machine may delay one or two
        self.assertGreaterEqual(len(samples), 5, samples)

    def test_a_span_after_an_idle_spell_is_written_within_a_flush(self):
        # Nothing recorded for many flush intervals, no sample due: a
        # span recorded then is on disk within about a flush interval,
        # not at the next sample or at close.
        rt, records = self._idle_runtime(
            flush_interval=0.05, resource_sample_interval=3600.0
        )
        time.sleep(1.0)
        with rt.tracer.span('compute.after_idle'):
            pass
        ended = time.monotonic()
        waited = None
        while time.monotonic() - ended < 10:
            if any(r['ev'] == 'compute.after_idle' for r in records()):
                waited = time.monotonic() - ended
                break
            time.sleep(0.01)
        self.assertIsNotNone(waited, 'not written while running')
        # 0.05 s due; 1 s: a loaded machine
        self.assertLess(waited, 1.0)
