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
"""``window``: what ``--since``/``--until`` left out.

The window itself (corrected clock, us; None: open), the requests that
started outside it (the request model counts them) and the SQL
statements outside it (the SQL digest counts them); the window's rules
are ``ingest.window``'s.  The text report's header names it.
"""

from instrument.analysis.sections import base


class Window(base.Section):
    """``report['window']``."""

    key = 'window'

    def report(self, view: base.View) -> dict:
        return {
            'since_us': view.since,
            'until_us': view.until,
            'requests_outside': view.outside,
            'sql_outside': view.part('sql').digest.filtered,
        }
