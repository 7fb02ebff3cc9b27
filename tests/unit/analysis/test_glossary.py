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
"""Every component and column is defined where it is shown: a legend
under the text report's tables, tooltips in the HTML, the same text in
doc/source/reading.rst (issue 32, item 7)."""

import html
import os
import re
import shutil
import tempfile

import testtools

from instrument import schema
from instrument.analysis import compare
from instrument.analysis import pipeline
from instrument.analysis.model import breakdown
from instrument.analysis.render import glossary
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.render import views
from tests import synthetic

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
)
READING = os.path.join(ROOT, 'doc', 'source', 'reading.rst')


def _definitions(text: str, heading: str) -> dict:
    """The definition list of section ``heading`` of an rst page:
    ``{term: definition with its lines joined}``."""
    lines = text.splitlines()
    start = lines.index(heading) + 2
    out: dict = {}
    term = None
    for line in lines[start:]:
        if re.fullmatch(r'=+', line):
            break
        m = re.fullmatch(r'``(.+)``', line)
        if m:
            term = m.group(1)
            out[term] = ''
        elif line.startswith('    ') and term:
            out[term] = (out[term] + ' ' + line.strip()).strip()
        elif line.strip():
            term = None
    return out


class GlossaryTest(testtools.TestCase):
    def test_reading_page_says_what_the_glossary_says(self):
        with open(READING, encoding='utf-8') as f:
            text = f.read()
        self.assertEqual(
            dict(glossary.COMPONENTS, **glossary.PATTERNS),
            _definitions(text, 'Components'),
        )
        self.assertEqual(glossary.COLUMNS, _definitions(text, 'Columns'))

    def test_every_component_is_defined(self):
        names = (
            set(views.PALETTE)
            | set(breakdown.COMPONENT_ORDER)
            | {c for c in schema.EVENTS.values() if c}
        )
        self.assertEqual(
            [], sorted(n for n in names if glossary.component(n) is None)
        )

    def test_families(self):
        self.assertEqual(
            glossary.PATTERNS['wait.*'], glossary.component('wait.semaphore')
        )
        self.assertEqual(
            glossary.PATTERNS['service.*'],
            glossary.component('service.key-manager'),
        )
        self.assertIsNone(glossary.component('nonsense'))
        self.assertEqual(
            glossary.COLUMNS['crit.path'], glossary.column('critical path')
        )

    def test_legend_once_per_report(self):
        seen: set = set()
        first = glossary.legend_lines(['api', 'gap'], ['median'], seen)
        self.assertEqual('where:', first[0])
        self.assertTrue(first[1].startswith('  api: nova-api'))
        self.assertTrue(any(line.startswith('  gap: ') for line in first))
        self.assertTrue(all(len(line) <= 79 for line in first))
        again = glossary.legend_lines(['api', 'compute'], ['median'], seen)
        self.assertEqual(
            ['where:', '  compute: ' + glossary.COMPONENTS['compute']], again
        )
        self.assertEqual([], glossary.legend_lines(['api'], [], seen))


class ShownTest(testtools.TestCase):
    """The legend and tooltips in reports of a synthetic run."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp()
        synthetic.generate(cls.dir, seed=21, requests=120)
        cls.report = pipeline.analyse([cls.dir])
        cls.text = report_text.render(cls.report)
        cls.page = report_html.render(cls.report)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def _shown_components(self) -> list:
        s = self.report['summary']
        return [
            n
            for n in s['component_order']
            if (s['components'].get(n) or {}).get('max')
        ]

    def test_text_legend_defines_every_component_shown(self):
        names = self._shown_components()
        self.assertIn('compute', names)
        legend = '\n'.join(self.text.splitlines())
        for name in names:
            self.assertIn(
                '  %s: %s' % (name, glossary.COMPONENTS[name].split(' ')[0]),
                legend,
            )
        self.assertIn('  crit.path: ', legend)
        # each term once in the whole report
        for name in names:
            self.assertEqual(
                1,
                len(re.findall(r'^  %s: ' % re.escape(name), self.text, re.M)),
                name,
            )

    def test_html_tooltips(self):
        for name in self._shown_components():
            self.assertIn(
                '<td class="l" title="%s">'
                % html.escape(glossary.COMPONENTS[name]),
                self.page,
            )
        self.assertIn(
            '<th class="" title="%s">critical path</th>'
            % html.escape(glossary.COLUMNS['crit.path']),
            self.page,
        )
        # the chart legends' entries
        self.assertIn(
            '<span title="%s"><i '
            % html.escape(glossary.COMPONENTS['compute']),
            self.page,
        )

    def test_compare_defines_gap(self):
        cmp = compare.compare(self.report, self.report)
        names = [r['component'] for r in cmp['latency']]
        self.assertIn('gap', names)
        out = compare.render(cmp)
        self.assertIn('  gap: ' + glossary.COMPONENTS['gap'][:30], out)
        self.assertIn('  p: ', out)
