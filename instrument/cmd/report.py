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
"""``instrument-report``: analyse span files of a nova cloud.

::

    instrument-report [options] INPUT...        files, directories, globs,
                                                .gz; many hosts at once
    instrument-report compare [options] RUN_A RUN_B

The text report goes to standard output (``--quiet`` leaves it out);
``--json FILE`` and ``--html FILE`` write the other forms.  A RUN of
``compare`` is a JSON report written by ``--json``, or the span files
(a directory or glob) of the run.  Exit status: 0 done, 2 bad usage or
nothing to read.
"""

import argparse
import os
import sys

from instrument.analysis import sqldigest
from instrument.cmd import progress


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--jobs', '-j', type=int, default=0,
                        help='worker processes (default: 1 for small '
                        'inputs, else up to 4, one per CPU)')
    parser.add_argument('--horizon', type=float, default=30.0,
                        metavar='SECONDS',
                        help='a finished request is final after this much '
                        'quiet input time (default 30)')
    parser.add_argument('--hung', type=float, default=600.0,
                        metavar='SECONDS',
                        help='a request without an outcome is reported '
                        'incomplete after this much quiet input time '
                        '(default 600)')
    parser.add_argument('--group-by', default='fingerprint',
                        choices=sqldigest.GROUPS,
                        help='SQL digest classes (default fingerprint)')
    parser.add_argument('--order-by', default='sum',
                        help='SQL profile order: %s, or pt-query-digest '
                        'style Query_time:sum (default sum)' %
                        ', '.join(sqldigest.ORDERS))
    parser.add_argument('--limit', type=int, default=20,
                        help='SQL classes shown (0: all; default 20)')
    parser.add_argument('--since', metavar='TIME',
                        help='SQL statements from TIME: ISO 8601, epoch '
                        'seconds, or +10m after the first event')
    parser.add_argument('--until', metavar='TIME',
                        help='SQL statements before TIME')
    parser.add_argument('--no-progress', action='store_true',
                        help='no progress line on standard error')


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='instrument-report',
        description='Analyse span files written by openstack-instrument: '
        'clock correction, request lifecycles, failures, time per '
        'component, SQL digest.  "instrument-report compare RUN_A RUN_B" '
        'compares two runs.')
    parser.add_argument('inputs', nargs='+', metavar='INPUT',
                        help='span files, directories, globs (.gz too)')
    parser.add_argument('--json', metavar='FILE',
                        help='write the JSON report (every request) here')
    parser.add_argument('--html', metavar='FILE',
                        help='write a self-contained HTML report here')
    parser.add_argument('--quiet', '-q', action='store_true',
                        help='no text report on standard output')
    parser.add_argument('--blocks', type=int, default=5,
                        help='SQL class blocks in the text report')
    parser.add_argument('--all-lifecycles', action='store_true',
                        help='keep every request\'s span lifecycle in the '
                        'JSON report (more memory)')
    _common(parser)
    return parser


def build_compare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='instrument-report compare',
        description='Compare two runs (before/after a tuning change).')
    parser.add_argument('run_a', metavar='RUN_A',
                        help='JSON report or span files of the first run')
    parser.add_argument('run_b', metavar='RUN_B',
                        help='JSON report or span files of the second run')
    parser.add_argument('--alpha', type=float, default=0.05,
                        help='significance level (default 0.05)')
    parser.add_argument('--top', type=int, default=10,
                        help='top SQL classes of each run (default 10)')
    parser.add_argument('--json', metavar='FILE',
                        help='write the comparison as JSON here')
    _common(parser)
    return parser


def _options(args, all_lifecycles: bool = False):
    from instrument.analysis import pipeline
    try:
        sqldigest.normalise_order(args.order_by)
        for value in (args.since, args.until):
            if value and not value.startswith('+'):
                sqldigest.parse_time(value)
    except ValueError as exc:
        raise SystemExit('instrument-report: error: %s' % exc) from None
    return pipeline.Options(
        jobs=args.jobs, idle_s=args.horizon, hung_s=args.hung,
        since=args.since, until=args.until, group_by=args.group_by,
        order_by=args.order_by, limit=args.limit,
        all_lifecycles=all_lifecycles,
        progress=None if args.no_progress else progress.ProgressLine())


def _analyse(inputs: list, opts) -> dict:
    from instrument.analysis import load
    from instrument.analysis import pipeline
    try:
        return pipeline.analyse(inputs, opts)
    except load.InputError as exc:
        raise SystemExit('instrument-report: error: %s' % exc) from None


def _load_run(arg: str, opts) -> dict:
    from instrument.analysis import report_json
    if os.path.isfile(arg) and report_json.is_report(arg):
        try:
            return report_json.read(arg)
        except ValueError as exc:
            raise SystemExit('instrument-report: error: %s' % exc) \
                from None
    return _analyse([arg], opts)


def main_compare(argv: list) -> int:
    from instrument.analysis import compare
    from instrument.analysis import report_json
    args = build_compare_parser().parse_args(argv)
    opts = _options(args)
    run_a = _load_run(args.run_a, opts)
    run_b = _load_run(args.run_b, opts)
    result = compare.compare(run_a, run_b, alpha=args.alpha, top=args.top)
    sys.stdout.write(compare.render(result, args.run_a, args.run_b))
    if args.json:
        report_json.write(result, args.json)
    return 0


def main(argv: list = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == 'compare':
        return main_compare(argv[1:])
    args = build_parser().parse_args(argv)
    opts = _options(args, all_lifecycles=args.all_lifecycles)
    report = _analyse(args.inputs, opts)
    from instrument.analysis import report_html
    from instrument.analysis import report_json
    from instrument.analysis import report_text
    if not args.quiet:
        sys.stdout.write(report_text.render(report, sql_blocks=args.blocks))
    if args.json:
        report_json.write(report, args.json)
    if args.html:
        with open(args.html, 'w', encoding='utf-8') as out:
            out.write(report_html.render(report))
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
