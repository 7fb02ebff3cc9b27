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
"""Fault counters, their span-log records, and a start that fails."""

import gc
import importlib
import os
import sys

import fixtures

from instrument.patching import patcher
from instrument.runtime import faults
from instrument.runtime import lifecycle
from instrument.targets import base as targets_base
from tests.unit import base

TARGET = '''
class Manager:
    def work(self, context):
        return 'done'
'''


def _boom(*args, **kwargs):
    raise KeyError('instrumentation bug')


class FaultsTest(base.TestCase):
    def test_counts_logs_the_first_and_disables_at_the_limit(self):
        counter = faults.Faults('a hook', limit=3)
        for n in range(5):
            counter(ValueError('fault %d' % n))
        self.assertEqual(5, counter.count)
        self.assertFalse(counter.active)
        log = self.logged()
        self.assertEqual(1, log.count('fault in a hook'))
        self.assertIn('fault 0', log)
        self.assertNotIn('fault 1', log)
        self.assertEqual(1, log.count('Traceback'))
        self.assertEqual(1, log.count('a hook disabled after 3 faults'))
        self.assertEqual(5, faults.totals()['a hook'])
        faults.reset()
        self.assertEqual((0, True), (counter.count, counter.active))
        self.assertNotIn('a hook', faults.totals())

    def test_a_broken_exception_does_not_break_the_handler(self):
        class Broken(Exception):
            def __str__(self):
                raise RuntimeError('no text')

        counter = faults.Faults('a hook')
        counter(Broken())
        self.assertEqual(1, counter.count)


class ChangesTest(base.TestCase):
    """``faults.changes()``: the writer sums the counters (one per patch
    point) only when it moved, so it must move with every count."""

    def test_moves_with_every_count_set(self):
        counter = faults.Faults('a hook')
        before = faults.changes()
        self.assertEqual(before, faults.changes(), 'nothing happened')
        counter(ValueError('x'))
        self.assertNotEqual(before, faults.changes())
        before = faults.changes()
        # a count set directly (the paste filter's unread queue)
        counter.count += 1
        self.assertNotEqual(before, faults.changes())
        before = faults.changes()
        faults.reset()
        self.assertNotEqual(before, faults.changes())

    def test_moves_when_a_counter_comes_or_goes(self):
        before = faults.changes()
        counter = faults.Faults('a hook')
        self.assertNotEqual(before, faults.changes())
        counter(ValueError('x'))
        before = faults.changes()
        del counter
        gc.collect()
        self.assertNotEqual(before, faults.changes())
        self.assertNotIn('a hook', faults.totals())

    def test_a_fault_after_idle_drains_is_written_once(self):
        self.addCleanup(lifecycle.teardown)
        conf = self.make_conf(sql_timing=False, flush_interval=60.0)
        active = lifecycle.setup(conf, 'nova-compute', targets=[])
        counter = faults.Faults('a hook')
        for _ in range(3):
            active.buffer.drain()
        counter(ValueError('x'))
        active.buffer.drain()
        counter.count += 1
        for _ in range(3):
            active.buffer.drain()
        counter(ValueError('y'))
        faults.Faults('another hook')  # made and freed: no record
        gc.collect()
        active.buffer.drain()
        active.buffer.drain()
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        counts = [r['attrs'] for r in records if r['ev'] == faults.EVENT]
        self.assertEqual([{'a hook': 1}, {'a hook': 2}, {'a hook': 3}], counts)


class RuntimeFaultTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
        self.mod_name = self.make_module(TARGET)
        self.mod = importlib.import_module(self.mod_name)
        self.points = [
            patcher.PatchPoint(
                self.mod_name,
                'Manager.work',
                'compute.work',
                'compute',
                on_enter=_boom,
            )
        ]

    def test_faults_are_counted_in_the_span_log(self):
        conf = self.make_conf(sql_timing=False)
        active = lifecycle.setup(conf, 'nova-compute', points=self.points)
        for _ in range(3):
            self.assertEqual('done', self.mod.Manager().work(None))
        active.buffer.drain()
        self.assertEqual('done', self.mod.Manager().work(None))
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        counts = [
            r['attrs']
            for r in records
            if r['ev'] == faults.EVENT and r['ph'] == 'C'
        ]
        name = 'point %s' % self.points[0].name
        self.assertEqual([{name: 3}, {name: 4}], counts)
        self.assertEqual({}, faults.totals(), 'teardown starts afresh')

    def test_a_start_that_fails_half_way_is_undone(self):
        # A failure of the runtime itself, after the targets installed.
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.lifecycle.Runtime.log_banner', _boom
            )
        )
        conf = self.make_conf(sql_timing=True)
        self.assertRaises(
            KeyError, lifecycle.setup, conf, 'nova-compute', points=self.points
        )
        self.assertIsNone(lifecycle.active())
        self.assertFalse(
            hasattr(self.mod.Manager.__dict__['work'], '__instrument_point__'),
            'a failed start left nova patched',
        )

    def test_a_target_that_fails_to_install_is_undone_alone(self):
        # Its points applied, then its install fails: they are removed,
        # the fault is counted, and the other targets record.
        class Broken(targets_base.PointsTarget):
            name = 'broken'

            def install(self, ctx):
                super().install(ctx)
                raise KeyError('install bug')

        other = self.make_module(TARGET)
        broken_point = patcher.PatchPoint(
            other, 'Manager.work', 'compute.other', 'compute'
        )
        importlib.import_module(other)
        conf = self.make_conf(sql_timing=False)
        active = lifecycle.setup(
            conf,
            'nova-compute',
            targets=[
                Broken([broken_point]),
                targets_base.PointsTarget(
                    [
                        patcher.PatchPoint(
                            self.mod_name,
                            'Manager.work',
                            'compute.work',
                            'compute',
                        )
                    ]
                ),
            ],
        )
        self.assertIsNotNone(active)
        self.assertEqual(['points'], [t.name for t in active.targets])
        self.assertTrue(
            active.status['broken'].startswith('failed: KeyError'),
            active.status,
        )
        self.assertEqual('installed', active.status['points'])
        self.assertFalse(
            hasattr(
                sys.modules[other].Manager.__dict__['work'],
                '__instrument_point__',
            ),
            'the failed target left a patch',
        )
        self.assertEqual(1, faults.totals()['target broken'])
        self.assertEqual(1, self.logged().count('fault in target broken'))
        self.assertEqual('done', self.mod.Manager().work(None))
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        self.assertEqual(
            ['compute.work'], [r['ev'] for r in records if r['ph'] == 'X']
        )
        start = records[0]['attrs']
        self.assertEqual({'broken', 'points'}, set(start['targets']))
