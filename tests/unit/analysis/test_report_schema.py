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
"""The JSON report's schema: built from one part per section, shipped
as written, and every report the tests make valid against it (issue
32, item 7)."""

import copy
import gzip
import json
import os
import shutil
import tempfile

import fixtures
import jsonschema
import testtools

from instrument.analysis import pipeline
from instrument.analysis import registry
from instrument.analysis.render import json as report_json
from instrument.analysis.render import schema
from instrument.analysis.sections import base
from tests import synthetic
from tests.unit.analysis import test_report_html
from tests.unit.analysis import test_services

DATA = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ),
    'data',
    'fidelity',
)
DEMO = sorted(
    os.path.join(DATA, name)
    for name in os.listdir(DATA)
    if name.endswith('.jsonl.gz')
)


def as_written(report: dict) -> dict:
    """``report`` as the JSON report holds it (read back)."""
    return json.loads(report_json.dumps(report))


class SchemaTest(testtools.TestCase):
    def test_shipped_schema_is_the_built_one(self):
        # regenerate with: python -c "from instrument.analysis.render
        # import schema; open(schema.SCHEMA_PATH, 'w').write(
        # schema.dumps())"
        with open(schema.SCHEMA_PATH, encoding='utf-8') as f:
            self.assertEqual(schema.dumps(), f.read())

    def test_a_valid_json_schema(self):
        jsonschema.Draft202012Validator.check_schema(schema.build())

    def test_one_part_per_section_in_report_order(self):
        built = schema.build()
        self.assertEqual(
            ['report_version', 'schema_version'] + registry.keys() + ['run'],
            list(built['properties']),
        )
        self.assertEqual(sorted(registry.keys()), sorted(schema.PARTS))

    def test_a_new_section_needs_its_part(self):
        class New(base.Section):
            key = 'new_section'

        entry = registry.Entry(New, None, None, None)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.registry.SECTIONS',
                registry.SECTIONS + (entry,),
            )
        )
        self.assertRaises(KeyError, schema.build)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.render.schema.PARTS',
                dict(schema.PARTS, new_section=schema.arr(schema.STR)),
            )
        )
        self.assertEqual(
            {'type': 'array', 'items': {'type': 'string'}},
            schema.build()['properties']['new_section'],
        )

    def test_documented(self):
        doc = os.path.join(
            os.path.dirname(DATA), '..', '..', 'doc', 'source', 'report.rst'
        )
        with open(doc, encoding='utf-8') as f:
            text = f.read()
        self.assertEqual(
            [],
            [
                k
                for k in schema.build()['properties']
                if '\n``%s``\n' % k not in text
            ],
        )


class ReportsValidTest(testtools.TestCase):
    """Every report of the demo's fidelity files, damaged copies of one
    and synthetic runs is valid; a report that is not, is not."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.validator = jsonschema.Draft202012Validator(schema.shipped())

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path

    def assertValid(self, report: dict) -> None:
        errors = [
            '%s: %s' % ('/'.join(map(str, e.absolute_path)), e.message[:200])
            for e in self.validator.iter_errors(as_written(report))
        ]
        self.assertEqual([], errors[:10])

    def test_demo_fidelity_files(self):
        self.assertEqual(4, len(DEMO))
        for path in DEMO:
            self.assertValid(pipeline.analyse([path]))

    def test_demo_damaged(self):
        with gzip.open(DEMO[-1], 'rt') as f:
            lines = f.read().splitlines()
        damaged = os.path.join(self.dir, 'f.jsonl')
        ends = [i for i, line in enumerate(lines) if '"ph":"E"' in line]
        keep = [
            line for i, line in enumerate(lines) if i not in set(ends[::7])
        ]
        # ends lost, garbage, a binary line, a cut last line
        keep[len(keep) // 2 : len(keep) // 2] = ['garbage', '\x00\xff']
        keep[-1] = keep[-1][: len(keep[-1]) // 2]
        with open(damaged, 'w', encoding='utf-8') as f:
            f.write('\n'.join(keep))
        self.assertValid(pipeline.analyse([self.dir]))
        # and a window
        self.assertValid(
            pipeline.analyse([DEMO[-1]], pipeline.Options(since='+1s'))
        )

    def test_synthetic_runs(self):
        for seed, kwargs in (
            (21, {}),
            (8, {'p_ops': 0.5}),
            (4, {'bad_input': True, 'skew_us': 0}),
        ):
            directory = tempfile.mkdtemp(dir=self.dir)
            synthetic.generate(directory, seed=seed, requests=80, **kwargs)
            self.assertValid(pipeline.analyse([directory]))

    def test_hand_made_runs(self):
        test_report_html.write_hostile_run(os.path.join(self.dir, 'a.jsonl'))
        self.assertValid(pipeline.analyse([self.dir]))
        case = test_services.ServicesReportTest('test_services_called')
        case.setUp()
        self.addCleanup(shutil.rmtree, case.dir, True)
        self.assertValid(case.report)

    def test_invalid_reports_are_found(self):
        report = as_written(
            pipeline.analyse([os.path.join(DATA, 'demo-threads.jsonl.gz')])
        )
        self.assertTrue(self.validator.is_valid(report))
        first = report['summary']['component_order'][0]
        for path, value in (
            (('summary', 'boots'), 'many'),
            (('requests', 0, 'latency_us'), None),
            (('summary', 'components', first, 'count'), -1),
        ):
            bad = copy.deepcopy(report)
            where = bad
            for key in path[:-1]:
                where = where[key]
            where[path[-1]] = value
            self.assertFalse(self.validator.is_valid(bad), path)
        bad = copy.deepcopy(report)
        del bad['waits']
        self.assertFalse(self.validator.is_valid(bad))
        bad = dict(report, unknown_section={})
        self.assertFalse(self.validator.is_valid(bad))
