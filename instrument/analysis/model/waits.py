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
"""What each request waited for: locks, DB pool, worker pools.

The runtime writes one ``X`` record per wait (``schema.WAIT_EVENTS``:
``lock.wait``, ``db.pool.wait``, ``pool.wait``) as a child of the span
that waited, so ``breakdown`` already takes the wait out of that span's
exclusive time and charges it to a ``wait.*`` component.  ``of_request``
says, per request (``breakdown.summarise``), what was waited for and
where: the wait inside each component, by thing waited for (lock name,
database, pool), in total and on the critical path.  The run-wide
tables are ``sections.waits``'.
"""

import re
import typing

from instrument import schema
from instrument.analysis.model import spans as spans_mod

WAIT_EVENTS = schema.WAIT_EVENTS
# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_SVC = spans_mod.S_SVC
S_DUR = spans_mod.S_DUR
S_PARENT = spans_mod.S_PARENT
S_ATTRS = spans_mod.S_ATTRS
# What a wait is named by, per kind.
NAME_KEYS = {
    'lock': schema.ATTR_LOCK,
    'db_pool': schema.ATTR_DB,
    'pool': schema.ATTR_POOL,
}
# Per-request wait rows: (component that waited, kind, name, wait us,
# critical-path us).
W_IN, W_KIND, W_NAME, W_US, W_CP = range(5)


_UUID = re.compile(
    r'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
    r'[0-9a-fA-F]{4}-[0-9a-fA-F]{12}'
)


def wait_name(kind: str, attrs: typing.Any) -> str:
    """What a wait record waited for; uuids in lock names become
    ``{uuid}`` (nova's per-instance locks: ``{uuid}``,
    ``refresh_cache-{uuid}``, ``{uuid}-events``), so that they add up
    to one row each and the table stays bounded."""
    if not isinstance(attrs, dict):
        return '?'
    name = attrs.get(NAME_KEYS.get(kind, ''))
    if not isinstance(name, str) or not name:
        return '?'
    if len(name) >= 36:
        name = _UUID.sub('{uuid}', name)
    return name


def of_request(
    spans: dict, names: dict, cp: dict, critical: typing.AbstractSet
) -> tuple:
    """The waits of one request: rows ``(component, kind, name, us,
    critical us)`` summed per (component, kind, name).

    ``names`` are the components of the spans (``breakdown``), ``cp``
    the critical-path time per component, ``critical`` the span ids on
    the critical path.  A wait's critical-path time is its component's
    (``wait.lock`` ...) shared among the waits on the path in proportion
    to their durations.
    """
    rows = {}
    on_path = {}
    for sid, s in spans.items():
        kind = WAIT_EVENTS.get(s[S_EV])
        if kind is None:
            continue
        dur = s[S_DUR] or 0
        parent = spans.get(s[S_PARENT])
        where = names.get(s[S_PARENT]) if parent is not None else None
        if where is None:
            attrs = s[S_ATTRS]
            where = (
                attrs.get(schema.ATTR_CALL)
                if isinstance(attrs, dict)
                else None
            ) or s[S_SVC]
            where = schema.EVENTS.get(where) or where
        key = (where, kind, wait_name(kind, s[S_ATTRS]))
        row = rows.get(key)
        if row is None:
            row = rows[key] = [0, 0.0]
        row[0] += dur
        if sid in critical and dur:
            comp = names.get(sid)
            on_path.setdefault(comp, []).append((key, dur))
    for comp, items in on_path.items():
        total = sum(d for _k, d in items)
        charged = cp.get(comp, 0)
        for key, dur in items:
            rows[key][1] += charged * dur / total
    return tuple(
        (k[0], k[1], k[2], v[0], int(round(v[1]))) for k, v in rows.items()
    )
