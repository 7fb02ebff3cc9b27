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
"""How pass 2 hands each record to what reads it: ``Route``.

The consumers of records (the request model, ``model.requests``; each
section, ``sections``; the reader's own loss accounting) declare the
records they read as routes: phases, events, and what the record's
request id says it belongs to (``NONE``, ``PERIODIC``, ``REQUEST``).
The reader (``ingest.reader``) builds its dispatch table from them and
knows no event name itself.
"""

import typing

from instrument import schema

# What a record's request id says it belongs to.
NONE = 0  # no request id
PERIODIC = 1  # a periodic task run's (``schema.periodic_req``)
REQUEST = 2  # a user request's
ALL = (NONE, PERIODIC, REQUEST)
PERIODIC_PREFIX = schema.PERIODIC_REQ_PREFIX


class Route(typing.NamedTuple):
    """Which records a consumer's method ``handler`` is given.

    ``phases``: the phases (``'XB'``); ``events``: the event names, None
    for every event but those of ``exclude``; ``contexts``: of ``ALL``.
    ``shared``: metadata records (``M``) that every worker of pass 2
    reads, not only the first, which alone counts them (the SQL
    fingerprints each worker's statements need).

    A handler is called as ``handler(record, ts, cursor)``: ``record``
    is the decoded record (``ingest.codec``), ``ts`` its time on the
    corrected clock (the record's own on a ``shared`` route), ``cursor``
    the reader (``ingest.reader.PartReader``: ``fname`` and ``process``
    of the record, ``process_of``).  The handlers of one record are
    called in the order of the consumers; one that returns False (a
    span read twice) stops the others.
    """

    phases: str
    events: typing.Optional[frozenset]
    contexts: tuple
    handler: str
    exclude: frozenset = frozenset()
    shared: bool = False

    def takes(self, ph: str, ev: str, context: int) -> bool:
        """Does this route take a record of phase ``ph``, event ``ev``
        in ``context``?"""
        return (
            ph in self.phases
            and context in self.contexts
            and (
                ev in self.events
                if self.events is not None
                else ev not in self.exclude
            )
        )
