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
"""Driver error messages lose the values a statement put in them.

The messages are the ones PyMySQL (MariaDB 10.11) and psycopg2
(PostgreSQL 15) produced, as oslo.db and SQLAlchemy wrap them; the
functional tier (tests/functional/mysql/test_error_messages.py) makes
them on the real servers.
"""

import testtools

from instrument.runtime import tracer


def _pymysql(cls, code, message, statement='INSERT INTO t VALUES (%s)'):
    """What SQLAlchemy's wrapper of a PyMySQL error prints."""
    return (
        '(pymysql.err.%s) %r\n[SQL: %s]\n[parameters: (%r,)]\n'
        '(Background on this error at: https://sqlalche.me/e/20/gkpj)'
        % (cls, (code, message), statement, 'secret')
    )


# (message, what must be kept, the values that must go)
MARIADB = [
    (
        _pymysql(
            'IntegrityError',
            1062,
            "Duplicate entry 'user@example.org' for key 'name'",
        ),
        '(pymysql.err.IntegrityError) (1062, "Duplicate entry ? for key '
        '\'name\'")',
        ['user@example.org'],
    ),
    # The server does not escape the value: it may hold quotes itself.
    (
        _pymysql(
            'IntegrityError',
            1062,
            "Duplicate entry 'O'Brien' for key 'a' for key 'users.name'",
        ),
        '(pymysql.err.IntegrityError) (1062, "Duplicate entry ? for key '
        '\'users.name\'")',
        ['Brien', "'a'"],
    ),
    (
        _pymysql(
            'DataError',
            1366,
            "Incorrect string value: '\\xF0\\x9F\\x98\\x80se...' for "
            "column `test`.`t`.`name` at row 1",
        ),
        "(pymysql.err.DataError) (1366, 'Incorrect string value: ? for "
        "column `test`.`t`.`name` at row 1')",
        ['se...', 'xF0'],
    ),
    (
        _pymysql(
            'DataError',
            1366,
            "Incorrect integer value: 'notanint-secret' for column "
            "`test`.`t`.`n` at row 1",
        ),
        "(pymysql.err.DataError) (1366, 'Incorrect integer value: ? for "
        "column `test`.`t`.`n` at row 1')",
        ['notanint'],
    ),
    (
        _pymysql(
            'OperationalError',
            1292,
            "Incorrect date value: '2020-13-45' for column "
            "`test`.`t`.`d` at row 1",
        ),
        "(pymysql.err.OperationalError) (1292, 'Incorrect date value: ? "
        "for column `test`.`t`.`d` at row 1')",
        ['2020-13-45'],
    ),
    (
        _pymysql(
            'OperationalError',
            1292,
            "Truncated incorrect DOUBLE value: 'abc-secret'",
        ),
        "(pymysql.err.OperationalError) (1292, 'Truncated incorrect DOUBLE "
        "value: ?')",
        ['abc-secret'],
    ),
    (
        _pymysql(
            'DataError', 1406, "Data too long for column 'name' at row 1"
        ),
        '(pymysql.err.DataError) (1406, "Data too long for column \'name\' '
        'at row 1")',
        [],
    ),
    (
        _pymysql(
            'IntegrityError',
            1452,
            'Cannot add or update a child row: a foreign key constraint '
            'fails (`test`.`child`, CONSTRAINT `child_ibfk_1` FOREIGN '
            'KEY (`pid`) REFERENCES `parent` (`id`))',
        ),
        "(pymysql.err.IntegrityError) (1452, 'Cannot add or update a child "
        "row: a foreign key constraint fails (`test`.`child`, CONSTRAINT "
        "`child_ibfk_1` FOREIGN KEY (`pid`) REFERENCES `parent` (`id`))')",
        [],
    ),
    (
        _pymysql(
            'ProgrammingError',
            1064,
            "You have an error in your SQL syntax; check the manual that "
            "corresponds to your MariaDB server version for the right "
            "syntax to use near '\"x1secret\" AND 'y' 'z' at line 1",
        ),
        "(pymysql.err.ProgrammingError) (1064, 'You have an error in your "
        "SQL syntax; check the manual that corresponds to your MariaDB "
        "server version for the right syntax to use near ? at line 1')",
        ['x1secret', "'y'"],
    ),
    (
        _pymysql(
            'OperationalError',
            1213,
            'Deadlock found when trying to get lock; try restarting '
            'transaction',
        ),
        "(pymysql.err.OperationalError) (1213, 'Deadlock found when trying "
        "to get lock; try restarting transaction')",
        [],
    ),
    (
        _pymysql(
            'OperationalError',
            2003,
            "Can't connect to MySQL server on '192.0.2.7' ([Errno 111] "
            "Connection refused)",
        ),
        '(pymysql.err.OperationalError) (2003, "Can\'t connect to MySQL '
        'server on \'192.0.2.7\' ([Errno 111] Connection refused)")',
        [],
    ),
    (
        "(pymysql.err.ProgrammingError) (1146, \"Table 'nova.foo' doesn't "
        "exist\")",
        "(pymysql.err.ProgrammingError) (1146, \"Table 'nova.foo' doesn't "
        "exist\")",
        [],
    ),
]

