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
"""``requests``: every finished request, one row each.

Its id, operation (``kind``) and final state, its instances (state,
cause, where it stopped, attempts), start, end and latency, exclusive
time and SQL time per component, critical path, attempts, DB retries,
errors, hosts, events, spans whose end was lost, the cells a list or
show queried, what it waited for, and the periodic tasks that held a
lock it waited for (``held_by_periodic``, ``sections.periodic``): so
that every figure of the report can be traced to the requests behind
it.  ``compare`` reads a run's figures per request from here.
"""

from instrument.analysis.sections import base


class Requests(base.Section):
    """``report['requests']``."""

    key = 'requests'

    def report(self, view: base.View) -> list:
        return view.part('periodic').annotate(
            [_request_row(s) for s in view.summaries]
        )


def _request_row(s) -> dict:
    row = s.to_dict()
    if s.lifecycle is None:
        row.pop('lifecycle', None)
    return row
