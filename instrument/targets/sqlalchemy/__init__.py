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

Installed when ``[instrument] sql_timing`` is on and SQLAlchemy is
installed: the engine and pool listeners, the connection set-up tap of
PyMySQL and the ``wrap_db_retry`` recorder of ``instrument.db``, which
this target installs and removes as one (``instrument.db.install``),
each listener and replacement a point of the target's patcher.
They tap every engine of the process, whatever the points given to
``setup()``.  SQLAlchemy is imported at install, not before.
"""

import typing

from instrument.targets import base

if typing.TYPE_CHECKING:  # imported at install only
    from instrument import db


class SqlAlchemyTarget(base.Target):
    """``sql.query``, ``sql.txn``, ``sql.agg`` and ``db.retry`` events."""

    name = 'sqlalchemy'
    requires = {'SQLAlchemy': ''}
    process_wide = True

    def __init__(self) -> None:
        super().__init__()
        self.timing: db.SqlTiming | None = None

    def check(self, conf) -> str | None:
        if not conf.instrument.sql_timing:
            return '[instrument] sql_timing is off'
        return super().check(conf)

    def install(self, ctx: base.Context) -> None:
        super().install(ctx)
        from instrument import db
        self.timing = db.install(ctx.recorder, ctx.conf, ctx.patcher)

    def remove(self) -> None:
        """Detach everything and write the last aggregates."""
        timing, self.timing = self.timing, None
        if timing is not None:
            timing.remove()
        super().remove()
