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
"""The DB connection pool's waits (``instrument.targets``).

Installed when ``[instrument] wait_timing`` is on and SQLAlchemy is
installed: ``instrument.targets.sqlalchemy.pool`` (``db.pool.wait``
for checkouts that wait for a connection,
``db.pool.connect``/``close``/``invalidate``),
on every engine of the process, its listeners and replacement points
of the target's patcher.  SQLAlchemy is imported at install.
"""

import typing

from instrument.targets import base

if typing.TYPE_CHECKING:  # imported at install only
    from instrument.targets.sqlalchemy import pool


class DbPoolTarget(base.Target):
    """``db.pool.*`` records of every SQLAlchemy pool."""

    name = 'db_pool'
    requires = {'SQLAlchemy': ''}

    def __init__(self) -> None:
        super().__init__()
        self.taps: pool.PoolWaits | None = None

    def check(self, conf) -> str | None:
        if not conf.instrument.wait_timing:
            return '[instrument] wait_timing is off'
        return super().check(conf)

    def install(self, ctx: base.Context) -> None:
        from instrument.targets.sqlalchemy import pool

        super().install(ctx)
        self.taps = pool.PoolWaits(ctx.recorder, ctx.patcher).install()

    def remove(self) -> None:
        taps, self.taps = self.taps, None
        if taps is not None:
            taps.remove()
        super().remove()
