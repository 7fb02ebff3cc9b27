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
"""doc/source/architecture.rst's "Adding a section", run as written.

The page's module and registry line (read from the page: the page and
this test cannot drift) make a section that the reader, the merge, the
report dict and the text and HTML writers take without any other
change.
"""

import os
import re
import types

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis import registry
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DOC = os.path.join(ROOT, 'doc', 'source', 'architecture.rst')
THREADS = os.path.join(
    ROOT, 'tests', 'data', 'fidelity', 'demo-threads.jsonl.gz'
)


def blocks() -> dict:
    """The ``.. code-block:: python`` blocks of the page, by name."""
    with open(DOC, encoding='utf-8') as f:
        text = f.read()
    out = {}
    for match in re.finditer(
        r'\.\. code-block:: python\n   :name: (\S+)\n\n'
        r'((?:   .*\n|\n)+)',
        text,
    ):
        out[match.group(1)] = (
            '\n'.join(line[3:] for line in match.group(2).splitlines()).strip()
            + '\n'
        )
    return out


class AddingASectionTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        code = blocks()
        module = types.ModuleType('instrument.analysis.sections.hosts')
        exec(  # noqa: S102
            compile(code['section-module'], DOC, 'exec'),
            module.__dict__,
        )
        entry = eval(  # noqa: S307
            code['registry-line'].rstrip().rstrip(','),
            {'Entry': registry.Entry, 'hosts': module},
        )
        sections = list(registry.SECTIONS)
        at = [e.section.key for e in sections].index('resources') + 1
        sections.insert(at, entry)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.registry.SECTIONS', tuple(sections)
            )
        )

    def test_one_module_and_one_registry_line(self):
        report = pipeline.analyse([THREADS], pipeline.Options(jobs=1))
        keys = list(report)
        self.assertEqual(keys.index('resources') + 1, keys.index('hosts'))
        hosts = report['hosts']
        self.assertTrue(hosts)
        # every valid record, once, whatever it belongs to
        self.assertEqual(
            report['inputs']['records'],
            sum(h['records'] for h in hosts.values()),
        )
        self.assertEqual(sorted(report['clocks']['hosts']), sorted(hosts))
        text = report_text.render(report)
        self.assertIn('Records per host', text)
        # after the resources (100), before the SQL profile (110)
        self.assertLess(
            text.index('Records per host'), text.index('SQL profile')
        )
        page = report_html.render(report)
        self.assertIn('<h2>Records per host</h2>', page)
        self.assertLess(
            page.index('<h2>Records per host</h2>'),
            page.index('<h2>SQL digest'),
        )
