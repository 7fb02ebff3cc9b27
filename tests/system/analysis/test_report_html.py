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
"""The HTML report as a browser renders it: Debian's chromium, headless,
in a child process (the page itself:
``tests/unit/analysis/test_report_html.py``)."""

import html
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time

import fixtures
import testtools
from testtools.content import text_content

from instrument.analysis import pipeline
from instrument.analysis.render import html as report_html
from tests import synthetic
from tests.unit.analysis import test_report_html as unit

DATA = unit.DATA


def find_chromium(test: testtools.TestCase) -> str:
    """Debian's chromium; ``test`` is skipped without it, except in CI
    (``.ci/run`` installs it), where its absence fails."""
    chromium = shutil.which('chromium')
    if chromium is None:
        if os.environ.get('CI') == 'true':
            test.fail('chromium is not installed (CI=true)')
        test.skipTest('chromium is not installed')
    return chromium


def _headless(chromium: str, profile: str, width: int) -> list:
    return [
        chromium,
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--hide-scrollbars',
        '--user-data-dir=' + profile,
        '--window-size=%d,1000' % width,
    ]


# Injected into a copy of a page (the report itself has no script):
# once it is laid out, what overflows the window horizontally, what
# scrolls inside itself, and how long the page took to load.
MEASURE = """<script>window.addEventListener('load', function () {
setTimeout(function () {
  // inside a box that scrolls or clips: that box's overflow, not the
  // page's (reported as scrolled)
  function clipped(el) {
    for (var p = el.parentElement; p && p !== document.body;
         p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== 'visible') { return true; }
    }
    return false;
  }
  var root = document.documentElement, width = root.clientWidth;
  var wide = [], scrolled = [];
  var all = document.body.getElementsByTagName('*');
  for (var i = 0; i < all.length; i++) {
    var el = all[i], what = el.tagName + ' ' +
        (el.textContent || '').replace(/\\s+/g, ' ').slice(0, 60);
    var right = el.getBoundingClientRect().right;
    if (right > width + 1 && !clipped(el)) {
      wide.push(Math.round(right) + ' ' + what);
    }
    var ox = getComputedStyle(el).overflowX;
    if ((ox === 'auto' || ox === 'scroll') &&
        el.scrollWidth > el.clientWidth + 1) {
      scrolled.push(el.scrollWidth + '>' + el.clientWidth + ' ' + what);
    }
  }
  var nav = performance.getEntriesByType('navigation')[0];
  var pre = document.createElement('pre');
  pre.id = 'instrument-measure';
  pre.textContent = JSON.stringify({
    scroll_width: root.scrollWidth, client_width: width,
    wide: wide.slice(0, 10), scrolled: scrolled.slice(0, 10),
    dom_ms: nav.domContentLoadedEventEnd - nav.startTime,
    load_ms: nav.loadEventStart - nav.startTime});
  document.body.appendChild(pre);
}, 0);
});</script>"""


def measure(chromium: str, page: str, width: int, directory: str) -> dict:
    """The layout of HTML ``page`` in headless Chromium, ``width`` px
    wide: ``scroll_width``, ``client_width``, the elements past the
    window's right edge (``wide``), those scrolling inside themselves
    (``scrolled``), ``dom_ms`` and ``load_ms``, ``wall_s`` (the browser's
    whole run)."""
    path = os.path.join(directory, 'measure-%d.html' % width)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(page.replace('</head>', MEASURE + '</head>', 1))
    profile = tempfile.mkdtemp(dir=directory)
    t0 = time.monotonic()
    dom = subprocess.run(
        _headless(chromium, profile, width)
        + ['--virtual-time-budget=10000', '--dump-dom', 'file://' + path],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    ).stdout
    wall = time.monotonic() - t0
    found = re.search(r'<pre id="instrument-measure">([^<]*)</pre>', dom)
    if found is None:
        raise AssertionError('no measure in the page: %s' % dom[:300])
    out = json.loads(html.unescape(found.group(1)))
    out['wall_s'] = wall
    return out


def overflow(m: dict) -> list:
    """What of ``measure``'s layout overflows horizontally."""
    out = []
    if m['scroll_width'] > m['client_width']:
        out.append(
            'page %d px wide in a %d px window'
            % (m['scroll_width'], m['client_width'])
        )
    return out + m['wide'] + m['scrolled']


def screenshot(chromium: str, page_path: str, width: int, shot: str) -> tuple:
    """A PNG of ``page_path`` at ``width`` px: its (width, height)."""
    profile = tempfile.mkdtemp(dir=os.path.dirname(shot))
    subprocess.run(
        _headless(chromium, profile, width)
        + ['--screenshot=' + shot, 'file://' + page_path],
        capture_output=True,
        timeout=180,
        check=False,
    )
    with open(shot, 'rb') as f:
        head = f.read(24)
    if head[:4] != b'\x89PNG':
        raise AssertionError('no PNG at %s' % shot)
    return struct.unpack('>II', head[16:24])


