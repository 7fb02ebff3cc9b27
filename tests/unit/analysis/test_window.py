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
"""``--since``/``--until``: the options, and a window over the whole
report (issue 14, item 5)."""

import os

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import window
from tests import synthetic


class OptionsTest(testtools.TestCase):
    def test_parse_time(self):
        self.assertEqual(
            1_700_000_000_000_000, window.parse_time('1700000000')
        )
        self.assertEqual(
            1_700_000_000_000_000,
            window.parse_time('2023-11-14T22:13:20+00:00'),
        )
        self.assertEqual(600_000_005, window.parse_time('+10m', 5))
        self.assertRaises(ValueError, window.parse_time, 'soon')

    def test_empty_windows_are_refused_before_reading(self):
        for since, until in (
            ('2024-01-02', '2024-01-01'),
            ('1700000000', '1700000000'),
            ('+20m', '+10m'),
        ):
            exc = self.assertRaises(ValueError, window.check, since, until)
            self.assertIn('not before --until', str(exc))
        for since, until in (
            ('2024-01-01', '2024-01-02'),
            ('+1m', '+2m'),
            ('+1m', '2024-01-01'),
            (None, '+1s'),
            ('2024-01-01T12:00:00+02:00', None),
        ):
            window.check(since, until)

    def test_unreadable_times(self):
        for value in ('yesterday-ish', '+soon', '+'):
            exc = self.assertRaises(ValueError, window.check, value, None)
            self.assertIn('cannot read time', str(exc))

    def test_resolve_counts_relative_times_from_the_start(self):
        w = window.resolve('+10s', '+1m', 5_000_000)
        self.assertEqual((15_000_000, 65_000_000), (w.since, w.until))
        self.assertTrue(w.contains(15_000_000))
        self.assertFalse(w.contains(65_000_000))
        self.assertFalse(w.contains(14_999_999))
        # known only once the start is: relative since after absolute
        # until
        exc = self.assertRaises(
            ValueError, window.resolve, '+1h', '10', 5_000_000
        )
        self.assertIn('window is empty', str(exc))
        exc = self.assertRaises(ValueError, window.resolve, '+1h', None, None)
        self.assertIn('absolute time', str(exc))
        self.assertFalse(window.resolve(None, None, None))


class ReportWindowTest(testtools.TestCase):
    """The window filters requests, SQL and DB retries alike."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = fixtures.TempDir()
        cls.tmp.setUp()
        cls.dir = os.path.join(cls.tmp.path, 'run')
        synthetic.generate(cls.dir, seed=5, requests=150)
        cls.full = pipeline.analyse([cls.dir])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanUp()
        super().tearDownClass()

    def test_requests_that_started_in_the_window(self):
        full = self.full
        starts = sorted(r['start_us'] for r in full['requests'])
        since, until = starts[len(starts) // 4], starts[len(starts) // 2]
        part = pipeline.analyse(
            [self.dir],
            pipeline.Options(since=str(since / 1e6), until=str(until / 1e6)),
        )
        want = sorted(
            r['req']
            for r in full['requests']
            if since <= r['start_us'] < until
        )
        got = sorted(r['req'] for r in part['requests'])
        self.assertEqual(want, got)
        self.assertGreater(len(got), 10)
        self.assertEqual(
            len(full['requests']) - len(got),
            part['window']['requests_outside'],
        )
        self.assertEqual(
            (since, until),
            (part['window']['since_us'], part['window']['until_us']),
        )
        # the summary and the failure table count the same requests
        self.assertEqual(
            sum(1 for r in part['requests'] if r['kind'] == 'boot'),
            part['summary']['boots'],
        )
        kept = set(got)
        for row in part['failures']:
            self.assertTrue(set(row['requests']) <= kept, row)
        self.assertLess(
            sum(f['count'] for f in part['failures']),
            sum(f['count'] for f in full['failures']),
        )
        # SQL statements by their own start
        self.assertLess(part['sql']['calls'], full['sql']['calls'])
        self.assertEqual(
            full['sql']['calls'],
            part['sql']['calls'] + part['window']['sql_outside'],
        )
        # DB retries by their time: fewer, never more
        self.assertLessEqual(
            sum(r['count'] for r in part['retries']),
            sum(r['count'] for r in full['retries']),
        )
        # the clocks use the whole input
        self.assertEqual(full['clocks']['hosts'], part['clocks']['hosts'])

    def test_no_window_leaves_nothing_out(self):
        self.assertEqual(
            {
                'since_us': None,
                'until_us': None,
                'requests_outside': 0,
                'sql_outside': 0,
            },
            self.full['window'],
        )

    def test_an_empty_window_once_placed_is_an_input_error(self):
        exc = self.assertRaises(
            spanfiles.InputError,
            pipeline.analyse,
            [self.dir],
            pipeline.Options(since='+1h', until='1'),
        )
        self.assertIn('window is empty', str(exc))
