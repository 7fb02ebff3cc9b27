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
    instrument-report sweep [options] [KEY=VALUE[,...]:]RUN...
    instrument-report export --parquet DIR [options] INPUT...
    instrument-report points [--json] [--config-file FILE]...
    instrument-report follow [--port N] [--textfile FILE] [--once] DIR...

The text report goes to standard output (``--quiet`` leaves it out);
``--json FILE`` and ``--html FILE`` write the other forms, ``-`` for
standard output (the text report is then left out).  A RUN of
``compare`` is a JSON report written by ``--json``, or the span files
(a directory or glob) of the run.  ``export`` writes the analysis and
the span records as Parquet tables for DuckDB, Spark or Trino
(doc/source/export.rst).  ``points`` reads no span file: it lists what
this host's nova would record, as configured, with a Nagios exit
status (``instrument.cmd.points``, doc/source/metrics.rst).
``follow`` reads span files as they grow and exports per-operation
Prometheus metrics of the requests that finished, and the advisor's
findings over a window of the last minutes (doc/source/metrics.rst).
``sweep`` puts N runs of growing load side by side
(doc/source/sweep.rst): a RUN is a JSON report, a directory that holds
one (the demo's output) or span files, labelled on the
command line (``concurrency=20:runs/c20``) or by the ``run.json`` it
holds.  In a directory, files that are not span files (a JSON report,
the demo's ``servers.json``) are skipped and named in the report's
input problems.

What can be checked before the analysis, which may take minutes, is:
every output, of every subcommand, by one rule (``check_outputs``: not
an input by any path, not inside an input directory, nor replacing a
directory that holds one; its directory exists and it can be written;
no file is left behind) and both runs of ``compare`` (they exist; a
JSON report is read and must be comparable).  After the analysis every
output that can be written is, and each that cannot is named.  A
``--since``/``--until`` window in which no request started gives the
(empty) report and a warning on standard error, not an error; so does
input that lost records, SQL statements or the end of a file (the
warning every form of the report carries).

Exit status: 0 done; 1 a library of the ``report`` extra is missing
(one line says what to install); 2 bad usage (an unknown option, a
number out of its range), no usable input (no span record at all, a
compare side with nothing to compare, or that is another tool's JSON),
or an output that cannot be written.  Every error is one line on
standard error.
"""

import argparse
import gc
import glob
import importlib
import json
import math
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import typing

from instrument.analysis.model import sqldigest
from instrument.cmd import metrics as metrics_cmd
from instrument.cmd import points as points_cmd
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


def _number(text: str, kind: type, what: str) -> typing.Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError('not %s: %r' % (what, text)) from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError('not %s: %r' % (what, text))
    return value


def count(text: str) -> int:
    """A whole number, 0 or more (``--limit``, ``--blocks``,
    ``--top``)."""
    value = _number(text, int, 'a whole number')
    if value < 0:
        raise argparse.ArgumentTypeError('must be 0 or more, not %s' % text)
    return value


def workers(text: str) -> int:
    """A whole number, 1 or more (``--jobs``)."""
    value = _number(text, int, 'a whole number')
    if value < 1:
        raise argparse.ArgumentTypeError(
            'must be 1 or more (leave it out for the default), not %s' % text
        )
    return value


def seconds(text: str) -> float:
    """A finite number of seconds above 0 (``--horizon``, ``--hung``)."""
    value = _number(text, float, 'a number of seconds')
    if not value > 0:
        raise argparse.ArgumentTypeError(
            'must be more than 0 seconds, not %s' % text
        )
    return value


def level(text: str) -> float:
    """A significance level, between 0 and 1 (``--alpha``)."""
    value = _number(text, float, 'a number')
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            'must be between 0 and 1 (e.g. 0.05), not %s' % text
        )
    return value


def memory_size(text: str) -> str:
    """``--memory-limit``: a size such as ``1GB``, ``512MiB``."""
    if not _SIZE.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(
            'not a size: %r (examples: 1GB, 512MB, 2GiB)' % text
        )
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
        return [
            importlib.import_module('instrument.analysis.' + name)
            for name in names
        ]
    except ModuleNotFoundError as exc:
        top = (exc.name or '').split('.')[0]
        if top not in EXTRA_MODULES:
            raise
        fail(
            'the analyser needs %s, which is not installed in this '
            'Python environment (%s); install the report extra: %s'
            % (top, sys.executable, INSTALL_HINT),
            EXIT_MISSING,
        )


class Parser(argparse.ArgumentParser):
    """Bad usage (an unknown option, a number out of range) is one
    line on standard error, as every other error, and exit status 2."""

    def error(self, message: str) -> typing.NoReturn:
        sys.stderr.write(
            '%s: error: %s (see %s --help)\n' % (self.prog, message, self.prog)
        )
        sys.stderr.flush()
        raise SystemExit(EXIT_USAGE)


def _finality(parser: argparse.ArgumentParser, verb: str) -> None:
    """--horizon and --hung: when a request is final, as the batch
    report and the follow mode both decide it."""
    parser.add_argument(
        '--horizon',
        type=seconds,
        default=30.0,
        metavar='SECONDS',
        help='a finished request is final after this much '
        'quiet input time (default 30)',
    )
    parser.add_argument(
        '--hung',
        type=seconds,
        default=600.0,
        metavar='SECONDS',
        help='a request without an outcome is %s '
        'incomplete after this much quiet input time '
        '(default 600)' % verb,
    )


def _common(parser: argparse.ArgumentParser, export: bool = False) -> None:
    parser.add_argument(
        '--jobs',
        '-j',
        type=workers,
        default=None,
        help='worker processes (default: 1 for small '
        'inputs, else up to 4, one per idle CPU)',
    )
    _finality(parser, 'reported')
    parser.add_argument(
        '--group-by',
        default='fingerprint',
        choices=sqldigest.GROUPS,
        help='SQL digest classes (default fingerprint)',
    )
    parser.add_argument(
        '--order-by',
        default='sum',
        help='SQL profile order: %s, or pt-query-digest '
        'style Query_time:sum (default sum)' % ', '.join(sqldigest.ORDERS),
    )
    parser.add_argument(
        '--limit',
        type=count,
        default=20,
        help='SQL classes shown (0: all; default 20)',
    )
    parser.add_argument(
        '--since',
        metavar='TIME',
        help='only what started from TIME on: requests '
        '(with all their spans and SQL), SQL statements '
        'and DB retries; ISO 8601 (UTC unless it says), '
        'epoch seconds, or +10m after the first request '
        'started',
    )
    parser.add_argument(
        '--until',
        metavar='TIME',
        help='only what started before TIME (as --since)',
    )
    parser.add_argument(
        '--no-progress',
        action='store_true',
        help='no progress line on standard error',
    )
    # Deprecated (2026.2), removed in the next release: one reader
    # computes every report (doc/source/engines.rst); accepted, with a
    # warning, so that scripts keep working meanwhile.
    parser.add_argument(
        '--engine',
        choices=('python', 'duckdb'),
        help='deprecated and ignored: every report is '
        'computed by one reader (removed in the next '
        'release)',
    )
    if export:
        parser.add_argument(
            '--memory-limit',
            metavar='SIZE',
            default='1GB',
            type=memory_size,
            help='memory DuckDB may hold while it writes '
            'the tables, beyond which it writes to a temp '
            'directory under TMPDIR; DuckDB sizes: 1GB, '
            '512MB (default 1GB)',
        )
    else:
        parser.add_argument(
            '--memory-limit',
            metavar='SIZE',
            type=memory_size,
            help='deprecated and ignored (it bounded '
            '--engine duckdb; export takes it)',
        )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog='instrument-report',
        description='Analyse span files written by openstack-instrument: '
        'clock correction, request lifecycles, failures, time per '
        'component, SQL digest.  "instrument-report compare RUN_A RUN_B" '
        'compares two runs; "instrument-report sweep RUN..." puts runs '
        'of growing load side by side; "instrument-report export '
        '--parquet DIR INPUT..." writes the analysis and the span '
        'records as Parquet tables (each has its own --help).',
    )
    parser.add_argument(
        'inputs',
        nargs='+',
        metavar='INPUT',
        help='span files, directories, globs (.gz too)',
    )
    parser.add_argument(
        '--json',
        metavar='FILE',
        help='write the JSON report (every request) here; '
        '"-": standard output, instead of the text report',
    )
    parser.add_argument(
        '--html',
        metavar='FILE',
        help='write a self-contained HTML report here; '
        '"-": standard output, instead of the text report',
    )
    parser.add_argument(
        '--quiet',
        '-q',
        action='store_true',
        help='no text report on standard output',
    )
    parser.add_argument(
        '--blocks',
        type=count,
        default=5,
        help='SQL class blocks in the text report (default 5)',
    )
    parser.add_argument(
        '--all-lifecycles',
        action='store_true',
        help='keep every request\'s span lifecycle in the '
        'JSON report (more memory)',
    )
    _common(parser)
    return parser


def build_compare_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog='instrument-report compare',
        description='Compare two runs (before/after a tuning change).',
    )
    parser.add_argument(
        'run_a',
        metavar='RUN_A',
        help='JSON report or span files of the first run',
    )
    parser.add_argument(
        'run_b',
        metavar='RUN_B',
        help='JSON report or span files of the second run',
    )
    parser.add_argument(
        '--alpha',
        type=level,
        default=0.05,
        help='significance level, between 0 and 1 (default 0.05)',
    )
    parser.add_argument(
        '--top',
        type=count,
        default=10,
        help='top SQL classes of each run (default 10)',
    )
    parser.add_argument(
        '--json',
        metavar='FILE',
        help='write the comparison as JSON here; "-": '
        'standard output, instead of the text',
    )
    _common(parser)
    return parser


def _options(args, all_lifecycles: bool = False, export: bool = False):
    pipeline, window = analysis('pipeline', 'ingest.window')
    try:
        sqldigest.normalise_order(args.order_by)
        window.check(args.since, args.until)
    except ValueError as exc:
        fail(str(exc))
    deprecated(args, export)
    return pipeline.Options(
        jobs=args.jobs or 0,
        idle_s=args.horizon,
        hung_s=args.hung,
        since=args.since,
        until=args.until,
        group_by=args.group_by,
        order_by=args.order_by,
        limit=args.limit,
        all_lifecycles=all_lifecycles,
        progress=None if args.no_progress else progress.ProgressLine(),
    )


def deprecated(args: argparse.Namespace, export: bool = False) -> None:
    """A warning for each deprecated option given (``--engine``;
    ``--memory-limit`` but to ``export``), which changes nothing."""
    if args.engine is not None:
        warn(
            '--engine is deprecated and ignored: every report is '
            'computed by one reader, whatever the engine named (the '
            'option will be removed in the next release)'
        )
    if not export and args.memory_limit is not None:
        warn(
            '--memory-limit is deprecated and ignored here: it bounds '
            'DuckDB in "instrument-report export" only (the option will '
            'be removed from the report and compare in the next '
            'release)'
        )


def _names(names: list, limit: int = 3) -> str:
    shown = ', '.join(names[:limit])
    return shown + (
        ' and %d more' % (len(names) - limit) if len(names) > limit else ''
    )


def no_records(report: dict) -> typing.Optional[str]:
    """Why ``report`` holds nothing at all (None when it holds span
    records): its files, their lines and the first bad one."""
    inp = report['inputs']
    if inp['records']:
        return None
    load = report['load']
    files = inp['files']
    why = 'no span records in %d file%s (%s)' % (
        len(files),
        '' if len(files) == 1 else 's',
        _names(files),
    )
    if not inp['lines']:
        return why + ': nothing but empty lines'
    bad = ['%s %d' % (k, v) for k, v in load['counts'].items() if v]
    if load.get('other_lines'):
        bad.append('not a record %d' % load['other_lines'])
    why += ': %d line%s, %s' % (
        inp['lines'],
        '' if inp['lines'] == 1 else 's',
        ', '.join(bad),
    )
    first = min(
        (s for samples in load['samples'].values() for s in samples),
        key=lambda s: (s[0], s[1]),
        default=None,
    )
    if first:
        fname, lineno, reason = first
        why += '; first %s:%d: %s' % (fname, lineno, reason[:120])
    return why


def _analyse(inputs: list, opts, side: str = '') -> dict:
    spanfiles, pipeline = analysis('ingest.spanfiles', 'pipeline')
    try:
        report = pipeline.analyse(inputs, opts)
    except spanfiles.InputError as exc:
        fail(side + str(exc))
    problem = no_records(report)
    if problem:
        skipped = [
            p for p in report['load']['problems'] if p.startswith('skipped ')
        ]
        fail(side + problem + ''.join('; ' + p for p in skipped))
    return report


def empty_window(report: dict) -> typing.Optional[str]:
    """What a ``--since``/``--until`` window that no request started in
    left of the report (None when there is no window, or a request in
    it): the report is written all the same, empty."""
    (fmt,) = analysis('render.fmt')
    win = report.get('window') or {}
    since, until = win.get('since_us'), win.get('until_us')
    if (since is None and until is None) or report['requests']:
        return None
    what = 'no request started in the window %s .. %s' % (
        fmt.fmt_time(since) if since is not None else '(start)',
        fmt.fmt_time(until) if until is not None else '(end)',
    )
    calls = report['sql'].get('calls') or 0
    what += (
        ', %d SQL statement%s did' % (calls, '' if calls == 1 else 's')
        if calls
        else ' (nor any SQL statement)'
    )
    inp = report['inputs']
    first, last = inp.get('first_us'), inp.get('last_us')
    if first is not None and last is not None:
        what += '; the input spans %s .. %s' % (
            fmt.fmt_time(first),
            fmt.fmt_time(last),
        )
    return what + ' (corrected clock, UTC)'


def warn(message: str) -> None:
    """One line on standard error, ``--quiet`` or not."""
    sys.stderr.write('%s: warning: %s\n' % (PROG, message))
    sys.stderr.flush()


def warn_losses(report: dict, side: str = '') -> None:
    """Say on standard error that ``report`` was computed from input
    with losses (whatever else is written, or not: ``--quiet``,
    ``--json``), as each of its forms says beside its figures."""
    (views,) = analysis('render.views')
    text = views.loss_text(report.get('quality') or {})
    if text:
        warn(side + text)


def unusable(report: dict) -> typing.Optional[str]:
    """Why a run cannot be compared (None when it can)."""
    (pipeline,) = analysis('pipeline')
    for key in ('report_version', 'inputs', 'summary', 'requests', 'sql'):
        if not isinstance(report.get(key), (dict, list, int)):
            return 'not an instrument-report JSON report (no %r)' % key
    if report['report_version'] != pipeline.REPORT_VERSION:
        return 'report version %r; this instrument-report reads %d' % (
            report['report_version'],
            pipeline.REPORT_VERSION,
        )
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
    start (``spanfiles.sniff``); None when it holds none (or is too large to
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
    spanfiles, report_json = analysis('ingest.spanfiles', 'render.json')
    where = '%s %s: ' % (side, arg)
    run = None
    if os.path.isfile(arg):
        try:
            if report_json.is_report(arg):
                run = report_json.read(arg)
            elif spanfiles.sniff(arg) == 'other':
                run = _other_json(arg)
                if run is not None and not (
                    isinstance(run, dict) and 'report_version' in run
                ):
                    fail(
                        where + 'not an instrument-report JSON report '
                        'nor span records (JSON without '
                        '"report_version"; write a report with '
                        'instrument-report --json)'
                    )
        except (OSError, ValueError) as exc:
            fail(where + str(exc))
    if run is None:
        found, problems = spanfiles.discover([arg])
        if not found:
            fail(where + 'no span files to read: ' + '; '.join(problems))
        return None
    problem = unusable(run)
    if problem:
        fail(where + problem)
    return run


def _load_run(
    side: str, arg: str, opts, run: typing.Optional[dict] = None
) -> dict:
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
    wanted = [
        name
        for name in ('json', 'html')
        if getattr(args, name, None) == STDOUT
    ]
    if len(wanted) > 1:
        fail('--json - and --html - cannot both write to standard output')
    return bool(wanted)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _ident(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino)


class Inputs:
    """What a command reads, by identity (device and inode, so a path
    through a symbolic link, another spelling or a hard link is the
    same file): the files and directories named on the command line
    (globs expanded), and every file and directory under those
    directories (symbolic links followed, as ``spanfiles.discover`` does).
    """

    def __init__(self, args: typing.Iterable[str]) -> None:
        # (device, inode): the path as found
        self.files: dict = {}
        self.dirs: dict = {}
        for arg in args:
            if arg == STDOUT:
                continue
            if any(c in arg for c in '*?['):
                matches = sorted(glob.glob(arg, recursive=True))
            else:
                matches = [arg]
            for path in matches:
                self._add(path)

    def _add(self, path: str) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return  # not there: the analysis says so
        if not stat.S_ISDIR(st.st_mode):
            self.files.setdefault(_ident(st), path)
            return
        for root, dirs, files in os.walk(path, followlinks=True):
            try:
                key = _ident(os.stat(root))
            except OSError:
                dirs[:] = []
                continue
            if key in self.dirs and root != path:
                dirs[:] = []
                continue
            self.dirs.setdefault(key, root)
            for name in files:
                full = os.path.join(root, name)
                try:
                    self.files.setdefault(_ident(os.stat(full)), full)
                except OSError:
                    pass

    def which(self, path: str) -> typing.Optional[str]:
        """The input file or directory ``path`` is, as the system
        resolves it or as written (``x/../a``, ``x`` missing), None:
        none."""
        for spelling in (path, os.path.realpath(path)):
            try:
                key = _ident(os.stat(spelling))
            except OSError:
                continue
            found = self.files.get(key) or self.dirs.get(key)
            if found is not None:
                return found
        return None

    def holding(self, path: str) -> typing.Optional[str]:
        """The input directory that ``path`` (which need not exist)
        would be written in, directly or below (None: none)."""
        parent = os.path.dirname(os.path.realpath(path))
        while True:
            try:
                found = self.dirs.get(_ident(os.stat(parent)))
            except OSError:
                found = None
            if found is not None:
                return found
            up = os.path.dirname(parent)
            if up == parent:
                return None
            parent = up

    def under(self, directory: str) -> typing.Optional[str]:
        """An input that lies in ``directory``, or below (None: none)."""
        try:
            key = _ident(os.stat(directory))
        except OSError:
            return None
        for path in list(self.files.values()) + list(self.dirs.values()):
            parent = os.path.realpath(path)
            while True:
                try:
                    if _ident(os.stat(parent)) == key:
                        return path
                except OSError:
                    pass
                up = os.path.dirname(parent)
                if up == parent:
                    break
                parent = up
        return None


def output_problem(
    path: str, inputs: Inputs, replaces: typing.Sequence[str] = ()
) -> typing.Optional[str]:
    """Why the output ``path`` cannot be written (None when it can be,
    or is ``-``): the one rule of every output of every subcommand,
    applied before the analysis, which may take minutes.

    An output is a file (``--json``, ``--html``), or a directory whose
    sub-directories ``replaces`` it replaces (``export --parquet``).
    It must not be an input, lie in an input directory, or (a
    directory) replace a sub-directory that holds an input; its
    directory must exist, and it must be writable.  Leaves the file
    system as it was: an existing file is opened to append nothing, a
    new file or directory is created and removed."""
    if path == STDOUT:
        return None
    same = inputs.which(path)
    if same is not None:
        return 'it is the input %s' % same
    holder = inputs.holding(path)
    if holder is not None:
        return 'it is inside the input directory %s' % holder
    for name in replaces:
        sub = os.path.join(path, name)
        held = inputs.which(sub) or inputs.under(sub)
        if held is not None:
            return '%s, which it replaces, holds the input %s' % (sub, held)
    if replaces:
        return _unwritable_directory(path, replaces)
    return _unwritable_file(path)


def _unwritable_directory(
    path: str, replaces: typing.Sequence[str]
) -> typing.Optional[str]:
    if os.path.exists(path):
        if not os.path.isdir(path):
            return 'it is not a directory'
        for name in replaces:
            sub = os.path.join(path, name)
            if os.path.lexists(sub) and not os.path.isdir(sub):
                return '%s is not a directory' % sub
        try:
            probe = tempfile.mkdtemp(prefix='.instrument-check-', dir=path)
        except OSError as exc:
            return _reason(exc)
        os.rmdir(probe)
        return None
    target = os.path.realpath(path)
    if not os.path.isdir(os.path.dirname(target)):
        return 'no directory %s' % os.path.dirname(target)
    try:
        os.mkdir(target)
    except OSError as exc:
        return _reason(exc)
    os.rmdir(target)
    return None


def _unwritable_file(path: str) -> typing.Optional[str]:
    if os.path.isdir(path):
        return 'it is a directory'
    if os.path.exists(path):
        if not os.path.isfile(path):
            # a device or a pipe (/dev/stdout, bash's >(jq .)): opening
            # it could block, or be all a reader waits for
            return None if os.access(path, os.W_OK) else 'permission denied'
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


def check_outputs(
    outputs: typing.Iterable[tuple], inputs: typing.Iterable[str]
) -> None:
    """Refuse, before the analysis, the first output ``(path,
    replaces)`` (path None: not asked for) that ``output_problem``
    finds a problem with: one line, exit status 2."""
    outputs = [(path, replaces) for path, replaces in outputs if path]
    if not outputs:
        return
    known = Inputs(inputs)
    for path, replaces in outputs:
        why = output_problem(path, known, replaces)
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
        sys.stderr.write(
            '%s: error: cannot write %s: %s\n' % (PROG, path, _reason(exc))
        )
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
    compare, report_json = analysis('compare', 'render.json')
    piped = _to_stdout(args)
    opts = _options(args)
    check_outputs([(args.json, ())], [args.run_a, args.run_b])
    # both runs checked before either is analysed (which takes time)
    read_a = _check_run('RUN_A', args.run_a)
    read_b = _check_run('RUN_B', args.run_b)
    run_a = _load_run('RUN_A', args.run_a, opts, read_a)
    run_b = _load_run('RUN_B', args.run_b, opts, read_b)
    warn_losses(run_a, 'RUN_A %s: ' % args.run_a)
    warn_losses(run_b, 'RUN_B %s: ' % args.run_b)
    result = compare.compare(run_a, run_b, alpha=args.alpha, top=args.top)
    if not piped:
        sys.stdout.write(compare.render(result, args.run_a, args.run_b))
    status = _write_all(
        [(args.json, lambda: report_json.dumps(result) + '\n')]
    )
    if status:
        raise SystemExit(status)
    return 0


def build_export_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog='instrument-report export',
        description='Write the analysis and the span records as Parquet '
        'tables partitioned by day and host (events, spans, SQL '
        'statements and classes, requests and their components, host '
        'offsets), for DuckDB, Spark or Trino.',
    )
    parser.add_argument(
        'inputs',
        nargs='+',
        metavar='INPUT',
        help='span files, directories, globs (.gz too)',
    )
    parser.add_argument(
        '--parquet',
        metavar='DIR',
        required=True,
        help='directory to write the tables in (one '
        'sub-directory per table, replaced)',
    )
    _common(parser, export=True)
    return parser


def main_export(argv: list) -> int:
    args = build_export_parser().parse_args(argv)
    spanfiles, export = analysis('ingest.spanfiles', 'export.parquet')
    opts = _options(args, export=True)
    check_outputs([(args.parquet, tuple(export.EXPORTED))], args.inputs)
    try:
        result = export.export(
            args.inputs, args.parquet, opts, args.memory_limit
        )
    except spanfiles.InputError as exc:
        fail(str(exc))
    except export.WriteFailed as exc:
        fail('cannot write %s: %s' % (args.parquet, exc))
    except export.EngineMissing as exc:
        fail(str(exc), EXIT_MISSING)
    except export.OutOfMemory as exc:
        fail(str(exc), EXIT_MISSING)
    report = result['report']
    warn_losses(report)
    if result['untyped']:
        warn(
            '%d valid records left out of the events table: a value '
            'Parquet\'s 64-bit integers cannot hold' % result['untyped']
        )
    counts = report['load']['counts']
    sys.stdout.write(
        '%s: %s\n'
        % (
            args.parquet,
            ', '.join('%s %d' % kv for kv in result['rows'].items()),
        )
    )
    bad = ', '.join('%s %d' % kv for kv in counts.items() if kv[1])
    if bad:
        sys.stdout.write('bad lines left out: %s\n' % bad)
    return 0


def build_sweep_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog='instrument-report sweep',
        description='Put runs of growing load side by side: per '
        'operation the time per component stacked against the load, '
        'throughput, success, failure and retry rates, each service\'s '
        'CPU and memory, and the load where it stops scaling.',
    )
    parser.add_argument(
        'runs',
        nargs='+',
        metavar='RUN',
        help='[KEY=VALUE[,KEY=VALUE...]:]PATH: a JSON '
        'report, a directory holding report.json (the '
        'demo\'s output), or span files (a directory or '
        'glob); labels not given are read from the '
        'run.json beside it',
    )
    parser.add_argument(
        '--by',
        metavar='KEY',
        help='the label that is the load (default: '
        'concurrency, else the first numeric label that '
        'differs between the runs)',
    )
    parser.add_argument(
        '--json',
        metavar='FILE',
        help='write the sweep as JSON here; "-": standard '
        'output, instead of the text',
    )
    parser.add_argument(
        '--html',
        metavar='FILE',
        help='write an HTML page with the stacked plots '
        'here; "-": standard output, instead of the text',
    )
    _common(parser)
    return parser


# ``KEY=VALUE[,KEY=VALUE...]:PATH``
_LABELLED = re.compile(
    r'((?:[A-Za-z_][\w.-]*=[^,:=]*,)*'
    r'[A-Za-z_][\w.-]*=[^,:=]*):(.+)'
)
RUN_META = 'run.json'
REPORT_NAME = 'report.json'
# the demo's truth, beside run.json: its ``waves`` (``--waves``)
TRUTH_NAME = 'servers.json'


def run_waves(path: str) -> list:
    """The waves the demo booted the run at ``path`` in (the
    ``waves`` of the ``servers.json`` beside its ``run.json``); ``[]``
    when there are none or it cannot be read."""
    base = path if os.path.isdir(path) else os.path.dirname(path)
    try:
        with open(os.path.join(base, TRUTH_NAME), encoding='utf-8') as f:
            waves = json.load(f).get('waves') or []
    except (OSError, ValueError, AttributeError):
        return []
    return [
        {
            'wave': w['wave'],
            'servers': w['servers'],
            'duration_s': w['duration_s'],
            'boots_per_s': w['boots_per_s'],
        }
        for w in waves
        if isinstance(w, dict)
        and {'wave', 'servers', 'duration_s', 'boots_per_s'} <= set(w)
    ]


def run_labels(path: str) -> dict:
    """The labels of the run at ``path`` from the ``run.json`` in it
    (a directory) or beside it (a file, a glob): each scalar value as a
    string; ``{}`` when there is none."""
    base = path if os.path.isdir(path) else os.path.dirname(path)
    meta = os.path.join(base, RUN_META)
    if not os.path.isfile(meta):
        return {}
    try:
        with open(meta, encoding='utf-8') as src:
            data = json.load(src)
    except (OSError, ValueError) as exc:
        fail('%s: not a run description: %s' % (meta, exc))
    if not isinstance(data, dict):
        fail('%s: not a run description (a JSON object)' % meta)
    return {
        str(k): str(v)
        for k, v in data.items()
        if isinstance(v, (str, int, float, bool))
    }


def parse_run(arg: str) -> tuple:
    """``(labels, path)`` of a sweep RUN: the labels given before the
    path override those of its ``run.json``."""
    match = _LABELLED.fullmatch(arg)
    given: dict = {}
    path = arg
    if match and not os.path.exists(arg):
        path = match.group(2)
        for item in match.group(1).split(','):
            k, _sep, v = item.partition('=')
            given[k] = v
    labels = run_labels(path)
    labels.update(given)
    return labels, path


def _sweep_input(path: str) -> str:
    """What a sweep RUN reads: the JSON report a directory holds, else
    the RUN itself."""
    held = os.path.join(path, REPORT_NAME)
    if os.path.isdir(path) and os.path.isfile(held):
        return held
    return path


def main_sweep(argv: list) -> int:
    args = build_sweep_parser().parse_args(argv)
    sweep, report_json = analysis('sweep', 'render.json')
    (sweep_html,) = analysis('render.sweep')
    piped = _to_stdout(args)
    opts = _options(args)
    runs = [parse_run(arg) for arg in args.runs]
    if len(runs) < 2:
        fail('a sweep needs two runs or more, got %d' % len(runs))
    for labels, path in runs:
        if not labels:
            fail(
                '%s: no label (give KEY=VALUE:%s, or a %s beside it)'
                % (path, path, RUN_META)
            )
    check_outputs(
        [(args.json, ()), (args.html, ())], [path for _labels, path in runs]
    )
    # every run checked before any is analysed (which takes time)
    inputs = [_sweep_input(path) for _labels, path in runs]
    read = [_check_run('RUN', path) for path in inputs]
    loaded = []
    for (labels, path), src, got in zip(runs, inputs, read, strict=True):
        report = _load_run('RUN', src, opts, got)
        warn_losses(report, 'RUN %s: ' % path)
        waves = run_waves(path)
        if waves:
            report = dict(report, demo_waves=waves)
        loaded.append((path, labels, report))
    try:
        result = sweep.sweep(loaded, by=args.by)
    except sweep.SweepError as exc:
        fail(str(exc))
    if not piped:
        sys.stdout.write(sweep.render(result))
    status = _write_all(
        [
            (args.json, lambda: report_json.dumps(result) + '\n'),
            (args.html, lambda: sweep_html.render(result)),
        ]
    )
    if status:
        raise SystemExit(status)
    return 0


def build_follow_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog='instrument-report follow',
        description='Read span files as they grow (new files, rotation, '
        'late hosts), finalise requests behind a watermark as the batch '
        'report does, and export per-operation counts, latency '
        'histograms, time per component, failures and the advisor\'s '
        'findings over a window in Prometheus text format '
        '(doc/source/metrics.rst).',
    )
    parser.add_argument(
        'inputs',
        nargs='+',
        metavar='INPUT',
        help='span files, directories (searched recursively), globs',
    )
    parser.add_argument(
        '--port',
        type=port_number,
        default=None,
        help='serve /metrics over HTTP on this port',
    )
    parser.add_argument(
        '--address',
        default='127.0.0.1',
        help='address --port listens on (default 127.0.0.1)',
    )
    parser.add_argument(
        '--textfile',
        metavar='FILE',
        help='write the metrics to FILE after each poll, '
        'atomically (node_exporter\'s textfile '
        'collector: a name ending in .prom)',
    )
    parser.add_argument(
        '--once',
        action='store_true',
        help='read what is there, finalise every request, '
        'write the metrics (standard output when neither '
        '--port nor --textfile) and exit',
    )
    parser.add_argument(
        '--interval',
        type=seconds,
        default=5.0,
        metavar='SECONDS',
        help='seconds between polls (default 5)',
    )
    parser.add_argument(
        '--lag',
        type=non_negative,
        default=30.0,
        metavar='SECONDS',
        help='requests are finalised behind the newest '
        'time read minus this much, then after --horizon '
        'or --hung as the batch report does; hosts whose '
        'lines arrive later than this are late (default '
        '30)',
    )
    _finality(parser, 'counted')
    parser.add_argument(
        '--max-open',
        type=count,
        default=100_000,
        metavar='N',
        help='requests kept open at most; the least '
        'recently active beyond are dropped unfinished '
        'and counted (default 100000)',
    )
    parser.add_argument(
        '--findings-window',
        type=non_negative,
        default=600.0,
        metavar='SECONDS',
        help='the advisor\'s rules run over the records and the '
        'requests of this much input time behind the watermark '
        '(instrument_finding; 0: no findings; default 600; '
        '--once: the whole input)',
    )
    parser.add_argument(
        '--findings-every',
        type=non_negative,
        default=30.0,
        metavar='SECONDS',
        help='seconds between two runs of the rules (0: every poll; '
        'default 30; --once: once, at the end)',
    )
    parser.add_argument(
        '--findings-max-requests',
        type=count,
        default=50_000,
        metavar='N',
        help='finished requests kept in the findings window at most; '
        'those beyond are counted (default 50000)',
    )
    return parser


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = _number(text, int, 'a port number')
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            'a port number is 0 to 65535, got %s' % text
        )
    return value


def non_negative(text: str) -> float:
    """A finite number of seconds, 0 or more (``--lag``)."""
    value = _number(text, float, 'a number of seconds')
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            'a number of seconds, 0 or more, got %s' % text
        )
    return value


def main_follow(
    argv: list, stop: typing.Optional[typing.Callable[[], bool]] = None
) -> int:
    """``instrument-report follow``; ``stop()`` true ends the loop
    (tests; else SIGTERM or Ctrl-C)."""
    args = build_follow_parser().parse_args(argv)
    (follow,) = analysis('follow')
    if not args.once and args.port is None and args.textfile is None:
        fail('follow needs --port or --textfile (or --once)')
    check_outputs([(args.textfile, ())], args.inputs)
    opts = follow.Options(
        lag_s=args.lag,
        idle_s=args.horizon,
        hung_s=args.hung,
        max_open=args.max_open,
        findings_window_s=args.findings_window,
        findings_every_s=args.findings_every,
        findings_max_requests=args.findings_max_requests,
    )
    follower = follow.Follower(args.inputs, opts)
    latest = {'text': ''}
    server = None
    if args.port is not None:
        try:
            server = metrics_cmd.text_server(
                lambda: latest['text'], args.address, args.port
            )
        except OSError as exc:
            fail(
                'cannot listen on %s:%d: %s'
                % (args.address, args.port, _reason(exc))
            )
        threading.Thread(
            target=server.serve_forever,
            daemon=True,
            name='instrument-follow-http',
        ).start()
    stopping = threading.Event()

    def on_term(signum, frame):
        stopping.set()

    previous = (
        signal.signal(signal.SIGTERM, on_term)
        if threading.current_thread() is threading.main_thread()
        else None
    )

    def publish() -> None:
        text = follower.exposition()
        latest['text'] = text
        if args.textfile:
            try:
                metrics_cmd.write_atomic(args.textfile, text)
            except OSError as exc:
                warn('cannot write %s: %s' % (args.textfile, _reason(exc)))

    try:
        if args.once:
            follower.defer = True
            follower.poll()
            follower.finish()
            publish()
            if server is None and args.textfile is None:
                sys.stdout.write(latest['text'])
            return 0
        while not stopping.is_set() and not (stop and stop()):
            follower.poll()
            publish()
            stopping.wait(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0


def main(argv: typing.Optional[list] = None) -> int:
    # (run as the command: its arguments from sys.argv, the process
    # ends after it)
    as_command = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == 'follow':
        return main_follow(argv[1:])
    if argv and argv[0] == 'sweep':
        return main_sweep(argv[1:])
    if argv and argv[0] == 'compare':
        return main_compare(argv[1:])
    if argv and argv[0] == 'export':
        return main_export(argv[1:])
    if argv and argv[0] == 'points':
        return points_cmd.main(argv[1:])
    args = build_parser().parse_args(argv)
    report_html, report_json, report_text = analysis(
        'render.html', 'render.json', 'render.text'
    )
    piped = _to_stdout(args)
    opts = _options(args, all_lifecycles=args.all_lifecycles)
    check_outputs([(args.json, ()), (args.html, ())], args.inputs)
    report = _analyse(args.inputs, opts)
    # The analysis ran without the cyclic collector (``pipeline.run``)
    # and leaves no cyclic garbage; what it leaves alive would be
    # scanned whole by the next collection while the report is written,
    # and again by the one at the interpreter's exit, for nothing: 0.16
    # and 0.3 CPU s on 300,000 events (``doc/source/engines.rst``).
    # Frozen, neither scans it; the command then ends with it frozen
    # (called with its arguments, from Python, it unfreezes them).
    gc.freeze()
    try:
        empty = empty_window(report)
        if empty:
            warn(empty)
        warn_losses(report)
        if not args.quiet and not piped:
            sys.stdout.write(
                report_text.render(report, sql_blocks=args.blocks)
            )
        # every output that can be written is, also after one that
        # cannot
        status = _write_all(
            [
                (args.json, lambda: report_json.dumps(report) + '\n'),
                (args.html, lambda: report_html.render(report)),
            ]
        )
    finally:
        if not as_command:
            gc.unfreeze()
    if status:
        raise SystemExit(status)
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
