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
"""The ``[instrument]`` option group (oslo.config).

Owns option definitions, their registration, ``list_opts()`` for
oslo-config-generator (entry point ``oslo.config.opts``) and the start-up
validation that turns a bad value into an error naming the option,
warns about keys of the section that are no option (a typo) and about
a sink listed twice.
"""

import difflib
import glob
import os

from oslo_config import cfg
from oslo_config import types
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

GROUP = 'instrument'

SERVICES = ('api', 'conductor', 'scheduler', 'compute')
SINKS = ('file', 'log', 'otlp')

_GROUP_TITLE = 'Instrumentation of nova services'
_GROUP_HELP = (
    'Records structured span events (one JSON line each) for '
    'nova API, conductor, scheduler and compute calls and for '
    'every SQL statement, for offline analysis with '
    'instrument-report.  Every option is read once, when the '
    'service starts: a change needs a restart of the service '
    '(SIGHUP does not reload them).'
)


def _group() -> cfg.OptGroup:
    # A fresh OptGroup per registration: oslo.config shares a group
    # object's option table (and so its overrides) between every
    # ConfigOpts it is registered with.
    return cfg.OptGroup(GROUP, title=_GROUP_TITLE, help=_GROUP_HELP)


_opts = [
    cfg.BoolOpt(
        'enabled',
        default=False,
        help='Switch the instrumentation on in a service that loads it: '
        'through the notifier driver ([oslo_messaging_notifications] '
        'driver = instrument, every nova service) or the nova-api '
        'paste filter (instrument.loaders.paste:filter_factory in '
        'api-paste.ini).  Without one of them this option does '
        'nothing.  When False nothing is patched and no file is '
        'written.',
    ),
    cfg.ListOpt(
        'services',
        default=list(SERVICES),
        item_type=types.String(choices=SERVICES),
        help='The nova components whose own calls are recorded in this '
        'process: the compute API methods of nova-api (api), the '
        'manager methods of nova-conductor (conductor), nova-'
        'scheduler (scheduler) and nova-compute (compute).  '
        'Everything else is recorded whatever this says: API '
        'requests of the paste filter, SQL statements, RPC calls, '
        'locks and other waits, keystoneauth calls and process '
        'samples.  A component whose code is never '
        'imported by the process is simply never patched, so the '
        'default is safe on every host.',
    ),
    cfg.ListOpt(
        'sinks',
        default=['file'],
        item_type=types.String(choices=SINKS),
        help='Where span events go: "file" writes one JSON-lines file per '
        'process into output_dir; "log" writes each event as a line '
        'of the service log (oslo.log logger "instrument.spans"); '
        '"otlp" exports spans to an OpenTelemetry collector (needs '
        'the [otlp] extra).  Several may be given; a sink named '
        'twice is used once.',
    ),
    cfg.StrOpt(
        'output_dir',
        default='/var/log/nova/instrument',
        help='Directory for span files of the "file" sink.  One file per '
        'process, named <host>_<service>_<pid>_<start time>.jsonl, '
        'created with mode 0640; the directory and its missing '
        'parents are created with mode 0777, both less the bits of '
        'the process umask (with umask 022: 0640 and 0755).  If it '
        'cannot be written the service keeps running and the lost '
        'events are counted and reported in the service log.  '
        'A span file that is renamed or deleted (logrotate), or '
        'whose directory is deleted, is opened again at its path at '
        'the next write (the directory created again); '
        'copytruncate is safe too.',
    ),
    cfg.IntOpt(
        'buffer_size',
        default=50000,
        min=16,
        max=10000000,
        help='Maximum number of events held in memory before they are '
        'written.  When the buffer is full new events are dropped '
        'and counted, never waited for.  The same number bounds '
        'every other queue of the instrumentation: SQL statements '
        'waiting to become records (counted in sql.dropped '
        'records), running spans whose end is awaited, and lines of '
        'the "log" sink waiting for the eventlet hub.  The first '
        'drop is logged at once in the service log, even when the '
        'writer is stuck; later drops are logged at most once per '
        'cause every 5 minutes, with their count.  A writer stuck '
        'in one write for more than 10 seconds (a hung NFS mount) is '
        'logged too.',
    ),
    cfg.FloatOpt(
        'flush_interval',
        default=0.5,
        min=0.01,
        max=60.0,
        help='Seconds between two writes of the buffer.  Also the longest '
        'time a span start can stay in memory before it is on disk.',
    ),
    cfg.BoolOpt(
        'sql_timing',
        default=True,
        help='Time every SQL statement through SQLAlchemy engine events.',
    ),
    cfg.BoolOpt(
        'wait_timing',
        default=True,
        help='Record waits: every acquisition of an oslo.concurrency '
        'lock (time waited and held, lock name), DB connection pool '
        'checkouts that wait for a free connection, connections '
        'made and lost, and builds waiting for a slot of nova-'
        'compute\'s max_concurrent_builds.  Each costs about as '
        'much as a span.',
    ),
    cfg.FloatOpt(
        'slow_query_threshold',
        default=0.0,
        min=0.0,
        help='Milliseconds.  Statements faster than this are not written '
        'one by one but aggregated per query class and interval '
        '(count, total, min, max, histogram), so the analyser still '
        'sees them.  0 writes every statement.',
    ),
    cfg.FloatOpt(
        'sql_aggregate_interval',
        default=10.0,
        min=0.1,
        max=3600.0,
        help='Seconds covered by one aggregate record of fast statements '
        '(see slow_query_threshold).',
    ),
    cfg.FloatOpt(
        'detail_sample_rate',
        default=1.0,
        min=0.0,
        max=1.0,
        help='Share of requests (0.0 to 1.0) that get full detail: sub-'
        'stage spans and individual SQL statements.  Lifecycle '
        'spans are recorded for every request.  The decision is '
        'taken from the request id, so all services agree.',
    ),
    cfg.StrOpt(
        'host',
        help='Host name written into every event.  Defaults to the '
        'service\'s own [DEFAULT] host option, then the machine\'s '
        'host name.',
    ),
    cfg.StrOpt(
        'otlp_endpoint',
        default='http://127.0.0.1:4318/v1/traces',
        help='OTLP collector endpoint used by the "otlp" sink.  For '
        'http/protobuf the full traces URL; for grpc '
        'http://host:4317 (plaintext) or https://host:4317 (TLS).  '
        'Left at this default with otlp_protocol = grpc, '
        'http://127.0.0.1:4317 is used.',
    ),
    cfg.StrOpt(
        'otlp_protocol',
        default='http/protobuf',
        choices=[
            (
                'http/protobuf',
                'OTLP over HTTP, protobuf encoded (the '
                'OpenTelemetry SDK\'s HTTP exporter); otlp_endpoint is the '
                'full traces URL.',
            ),
            (
                'grpc',
                'OTLP over gRPC (needs grpcio); otlp_endpoint is '
                'http://host:port (plaintext) or https://host:port (TLS).',
            ),
        ],
        help='OTLP transport used by the "otlp" sink.  grpc needs '
        'grpcio (part of the [otlp] extra); it is only imported '
        'when chosen.',
    ),
    cfg.FloatOpt(
        'otlp_timeout',
        default=5.0,
        min=0.1,
        max=120.0,
        help='Seconds an OTLP export may take before it is abandoned and '
        'its spans counted as dropped.',
    ),
    cfg.IntOpt(
        'otlp_queue_size',
        default=20000,
        min=16,
        max=10000000,
        help='Spans waiting for OTLP export; beyond this they are dropped '
        'and counted.',
    ),
    # -- around nova (issue 21) ---------------------------------------------
    cfg.FloatOpt(
        'resource_sample_interval',
        default=5.0,
        min=0.0,
        max=3600.0,
        help='Seconds between two resource samples of the process '
        '(process.sample records: CPU user/system seconds, RSS, '
        'threads, greenthreads parked in the eventlet hub, open '
        'file descriptors, SQL connection pools, the buffer\'s '
        'fill and drops), taken by the writer thread from /proc '
        'and the process itself.  0 switches sampling off.',
    ),
    # -- live metrics (issue 30) --------------------------------------------
    cfg.StrOpt(
        'metrics_dir',
        help='Directory for per-process metrics (Prometheus), off when '
        'unset (the default).  The writer thread of each process '
        'folds what it writes into counters and histograms '
        '(latency of each instrumented call, SQL statements and '
        'time per query class and database, errors, deadlocks, '
        'lock and DB pool waits, the instrumentation\'s own drops) '
        'and writes them to <metrics_dir>/<program>_<pid>.json '
        'every flush_interval when they changed, atomically '
        '(temporary file and rename), and at exit.  The '
        'instrumented call pays nothing for it.  "instrument-'
        'metrics serve --port N DIR" serves the sum of every '
        'process of the host (forked workers included) in '
        'Prometheus text format; "instrument-metrics dump DIR" '
        'prints it (for node_exporter\'s textfile collector).  See '
        'doc/source/metrics.rst.',
    ),
    cfg.IntOpt(
        'metrics_max_series',
        default=500,
        min=1,
        max=100000,
        help='Label sets of one metric family in one process before '
        'the open-ended labels of new ones (query class, lock, '
        'event, exception class) are counted under the value '
        '"other" (database, statement kind and component are '
        'kept): bounds the memory and the scrape size.',
    ),
    cfg.ListOpt(
        'programs',
        default=[
            'nova-api*',
            'nova-conductor',
            'nova-scheduler',
            'nova-compute',
        ],
        help='Programs that record when they load the instrumentation '
        'from nova.conf (the notifier driver, the api-paste '
        'filter); shell-style patterns, "*" for every program.  '
        'nova-api* covers nova-api and the WSGI applications of '
        'nova\'s API (nova-api-os-compute, nova-api-metadata; the '
        'API\'s WSGI application under a server of another name '
        'and the paste filter record as nova-api).  Every other '
        'program (nova-manage, nova-status, nova-policy, the '
        'console proxies) is skipped and logged once at INFO: '
        'nothing is patched and no file or directory is created.  '
        'instrument.setup() called by code is not affected.',
    ),
]


