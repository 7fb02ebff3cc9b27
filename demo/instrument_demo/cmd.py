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
"""``instrument-demo``: a mixed workload on an instrumented in-process nova.

Starts nova 34's in-process cloud (sqlite, fake transport, fake virt
driver on several compute hosts, in-process placement) on nova's own
functional fixtures, switched on through ``[instrument]`` options, the
notifier driver and the paste filter, exactly as an operator would.  It
boots ``--servers`` servers ``--concurrency`` at a time, optionally
injecting spawn failures and reschedules; then, unless
``--boots-only``, it runs a mixed workload on the ACTIVE servers
(``operations``): resizes (confirmed), live migrations, deletes and
server lists, a ``--op-fail`` share of the resizes and live migrations
failing on purpose.  Meanwhile the computes run their resource audit
and power state sync at nova's intervals (60 s, 600 s), or every
``--periodic-interval`` seconds (``periodic``), as their service timers
would.  ``--inject CAUSE`` sets up the cause of a finding of the
report (``inject``: a setting set badly, a stand-in slowed or
failing); the default run injects none.  ``--schedulers N`` starts N
schedulers on the one topic, the conductor's calls going to each in
turn.  ``--waves N`` boots in waves, as a scale test does: N servers
(up to ``--concurrency`` in flight, N by default), then nothing until
every one of them is ACTIVE or ERROR, ``--wave-count`` times; each
wave's time and throughput are printed and kept in ``servers.json``.
The computes share the demo's process, hence nova's process-wide
named locks (``compute_resources``): the start record says so
(``instrument.runtime.process.SETUP``), and the report prints the
caveat beside its lock figures, with the short interval when one was
asked for.  Then it runs the analyser and writes into ``--output``::

    spans/          the raw span files (one per process)
    report.txt      the analyser's summary (also printed)
    report.json     the full report
    report.html     the self-contained HTML report
    servers.json    what the API said about every server and operation
                    (the truth)
    run.json        the run's parameters (servers, concurrency,
                    computes, mode, nova's version...): the labels
                    ``instrument-report sweep`` reads

``--sweep 1,4,8`` runs the demo once per concurrency level, each in a
process of its own, into ``OUTPUT/c1``, ``OUTPUT/c4``...;
``--sweep schedulers=1,2,4`` (or ``computes=``, ``waves=``) once per
value of that option instead, into ``OUTPUT/schedulers1``...; then
``instrument-report sweep`` of them into ``OUTPUT/sweep.txt``,
``sweep.json`` and ``sweep.html`` (doc/source/sweep.rst).

Running it again in the same directory replaces those files.  Ctrl-C
stops new boots, lets the ones in flight finish, and still writes the
span files and the report of what happened; a second Ctrl-C aborts.

The time it prints for the boots has the report's definition: from the
start of the first API request to the end of the last one (the answer
that showed the last server ACTIVE or ERROR); ``servers.json`` keeps
it.  Without nova's functional test package (``tox -e demo`` installs
it) or the library's ``report`` extra it says so in one line and exits
with status 1.
"""

import argparse
import importlib
import importlib.metadata
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import typing

OUTPUT_FILES = (
    'report.txt',
    'report.json',
    'report.html',
    'servers.json',
    'run.json',
)
RUN_FILE = 'run.json'
EXIT_MISSING = 1
# The boot time, as the report defines a run's duration.
TIMING = 'from the first API request to the last answer'
# ``--inject``'s values and the finding each makes (``inject.INJECTIONS``,
# which imports nova: named here for --help)
INJECTABLE = {
    'db-pool': 'db_pool_exhaustion',
    'rpc-timeout': 'rpc_timeouts',
    'scheduler-collisions': 'scheduling_collisions',
    'build-queue': 'build_queueing',
    'audit-collision': 'audit_collision',
    'identity-slow': 'identity_slow',
    'network-fail': 'network_failures',
}
# rules the demo has no cause for, and why (each is proven elsewhere:
# doc/source/findings.rst)
NOT_INJECTABLE = {
    'db_deadlocks': 'the demo\'s databases are sqlite, which does not '
    'deadlock (proven on MariaDB: tox -e functional-mysql)',
    'service_saturation': 'every demo service is a thread of one '
    'process: a saturated scheduler takes the '
    'CPU of all of them, so no knob separates it',
    'cell_list_dominance': 'the demo runs one cell besides cell0, which '
    'the rule leaves out',
}
# causes that only the native threads mode shows (inject.Injection)
THREADS_ONLY = frozenset(('db-pool',))
INSTALL_HINT = (
    'run it with "tox -e demo" from a clone of '
    'openstack-instrument, which installs nova 34 and its test '
    'requirements (or, in the clone: pip install -c '
    'constraints/nova-34.txt -r requirements/nova.txt -e '
    '".[report]" -e demo)'
)


