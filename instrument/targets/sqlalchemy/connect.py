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
"""Connection set-up statements: what a new connection sends before
SQLAlchemy hands it out (kind ``CONNECT``).

No engine event sees them: PyMySQL sends ``SET NAMES`` and ``SET
AUTOCOMMIT`` inside its own ``connect()``; the MySQL dialect's
``SET NAMES``, its first-connect queries (``SHOW VARIABLES``,
``SELECT DATABASE()``...) and oslo.db's ``SET SESSION sql_mode`` go
through the raw DBAPI connection in the pool's ``first_connect`` and
``connect`` events.

For PyMySQL (oslo.db's MySQL driver) every query on the wire is seen:
``pymysql.connections.Connection.connect`` is replaced (a REPLACE point
of ``instrument.patching.patcher``: on the patcher's post-import hook when
PyMySQL is not imported yet, undone by its ``remove``).  The
replacement puts a ``WireTap`` on the new connection: the connection's
own ``_execute_command`` and ``_read_packet`` are shadowed
by instance attributes, so each COM_QUERY is timed from its sending to
the last packet of its answer.  The tap pauses when ``connect()``
returns and resumes when the pool's ``first_connect``/``connect`` event
claims the connection; the pool's ``checkout``, which follows the
set-up, removes it.  From then on the connection has no instance
attribute of ours and its statements cost nothing more; a connection
made outside SQLAlchemy is only tapped during its ``connect()``.

Other drivers: their set-up statements are not recorded (their
connections mostly cannot take instance attributes, and a proxy in the
connect path could change what the driver does).
"""

import contextvars
import time
import weakref

from oslo_log import log as logging

from instrument.patching import points as points_mod
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import threads
from instrument.runtime import tracer as tracing

# Imported by the runtime's writer thread too: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))

MODULE = 'pymysql.connections'
CLASS = 'Connection'
COM_QUERY = 3  # pymysql.constants.COMMAND.COM_QUERY (MySQL protocol)

_perf_ns = time.perf_counter_ns

# The tap of a connection whose connect() just returned, for the pool
# event that follows in the same thread (or greenthread).
_CONNECTING: 'contextvars.ContextVar[WireTap | None]' = contextvars.ContextVar(
    'instrument_sql_connecting', default=None
)

POINT = '%s:%s.connect' % (MODULE, CLASS)


def database_of(conn) -> str:
    """The database a DB-API connection (PyMySQL's) was opened on
    ('' when it names none)."""
    db = getattr(conn, 'db', None)
    if isinstance(db, bytes):
        return db.decode('utf-8', 'replace')
    return db or ''


class WireTap:
    """Times the COM_QUERY commands of one PyMySQL connection."""

    __slots__ = (
        'conn',
        'queue',
        'faults',
        'db',
        'open',
        'last',
        '__weakref__',
    )

    def __init__(self, conn, queue, faults) -> None:
        self.conn = conn
        self.queue = queue
        self.faults = faults
        self.db = database_of(conn)
        # [perf_ns sent, statement, frame] of the command in flight.
        self.open: list | None = None
        # perf_ns of the last packet read of it
        self.last: int | None = None

    def arm(self) -> None:
        attrs = vars(self.conn)
        attrs['_execute_command'] = self._execute_command
        attrs['_read_packet'] = self._read_packet

    def pause(self) -> None:
        """The statement in flight is over; detach from the
        connection."""
        attrs = vars(self.conn)
        attrs.pop('_execute_command', None)
        attrs.pop('_read_packet', None)
        self._close(None)

    def _close(self, error) -> None:
        sent = self.open
        if sent is None:
            return
        self.open = None
        t1 = self.last
        if t1 is None or t1 < sent[0]:
            t1 = _perf_ns()
        if error is not None:
            error = [tracing.error_of(error), False, True]
        self.queue(sent[0], t1, sent[1], sent[2], error, self.db)

    def _execute_command(self, command, sql):
        conn = self.conn
        try:
            self._close(None)
            if command == COM_QUERY:
                self.last = None
                self.open = [_perf_ns(), sql, recorder_mod.current_frame()]
        except Exception as exc:
            self.faults(exc)
        return type(conn)._execute_command(conn, command, sql)

    def _read_packet(self, *args, **kwargs):
        conn = self.conn
        try:
            packet = type(conn)._read_packet(conn, *args, **kwargs)
        except BaseException as exc:
            # The server refused the statement (or went away).
            try:
                self._close(exc)
            except Exception as fault:
                self.faults(fault)
            raise
        try:
            self.last = _perf_ns()
        except Exception as exc:
            self.faults(exc)
        return packet


