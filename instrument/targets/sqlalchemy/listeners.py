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
"""SQLAlchemy engine listeners: ``sql.query`` and ``sql.txn`` records.

SQLAlchemy 2.0 (``DIALECT_EXEC``): no engine listener at all (a
class-level one sets ``Engine._has_events``, and every Connection of
the process then takes SQLAlchemy's event paths): the statements are
timed by each adopted dialect's ``do_execute``/``do_executemany``/
``do_execute_no_params``, the transaction's start by its ``do_begin``
(the transaction's state on the pool connection only), the early
error listener is the dialect class's; engines made before
``install`` are adopted at ``install`` (``names.existing_engines``).
SQLAlchemy 1.4: listeners attached at class level
(``event.listen(Engine, ...)``), so every engine of the process is
covered whenever it was created, before or after ``install``.

An engine's dialect is "adopted" once, when ``create_engine`` makes
the engine (``Dialect.engine_created``, a REPLACE point: nothing per
Connection); an engine made before ``install``, at ``install`` (2.0)
or at its first transaction (1.4: ``begin``; until then the pool's
reset of its connections is not timed):

* its database name is read from the engine URL and cached;
* a ``handle_error`` listener is appended to the dialect (to the
  engine under SQLAlchemy 1.4, where it is an engine event) *after*
  oslo.db's exception filter (which oslo.db registers when it creates the
  engine), so it sees the translated exception (``DBDeadlock``,
  ``DBConnectionError``...) in ``ExceptionContext.chained_exception``.
  A class-level ``handle_error`` listener, which runs before oslo.db's,
  queues the failure first with the exception SQLAlchemy raises: when
  oslo.db's filter re-raises that one (it does for OperationalErrors it
  does not translate, e.g. lock wait timeouts) the later listeners are
  skipped, and that is what the caller got.  The late listener settles
  the queued failure with the translated class; the writer waits up to
  ``SETTLE_NS`` for it;
* ``do_commit``/``do_rollback`` are wrapped on that dialect instance:
  one hook per round trip.  ``begin`` puts the transaction's state on
  the Connection and on its pool connection (``_ConnectionFairy``, new
  at each checkout), which is what the dialect gets: a pool connection
  that carries a transaction is that transaction's COMMIT/ROLLBACK;
  one that carries none is the pool's reset-on-return (a statement of
  kind ``POOL_RESET``, outside any transaction: the pool calls the
  dialect only when the transaction was not ended already).  No
  ``commit``, ``rollback`` or pool ``reset`` event is listened to; the
  pool's ``invalidate`` (rare) ends the transaction of a connection
  discarded with it, where no round trip follows.  The raw connection
  of a dialect's first connect is not a pool connection and runs
  untimed (the connect taps see it).

What a new connection sends before the pool hands it out (kind
``CONNECT``) is seen by the taps of
``instrument.targets.sqlalchemy.connect``, which the pool's
``first_connect``/``connect``/``checkout`` events drive.

The calling thread does as little as a bare timing listener: the start
goes on the execution context, and the end appends one tuple of
references (times, statement text, transaction state, current span
frame, rowcount) to a bounded deque.  Everything else -- fingerprint
memo, attribution, slow/sampling decision, record building, aggregates
-- happens in ``process``, which the buffer's writer thread runs before
each drain.  A full deque drops and counts (``sql.dropped``).  Bound
parameters are never read.
"""

import collections
import os
import threading
import time
import typing
import weakref

from oslo_log import log as logging
import sqlalchemy

from instrument import schema
from instrument.patching import patcher as patcher_mod
from instrument.patching import points as points_mod
from instrument.runtime import faults as faults_mod
from instrument.runtime import record
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import threads
from instrument.runtime import tracer as tracing
from instrument.targets.sqlalchemy import connect as connect_mod
from instrument.targets.sqlalchemy import fingerprint
from instrument.targets.sqlalchemy import names

# Used from the writer's OS thread: see threads.safe_logger.
LOG = threads.safe_logger(logging.getLogger(__name__))
# Called through threads.defer only (from the statement's thread).
_DEFERRED_LOG = logging.getLogger(__name__)

EV_QUERY = schema.EV_SQL_QUERY
EV_TXN = schema.EV_SQL_TXN
EV_FINGERPRINT = schema.EV_SQL_FINGERPRINT
EV_DROPPED = schema.EV_SQL_DROPPED

OUTCOME_COMMIT = 'commit'
OUTCOME_ROLLBACK = 'rollback'

MEMORY_DB = names.MEMORY_DB

# Where the listeners go (every engine and pool, existing and future)
# and the places patched on each dialect adopted: points of
# instrument.patching.patcher.
ENGINE = ('sqlalchemy.engine.base', 'Engine')
POOL = ('sqlalchemy.pool.base', 'Pool')
DIALECT = ('sqlalchemy.engine.default', 'DefaultDialect')
# SQLAlchemy's hook on every engine create_engine() makes, before it
# returns it (a classmethod of the dialect class): where an engine is
# adopted, once, instead of at each of its Connections.
ENGINE_CREATED = ('sqlalchemy.engine.interfaces', 'Dialect.engine_created')
POINT_COMMIT = '%s:%s.do_commit' % DIALECT
POINT_ROLLBACK = '%s:%s.do_rollback' % DIALECT
POINT_LATE_ERROR = '%s:%s@handle_error' % DIALECT
# SQLAlchemy 2.0 (``DIALECT_EXEC``): the statements and the transaction's
# start, timed on each adopted dialect too; the early error listener on
# the dialect class (where 1.4 has it on the engine class).
POINT_BEGIN = '%s:%s.do_begin' % DIALECT
POINT_EXECUTE = '%s:%s.do_execute' % DIALECT
POINT_EXECUTEMANY = '%s:%s.do_executemany' % DIALECT
POINT_NO_PARAMS = '%s:%s.do_execute_no_params' % DIALECT
EARLY_DIALECT = ('sqlalchemy.engine.interfaces', 'Dialect')
POINT_EARLY_ERROR = '%s:%s@handle_error' % EARLY_DIALECT

# Entries waiting for the writer; beyond this they are dropped and
# counted (the first drop is logged at once).  The writer empties the
# deque every flush_interval.  ``install`` sets it to [instrument]
# buffer_size; this is the default of a bare ``SqlListeners``.
MAX_PENDING = 50000

# Records one queued entry can make (its class's fingerprint, itself,
# its transaction): ``process`` stops while the buffer has less room.
ROOM = 3

# Attributes this module keeps on SQLAlchemy objects.
ATTR_T0 = '_instrument_t0'  # ExecutionContext (or Connection)
ATTR_TXN = '_instrument_txn'  # Connection
# Dialect: (owner, database name, double-quoted strings)
ATTR_DB = '_instrument_db'
ATTR_ERROR = '_instrument_error'  # Connection: failure being handled
# On the exception of a failed statement (and of a failed COMMIT):
# (statement text, database, double-quoted strings), which
# ``instrument.targets.sqlalchemy.retries`` reads to name the query
# class of a retry.
ATTR_SQL = '_instrument_sql'

