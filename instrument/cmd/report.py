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
    instrument-report export --parquet DIR [options] INPUT...

The text report goes to standard output (``--quiet`` leaves it out);
``--json FILE`` and ``--html FILE`` write the other forms, ``-`` for
standard output (the text report is then left out).  A RUN of
``compare`` is a JSON report written by ``--json``, or the span files
(a directory or glob) of the run.  ``export`` writes the analysis and
the span records as Parquet tables for DuckDB, Spark or Trino
(doc/source/export.rst).  In a directory, files that are not
span files (a JSON report, the demo's ``servers.json``) are skipped and
named in the report's input problems.

Exit status: 0 done; 1 a library of the ``report`` extra is missing
(one line says what to install); 2 bad usage, or no usable input (no
span record at all, a compare side with nothing to compare).
"""

import argparse
import importlib
import os
import re
import sys
import typing

from instrument.analysis import sqldigest
from instrument.cmd import progress

PROG = 'instrument-report'
# The libraries of the ``report`` extra (setup.cfg), as imported.
EXTRA_MODULES = ('numpy', 'scipy', 'orjson', 'msgspec', 'duckdb')
INSTALL_HINT = "pip install 'openstack-instrument[report]'"
EXIT_MISSING = 1
EXIT_USAGE = 2
STDOUT = '-'


# a size as DuckDB's memory_limit takes it
_SIZE = re.compile(r'\d+(\.\d+)?\s*([KMGT]i?B|B)', re.IGNORECASE)


def memory_size(text: str) -> str:
    """``--memory-limit``: a size such as ``1GB``, ``512MiB``."""
    if not _SIZE.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(
            'not a size: %r (examples: 1GB, 512MB, 2GiB)' % text)
    return text.strip()


def fail(message: str, status: int = EXIT_USAGE) -> typing.NoReturn:
    """One line on standard error, then exit with ``status``."""
    sys.stderr.write('%s: error: %s\n' % (PROG, message))
    sys.stderr.flush()
    raise SystemExit(status)


def analysis(*names: str) -> list:
    """The modules ``instrument.analysis.<name>``; when a library of the
    ``report`` extra is missing, one line says what to install and the
    command exits with status 1 (never a traceback)."""
    try:
        return [importlib.import_module('instrument.analysis.' + name)
                for name in names]
    except ModuleNotFoundError as exc:
        top = (exc.name or '').split('.')[0]
        if top not in EXTRA_MODULES:
            raise
        fail('the analyser needs %s, which is not installed in this '
             'Python environment (%s); install the report extra: %s' % (
                 top, sys.executable, INSTALL_HINT), EXIT_MISSING)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--jobs', '-j', type=int, default=0,
                        help='worker processes, and DuckDB threads with '
                        '--engine duckdb (default: 1 for small inputs, '
                        'else up to 4, one per CPU; DuckDB: one per CPU)')
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
                        help='only what started from TIME on: requests '
                        '(with all their spans and SQL), SQL statements '
                        'and DB retries; ISO 8601 (UTC unless it says), '
                        'epoch seconds, or +10m after the first RPC span')
    parser.add_argument('--until', metavar='TIME',
                        help='only what started before TIME (as --since)')
    parser.add_argument('--no-progress', action='store_true',
                        help='no progress line on standard error')
    parser.add_argument('--engine', default='python',
                        choices=('python', 'duckdb'),
                        help='engine of the SQL digest: python (while '
                        'reading the spans) or duckdb (columnar, from the '
                        'same files; same results)')
    parser.add_argument('--memory-limit', metavar='SIZE', default='1GB',
                        type=memory_size,
                        help='memory DuckDB may hold (--engine duckdb, '
                        'export), beyond which it writes to a temp '
                        'directory under TMPDIR; DuckDB sizes: 1GB, '
                        '512MB (default 1GB)')


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
                        help='write the JSON report (every request) here; '
                        '"-": standard output, instead of the text report')
    parser.add_argument('--html', metavar='FILE',
                        help='write a self-contained HTML report here; '
                        '"-": standard output, instead of the text report')
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
                        help='write the comparison as JSON here; "-": '
                        'standard output, instead of the text')
    _common(parser)
    return parser


def _options(args, all_lifecycles: bool = False):
    pipeline, window = analysis('pipeline', 'window')
    try:
        sqldigest.normalise_order(args.order_by)
        window.check(args.since, args.until)
    except ValueError as exc:
        fail(str(exc))
    return pipeline.Options(
        jobs=args.jobs, idle_s=args.horizon, hung_s=args.hung,
        since=args.since, until=args.until, group_by=args.group_by,
        order_by=args.order_by, limit=args.limit,
        all_lifecycles=all_lifecycles, engine=args.engine,
        memory_limit=args.memory_limit,
        progress=None if args.no_progress else progress.ProgressLine())


def _names(names: list, limit: int = 3) -> str:
    shown = ', '.join(names[:limit])
    return shown + (' and %d more' % (len(names) - limit)
                    if len(names) > limit else '')


def no_records(report: dict) -> typing.Optional[str]:
    """Why ``report`` holds nothing at all (None when it holds span
    records): its files, their lines and the first bad one."""
    inp = report['inputs']
    if inp['records']:
        return None
    load = report['load']
    files = inp['files']
    why = 'no span records in %d file%s (%s)' % (
        len(files), '' if len(files) == 1 else 's', _names(files))
    if not inp['lines']:
        return why + ': nothing but empty lines'
    bad = ['%s %d' % (k, v) for k, v in load['counts'].items() if v]
    if load.get('other_lines'):
        bad.append('not a record %d' % load['other_lines'])
    why += ': %d line%s, %s' % (inp['lines'],
                                '' if inp['lines'] == 1 else 's',
                                ', '.join(bad))
    for samples in load['samples'].values():
        if samples:
            fname, lineno, reason = samples[0]
            why += '; first %s:%d: %s' % (fname, lineno, reason[:120])
            break
    return why


def _analyse(inputs: list, opts, side: str = '') -> dict:
    load, pipeline, columnar = analysis('load', 'pipeline', 'columnar')
    try:
        report = pipeline.analyse(inputs, opts)
    except load.InputError as exc:
        fail(side + str(exc))
    except columnar.EngineMissing as exc:
        fail(str(exc), EXIT_MISSING)
    except columnar.OutOfMemory as exc:
        fail(str(exc), EXIT_MISSING)
    problem = no_records(report)
    if problem:
        skipped = [p for p in report['load']['problems']
                   if p.startswith('skipped ')]
        fail(side + problem + ''.join('; ' + p for p in skipped))
    return report


def unusable(report: dict) -> typing.Optional[str]:
    """Why a run cannot be compared (None when it can)."""
    (pipeline,) = analysis('pipeline')
    for key in ('report_version', 'inputs', 'summary', 'requests', 'sql'):
        if not isinstance(report.get(key), (dict, list, int)):
            return 'not an instrument-report JSON report (no %r)' % key
    if report['report_version'] != pipeline.REPORT_VERSION:
        return 'report version %r; this instrument-report reads %d' % (
            report['report_version'], pipeline.REPORT_VERSION)
    problem = no_records(report)
    if problem:
        return problem
    if not report['requests'] and not report['sql'].get('calls'):
        return 'no request and no SQL statement to compare'
    return None


def _load_run(side: str, arg: str, opts) -> dict:
    (report_json,) = analysis('report_json')
    where = '%s %s: ' % (side, arg)
    if os.path.isfile(arg) and report_json.is_report(arg):
        try:
            run = report_json.read(arg)
        except (OSError, ValueError) as exc:
            fail(where + str(exc))
    else:
        run = _analyse([arg], opts, where)
    problem = unusable(run)
    if problem:
        fail(where + problem)
    return run


def _to_stdout(args) -> bool:
    """Does a ``--json -`` or ``--html -`` take standard output?"""
    wanted = [name for name in ('json', 'html')
              if getattr(args, name, None) == STDOUT]
    if len(wanted) > 1:
        fail('--json - and --html - cannot both write to standard output')
    return bool(wanted)


def _write(path: str, text: str) -> None:
    if path == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        with open(path, 'w', encoding='utf-8') as out:
            out.write(text)
    except OSError as exc:
        fail('cannot write %s: %s' % (path, exc))


def main_compare(argv: list) -> int:
    args = build_compare_parser().parse_args(argv)
    compare, report_json = analysis('compare', 'report_json')
    piped = _to_stdout(args)
    opts = _options(args)
    run_a = _load_run('RUN_A', args.run_a, opts)
    run_b = _load_run('RUN_B', args.run_b, opts)
    result = compare.compare(run_a, run_b, alpha=args.alpha, top=args.top)
    if not piped:
        sys.stdout.write(compare.render(result, args.run_a, args.run_b))
    if args.json:
        _write(args.json, report_json.dumps(result) + '\n')
    return 0


def build_export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='instrument-report export',
        description='Write the analysis and the span records as Parquet '
        'tables partitioned by day and host (events, spans, SQL '
        'statements and classes, requests and their components, host '
        'offsets), for DuckDB, Spark or Trino.')
    parser.add_argument('inputs', nargs='+', metavar='INPUT',
                        help='span files, directories, globs (.gz too)')
    parser.add_argument('--parquet', metavar='DIR', required=True,
                        help='directory to write the tables in (one '
                        'sub-directory per table, replaced)')
    _common(parser)
    return parser


def main_export(argv: list) -> int:
    args = build_export_parser().parse_args(argv)
    load, columnar = analysis('load', 'columnar')
    opts = _options(args)
    try:
        result = columnar.export(args.inputs, args.parquet, opts)
    except load.InputError as exc:
        fail(str(exc))
    except columnar.EngineMissing as exc:
        fail(str(exc), EXIT_MISSING)
    except columnar.OutOfMemory as exc:
        fail(str(exc), EXIT_MISSING)
    counts = result['load'].issues.counts
    sys.stdout.write('%s: %s\n' % (args.parquet, ', '.join(
        '%s %d' % kv for kv in result['rows'].items())))
    bad = ', '.join('%s %d' % kv for kv in counts.items() if kv[1])
    if bad:
        sys.stdout.write('bad lines left out: %s\n' % bad)
    return 0


def main(argv: list = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == 'compare':
        return main_compare(argv[1:])
    if argv and argv[0] == 'export':
        return main_export(argv[1:])
    args = build_parser().parse_args(argv)
    report_html, report_json, report_text = analysis(
        'report_html', 'report_json', 'report_text')
    piped = _to_stdout(args)
    opts = _options(args, all_lifecycles=args.all_lifecycles)
    report = _analyse(args.inputs, opts)
    if not args.quiet and not piped:
        sys.stdout.write(report_text.render(report, sql_blocks=args.blocks))
    if args.json:
        _write(args.json, report_json.dumps(report) + '\n')
    if args.html:
        _write(args.html, report_html.render(report))
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
