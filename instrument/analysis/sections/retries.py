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
"""``retries``: oslo.db's DB retries (``wrap_db_retry``).

Every ``db.retry`` instant event that happened in the
``--since``/``--until`` window, whatever it belongs to, counted per
retried function and the exception that made the retry, most first.
The failures section's text and HTML forms show them.
"""

import collections
import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.sections import base


class Retries(base.Section):
    """``report['retries']``: ``[{func, cls, count}]``."""

    key = 'retries'
    routes = (
        routes.Route(
            'I', frozenset((schema.EV_DB_RETRY,)), routes.ALL, 'retry'
        ),
    )

    def __init__(self, ctx: base.Context) -> None:
        self.since = ctx.since
        self.until = ctx.until
        # (func, cls): count
        self.counts: collections.Counter = collections.Counter()

    def retry(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        if (self.since is None or ts >= self.since) and (
            self.until is None or ts < self.until
        ):
            attrs = rec.attrs or {}
            self.counts[
                (
                    attrs.get(schema.ATTR_FUNC) or '?',
                    attrs.get(schema.ATTR_CLS) or '?',
                )
            ] += 1

    def merge(self, other: 'Retries') -> None:
        self.counts.update(other.counts)

    def report(self, view: base.View) -> list:
        return [
            {'func': func, 'cls': cls, 'count': n}
            for (func, cls), n in self.counts.most_common()
        ]
