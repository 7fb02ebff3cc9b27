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
"""What the analyser must find in a synthetic cloud's span files.

The generator fills a ``Truth`` while it writes: the clock correction of
every host, each request's final state per instance and its cause, the
exclusive time per component, SQL class counts and totals, the failure
table (with the normalised messages the analyser should print, and
which of its errors ended an instance and which were recovered), and the
bad lines, drops and ``seq`` gaps it injected.  The unit tests compare
the analyser's report with it.
"""

import collections
import dataclasses


@dataclasses.dataclass
class RequestTruth:
    """One request as generated."""

    req: str
    kind: str
    start: int
    end: int = 0
    # instance uuid (None: the request itself): final state, cause
    states: dict = dataclasses.field(default_factory=dict)
    causes: dict = dataclasses.field(default_factory=dict)
    # instance: (event, host) of the span that never ended
    stopped: dict = dataclasses.field(default_factory=dict)
    # instance: number of its last build attempt
    attempts: dict = dataclasses.field(default_factory=dict)
    # component: exclusive microseconds, and those spent in SQL
    comp: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )
    sql_in: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )

    @property
    def latency(self) -> int:
        return self.end - self.start


@dataclasses.dataclass
class Truth:
    """Everything the analyser must find."""

    # correction to add to each host's raw clock (minus its skew)
    offsets: dict = dataclasses.field(default_factory=dict)
    requests: dict = dataclasses.field(default_factory=dict)
    # fp: [count, sum_us, errors]
    sql: dict = dataclasses.field(default_factory=dict)
    # (svc, ev, cls, normalised message): count
    failures: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )
    # of those, the ones that were an instance's (or the request's)
    # final cause, same keys; and the ones recovered, keyed
    # ((svc, ev, cls, normalised message), how): how is ``db_retry``
    # (oslo.db retried the statement) or ``rescheduled`` (the build
    # went to another host)
    final: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )
    recovered: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )
    # (file name, line number, kind)
    bad_lines: list = dataclasses.field(default_factory=list)
    # file name: events reported lost in sink.drops
    drops: dict = dataclasses.field(default_factory=dict)
    # file name: records missing from the seq numbering
    seq_missing: dict = dataclasses.field(default_factory=dict)
    files: list = dataclasses.field(default_factory=list)
    events: int = 0

    def states(self) -> collections.Counter:
        out = collections.Counter()
        for rt in self.requests.values():
            for state in rt.states.values():
                out[state] += 1
        return out
