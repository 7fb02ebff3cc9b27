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

What can be checked before the analysis, which may take minutes, is:
the output files (their directory exists and they can be written; no
file is left behind) and both runs of ``compare`` (they exist; a JSON
report is read and must be comparable).  After the analysis every
output that can be written is, and each that cannot is named.  A
``--since``/``--until`` window in which no request started gives the
(empty) report and a warning on standard error, not an error.

Exit status: 0 done; 1 a library of the ``report`` extra is missing
(one line says what to install); 2 bad usage, no usable input (no
span record at all, a compare side with nothing to compare, or that is
another tool's JSON), or an output that cannot be written.
"""

import argparse
import importlib
import json
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


def empty_window(report: dict) -> typing.Optional[str]:
    """What a ``--since``/``--until`` window that no request started in
    left of the report (None when there is no window, or a request in
    it): the report is written all the same, empty."""
    (report_text,) = analysis('report_text')
    win = report.get('window') or {}
    since, until = win.get('since_us'), win.get('until_us')
    if (since is None and until is None) or report['requests']:
        return None
    what = 'no request started in the window %s .. %s' % (
        report_text.fmt_time(since) if since is not None else '(start)',
        report_text.fmt_time(until) if until is not None else '(end)')
    calls = report['sql'].get('calls') or 0
    what += (', %d SQL statement%s did' % (calls, '' if calls == 1 else 's')
             if calls else ' (nor any SQL statement)')
    inp = report['inputs']
    first, last = inp.get('first_us'), inp.get('last_us')
    if first is not None and last is not None:
        what += '; the input spans %s .. %s' % (
            report_text.fmt_time(first), report_text.fmt_time(last))
    return what + ' (corrected clock, UTC)'


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


# the largest file that ``compare`` reads whole to tell a JSON document
# that is not a report from span records
MAX_OTHER_JSON = 64 << 20


def _other_json(path: str) -> typing.Any:
    """The JSON document in ``path``, which has no span record near its
    start (``load.sniff``); None when it holds none (or is too large to
    tell): its span records, if any, are for the analysis to find."""
    try:
        if os.path.getsize(path) > MAX_OTHER_JSON:
            return None
        with open(path, 'rb') as src:
            head = src.read(MAX_OTHER_JSON)
        if head.lstrip()[:1] not in (b'{', b'['):
            return None
        return json.loads(head)
    except (OSError, ValueError):
        return None


def _check_run(side: str, arg: str) -> typing.Optional[dict]:
    """A ``compare`` run checked before either run is analysed: the JSON
    report it names, read and found comparable; or None for span input
    (files, a directory, a glob) in which discovery finds files to read.
    Anything else exits with one line naming the run."""
    load, report_json = analysis('load', 'report_json')
    where = '%s %s: ' % (side, arg)
    run = None
    if os.path.isfile(arg):
        try:
            if report_json.is_report(arg):
                run = report_json.read(arg)
            elif load.sniff(arg) == 'other':
                run = _other_json(arg)
                if run is not None and not (
                        isinstance(run, dict) and 'report_version' in run):
                    fail(where + 'not an instrument-report JSON report '
                         'nor span records (JSON without '
                         '"report_version"; write a report with '
                         'instrument-report --json)')
        except (OSError, ValueError) as exc:
            fail(where + str(exc))
    if run is None:
        files, problems = load.discover([arg])
        if not files:
            fail(where + 'no span files to read: ' + '; '.join(problems))
        return None
    problem = unusable(run)
    if problem:
        fail(where + problem)
    return run


def _load_run(side: str, arg: str, opts,
              run: typing.Optional[dict] = None) -> dict:
    """``run`` (a report ``_check_run`` read), or the analysis of the
    span input ``arg``, found comparable."""
    if run is not None:
        return run
    where = '%s %s: ' % (side, arg)
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


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def unwritable(path: str) -> typing.Optional[str]:
    """Why the output file ``path`` cannot be written (None when it can
    be, or is ``-``), found before the analysis, which may take
    minutes.  Leaves the file system as it was: an existing file is
    opened to append nothing, a new one is created and removed."""
    if path == STDOUT:
        return None
    if os.path.isdir(path):
        return 'it is a directory'
    if os.path.exists(path):
        if not os.path.isfile(path):
            # a device or a pipe (/dev/stdout, bash's >(jq .)): opening
            # it could block, or be all a reader waits for
            return None if os.access(path, os.W_OK) else \
                'permission denied'
        target, flags = path, os.O_WRONLY | os.O_APPEND
    else:
        # a new file (where a dangling symbolic link points, if one)
        target = os.path.realpath(path)
        if not os.path.isdir(os.path.dirname(target)):
            return 'no directory %s' % os.path.dirname(target)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(target, flags, 0o666)
    except OSError as exc:
        return _reason(exc)
    os.close(fd)
    if flags & os.O_CREAT:
        try:
            os.unlink(target)
        except OSError:  # pragma: no cover - removed meanwhile
            pass
    return None


def _check_outputs(args) -> None:
    """Refuse an output that cannot be written before analysing."""
    for name in ('json', 'html'):
        path = getattr(args, name, None)
        why = unwritable(path) if path else None
        if why:
            fail('cannot write %s: %s' % (path, why))


def _write(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` (``-``: standard output); when it
    cannot, say why in one line on standard error and return False."""
    if path == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return True
    try:
        with open(path, 'w', encoding='utf-8') as out:
            out.write(text)
    except OSError as exc:
        sys.stderr.write('%s: error: cannot write %s: %s\n' % (
            PROG, path, _reason(exc)))
        sys.stderr.flush()
        return False
    return True


def _write_all(outputs: list) -> int:
    """Write every ``(path, render)`` whose path is set, also after one
    that cannot be written; EXIT_USAGE when any could not be."""
    failed = False
    for path, render in outputs:
        if path and not _write(path, render()):
            failed = True
    return EXIT_USAGE if failed else 0


def main_compare(argv: list) -> int:
    args = build_compare_parser().parse_args(argv)
    compare, report_json = analysis('compare', 'report_json')
    piped = _to_stdout(args)
    opts = _options(args)
    _check_outputs(args)
    # both runs checked before either is analysed (which takes time)
    read_a = _check_run('RUN_A', args.run_a)
    read_b = _check_run('RUN_B', args.run_b)
    run_a = _load_run('RUN_A', args.run_a, opts, read_a)
    run_b = _load_run('RUN_B', args.run_b, opts, read_b)
    result = compare.compare(run_a, run_b, alpha=args.alpha, top=args.top)
    if not piped:
        sys.stdout.write(compare.render(result, args.run_a, args.run_b))
    status = _write_all([
        (args.json, lambda: report_json.dumps(result) + '\n')])
    if status:
        raise SystemExit(status)
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
    _check_outputs(args)
    report = _analyse(args.inputs, opts)
    empty = empty_window(report)
    if empty:
        sys.stderr.write('%s: warning: %s\n' % (PROG, empty))
        sys.stderr.flush()
    if not args.quiet and not piped:
        sys.stdout.write(report_text.render(report, sql_blocks=args.blocks))
    # every output that can be written is, also after one that cannot
    status = _write_all([
        (args.json, lambda: report_json.dumps(report) + '\n'),
        (args.html, lambda: report_html.render(report))])
    if status:
        raise SystemExit(status)
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
