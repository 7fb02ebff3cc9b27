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
"""Fingerprints, query ids, statement kinds and the memo."""

import hashlib
import re

import testtools

from instrument.targets.sqlalchemy import fingerprint as fp

SELECT_IN = (
    'SELECT instances.id FROM instances WHERE instances.uuid IN '
    '(%s) AND instances.deleted = ?'
)


def qid(sql):
    return fp.classify(sql).qid


class TestFingerprint(testtools.TestCase):
    def test_in_lists_of_any_length_share_one_id(self):
        ids = {qid(SELECT_IN % ', '.join(['?'] * n)) for n in (1, 2, 7, 50)}
        self.assertEqual(1, len(ids))

    def test_different_tables_do_not(self):
        self.assertNotEqual(
            qid('SELECT id FROM instances WHERE id = ?'),
            qid('SELECT id FROM migrations WHERE id = ?'),
        )

    def test_comments_are_ignored(self):
        plain = 'SELECT id FROM instances WHERE id = ?'
        for commented in (
            'SELECT /* nova.db.main.api */ id FROM instances WHERE id = ?',
            '/* traceparent=00-ab */ SELECT id FROM instances WHERE id = ?',
            'SELECT id FROM instances -- by uuid\nWHERE id = ?',
        ):
            self.assertEqual(qid(plain), qid(commented), commented)

    def test_bind_markers_and_literals_are_unified(self):
        variants = [
            'SELECT a FROM t WHERE b = ? AND c = ?',
            'SELECT a FROM t WHERE b = %s AND c = %s',
            'SELECT a FROM t WHERE b = %(b_1)s AND c = %(c_1)s',
            'SELECT a FROM t WHERE b = :b_1 AND c = :c_1',
            'SELECT a FROM t WHERE b = $1 AND c = $2',
            "SELECT a FROM t WHERE b = 'it''s' AND c = -1.5e3",
            'SELECT a FROM t WHERE b = NULL AND c = 0x1F',
        ]
        self.assertEqual(
            ['select a from t where b = ? and c = ?'],
            sorted({fp.fingerprint(v) for v in variants}),
        )

    def test_identifier_quotes_case_and_whitespace(self):
        self.assertEqual(
            fp.fingerprint('SELECT `instances`.`id`\n  FROM `instances`'),
            fp.fingerprint('select "instances"."id" from "instances";'),
        )

    def test_multi_row_values_collapse(self):
        one = 'INSERT INTO t (a, b) VALUES (?, ?)'
        three = 'INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?)'
        self.assertEqual(qid(one), qid(three))
        self.assertEqual(
            'insert into t (a, b) values(?+)', fp.fingerprint(three)
        )
        with_function = 'INSERT INTO t (a, b) VALUES (?, now()), (?, now())'
        self.assertEqual(
            fp.fingerprint('INSERT INTO t (a, b) VALUES (?, now())'),
            fp.fingerprint(with_function),
        )

    def test_tuple_in_collapses(self):
        self.assertEqual(
            qid('SELECT a FROM t WHERE (a, b) IN ((?, ?))'),
            qid('SELECT a FROM t WHERE (a, b) IN ((?, ?), (?, ?))'),
        )

    def test_limit_and_offset(self):
        expected = 'select a from t limit ?'
        for sql in (
            'SELECT a FROM t LIMIT ?',
            'SELECT a FROM t LIMIT 10',
            'SELECT a FROM t LIMIT ? OFFSET ?',
            'SELECT a FROM t LIMIT %s, %s',
        ):
            self.assertEqual(expected, fp.fingerprint(sql), sql)

    def test_subquery_in_is_not_collapsed(self):
        self.assertEqual(
            'select a from t where b in (select c from u)',
            fp.fingerprint('SELECT a FROM t WHERE b IN (SELECT c FROM u)'),
        )

    def test_order_by_asc_dropped(self):
        self.assertEqual(
            qid('SELECT a FROM t ORDER BY a ASC, b DESC'),
            qid('SELECT a FROM t ORDER BY a, b DESC'),
        )

    def test_aliases_with_digits_are_kept(self):
        # SQLAlchemy's anon_1 / instances_1 are names, not numbers.
        self.assertEqual(
            'select anon_1.a from t as anon_1',
            fp.fingerprint('SELECT anon_1.a FROM t AS anon_1'),
        )

    def test_savepoint_names(self):
        self.assertEqual(
            qid('SAVEPOINT sa_savepoint_1'), qid('SAVEPOINT sa_savepoint_27')
        )

    def test_query_id_is_md5_of_fingerprint(self):
        sql = 'SELECT a FROM t WHERE b IN (?, ?)'
        qclass = fp.classify(sql)
        self.assertIsNotNone(re.fullmatch('[0-9a-f]{32}', qclass.qid))
        self.assertEqual(
            hashlib.md5(
                qclass.text.encode('utf-8'), usedforsecurity=False
            ).hexdigest(),
            qclass.qid,
        )


