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
"""Tests of the patch engine: hooks, remove, faults, identity."""

import importlib
import sys

from oslo_context import context as oslo_context

from instrument.patching import patcher
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracing
from tests.unit import base

FAKE_SERVICE = '''
class Ctx:
    def __init__(self, request_id, global_request_id=None):
        self.request_id = request_id
        self.global_request_id = global_request_id


class Instance:
    def __init__(self, uuid):
        self.uuid = uuid


class Base:
    def inherited(self, context):
        return 'base'


class Manager(Base):
    host = 'compute-7'

    def build(self, context, instance, attempt=1):
        return self.spawn(context, instance)

    def spawn(self, context, instance):
        return 'spawned-' + instance.uuid

    def fail(self, context, error):
        raise error

    def no_context(self, value):
        return value * 2
'''


def _clear_oslo_context():
    if hasattr(oslo_context._request_store, 'context'):
        del oslo_context._request_store.context


class PatcherTestBase(base.TestCase):
    def setUp(self):
        super().setUp()
        self.buffer, self.recorder = base.list_recorder('ctl-host')
        self.tracer = tracing.Tracer(self.recorder)
        self.mod_name = self.make_module(FAKE_SERVICE)

    def points(self, **extra):
        mod = self.mod_name
        return [
            patcher.PatchPoint(
                mod,
                'Manager.build',
                'compute.build',
                'compute',
                instances=patcher.uuids('instance'),
                host=patcher.self_attr('host'),
                on_enter=lambda s, a, k: {'attempt': k.get('attempt', 1)},
                on_exit=lambda s, a, k, r: {'result': r},
            ),
            patcher.PatchPoint(
                mod, 'Manager.spawn', 'compute.spawn', 'compute'
            ),
            patcher.PatchPoint(mod, 'Manager.fail', 'compute.fail', 'compute'),
            patcher.PatchPoint(
                mod, 'Manager.inherited', 'compute.inherited', 'compute'
            ),
        ]

    def make_patcher(self, points=None):
        p = patcher.Patcher(points or self.points(), self.recorder)
        self.addCleanup(p.remove)
        return p

    def events(self, ph=None):
        out = self.buffer.dicts()
        if ph is not None:
            out = [e for e in out if e['ph'] == ph]
        return out


