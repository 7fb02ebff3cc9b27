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
"""What the reports draw and count says what it is: the slowest boots
drawn by latency, the ``other`` row's times, lines that would grow with
the cloud aggregated, and every count and rate with its unit."""

import re
import shutil
import tempfile

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.model import breakdown
from instrument.analysis.render import fmt
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.sections import timelines
from tests import synthetic

GOOD = ('success', 'rescheduled_success')


def _section(text: str, title: str) -> str:
    """The lines of a text report's section, up to the next title."""
    start = text.index('\n%s\n' % title)
    end = re.search(r'\n\n\S[^\n]*\n=+\n', text[start + 1 :])
    return text[start : start + 1 + end.start() if end else len(text)]


def _boot_rows(report: dict) -> list:
    return [r for r in report['requests'] if r['kind'] == 'boot']


class ReportUnitsTest(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix='instrument-units-')
        # reschedules that succeed, hung spawns on several computes,
        # requests of no known operation (``other``)
        synthetic.generate(
            cls.dir,
            seed=1,
            requests=80,
            computes=8,
            p_hang=0.1,
            p_resched=0.12,
            p_other=0.15,
        )
        cls.report = pipeline.analyse([cls.dir], pipeline.Options(jobs=1))
        cls.text = report_text.render(cls.report)
        cls.page = report_html.render(cls.report)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def _drawn(self, page: str) -> list:
        """``(label, request id)`` of every timeline heading drawn."""
        part = page[page.index('<h2>Timelines') :]
        part = part[: part.index('<h2>', 4)]
        return re.findall(r'<h3>(?:([^<:]+): )?(req-[0-9a-f-]+) ', part)

    # -- 1. the timelines of the slowest boots -------------------------

    def test_timelines_draw_the_slowest_boots_by_latency(self):
        kept = sorted(
            (
                t
                for t in self.report['timelines']
                if t['kind'] == 'boot'
                and t['state'] in GOOD
                and not t['lost_ends']
                and not t.get('loss')
            ),
            key=lambda t: -t['latency_us'],
        )
        # the data: the first rescheduled boot in list order is not the
        # slowest, and the slowest is a rescheduled one
        resched = [
            t
            for t in self.report['timelines']
            if t['state'] == 'rescheduled_success'
        ]
        self.assertEqual('rescheduled_success', kept[0]['state'])
        self.assertNotEqual(kept[0]['req'], resched[0]['req'])
        drawn = self._drawn(self.page)
        self.assertIn(kept[0]['req'], [req for _label, req in drawn])
        boots = [
            (label, req)
            for label, req in drawn
            if label.startswith('slowest successful boot ')
        ]
        self.assertEqual(
            [
                ('slowest successful boot %d' % (i + 1), t['req'])
                for i, t in enumerate(kept[:4])
            ],
            boots,
        )
        # the first drawn is the max of the components table
        self.assertEqual(
            self.report['summary']['latency']['max'], kept[0]['latency_us']
        )
        # none of them succeeded at its first attempt: the slowest that
        # did is drawn too, and the heading says so
        self.assertEqual(
            {'rescheduled_success'}, {t['state'] for t in kept[:4]}
        )
        first = [t for t in kept if t['state'] == 'success'][0]
        self.assertIn((timelines.FIRST_ATTEMPT, first['req']), drawn)
        (heading,) = re.findall(r'<h2>Timelines[^<]*</h2>', self.page)
        self.assertEqual(
            '<h2>Timelines of the 4 slowest successful boots, '
            'the slowest first-attempt success and of one '
            'request per failure state</h2>',
            heading,
        )
        # one example of each failure state, as before
        failed = {
            t['state']
            for t in self.report['timelines']
            if t['state'] not in GOOD + ('other',)
        }
        self.assertTrue(failed)
        self.assertEqual(
            sorted('boot %s, first seen' % st for st in failed),
            sorted(label for label, _r in drawn if 'first seen' in label),
        )

    def test_slowest_first_attempt_success_is_kept_and_drawn(self):
        # fewer kept per operation than there are slower reschedules
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.sections.timelines.KEEP_SLOWEST', 3
            )
        )
        report = pipeline.analyse([self.dir], pipeline.Options(jobs=1))
        rows = _boot_rows(report)
        best = max(
            (
                r
                for r in rows
                if r['state'] == 'success'
                and not r['lost_ends']
                and not r.get('loss')
            ),
            key=lambda r: r['latency_us'],
        )
        slower = [
            r
            for r in rows
            if r['state'] == 'rescheduled_success'
            and r['latency_us'] > best['latency_us']
        ]
        self.assertGreaterEqual(len(slower), 3)
        self.assertIn(best['req'], [t['req'] for t in report['timelines']])
        self.assertIn(
            best['req'],
            [req for _l, req in self._drawn(report_html.render(report))],
        )
        # drawn on its own when the slowest are all rescheduled
        picked = timelines.pick(report['timelines'], slowest=2)
        self.assertIn(
            (timelines.FIRST_ATTEMPT, best['req']),
            [(label, t['req']) for label, t in picked],
        )

    # -- 2. the other row ----------------------------------------------

    def test_other_row_shows_the_times_of_every_request(self):
        lat = breakdown.stats(
            [
                r['latency_us']
                for r in self.report['requests']
                if r['kind'] == 'other'
            ]
        )
        self.assertGreater(lat['count'], 3)
        section = _section(
            self.text, 'Operations (every request named by what it reached)'
        )
        (row,) = [
            line.split()
            for line in section.splitlines()
            if line.startswith('other ')
        ]
        self.assertEqual(
            [fmt.fmt_us(lat['median']) + '*', fmt.fmt_us(lat['p95']) + '*'],
            row[5:7],
        )
        self.assertIn('* of every request (other: no success state)', section)
        self.assertIn(
            '<td class="">%s*</td><td class="">%s*</td>'
            % (fmt.fmt_us(lat['median']), fmt.fmt_us(lat['p95'])),
            self.page,
        )
        # boot's row: its successful requests, unmarked
        (boot,) = [
            line.split()
            for line in section.splitlines()
            if line.startswith('boot ')
        ]
        self.assertEqual(
            fmt.fmt_us(self.report['summary']['latency']['median']), boot[5]
        )

    # -- 3. lines per process and per host aggregated ------------------

    def test_processes_without_an_end_are_a_few_examples(self):
        unended = self.report['load']['unended']
        n = fmt.EXAMPLES
        self.assertGreater(len(unended), n + 2)
        section = _section(self.text, 'Input problems')
        self.assertEqual(1, section.count('no end record'))
        self.assertIn(
            '! no end record from %d processes on %d hosts'
            % (len(unended), len({r['host'] for r in unended})),
            section,
        )
        examples = re.findall(r'^    pid (\d+) on (\S+) ', section, re.M)
        self.assertEqual(n, len(examples))
        first = sorted(
            unended, key=lambda r: (r['last_us'], r['host'], r['pid'])
        )[:n]
        self.assertEqual([(str(r['pid']), r['host']) for r in first], examples)
        self.assertIn(
            '    and %d more processes (every one in the JSON '
            'report, load.unended)' % (len(unended) - n),
            section,
        )
        self.assertEqual(1, self.page.count('no end record'))

    def test_incomplete_instances_are_grouped_across_hosts(self):
        stopped = [
            i['stopped']
            for r in _boot_rows(self.report)
            for i in r['instances']
            if i['state'] == 'incomplete' and i['stopped']
        ]
        groups = {(s['ev'], bool(s['open'])) for s in stopped}
        hosts = {s['host'] for s in stopped}
        self.assertGreater(len(hosts), fmt.EXAMPLES)
        section = _section(self.text, 'Requests')
        lines = section[section.index('incomplete instances stopped at:') :]
        lines = [
            line for line in lines.splitlines()[1:] if line.startswith('  ')
        ]
        self.assertEqual(len(groups), len(lines))
        self.assertEqual(
            len(stopped),
            sum(
                int(re.search(r' (\d+) instances on ', line).group(1))
                for line in lines
            ),
        )
        if len(groups) == 1:
            self.assertIn(
                ' %d instances on %d hosts (' % (len(stopped), len(hosts)),
                lines[0],
            )
            self.assertIn(
                ' and %d more)' % (len(hosts) - fmt.EXAMPLES), lines[0]
            )

    # -- 4. units and denominators -------------------------------------

    def test_counts_and_rates_name_their_units(self):
        s = self.report['summary']
        rows = _boot_rows(self.report)
        insts = [i for r in rows for i in r['instances']]
        built = [i for i in insts if i['attempts'] >= 1]
        self.assertEqual(len(built), s['instances_built'])
        self.assertAlmostEqual(
            sum(1 for i in built if i['attempts'] > 1) / len(built),
            s['reschedule_rate'],
        )
        rates = (
            'success rate %s of %d instances; reschedule rate %s of '
            '%d instances that reached a compute; DB retries in %s '
            'of %d boot requests'
            % (
                fmt.fmt_pct(s['success_rate']),
                len(insts),
                fmt.fmt_pct(s['reschedule_rate']),
                len(built),
                fmt.fmt_pct(s['db_retry_rate']),
                len(rows),
            )
        )
        self.assertIn('\n' + rates + '\n', self.text)
        self.assertIn('Success' + rates[len('success') :], self.page)
        good = [r for r in rows if r['state'] in GOOD]
        self.assertIn(
            'throughput %.2f boot requests/s (%.2f successful '
            'boot requests/s)'
            % (len(rows) / s['duration_s'], len(good) / s['duration_s']),
            self.text,
        )
        # (a request a loss may have touched is not timed either)
        known = [r for r in good if not r['lost_ends'] and not r.get('loss')]
        self.assertIn(
            '; times of %d successful boot requests\n' % len(known), self.text
        )
        self.assertNotIn('successful/s', self.text)
        self.assertNotIn('successful boots\n', self.text)


class ClipDistinctTest(testtools.TestCase):
    """Messages cut for a table stay told apart (issue 32, item 7)."""

    def test_messages_that_differ_at_the_end_are_not_cut_alike(self):
        base = (
            '(pymysql.err.IntegrityError) (1062, "Duplicate entry <n> for key '
        )
        a, b = base + "'uniq_instances0uuid'\")", base + "'PRIMARY'\")"
        short = 'Instance <uuid> could not be found.'
        out = fmt.clip_distinct([a, b, short], 70)
        self.assertEqual([a, b, short], out)
        # each alone is cut at 70
        self.assertEqual(fmt.clip_words(a, 70), fmt.clip_distinct([a], 70)[0])
        self.assertLessEqual(len(fmt.clip_distinct([a], 70)[0]), 70)

    def test_unrelated_long_messages_are_cut(self):
        a = 'x ' * 60
        b = 'y ' * 60
        self.assertEqual(
            [fmt.clip_words(a, 70), fmt.clip_words(b, 70)],
            fmt.clip_distinct([a, b], 70),
        )
