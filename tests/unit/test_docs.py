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
"""The documentation pages: titles a reader understands, no accidental
links, every page in the index (issue 32, item 9)."""

import glob
import os
import re

import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
SOURCE = os.path.join(ROOT, 'doc', 'source')


def _pages() -> dict:
    pages = {}
    for path in sorted(glob.glob(os.path.join(SOURCE, '*.rst'))):
        with open(path, encoding='utf-8') as f:
            pages[os.path.basename(path)[:-4]] = f.read()
    return pages


def _headings(text: str) -> list:
    lines = text.splitlines()
    return [
        lines[i - 1]
        for i in range(1, len(lines))
        if re.fullmatch(r'([=\-~^"]{3,})', lines[i])
        and lines[i - 1].strip()
        and not re.fullmatch(r'[=\-~^"]+', lines[i - 1])
        and len(lines[i]) >= len(lines[i - 1].rstrip())
    ]


def _prose(text: str) -> str:
    """``text`` without its literals (````...````) and literal blocks."""
    out, block = [], False
    for line in text.splitlines():
        if block:
            if line.strip() and not line.startswith(' '):
                block = False
            else:
                continue
        if line.rstrip().endswith('::'):
            block = True
        out.append(re.sub(r'``.*?``', '', line))
    return '\n'.join(out)


class DocsTest(testtools.TestCase):
    def test_no_heading_names_an_issue_number(self):
        # "Where issue 17 stands" says nothing to a reader without the
        # tracker
        found = [
            (page, h)
            for page, text in _pages().items()
            for h in _headings(text)
            if re.search(r'issue \d+', h, re.I)
        ]
        self.assertEqual([], found)

    def test_no_file_colon_text_becomes_a_link(self):
        # docutils reads "file:line" in prose as a file: URI, a link to
        # nowhere
        found = [
            (page, m.group(0))
            for page, text in _pages().items()
            for m in re.finditer(r'(?<![\w`/.])file:\w+', _prose(text))
        ]
        self.assertEqual([], found)

    def test_every_page_is_in_the_index(self):
        pages = _pages()
        index = pages.pop('index')
        listed = re.findall(r'^   (\w+)$', index, re.M)
        self.assertEqual(sorted(pages), sorted(listed))
        for page in ('reading', 'troubleshooting'):
            self.assertIn(page, listed)

    def test_how_to_read_defines_every_component(self):
        from instrument.analysis.render import views

        text = _pages()['reading']
        missing = [
            name for name in views.PALETTE if '``%s``' % name not in text
        ]
        self.assertEqual([], missing)