class HookTest(PatcherTestBase):
    def test_hook_fires_on_later_import(self):
        self.assertNotIn(self.mod_name, sys.modules)
        p = self.make_patcher()
        banner = p.apply()
        self.assertEqual(4, len(banner['pending']))
        self.assertEqual([], banner['patched'])
        self.assertNotIn(
            self.mod_name,
            sys.modules,
            'apply() must not import the target module',
        )
        mod = importlib.import_module(self.mod_name)
        self.assertEqual(4, len(p.banner()['patched']))
        result = mod.Manager().build(mod.Ctx('req-1'), mod.Instance('u1'))
        self.assertEqual('spawned-u1', result)
        done = self.events('X')
        self.assertEqual(
            ['compute.build', 'compute.spawn'], [e['ev'] for e in done]
        )
        # The late patch is announced in the span log.
        meta = [e for e in self.events('M') if e['ev'] == 'process.points']
        self.assertEqual(4, len(meta[0]['attrs']['patched']))

    def test_already_imported_module_is_patched_at_once(self):
        mod = importlib.import_module(self.mod_name)
        p = self.make_patcher()
        banner = p.apply()
        self.assertEqual(4, len(banner['patched']))
        mod.Manager().spawn(mod.Ctx('req-2'), mod.Instance('u2'))
        self.assertEqual(
            ['compute.spawn'], [e['ev'] for e in self.events('X')]
        )

    def test_remove_restores_originals(self):
        mod = importlib.import_module(self.mod_name)
        original_build = mod.Manager.__dict__['build']
        self.assertNotIn('inherited', mod.Manager.__dict__)
        p = self.make_patcher()
        p.apply()
        self.assertIsNot(original_build, mod.Manager.__dict__['build'])
        self.assertIn('inherited', mod.Manager.__dict__)
        p.remove()
        self.assertIs(original_build, mod.Manager.__dict__['build'])
        self.assertNotIn(
            'inherited',
            mod.Manager.__dict__,
            'an inherited method must not be left shadowed',
        )
        self.assertEqual('base', mod.Manager().inherited(mod.Ctx('r')))
        mod.Manager().build(mod.Ctx('req-3'), mod.Instance('u3'))
        self.assertEqual([], self.events())

    def test_remove_before_import_leaves_the_module_alone(self):
        p = self.make_patcher()
        p.apply()
        p.remove()
        mod = importlib.import_module(self.mod_name)
        self.assertFalse(
            hasattr(mod.Manager.__dict__['build'], '__instrument_point__')
        )

    def test_apply_and_remove_are_idempotent(self):
        mod = importlib.import_module(self.mod_name)
        original = mod.Manager.__dict__['build']
        p = self.make_patcher()
        p.apply()
        p.apply()
        mod.Manager().build(mod.Ctx('req-4'), mod.Instance('u4'))
        builds = [e for e in self.events('X') if e['ev'] == 'compute.build']
        self.assertEqual(1, len(builds), 'patched twice')
        p.remove()
        p.remove()
        self.assertIs(original, mod.Manager.__dict__['build'])
        p.apply()
        self.assertEqual(4, len(p.banner()['patched']))
        p.remove()
        self.assertIs(original, mod.Manager.__dict__['build'])

    def test_missing_target_is_reported_not_fatal(self):
        mod_name = self.mod_name
        points = self.points() + [
            patcher.PatchPoint(
                mod_name, 'Manager.gone', 'compute.gone', 'compute'
            ),
            patcher.PatchPoint(
                mod_name, 'Vanished.method', 'compute.v', 'compute'
            ),
        ]
        importlib.import_module(mod_name)
        p = self.make_patcher(points)
        banner = p.apply()
        self.assertEqual(
            sorted(
                ['%s:Manager.gone' % mod_name, '%s:Vanished.method' % mod_name]
            ),
            sorted(banner['missing']),
        )
        self.assertEqual(4, len(banner['patched']))
        p.log_banner()
        log = self.logged()
        self.assertIn('4 points patched', log)
        self.assertIn('%s:Manager.gone missing' % mod_name, log)

    def test_alternative_target_is_used_when_the_first_is_missing(self):
        mod = importlib.import_module(self.mod_name)
        point = patcher.PatchPoint(
            self.mod_name,
            'Manager.build_v2',
            'compute.build',
            'compute',
            alternatives=((self.mod_name, 'Manager.build'),),
        )
        p = self.make_patcher([point])
        banner = p.apply()
        self.assertEqual([point.name], banner['patched'])
        self.assertEqual(
            '%s:Manager.build' % self.mod_name, p.state(point.name).used
        )
        mod.Manager().build(mod.Ctx('req-5'), mod.Instance('u5'))
        self.assertEqual(
            ['compute.build'], [e['ev'] for e in self.events('X')]
        )