class TestKind(testtools.TestCase):
    def test_kinds(self):
        cases = {
            'SELECT 1': 'SELECT',
            '  (SELECT a FROM t) UNION (SELECT a FROM u)': 'SELECT',
            '/* x */ INSERT INTO t VALUES (?)': 'INSERT',
            'REPLACE INTO t VALUES (?)': 'INSERT',
            'UPDATE t SET a=?': 'UPDATE',
            'DELETE FROM t': 'DELETE',
            'BEGIN': 'BEGIN',
            'START TRANSACTION': 'BEGIN',
            'COMMIT': 'COMMIT',
            'ROLLBACK': 'ROLLBACK',
            'WITH x AS (SELECT 1) UPDATE t SET a = 1': 'UPDATE',
            'WITH x AS (SELECT 1) SELECT * FROM x': 'SELECT',
            'SAVEPOINT sa_savepoint_1': 'OTHER',
            'SHOW VARIABLES': 'OTHER',
            '': 'OTHER',
        }
        for sql, kind in cases.items():
            self.assertEqual(kind, fp.statement_kind(sql), sql)


class TestMemo(testtools.TestCase):
    def test_learn_once_announce_once(self):
        memo = fp.Memo()
        self.assertIsNone(memo.get('SELECT 1'))
        qclass, new = memo.learn('SELECT 1')
        self.assertTrue(new)
        self.assertIs(qclass, memo.get('SELECT 1'))
        # Another text of the same class is remembered, not announced.
        other, new = memo.learn('SELECT 2')
        self.assertFalse(new)
        self.assertEqual(qclass.qid, other.qid)
        self.assertEqual((qclass, False), memo.learn('SELECT 1'))

    def test_bounded(self):
        memo = fp.Memo(max_statements=10)
        for n in range(25):
            memo.learn('SELECT a%d FROM t' % n)  # noqa: S608
        self.assertEqual(10, len(memo))
        self.assertIsNone(memo.get('SELECT a0 FROM t'))
        self.assertIsNotNone(memo.get('SELECT a24 FROM t'))

    def test_clear_keeps_the_bound_get(self):
        memo = fp.Memo()
        get = memo.get
        memo.learn('SELECT 1')
        memo.clear()
        self.assertIsNone(get('SELECT 1'))
        memo.learn('SELECT 1')
        self.assertIsNotNone(get('SELECT 1'))
        self.assertTrue(memo.learn('SELECT 3')[1] is False)


class TestDoubleQuotes(testtools.TestCase):
    """MySQL's "x" is a string (pt-fingerprint: ?); elsewhere a name."""

    def test_mysql_double_quoted_strings_are_literals(self):
        self.assertEqual(
            {'select a from t where b = ? and c = ?'},
            {
                fp.fingerprint(sql, double_quoted_strings=True)
                for sql in (
                    'SELECT a FROM t WHERE b = "x1" AND c = "y2"',
                    "SELECT a FROM t WHERE b = 'x1' AND c = \"y\\\"2\"",
                    'SELECT a FROM t WHERE b = "it""s" AND c = ?',
                )
            },
        )
        self.assertEqual(
            qid('SELECT a FROM t WHERE b = ?'),
            fp.classify(
                'SELECT a FROM t WHERE b = "x1"', double_quoted_strings=True
            ).qid,
        )

    def test_elsewhere_they_are_identifiers(self):
        self.assertEqual(
            'select id from instances where a = ?',
            fp.fingerprint('SELECT "id" FROM "instances" WHERE "a" = ?'),
        )

    def test_memo_keeps_the_two_readings_apart(self):
        memo = fp.Memo()
        sql = 'SELECT a FROM t WHERE b = "x1"'
        mysql, _ = memo.learn(sql, double_quoted_strings=True)
        other, _ = memo.learn(sql)
        self.assertEqual('select a from t where b = ?', mysql.text)
        self.assertEqual('select a from t where b = x1', other.text)
        self.assertIs(mysql, memo.get(fp.memo_key(sql, True)))
        self.assertIs(other, memo.get(fp.memo_key(sql)))
        # Without a double quote, one key for both readings.
        self.assertEqual('SELECT 1', fp.memo_key('SELECT 1', True))
