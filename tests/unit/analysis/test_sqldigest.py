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
"""The SQL digest: classes, sql.agg merge, grouping, ordering, times."""

import testtools

from instrument.analysis.model import sqldigest
from instrument.analysis.sections import sql
from tests import synthetic


def digest():
    d = sqldigest.SqlDigest()
    for i in range(100):
        d.add(
            1000 + i,
            1000 + 10 * i,
            'fpA',
            'conductor',
            'nova',
            'conductor.schedule',
            1,
            False,
        )
    for i in range(10):
        d.add(
            2000 + i,
            50_000,
            'fpB',
            'scheduler',
            'nova_api',
            'scheduler.host_states',
            3,
            i == 0,
        )
    d.fingerprint('fpA', 'select * from instances where uuid = ?', 'SELECT')
    return d


class DigestTest(testtools.TestCase):
    def test_profile_and_block(self):
        prof = digest().profile()
        self.assertEqual(['fpB', 'fpA'], [r['id'] for r in prof['rows']])
        a = prof['rows'][1]
        self.assertEqual(100, a['calls'])
        self.assertEqual(sum(1000 + 10 * i for i in range(100)), a['total_us'])
        self.assertEqual(1000, a['min_us'])
        self.assertEqual(1990, a['max_us'])
        self.assertLess(abs(a['median_us'] - 1495) / 1495, 0.05)
        self.assertLess(abs(a['p95_us'] - 1945) / 1945, 0.05)
        self.assertEqual('SELECT instances', a['item'])
        self.assertEqual(100, sum(a['histogram']))
        self.assertEqual(100, a['histogram'][3])  # 1ms row
        b = prof['rows'][0]
        self.assertEqual(1, b['errors'])
        self.assertEqual(30, b['rows'])
        self.assertAlmostEqual(0.0, b['v_m'])
        self.assertAlmostEqual(1.0, sum(r['pct'] for r in prof['rows']))

    def test_agg_records_merge(self):
        d = digest()
        d.add_agg(
            3000,
            'conductor',
            {
                'fp': 'fpA',
                'db': 'nova',
                'call': 'conductor.schedule',
                'count': 50,
                'sum_us': 5000,
                'min_us': 50,
                'max_us': 200,
                'sumsq_us': 600_000,
                'errors': 2,
                'rows': 50,
                'hist': [0, 0, 40, 10, 0, 0, 0, 0, 0],
            },
        )
        a = [r for r in d.profile()['rows'] if r['id'] == 'fpA'][0]
        self.assertEqual(150, a['calls'])
        self.assertEqual(50, a['aggregated'])
        self.assertEqual(50, a['min_us'])
        self.assertEqual(2, a['errors'])
        # 40 in [10us, 100us), 10 in [100us, 1ms) clamped to max 200us
        self.assertEqual([0, 40, 10, 100], a['histogram'][:4])

    def test_group_order_limit(self):
        d = digest()
        prof = d.profile(
            group_by='service', order_by='Query_time:cnt', limit=1
        )
        self.assertEqual(['conductor'], [r['id'] for r in prof['rows']])
        self.assertEqual(1, prof['misc']['classes'])
        self.assertEqual(10, prof['misc']['calls'])
        self.assertRaises(ValueError, d.profile, 'nope')
        self.assertRaises(ValueError, d.profile, 'fingerprint', 'nope')

    def test_merge_equals_single(self):
        whole = digest()
        half1, half2 = sqldigest.SqlDigest(), sqldigest.SqlDigest()
        for key, s in whole.classes.items():
            (half1 if key[0] == 'fpA' else half2).classes[key] = s
        for fp, text in whole.texts.items():
            half2.fingerprint(fp, text, whole.kinds[fp])
        half1.merge(half2)
        self.assertEqual(whole.profile(), half1.profile())

    def test_since_until(self):
        d = sqldigest.SqlDigest(since=1050, until=2005)
        for i in range(100):
            d.add(1000 + i, 10, 'a', 's', 'd', 'c', 0, False)
        for i in range(10):
            d.add(2000 + i, 10, 'b', 's', 'd', 'c', 0, False)
        rows = {r['id']: r['calls'] for r in d.profile()['rows']}
        self.assertEqual({'a': 50, 'b': 5}, rows)
        self.assertEqual(55, d.filtered)

    def test_query_id_is_md5_of_fingerprint(self):
        self.assertEqual(
            'd41d8cd98f00b204e9800998ecf8427e', synthetic.fingerprint_id('')
        )