class WrapperTest(PatcherTestBase):
    def setUp(self):
        super().setUp()
        self.mod = importlib.import_module(self.mod_name)

    def test_span_fields(self):
        self.make_patcher().apply()
        ctx = self.mod.Ctx('req-6', 'req-global')
        self.mod.Manager().build(ctx, self.mod.Instance('u6'), attempt=2)
        (end,) = [e for e in self.events('X') if e['ev'] == 'compute.build']
        (spawn,) = [e for e in self.events('X') if e['ev'] == 'compute.spawn']
        self.assertEqual(16, len(end['span']))
        self.assertEqual('req-6', end['req'])
        self.assertEqual('req-global', end['greq'])
        self.assertEqual(['u6'], end['inst'])
        self.assertEqual('compute-7', end['host'])
        self.assertEqual('compute', end['svc'])
        self.assertEqual('ok', end['st'])
        self.assertEqual({'attempt': 2, 'result': 'spawned-u6'}, end['attrs'])
        self.assertLessEqual(end['ts'], spawn['ts'])
        self.assertGreaterEqual(end['dur_us'], spawn['dur_us'])
        # The nested span inherits request, instance and host.
        self.assertEqual(end['span'], spawn['parent'])
        self.assertEqual('req-6', spawn['req'])
        self.assertEqual(['u6'], spawn['inst'])
        self.assertEqual('compute-7', spawn['host'])

    def test_exception_is_recorded_and_reraised_unchanged(self):
        self.make_patcher().apply()
        error = ValueError('disk on fire')
        raised = self.assertRaises(
            ValueError, self.mod.Manager().fail, self.mod.Ctx('req-7'), error
        )
        self.assertIs(error, raised)
        (end,) = self.events('X')
        self.assertEqual('error', end['st'])
        self.assertEqual(
            {'cls': 'ValueError', 'msg': 'disk on fire'}, end['err']
        )

    def test_error_message_never_carries_sql_parameters(self):
        self.make_patcher().apply()
        error = RuntimeError(
            "(pymysql.err.OperationalError) (1213, 'Deadlock found') "
            "[SQL: UPDATE quotas SET x=%(x)s] [parameters: {'x': 's3cr3t'}]"
        )
        self.assertRaises(
            RuntimeError, self.mod.Manager().fail, self.mod.Ctx('req-8'), error
        )
        (end,) = self.events('X')
        self.assertNotIn('s3cr3t', end['err']['msg'])
        self.assertNotIn('UPDATE', end['err']['msg'])
        self.assertIn('Deadlock found', end['err']['msg'])

    def test_context_argument_wins_over_thread_local_context(self):
        self.make_patcher().apply()
        oslo_context.RequestContext(request_id='req-thread-local')
        self.addCleanup(_clear_oslo_context)
        self.mod.Manager().spawn(
            self.mod.Ctx('req-from-arg'), self.mod.Instance('u9')
        )
        (end,) = self.events('X')
        self.assertEqual('req-from-arg', end['req'])

    def test_thread_local_context_is_the_fallback(self):
        mod = self.mod
        point = patcher.PatchPoint(
            self.mod_name,
            'Manager.no_context',
            'compute.no_context',
            'compute',
            context=None,
        )
        self.make_patcher([point]).apply()
        oslo_context.RequestContext(request_id='req-thread-local')
        self.addCleanup(_clear_oslo_context)
        self.assertEqual(6, mod.Manager().no_context(3))
        (end,) = self.events('X')
        self.assertEqual('req-thread-local', end['req'])

    def test_extractor_fault_does_not_change_the_call(self):
        def broken(instance, args, kwargs):
            raise KeyError('extractor bug')

        point = patcher.PatchPoint(
            self.mod_name,
            'Manager.spawn',
            'compute.spawn',
            'compute',
            instances=broken,
        )
        p = self.make_patcher([point])
        p.apply()
        result = self.mod.Manager().spawn(
            self.mod.Ctx('r'), self.mod.Instance('u10')
        )
        self.assertEqual('spawned-u10', result)
        self.assertEqual(1, p.state(point.name).faults)
        self.assertEqual([], self.events())

    def test_exit_hook_fault_keeps_result_and_span(self):
        def broken(instance, args, kwargs, result):
            raise TypeError('on_exit bug')

        point = patcher.PatchPoint(
            self.mod_name,
            'Manager.spawn',
            'compute.spawn',
            'compute',
            on_exit=broken,
        )
        p = self.make_patcher([point])
        p.apply()
        self.assertEqual(
            'spawned-u11',
            self.mod.Manager().spawn(
                self.mod.Ctx('r'), self.mod.Instance('u11')
            ),
        )
        (end,) = self.events('X')
        self.assertEqual('ok', end['st'])
        self.assertIsNone(
            recorder_mod.current_frame(),
            'a fault must not leave the span current',
        )

    def test_repeated_faults_disable_the_point_and_log_once(self):
        def broken(instance, args, kwargs):
            raise KeyError('extractor bug')

        point = patcher.PatchPoint(
            self.mod_name,
            'Manager.spawn',
            'compute.spawn',
            'compute',
            instances=broken,
        )
        p = self.make_patcher([point])
        p.apply()
        calls = patcher.FAULT_LIMIT + 5
        for n in range(calls):
            self.assertEqual(
                'spawned-%d' % n,
                self.mod.Manager().spawn(
                    self.mod.Ctx('r'), self.mod.Instance(str(n))
                ),
            )
        state = p.state(point.name)
        self.assertFalse(state.active)
        self.assertEqual(patcher.FAULT_LIMIT, state.faults)
        log = self.logged()
        self.assertEqual(1, log.count('fault in point'))
        self.assertEqual(1, log.count('disabled after'))

    def test_a_wrapper_kept_after_remove_passes_calls_through(self):
        p = self.make_patcher()
        p.apply()
        kept = self.mod.Manager.spawn  # e.g. a callback nova stored
        p.remove()
        self.assertEqual(
            'spawned-u12',
            kept(
                self.mod.Manager(), self.mod.Ctx('r'), self.mod.Instance('u12')
            ),
        )
        self.assertEqual([], self.events())
        p.apply()  # the wrapper of the new apply records again
        self.mod.Manager.spawn(
            self.mod.Manager(), self.mod.Ctx('r'), self.mod.Instance('u13')
        )
        self.assertEqual(
            ['compute.spawn'], [e['ev'] for e in self.events('X')]
        )

    def test_detail_points_follow_the_sample_rate(self):
        recorder = recorder_mod.Recorder(
            self.buffer,
            process.ProcessIdentity.create('nova-compute', 'h'),
            detail_sample_rate=0.5,
        )
        point = patcher.PatchPoint(
            self.mod_name,
            'Manager.spawn',
            'compute.spawn',
            'compute',
            detail=True,
        )
        p = patcher.Patcher([point], recorder)
        self.addCleanup(p.remove)
        p.apply()
        reqs = ['req-%04d' % n for n in range(400)]
        for req in reqs:
            self.mod.Manager().spawn(self.mod.Ctx(req), self.mod.Instance('u'))
        recorded = {e['req'] for e in self.events('X')}
        expected = {r for r in reqs if recorder.sampled(r)}
        self.assertEqual(expected, recorded)
        self.assertGreater(len(recorded), 120)
        self.assertLess(len(recorded), 280)


