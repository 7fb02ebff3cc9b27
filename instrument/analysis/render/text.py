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
"""The terminal report: plain text from a report dict.

The sections of the registry that have a text part, in its order
(``registry.in_text``): input and data loss, clock offsets, final
states and time per component of boots, the operations (an overview,
then a section per operation other than boot), waits, periodic tasks,
failures, services called, resources, the SQL digest (the
pt-query-digest profile, then one block per class).  Numbers use
pt-query-digest's units (``us``, ``ms``, ``s``: ``render.fmt``).
"""

from instrument.analysis import registry
from instrument.analysis.sections import base


def render(report: dict, sql_blocks: int = 5) -> str:
    """The text report of ``report`` (``pipeline.analyse``), with the
    ``sql_blocks`` costliest SQL classes in detail."""
    page = base.Page(sql_blocks=sql_blocks)
    out: list = []
    for section in registry.in_text():
        out.extend(section.text(report, page))
    return '\n'.join(out) + '\n'