# Transaction state (a list, on the Connection while it is open):
# perf_ns at begin, database, attribution tuple at begin (parent, req,
# greq, inst, svc, host, call), then filled in by the writer: span id,
# statements seen; then the Connection, until the transaction's end
# (the timed COMMIT/ROLLBACK clears its attribute through it, and puts
# ``ENDED`` in its place: the transaction stays on the pool connection
# for the pool's reset that may follow, which the writer folds into the
# transaction's record); last, the writer's record of the transaction
# while it waits for that reset (``_Held``).
T_T0, T_DB, T_ATTR, T_SPAN, T_COUNT, T_CONN, T_HELD = range(7)
ENDED = 'ended'
# (SQLAlchemy 2.0) ``T_CONN`` of a transaction begun by a statement
# that a ``begin`` listener ran before the dialect's ``do_begin``
# (oslo.db's ``BEGIN`` on sqlite): ``do_begin`` takes it over.
BEGUN = 'begun'
# Positions in an attribution tuple: those of the recorder's frame.
A_PARENT, A_REQ, A_GREQ, A_INST, A_SVC, A_HOST, A_CALL = range(7)

# Entry kinds and layout: (kind, t0, t1, statement, txn, frame, rows,
# many, err, disconnect, outcome or, for a statement, its dialect: not
# its Connection, which would live on, a large object for the garbage
# collector to look through, until the writer's next pass).
K_STMT = 0
K_END = 1  # COMMIT/ROLLBACK round trip, then the transaction
K_TXN = 2  # the transaction only (no round trip happened)
# A statement outside the engine's events: the pool's reset-on-return,
# a connection's set-up; its last item is (kind, dialect or database).
K_SIDE = 3

ST_OK = schema.ST_OK
ST_ERROR = schema.ST_ERROR

_perf_ns = time.perf_counter_ns
_current_frame = recorder_mod.current_frame
# The pool's proxy of a DBAPI connection: what a Connection's and the
# pool's COMMIT/ROLLBACK pass to the dialect.
_FAIRY = sqlalchemy.pool.base._ConnectionFairy

# The error of a queued failure is a list, [error tuple, disconnect,
# settled], that the handle_error listeners complete; it is also on the
# Connection (ATTR_ERROR) until the late listener has seen it.
E_ERR, E_DISCONNECT, E_SETTLED = range(3)
# How long the writer waits for oslo.db's translation of a failure.
SETTLE_NS = 2 * 1000 * 1000 * 1000
# How long the record of an ended transaction waits for the pool's
# reset of its connection, to carry it (``schema.ATTR_RESET``); past
# this (or at removal) it is written without, and a later reset is a
# record (or aggregate) of its own, as any reset is.
HOLD_NS = 100 * 1000 * 1000
# Fold a short transaction's round trips into its record (False: the
# records of the older shape, one per round trip; tests compare them).
FOLD = True

_LIVE = weakref.WeakSet()

# ``handle_error`` is a dialect event from SQLAlchemy 2.0 on; in 1.4 (the
# SQLAlchemy of nova 29, 2024.1) it is an engine event, and oslo.db
# registers its exception filter on the engine in both.  The late
# listener goes where oslo.db's is, after it.
DIALECT_HANDLE_ERROR = not sqlalchemy.__version__.startswith('1.')
# SQLAlchemy 2.0: no engine (``ConnectionEvents``) listener at all.  A
# class-level one sets ``Engine._has_events`` for every engine of the
# process, whose Connections then take SQLAlchemy's event paths at
# every statement and transaction; the statements are timed by the
# adopted dialect's ``do_execute``/``do_executemany``/
# ``do_execute_no_params`` instead, the transaction's start by its
# ``do_begin`` (its state on the pool connection only), both error
# listeners are the dialect's.  1.4 (nova 29) keeps the engine
# listeners: its non-future engines run statements without a ``begin``.
DIALECT_EXEC = DIALECT_HANDLE_ERROR


def engine_connect_listener(fn):
    """``fn(conn)`` as an ``engine_connect`` listener of this
    SQLAlchemy: 1.4 passes ``(conn, branch)``, 2.0 ``(conn)`` (and warns
    about listeners that take two)."""
    if DIALECT_HANDLE_ERROR:
        return fn

    def engine_connect(conn, branch):
        return fn(conn)

    return engine_connect


def _after_fork_in_child() -> None:
    for listeners in list(_LIVE):
        listeners.reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


# The database name of an engine URL (``names``; read here by the pool
# taps, and replaced there by tests).
database_name = names.database_name


def double_quoted_strings(dialect) -> bool:
    """Is ``"x"`` a string literal on this dialect (MySQL/MariaDB unless
    the server runs with ANSI_QUOTES, which the dialect detected)?"""
    if getattr(dialect, 'name', None) not in ('mysql', 'mariadb'):
        return False
    preparer = getattr(dialect, 'identifier_preparer', None)
    return getattr(preparer, 'initial_quote', '`') != '"'


# Attribution outside any instrumented call: no request.  oslo.context's
# thread-local "current" context is not used here: nova's periodic tasks
# (admin contexts do not update the store) and threads spawned from a
# request inherit a stale one, which would charge their SQL to a request
# that ended long ago.
NO_FRAME = (None, None, None, None, None, None, None)


class _NoBuffer:
    """Stands in for a buffer without a writer: none to start."""

    writer = 'none'

    def start(self) -> None:
        pass


_NO_BUFFER = _NoBuffer()