class ConnectTaps:
    """The taps of one ``SqlListeners``: PyMySQL's patched ``connect``
    and the connections between their set-up and their checkout."""

    def __init__(self, queue, faults) -> None:
        """``queue(t0, t1, statement, frame, error, db)`` takes a
        finished set-up statement; ``faults(exc)`` counts a fault."""
        self.queue = queue
        self.faults = faults
        self._active = False
        # id(DBAPI connection) -> its tap, from the pool's connect
        # event to its checkout.  Weak: the connection holds its tap
        # (bound methods), a connection that never reaches checkout
        # (its set-up failed) takes its tap with it.
        self.taps = weakref.WeakValueDictionary()

    def reset(self) -> None:
        """In a forked child: the parent's connections are not ours."""
        self.taps = weakref.WeakValueDictionary()

    # -- PyMySQL's connect ---------------------------------------------

    def points(self) -> list:
        """The REPLACE point of PyMySQL's ``Connection.connect``."""
        return [
            points_mod.replace(MODULE, CLASS + '.connect', self._replacement)
        ]

    def install(self) -> None:
        self._active = True

    def remove(self) -> None:
        """Stop tapping: the taps between set-up and checkout detach
        (the patcher puts ``connect`` back)."""
        self._active = False
        for tap in list(self.taps.values()):
            try:
                tap.pause()
            except Exception as exc:
                self.faults(exc)
        self.taps = weakref.WeakValueDictionary()

    def _replacement(self, original, state, owner):
        """What takes the place of ``Connection.connect``."""
        taps = self

        def connect(conn, *args, **kwargs):
            tap = None
            if taps._active and state.active:
                try:
                    tap = WireTap(conn, taps.queue, taps.faults)
                    tap.arm()
                except Exception as exc:
                    taps.faults(exc)
                    tap = None
            try:
                return original(conn, *args, **kwargs)
            finally:
                if tap is not None:
                    try:
                        tap.pause()
                        _CONNECTING.set(tap)
                    except Exception as exc:
                        taps.faults(exc)

        connect.__wrapped__ = original  # type: ignore[attr-defined]
        connect.__name__ = 'connect'
        connect.__qualname__ = getattr(original, '__qualname__', 'connect')
        connect.__doc__ = getattr(original, '__doc__', None)
        return connect

    # -- pool events ---------------------------------------------------

    def on_connect(self, dbapi_connection, connection_record) -> None:
        """Pool ``first_connect``/``connect`` (before any other
        listener): resume the tap of the connection just made."""
        try:
            tap = _CONNECTING.get()
            if tap is None:
                return
            _CONNECTING.set(None)
            if tap.conn is dbapi_connection and self._active:
                tap.arm()
                self.taps[id(dbapi_connection)] = tap
        except Exception as exc:
            self.faults(exc)

    def on_checkout(
        self, dbapi_connection, connection_record, connection_proxy
    ) -> None:
        """Pool ``checkout``: the set-up is over."""
        taps = self.taps
        # The plain dict inside the weak one (its own ``len`` is Python
        # code, paid at every checkout); a dead tap's entry goes from
        # it when the tap dies.
        if not taps.data:  # type: ignore[attr-defined]
            return
        try:
            tap = taps.pop(id(dbapi_connection), None)
            if tap is not None:
                tap.pause()
        except Exception as exc:
            self.faults(exc)
