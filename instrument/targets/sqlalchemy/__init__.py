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
"""SQLAlchemy and oslo.db: every SQL statement (``instrument.targets``).

``SqlAlchemyTarget`` is installed when ``[instrument] sql_timing`` is
on and SQLAlchemy is installed: the engine and pool listeners, the
connection set-up tap of PyMySQL and the ``wrap_db_retry`` recorder,
which it installs and removes as one (``timing.install``).  The
``db_pool`` target (``instrument.targets.db_pool``, an entry point of
its own, ``[instrument] wait_timing``) installs ``pool``.  Every
listener and replacement is a point (LISTEN, REPLACE) of the target's
``instrument.patching.patcher.Patcher``: one status each in the
start-up banner and the start record, undone by its ``remove()``.
They tap every engine of the process, whatever the points given to
``setup()``.  SQLAlchemy is imported at install, not before: this
module imports none of the others.

The package, one job a module:

===============  ========================================================
``timing``       SQL timing as one handle: the listeners, the
                 aggregator and the retry recorder, installed and
                 removed together (``install(recorder, conf, patcher)``)
``listeners``    the engine, pool and dialect listeners: ``sql.query``,
                 ``sql.txn``, ``sql.fingerprint``, ``sql.dropped``
``connect``      a new connection's set-up statements (PyMySQL's
                 ``connect``, tapped on the wire)
``fingerprint``  a statement's class (pt-query-digest's fingerprint)
``aggregate``    the statements not written one by one: ``sql.agg``
``retries``      oslo.db's ``wrap_db_retry``: ``db.retry``
``pool``         the connection pool: ``db.pool.*``
===============  ========================================================
"""

import typing

from instrument.targets import base

if typing.TYPE_CHECKING:  # imported at install only
    from instrument.targets.sqlalchemy import timing as timing_mod


class SqlAlchemyTarget(base.Target):
    """``sql.query``, ``sql.txn``, ``sql.agg`` and ``db.retry`` events."""

    name = 'sqlalchemy'
    requires = {'SQLAlchemy': ''}
    process_wide = True

    def __init__(self) -> None:
        super().__init__()
        self.timing: timing_mod.SqlTiming | None = None

    def check(self, conf) -> str | None:
        if not conf.instrument.sql_timing:
            return '[instrument] sql_timing is off'
        return super().check(conf)

    def install(self, ctx: base.Context) -> None:
        super().install(ctx)
        from instrument.targets.sqlalchemy import timing

        self.timing = timing.install(ctx.recorder, ctx.conf, ctx.patcher)

    def remove(self) -> None:
        """Detach everything and write the last aggregates."""
        timing, self.timing = self.timing, None
        if timing is not None:
            timing.remove()
        super().remove()
