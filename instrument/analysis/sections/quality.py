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
"""``quality``: what the figures stand on.

The records lost, each counted once, with their causes
(``ingest.losses.LOSS_CAUSES``), in all and per process (with when it
lost them: ``windows``); the SQL statements dropped before they became
records; the files whose end could not be read; and the requests a loss
may have touched (``model.damage.mark``: those doing something in a
process when it lost records, those with events read after they were
finalised, those with a repaired record), marked in the request table
and left out of the times: how many, per operation (``by_operation``),
why (``why``), and whether the SQL profile may miss statements
(``sql_touched``: the records lost by processes that wrote SQL; and
``sql_dropped``, the statements dropped before they became records).
``note`` is the warning of the input's losses (``render.views
.loss_text``, None without any); the HTML page and the text report's
input problems open with it, and each section that a loss touches
says how (``render.views.marked_line``, ``sql_loss_line``).
"""

import typing

from instrument.analysis.ingest import losses
from instrument.analysis.render import fmt
from instrument.analysis.render import views
from instrument.analysis.sections import base


class Quality(base.Section):
    """``report['quality']``."""

    key = 'quality'

    def report(self, view: base.View) -> dict:
        lost = quality(
            view.loss,
            view.summaries,
            view.windows,
            view.marked,
            view.part('sql').writers,
        )
        # the warning of the input's losses (None: none)
        lost['note'] = views.loss_text(lost)
        return lost

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return html_parts(report)


def quality(
    loss: losses.FileLoss,
    summaries: list,
    windows: typing.Optional[dict] = None,
    marked: typing.Sequence = (),
    sql_writers: typing.Collection = (),
) -> dict:
    """What the figures stand on: the records lost, each counted once,
    with their causes (``losses.LOSS_CAUSES``: dropped by a sink, by the
    buffer, ``seq`` gaps nothing reported, invalid lines), in all and
    per process; the SQL statements dropped before they became records
    (``sql.dropped``); the files whose end could not be read
    (``unreadable``: what they lost is not counted; later files of
    their processes show it as seq gaps); and the requests a loss may
    have touched (``marked``: ``damage.mark``), whose figures may miss
    some of its records (with ``windows`` and ``marked``: when each
    process lost records, the requests marked per operation and why,
    and whether the SQL profile is touched)."""
    windows = windows or {}
    lossy = loss.lossy()
    hosts = {h for r in lossy for h in r['hosts']}
    # files whose end could not be read: what they lost is not known
    for _line, _error, file_hosts in loss.unreadable.values():
        hosts.update(file_hosts)
    keys = (
        ('host', 'pid', 'file', 'records', 'lost')
        + losses.LOSS_CAUSES
        + ('missing', 'dropped', 'sql_dropped')
    )
    rows = []
    for r in lossy:
        row = {k: r[k] for k in keys}
        spans = windows.get(r['key'])
        if spans:
            # when it lost them (on the corrected clock; None: until its
            # end), the first few
            row['windows'] = [
                [a, None if b >= losses.FOREVER else b]
                for a, b in spans[: fmt.EXAMPLES * 2]
            ]
        rows.append(row)
    out = {
        'lost_records': sum(r['lost'] for r in lossy),
        'causes': {
            cause: sum(r[cause] for r in lossy) for cause in losses.LOSS_CAUSES
        },
        'sql_dropped': sum(r['sql_dropped'] for r in lossy),
        'processes': rows,
        'unreadable': [
            {'file': f, 'after_line': row[0], 'error': row[1]}
            for f, row in sorted(loss.unreadable.items())
        ],
        'hosts': sorted(hosts),
        'requests': len(summaries),
        'requests_affected': len(marked),
        'boots_affected': sum(1 for s in marked if s.kind == 'boot'),
        'examples': [s.req for s in marked[:10]],
    }
    if windows or marked:
        by_op: dict = {}
        why: dict = {}
        for s in marked:
            by_op[s.kind] = by_op.get(s.kind, 0) + 1
            for reason in s.loss or ():
                why[reason] = why.get(reason, 0) + 1
        out['by_operation'] = dict(sorted(by_op.items()))
        out['why'] = dict(sorted(why.items()))
        # records lost by processes that wrote SQL statements
        out['sql_touched'] = sum(
            r['lost'] for r in lossy if r['key'] in sql_writers
        )
    return out


def html_parts(report: dict) -> list:
    """Warnings that hold for every figure below: losses, requests
    left out of the times, duplicates, processes without an end."""
    out = []
    for note in (views.loss_note(report), views.degraded_note(report)):
        if note:
            out.append('<p class="bad">%s</p>' % fmt.esc(note.lstrip('! ')))
    lines = views.unended_lines(report['load'])
    if lines:
        out.append(
            '<p class="bad">%s</p>'
            % '<br>'.join(fmt.esc(line.strip()) for line in lines)
        )
    return out