POSTGRESQL = [
    (
        (
            '(psycopg2.errors.UniqueViolation) duplicate key value violates '
            'unique constraint "t_name_key"\nDETAIL:  Key '
            '(name)=(user@example.org)'
            ' already exists.\n'
        ),
        '(psycopg2.errors.UniqueViolation) duplicate key value violates '
        'unique constraint "t_name_key"',
        ['user@example.org'],
    ),
    (
        '(psycopg2.errors.InvalidTextRepresentation) invalid input syntax for '
        'type integer: "notanint-secret"\nLINE 1: INSERT INTO t (id, n) '
        "VALUES (6, 'notanint-secret')\n",
        '(psycopg2.errors.InvalidTextRepresentation) invalid input syntax '
        'for type integer: ?',
        ['notanint'],
    ),
    (
        '(psycopg2.errors.DatetimeFieldOverflow) date/time field value out '
        'of range: "2020-13-45"\n',
        '(psycopg2.errors.DatetimeFieldOverflow) date/time field value out '
        'of range: ?',
        ['2020-13-45'],
    ),
    (
        '(psycopg2.errors.CharacterNotInRepertoire) invalid byte sequence '
        'for encoding "UTF8": 0xf0 0x9f 0x98\n',
        '(psycopg2.errors.CharacterNotInRepertoire) invalid byte sequence '
        'for encoding "UTF8": ?',
        ['0xf0', '0x9f'],
    ),
    (
        '(psycopg2.OperationalError) connection to server at "192.0.2.7", '
        'port 5432 failed: FATAL:  password authentication failed for user '
        '"nova"\n',
        '(psycopg2.OperationalError) connection to server at "192.0.2.7", '
        'port 5432 failed: FATAL:  password authentication failed for user '
        '"nova"',
        [],
    ),
    (
        '(psycopg2.errors.ForeignKeyViolation) insert or update on table '
        '"child" violates foreign key constraint "child_pid_fkey"\n',
        '(psycopg2.errors.ForeignKeyViolation) insert or update on table '
        '"child" violates foreign key constraint "child_pid_fkey"',
        [],
    ),
]

# The DETAIL lines, were they ever on the first line.
DETAILS = [
    (
        'Key (name)=(user@example.org) already exists.',
        'Key (name)=(?) already exists.',
    ),
    (
        'Key (lower(name::text))=(O)Brien) already exists.',
        'Key (lower(name::text))=(?) already exists.',
    ),
    (
        'Key (pid)=(424242) is not present in table "parent".',
        'Key (pid)=(?) is not present in table "parent".',
    ),
    ('Failing row contains (1, null, secret).', 'Failing row contains (?).'),
]


class TestScrub(testtools.TestCase):
    def check(self, cases):
        for message, expected, gone in cases:
            err = tracer.error_of(RuntimeError(message))
            self.assertEqual(('RuntimeError', expected), err, message)
            for value in gone + ['secret']:
                self.assertNotIn(value, err[1], message)

    def test_mariadb_messages(self):
        self.check(MARIADB)

    def test_postgresql_messages(self):
        self.check(POSTGRESQL)

    def test_postgresql_details(self):
        for message, expected in DETAILS:
            self.assertEqual(expected, tracer.scrub_message(message))

    def test_other_literals(self):
        self.assertEqual(
            'a ? b ? c ? d ? e ?',
            tracer.scrub_message(
                "a x'DEADBEEF' b N'n1' c _utf8mb4'u1' d 0xCAFE e \"dq\""
            ),
        )

    def test_names_and_prose_are_kept(self):
        for text in (
            "Instance's host is down",
            'Unknown column \'c\' in ? ',
            'relation "instances" does not exist',
            'No valid host was found. There are not enough hosts available.',
        ):
            self.assertEqual(text, tracer.scrub_message(text))

    def test_capped_after_scrubbing(self):
        long = "Duplicate entry '%s' for key 'name'" % ('v' * 400)
        msg = tracer.short_message(RuntimeError((1062, long)))
        self.assertEqual('(1062, "Duplicate entry ? for key \'name\'")', msg)
        self.assertLessEqual(
            len(tracer.short_message(RuntimeError('x' * 400))),
            tracer.MAX_MESSAGE,
        )
