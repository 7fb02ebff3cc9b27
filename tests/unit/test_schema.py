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
"""The schema is one contract: what the runtime writes, the analyser
reads."""

from instrument import schema
from instrument.analysis.model import sqldigest
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.targets.sqlalchemy import aggregate
from tests.unit import base


class SqlHistogramContractTest(base.TestCase):
    """``sql.agg`` histograms, written by the runtime's aggregator and
    read by the analyser's digest, land in the same decades."""

    def test_every_decade_lands_in_its_row(self):
        buf = base.ListBuffer()
        agg = aggregate.Aggregator(
            recorder_mod.Recorder(
                buf, process.ProcessIdentity.create('nova-conductor', 'h')
            ),
            10.0,
        )
        agg.rollover()
        # One statement per row of the report, and one below 1 us.
        durations = [
            0,
            5,
            50,
            500,
            5000,
            50_000,
            500_000,
            5_000_000,
            50_000_000,
        ]
        for dur in durations:
            agg.add('fp1', 'nova', 'SELECT', None, dur, None, False)
        agg.rollover(final=True)
        [rec] = [r for r in buf.dicts() if r['ev'] == schema.EV_SQL_AGG]
        self.assertEqual(
            schema.SQL_HIST_SIZE, len(rec['attrs'][schema.ATTR_HIST])
        )
        digest = sqldigest.SqlDigest()
        digest.add_agg(rec['ts'], rec['svc'], rec['attrs'])
        [stats] = digest.classes.values()
        rows = sqldigest.decades(stats[sqldigest.C_HIST])
        self.assertEqual(len(schema.SQL_DECADE_LABELS), len(rows))
        # [0, 1 us) and [1, 10 us) share the first row, one each after.
        self.assertEqual([2, 1, 1, 1, 1, 1, 1, 1], rows)
        self.assertEqual(len(durations), stats[sqldigest.C_COUNT])

    def test_sql_agg_attrs_are_read_by_their_keys(self):
        attrs = {
            schema.ATTR_FP: 'f',
            schema.ATTR_DB: 'nova',
            schema.ATTR_CALL: 'conductor.schedule',
            schema.ATTR_KIND: 'SELECT',
            schema.ATTR_COUNT: 3,
            schema.ATTR_ERRORS: 1,
            schema.ATTR_SUM_US: 30,
            schema.ATTR_MIN_US: 5,
            schema.ATTR_MAX_US: 20,
            schema.ATTR_SUMSQ_US: 525,
            schema.ATTR_ROWS: 7,
            schema.ATTR_HIST: [0, 1, 2, 0, 0, 0, 0, 0, 0],
        }
        digest = sqldigest.SqlDigest()
        digest.add_agg(1, 'conductor', attrs)
        [(key, stats)] = digest.classes.items()
        self.assertEqual(
            ('f', 'conductor', 'nova', 'conductor.schedule', 'SELECT'), key
        )
        self.assertEqual(
            (3, 30, 525, 5, 20, 7, 1),
            tuple(stats[sqldigest.C_COUNT : sqldigest.C_HIST]),
        )
