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
"""The event table: every event the runtime writes, declared once with
the module that writes it and the component its time is charged to.

``schema.EVENTS`` (``{event: component}``, the analyser's view) is made
from ``TABLE``.  The steps of nova's operations are declared in the
operation catalogue (``instrument.catalogue``) and written by the nova
target's points generated from it; every other event is declared
here.  ``tests/unit/test_events.py`` checks that every event written
anywhere in ``instrument/`` is declared, by the module declared, and
that every declared event is written.  doc/source/events.rst says what
each one's attrs hold.

Like ``schema``, this module imports nothing but the standard library
and the catalogue.
"""

import dataclasses

from instrument import catalogue


@dataclasses.dataclass(frozen=True)
class Event:
    """``name`` (``ev``), written by module ``emitter``; its exclusive
    time charged to ``component`` (None: a record of no time of its
    own, metadata or counters)."""

    name: str
    emitter: str
    component: str | None


NOVA = 'instrument.targets.nova'
_DB = 'instrument.targets.sqlalchemy.'

_OWN: tuple = (
    # process and sink metadata (ph M / C)
    Event('process.start', 'instrument.runtime.process', None),
    Event('process.end', 'instrument.runtime.buffer', None),
    Event('process.points', 'instrument.patching.patcher', None),
    Event('sink.drops', 'instrument.runtime.buffer', None),
    Event('instrument.faults', 'instrument.runtime.lifecycle', None),
    Event('sql.fingerprint', _DB + 'listeners', None),
    Event('sql.dropped', _DB + 'listeners', None),
    Event('sql.agg', _DB + 'aggregate', 'sql'),
    # nova-api: the request, written by the paste filter
    Event('api.request', 'instrument.loaders.paste', 'api'),
    # RPC, both sides of every hop
    Event('rpc.call', 'instrument.targets.oslo_messaging', 'rpc'),
    Event('rpc.cast', 'instrument.targets.oslo_messaging', 'rpc'),
    Event('rpc.dispatch', 'instrument.targets.oslo_messaging', 'rpc'),
    # database
    Event('sql.query', _DB + 'listeners', 'sql'),
    Event('sql.txn', _DB + 'listeners', 'sql'),
    Event('db.retry', _DB + 'retries', 'sql'),
    # nova, besides the operations' steps: the compute driver's spawn
    # (patched once the driver is loaded), nova-api across cells: the
    # whole scatter-gather, and each cell's part of it (attrs: cell, db)
    Event('compute.spawn', NOVA, 'compute.spawn'),
    Event('api.cells.scatter_gather', NOVA, 'api'),
    Event('api.cells.query', NOVA, 'api.cells'),
    # -- waits: locks, DB pool, worker pools (issue 13) --------------------
    # One X record per wait, a child of the span that waited (so the
    # analyser takes it out of that span's exclusive time): oslo.concurrency
    # lock acquisitions (attrs lock, held_us, call, fair, external), DB
    # connection pool checkouts that waited for a connection (attrs db,
    # size), a task waiting for a slot of one of nova's pools (attrs pool).
    Event('lock.wait', 'instrument.targets.oslo_concurrency', 'wait.lock'),
    Event('db.pool.wait', _DB + 'pool', 'wait.db_pool'),
    Event('pool.wait', NOVA, 'wait.pool'),
    # DB connections made and lost (I records, attrs db, cls)
    Event('db.pool.connect', _DB + 'pool', None),
    Event('db.pool.close', _DB + 'pool', None),
    Event('db.pool.invalidate', _DB + 'pool', None),
    # -- around nova (issue 21) --------------------------------------------
    # calls to other services through keystoneauth1, the called
    # service's time; keystonemiddleware's token validation in nova-api
    Event('ksa.request', 'instrument.targets.keystoneauth', 'service'),
    Event('api.auth_token', 'instrument.targets.keystoneauth', 'api.auth'),
    # a C record every [instrument] resource_sample_interval
    Event('process.sample', 'instrument.runtime.resources', None),
    Event('periodic.task', 'instrument.targets.periodic', 'periodic'),
)


def table(steps: tuple = catalogue.STEPS) -> tuple:
    """Every event, each once: the library's own, then the events of
    ``steps`` (the catalogue's, written by the nova target)."""
    return _OWN + tuple(
        Event(step.event, NOVA, step.charged_to) for step in steps
    )


TABLE: tuple = table()

BY_NAME: dict = {event.name: event for event in TABLE}

# ``{event: component}`` (``schema.EVENTS``).
EVENTS: dict = {event.name: event.component for event in TABLE}
