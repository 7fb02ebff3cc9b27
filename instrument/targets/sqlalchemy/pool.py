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
"""The DB connection pool: checkout waits, connections made and lost.

* ``db.pool.wait``: a checkout from a ``QueuePool`` that had to wait
  for a connection to come back (every connection the pool may open,
  ``pool_size`` + ``max_overflow``, is open and none is idle).  Timed
  around ``QueuePool._do_get``, the one place SQLAlchemy (1.4 and 2.0)
  blocks on its queue; SQLAlchemy has no event before a checkout.  A
  checkout that finds a connection, or may open one, costs two
  attribute reads and is not recorded.  A checkout that times out is
  written with status ``error`` (``sqlalchemy.exc.TimeoutError``).
  Attrs: ``db`` (database name), ``size`` (``pool_size``).
* ``db.pool.connect`` / ``db.pool.close`` / ``db.pool.invalidate``:
  instant records from the pool's ``connect``, ``close`` and
  ``invalidate`` events (attrs ``db``; ``cls`` the error that made an
  invalidation), in the span that caused them.

The database name of a pool is its engine's URL's
(``listeners.database_name``, the SQL records' name: ``nova_api``,
``:memory:`` for a plain ``sqlite://``), learnt when the engine is
made (``Dialect.engine_created``, a REPLACE point: once per engine,
nothing per connection), so that a pool's first ``connect``, which SQLAlchemy
fires before ``engine_connect``, is named too; a pool an engine made
again (``dispose``) by its engine's dialect; an engine made before
``install`` at ``install`` (SQLAlchemy 2.0, ``names.existing_engines``:
no engine listener) or at its first ``engine_connect`` (1.4); else from
the DBAPI connection (PyMySQL), else left empty.

The listeners and ``_do_get`` are points (LISTEN, REPLACE) of an
``instrument.patching.patcher.Patcher``: the target's, in the start-up banner
and the start record, undone by its ``remove()``.
"""

import weakref

from instrument import schema
from instrument.patching import patcher as patcher_mod
from instrument.patching import points as points_mod
from instrument.runtime import waits
from instrument.targets.sqlalchemy import connect as connect_mod
from instrument.targets.sqlalchemy import listeners as listeners_mod
from instrument.targets.sqlalchemy import names

EV_WAIT = schema.EV_DB_POOL_WAIT
A_DB = schema.ATTR_DB
A_SIZE = schema.ATTR_SIZE
A_CLS = schema.ATTR_CLS

QUEUE_POOL = ('sqlalchemy.pool.impl', 'QueuePool._do_get')
POINT_DO_GET = '%s:%s' % QUEUE_POOL
# SQLAlchemy's hook on every engine create_engine() makes, before it
# returns it (a classmethod of the dialect class)
ENGINE_CREATED = ('sqlalchemy.engine.interfaces', 'Dialect.engine_created')

clock = waits.clock


