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
"""The shared back ends of a run: MariaDB databases and a RabbitMQ vhost.

Every run owns databases named ``it_<run>_<name>`` and the vhost
``instrument_it_<run>``, where ``<run>`` is ``<pid of the test
process>x<random hex>``.  ``sweep`` removes what runs whose test process
is gone left behind (a killed run), so leftovers never pile up.

``require`` checks that MariaDB, RabbitMQ (and ``rabbitmqctl``) and
libfaketime are usable; outside CI a missing one makes the tests skip,
under ``CI=true`` it fails them.
"""

import os
import re
import secrets
import shutil
import socket
import subprocess

import pymysql

MYSQL_HOST = os.environ.get('INSTRUMENT_IT_MYSQL_HOST', '127.0.0.1')
MYSQL_PORT = int(os.environ.get('INSTRUMENT_IT_MYSQL_PORT', '3306'))
MYSQL_USER = os.environ.get('INSTRUMENT_IT_MYSQL_USER', 'root')
RABBIT_HOST = os.environ.get('INSTRUMENT_IT_RABBIT_HOST', '127.0.0.1')
RABBIT_PORT = int(os.environ.get('INSTRUMENT_IT_RABBIT_PORT', '5672'))
RABBIT_USER = 'guest'
RABBIT_PASSWORD = 'guest'  # noqa: S105 - the broker's stock test account
FAKETIME_LIBS = (
    '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
    '/usr/lib/faketime/libfaketime.so.1',
)

_DB_PREFIX = 'it_'
_VHOST_PREFIX = 'instrument_it_'
_RUN = re.compile(r'^(\d+)x[0-9a-f]+$')


class Unavailable(Exception):
    """A back end the environment needs is not there."""


def new_run_id() -> str:
    return '%dx%s' % (os.getpid(), secrets.token_hex(3))


def faketime_library() -> str:
    override = os.environ.get('INSTRUMENT_IT_FAKETIME_LIB')
    for path in (override,) if override else FAKETIME_LIBS:
        if path and os.path.exists(path):
            return path
    raise Unavailable(
        'libfaketime not found (%s); install the Debian '
        'package "faketime"' % ', '.join(FAKETIME_LIBS)
    )


def mysql(database: str = None):
    try:
        return pymysql.connect(
            host=MYSQL_HOST,
            port=MYSQL_PORT,
            user=MYSQL_USER,
            database=database,
            autocommit=True,
            connect_timeout=5,
        )
    except pymysql.MySQLError as exc:
        raise Unavailable(
            'MariaDB at %s:%d (user %s) is not usable: %s'
            % (MYSQL_HOST, MYSQL_PORT, MYSQL_USER, exc)
        ) from exc


def mysql_url(database: str) -> str:
    return 'mysql+pymysql://%s@%s:%d/%s?charset=utf8' % (
        MYSQL_USER,
        MYSQL_HOST,
        MYSQL_PORT,
        database,
    )


def rabbitmqctl(*args: str, check: bool = True) -> str:
    tool = shutil.which('rabbitmqctl')
    if tool is None:
        raise Unavailable(
            'rabbitmqctl not found: it is needed to create the run\'s vhost'
        )
    proc = subprocess.run(
        [tool, '-q', *args], capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise Unavailable(
            'rabbitmqctl %s failed (%d): %s'
            % (
                ' '.join(args),
                proc.returncode,
                (proc.stderr or proc.stdout).strip()[-500:],
            )
        )
    return proc.stdout


def require() -> None:
    """Raise ``Unavailable`` unless every back end answers."""
    faketime_library()
    mysql().close()
    try:
        socket.create_connection((RABBIT_HOST, RABBIT_PORT), 5).close()
    except OSError as exc:
        raise Unavailable(
            'RabbitMQ at %s:%d is not reachable: %s'
            % (RABBIT_HOST, RABBIT_PORT, exc)
        ) from exc
    rabbitmqctl('list_vhosts')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(run: str) -> bool:
    match = _RUN.match(run)
    return bool(match) and not _alive(int(match.group(1)))


class Backends:
    """The databases and the vhost of one run."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.databases = []
        self.vhost = _VHOST_PREFIX + run

    def database(self, name: str) -> str:
        """Create ``it_<run>_<name>``; returns its SQLAlchemy URL."""
        db = '%s%s_%s' % (_DB_PREFIX, self.run, name)
        conn = mysql()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    'CREATE DATABASE `%s` CHARACTER SET utf8mb4 '
                    'COLLATE utf8mb4_general_ci' % db
                )
        finally:
            conn.close()
        self.databases.append(db)
        return mysql_url(db)

    def transport_url(self) -> str:
        rabbitmqctl('add_vhost', self.vhost)
        rabbitmqctl(
            'set_permissions', '-p', self.vhost, RABBIT_USER, '.*', '.*', '.*'
        )
        return 'rabbit://%s:%s@%s:%d/%s' % (
            RABBIT_USER,
            RABBIT_PASSWORD,
            RABBIT_HOST,
            RABBIT_PORT,
            self.vhost,
        )

    def drop(self) -> list:
        """Remove everything of this run; returns what could not be."""
        errors = []
        for db in self.databases:
            try:
                _drop_database(db)
            except Exception as exc:
                errors.append('database %s: %s' % (db, exc))
        try:
            rabbitmqctl('delete_vhost', self.vhost, check=False)
        except Exception as exc:
            errors.append('vhost %s: %s' % (self.vhost, exc))
        return errors


def _drop_database(db: str) -> None:
    conn = mysql()
    try:
        with conn.cursor() as cur:
            cur.execute('DROP DATABASE IF EXISTS `%s`' % db)
    finally:
        conn.close()


def _list_databases(pattern: str) -> list:
    conn = mysql()
    try:
        with conn.cursor() as cur:
            cur.execute('SHOW DATABASES LIKE %s', (pattern,))
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def databases_of(run: str) -> list:
    return _list_databases(_DB_PREFIX.replace('_', '\\_') + run + '\\_%')


def vhost_exists(vhost: str) -> bool:
    return vhost in rabbitmqctl('list_vhosts', 'name').split()


def sweep() -> list:
    """Drop databases and vhosts of runs whose test process is gone."""
    removed = []
    for db in _list_databases(_DB_PREFIX.replace('_', '\\_') + '%'):
        run = db[len(_DB_PREFIX) :].split('_', 1)[0]
        if _stale(run):
            _drop_database(db)
            removed.append(db)
    for line in rabbitmqctl('list_vhosts', 'name').splitlines():
        name = line.strip()
        if name.startswith(_VHOST_PREFIX) and _stale(
            name[len(_VHOST_PREFIX) :]
        ):
            rabbitmqctl('delete_vhost', name, check=False)
            removed.append(name)
    return removed
