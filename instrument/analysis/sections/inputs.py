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
"""``inputs``: what was read.

The span files (names and paths), their bytes, lines and valid
records, and what the input spans on the corrected clock: from its
first request's start (``first_us``, which ``--since +10m`` counts
from) to its last record (``last_us``).  The text form's header and the HTML
page's title line show it with the run's times and workers.
"""

import os

from instrument.analysis.render import fmt
from instrument.analysis.sections import base
from instrument.analysis.sections import releases


class Inputs(base.Section):
    """``report['inputs']``."""

    key = 'inputs'

    def report(self, view: base.View) -> dict:
        return {
            'files': [os.path.basename(p) for p in view.paths],
            'paths': view.paths,
            'bytes': view.total_bytes,
            'lines': view.lines,
            'records': view.records,
            'first_us': view.first_us,
            'last_us': max(
                (
                    r['last_us']
                    for r in view.loss.per_process().values()
                    if r['last_us']
                ),
                default=None,
            ),
        }

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report)

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        esc = fmt.esc
        s = report['summary']
        inp = report['inputs']
        return [
            '<h1>%s</h1><p class="note">%d files, %.1f MB, %d '
            'records; run %s .. %s (%.1f s)</p>'
            % (
                esc(page.title),
                len(inp['files']),
                inp['bytes'] / 1e6,
                inp['records'],
                esc(fmt.fmt_time(s['start_us'])),
                esc(fmt.fmt_time(s['end_us'])),
                s['duration_s'],
            )
        ]


def text_lines(report: dict) -> list:
    """The text report's header: its input and run."""
    out: list = []
    inp = report['inputs']
    summary = report['summary']
    out.append(
        '# instrument-report: %d files, %.1f MB, %d lines, %d '
        'records'
        % (len(inp['files']), inp['bytes'] / 1e6, inp['lines'], inp['records'])
    )
    # the run's duration: one definition, the demo's too
    out.append(
        '# run %s .. %s UTC: %.1f s from the first request\'s start '
        'to the last request\'s end (corrected clocks)'
        % (
            fmt.fmt_time(summary['start_us']),
            fmt.fmt_time(summary['end_us']),
            summary['duration_s'],
        )
    )
    win = report.get('window') or {}
    if win.get('since_us') is not None or win.get('until_us') is not None:
        out.append(
            '# --since/--until %s .. %s: %d requests that started '
            'outside and %d SQL statements outside left out'
            % (
                fmt.fmt_time(win['since_us']),
                fmt.fmt_time(win['until_us']),
                win['requests_outside'],
                win['sql_outside'],
            )
        )
    mixed = releases.text(report.get('releases') or [])
    if mixed:
        out.append(mixed)
    out.append(
        '# analysed in %.1f s with %d worker(s)'
        % (
            report.get('run', {}).get('seconds', 0.0),
            report.get('run', {}).get('jobs', 1),
        )
    )
    return out