class KindTest(testtools.TestCase):
    """Pool resets and connection set-up count in their fingerprint's
    class (as in the server's slow log) and can be shown apart."""

    def digest(self):
        d = sqldigest.SqlDigest()
        for kind, n in (('ROLLBACK', 3), ('POOL_RESET', 5)):
            for i in range(n):
                d.add(
                    1000 + i,
                    100,
                    'fpR',
                    'conductor',
                    'nova',
                    'c',
                    None,
                    False,
                    kind,
                )
        d.add_agg(
            2000,
            'conductor',
            {
                'fp': 'fpR',
                'db': 'nova',
                'call': 'c',
                'kind': 'POOL_RESET',
                'count': 10,
                'sum_us': 1000,
                'min_us': 50,
                'max_us': 200,
                'sumsq_us': 110_000,
                'hist': [0, 0, 5, 5, 0, 0, 0, 0, 0],
            },
        )
        d.add(
            3000, 900, 'fpN', 'conductor', 'nova', None, None, False, 'CONNECT'
        )
        d.fingerprint('fpR', 'rollback', 'ROLLBACK')
        d.fingerprint('fpN', 'set names utf8mb4', 'OTHER')
        return d

    def test_one_class_per_fingerprint_with_its_kinds(self):
        rows = {r['id']: r for r in self.digest().profile()['rows']}
        self.assertEqual(18, rows['fpR']['calls'])
        self.assertEqual(
            {'POOL_RESET': 15, 'ROLLBACK': 3}, rows['fpR']['kinds']
        )
        self.assertEqual({'CONNECT': 1}, rows['fpN']['kinds'])
        self.assertIn(
            '# kinds POOL_RESET 15, ROLLBACK 3',
            sql.class_block(rows['fpR'], 'fingerprint'),
        )

    def test_group_by_kind(self):
        rows = {
            r['id']: r for r in self.digest().profile(group_by='kind')['rows']
        }
        self.assertEqual(
            {'ROLLBACK': 3, 'POOL_RESET': 15, 'CONNECT': 1},
            {k: r['calls'] for k, r in rows.items()},
        )
        self.assertEqual('POOL_RESET, 1 query', rows['POOL_RESET']['item'])