SIGNATURES = '''
class Ctx:
    def __init__(self, request_id):
        self.request_id = request_id
        self.global_request_id = None


class Manager:
    host = 'cmp-9'

    def build(self, context, image, instance, attempt=1):
        return 'built'

    def spawn_on(self, executor, func, *args):
        return func(*args)


def create(context, count):
    return [Item('u-%d' % n) for n in range(count)]


class Item:
    def __init__(self, uuid):
        self.uuid = uuid


class ExpectedException(Exception):
    def __init__(self, inner):
        self.exc_info = (type(inner), inner, None)
'''


class SignatureAndHookTest(PatcherTestBase):
    def setUp(self):
        super().setUp()
        self.sig_name = self.make_module(SIGNATURES)
        self.sig = importlib.import_module(self.sig_name)

    def test_arguments_found_by_name_whether_positional_or_keyword(self):
        point = patcher.PatchPoint(
            self.sig_name,
            'Manager.build',
            'compute.build',
            'compute',
            instances=patcher.uuids('instance'),
        )
        self.make_patcher([point]).apply()
        mod = self.sig
        mod.Manager().build(mod.Ctx('req-a'), 'img', mod.Item('u1'))
        mod.Manager().build(
            mod.Ctx('req-b'), image='img', instance=mod.Item('u2')
        )
        mod.Manager().build(
            context=mod.Ctx('req-c'), image='img', instance=mod.Item('u3')
        )
        got = [(e['req'], e['inst']) for e in self.events('X')]
        self.assertEqual(
            [('req-a', ['u1']), ('req-b', ['u2']), ('req-c', ['u3'])], got
        )

    def test_instances_from_the_result(self):
        point = patcher.PatchPoint(
            self.sig_name,
            'create',
            'api.compute.create',
            'api',
            result_instances=lambda items: [i.uuid for i in items],
        )
        self.make_patcher([point]).apply()
        self.sig.create(self.sig.Ctx('req-d'), 2)
        [end] = self.events('X')
        self.assertEqual(['u-0', 'u-1'], end['inst'])

    def test_service_and_host_from_the_call(self):
        point = patcher.PatchPoint(
            self.sig_name,
            'Manager.build',
            'rpc.dispatch',
            None,
            service_from=lambda i, a, k: 'scheduler',
            host=patcher.arg('image'),
        )
        self.make_patcher([point]).apply()
        self.sig.Manager().build(self.sig.Ctx('r'), 'sched-host', None)
        [end] = self.events('X')
        self.assertEqual(
            ('scheduler', 'sched-host'), (end['svc'], end['host'])
        )

    def test_hook_rewrites_arguments_and_records_nothing(self):
        seen = []

        def before(instance, args, kwargs):
            executor, func = args[0], args[1]

            def wrapped(*a):
                seen.append(a)
                return func(*a)

            return (executor, wrapped) + tuple(args[2:]), kwargs

        point = patcher.PatchPoint(
            self.sig_name,
            'Manager.spawn_on',
            'thread.spawn',
            kind=patcher.HOOK,
            on_enter=before,
        )
        p = self.make_patcher([point])
        p.apply()
        self.assertEqual(
            5, self.sig.Manager().spawn_on('pool', lambda x, y: x + y, 2, 3)
        )
        self.assertEqual([(2, 3)], seen)
        self.assertEqual([], self.events())

    def test_points_added_at_run_time(self):
        p = self.make_patcher([])
        p.apply()
        p.add_points(
            [
                patcher.PatchPoint(
                    self.sig_name, 'Manager.build', 'compute.build', 'compute'
                )
            ]
        )
        self.assertEqual(
            ['%s:Manager.build' % self.sig_name], p.banner()['patched']
        )
        self.sig.Manager().build(self.sig.Ctx('req-e'), 'i', None)
        self.assertEqual(
            ['compute.build'], [e['ev'] for e in self.events('X')]
        )
        p.remove()
        self.assertFalse(
            hasattr(self.sig.Manager.__dict__['build'], '__instrument_point__')
        )

    def test_expected_exception_records_the_exception_it_carries(self):
        inner = LookupError('no valid host')
        err = tracing.error_of(self.sig.ExpectedException(inner))
        self.assertEqual(('LookupError', 'no valid host'), err)


