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
"""The self-contained HTML report: one file, inline CSS and SVG.

No script and nothing fetched from the network (the timelines' zoom
is radio buttons and CSS: ``charts.zoomable``).  The page is the
sections of the registry that have an HTML part, in its order
(``registry.in_html``): the title line, the warnings that hold for
every figure, final states, time per component by load (charts drawn
by ``charts``: round ticks in one stated unit, titled axes, HTML
legends), waits, periodic tasks, per-request timelines, the
operations, failures, services, resources, the SQL profile and class
blocks, clock offsets, input problems.  Headings say what a section
shows, not which figure of a paper it reproduces.  Every string that
comes from the input (host names, instance and request ids, error
messages, SQL text) goes through ``fmt.esc``.
"""

from instrument.analysis import registry
from instrument.analysis.render import charts
from instrument.analysis.render import fmt
from instrument.analysis.sections import base

CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
h3{font-size:15px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;
padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;
overflow-wrap:anywhere}
table{max-width:100%}
pre{white-space:pre-wrap;overflow-wrap:anywhere}
th{background:#f3f3f3}td.l,th.l{text-align:left}
pre{background:#f8f8f8;padding:8px;font-size:11px;overflow-x:auto}
.bad{color:#b00000}.note{color:#595959;font-size:13px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
"""


def render(report: dict, title: str = 'instrument-report') -> str:
    """The HTML page of ``report`` (``pipeline.analyse``)."""
    page = base.Page(title=title)
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<title>%s</title><style>%s</style></head><body>'
        % (fmt.esc(title), CSS + charts.CSS + charts.ZOOM_CSS)
    ]
    for section in registry.in_html():
        out.extend(section.html(report, page))
    out.append('</body></html>')
    return '\n'.join(out) + '\n'