class HostileRunTest(testtools.TestCase):
    """The page of a run whose strings are hostile (``unit.
    write_hostile_run``)."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        unit.write_hostile_run(os.path.join(self.dir, 'a.jsonl'))
        self.page = report_html.render(pipeline.analyse([self.dir]))

    def test_renders_in_headless_chromium(self):
        chromium = find_chromium(self)
        page = os.path.join(self.dir, 'r.html')
        with open(page, 'w') as f:
            f.write(self.page)
        shot = os.path.join(self.dir, 'r.png')
        profile = tempfile.mkdtemp(dir=self.dir)
        subprocess.run(
            [
                chromium,
                '--headless',
                '--no-sandbox',
                '--disable-gpu',
                '--disable-quic',
                '--no-first-run',
                '--disable-background-networking',
                '--disable-component-update',
                '--disable-sync',
                '--user-data-dir=' + profile,
                '--screenshot=' + shot,
                '--window-size=1000,800',
                'file://' + page,
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        with open(shot, 'rb') as f:
            self.assertEqual(b'\x89PNG', f.read(4))


class ReadableTest(testtools.TestCase):
    """Issue 14 item 8: the page of a synthetic run of 120 requests."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        synthetic.generate(self.dir, seed=21, requests=120)
        self.page = report_html.render(pipeline.analyse([self.dir]))

    def test_no_horizontal_scroll_in_chromium(self):
        """At 800 and 1400 px the page needs no horizontal scrolling
        (the charts scale down; tables wrap between words)."""
        chromium = find_chromium(self)
        for width in (800, 1400):
            m = measure(chromium, self.page, width, self.dir)
            self.assertEqual([], overflow(m), (width, m))


class DemoPageTest(testtools.TestCase):
    """The HTML of real reports (the demo's fidelity files) in headless
    Chromium at 1400 and 800 px: nothing runs off the page or scrolls
    inside it (the top-waits table, the SQL text), screenshots taken,
    the page's size and load time measured (issue 32, item 8).
    ``INSTRUMENT_SCREENSHOTS=<dir>`` keeps the screenshots there."""

    WIDTHS = (1400, 800)
    RUNS = ('demo-mixed-threads', 'demo-threads')

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pages = {}
        for run in cls.RUNS:
            report = pipeline.analyse([os.path.join(DATA, run + '.jsonl.gz')])
            cls.pages[run] = report_html.render(report, title=run)

    def setUp(self):
        super().setUp()
        self.chromium = find_chromium(self)
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.shots = os.environ.get('INSTRUMENT_SCREENSHOTS') or self.dir
        os.makedirs(self.shots, exist_ok=True)

    def test_the_pages_hold_what_is_measured(self):
        page = self.pages['demo-mixed-threads']
        # the parts that ran off the page before
        for part in (
            '<h2>Waits: locks, DB pool, worker pools</h2>',
            '<h2>SQL digest',
            '<pre>',
        ):
            self.assertTrue(part in page, part)

    def test_no_horizontal_overflow(self):
        for run, page in self.pages.items():
            path = os.path.join(self.dir, run + '.html')
            with open(path, 'w', encoding='utf-8') as f:
                f.write(page)
            size = len(page.encode('utf-8'))
            for width in self.WIDTHS:
                m = measure(self.chromium, page, width, self.dir)
                self.assertEqual([], overflow(m), (run, width))
                shot = os.path.join(self.shots, '%s-%d.png' % (run, width))
                self.assertEqual(
                    width, screenshot(self.chromium, path, width, shot)[0]
                )
                # what the page costs, in the test's details
                self.addDetail(
                    '%s-%d' % (run, width),
                    text_content(
                        'size %.0f KiB; DOMContentLoaded %.0f ms, load %.0f '
                        'ms; chromium %.1f s'
                        % (size / 1024, m['dom_ms'], m['load_ms'], m['wall_s'])
                    ),
                )
                # a report is a page, not an application
                self.assertLess(size, 4 << 20)
                self.assertLess(m['load_ms'], 10000)

    def test_overflow_is_seen(self):
        # the measure is not blind: an unbreakable line and a wide
        # table are found at 800 px
        page = self.pages['demo-threads'].replace(
            '</body>',
            '<p>%s</p><pre style="overflow-x:auto;'
            'white-space:pre">%s</pre></body>' % ('x' * 400, 'y' * 400),
        )
        m = measure(self.chromium, page, 800, self.dir)
        found = overflow(m)
        self.assertTrue(any(line.startswith('page ') for line in found), found)
        self.assertTrue(any('yyyy' in line for line in m['scrolled']), m)


class TimelineZoomTest(testtools.TestCase):
    """A zoomed timeline scrolls in its box, never the page (issue 32,
    item 8; the zoom itself: ``unit.TimelineZoomTest``)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        report = pipeline.analyse(
            [os.path.join(DATA, 'demo-threads.jsonl.gz')]
        )
        cls.page = report_html.render(report)

    def test_zoomed_in_chromium(self):
        chromium = find_chromium(self)
        directory = self.useFixture(fixtures.TempDir()).path
        first = re.search(r'name="(tl\d+)"', self.page).group(1)
        zoomed = self.page.replace(
            'id="%s-z1" checked>' % first, 'id="%s-z1">' % first
        ).replace('id="%s-z4">' % first, 'id="%s-z4" checked>' % first)
        m = measure(chromium, zoomed, 800, directory)
        # the page does not scroll; the zoomed timeline's box does, 4
        # times as wide as it
        self.assertEqual([], overflow(dict(m, scrolled=[])))
        self.assertEqual(1, len(m['scrolled']), m['scrolled'])
        wide, shown = m['scrolled'][0].split()[0].split('>')
        self.assertAlmostEqual(4.0, int(wide) / int(shown), delta=0.05)
        self.assertEqual(
            [], overflow(measure(chromium, self.page, 800, directory))
        )