class PoolWaits:
    """The pool taps of one ``install``; ``remove`` undoes them."""

    def __init__(self, recorder, patcher=None) -> None:
        """``patcher`` applies the points (one of its own when None);
        ``remove`` undoes them."""
        self.recorder = recorder
        self.patcher = (
            patcher
            if patcher is not None
            else patcher_mod.Patcher([], recorder, 'SQLAlchemy')
        )
        self.waits = waits.WaitRecorder(recorder, 'the DB pool timing')
        self.faults = self.waits.faults
        self.pool_db: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # an engine's dialect: its database name (a pool its engine
        # made again after dispose() has the same dialect)
        self.dialect_db: weakref.WeakKeyDictionary = (
            weakref.WeakKeyDictionary()
        )
        self._points: list = []
        self._installed = False

    def points(self) -> list:
        """The pool's listeners, the timed ``QueuePool._do_get`` and
        the ``Engine.__init__`` that names the engine's pool."""
        listen = points_mod.listen
        return (
            [
                listen(
                    *listeners_mod.ENGINE,
                    'engine_connect',
                    listeners_mod.engine_connect_listener(
                        self.on_engine_connect
                    ),
                )
            ]
            # SQLAlchemy 2.0: no engine listener (names.engine_events);
            # the engines made before install are named at install
            if not listeners_mod.DIALECT_EXEC
            else []
        ) + [
            listen(*listeners_mod.POOL, 'connect', self.on_connect),
            listen(*listeners_mod.POOL, 'close', self.on_close),
            listen(*listeners_mod.POOL, 'invalidate', self.on_invalidate),
            points_mod.replace(*QUEUE_POOL, self._replacement),
            points_mod.replace(*ENGINE_CREATED, self._naming),
        ]

    def _replacement(self, original, state, owner):
        return self._timed(original)

    # -- lifecycle ---------------------------------------------------------

    def install(self) -> 'PoolWaits':
        if self._installed:
            return self
        self._installed = True
        self._points = self.points()
        self.patcher.add_points(self._points)
        self.patcher.apply()
        if listeners_mod.DIALECT_EXEC:
            for engine in names.existing_engines():
                self.name(engine)
        return self

    def remove(self) -> None:
        if not self._installed:
            return
        self._installed = False
        self.patcher.discard(p.name for p in self._points)

    # -- the checkout wait -------------------------------------------------

    def _timed(self, original):
        record = self.waits.record
        faults = self.faults
        pool_db = self.pool_db

        def _do_get(pool):
            try:
                # Everything the pool may open is open and none is idle:
                # this checkout waits for a connection to come back.
                waiting = (
                    faults.active
                    and -1 < pool._max_overflow <= pool._overflow
                    and pool._pool.qsize() == 0
                )
            except Exception as exc:  # noqa: BLE001 - other SQLAlchemy
                faults(exc)
                waiting = False
            if not waiting:
                return original(pool)
            t0 = None
            try:
                t0 = clock()
            except Exception as exc:  # noqa: BLE001 - counted
                faults(exc)
            if t0 is None:
                # outside the except block: nova's exception, if any,
                # is not chained to the fault
                return original(pool)
            # The checkout runs once, unguarded; its record is guarded,
            # the clock read and the attrs included.
            try:
                entry = original(pool)
            except Exception as exc:
                try:
                    record(
                        EV_WAIT,
                        t0,
                        clock(),
                        _attrs(pool, pool_db),
                        waits.error_of(exc),
                    )
                except Exception as fault:  # noqa: BLE001 - counted
                    faults(fault)
                raise
            try:
                record(EV_WAIT, t0, clock(), _attrs(pool, pool_db))
            except Exception as fault:  # noqa: BLE001 - counted
                faults(fault)
            return entry

        _do_get.__wrapped__ = original  # type: ignore[attr-defined]
        _do_get._instrument_timed = True  # type: ignore[attr-defined]
        _do_get.__name__ = '_do_get'
        _do_get.__qualname__ = getattr(original, '__qualname__', '_do_get')
        return _do_get

    # -- the names of pools ------------------------------------------------

    def _naming(self, original, state=None, owner=None):
        """``Dialect.engine_created`` (a classmethod) that names the
        engine's pool and dialect once ``create_engine`` has made it
        (guarded: the engine is returned whatever happens).  Not
        ``Engine.__init__``: ``create_engine`` reads the keyword
        arguments an engine takes from that function's own code."""
        func = original.__func__
        name = self.name

        def engine_created(cls, engine):
            func(cls, engine)
            name(engine)

        engine_created.__wrapped__ = func  # type: ignore[attr-defined]
        engine_created.__qualname__ = getattr(
            func, '__qualname__', 'engine_created'
        )
        return classmethod(engine_created)

    def name(self, engine) -> None:
        """Name ``engine``'s pool and dialect by its URL's database."""
        try:
            pool = engine.pool
            if pool in self.pool_db:
                return
            db = listeners_mod.database_name(engine.url)
            self.pool_db[pool] = db
            self.dialect_db[engine.dialect] = db
        except Exception as exc:  # noqa: BLE001 - counted
            self.faults(exc)

    # -- events --------------------------------------------------------------

    def on_engine_connect(self, conn) -> None:
        # an engine made before install
        self.name(conn.engine)

    def _db(self, dbapi_connection, connection_record) -> str:
        pool = getattr(connection_record, '_ConnectionRecord__pool', None)
        db = self.pool_db.get(pool) if pool is not None else None
        if db is None and pool is not None:
            # made again by its engine (dispose): its dialect's
            dialect = getattr(pool, '_dialect', None)
            try:
                db = self.dialect_db.get(dialect)
            except TypeError:  # not weakly referable
                db = None
            if db is not None:
                self.pool_db[pool] = db
        if db is None:
            db = connect_mod.database_of(dbapi_connection)
        return db or ''

    def _instant(
        self, ev: str, dbapi_connection, connection_record, exc=None
    ) -> None:
        if not self.faults.active:
            return
        try:
            attrs = {A_DB: self._db(dbapi_connection, connection_record)}
            if exc is not None:
                attrs[A_CLS] = waits.error_of(exc)[0]
            self.recorder.instant(ev, attrs)
        except Exception as fault:  # noqa: BLE001 - counted
            self.faults(fault)

    def on_connect(self, dbapi_connection, connection_record) -> None:
        self._instant(
            schema.EV_DB_POOL_CONNECT, dbapi_connection, connection_record
        )

    def on_close(self, dbapi_connection, connection_record) -> None:
        self._instant(
            schema.EV_DB_POOL_CLOSE, dbapi_connection, connection_record
        )

    def on_invalidate(
        self, dbapi_connection, connection_record, exception
    ) -> None:
        self._instant(
            schema.EV_DB_POOL_INVALIDATE,
            dbapi_connection,
            connection_record,
            exception,
        )


def _attrs(pool, pool_db) -> dict:
    try:
        size = pool.size()
    except Exception:  # noqa: BLE001 - a pool without a size
        size = None
    return {A_DB: pool_db.get(pool, ''), A_SIZE: size}
