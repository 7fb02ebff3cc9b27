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
"""The chart helpers: round ticks, one unit per axis, contrast, words."""

import math
import random
import re

import testtools

from instrument.analysis.render import charts
from instrument.analysis.render import fmt
from instrument.analysis.render import views


def is_round_step(step: float) -> bool:
    """1, 2, 2.5 or 5 times a power of ten."""
    mag = 10.0 ** math.floor(math.log10(step))
    return any(
        math.isclose(step, m * mag, rel_tol=1e-9) for m in (1, 2, 2.5, 5, 10)
    )


class NiceTicksTest(testtools.TestCase):
    def test_examples(self):
        self.assertEqual([0, 5, 10, 15, 20, 25], charts.nice_ticks(21.7))
        self.assertEqual([0, 50, 100, 150, 200], charts.nice_ticks(176))
        self.assertEqual([0, 0.5, 1, 1.5, 2], charts.nice_ticks(1.86))
        self.assertEqual([0.0, 1.0], charts.nice_ticks(0))

    def test_any_maximum(self):
        rnd = random.Random(7)
        for _ in range(2000):
            vmax = 10 ** rnd.uniform(-4, 9)
            ticks = charts.nice_ticks(vmax)
            self.assertEqual(0, ticks[0])
            self.assertGreaterEqual(ticks[-1], vmax * (1 - 1e-9))
            step = ticks[1] - ticks[0]
            self.assertTrue(is_round_step(step), (vmax, ticks))
            # the axis ends within one step of the data
            self.assertLess(ticks[-2], vmax, (vmax, ticks))
            self.assertTrue(3 <= len(ticks) <= 7, (vmax, ticks))
            for a, b in zip(ticks, ticks[1:], strict=False):
                self.assertTrue(math.isclose(b - a, step, rel_tol=1e-6))

    def test_counts_get_whole_ticks(self):
        self.assertEqual([0, 1], charts.nice_ticks(1, 4, integer=True))
        self.assertEqual([0, 1], charts.nice_ticks(0.25, integer=True))
        self.assertEqual([0, 1, 2, 3], charts.nice_ticks(3, 4, integer=True))
        self.assertEqual([0, 0.25, 0.5, 0.75, 1], charts.nice_ticks(1, 4))
        svg = charts.line_chart([(0, 0), (0.001, 1)], 't', 'n', y_integer=True)
        self.assertEqual(
            ['0', '1'], re.findall(r'class="ytick"[^>]*>([^<]*)<', svg)
        )

    def test_tick_labels_have_no_float_noise(self):
        labels = [charts.fmt_tick(t) for t in charts.nice_ticks(0.7)]
        self.assertEqual(['0', '0.2', '0.4', '0.6', '0.8'], labels)
        self.assertEqual('2.5', charts.fmt_tick(2.5))

    def test_time_axis_one_unit(self):
        ticks, div, unit = charts.axis(21.7e6, 'us')
        self.assertEqual(('s', 1e6), (unit, div))
        self.assertEqual([0, 5, 10, 15, 20, 25], ticks)
        self.assertEqual('ms', charts.axis(2700, 'us')[2])
        self.assertEqual('us', charts.axis(850, 'us')[2])
        # seconds given, shown in ms when under a second
        ticks, div, unit = charts.axis(0.049, 's')
        self.assertEqual('ms', unit)
        self.assertEqual([0, 10, 20, 30, 40, 50], ticks)
        ticks, div, unit = charts.axis(176)
        self.assertEqual((1.0, None), (div, unit))


class ContrastTest(testtools.TestCase):
    def test_wcag_reference_values(self):
        self.assertAlmostEqual(21.0, charts.contrast('#000', '#fff'))
        self.assertAlmostEqual(1.0, charts.contrast('#777', '#777'))
        # WebAIM's checker: #767676 on white is 4.54:1
        self.assertAlmostEqual(
            4.54, charts.contrast('#767676', '#ffffff'), places=2
        )

    def test_text_on_every_component_colour(self):
        fills = list(views.PALETTE.values()) + list(views.EXTRA)
        for fill in fills + [charts.blend(f, 0.6) for f in fills]:
            self.assertGreaterEqual(
                charts.contrast(charts.text_on(fill), fill), 4.5, fill
            )