class InvalidOption(ValueError):
    """An ``[instrument]`` option has a value that cannot be used."""

    def __init__(self, name: str, reason: str) -> None:
        self.option = name
        super().__init__('[%s] %s: %s' % (GROUP, name, reason))


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the group on ``conf``; safe to call more than once."""
    conf.register_group(_group())
    conf.register_opts(_opts, group=GROUP)


def list_opts():
    """Options for oslo-config-generator (``oslo.config.opts``)."""
    return [(_group(), list(_opts))]


def validate(conf: cfg.ConfigOpts) -> None:
    """Read every option once so that bad values fail here, by name.

    oslo.config checks types only when a value is read; doing it at
    start-up turns "invalid literal for int()" deep inside a request into
    ``InvalidOption('[instrument] buffer_size: ...')``.  Keys of the
    section that are no option are warned about first
    (``warn_unknown_keys``), a sink named twice is used once.
    """
    warn_unknown_keys(conf)
    group = getattr(conf, GROUP)
    for opt in _opts:
        try:
            getattr(group, opt.dest)
        except (cfg.ConfigFileValueError, ValueError) as exc:
            raise InvalidOption(opt.name, str(exc)) from exc
    if 'file' in group.sinks and not group.output_dir:
        raise InvalidOption(
            'output_dir', 'must be set when the "file" sink is used'
        )
    if not group.sinks:
        raise InvalidOption('sinks', 'at least one sink is needed')
    unique = list(dict.fromkeys(group.sinks))
    if len(unique) != len(group.sinks):
        LOG.warning(
            'instrument: [%s] sinks names a sink more than once '
            '(%s); each is used once: %s',
            GROUP,
            ', '.join(group.sinks),
            ', '.join(unique),
        )
        # Every later reader (the sinks loaded, the start record) sees
        # the list without repeats, and this is not warned again.
        conf.set_override('sinks', unique, GROUP)


# Config files whose [instrument] keys were checked in this process.
_KEYS_CHECKED = set()


def warn_unknown_keys(conf: cfg.ConfigOpts) -> None:
    """Log one warning naming each key of ``[instrument]`` in ``conf``'s
    config files that is no option (``buffersize``, ``enable``), with
    the nearest option name; each file is checked once per process.

    oslo.config ignores such keys silently.  The check never fails the
    start: any error skips it.
    """
    try:
        unknown = _unknown_keys(conf)
        if not unknown:
            return
        known = list(getattr(conf, GROUP))
        described = []
        for key, path in unknown:
            near = difflib.get_close_matches(key, known, n=1)
            described.append(
                '%s (in %s%s)'
                % (key, path, '; did you mean %s?' % near[0] if near else '')
            )
        LOG.warning(
            'instrument: unknown option%s in [%s], ignored: %s',
            's' if len(described) > 1 else '',
            GROUP,
            ', '.join(described),
        )
    except Exception as exc:
        LOG.debug('instrument: [%s] keys not checked: %s', GROUP, exc)


def _config_files(conf: cfg.ConfigOpts) -> list:
    """The files ``conf`` was parsed from: its config files, then the
    ``*.conf`` of its config directory (oslo.config's order)."""
    files = list(conf.config_file or ())
    dirs = conf.config_dir or ()
    if isinstance(dirs, str):
        dirs = [dirs]
    for directory in dirs:
        files.extend(
            sorted(
                glob.glob(
                    os.path.join(os.path.expanduser(directory), '*.conf')
                )
            )
        )
    return files


def _unknown_keys(conf: cfg.ConfigOpts) -> list:
    """[(key, file)] of the ``[instrument]`` keys that no registered
    option of the group reads, in files not checked before."""
    known = set(getattr(conf, GROUP))
    for opt in _opts:
        for old in opt.deprecated_opts:
            if old.group in (None, GROUP) and old.name:
                known.add(old.name.replace('-', '_'))
    out = []
    for path in _config_files(conf):
        if path in _KEYS_CHECKED:
            continue
        _KEYS_CHECKED.add(path)
        sections = {}
        cfg.ConfigParser(path, sections).parse()
        for section, values in sections.items():
            if section.lower() != GROUP:
                continue
            for key in values:
                if key.replace('-', '_') not in known:
                    out.append((key, path))
    return out
