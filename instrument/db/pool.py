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

The database name of a pool is learnt from its engine's first
connection (``engine_connect``); a pool's first connections are named
from the DBAPI connection (PyMySQL), else left empty.
"""

import typing
import weakref

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import impl as pool_impl
from sqlalchemy.pool import Pool

from instrument.db import connect as connect_mod
from instrument.db import listeners as listeners_mod
from instrument import schema
from instrument import waits

EV_WAIT = schema.EV_DB_POOL_WAIT
A_DB = schema.ATTR_DB
A_SIZE = schema.ATTR_SIZE
A_CLS = schema.ATTR_CLS

clock = waits.clock


class PoolWaits:
    """The pool taps of one ``install``; ``remove`` undoes them."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder
        self.waits = waits.WaitRecorder(recorder, 'the DB pool timing')
        self.faults = self.waits.faults
        self.pool_db: weakref.WeakKeyDictionary = \
            weakref.WeakKeyDictionary()
        self._original = None
        self._events: list[tuple[typing.Any, str,
                                 typing.Callable[..., typing.Any]]] = [
            (Engine, 'engine_connect',
             listeners_mod.engine_connect_listener(self.on_engine_connect)),
            (Pool, 'connect', self.on_connect),
            (Pool, 'close', self.on_close),
            (Pool, 'invalidate', self.on_invalidate),
        ]
        self._installed = False

    # -- lifecycle ---------------------------------------------------------

    def install(self) -> 'PoolWaits':
        if self._installed:
            return self
        self._installed = True
        for target, name, fn in self._events:
            event.listen(target, name, fn)
        cls = pool_impl.QueuePool
        original = cls.__dict__.get('_do_get')
        if original is not None and not getattr(original,
                                                '_instrument_timed', False):
            cls._do_get = self._timed(original)  # type: ignore[method-assign]
            self._original = original
        return self

    def remove(self) -> None:
        if not self._installed:
            return
        self._installed = False
        for target, name, fn in self._events:
            try:
                event.remove(target, name, fn)
            except Exception:  # noqa: S110 - not attached (never mind)
                pass
        original, self._original = self._original, None
        cls = pool_impl.QueuePool
        current = cls.__dict__.get('_do_get')
        if original is not None and \
                getattr(current, '__wrapped__', None) is original:
            cls._do_get = original  # type: ignore[method-assign]

    # -- the checkout wait -------------------------------------------------

    def _timed(self, original):
        record = self.waits.record
        faults = self.faults
        pool_db = self.pool_db

        def _do_get(pool):
            try:
                # Everything the pool may open is open and none is idle:
                # this checkout waits for a connection to come back.
                waiting = (faults.active and
                           -1 < pool._max_overflow <= pool._overflow and
                           pool._pool.qsize() == 0)
            except Exception as exc:  # noqa: BLE001 - other SQLAlchemy
                faults(exc)
                waiting = False
            if not waiting:
                return original(pool)
            t0 = clock()
            try:
                entry = original(pool)
            except Exception as exc:
                record(EV_WAIT, t0, clock(), _attrs(pool, pool_db),
                       waits.error_of(exc))
                raise
            record(EV_WAIT, t0, clock(), _attrs(pool, pool_db))
            return entry

        _do_get.__wrapped__ = original  # type: ignore[attr-defined]
        _do_get._instrument_timed = True  # type: ignore[attr-defined]
        _do_get.__name__ = '_do_get'
        _do_get.__qualname__ = getattr(original, '__qualname__', '_do_get')
        return _do_get

    # -- events --------------------------------------------------------------

    def on_engine_connect(self, conn) -> None:
        try:
            engine = conn.engine
            pool = engine.pool
            if pool not in self.pool_db:
                self.pool_db[pool] = listeners_mod.database_name(engine.url)
        except Exception as exc:  # noqa: BLE001 - counted
            self.faults(exc)

    def _db(self, dbapi_connection, connection_record) -> str:
        pool = getattr(connection_record, '_ConnectionRecord__pool', None)
        db = self.pool_db.get(pool) if pool is not None else None
        if db is None:
            db = connect_mod._database(dbapi_connection)
        return db or ''

    def _instant(self, ev: str, dbapi_connection, connection_record,
                 exc=None) -> None:
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
        self._instant(schema.EV_DB_POOL_CONNECT, dbapi_connection,
                      connection_record)

    def on_close(self, dbapi_connection, connection_record) -> None:
        self._instant(schema.EV_DB_POOL_CLOSE, dbapi_connection,
                      connection_record)

    def on_invalidate(self, dbapi_connection, connection_record,
                      exception) -> None:
        self._instant(schema.EV_DB_POOL_INVALIDATE, dbapi_connection,
                      connection_record, exception)


def _attrs(pool, pool_db) -> dict:
    try:
        size = pool.size()
    except Exception:  # noqa: BLE001 - a pool without a size
        size = None
    return {A_DB: pool_db.get(pool, ''), A_SIZE: size}