# what ``--sweep OPTION=LEVELS`` may vary, and the run directories'
# prefix (``OUTPUT/c4``, ``OUTPUT/schedulers2``...)
SWEEPABLE = {
    'concurrency': 'c',
    'schedulers': 'schedulers',
    'computes': 'computes',
    'waves': 'waves',
}


class Sweep(typing.NamedTuple):
    option: str
    levels: list


def levels(text: str) -> Sweep:
    """``--sweep``: ``[OPTION=]LEVELS``, the option (``concurrency``
    by default) and its levels, each 1 or more, in order."""
    option, sep, values = text.partition('=')
    if not sep:
        option, values = 'concurrency', text
    option = option.strip().replace('-', '_')
    if option not in SWEEPABLE:
        raise argparse.ArgumentTypeError(
            'cannot sweep %r: one of %s' % (option, ', '.join(SWEEPABLE))
        )
    try:
        out = [int(v) for v in values.split(',') if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            'not comma-separated whole numbers: %r' % text
        ) from None
    if len(set(out)) < 2 or min(out) < 1:
        raise argparse.ArgumentTypeError(
            'two levels or more, each at least 1 (e.g. 1,4,8), not %r' % text
        )
    return Sweep(option, sorted(set(out)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='instrument-demo',
        description='Boot servers on an instrumented in-process nova 34 '
        'cloud and report where the time went.',
    )
    parser.add_argument(
        '--servers',
        '-n',
        type=int,
        default=None,
        help='servers to boot (default 30; with --waves: WAVES x WAVE_COUNT)',
    )
    parser.add_argument(
        '--concurrency',
        '-c',
        type=int,
        default=None,
        help='boots in flight at once (default 8; with '
        '--waves: the wave\'s size)',
    )
    parser.add_argument(
        '--computes',
        type=int,
        default=3,
        help='fake compute hosts (default 3)',
    )
    parser.add_argument(
        '--schedulers',
        type=int,
        default=1,
        help='scheduler services on the one topic, the '
        'conductor\'s calls to each in turn '
        '(default 1)',
    )
    parser.add_argument(
        '--waves',
        type=int,
        default=None,
        metavar='N',
        help='boot in waves of N servers: each wave '
        'waits until all of the one before are '
        'ACTIVE or ERROR (a scale test\'s way)',
    )
    parser.add_argument(
        '--wave-count',
        type=int,
        default=3,
        help='how many waves with --waves (default 3)',
    )
    parser.add_argument(
        '--boot-timeout',
        type=float,
        default=180.0,
        help='seconds after which the demo stops waiting '
        'for a server to become ACTIVE or ERROR and '
        'counts it TIMEOUT (default 180; raise it '
        'with hundreds of computes)',
    )
    parser.add_argument(
        '--fail',
        type=float,
        default=0.1,
        help='share of servers whose spawn fails (default 0.1)',
    )
    parser.add_argument(
        '--reschedule',
        type=float,
        default=0.1,
        help='share of servers rescheduled once (default 0.1)',
    )
    parser.add_argument(
        '--seed',
        type=int,
        default=0,
        help='which servers get the injected faults',
    )
    parser.add_argument(
        '--mode',
        choices=('threads', 'eventlet'),
        default=None,
        help='native threads (nova 34 services) or '
        'eventlet (default threads; eventlet with a '
        'nova older than 34)',
    )
    parser.add_argument(
        '--output',
        '-o',
        default='instrument-demo-output',
        help='output directory (default ./instrument-demo-output)',
    )
    parser.add_argument(
        '--sweep',
        metavar='[OPTION=]LEVELS',
        type=levels,
        help='comma-separated concurrency levels (e.g. '
        '1,4,8), or of another option (%s: e.g. '
        'schedulers=1,2,4): one run per level, each '
        'in OUTPUT/c<level> (OUTPUT/<option><level>; '
        'its own process), then the sweep report of '
        'them in OUTPUT/sweep.{txt,json,html}'
        % ', '.join(o for o in SWEEPABLE if o != 'concurrency'),
    )
    parser.add_argument(
        '--no-report',
        action='store_true',
        help='boot and write span files only',
    )
    parser.add_argument(
        '--boots-only',
        action='store_true',
        help='boots only, no mixed workload after them',
    )
    for name, what in (
        ('resizes', 'resizes (each confirmed)'),
        ('live-migrations', 'live migrations'),
        ('deletes', 'deletes'),
        ('lists', 'server lists'),
    ):
        parser.add_argument(
            '--' + name,
            type=int,
            default=None,
            help='%s after the boots (default: one per '
            'ten servers, at least one)' % what,
        )
    parser.add_argument(
        '--op-fail',
        type=float,
        default=0.34,
        help='share of the resizes and of the live '
        'migrations that fail (default 0.34)',
    )
    parser.add_argument(
        '--periodic-interval',
        type=float,
        default=None,
        help='seconds between runs of the computes\' '
        'periodic tasks (resource audit, power state '
        'sync) during the workload, the first at its '
        'start (default: nova\'s intervals, 60 s and '
        '600 s; 0: none; a shorter interval, e.g. 5, '
        'runs more audits in a short run and makes '
        'compute_resources busier than in a '
        'deployment: the report says so)',
    )
    parser.add_argument(
        '--metrics-dir',
        default=None,
        metavar='DIR',
        help='[instrument] metrics_dir: the live metrics\' '
        'files, which "instrument-metrics serve DIR" '
        'exposes to Prometheus while the demo runs '
        '(default: none, off)',
    )
    parser.add_argument(
        '--inject',
        action='append',
        default=None,
        choices=sorted(INJECTABLE),
        metavar='CAUSE',
        help='inject the cause of a finding (repeatable): '
        '%s.  The default run injects none and '
        'finds nothing'
        % '; '.join('%s (%s)' % kv for kv in sorted(INJECTABLE.items())),
    )
    return parser


def _resolve(args) -> None:
    """``--servers`` and ``--concurrency`` when not given: 30 and 8,
    or with ``--waves`` every wave's servers and the wave's size; two
    schedulers at least for ``--inject scheduler-collisions``."""
    if args.waves is not None:
        if args.waves < 1 or args.wave_count < 1:
            raise SystemExit(
                'instrument-demo: --waves and --wave-count must be at least 1'
            )
        total = args.waves * args.wave_count
        if args.servers is not None and args.servers != total:
            raise SystemExit(
                'instrument-demo: --servers %d is not --waves %d x '
                '--wave-count %d (leave --servers out with --waves)'
                % (args.servers, args.waves, args.wave_count)
            )
        args.servers = total
        if args.concurrency is None:
            args.concurrency = args.waves
    if 'scheduler-collisions' in (args.inject or ()):
        # its cause: two schedulers at least (inject.schedulers)
        args.schedulers = max(args.schedulers, 2)
    if args.servers is None:
        args.servers = 30
    if args.concurrency is None:
        args.concurrency = 8


# The first nova whose functional fixtures (the demo's cloud) run under
# native threads; older ones run them under eventlet only.
THREADS_NOVA = 34


def _nova_major() -> int | None:
    """The installed nova's major version, None when unknown."""
    try:
        return int(importlib.metadata.version('nova').split('.')[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _choose_mode(args) -> None:
    major = _nova_major()
    old = major is not None and major < THREADS_NOVA
    if args.mode is None:
        args.mode = 'eventlet' if old else 'threads'
    elif args.mode == 'threads' and old:
        raise SystemExit(
            'instrument-demo: --mode threads needs nova %d or later; nova '
            '%d is installed, whose functional cloud runs under eventlet '
            'only: use --mode eventlet' % (THREADS_NOVA, major)
        )


def _check(args) -> None:
    _resolve(args)
    _choose_mode(args)
    if args.boot_timeout <= 0:
        raise SystemExit('instrument-demo: --boot-timeout must be more than 0')
    if (
        args.servers < 1
        or args.concurrency < 1
        or args.computes < 1
        or args.schedulers < 1
    ):
        raise SystemExit(
            'instrument-demo: --servers, --concurrency, '
            '--computes and --schedulers must be at least 1'
        )
    for name in ('fail', 'reschedule'):
        value = getattr(args, name)
        if not 0.0 <= value <= 1.0:
            raise SystemExit(
                'instrument-demo: --%s must be between 0 and '
                '1, not %s' % (name, value)
            )
    if args.periodic_interval is not None and args.periodic_interval < 0:
        raise SystemExit(
            'instrument-demo: --periodic-interval must not be negative'
        )
    if not 0.0 <= args.op_fail <= 1.0:
        raise SystemExit(
            'instrument-demo: --op-fail must be between 0 '
            'and 1, not %s' % args.op_fail
        )
    for name in ('resizes', 'live_migrations', 'deletes', 'lists'):
        if (getattr(args, name) or 0) < 0:
            raise SystemExit(
                'instrument-demo: --%s must not be negative'
                % name.replace('_', '-')
            )
    for name in set(args.inject or ()) & THREADS_ONLY:
        if args.mode != 'threads':
            raise SystemExit(
                'instrument-demo: --inject %s needs --mode threads' % name
            )
    if args.fail + args.reschedule > 1.0:
        raise SystemExit(
            'instrument-demo: --fail + --reschedule must not exceed 1'
        )


def prepare_output(directory: str) -> str:
    """Create ``directory``, removing what an earlier run left there."""
    try:
        os.makedirs(directory, exist_ok=True)
        spans = os.path.join(directory, 'spans')
        if os.path.isdir(spans):
            shutil.rmtree(spans)
        for name in OUTPUT_FILES:
            path = os.path.join(directory, name)
            if os.path.exists(path):
                os.unlink(path)
        os.makedirs(spans)
    except OSError as exc:
        raise SystemExit(
            'instrument-demo: cannot use output directory '
            '%s: %s' % (directory, exc)
        ) from None
    return spans


def _select_mode(mode: str) -> None:
    # Read by nova's functional package at import: set it before.
    # nova's test base would capture our progress line with these.
    for name in ('OS_STDOUT_CAPTURE', 'OS_STDERR_CAPTURE'):
        os.environ.pop(name, None)
    # nova logs its executors' shutdown after its log fixture is gone.
    logging.getLogger('nova.thread_pool_factory').setLevel(logging.WARNING)
    if mode == 'threads':
        os.environ['OS_NOVA_DISABLE_EVENTLET_PATCHING'] = '1'
    else:
        os.environ.pop('OS_NOVA_DISABLE_EVENTLET_PATCHING', None)


def _missing(what: str, exc: ImportError) -> None:
    sys.stderr.write(
        'instrument-demo: error: %s cannot be imported (%s); '
        '%s\n' % (what, exc, INSTALL_HINT)
    )
    sys.stderr.flush()
    raise SystemExit(EXIT_MISSING)


def check_environment(report: bool = True) -> None:
    """One line and exit status 1, never a traceback, when nova's
    functional test package (the cloud is built on it) or, for the
    report, the library's ``report`` extra cannot be imported.  Imports
    the cloud: call it after ``_select_mode``."""
    try:
        importlib.import_module('instrument_demo.cloud')
    except ImportError as exc:
        _missing("nova's functional test package", exc)
    if report:
        for name in ('pipeline', 'render.html', 'render.json'):
            try:
                importlib.import_module('instrument.analysis.' + name)
            except ImportError as exc:
                _missing(
                    "the analyser (openstack-instrument's report extra)", exc
                )


def _stop_on_interrupt(stop: threading.Event) -> None:
    def first(signum, frame):
        stop.set()
        sys.stderr.write(
            '\ninstrument-demo: stopping after the boots in '
            'flight; Ctrl-C again to abort\n'
        )
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, first)


def run_cloud(args, spans_dir: str, stop: threading.Event) -> tuple:
    """Boot the servers; returns the API's view of each, of the other
    operations, when the first API request was sent (``time.time()``)
    and the waves (``boots.Wave``; none without ``--waves``)."""
    import unittest

    from instrument_demo import boots
    from instrument_demo import cloud
    from instrument_demo import faults
    from instrument_demo import inject
    from instrument_demo import operations
    from instrument_demo import periodic

    faults.configure(args.fail, args.reschedule, args.servers, args.seed)
    record_setup(args)
    settings = cloud.Settings(
        span_dir=spans_dir,
        computes=['cmp-%02d' % (n + 1) for n in range(args.computes)],
        driver=faults.register(),
        metrics_dir=args.metrics_dir,
    )
    outcome = {}

    class DemoRun(cloud.InstrumentedCloud):
        def setUp(self):
            inject.before(self, args)
            super().setUp()
            inject.after(self, args)

        def run_boots(self):
            # the first API request (the image and flavor lists)
            outcome['first_request'] = time.time()
            # each server gets a port on the neutron stand-in's network
            # (nova's calls to neutron as in a deployment, see standins)
            template = self._build_server(
                networks=[{'uuid': self.neutron.network_1['id']}]
            )

            def body(name):
                return dict(template, name=name)

            # the computes' periodic tasks, during the whole workload
            loop = periodic.PeriodicLoop(
                [c.manager for c in self.computes.values()],
                args.periodic_interval,
            )
            loop.start()
            try:
                self.workload(body, outcome)
            finally:
                loop.stop()

        def workload(self, body, outcome):
            progress = boots.Progress(args.servers)
            if args.waves:
                outcome['results'], outcome['waves'] = boots.boot_waves(
                    self.api,
                    body,
                    args.waves,
                    args.wave_count,
                    args.concurrency,
                    stop,
                    progress,
                    timeout=args.boot_timeout,
                )
            else:
                outcome['results'] = boots.boot_all(
                    self.api,
                    body,
                    args.servers,
                    args.concurrency,
                    stop,
                    progress,
                    timeout=args.boot_timeout,
                )
            outcome['operations'] = []
            if args.boots_only or stop.is_set():
                return
            work = plan_operations(args, outcome['results'])
            faults.configure_moves(
                [n for n, fate in work['resize'] if fate == 'fail'],
                [n for n, fate in work['live_migrate'] if fate == 'fail'],
            )
            total = operations.planned(work)
            if not total:
                return
            flavors = [f['id'] for f in self.api.get_flavors()]
            flavor = flavors[1] if len(flavors) > 1 else flavors[0]
            outcome['operations'] = operations.run_all(
                self.api,
                work,
                outcome['results'],
                flavor,
                args.concurrency,
                stop,
                boots.Progress(total, verb='operations', unit='ops'),
            )

    DemoRun.settings = settings
    case = DemoRun('run_boots')
    result = unittest.TestResult()
    case.run(result)
    problems = result.errors + result.failures
    if problems:
        for _test, trace in problems:
            sys.stderr.write(trace)
        raise SystemExit(
            'instrument-demo: the in-process cloud failed (see above)'
        )
    return (
        outcome.get('results', []),
        outcome.get('operations', []),
        outcome.get('first_request', time.time()),
        outcome.get('waves', []),
    )


def record_setup(args) -> None:
    """Tell the start record how this run is not a deployment: its
    computes share one process (and nova's named locks), and their
    periodic tasks' interval when it is not nova's."""
    from instrument.runtime import process

    process.SETUP.clear()
    process.SETUP['computes'] = args.computes
    if args.periodic_interval:
        process.SETUP['periodic_interval_s'] = args.periodic_interval


def plan_operations(args, results: list) -> dict:
    """The mixed workload on the servers that became ACTIVE."""
    from instrument_demo import operations

    counts = operations.default_counts(args.servers)
    for kind, name in (
        ('resize', 'resizes'),
        ('live_migrate', 'live_migrations'),
        ('delete', 'deletes'),
        ('list', 'lists'),
    ):
        if getattr(args, name) is not None:
            counts[kind] = getattr(args, name)
    active = [r.name for r in results if r.status == 'ACTIVE']
    return operations.plan(
        active, counts, args.op_fail, args.seed, args.computes
    )


def boot_time(first_request: float, results: list) -> float:
    """Seconds from the first API request to the last answer (``TIMING``;
    the report's run duration); ``results`` of boots and of the other
    operations."""
    last = max(
        (r.finished for r in results if r.finished is not None),
        default=first_request,
    )
    return max(last - first_request, 0.0)


def nova_version() -> typing.Optional[str]:
    """The version of the nova installed (None: none)."""
    try:
        return importlib.metadata.version('nova')
    except importlib.metadata.PackageNotFoundError:
        return None


def write_run(path: str, args) -> dict:
    """The run's parameters, as ``instrument-report sweep`` reads its
    labels (``run.json``)."""
    run = {
        'servers': args.servers,
        'concurrency': args.concurrency,
        'computes': args.computes,
        'schedulers': args.schedulers,
        'mode': args.mode,
        'nova': nova_version(),
        'seed': args.seed,
        'fail': args.fail,
        'reschedule': args.reschedule,
        'boots_only': bool(args.boots_only),
    }
    if args.inject:
        run['inject'] = ','.join(args.inject)
    if args.boot_timeout != 180.0:
        run['boot_timeout_s'] = args.boot_timeout
    if args.waves:
        run['waves'] = args.waves
        run['wave_count'] = args.wave_count
    if args.periodic_interval:
        run['periodic_interval_s'] = args.periodic_interval
    with open(path, 'w') as f:
        json.dump(run, f, indent=1)
    return run


def _write_truth(
    path: str, results: list, ops: list, first_request: float, waves: list = ()
) -> dict:
    counts = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    op_counts: dict = {}
    for result in ops:
        per = op_counts.setdefault(result.op, {})
        per[result.expected] = per.get(result.expected, 0) + 1
    with open(path, 'w') as f:
        json.dump(
            {
                'counts': counts,
                'operation_counts': op_counts,
                'first_request': first_request,
                'duration_s': boot_time(first_request, results + ops),
                'timing': TIMING,
                'servers': [r.as_dict() for r in results],
                'operations': [r.as_dict() for r in ops],
                'waves': [w.as_dict() for w in waves],
            },
            f,
            indent=1,
        )
    return counts


def _without(argv: list, option: str, short: str = '') -> list:
    """``argv`` without ``option`` (``--sweep``, or an abbreviation of
    at least 4 characters, or ``short``) and its value."""
    out = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split('=', 1)[0]
        if (len(name) >= 4 and option.startswith(name)) or (
            short and name == short
        ):
            skip = '=' not in arg
            continue
        if short and arg.startswith(short) and not arg.startswith('--'):
            continue
        out.append(arg)
    return out


def _without_sweep(argv: list) -> list:
    """``argv`` without its ``--sweep`` option (and value)."""
    return _without(argv, '--sweep')


def run_sweep(args, argv: list) -> int:
    """One run of the demo per ``--sweep`` level, each in a process of
    its own (a fresh cloud) and in ``OUTPUT/c<level>``, then
    ``instrument-report sweep`` of them into ``OUTPUT/sweep.*``."""
    if args.no_report:
        raise SystemExit(
            'instrument-demo: --sweep needs the reports '
            '(leave --no-report out)'
        )
    os.makedirs(args.output, exist_ok=True)
    option, values = args.sweep
    flag = '--' + option.replace('_', '-')
    base = _without(
        _without_sweep(argv), flag, '-c' if option == 'concurrency' else ''
    )
    runs = []
    for level in values:
        out = os.path.join(args.output, '%s%d' % (SWEEPABLE[option], level))
        print(
            'instrument-demo: sweep: %s %d into %s' % (option, level, out),
            flush=True,
        )
        status = subprocess.call(
            [sys.executable, '-m', 'instrument_demo']
            + base
            + [flag, str(level), '--output', out]
        )
        if status:
            return status
        runs.append(out)
    from instrument.cmd import report

    text_path = os.path.join(args.output, 'sweep.txt')
    with open(text_path, 'w') as text:
        saved, sys.stdout = sys.stdout, text
        try:
            report.main(
                ['sweep', '--no-progress', '--by', option]
                + runs
                + [
                    '--json',
                    os.path.join(args.output, 'sweep.json'),
                    '--html',
                    os.path.join(args.output, 'sweep.html'),
                ]
            )
        finally:
            sys.stdout = saved
    with open(text_path) as text:
        sys.stdout.write(text.read())
    print(
        '\ninstrument-demo: wrote %s/{sweep.txt,sweep.json,sweep.html} '
        'and one run per level in %s/%s<level>'
        % (args.output, args.output, SWEEPABLE[option])
    )
    return 0


def main(argv: list = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    _check(args)
    if args.sweep:
        return run_sweep(args, argv)
    _select_mode(args.mode)
    check_environment(report=not args.no_report)
    spans_dir = prepare_output(args.output)
    write_run(os.path.join(args.output, RUN_FILE), args)
    stop = threading.Event()
    _stop_on_interrupt(stop)
    print(
        'instrument-demo: %d servers, %d at a time%s, %d computes, %d '
        'scheduler%s, %s mode, injected: %.0f%% spawn failures, %.0f%% '
        'reschedules'
        % (
            args.servers,
            args.concurrency,
            ' in %d waves of %d' % (args.wave_count, args.waves)
            if args.waves
            else '',
            args.computes,
            args.schedulers,
            '' if args.schedulers == 1 else 's',
            args.mode,
            args.fail * 100,
            args.reschedule * 100,
        ),
        flush=True,
    )
    if args.inject:
        print(
            'instrument-demo: injected causes: %s'
            % ', '.join(
                '%s (finding %s)' % (name, INJECTABLE[name])
                for name in args.inject
            ),
            flush=True,
        )
    results, ops, first_request, waves = run_cloud(args, spans_dir, stop)
    counts = _write_truth(
        os.path.join(args.output, 'servers.json'),
        results,
        ops,
        first_request,
        waves,
    )
    for wave in waves:
        print('instrument-demo: %s' % wave.line(), flush=True)
    print(
        'instrument-demo: booted %d servers and ran %d other operations '
        'in %.1f s (%s); the API says: %s'
        % (
            len(results),
            len(ops),
            boot_time(first_request, results + ops),
            TIMING,
            ', '.join('%d %s' % (n, s) for s, n in sorted(counts.items())),
        ),
        flush=True,
    )
    if ops:
        per: dict = {}
        for r in ops:
            per.setdefault(r.op, {}).setdefault(r.expected, 0)
            per[r.op][r.expected] += 1
        print(
            'instrument-demo: operations: %s'
            % '; '.join(
                '%s %s'
                % (
                    op,
                    ', '.join(
                        '%d %s' % (n, st) for st, n in sorted(states.items())
                    ),
                )
                for op, states in sorted(per.items())
            ),
            flush=True,
        )
    if args.no_report:
        print('instrument-demo: span files in %s' % spans_dir)
        return 130 if stop.is_set() else 0
    from instrument.cmd import report

    text_path = os.path.join(args.output, 'report.txt')
    report_args = [
        spans_dir,
        '--json',
        os.path.join(args.output, 'report.json'),
        '--html',
        os.path.join(args.output, 'report.html'),
    ]
    with open(text_path, 'w') as text:
        saved, sys.stdout = sys.stdout, text
        try:
            report.main(report_args)
        finally:
            sys.stdout = saved
    with open(text_path) as text:
        sys.stdout.write(text.read())
    print(
        '\ninstrument-demo: wrote %s/{report.txt,report.json,report.html,'
        'servers.json,run.json} and the span files in %s'
        % (args.output, spans_dir)
    )
    return 130 if stop.is_set() else 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
