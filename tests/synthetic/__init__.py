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
"""Seeded synthetic span logs of a nova cloud, and the truth behind them.

Test data, not shipped: used by the unit tests (known answers) and by
``bench/bench_report.py`` (a large log).  ``generate(directory, seed)``
writes the span files of a cloud and returns its ``Truth``, what the
analyser must find in them.

The parts, in the order data flows:

``cloud``       hosts, processes, clock skews, load; drives the requests
``nova``        nova's requests (boot path, faults, other API calls)
``spans``       the span, statement and RPC primitives they are made of
``procs``       one recording process: ids, clock, pending records
``statements``  the SQL classes, query ids and ``sql.agg`` histograms
``files``       records to span files, bad input injected on request
``truth``       what the analyser must find

Everything on the wire is made by the runtime's own code: records are
``instrument.runtime.record`` tuples encoded by ``record.to_dict``, file names
come from the ``file`` sink, query ids from
``instrument.targets.sqlalchemy.fingerprint``, histogram buckets from
``instrument.targets.sqlalchemy.aggregate``, and the component
each event's time is charged to from ``instrument.schema.EVENTS`` (an
event outside that vocabulary, ``conductor.object_action``, is charged
to its service, as the analyser does).
"""

from tests.synthetic.cloud import Cloud
from tests.synthetic.statements import fingerprint_id
from tests.synthetic.truth import Truth

__all__ = ['Cloud', 'Truth', 'fingerprint_id', 'generate']


def generate(
    directory: str,
    seed: int = 1,
    requests: int = 200,
    rate: float = 4.0,
    **kwargs,
) -> Truth:
    """Write a synthetic cloud's span files; return the truth."""
    return Cloud(seed=seed, **kwargs).generate(
        directory, requests=requests, rate=rate
    )