class RowsTest(testtools.TestCase):
    """Issue 14, item 4: a row count the driver did not give (sqlite's
    SELECTs: ``"rows": null``) is unknown, never zero."""

    def block(self, d, fp):
        row = [r for r in d.profile(limit=0)['rows'] if r['id'] == fp][0]
        rows_line = [
            line
            for line in sql.class_block(row, 'fingerprint')
            if line.startswith('# Rows')
        ]
        return row, rows_line[0]

    def test_no_row_count_is_unknown(self):
        d = sqldigest.SqlDigest()
        for i in range(5):
            d.add(
                1000 + i,
                100,
                'fpS',
                'api',
                'nova_api',
                'api.request',
                None,
                False,
                'SELECT',
            )
        row, line = self.block(d, 'fpS')
        self.assertIsNone(row['rows'])
        self.assertEqual(5, row['rows_unknown'])
        self.assertEqual('# Rows             unknown', line)

    def test_zero_rows_reported_are_zero(self):
        d = sqldigest.SqlDigest()
        d.add(1000, 100, 'fpU', 'api', 'nova', None, 0, False, 'UPDATE')
        row, line = self.block(d, 'fpU')
        self.assertEqual(0, row['rows'])
        self.assertEqual('# Rows                   0', line)

    def test_some_unknown_are_counted_apart(self):
        d = sqldigest.SqlDigest()
        d.add(1000, 100, 'fpM', 'api', 'nova', None, 4, False, 'SELECT')
        d.add(1001, 100, 'fpM', 'api', 'nova', None, None, False, 'SELECT')
        d.add(1002, 100, 'fpM', 'api', 'nova', None, None, False, 'SELECT')
        row, line = self.block(d, 'fpM')
        self.assertEqual(4, row['rows'])
        self.assertIn('4  (2 of 3 statements without a row count)', line)

    def test_aggregates_with_no_rows_are_unknown(self):
        # an aggregate's rows sum cannot tell "0 rows" from "no count"
        d = sqldigest.SqlDigest()
        d.add_agg(
            3000,
            'api',
            {
                'fp': 'fpA',
                'db': 'nova',
                'kind': 'SELECT',
                'count': 10,
                'sum_us': 500,
                'min_us': 10,
                'max_us': 90,
                'rows': 0,
                'hist': [],
            },
        )
        d.add_agg(
            3000,
            'api',
            {
                'fp': 'fpB',
                'db': 'nova',
                'kind': 'SELECT',
                'count': 10,
                'sum_us': 500,
                'min_us': 10,
                'max_us': 90,
                'rows': 7,
                'hist': [],
            },
        )
        self.assertIsNone(self.block(d, 'fpA')[0]['rows'])
        self.assertEqual(7, self.block(d, 'fpB')[0]['rows'])

    def test_aggregates_say_how_many_had_a_row_count(self):
        # Issue 27 item 12: rows_known tells a 0-row class from one
        # without row counts
        d = sqldigest.SqlDigest()
        base = {
            'db': 'nova',
            'count': 10,
            'sum_us': 500,
            'min_us': 10,
            'max_us': 90,
            'hist': [],
        }
        d.add_agg(
            3000,
            'api',
            dict(base, fp='fpZ', kind='UPDATE', rows=0, rows_known=10),
        )
        d.add_agg(
            3000,
            'api',
            dict(base, fp='fpN', kind='SELECT', rows=0, rows_known=0),
        )
        d.add_agg(
            3000,
            'api',
            dict(base, fp='fpP', kind='SELECT', rows=4, rows_known=6),
        )
        row, line = self.block(d, 'fpZ')
        self.assertEqual((0, 0), (row['rows'], row['rows_unknown']))
        self.assertEqual('# Rows                   0', line)
        row, line = self.block(d, 'fpN')
        self.assertEqual((None, 10), (row['rows'], row['rows_unknown']))
        self.assertEqual('# Rows             unknown', line)
        row, line = self.block(d, 'fpP')
        self.assertEqual((4, 4), (row['rows'], row['rows_unknown']))

    def test_merge_group_and_order_by_rows(self):
        a = sqldigest.SqlDigest()
        b = sqldigest.SqlDigest()
        a.add(1000, 100, 'fpS', 'api', 'nova', None, None, False, 'SELECT')
        b.add(1000, 100, 'fpS', 'api', 'nova', None, 3, False, 'SELECT')
        b.add(1000, 100, 'fpT', 'api', 'nova', None, None, False, 'SELECT')
        a.merge(b)
        prof = a.profile(order_by='rows')
        self.assertEqual(['fpS', 'fpT'], [r['id'] for r in prof['rows']])
        self.assertEqual([3, None], [r['rows'] for r in prof['rows']])
        self.assertEqual([1, 1], [r['rows_unknown'] for r in prof['rows']])
        grouped = a.profile(group_by='service')['rows'][0]
        self.assertEqual((3, 2), (grouped['rows'], grouped['rows_unknown']))