class SqlListeners:
    """The engine listeners of one ``install``; ``remove`` undoes them."""

    def __init__(
        self,
        recorder,
        aggregator,
        memo=None,
        slow_query_threshold_ms: float = 0.0,
        max_pending: int = MAX_PENDING,
        patcher=None,
    ) -> None:
        """``patcher`` (``instrument.patching.patcher.Patcher``) applies the
        listeners and replacements (one of its own when None); its
        points are undone by ``remove``."""
        self.recorder = recorder
        self.patcher = (
            patcher
            if patcher is not None
            else patcher_mod.Patcher([], recorder, 'SQLAlchemy')
        )
        self.aggregator = aggregator
        self.memo = memo if memo is not None else fingerprint.Memo()
        self.slow_ns = int(slow_query_threshold_ms * 1000000)
        # Every statement written in detail: set by ``process``.
        self._every = False
        self.max_pending = max_pending
        self.pending = collections.deque()
        self.dropped = 0
        self._reported_dropped = 0
        self._starved = False
        # The buffer writes the sql.dropped records (add_drop_source):
        # that buffer while installed; True once it did.
        self._drops_source_of = None
        self._drops_by_buffer = False
        self.faults = faults_mod.Faults(
            'the SQL listeners', what='the statement is unaffected'
        )
        self._adopted = weakref.WeakKeyDictionary()
        # Dialects where "x" is a string (MySQL without ANSI_QUOTES).
        self._dq_strings = weakref.WeakKeyDictionary()
        self._adopt_lock = threading.Lock()
        # The classes of a transaction's COMMIT and ROLLBACK, by its
        # outcome, and of the pool's reset, by its statement (writer).
        self._end_classes: dict = {}
        # Ended transactions whose record waits for the pool's reset
        # (writer; ``T_HELD``).
        self._held: list = []
        self.connect_taps = connect_mod.ConnectTaps(
            self._queue_setup, self.faults
        )
        self._pool_events = []
        self._process_lock = threading.Lock()
        self._events = []
        self._points: list = []
        self._installed = False
        self._build()
        _LIVE.add(self)

    def reset(self) -> None:
        """In a forked child: the parent writes what it had queued; the
        child announces its own fingerprints."""
        self.pending.clear()
        self.dropped = 0
        self._reported_dropped = 0
        self._starved = False
        self._process_lock = threading.Lock()
        self.memo.clear()
        self._end_classes.clear()
        self._held = []
        self.connect_taps.reset()

    # -- lifecycle ---------------------------------------------------------

    def points(self) -> list:
        """Every place listened to or replaced, as patch points."""
        self._events = (
            []
            if DIALECT_EXEC
            else [
                (
                    'before_cursor_execute',
                    self.before_cursor_execute,
                    {'retval': True},
                ),
                ('after_cursor_execute', self.after_cursor_execute, {}),
                ('begin', self.on_begin, {}),
                ('handle_error', self.early_error, {}),
            ]
        )
        if not DIALECT_HANDLE_ERROR:
            # SQLAlchemy 1.4: a Connection of a non-future engine runs
            # statements without a transaction (no ``begin``); adopt
            # at each Connection, as before 2.0.
            self._events.append(
                ('engine_connect', self.on_engine_connect_14, {})
            )
        taps = self.connect_taps
        # Class-level pool listeners run before those of the engine's
        # pool (the dialect's on-connect, oslo.db's): insert=True puts
        # them before other class-level ones too.
        self._pool_events = [
            ('first_connect', taps.on_connect, {'insert': True}),
            ('connect', taps.on_connect, {'insert': True}),
            ('checkout', taps.on_checkout, {'insert': True}),
            ('invalidate', self.on_invalidate, {}),
        ]
        listen = points_mod.listen
        replace = points_mod.replace
        return (
            [listen(*ENGINE, name, fn, **kw) for name, fn, kw in self._events]
            + [
                listen(*POOL, name, fn, **kw)
                for name, fn, kw in self._pool_events
            ]
            + taps.points()
            + [replace(*ENGINE_CREATED, self._adopting)]
            + [
                # on each dialect adopted (see _adopt)
                listen(
                    *DIALECT,
                    'handle_error',
                    self.handle_error,
                    per_object=True,
                ),
                replace(
                    DIALECT[0],
                    DIALECT[1] + '.do_commit',
                    self._end_timer(OUTCOME_COMMIT),
                    per_object=True,
                ),
                replace(
                    DIALECT[0],
                    DIALECT[1] + '.do_rollback',
                    self._end_timer(OUTCOME_ROLLBACK),
                    per_object=True,
                ),
            ]
            + (self._dialect_points() if DIALECT_EXEC else [])
        )

    def _dialect_points(self) -> list:
        """SQLAlchemy 2.0: what takes the engine listeners' place on
        each adopted dialect (``DIALECT_EXEC``)."""
        replace = points_mod.replace

        def timer(build):
            def factory(original, state, dialect):
                return build(original, dialect)

            return factory

        return [
            # class level: runs before every listener of a dialect
            # (oslo.db's filter); sets ``Dialect._has_events``, not the
            # engine's
            points_mod.listen(
                *EARLY_DIALECT, 'handle_error', self.early_error
            ),
            replace(
                DIALECT[0],
                DIALECT[1] + '.do_begin',
                timer(self._timed_begin),
                per_object=True,
            ),
            replace(
                DIALECT[0],
                DIALECT[1] + '.do_execute',
                timer(self._timed_execute),
                per_object=True,
            ),
            replace(
                DIALECT[0],
                DIALECT[1] + '.do_executemany',
                timer(self._timed_executemany),
                per_object=True,
            ),
            replace(
                DIALECT[0],
                DIALECT[1] + '.do_execute_no_params',
                timer(self._timed_no_params),
                per_object=True,
            ),
        ]

    # -- SQLAlchemy 2.0: the dialect's statements and begin -------------

    def _timed_begin(self, original, dialect):
        """``dialect.do_begin(pool connection)``: the transaction's
        state goes on the pool connection, where its statements and
        its COMMIT/ROLLBACK find it (``on_begin``'s job under 1.4);
        the dialect's late adoption at its first transaction."""
        faults = self.faults
        perf_ns = _perf_ns
        current_frame = _current_frame
        fairy_cls = _FAIRY
        stale = self._stale
        adopt = self._adopt_dialect
        listeners = self

        def do_begin(dbapi_connection):
            try:
                if dbapi_connection.__class__ is fairy_cls:
                    fairy_dict = dbapi_connection.__dict__
                    txn = fairy_dict.get(ATTR_TXN)
                    if txn is not None and txn[T_CONN] is not ENDED:
                        if txn[T_CONN] is BEGUN:
                            # begun by a statement of a begin listener
                            txn[T_CONN] = None
                            return original(dbapi_connection)
                        stale(txn)
                    owned = dialect.__dict__.get(ATTR_DB)
                    db = (
                        owned[1]
                        if owned is not None and owned[0] is listeners
                        else adopt(dialect)
                    )
                    frame = current_frame()
                    fairy_dict[ATTR_TXN] = [
                        perf_ns(),
                        db,
                        NO_FRAME if frame is None else frame,
                        None,
                        0,
                        None,
                        None,
                    ]
            except Exception as exc:
                faults(exc)
            return original(dbapi_connection)

        do_begin.__wrapped__ = original  # type: ignore[attr-defined]
        return do_begin

    def _begun(self, context, t0: int):
        """(SQLAlchemy 2.0) The open transaction of a statement that
        found none on its pool connection: one that a ``begin``
        listener runs before the dialect's ``do_begin`` (oslo.db's
        ``BEGIN`` on sqlite) begins it, at its start (``BEGUN``);
        else None (a statement outside any transaction); False for a
        statement not timed: the dialect's first connect's, on a
        Connection of the raw DBAPI connection that joins no engine
        events (the connect taps see them, kind ``CONNECT``)."""
        fairy = context._dbapi_connection
        if fairy.__class__ is not _FAIRY:
            return False
        if not context.root_connection.__dict__.get('_Connection__in_begin'):
            return None
        dialect = context.dialect
        owned = dialect.__dict__.get(ATTR_DB)
        db = (
            owned[1]
            if owned is not None and owned[0] is self
            else self._adopt_dialect(dialect)
        )
        frame = _current_frame()
        txn = [t0, db, NO_FRAME if frame is None else frame, None, 0, BEGUN]
        txn.append(None)
        fairy.__dict__[ATTR_TXN] = txn
        return txn

    def _statement_timer(self, original, dialect, kind: int):
        """``dialect.do_execute`` (``kind`` 0), ``do_executemany`` (1)
        or ``do_execute_no_params`` (2): the statement timed around the
        cursor's execute, as the ``before_cursor_execute`` and
        ``after_cursor_execute`` listeners of 1.4 do; a failure is
        queued by the error listeners, with the start this leaves on
        the execution context.

        The two timers below differ only in their signature and their
        ``many``; the steps after the call are written in each, not
        called: a call per statement is what this path was made to
        save (``doc/source/cost.rst``, "No engine listener")."""
        pending = self.pending
        append = pending.append
        max_pending = self.max_pending
        buf = self._buffer()
        current_frame = _current_frame
        perf_ns = _perf_ns
        faults = self.faults
        drop = self.drop
        begun = self._begun

        # (inline in both: a Python call less a statement)
        if kind == 2:

            def do_execute_no_params(cursor, statement, context=None):
                try:
                    t0 = perf_ns()
                except Exception as exc:
                    faults(exc)
                    return original(cursor, statement, context)
                try:
                    result = original(cursor, statement, context)
                except BaseException:
                    if context is not None:
                        context._instrument_t0 = t0
                    raise
                try:
                    t1 = perf_ns()
                    if len(pending) < max_pending:
                        if context is not None:
                            txn = getattr(
                                context._dbapi_connection, ATTR_TXN, None
                            )
                            if txn is None:
                                txn = begun(context, t0)
                                if txn is False:
                                    return result
                            elif txn[T_CONN] is ENDED:
                                txn = None
                            many = context.executemany
                        else:
                            txn = None
                            many = False
                        append(
                            (
                                K_STMT,
                                t0,
                                t1,
                                statement,
                                txn,
                                current_frame(),
                                cursor.rowcount,
                                many,
                                None,
                                False,
                                dialect,
                            )
                        )
                        if buf.writer is None:
                            buf.start()
                    else:
                        drop()
                except Exception as exc:
                    faults(exc)
                return result

            timed: typing.Callable = do_execute_no_params
        else:
            many_always = kind == 1

            def do_execute(cursor, statement, parameters, context=None):
                try:
                    t0 = perf_ns()
                except Exception as exc:
                    faults(exc)
                    return original(cursor, statement, parameters, context)
                try:
                    result = original(cursor, statement, parameters, context)
                except BaseException:
                    if context is not None:
                        context._instrument_t0 = t0
                    raise
                try:
                    t1 = perf_ns()
                    if len(pending) < max_pending:
                        if context is not None:
                            txn = getattr(
                                context._dbapi_connection, ATTR_TXN, None
                            )
                            if txn is None:
                                txn = begun(context, t0)
                                if txn is False:
                                    return result
                            elif txn[T_CONN] is ENDED:
                                txn = None
                            many = many_always or context.executemany
                        else:
                            txn = None
                            many = many_always
                        append(
                            (
                                K_STMT,
                                t0,
                                t1,
                                statement,
                                txn,
                                current_frame(),
                                cursor.rowcount,
                                many,
                                None,
                                False,
                                dialect,
                            )
                        )
                        if buf.writer is None:
                            buf.start()
                    else:
                        drop()
                except Exception as exc:
                    faults(exc)
                return result

            timed = do_execute
        timed.__wrapped__ = original  # type: ignore[attr-defined]
        return timed

    def _timed_execute(self, original, dialect):
        return self._statement_timer(original, dialect, 0)

    def _timed_executemany(self, original, dialect):
        return self._statement_timer(original, dialect, 1)

    def _timed_no_params(self, original, dialect):
        return self._statement_timer(original, dialect, 2)

    def _end_timer(self, outcome: str):
        def factory(original, state, dialect):
            return self._timed_end(original, outcome, dialect)

        return factory

    def install(self) -> None:
        """Listen on every engine, existing and future (idempotent)."""
        if self._installed:
            return
        self._installed = True
        self.connect_taps.install()
        self._points = self.points()
        self.patcher.add_points(self._points)
        self.patcher.apply()
        if DIALECT_EXEC:
            self._adopt_existing()
        buf = self._buffer()
        add_drop_source = getattr(buf, 'add_drop_source', None)
        if add_drop_source is not None:
            add_drop_source(self)
            self._drops_source_of = buf
            self._drops_by_buffer = True

    def remove(self) -> None:
        """Detach everything this object attached (idempotent)."""
        if not self._installed:
            return
        self._installed = False
        self.patcher.discard(p.name for p in self._points)
        self.connect_taps.remove()
        with self._adopt_lock:
            for dialect in list(self._adopted.keys()):
                self._release(dialect)
            self._adopted.clear()
        buf, self._drops_source_of = self._drops_source_of, None
        if buf is not None:
            # its last count is still written, at the next drain
            buf.remove_drop_source(self)

    # -- engines -----------------------------------------------------------

    def adopted(self) -> int:
        """Number of dialects (engines) adopted so far."""
        return len(self._adopted)

    def adopt(self, engine, late: bool = True) -> str:
        """Adopt an engine, in two steps; its database name.

        When it is made (``late`` False): cache its database name and
        time its dialect's COMMIT/ROLLBACK, so that the pool's reset
        of a Connection that never begins a transaction is timed too.
        At its first transaction (``begin``; both steps at once for an
        engine made before ``install``): add the late error listener,
        which must come after oslo.db's exception filter (registered
        once ``create_engine`` has returned), and read the dialect's
        quoting (known once it has connected)."""
        dialect = engine.dialect
        with self._adopt_lock:
            db = self._adopted.get(dialect)
            if db is None:
                db = database_name(engine.url)
                patch = self.patcher.patch_object
                patch(POINT_COMMIT, dialect)
                patch(POINT_ROLLBACK, dialect)
                if DIALECT_EXEC:
                    patch(POINT_BEGIN, dialect)
                    patch(POINT_EXECUTE, dialect)
                    patch(POINT_EXECUTEMANY, dialect)
                    patch(POINT_NO_PARAMS, dialect)
                self._adopted[dialect] = db
            if not late:
                return db
            return self._adopt_late(
                dialect, db, dialect if DIALECT_HANDLE_ERROR else engine
            )

    def _adopt_late(self, dialect, db: str, error_target) -> str:
        """The second step of ``adopt`` (under its lock): the late
        error listener (on ``error_target``) and the quoting."""
        owned = getattr(dialect, ATTR_DB, None)
        if owned is not None and owned[0] is self:
            return db
        dq = self._dq_strings[dialect] = double_quoted_strings(dialect)
        self.patcher.patch_object(POINT_LATE_ERROR, error_target)
        setattr(dialect, ATTR_DB, (self, db, dq))
        return db

    def _adopt_dialect(self, dialect) -> str:
        """(SQLAlchemy 2.0) The second step of ``adopt`` at the first
        ``do_begin`` of a dialect whose engine was adopted when made;
        its database name."""
        with self._adopt_lock:
            db = self._adopted.get(dialect)
            if db is None:  # removed meanwhile
                return ''
            return self._adopt_late(dialect, db, dialect)

    def _adopt_existing(self) -> None:
        """(SQLAlchemy 2.0) Adopt the engines made before ``install``
        (no engine event would show them), once."""
        for engine in names.existing_engines():
            try:
                self.adopt(engine)
            except Exception as exc:
                self.faults(exc)

    def _adopting(self, original, state=None, owner=None):
        """``Dialect.engine_created`` (a classmethod, which
        ``create_engine`` calls once the engine is made, before any
        Connection) that adopts the engine: nothing per Connection.
        Guarded: the engine is returned whatever happens."""
        func = original.__func__
        adopt = self.adopt
        faults = self.faults

        def engine_created(cls, engine):
            func(cls, engine)
            if state is None or state.active:
                try:
                    adopt(engine, late=False)
                except Exception as exc:
                    faults(exc)

        engine_created.__wrapped__ = func  # type: ignore[attr-defined]
        engine_created.__qualname__ = getattr(
            func, '__qualname__', 'engine_created'
        )
        return classmethod(engine_created)

    def _release(self, dialect) -> None:
        # (its listener and timers: the patcher's remove())
        if vars(dialect).get(ATTR_DB, (None,))[0] is self:
            delattr(dialect, ATTR_DB)

    # -- the hot path --------------------------------------------------------

    def _build(self) -> None:
        """Make the per-statement listeners as closures over locals."""
        pending = self.pending
        append = pending.append
        max_pending = self.max_pending
        # Queuing starts the writer: a forked child that only runs SQL
        # has no other event that would.
        buf = self._buffer()
        current_frame = recorder_mod.current_frame
        perf_ns = _perf_ns
        faults = self.faults
        listeners = self

        # Both are guarded from their first line: whatever fails in
        # them, the statement runs and its result is the caller's.
        def before_cursor_execute(
            conn, cursor, statement, parameters, context, executemany
        ):
            try:
                if context is not None:
                    context._instrument_t0 = perf_ns()
                else:
                    conn._instrument_t0 = perf_ns()
            except Exception as exc:
                faults(exc)
            return statement, parameters

        def after_cursor_execute(
            conn, cursor, statement, parameters, context, executemany
        ):
            try:
                t1 = perf_ns()
                if len(pending) < max_pending:
                    append(
                        (
                            K_STMT,
                            context._instrument_t0
                            if context is not None
                            else conn._instrument_t0,
                            t1,
                            statement,
                            getattr(conn, ATTR_TXN, None),
                            current_frame(),
                            cursor.rowcount,
                            executemany,
                            None,
                            False,
                            conn.dialect,
                        )
                    )
                    if buf.writer is None:
                        buf.start()
                else:
                    listeners.drop()
            except AttributeError:
                # Its start was not seen (installed meanwhile): not timed.
                pass
            except Exception as exc:
                faults(exc)

        def queue(entry: tuple) -> None:
            if len(pending) < max_pending:
                append(entry)
                if buf.writer is None:
                    buf.start()
            else:
                listeners.drop()

        self.before_cursor_execute = before_cursor_execute
        self.after_cursor_execute = after_cursor_execute
        self._queue = queue

    def _buffer(self):
        """The recorder's buffer (what ``start()``s the writer)."""
        buf = getattr(self.recorder, 'buffer', None)
        return buf if getattr(buf, 'start', None) is not None else _NO_BUFFER

    def drop(self) -> None:
        """Count one entry lost to a full queue; the first is reported
        at once, from here (through the hub or the watchdog thread:
        the writer may be the one stuck)."""
        self.dropped += 1
        if self.dropped == 1:
            threads.defer(
                _DEFERRED_LOG.warning,
                'instrument: SQL statements are being dropped: %d wait for '
                'the writer ([instrument] buffer_size), which does not keep '
                'up or is stuck; counted in sql.dropped records, the count '
                'logged by the writer and at exit',
                self.max_pending,
            )

    # -- what the buffer asks of a drop source (add_drop_source) ----------

    drops_cause = 'sql_queue'
    drops_event = EV_DROPPED
    drops_unit = 'SQL statements waiting to become records'
    drops_advice = (
        'the writer does not keep up with the statements of '
        'the process: raise [instrument] buffer_size (every '
        'statement is queued, whatever slow_query_threshold)'
    )

    def drops_what(self) -> str:
        return (
            'SQL statements dropped (more than %d waited for the '
            'writer)' % self.max_pending
        )

    def waiting(self) -> int:
        """Statements queued for the writer, not yet records."""
        return len(self.pending)

    def _queue_setup(
        self, t0: int, t1: int, statement, frame, error, db: str
    ) -> None:
        """A connection's set-up statement (from its tap)."""
        self._queue(
            (
                K_SIDE,
                t0,
                t1,
                statement,
                None,
                frame,
                None,
                False,
                error,
                False,
                (fingerprint.KIND_CONNECT, db),
            )
        )

    @staticmethod
    def _attribution() -> tuple:
        """(parent, req, greq, inst, svc, host, call) of the current
        call; all None outside any span (the writer fills in the
        process's svc and host)."""
        frame = recorder_mod.current_frame()
        return NO_FRAME if frame is None else frame

    def early_error(self, ctx) -> None:
        """Runs before oslo.db's filter (class level): queues the failed
        statement with the exception SQLAlchemy is about to raise."""
        try:
            t1 = _perf_ns()
            conn = ctx.connection
            if conn is None:
                return None
            raw = ctx.sqlalchemy_exception or ctx.original_exception
            statement = ctx.statement
            if statement is None:
                # A failed COMMIT/ROLLBACK, queued by the timer: name the
                # exception the caller gets if no later handler runs.
                error = vars(conn).get(ATTR_ERROR)
                if error is None and DIALECT_EXEC:
                    # (2.0) the timer left it on the pool connection
                    fairy = vars(conn).get('_dbapi_connection')
                    if fairy is not None:
                        error = vars(fairy).pop(ATTR_ERROR, None)
                    if error is not None:
                        conn._instrument_error = error
                if error is not None:
                    error[E_ERR] = tracing.error_of(raw)
                return None
            context = ctx.execution_context
            if context is not None:
                t0 = getattr(context, ATTR_T0, None)
                many = bool(getattr(context, 'executemany', False))
            else:
                t0 = vars(conn).pop(ATTR_T0, None)
                many = False
            if DIALECT_EXEC:
                txn = getattr(
                    vars(conn).get('_dbapi_connection'), ATTR_TXN, None
                )
                if txn is not None and txn[T_CONN] is ENDED:
                    txn = None
            else:
                txn = getattr(conn, ATTR_TXN, None)
            error = [tracing.error_of(raw), bool(ctx.is_disconnect), False]
            conn._instrument_error = error
            self._tag(raw, statement, conn.dialect)
            self._queue(
                (
                    K_STMT,
                    t0,
                    t1,
                    statement,
                    txn,
                    recorder_mod.current_frame(),
                    None,
                    many,
                    error,
                    False,
                    conn.dialect,
                )
            )
        except Exception as fault:
            self.faults(fault)
        return None

    def _tag(self, exc, statement, dialect) -> None:
        """Name the failed statement on its exception (``ATTR_SQL``):
        a retry of the call it fails
        (``instrument.targets.sqlalchemy.retries``) is of its query
        class.  The failure path only."""
        owned = getattr(dialect, ATTR_DB, None)
        if owned is not None and owned[0] is self:
            db, dq = owned[1], owned[2]
        else:
            db = self._adopted.get(dialect) or ''
            dq = self._dq_strings.get(dialect, False)
        try:
            setattr(exc, ATTR_SQL, (statement, db, dq))
        except (AttributeError, TypeError):  # an exception without dict
            pass

    def handle_error(self, ctx) -> None:
        """Runs after oslo.db's filter: settles the queued failure with
        the translated exception."""
        try:
            conn = ctx.connection
            if conn is None:
                return None
            error = vars(conn).pop(ATTR_ERROR, None)
            if error is None:
                return None
            # chained_exception: what an earlier handler (oslo.db's
            # filter) turned the error into; set only when one did.
            exc = getattr(ctx, 'chained_exception', None)
            if exc is not None:
                error[E_ERR] = tracing.error_of(exc)
            error[E_DISCONNECT] = bool(ctx.is_disconnect)
            error[E_SETTLED] = True
        except Exception as fault:
            self.faults(fault)
        return None

    def on_engine_connect_14(self, conn, branch) -> None:
        """SQLAlchemy 1.4's ``engine_connect``: a Connection is made;
        adopt its engine now, the late error listener included."""
        try:
            owned = getattr(conn.dialect, ATTR_DB, None)
            if owned is None or owned[0] is not self:
                self.adopt(conn.engine)
        except Exception as exc:
            self.faults(exc)

    # -- transactions ------------------------------------------------------

    def on_begin(self, conn) -> None:
        """The transaction's state goes on the Connection (for its
        statements) and on its pool connection (for the timed
        COMMIT/ROLLBACK, which gets only that)."""
        try:
            fairy = conn._dbapi_connection
            owned = getattr(conn.dialect, ATTR_DB, None)
            db = (
                owned[1]
                if owned is not None and owned[0] is self
                else self.adopt(conn.engine)
            )
            frame = _current_frame()
            txn = [
                _perf_ns(),
                db,
                NO_FRAME if frame is None else frame,
                None,
                0,
                conn,
                None,
            ]
            stale = conn.__dict__.get(ATTR_TXN)
            if stale is not None:
                self._stale(stale)
            conn._instrument_txn = txn
            if fairy is not None:
                fairy._instrument_txn = txn
        except Exception as exc:
            self.faults(exc)

    def on_invalidate(
        self, dbapi_connection, connection_record, exception=None
    ) -> None:
        """Pool ``invalidate``: the connection is discarded (a lost
        connection, ``Connection.invalidate()``), and with it its open
        transaction, which the server rolls back: no COMMIT/ROLLBACK
        round trip follows, the transaction ends here."""
        try:
            ref = getattr(connection_record, 'fairy_ref', None)
            fairy = ref() if ref is not None else None
            if fairy is None:
                return
            txn = fairy.__dict__.pop(ATTR_TXN, None)
            if txn is not None and txn[T_CONN] is not ENDED:
                self._stale(txn)
        except Exception as exc:
            self.faults(exc)

    def _stale(self, txn: list) -> None:
        """Queue a transaction that ends without a round trip."""
        conn = txn[T_CONN]
        txn[T_CONN] = None
        if (
            conn is not None
            and conn.__class__ is not str  # BEGUN (2.0)
            and conn.__dict__.get(ATTR_TXN) is txn
        ):
            conn._instrument_txn = None
        self._queue(
            (
                K_TXN,
                None,
                _perf_ns(),
                None,
                txn,
                None,
                None,
                False,
                None,
                False,
                OUTCOME_ROLLBACK,
            )
        )

    def _timed_end(self, original, outcome: str, dialect=None):
        """``dialect.do_commit``/``do_rollback``, one hook for both
        round trips that reach it with a pool connection: a
        transaction's COMMIT/ROLLBACK (its state is on the pool
        connection, put there by ``on_begin``), else the pool's
        reset-on-return (a ``POOL_RESET`` statement of its own: the
        pool calls it only when the connection's transaction was not
        ended already).  Anything else (the raw connection of a
        dialect's first connect, which the connect taps see) runs
        untimed."""
        queue = self._queue
        # (the success path queues inline: one Python call less)
        pending = self.pending
        append = pending.append
        max_pending = self.max_pending
        buf = self._buffer()
        drop = self.drop
        faults = self.faults
        perf_ns = _perf_ns
        current_frame = _current_frame
        fairy_cls = _FAIRY
        error_of = tracing.error_of
        reset_kind = (fingerprint.KIND_POOL_RESET, dialect)
        reset_statement = 'COMMIT' if outcome == OUTCOME_COMMIT else 'ROLLBACK'

        def timed(dbapi_connection, *args, **kwargs):
            if dbapi_connection.__class__ is not fairy_cls:
                return original(dbapi_connection, *args, **kwargs)
            t0 = txn = frame = conn = ended = None
            try:
                fairy_dict = dbapi_connection.__dict__
                txn = fairy_dict.get(ATTR_TXN)
                if txn is not None and txn[T_CONN] is not ENDED:
                    # its COMMIT/ROLLBACK: the transaction stays on the
                    # pool connection, ended, for the reset that follows
                    conn = txn[T_CONN]
                    txn[T_CONN] = ENDED
                    if conn is not None:
                        if conn.__class__ is str:  # BEGUN (2.0)
                            conn = None
                        elif conn.__dict__.get(ATTR_TXN) is txn:
                            conn._instrument_txn = None
                else:
                    # the pool's reset (of the transaction that ended on
                    # it, if any: the writer may fold it into its record)
                    if txn is not None:
                        del fairy_dict[ATTR_TXN]
                        ended, txn = txn, None
                    frame = current_frame()
                t0 = perf_ns()
            except Exception as fault:
                faults(fault)
            if t0 is None:
                # outside the except block: nova's exception, if any, is
                # not chained to the fault
                return original(dbapi_connection, *args, **kwargs)
            try:
                result = original(dbapi_connection, *args, **kwargs)
            except BaseException as exc:
                try:
                    t1 = perf_ns()
                    if txn is None:
                        queue(
                            (
                                K_SIDE,
                                t0,
                                t1,
                                reset_statement,
                                ended,
                                frame,
                                None,
                                False,
                                [error_of(exc), False, True],
                                False,
                                reset_kind,
                            )
                        )
                    else:
                        error = [error_of(exc), False, False]
                        if conn is not None:
                            conn._instrument_error = error
                        elif DIALECT_EXEC:
                            # (2.0: no Connection here) the early error
                            # listener takes it from the pool connection
                            fairy_dict[ATTR_ERROR] = error
                        setattr(
                            exc, ATTR_SQL, (reset_statement, txn[T_DB], False)
                        )
                        queue(
                            (
                                K_END,
                                t0,
                                t1,
                                None,
                                txn,
                                None,
                                None,
                                False,
                                error,
                                False,
                                outcome,
                            )
                        )
                except Exception as fault:
                    faults(fault)
                raise
            try:
                t1 = perf_ns()
                if len(pending) >= max_pending:
                    drop()
                elif txn is None:
                    append(
                        (
                            K_SIDE,
                            t0,
                            t1,
                            reset_statement,
                            ended,
                            frame,
                            None,
                            False,
                            None,
                            False,
                            reset_kind,
                        )
                    )
                else:
                    append(
                        (
                            K_END,
                            t0,
                            t1,
                            None,
                            txn,
                            None,
                            None,
                            False,
                            None,
                            False,
                            outcome,
                        )
                    )
                if buf.writer is None:
                    buf.start()
            except Exception as fault:
                faults(fault)
            return result

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        return timed

    # -- the writer side -----------------------------------------------------

    def _query_class(self, statement: str, dq_strings: bool = False):
        """Memoised class of a statement; announces a new one."""
        qclass = self.memo.get(fingerprint.memo_key(statement, dq_strings))
        if qclass is None:
            qclass, new = self.memo.learn(statement, dq_strings)
            if new:
                self.recorder.meta(
                    EV_FINGERPRINT,
                    {
                        schema.ATTR_FP: qclass.qid,
                        schema.ATTR_TEXT: qclass.text,
                        schema.ATTR_KIND: qclass.kind,
                    },
                )
        return qclass

    def process(self, final: bool = False) -> bool:
        """Turn queued entries into records and aggregates.  Runs in the
        buffer's writer thread (and at removal); never on the hot path.

        Stops while the buffer has no room for what an entry makes
        (once at least one entry was processed) and returns True: the
        buffer calls it again in the same drain once its queue is
        written, instead of dropping the records it would make.
        """
        more = False
        with self._process_lock:
            buf = self._buffer()
            queue = getattr(buf, 'queue', None)
            limit = getattr(buf, 'max_records', None)
            if queue is None or limit is None:
                queue, limit = (), 1 << 62
            limit -= ROOM
            self._every = self._all_detail()
            self.aggregator.rollover()
            now = _perf_ns()
            pending = self.pending
            popleft = pending.popleft
            # No room: stop, unless the last call stopped before doing
            # anything (then one entry goes ahead: always progress).
            force = self._starved
            self._starved = False
            processed = 0
            for _ in range(len(pending)):
                if len(queue) > limit and (processed or not force):
                    more = True
                    self._starved = not processed
                    break
                try:
                    entry = popleft()
                except IndexError:  # pragma: no cover - raced a reset
                    break
                error = entry[8]
                if (
                    error is not None
                    and not error[E_SETTLED]
                    and not final
                    and now - entry[2] < SETTLE_NS
                ):
                    # oslo.db's translation may still be on its way;
                    # keep the order: wait for the next round.
                    pending.appendleft(entry)
                    break
                processed += 1
                try:
                    kind = entry[0]
                    if kind == K_STMT:
                        self._statement(entry)
                    elif kind == K_SIDE:
                        if entry[4] is None or not self._fold_reset(entry):
                            self._side_statement(entry)
                    else:
                        self._transaction_end(entry)
                except Exception as exc:
                    self.faults(exc)
            if self._held and not more:
                self._write_held(now, final)
            if not self._drops_by_buffer:
                self._report_dropped()
            if final and not more:
                self.aggregator.rollover(final=True)
        return more

    def _detail(self, dur_ns: int, req, err) -> bool:
        """Is this statement (transaction) written in detail, or
        aggregated?  (Not asked when ``_every`` is: every one is.)"""
        if err is not None:
            return True
        return dur_ns >= self.slow_ns and self.recorder.sampled(req)

    def _all_detail(self) -> bool:
        """Is every statement written in detail (no slow-query
        threshold, every request sampled)?"""
        rate = getattr(self.recorder, 'detail_sample_rate', 0.0)
        return self.slow_ns <= 0 and rate >= 1.0

    def _txn_span(self, txn) -> tuple:
        span = txn[T_SPAN]
        if span is None:
            span = txn[T_SPAN] = recorder_mod.new_span_id()
        return span

    def _statement(self, entry: tuple) -> None:
        (
            _k,
            t0,
            t1,
            statement,
            txn,
            frame,
            rows,
            many,
            error,
            _d,
            dialect,
        ) = entry
        err = disconnect = None
        if error is not None:
            err, disconnect = error[E_ERR], error[E_DISCONNECT]
        if t0 is None:  # failed before it reached the cursor
            t0 = t1
        dur_ns = t1 - t0
        owned = getattr(dialect, ATTR_DB, None)
        if owned is not None and owned[0] is self:
            db, dq = owned[1], owned[2]
        else:  # removed meanwhile
            db = self._adopted.get(dialect) or ''
            dq = self._dq_strings.get(dialect, False)
        qclass = self.memo.get(
            statement if not dq or '"' not in statement else (statement, True)
        )
        if qclass is None:
            qclass = self._query_class(statement, dq)
        if txn is not None:
            txn[T_COUNT] += 1
            db = txn[T_DB]
            attribution = frame if frame is not None else txn[T_ATTR]
        else:
            attribution = frame if frame is not None else NO_FRAME
        parent, req, greq, inst, svc, host, call = attribution
        if rows is not None and rows < 0:
            rows = None
        if not (self._every or self._detail(dur_ns, req, err)):
            self.aggregator.add(
                qclass.qid, db, qclass.kind, call, dur_ns // 1000, rows, False
            )
            return
        self.recorder.complete(
            EV_QUERY,
            t0,
            t1,
            None,
            parent,
            req,
            greq,
            inst,
            svc,
            host,
            ST_OK if err is None else ST_ERROR,
            err,
            _query_attrs(
                qclass.qid,
                db,
                qclass.kind,
                rows,
                many,
                txn[T_SPAN] or self._txn_span(txn)
                if txn is not None
                else None,
                call,
                disconnect,
            ),
        )

    def _source_db(self, source) -> str:
        """The database of a side statement's source: a name, or the
        dialect of the reset's engine."""
        if isinstance(source, str):
            return source
        owned = getattr(source, ATTR_DB, None)
        if owned is not None and owned[0] is self:
            return owned[1]
        return self._adopted.get(source) or ''

    def _side_statement(self, entry: tuple) -> None:
        """A pool reset or a connection's set-up statement: a statement
        of its own kind, outside any transaction, aggregated or written
        like the others."""
        (
            _k,
            t0,
            t1,
            statement,
            _txn,
            frame,
            _r,
            _m,
            error,
            _d,
            (kind, source),
        ) = entry
        err = None
        if error is not None:
            err = error[E_ERR]
        if isinstance(statement, bytes):
            statement = statement.decode('utf-8', 'replace')
        db = self._source_db(source)
        qclass = self._query_class(statement, kind == fingerprint.KIND_CONNECT)
        parent, req, greq, inst, svc, host, call = (
            frame if frame is not None else NO_FRAME
        )
        dur_ns = t1 - t0
        if not (self._every or self._detail(dur_ns, req, err)):
            self.aggregator.add(
                qclass.qid, db, kind, call, dur_ns // 1000, None, False
            )
            return
        self.recorder.complete(
            EV_QUERY,
            t0,
            t1,
            None,
            parent,
            req,
            greq,
            inst,
            svc,
            host,
            ST_OK if err is None else ST_ERROR,
            err,
            _query_attrs(qclass.qid, db, kind, None, False, None, call, False),
        )

    def _transaction_end(self, entry: tuple) -> None:
        """A transaction's end: its COMMIT/ROLLBACK round trip (``K_END``)
        and its ``sql.txn`` record.  A transaction that ended well and
        is written in detail carries its round trip (``ATTR_END``, when
        that is written in detail too) and waits (``T_HELD``, up to
        ``HOLD_NS``) for the pool's reset of its connection, which it
        then carries as well (``_fold_reset``): one record instead of
        three.  Anything else is written as before: a ``sql.query``
        record (or an aggregate) for the round trip, then the
        transaction's."""
        (kind, t0, t1, _s, txn, _f, _r, _m, error, _d, outcome) = entry
        err = disconnect = None
        if error is not None:
            err, disconnect = error[E_ERR], error[E_DISCONNECT]
        parent, req, greq, inst, svc, host, call = txn[T_ATTR]
        recorder = self.recorder
        db = txn[T_DB]
        st = ST_OK if err is None else ST_ERROR
        attrs = {
            schema.ATTR_DB: db,
            schema.ATTR_STATEMENTS: txn[T_COUNT],
            schema.ATTR_OUTCOME: outcome,
            schema.ATTR_CALL: call,
        }
        txn_detail = self._every or self._detail(t1 - txn[T_T0], req, err)
        fold = FOLD and txn_detail and err is None and txn[T_HELD] is None
        if kind == K_END:
            qclass = self._end_classes.get(outcome)
            if qclass is None:
                qclass = self._end_classes[outcome] = self._query_class(
                    'COMMIT' if outcome == OUTCOME_COMMIT else 'ROLLBACK'
                )
            dur_ns = t1 - t0
            if not (self._every or self._detail(dur_ns, req, err)):
                self.aggregator.add(
                    qclass.qid,
                    db,
                    qclass.kind,
                    call,
                    dur_ns // 1000,
                    None,
                    False,
                )
            elif fold:
                off = recorder_mod.wall_offset_ns  # (wall_us, inline)
                attrs[schema.ATTR_END] = [
                    (t0 + off) // 1000 - (txn[T_T0] + off) // 1000,
                    dur_ns // 1000,
                    qclass.qid,
                    qclass.kind,
                ]
            else:
                recorder.complete(
                    EV_QUERY,
                    t0,
                    t1,
                    None,
                    parent,
                    req,
                    greq,
                    inst,
                    svc,
                    host,
                    st,
                    err,
                    _query_attrs(
                        qclass.qid,
                        db,
                        qclass.kind,
                        None,
                        False,
                        txn[T_SPAN] or self._txn_span(txn),
                        call,
                        disconnect,
                    ),
                )
        if not txn_detail:
            return
        if fold:
            txn[T_HELD] = (t1, attrs)
            self._held.append(txn)
            return
        recorder.complete(
            EV_TXN,
            txn[T_T0],
            t1,
            txn[T_SPAN] or self._txn_span(txn),
            parent,
            req,
            greq,
            inst,
            svc,
            host,
            st,
            err,
            attrs,
        )

    def _fold_reset(self, entry: tuple) -> bool:
        """The pool's reset of a connection whose transaction ended on
        it: into that transaction's record, if it waits (``T_HELD``),
        the reset ended well, is written in detail, and has the
        transaction's attribution and database (then its ``sql.query``
        record would differ from the transaction's in nothing but its
        times and class).  False: the reset is a statement of its own
        (the transaction's record is written first)."""
        txn = entry[4]
        held = txn[T_HELD]
        if held is None:
            return False
        frame = entry[5]
        source = entry[10][1]
        if (
            entry[8] is None
            and (NO_FRAME if frame is None else frame) == txn[T_ATTR]
            and self._source_db(source) == txn[T_DB]
        ):
            t0, t1 = entry[1], entry[2]
            dur_ns = t1 - t0
            if self._every or self._detail(dur_ns, txn[T_ATTR][A_REQ], None):
                statement = entry[3]
                qclass = self._end_classes.get(statement)
                if qclass is None:
                    qclass = self._end_classes[statement] = self._query_class(
                        statement
                    )
                off = recorder_mod.wall_offset_ns  # (wall_us, inline)
                held[1][schema.ATTR_RESET] = [
                    (t0 + off) // 1000 - (txn[T_T0] + off) // 1000,
                    dur_ns // 1000,
                    qclass.qid,
                    entry[10][0],
                ]
                self._write_txn(txn)
                return True
        self._write_txn(txn)
        return False

    def _write_txn(self, txn: list) -> None:
        """The record of an ended transaction that waited for its
        connection's reset."""
        held = txn[T_HELD]
        txn[T_HELD] = None
        t1, attrs = held
        parent, req, greq, inst, svc, host, _call = txn[T_ATTR]
        self.recorder.complete(
            EV_TXN,
            txn[T_T0],
            t1,
            txn[T_SPAN] or self._txn_span(txn),
            parent,
            req,
            greq,
            inst,
            svc,
            host,
            ST_OK,
            None,
            attrs,
        )

    def flush_held(self) -> None:
        """Write the transactions waiting for a reset now (tests)."""
        with self._process_lock:
            self._write_held(0, True)

    def _write_held(self, now: int, final: bool) -> None:
        """Write the transactions that waited ``HOLD_NS`` for a reset
        (all of them when ``final``)."""
        keep = []
        for txn in self._held:
            held = txn[T_HELD]
            if held is None:
                continue
            if final or now - held[0] > HOLD_NS:
                try:
                    self._write_txn(txn)
                except Exception as exc:
                    self.faults(exc)
            else:
                keep.append(txn)
        self._held = keep

    def _report_dropped(self) -> None:
        dropped = self.dropped
        if dropped == self._reported_dropped:
            return
        self._reported_dropped = dropped
        self.recorder.counter(EV_DROPPED, {schema.ATTR_COUNT: dropped})


def _query_attrs(
    qid: str, db: str, kind: str, rows, many, txn_span, call, disconnect
) -> dict:
    """The attrs of a ``sql.query`` record."""
    attrs = {
        schema.ATTR_FP: qid,
        schema.ATTR_DB: db,
        schema.ATTR_KIND: kind,
        schema.ATTR_ROWS: rows,
        schema.ATTR_MANY: bool(many),
        schema.ATTR_TXN: record.span_hex(txn_span)
        if txn_span is not None
        else None,
        schema.ATTR_CALL: call,
    }
    if disconnect:
        attrs[schema.ATTR_DISCONNECT] = True
    return attrs
