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
"""sql.agg records: statistics, histogram, intervals."""

import fixtures
import testtools

from instrument.targets.sqlalchemy import aggregate
from tests.unit import base


class TestAggregator(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.now_us = 1_700_000_000_000_000
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.targets.sqlalchemy.aggregate.time.time_ns',
                lambda: self.now_us * 1000,
            )
        )
        self.buffer, self.recorder = base.list_recorder('h', 'nova-scheduler')
        self.agg = aggregate.Aggregator(self.recorder, 10.0)

    def records(self):
        return self.buffer.dicts()

    def test_buckets(self):
        self.assertEqual(
            [0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 8],
            [
                aggregate.bucket(us)
                for us in (
                    0,
                    1,
                    9,
                    10,
                    100,
                    1000,
                    10000,
                    100000,
                    1000000,
                    10000000,
                    99000000,
                )
            ],
        )

    def test_interval_rollover(self):
        self.agg.rollover()
        start = self.now_us - self.now_us % 10000000
        for dur, rows in ((5, 1), (50, 2), (500, None)):
            self.agg.add(
                'f1',
                'nova',
                'SELECT',
                'scheduler.host_states',
                dur,
                rows,
                False,
            )
        self.agg.add('f1', 'nova', 'SELECT', None, 7, 0, True)
        self.agg.rollover()
        self.assertEqual([], self.records())  # interval not over
        self.now_us += 10000000
        self.agg.rollover()
        recs = self.records()
        self.assertEqual(2, len(recs))
        by_call = {r['attrs']['call']: r for r in recs}
        rec = by_call['scheduler.host_states']
        self.assertEqual('C', rec['ph'])
        self.assertEqual('sql.agg', rec['ev'])
        self.assertEqual(start, rec['ts'])
        self.assertEqual(
            {
                'fp': 'f1',
                'db': 'nova',
                'kind': 'SELECT',
                'call': 'scheduler.host_states',
                'count': 3,
                'errors': 0,
                'sum_us': 555,
                'min_us': 5,
                'max_us': 500,
                'sumsq_us': 25 + 2500 + 250000,
                'rows': 3,
                'rows_known': 2,
                'hist': [0, 1, 1, 1, 0, 0, 0, 0, 0],
                'interval_s': 10.0,
            },
            rec['attrs'],
        )
        self.assertEqual(1, by_call[None]['attrs']['errors'])
        # 0 rows is a row count: known, and zero
        self.assertEqual(
            (0, 1),
            (
                by_call[None]['attrs']['rows'],
                by_call[None]['attrs']['rows_known'],
            ),
        )
        # Nothing more until something is added.
        self.now_us += 30000000
        self.agg.rollover()
        self.assertEqual(2, len(self.records()))

    def test_final_writes_the_partial_interval(self):
        self.now_us -= self.now_us % 10000000
        self.agg.rollover()
        self.agg.add('f2', 'nova_api', 'UPDATE', None, 20, 1, False)
        self.now_us += 2500000
        self.agg.rollover(final=True)
        (rec,) = self.records()
        self.assertEqual(2.5, rec['attrs']['interval_s'])
        self.assertEqual(1, rec['attrs']['count'])
