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
"""Tests of ``instrument-report points`` (``instrument.cmd.points``,
``instrument.runtime.survey``) on fake targets whose points name a
fake module: statuses, why, the Nagios exit status and summary."""

import contextlib
import importlib
import io
import json
import os

from instrument.cmd import points as points_cmd
from instrument.cmd import report
from instrument.patching import points as points_mod
from instrument.runtime import metrics
from instrument.runtime import survey
from instrument.targets import base as targets_base
from instrument.targets import oslo_concurrency
from instrument.targets.sqlalchemy import retries
from tests.unit import base

FAKE = '''
class Manager:
    def build(self, context, image, instance):
        return instance

    def spawn(self, context, instance):
        return instance

    def anything(self, context, *args, **kwargs):
        return kwargs
'''

BROKEN = '''
import no_such_module_of_instrument_tests
'''


def _noop(*args):
    return None


class FakeTarget(targets_base.Target):
    """A target of ``points``, requiring nothing."""

    name = 'fake'

    def __init__(self, points) -> None:
        super().__init__()
        self._points = list(points)

    def points(self, ctx):
        return list(self._points)


class PointsCommandTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.mod = self.make_module(FAKE)

    def conf_file(self, **options) -> str:
        options.setdefault('enabled', 'True')
        options.setdefault('output_dir', os.path.join(self.tmp, 'spans'))
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w', encoding='utf-8') as f:
            f.write('[instrument]\n')
            for key, value in options.items():
                f.write('%s = %s\n' % (key, value))
        return path

    def point(self, target: str, **kw) -> points_mod.PatchPoint:
        return points_mod.PatchPoint(self.mod, target, 'compute.x', None, **kw)

    def run_cmd(self, pts, *args, conf=None) -> tuple:
        argv = ['--config-file', conf or self.conf_file()] + list(args)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = points_cmd.main(argv, targets=[FakeTarget(pts)])
        return rc, out.getvalue()

    def run_json(self, pts, conf=None) -> tuple:
        rc, text = self.run_cmd(pts, '--json', conf=conf)
        return rc, json.loads(text)

    def by_point(self, doc) -> dict:
        return {p['point']: p for p in doc['points']}

    def test_every_point_patched_is_ok(self):
        pts = [
            self.point(
                'Manager.build', instances=points_mod.uuids('instance')
            ),
            self.point('Manager.spawn'),
        ]
        rc, doc = self.run_json(pts)
        self.assertEqual(survey.OK, rc)
        self.assertEqual('OK', doc['status'])
        self.assertEqual(
            {'patched': 2, 'pending': 0, 'missing': 0, 'failed': 0},
            doc['counts'],
        )
        self.assertEqual({'fake': 'installed'}, doc['targets'])
        place = '%s:Manager.build' % self.mod
        self.assertEqual(
            'patched at %s' % place, self.by_point(doc)[place]['why']
        )
        self.assertTrue(doc['summary'].startswith('INSTRUMENT POINTS OK - '))
        self.assertIn(
            '| patched=2 pending=0 missing=0 failed=0', doc['summary']
        )
        # Everything put back: the command leaves nothing patched.
        module = importlib.import_module(self.mod)
        self.assertFalse(hasattr(module.Manager.build, '__wrapped__'))

    def test_a_missing_attribute_is_critical_and_named(self):
        pts = [self.point('Manager.build'), self.point('Manager.gone')]
        rc, text = self.run_cmd(pts)
        self.assertEqual(survey.CRITICAL, rc)
        first = text.splitlines()[0]
        nova = survey.version_mod.releases().get('nova')
        self.assertEqual(
            'INSTRUMENT POINTS CRITICAL - 1 point missing: '
            '%s:Manager.gone (%s) | patched=1 pending=0 missing=1 '
            'failed=0'
            % (self.mod, 'nova %s' % nova if nova else 'nova not installed'),
            first,
        )
        self.assertIn('missing  fake', text)
        self.assertIn('%s has no Manager.gone' % self.mod, text)

    def test_an_argument_the_signature_lacks_is_missing(self):
        pts = [
            self.point(
                'Manager.spawn', on_enter=points_mod.reads(_noop, 'flavor')
            ),
            # found through **kwargs
            self.point(
                'Manager.anything',
                on_enter=points_mod.reads(_noop, 'flavor'),
                instances=points_mod.uuids('instance'),
            ),
            # an extractor that reads by name (oslo.messaging's context
            # of a send): ``ctxt`` is no parameter of build
            self.point(
                'Manager.build', context=points_mod.reads(_noop, 'ctxt')
            ),
        ]
        rc, doc = self.run_json(pts)
        self.assertEqual(survey.CRITICAL, rc)
        got = self.by_point(doc)
        spawn = got['%s:Manager.spawn' % self.mod]
        self.assertEqual('missing', spawn['status'])
        self.assertIn('has no argument flavor', spawn['why'])
        build = got['%s:Manager.build' % self.mod]
        self.assertEqual('missing', build['status'])
        self.assertIn('has no argument ctxt', build['why'])
        self.assertEqual(
            'patched', got['%s:Manager.anything' % self.mod]['status']
        )
        self.assertEqual(
            {'patched': 1, 'pending': 0, 'missing': 2, 'failed': 0},
            doc['counts'],
        )

    def test_a_context_the_signature_lacks_is_missing(self):
        # the context is read by name, never at a position written
        # down: a target whose first argument is not ``context``
        # would record the wrong object
        fake = self.make_module(
            """
class Manager:
    def build(self, ctxt, instance):
        return instance
"""
        )
        pts = [points_mod.PatchPoint(fake, 'Manager.build', 'compute.x', None)]
        rc, doc = self.run_json(pts)
        self.assertEqual(survey.CRITICAL, rc)
        [entry] = doc['points']
        self.assertEqual('missing', entry['status'])
        self.assertIn('has no argument context', entry['why'])

    def test_an_argument_a_replacement_reads_is_checked_too(self):
        # oslo.db's retry check and lockutils.lock are replaced: the
        # arguments their replacements read are named and checked
        def factory(original, state, owner):
            return original

        pts = [
            points_mod.replace(
                self.mod,
                'Manager.spawn',
                factory,
                replace_reads=(points_mod.Arg('fair'),),
            ),
            points_mod.replace(
                self.mod,
                'Manager.build',
                factory,
                replace_reads=(points_mod.Arg('image'),),
            ),
        ]
        rc, doc = self.run_json(pts)
        self.assertEqual(survey.CRITICAL, rc)
        got = self.by_point(doc)
        spawn = got['%s:Manager.spawn' % self.mod]
        self.assertEqual('missing', spawn['status'])
        self.assertIn('has no argument fair', spawn['why'])
        self.assertEqual(
            'patched', got['%s:Manager.build' % self.mod]['status']
        )

    def test_the_replacements_of_the_targets_name_what_they_read(self):
        [lock] = oslo_concurrency.OsloConcurrencyTarget().points(None)
        self.assertEqual(
            ['external', 'fair'], [a.name for a in lock.arguments()]
        )
        [check] = retries.RetryRecorder.__new__(retries.RetryRecorder).points()
        self.assertEqual(
            [retries.EXC_ARG], [a.name for a in check.arguments()]
        )

    def test_a_module_not_installed_stays_pending_and_ok(self):
        pts = [
            self.point('Manager.build'),
            points_mod.PatchPoint(
                'no_such_pkg_of_instrument.conn',
                'Connection.connect',
                'x',
                None,
            ),
        ]
        rc, doc = self.run_json(pts)
        self.assertEqual(survey.OK, rc, doc['summary'])
        pending = self.by_point(doc)[
            'no_such_pkg_of_instrument.conn:Connection.connect'
        ]
        self.assertEqual('pending', pending['status'])
        self.assertTrue(pending['why'].startswith(survey.WHY_ABSENT))

    def test_a_module_that_fails_to_import_is_missing(self):
        broken = self.make_module(BROKEN)
        pts = [points_mod.PatchPoint(broken, 'X.y', 'x', None)]
        rc, doc = self.run_json(pts)
        self.assertEqual(survey.CRITICAL, rc)
        entry = self.by_point(doc)['%s:X.y' % broken]
        self.assertEqual('missing', entry['status'])
        self.assertIn(
            '%s cannot be imported: ModuleNotFoundError' % broken, entry['why']
        )

    def test_a_per_object_point_is_pending_and_ok(self):
        pts = [
            points_mod.replace(
                self.mod, 'Manager._sem', _noop, per_object=True
            )
        ]
        rc, doc = self.run_json(pts)
        self.assertEqual(survey.OK, rc, doc['summary'])
        self.assertEqual(survey.WHY_PER_OBJECT, doc['points'][0]['why'])

    def test_disabled_is_a_warning(self):
        rc, text = self.run_cmd(
            [self.point('Manager.build')], conf=self.conf_file(enabled='False')
        )
        self.assertEqual(survey.WARNING, rc)
        self.assertIn(
            'WARNING - [instrument] enabled is False', text.splitlines()[0]
        )

    def test_a_bad_option_is_unknown(self):
        rc, text = self.run_cmd(
            [self.point('Manager.build')],
            conf=self.conf_file(buffer_size='many'),
        )
        self.assertEqual(survey.UNKNOWN, rc)
        self.assertEqual(1, len(text.splitlines()))
        self.assertTrue(
            text.startswith(
                'INSTRUMENT POINTS UNKNOWN - [instrument] buffer_size: '
            )
        )

    def test_a_config_file_that_is_not_there_is_unknown(self):
        rc, text = self.run_cmd([], conf=os.path.join(self.tmp, 'none'))
        self.assertEqual(survey.UNKNOWN, rc)
        self.assertIn('cannot read the configuration', text)

    def test_options_and_metric_families_are_listed(self):
        metrics_dir = os.path.join(self.tmp, 'metrics')
        rc, doc = self.run_json(
            [self.point('Manager.build')],
            conf=self.conf_file(metrics_dir=metrics_dir, sinks='file,log'),
        )
        self.assertEqual(survey.OK, rc)
        self.assertEqual(['file', 'log'], doc['options']['sinks'])
        self.assertEqual(metrics_dir, doc['options']['metrics_dir'])
        self.assertTrue(doc['metrics']['enabled'])
        got = {f['name']: f['labels'] for f in doc['metrics']['families']}
        self.assertEqual(set(metrics.FAMILIES), set(got))
        self.assertEqual(
            ['service', 'db', 'kind', 'query'], got[metrics.SQL_STATEMENTS]
        )

    def test_text_lists_sections(self):
        rc, text = self.run_cmd([self.point('Manager.build')])
        self.assertEqual(survey.OK, rc)
        for heading in (
            'Releases installed:',
            'Targets:',
            '[instrument] options in effect:',
            'Points: ',
            'Metrics: off',
        ):
            self.assertIn(heading, text)
        self.assertIn('  enabled = True', text)

    def test_report_dispatches_points(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertRaises(SystemExit, report.main, ['points', '--help'])
        self.assertIn('instrument-report points', out.getvalue())


class ArgFoundTest(base.TestCase):
    def test_found(self):
        def f(self, context, instance, *, flavor=None):
            pass

        def g(self, context, *args, **kwargs):
            pass

        def h(self, context, *args):
            pass

        found = points_mod.Arg
        self.assertTrue(found('instance').found(f))
        self.assertTrue(found('flavor').found(f))
        self.assertFalse(found('image').found(f))
        self.assertTrue(found('image').found(g))
        self.assertFalse(found('image').found(h))
        # no position can be written down: by name only
        self.assertFalse(found('ctxt').found(f))
        self.assertRaises(TypeError, points_mod.Arg, 'image', 2)
        self.assertRaises(TypeError, points_mod.arg, 'context', 0)
        self.assertRaises(TypeError, points_mod.uuids, 'instance', 1)


class VerdictTest(base.TestCase):
    """``survey.verdict`` on results made here: each Nagios status."""

    def result(
        self, points=(), targets=None, surveyed=None, enabled=True
    ) -> dict:
        points = [dict(p) for p in points]
        return {
            'enabled': enabled,
            'releases': {'nova': '35.0.0'},
            'surveyed': surveyed or {},
            'targets': targets or {},
            'points': points,
            'counts': survey.counts(points),
        }

    def test_statuses(self):
        patched = {'point': 'a:B.c', 'status': 'patched', 'why': ''}
        self.assertEqual(
            (
                survey.OK,
                'INSTRUMENT POINTS OK - 1 points patched, 0 '
                'pending (per object or not installed), 0 missing (nova '
                '35.0.0) | patched=1 pending=0 missing=0 failed=0',
            ),
            survey.verdict(self.result([patched])),
        )
        status, line = survey.verdict(
            self.result(
                [patched],
                surveyed={
                    'nova 35.0.0': 'not surveyed (points are for 34.0.0)'
                },
            )
        )
        self.assertEqual(survey.WARNING, status)
        self.assertIn('WARNING - nova 35.0.0 not surveyed', line)
        status, line = survey.verdict(
            self.result(
                [
                    patched,
                    {
                        'point': 'a:B.d',
                        'status': 'pending',
                        'why': 'module not imported yet',
                    },
                ]
            )
        )
        self.assertEqual(survey.WARNING, status)
        self.assertIn('1 point pending: a:B.d', line)
        status, line = survey.verdict(
            self.result([patched], targets={'nova': 'failed: RuntimeError: x'})
        )
        self.assertEqual(survey.CRITICAL, status)
        self.assertIn('CRITICAL - target failed: nova', line)
        missing = [
            {'point': 'a:M.%d' % n, 'status': 'missing', 'why': ''}
            for n in range(5)
        ]
        status, line = survey.verdict(self.result(missing))
        self.assertEqual(survey.CRITICAL, status)
        self.assertIn('5 points missing: a:M.0, a:M.1, a:M.2 and 2 more', line)
