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
"""A subunit stream of known test durations, for ``stestr load``.

stestr spreads over its workers by the durations its repository holds,
and deals the tests it has none for round-robin: on a clean clone (CI)
the real-nova tier's long tests (the default demo alone takes about 3
minutes) can land on one worker with half of the rest (seen: one
worker done after 6.6 minutes, the other after 11.7).  ``.ci/run``
loads the durations of a CI run first (``tools/functional-times.txt``:
``seconds test-id`` per line, the tests of 1 s and more), so that the
tier is spread by them::

    python tools/stestr_times.py tools/functional-times.txt | stestr load
"""

import datetime
import sys

from subunit import StreamResultToBytes


def main() -> None:
    out = StreamResultToBytes(sys.stdout.buffer)
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    with open(sys.argv[1]) as f:
        for line in f:
            seconds, test_id = line.split()
            out.status(test_id=test_id, test_status='inprogress', timestamp=at)
            at += datetime.timedelta(seconds=float(seconds))
            out.status(test_id=test_id, test_status='success', timestamp=at)


if __name__ == '__main__':
    main()
