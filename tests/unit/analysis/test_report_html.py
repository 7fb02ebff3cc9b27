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
"""The HTML report: self-contained, every input string escaped."""

import html.parser
import json
import os
import shutil
import subprocess
import tempfile

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis import report_html
from instrument import record

EVIL = '<script>alert(1)</script>'
EVIL_HOST = 'cmp"><img src=x onerror=alert(2)>'


def write_hostile_run(path: str) -> None:
    """A failed boot whose host, instance and message carry markup."""
    t = 1_700_000_000_000_000
    recs = [
        ('B', t, None, 'api-0', 'api', 1, 'api.request', 1, None,
         'req-1', None, None, None, None, {'route': '/servers'}),
        ('X', t + 10, 500, EVIL_HOST, 'api', 1, 'api.compute.create', 2, 1,
         'req-1', None, [EVIL], 'error', ('nova.exception.Quota' + EVIL,
                                          'Quota ' + EVIL), None),
        ('X', t, 1000, 'api-0', 'api', 1, 'api.request', 1, None,
         'req-1', None, None, 'ok', None, {'status': 403}),
        ('X', t + 20, 100, EVIL_HOST, 'api', 1, 'sql.query', 3, 2,
         'req-1', None, None, 'ok', None,
         {'fp': 'f' * 32, 'db': 'nova', 'kind': 'SELECT'}),
        ('M', t, None, EVIL_HOST, 'api', None, 'sql.fingerprint', None,
         None, None, None, None, None, None,
         {'fp': 'f' * 32, 'text': 'select "</pre>' + EVIL + '"',
          'kind': 'SELECT'}),
    ]
    with open(path, 'w') as f:
        for seq, rec in enumerate(recs, 1):
            f.write(json.dumps(record.to_dict(rec, seq, 77)) + '\n')


class Collector(html.parser.HTMLParser):

    def __init__(self):
        super().__init__()
        self.tags = set()
        self.text = []
        self.attrs = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs.extend(attrs)

    def handle_data(self, data):
        self.text.append(data)


class HtmlTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        write_hostile_run(os.path.join(self.dir, 'a.jsonl'))
        self.report = pipeline.analyse([self.dir])
        self.page = report_html.render(self.report)

    def test_user_strings_escaped(self):
        parser = Collector()
        parser.feed(self.page)
        self.assertNotIn('script', parser.tags)
        self.assertNotIn('img', parser.tags)
        self.assertFalse([a for a in parser.attrs if a[0] == 'onerror'])
        text = ''.join(parser.text)
        self.assertIn('Quota ' + EVIL, text)
        self.assertIn(EVIL_HOST, text)
        self.assertIn('select "</pre>' + EVIL + '"', text)

    def test_self_contained(self):
        self.assertNotIn('http://', self.page.replace(
            'http://www.w3.org/2000/svg', ''))
        self.assertNotIn('https://', self.page)
        self.assertNotIn('<script', self.page)
        self.assertEqual('api_failure', self.report['summary']['states'] and
                         self.report['requests'][0]['state'])

    def test_renders_in_headless_chromium(self):
        chromium = shutil.which('chromium')
        if chromium is None:
            self.skipTest('chromium is not installed')
        page = os.path.join(self.dir, 'r.html')
        with open(page, 'w') as f:
            f.write(self.page)
        shot = os.path.join(self.dir, 'r.png')
        profile = tempfile.mkdtemp(dir=self.dir)
        subprocess.run(
            [chromium, '--headless', '--no-sandbox', '--disable-gpu',
             '--disable-quic', '--no-first-run',
             '--disable-background-networking',
             '--disable-component-update', '--disable-sync',
             '--user-data-dir=' + profile, '--screenshot=' + shot,
             '--window-size=1000,800', 'file://' + page],
            capture_output=True, timeout=120, check=False)
        with open(shot, 'rb') as f:
            self.assertEqual(b'\x89PNG', f.read(4))
