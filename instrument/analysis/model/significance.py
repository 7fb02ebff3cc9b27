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
"""What ``compare`` says of two runs' figures: the relative change.

Whether two samples differ is ``compare``'s test (a two-sided
Mann-Whitney U test from ``scipy.stats``), which it gives the sections
(``base.Comparing``): the analysis itself never loads SciPy.
"""

import typing


def change(
    a: typing.Optional[float], b: typing.Optional[float]
) -> typing.Optional[float]:
    """``b`` relative to ``a`` (None without both, or from 0)."""
    if a is None or b is None or not a:
        return None
    return (b - a) / a