class PointAndTracerTest(PatcherTestBase):
    """A point's wrapper and Tracer.span both record through the
    Recorder: same records either way."""

    def test_point_and_tracer_span_agree(self):
        mod = importlib.import_module(self.mod_name)
        point = patcher.PatchPoint(
            self.mod_name,
            'Manager.spawn',
            'compute.spawn',
            'compute',
            instances=patcher.uuids('instance'),
            host=patcher.self_attr('host'),
            on_enter=lambda i, a, k: {'stage': 1},
            on_exit=lambda i, a, k, r: {'result': r},
        )
        self.make_patcher([point]).apply()
        ctx = mod.Ctx('req-same', 'req-g')
        with self.tracer.span(
            'compute.build', ctx=ctx, svc='compute', host='compute-7'
        ):
            mod.Manager().spawn(ctx, mod.Instance('u-same'))
            with self.tracer.span(
                'compute.spawn',
                ctx=ctx,
                inst=['u-same'],
                attrs={'stage': 1},
                svc='compute',
                host='compute-7',
            ) as s:
                s.attrs['result'] = 'spawned-u-same'
        build, patched, manual = self.events('X')
        for rec in (patched, manual):
            self.assertEqual(build['span'], rec['parent'])
        ignore = ('seq', 'ts', 'dur_us', 'span')
        self.assertEqual(
            {k: v for k, v in manual.items() if k not in ignore},
            {k: v for k, v in patched.items() if k not in ignore},
        )
        self.assertIsNone(recorder_mod.current_frame())
