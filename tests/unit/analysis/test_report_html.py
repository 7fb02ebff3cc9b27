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

import html
import html.parser
import json
import os
import re
import shutil
import tempfile

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.render import charts
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.render import views
from instrument.runtime import record
from tests import synthetic
from tests.unit.analysis import test_charts

EVIL = '<script>alert(1)</script>'
EVIL_HOST = 'cmp"><img src=x onerror=alert(2)>'


def write_hostile_run(path: str) -> None:
    """A failed boot whose host, instance and message carry markup."""
    t = 1_700_000_000_000_000
    recs = [
        (
            'B',
            t,
            None,
            'api-0',
            'api',
            1,
            'api.request',
            1,
            None,
            'req-1',
            None,
            None,
            None,
            None,
            {'route': '/servers'},
        ),
        (
            'X',
            t + 10,
            500,
            EVIL_HOST,
            'api',
            1,
            'api.compute.create',
            2,
            1,
            'req-1',
            None,
            [EVIL],
            'error',
            ('nova.exception.Quota' + EVIL, 'Quota ' + EVIL),
            None,
        ),
        (
            'X',
            t,
            1000,
            'api-0',
            'api',
            1,
            'api.request',
            1,
            None,
            'req-1',
            None,
            None,
            'ok',
            None,
            {'status': 403},
        ),
        (
            'X',
            t + 20,
            100,
            EVIL_HOST,
            'api',
            1,
            'sql.query',
            3,
            2,
            'req-1',
            None,
            None,
            'ok',
            None,
            {'fp': 'f' * 32, 'db': 'nova', 'kind': 'SELECT'},
        ),
        (
            'M',
            t,
            None,
            EVIL_HOST,
            'api',
            None,
            'sql.fingerprint',
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            {
                'fp': 'f' * 32,
                'text': 'select "</pre>' + EVIL + '"',
                'kind': 'SELECT',
            },
        ),
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
        self.assertNotIn(
            'http://', self.page.replace('http://www.w3.org/2000/svg', '')
        )
        self.assertNotIn('https://', self.page)
        self.assertNotIn('<script', self.page)
        self.assertEqual(
            'api_failure',
            self.report['summary']['states']
            and self.report['requests'][0]['state'],
        )


def _texts(svg: str) -> list:
    """(attributes, text) of every ``<text>`` of ``svg``."""
    out = []
    for attrs, body in re.findall(r'<text([^>]*)>([^<]*)</text>', svg):
        out.append(
            (
                dict(re.findall(r'([\w-]+)="([^"]*)"', attrs)),
                html.unescape(body),
            )
        )
    return out


def _svgs(page: str) -> list:
    """Each ``<svg>`` of ``page`` with the HTML that follows it up to the
    next heading or chart (where its legend is)."""
    out = []
    for chunk in page.split('<svg ')[1:]:
        svg, _, after = chunk.partition('</svg>')
        after = re.split(r'<h[1-6]|<svg ', after)[0]
        out.append(('<svg ' + svg + '</svg>', after))
    return out


class ReadableTest(testtools.TestCase):
    """Issue 14 item 8: axes, legends, contrast, words, headings."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp()
        synthetic.generate(cls.dir, seed=21, requests=120)
        cls.report = pipeline.analyse([cls.dir])
        cls.page = report_html.render(cls.report)
        cls.text = report_text.render(cls.report)
        cls.charts = _svgs(cls.page)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def assert_round_axis(self, labels: list) -> None:
        self.assertGreaterEqual(len(labels), 3, labels)
        # numbers only: the unit is in the axis title, never per tick
        values = [float(v) for v in labels]
        self.assertEqual(0, values[0])
        step = values[1] - values[0]
        self.assertTrue(test_charts.is_round_step(step), labels)
        for a, b in zip(values, values[1:], strict=False):
            self.assertAlmostEqual(step, b - a, places=6)

    def test_no_citations_of_an_absent_document(self):
        for out in (self.page, self.text):
            self.assertIsNone(re.search(r'(Figure|Table) \d', out))

    def test_every_axis_round_in_one_unit_with_a_title(self):
        axes = 0
        for svg, _after in self.charts:
            texts = _texts(svg)
            for kind in ('y', 'x'):
                ticks = [
                    t for a, t in texts if a.get('class') == kind + 'tick'
                ]
                if not ticks:
                    continue
                axes += 1
                self.assert_round_axis(ticks)
                titles = [
                    t for a, t in texts if a.get('class') == kind + 'title'
                ]
                self.assertEqual(1, len(titles), svg[:200])
                self.assertTrue(titles[0].strip())
        # the stacked bars (y), in flight (x, y), one x per timeline
        self.assertGreaterEqual(axes, 3 + len(self.charts) - 2)

    def test_component_chart_states_its_unit(self):
        svg, legend = self.charts[0]
        (title,) = [t for a, t in _texts(svg) if a.get('class') == 'ytitle']
        self.assertRegex(title, r'^mean time per successful boot \((s|ms)\)$')
        for name in ('compute.spawn', 'compute.network', 'sql'):
            self.assertIn('</i>%s</span>' % name, legend)

    def test_component_chart_names_its_operation(self):
        s = self.report['summary']
        out = views.stacked_levels(
            s['levels'], s['component_order'], {}, subject='resize'
        )
        titles = [t for a, t in _texts(out) if 'title' in a.get('class', '')]
        self.assertRegex(titles[0], r'^mean time per successful resize ')
        self.assertIn('when the resize started', titles[1])

    def test_in_flight_chart_axes(self):
        svg, _legend = self.charts[1]
        texts = _texts(svg)
        self.assertIn(
            ('requests in flight'),
            [t for a, t in texts if a.get('class') == 'ytitle'],
        )
        (xtitle,) = [t for a, t in texts if a.get('class') == 'xtitle']
        self.assertEqual('time since the first request started (s)', xtitle)
        run_s = self.report['summary']['concurrency']['series'][-1][0]
        xt = [float(t) for a, t in texts if a.get('class') == 'xtick']
        self.assertGreaterEqual(xt[-1], run_s)
        self.assertLess(xt[-2], run_s)

    def test_in_flight_chart_plots_what_its_caption_says(self):
        # issue 32, item 7: "boots and others", over the whole run
        conc = self.report['summary']['concurrency']
        starts = [r['start_us'] for r in self.report['requests']]
        ends = [r['end_us'] for r in self.report['requests']]
        run_s = (max(ends) - min(starts)) / 1e6
        for key in ('series', 'series_all'):
            self.assertAlmostEqual(run_s, conc[key][-1][0], places=2)
            self.assertEqual(0, conc[key][0][0])
        boots = dict(conc['series'])
        every = dict(conc['series_all'])
        self.assertTrue(all(every[t] >= boots[t] for t in boots))
        svg, legend = self.charts[1]
        self.assertEqual(
            ['every request', 'boot requests'],
            re.findall(r'<polyline [^>]*><title>([^<]+)</title>', svg),
        )
        for name in ('every request', 'boot requests'):
            self.assertIn('</i>%s</span>' % name, legend)
        self.assertRegex(
            svg,
            r'<title>every request at [0-9.]+m?s: \d+ '
            r'in flight</title>',
        )

    def test_timelines_have_legends_and_labels(self):
        events = {
            e['ev']
            for t in self.report['timelines']
            for e in t.get('lifecycle') or []
        }
        timelines = [
            (s, a) for s, a in self.charts if 'aria-label="timeline of' in s
        ]
        self.assertGreaterEqual(len(timelines), 3)
        labelled = 0
        for svg, after in timelines:
            self.assertIn('class="legend"', after)
            fills = set(re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"', svg))
            for fill in fills:
                self.assertIn('background:' + fill, after)
            if 'stroke="#000"' in svg:
                self.assertIn('critical path', after)
                self.assertIn('thin black mark', after)
            if 'stroke-dasharray' in svg:
                self.assertIn('never ended', after)
            if 'fill-opacity' in svg:
                self.assertIn('ended in an error', after)
            for attrs, label in _texts(svg):
                if attrs.get('class') != 'barlabel':
                    continue
                labelled += 1
                if label in events:
                    continue
                # cut at a word: the rest of the name starts at . _ or ' '
                self.assertTrue(label.endswith('\u2026'), label)
                stem = label[:-1]
                self.assertTrue(
                    any(
                        ev.startswith(stem) and ev[len(stem)] in '._ '
                        for ev in events
                    ),
                    label,
                )
        self.assertGreater(labelled, 10)

    def test_text_contrast(self):
        """Every text colour against its background, >= 4.5:1."""
        checked = 0
        for svg, _after in self.charts:
            for attrs, _t in _texts(svg):
                fg = attrs.get('fill', '#000000')
                bg = attrs.get('data-bg', charts.PAPER)
                self.assertGreaterEqual(
                    charts.contrast(fg, bg), 4.5, (fg, bg, attrs)
                )
                checked += 1
            # text in parts of a <text> (on the chart's white)
            for fg in re.findall(
                r'<tspan[^>]* fill="(#[0-9a-fA-F]{3,6})"', svg
            ):
                self.assertGreaterEqual(
                    charts.contrast(fg, charts.PAPER), 4.5, fg
                )
        css = re.search(r'<style>(.*)</style>', self.page, re.S).group(1)
        colours = re.findall(r'(?<![-\w])color:(#[0-9a-fA-F]{3,6})', css)
        backgrounds = re.findall(r'background:(#[0-9a-fA-F]{3,6})', css)
        self.assertIn('#222', colours)
        for fg in colours:
            for bg in backgrounds + [charts.PAPER]:
                self.assertGreaterEqual(charts.contrast(fg, bg), 4.5, (fg, bg))
                checked += 1
        self.assertGreater(checked, 100)

    def test_text_report_cuts_messages_at_a_word(self):
        section = self.text.split('Failures (')[1].split('\n\n')[0]
        messages = {
            ' '.join(f['message'].split()) for f in self.report['failures']
        }
        # (a warning line under the title when the input lost records)
        lines = [
            line for line in section.splitlines() if not line.startswith('! ')
        ]
        # the message is the last column, whatever columns come before
        columns = len(re.split(r'\s{2,}', lines[2].strip()))
        self.assertEqual('message', lines[2].split()[-1])
        cut = 0
        for line in lines[4:]:
            shown = re.split(r'\s{2,}', line.strip(), maxsplit=columns - 1)[-1]
            if shown in messages:
                continue
            cut += 1
            self.assertTrue(shown.endswith('...'), shown)
            stem = shown[:-3]
            self.assertTrue(
                any(
                    m.startswith(stem) and m[len(stem)] == ' '
                    for m in messages
                ),
                shown,
            )
        self.assertGreaterEqual(cut, 1)


DATA = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ),
    'data',
    'fidelity',
)


class TimelineZoomTest(testtools.TestCase):
    """Zoom on timelines without a script: radio buttons widen the time
    axis of a chart whose x are shares of its width (text unscaled);
    the chart scrolls in its box, never the page (issue 32, item 8)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        report = pipeline.analyse(
            [os.path.join(DATA, 'demo-threads.jsonl.gz')]
        )
        cls.page = report_html.render(report)

    def _timelines(self) -> list:
        return [
            svg
            for svg, _after in _svgs(self.page)
            if 'aria-label="timeline of' in svg
        ]

    def test_every_timeline_zooms(self):
        timelines = self._timelines()
        self.assertGreaterEqual(len(timelines), 3)
        zooms = self.page.count('<div class="zoom">')
        self.assertEqual(len(timelines), zooms)
        names = re.findall(
            r'<input type="radio" class="z(\d+)" '
            r'name="([^"]+)" id="([^"]+)"( checked)?>',
            self.page,
        )
        self.assertEqual(len(charts.ZOOMS) * zooms, len(names))
        ids = [n[2] for n in names]
        self.assertEqual(len(ids), len(set(ids)))
        # one level chosen per timeline: 1x
        self.assertEqual(['1'] * zooms, [n[0] for n in names if n[3]])
        for z in charts.ZOOMS[1:]:
            self.assertIn(
                '.z%d:checked~.zbox>.stretch{width:%d%%' % (z, 100 * z),
                self.page,
            )
        self.assertNotIn('<script', self.page)

    def test_x_are_shares_of_the_width(self):
        for svg in self._timelines():
            self.assertNotIn('viewBox', svg.split('>', 1)[0])
            self.assertIn('class="chart stretch"', svg)
            xs = re.findall(
                r' (?:x|x1|x2|width)="([^"]*)"', svg.split('>', 1)[1]
            )
            self.assertTrue(xs)
            for x in xs:
                self.assertTrue(x.endswith('%'), x)
                self.assertTrue(0 <= float(x[:-1]) <= 100, x)