class DistinctColoursTest(testtools.TestCase):
    """Issue 32, item 8: colours stacked side by side are told apart
    (CIEDE2000), not only readable on the page."""

    def test_ciede2000_reference_pairs(self):
        # identical colours are 0 apart, black and white 100
        self.assertEqual(0.0, charts.ciede2000('#4e79a7', '#4e79a7'))
        self.assertAlmostEqual(
            100.0, charts.ciede2000('#000000', '#ffffff'), 0
        )
        # symmetric
        self.assertAlmostEqual(
            charts.ciede2000('#edc948', '#f1ce63'),
            charts.ciede2000('#f1ce63', '#edc948'),
        )
        # the two yellows of issue 32 (sql, wait.lock) were near-identical
        self.assertLess(charts.ciede2000('#edc948', '#f1ce63'), 5)

    def test_every_pair_of_component_colours_differs(self):
        colours = dict(views.PALETTE)
        colours.update(('extra %d' % i, c) for i, c in enumerate(views.EXTRA))
        names = sorted(colours)
        close = [
            (a, b, round(charts.ciede2000(colours[a], colours[b]), 1))
            for i, a in enumerate(names)
            for b in names[i + 1 :]
            if charts.ciede2000(colours[a], colours[b]) < 15
        ]
        self.assertEqual([], close)

    def test_components_outside_the_palette_differ_from_it(self):
        extra: dict = {}
        for name in ('wait.semaphore', 'service.key-manager', 'x', 'y', 'z'):
            colour = views.color(name, extra)
            for known in views.PALETTE.values():
                self.assertGreaterEqual(charts.ciede2000(colour, known), 15)


class ClipWordsTest(testtools.TestCase):
    MSG = (
        'Binding failed for port <uuid>, please check neutron logs '
        'for more information.'
    )

    def test_cut_after_a_word(self):
        out = fmt.clip_words(self.MSG, 41)
        self.assertEqual('Binding failed for port <uuid>, please...', out)
        for width in range(4, len(self.MSG)):
            out = fmt.clip_words(self.MSG, width)
            self.assertLessEqual(len(out), width)
            self.assertTrue(out.endswith('...'), out)
            kept = out[:-3]
            if self.MSG.find(' ') <= width - 3:
                # whole words only: what follows the kept part is a space
                self.assertTrue(self.MSG.startswith(kept))
                self.assertEqual(' ', self.MSG[len(kept)], (width, out))

    def test_fits_whole(self):
        self.assertEqual(self.MSG, fmt.clip_words(self.MSG, 200))

    def test_dotted_names(self):
        self.assertEqual(
            'compute.build\u2026',
            fmt.clip_words('compute.build_and_run', 16, '._ ', '\u2026'),
        )
        self.assertEqual(
            '',
            fmt.clip_words(
                'conductor.schedule', 6, '._ ', '\u2026', hard=False
            ),
        )


class ChartsTest(testtools.TestCase):
    def test_stacked_bars_axis(self):
        svg = charts.stacked_bars(
            ['1', '2-3'],
            [('a', [1_200_000, 3_000_000]), ('b', [400_000, 900_000])],
            {'a': '#4e79a7', 'b': '#f28e2b'},
            'mean time',
            'load',
            notes=['n=1', 'n=2'],
        )
        yt = re.findall(r'class="ytick"[^>]*>([^<]*)<', svg)
        self.assertEqual(['0', '1', '2', '3', '4'], yt)
        self.assertIn('>mean time (s)</text>', svg)
        self.assertIn('>load</text>', svg)
        self.assertIn('viewBox="0 0 ', svg)

    def test_line_chart_axes(self):
        svg = charts.line_chart(
            [(0, 0), (40.5, 176), (81.3, 2)], 'time', 'in flight'
        )
        self.assertEqual(
            ['0', '50', '100', '150', '200'],
            re.findall(r'class="ytick"[^>]*>([^<]*)<', svg),
        )
        self.assertEqual(
            ['0', '20', '40', '60', '80', '100'],
            re.findall(r'class="xtick"[^>]*>([^<]*)<', svg),
        )
        self.assertIn('>time (s)</text>', svg)
        self.assertIn('>in flight</text>', svg)

    def test_legend_escapes(self):
        out = charts.legend([('#123456', '<b>x</b>')])
        self.assertIn('&lt;b&gt;x&lt;/b&gt;', out)
        self.assertIn('background:#123456', out)

    def test_hbars(self):
        svg = charts.hbars(
            [
                ('oslo_concurrency.lockutils compute_resources', 2_500_000),
                ('db pool', 400_000),
            ],
            'time waited',
        )
        self.assertEqual(
            ['0', '0.5', '1', '1.5', '2', '2.5'],
            re.findall(r'class="xtick"[^>]*>([^<]*)<', svg),
        )
        self.assertIn('>time waited (s)</text>', svg)
        # the long label cut after a word, whole on hover
        self.assertIn(
            '<title>oslo_concurrency.lockutils compute_resources'
            '</title>oslo_concurrency.lockutils\u2026</text>',
            svg,
        )
        self.assertIn('>2.50s</text>', svg)
        self.assertIn('>400ms</text>', svg)
        self.assertEqual('', charts.hbars([], 'x'))
