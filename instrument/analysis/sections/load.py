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
"""``load``: how the input was read, and what was lost on the way.

Pass 2 (``ingest.reader``) counts every bad line by kind with the first
few examples (``ingest.losses.Issues``: malformed, truncated, unknown
version, invalid, duplicate, late), the files' problems (skipped, cut
short), and per process what it lost (``ingest.losses.FileLoss``: seq
gaps, sinks' and buffer's drops, invalid lines; SQL statements
dropped), the files holding records read before, the processes
without an end record, the spans read twice and the records of no
request.  The text form's "Input problems", the HTML page's "Input".
"""

from instrument.analysis.render import fmt
from instrument.analysis.render import views
from instrument.analysis.sections import base


class Load(base.Section):
    """``report['load']``."""

    key = 'load'

    def report(self, view: base.View) -> dict:
        issues = view.issues
        loss = view.loss
        return {
            'counts': issues.counts,
            'samples': issues.samples,
            # by file name (not the order the workers met them in)
            'per_file': dict(sorted(issues.per_file.items())),
            'other_lines': issues.other_lines,
            'problems': issues.problems,
            'loss': loss.summary(),
            'duplicate_spans': view.duplicate_spans,
            # records of a process already read (another copy of
            # a file, a file holding them twice), per file
            'duplicates': loss.duplicate_files(),
            # processes without a process.end record (killed?)
            'unended': loss.unended(),
            'records_without_request': dict(sorted(view.no_request.items())),
        }

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report)

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return html_parts(report)


def text_lines(report: dict) -> list:
    """The text report's input problems (one line when there are
    none)."""
    out: list = []
    ld = report['load']
    bad = {k: v for k, v in ld['counts'].items() if v}
    if (
        not bad
        and not ld['loss']
        and not ld['problems']
        and not ld.get('duplicate_spans')
        and not ld.get('unended')
    ):
        out.append('# every line valid; no data loss reported')
        return out
    out.extend(fmt.title('Input problems'))
    out.extend(views.loss_lines(report))
    for problem in ld['problems']:
        out.append('! ' + problem)
    out.extend(
        ('  ' if line.startswith(' ') else '! ') + line
        for line in views.unended_lines(ld)
    )
    dups = ld.get('duplicates') or []
    for row in dups[: fmt.EXAMPLES]:
        out.append(
            '! %s: %d of its %d records were read before (a '
            'copy, or records written twice); left out of every '
            'figure' % (row['file'], row['duplicates'], row['records'])
        )
    if len(dups) > fmt.EXAMPLES:
        out.append(
            '! and %d more files with records read before (every '
            'one in the JSON report, load.duplicates)'
            % (len(dups) - fmt.EXAMPLES)
        )
    if bad:
        out.append(
            'bad lines: ' + ', '.join('%s %d' % (k, v) for k, v in bad.items())
        )
        for kind, fname, lineno, reason in samples_in_order(ld):
            out.append('  %s:%d: %s: %s' % (fname, lineno, kind, reason))
    if ld['loss']:
        out.append(
            'lost per process (records, each counted once: '
            'dropped by a sink or the buffer as its sink.drops '
            'says, seq gaps nothing reported, invalid lines; SQL '
            'statements dropped before they became records):'
        )
        headers, rows = loss_table(ld['loss'])
        out.extend('  ' + line for line in fmt.table(headers, rows))
    if ld.get('duplicate_spans'):
        out.append(
            'duplicate span records ignored: %d' % ld['duplicate_spans']
        )
    return out


def samples_in_order(ld: dict) -> list:
    """``(kind, file, line, reason)`` of the bad lines the report
    keeps as examples (``load.samples``), in the order of the files'
    names and their lines."""
    return sorted(
        (
            (kind, f, n, why)
            for kind, lst in ld['samples'].items()
            for f, n, why in lst
        ),
        key=lambda s: (s[1], s[2], s[0]),
    )


def loss_table(rows: list) -> tuple:
    """``(headers, rows)`` of the data lost per process (``load.loss``
    of the report)."""
    return (
        [
            'file',
            'pid',
            'records',
            'lost',
            'sink',
            'buffer',
            'gaps',
            'invalid',
            'SQL dropped',
        ],
        [
            (
                r['file'],
                r['pid'],
                r['records'],
                r['lost'],
                r['sink_dropped'],
                r['buffer_dropped'],
                r['unreported_gaps'],
                r['invalid'],
                r['sql_dropped'],
            )
            for r in rows
        ],
    )


def html_parts(report: dict) -> list:
    """The HTML report's input: bad lines, losses, duplicates, problems."""
    esc = fmt.esc
    table = fmt.html_table
    out: list = []
    ld = report['load']
    out.append('<h2>Input</h2>')
    bad = {k: v for k, v in ld['counts'].items() if v}
    out.append(
        '<p>%s</p>'
        % esc(
            ', '.join('%s: %d' % kv for kv in bad.items())
            or 'every line valid'
        )
    )
    samples = samples_in_order(ld)
    if samples:
        out.append(
            table(['kind', 'file', 'line', 'reason'], samples, left=(0, 1, 3))
        )
    if ld['loss']:
        out.append(table(*loss_table(ld['loss'])))
    for row in ld.get('duplicates') or ():
        out.append(
            '<p class="bad">%s: %d of its %d records were read '
            'before (a copy, or records written twice); left out '
            'of every figure</p>'
            % (esc(row['file']), row['duplicates'], row['records'])
        )
    for problem in ld['problems']:
        out.append('<p class="bad">%s</p>' % esc(problem))
    return out
