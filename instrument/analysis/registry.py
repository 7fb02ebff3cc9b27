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
"""Every section of the report, once, and where each form shows it.

``SECTIONS`` is the one list the analysis iterates: pass 2 makes each
section's state per worker and hands it the records its routes take
(``pipeline``), the merge adds the workers' states up, the report dict
holds each section's value under its key in this order (the JSON
report's order), and the text and HTML writers (``render.text``,
``render.html``) and ``compare`` show the sections that have a part
in them, in the order of their column.  A section's report figure is
computed in ``sections/<its key>.py``.

Adding a section is one module in ``sections/`` (a ``base.Section``)
and one line here: its place in the report dict by the line's place,
and in each form by a number (None: not shown there), between those of
its neighbours.
"""

import typing

from instrument.analysis.sections import base
from instrument.analysis.sections import causality
from instrument.analysis.sections import clocks
from instrument.analysis.sections import failures
from instrument.analysis.sections import findings
from instrument.analysis.sections import inputs
from instrument.analysis.sections import load
from instrument.analysis.sections import operations
from instrument.analysis.sections import periodic
from instrument.analysis.sections import processes
from instrument.analysis.sections import quality
from instrument.analysis.sections import releases
from instrument.analysis.sections import requests
from instrument.analysis.sections import resources
from instrument.analysis.sections import retries
from instrument.analysis.sections import services
from instrument.analysis.sections import sql
from instrument.analysis.sections import summary
from instrument.analysis.sections import timelines
from instrument.analysis.sections import waits
from instrument.analysis.sections import window


class Entry(typing.NamedTuple):
    """A section, and its place in the text report, the HTML page and
    ``compare`` (None: not there)."""

    section: type[base.Section]
    text: typing.Optional[int]
    html: typing.Optional[int]
    compare: typing.Optional[int]


SECTIONS = (
    #     section                  text  html  compare
    Entry(findings.Findings, 5, 5, 5),
    Entry(inputs.Inputs, 10, 10, None),
    Entry(clocks.Clocks, 30, 150, None),
    Entry(load.Load, 20, 160, None),
    Entry(processes.Processes, None, None, None),
    Entry(releases.Releases, None, None, None),
    Entry(summary.Summary, 40, 30, 10),
    Entry(quality.Quality, None, 20, None),
    Entry(operations.Operations, 50, 70, 30),
    Entry(failures.Failures, 80, 80, None),
    Entry(retries.Retries, None, None, None),
    Entry(sql.Sql, 110, 110, 20),
    Entry(causality.Causality, None, None, None),
    Entry(window.Window, None, None, None),
    Entry(requests.Requests, None, None, None),
    Entry(timelines.Timelines, None, 60, None),
    Entry(waits.Waits, 60, 40, None),
    Entry(services.Services, 90, 90, None),
    Entry(resources.Resources, 100, 100, None),
    Entry(periodic.Periodic, 70, 50, None),
)


def keys() -> list:
    """The report dict's section keys, in order."""
    return [e.section.key for e in SECTIONS]


def new_sections(ctx: base.Context) -> dict:
    """``{key: section}``: an empty state of every section."""
    return {e.section.key: e.section(ctx) for e in SECTIONS}


def _placed(form: str) -> list:
    placed = [e for e in SECTIONS if getattr(e, form) is not None]
    return [e.section for e in sorted(placed, key=lambda e: getattr(e, form))]


def in_text() -> list:
    """The sections of the text report, in its order."""
    return _placed('text')


def in_html() -> list:
    """The sections of the HTML page, in its order."""
    return _placed('html')


def in_compare() -> list:
    """The sections ``compare`` compares, in its order."""
    return _placed('compare')
