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
"""The span event schema (version 1), shared by the runtime and analyser.

One event is one JSON object on one line.  This module owns the field
names, the phases, the vocabulary of event names, the attribute keys
and histogram bounds that the runtime writes and the analyser reads,
and a validator.  Both halves import it (the runtime through
``instrument.runtime.record`` and the writers of each event, the analyser
through ``instrument.analysis.load``, ``sqldigest``...); it imports
nothing but the standard library and the two tables beside it (the
event table, ``instrument.events``, and the operation catalogue,
``instrument.catalogue``) so that both can depend on it.  A key
or bound changed here changes on both sides at once.

Fields (``?`` marks fields that may be ``null`` or absent):

=========  ==========  =====================================================
field      type        meaning
=========  ==========  =====================================================
``v``      int         schema version, always ``1``
``ph``     str         phase: ``B`` span begin, ``X`` complete span,
                       ``I`` instant event, ``M`` process metadata,
                       ``C`` counters / aggregates
``seq``    int         per-process sequence number, starting at 1; a gap
                       means records were lost (dropped or killed)
``ts``     int         wall clock, microseconds since the Unix epoch (span
                       start for ``B`` and ``X``)
``dur_us`` int         ``X`` only: duration in microseconds, measured with a
                       monotonic clock in-process
``host``   str         host of the service that recorded the event
``svc``    str         service: ``api``, ``conductor``, ``scheduler``,
                       ``compute`` ... (the component that owns the point)
``pid``    int         process id
``tid``    int         thread id, or greenthread id under eventlet
``ev``     str         dotted event name, see ``EVENTS``
``span``   str?        16 hex digits; unique span id (``B``, ``X``)
``parent`` str?        span id of the enclosing span; may name a span of
                       another process (the sending side of an RPC hop)
``req``    str?        request id (``req-<uuid>``) from the call's context
``greq``   str?        global request id
``inst``   list?       instance uuid(s) the call works on
``st``     str?        ``X`` only: ``ok`` or ``error``
``err``    object?     ``{"cls": "module.Class", "msg": "short text"}``
``attrs``  object?     small values: selected host, attempt, status ...
=========  ==========  =====================================================

A ``B`` record is written when a span starts and the ``X`` record when it
ends; both carry the same ``span``.  A ``B`` without its ``X`` is a call
that started and never finished (hung, or the process was killed).

Causality: a record whose ``parent`` names a span recorded on another
host is the receiving side of a hop, so it cannot start before its
parent started.  When the parent is synchronous (``ev`` in
``SYNC_EVENTS``) the child also ends before the parent ends.  The
analyser derives clock offsets from these pairs.
"""

from instrument import catalogue as _catalogue
from instrument import events as _events

SCHEMA_VERSION = 1

PH_BEGIN = 'B'
PH_COMPLETE = 'X'
PH_INSTANT = 'I'
PH_META = 'M'
PH_COUNTER = 'C'
PHASES = frozenset((PH_BEGIN, PH_COMPLETE, PH_INSTANT, PH_META, PH_COUNTER))

ST_OK = 'ok'
ST_ERROR = 'error'

# Field order of a serialised record (the writer emits keys in this order).
FIELDS = (
    'v',
    'ph',
    'seq',
    'ts',
    'dur_us',
    'host',
    'svc',
    'pid',
    'tid',
    'ev',
    'span',
    'parent',
    'req',
    'greq',
    'inst',
    'st',
    'err',
    'attrs',
)

REQUIRED = ('v', 'ph', 'seq', 'ts', 'host', 'svc', 'pid', 'ev')

# Event names written by the library itself (the events of nova's and
# oslo.messaging's calls are named by their patch points).
EV_PROCESS_START = 'process.start'
EV_PROCESS_END = 'process.end'
EV_PROCESS_POINTS = 'process.points'
EV_SINK_DROPS = 'sink.drops'
EV_FAULTS = 'instrument.faults'
EV_API_REQUEST = 'api.request'
EV_SQL_FINGERPRINT = 'sql.fingerprint'
EV_SQL_AGG = 'sql.agg'
EV_SQL_QUERY = 'sql.query'
EV_SQL_TXN = 'sql.txn'
EV_SQL_DROPPED = 'sql.dropped'
EV_DB_RETRY = 'db.retry'
EV_LOCK_WAIT = 'lock.wait'
EV_DB_POOL_WAIT = 'db.pool.wait'
EV_POOL_WAIT = 'pool.wait'
EV_DB_POOL_CONNECT = 'db.pool.connect'
EV_DB_POOL_CLOSE = 'db.pool.close'
EV_DB_POOL_INVALIDATE = 'db.pool.invalidate'
# The wait events, by the kind of thing waited for.
WAIT_EVENTS = {
    EV_LOCK_WAIT: 'lock',
    EV_DB_POOL_WAIT: 'db_pool',
    EV_POOL_WAIT: 'pool',
}

# Event vocabulary: ``{event: component}``, the component the analyser
# charges the event's exclusive time to (None: no time of its own).
# Each event is declared once, with the module that writes it, in the
# event table (``instrument.events``; the steps of nova's operations in
# the operation catalogue, ``instrument.catalogue``); doc/source/
# events.rst says what each one's attrs hold.  Unknown names are legal;
# the analyser charges them to their service.
EVENTS = _events.EVENTS

# Operations the analyser gives every request (from the API span that
# the request reached; ``other`` when a route reaches none of them).
OP_BOOT = 'boot'
# (from the operation catalogue, ``other`` last)
OPERATIONS = _catalogue.NAMES

# Spans whose caller waits for the remote side to finish (see module doc).
SYNC_EVENTS = frozenset(('rpc.call',))

# -- attribute keys ----------------------------------------------------------
# Keys of ``attrs`` that the runtime writes and the analyser reads
# (doc/source/events.rst lists them per event).

# process.start
ATTR_SERVICE = 'service'  # program name (nova-compute)
ATTR_VERSION = 'version'  # of this library
ATTR_MODE = 'mode'  # threads / eventlet
ATTR_POINTS = 'points'  # {"patched": [...], "pending": ...}
ATTR_TARGETS = 'targets'  # {target name: its status}
ATTR_OPTIONS = 'options'
ATTR_ARGV0 = 'argv0'
# process.start: how an embedding tool (the demo) set the process up
# (``instrument.runtime.process.SETUP``): ``computes`` (compute services
# sharing the process), ``periodic_interval_s`` (its periodic tasks' interval
# when not nova's own)
ATTR_SETUP = 'setup'
# process.start: {group: {option: value}} of the allow-listed nova.conf
# options the process ran with (``instrument.runtime.settings``)
ATTR_SETTINGS = 'settings'
ATTR_PPID = 'ppid'
# {distribution: version} of nova and the libraries the points follow
# (a cloud mid-upgrade runs several releases)
ATTR_RELEASES = 'releases'

# api.request
ATTR_METHOD = 'method'  # HTTP method; the RPC method of rpc.*
ATTR_ROUTE = 'route'  # path, ids replaced by {id}
ATTR_STATUS = 'status'  # HTTP status code
# the server action a POST to /servers/{id}/action asked for (the
# action's name in nova's API: resize, migrate, os-migrateLive ...),
# as nova's dispatch found it; the nova target's hook on that dispatch
# leaves it in the WSGI environ under ENV_ACTION for the paste filter
ATTR_ACTION = 'action'
ENV_ACTION = 'instrument.action'
# the environ's request id the span began with, when nova's context
# (the span's req) has another one (an auth middleware such as
# noauth2 that makes its own context)
ATTR_REQ_BEGAN = 'req_began'
# how long the request waited before the paste filter was called (µs):
# the span's start less the arrival time the front server gave
# (mod_wsgi's ``mod_wsgi.request_start`` / ``mod_wsgi.queue_start``,
# a proxy's ``X-Request-Start``); absent when none did
ATTR_QUEUE_US = 'queue_us'

# rpc.call / rpc.cast
ATTR_TOPIC = 'topic'
ATTR_SERVER = 'server'
ATTR_FANOUT = 'fanout'
# a send inside a periodic task run: its req is the run's, this the id
# of the context nova sent (the one the receiving side records)
ATTR_CONTEXT_REQ = 'ctx_req'

# nova's lifecycle spans
ATTR_COUNT = 'count'  # instances, hosts, candidates ...
ATTR_ATTEMPT = 'attempt'  # build attempt, 1 on the first
ATTR_RESCHEDULE = 'reschedule'  # a conductor build that reschedules
ATTR_SELECTED = 'selected'  # hosts the scheduler selected
ATTR_OUTCOME = 'outcome'  # compute.build's result; sql.txn's end
ATTR_CLAIMED = 'claimed'  # scheduler.claim succeeded
ATTR_REASON = 'reason'  # exception class that buried a build
ATTR_MSG = 'msg'  # its short message

# SQL: sql.query, sql.txn, sql.fingerprint, sql.agg, sql.dropped
ATTR_FP = 'fp'  # query id: MD5 of the fingerprint
ATTR_TEXT = 'text'  # the fingerprint (sql.fingerprint)
ATTR_KIND = 'kind'  # SELECT ..., POOL_RESET, CONNECT
ATTR_DB = 'db'  # database name
ATTR_CALL = 'call'  # enclosing span's event
ATTR_ROWS = 'rows'
ATTR_ROWS_KNOWN = 'rows_known'  # sql.agg: statements with a row count
ATTR_MANY = 'many'  # executemany
ATTR_TXN = 'txn'  # span id of the enclosing sql.txn
ATTR_DISCONNECT = 'disconnect'  # the error lost the connection
ATTR_STATEMENTS = 'statements'  # statements of a transaction
# sql.txn: round trips folded into the transaction's record instead
# of a sql.query record each (a short transaction's COMMIT/ROLLBACK
# and the pool's reset-on-return that follows it), each a list
# [start - the transaction's ts (us), dur_us, fp, kind]; the analyser
# reads them as the sql.query records they stand for (``FOLD_*``).
ATTR_END = 'end'  # the COMMIT/ROLLBACK round trip (its txn: this one)
ATTR_RESET = 'reset'  # the pool's reset (txn null), same req and call
FOLDED = (ATTR_END, ATTR_RESET)
FOLD_DT, FOLD_DUR, FOLD_FP, FOLD_KIND = range(4)
ATTR_ERRORS = 'errors'
ATTR_SUM_US = 'sum_us'
ATTR_MIN_US = 'min_us'
ATTR_MAX_US = 'max_us'
ATTR_SUMSQ_US = 'sumsq_us'
ATTR_HIST = 'hist'  # counts per SQL_HIST_BOUNDS_US bucket
ATTR_INTERVAL_S = 'interval_s'

# db.retry
ATTR_CLS = 'cls'  # exception class that made the retry
ATTR_FUNC = 'func'  # the retried function
ATTR_EXHAUSTED = 'exhausted'  # no retry left

# lock.wait, db.pool.wait, pool.wait (issue 13)
ATTR_LOCK = 'lock'  # lock name
ATTR_HELD_US = 'held_us'  # how long the lock was then held
ATTR_FAIR = 'fair'  # a fair (FIFO) lock
ATTR_EXTERNAL = 'external'  # also a file lock (other processes)
ATTR_POOL = 'pool'  # name of the pool a task waited for
ATTR_SIZE = 'size'  # pool size (connections, slots)
ATTR_QUEUED = 'queued'  # pool.wait: a task queued for a worker

# server actions other than create (issue 12; doc/source/events.rst)
ATTR_ROLE = 'role'  # a compute span's side of a move:
ROLE_SOURCE = 'source'  # the host the instance leaves
ROLE_DEST = 'destination'  # the host it goes to
ATTR_SOURCE = 'source'  # source host (from the migration record)
ATTR_DEST = 'dest'  # destination host, asked for or chosen
ATTR_MIGRATION_TYPE = 'migration_type'  # resize, migration, ...
ATTR_MIGRATION_STATUS = 'migration_status'  # a rollback's new status
ATTR_FLAVOR_ID = 'flavor_id'  # api.compute.resize; null: cold migrate
ATTR_LIVE = 'live'  # conductor.migrate_server
ATTR_EVACUATE = 'evacuate'  # a rebuild that is an evacuation
ATTR_REBOOT_TYPE = 'reboot_type'  # SOFT / HARD
ATTR_CELL = 'cell'  # api.cells.query: the cell's uuid
ATTR_CELL_NAME = 'cell_name'  # and its name (ATTR_DB its database)
ATTR_TIMEOUTS = 'timeouts'  # cells that did not answer in time

# -- histogram bounds --------------------------------------------------------
# ``sql.agg`` ``hist``: statements per duration bucket.  Bucket 0 holds
# [0, 1 us), bucket i [SQL_HIST_BOUNDS_US[i-1], SQL_HIST_BOUNDS_US[i]),
# the last everything from 10 s on: one bucket per decade.
SQL_HIST_BOUNDS_US = (1, 10, 100, 1000, 10000, 100000, 1000000, 10000000)
SQL_HIST_SIZE = len(SQL_HIST_BOUNDS_US) + 1
# The analyser's distribution rows (pt-query-digest's): one per decade
# from SQL_HIST_BOUNDS_US[0]; the first also holds [0, 1 us), the last is
# open.
SQL_DECADE_LABELS = (
    '1us',
    '10us',
    '100us',
    '1ms',
    '10ms',
    '100ms',
    '1s',
    '10s+',
)

# The type of each field (``validate``; the analyser types its decoders
# and its Parquet columns from it).
TYPES = {
    'v': int,
    'ph': str,
    'seq': int,
    'ts': int,
    'dur_us': int,
    'host': str,
    'svc': str,
    'pid': int,
    'tid': int,
    'ev': str,
    'span': str,
    'parent': str,
    'req': str,
    'greq': str,
    'inst': list,
    'st': str,
    'err': dict,
    'attrs': dict,
}


def folded(ts: int, attrs: dict, span) -> list:
    """The ``sql.query`` records an ``sql.txn`` record carries
    (``ATTR_END``, ``ATTR_RESET``), in the order they were sent: each
    ``(ts, dur_us, attrs)`` of the record it stands for; its other
    fields (``parent``, ``req``, ``greq``, ``inst``, ``host``, ``svc``,
    ``pid``) are the transaction's, its ``st`` ``ok``, and it has no
    span id of its own.  ``ts`` and ``span`` are the transaction's."""
    out = []
    for key in FOLDED:
        part = attrs.get(key)
        if not part:
            continue
        out.append(
            (
                ts + part[FOLD_DT],
                part[FOLD_DUR],
                {
                    ATTR_FP: part[FOLD_FP],
                    ATTR_DB: attrs.get(ATTR_DB),
                    ATTR_KIND: part[FOLD_KIND],
                    ATTR_ROWS: None,
                    ATTR_MANY: False,
                    ATTR_TXN: span if key == ATTR_END else None,
                    ATTR_CALL: attrs.get(ATTR_CALL),
                },
            )
        )
    return out


def unfold(rec: dict) -> list:
    """The records of the older shape that record ``rec`` (a dict)
    stands for: an ``sql.txn`` record that carries round trips gives
    its COMMIT/ROLLBACK's ``sql.query``, itself without them, then the
    pool reset's ``sql.query`` (the order of the records it replaces;
    the ``sql.query`` records have no ``span``); any other record is
    itself."""
    attrs = rec.get('attrs')
    if (
        rec.get('ev') != EV_SQL_TXN
        or not attrs
        or not any(key in attrs for key in FOLDED)
    ):
        return [rec]
    txn = dict(rec)
    txn['attrs'] = {k: v for k, v in attrs.items() if k not in FOLDED}
    out = []
    for ts, dur, qattrs in folded(rec['ts'], attrs, rec.get('span')):
        query = {k: v for k, v in rec.items() if k not in ('span', 'err')}
        query.update(ts=ts, dur_us=dur, ev=EV_SQL_QUERY, st=ST_OK)
        query['attrs'] = qattrs
        if qattrs[ATTR_TXN] is None:
            out.append(txn)
        out.append(query)
    if txn not in out:
        out.append(txn)
    return out


class SchemaError(ValueError):
    """A record does not follow the schema."""


def validate(rec: dict) -> dict:
    """Check one decoded record against schema version 1.

    Returns the record unchanged; raises ``SchemaError`` naming the first
    problem found.
    """
    if not isinstance(rec, dict):
        raise SchemaError('record is not a JSON object')
    if rec.get('v') != SCHEMA_VERSION:
        raise SchemaError('unknown schema version %r' % (rec.get('v'),))
    for name in REQUIRED:
        if name not in rec:
            raise SchemaError('missing field %r' % name)
    for name, value in rec.items():
        expected = TYPES.get(name)
        if expected is None:
            raise SchemaError('unknown field %r' % name)
        if value is None and name not in REQUIRED:
            continue
        if expected is int and isinstance(value, bool):
            raise SchemaError('field %r is not an integer' % name)
        if not isinstance(value, expected):
            raise SchemaError(
                'field %r has type %s, expected %s'
                % (name, type(value).__name__, expected.__name__)
            )
    ph = rec['ph']
    if ph not in PHASES:
        raise SchemaError('unknown phase %r' % ph)
    if ph in (PH_BEGIN, PH_COMPLETE) and not rec.get('span'):
        raise SchemaError('%s record without span id' % ph)
    if ph == PH_COMPLETE:
        if rec.get('dur_us') is None or rec['dur_us'] < 0:
            raise SchemaError('X record without a valid dur_us')
        if rec.get('st') not in (ST_OK, ST_ERROR):
            raise SchemaError('X record with status %r' % rec.get('st'))
    err = rec.get('err')
    if err is not None and not isinstance(err.get('cls'), str):
        raise SchemaError('err without a class name')
    return rec


# -- around nova: other services, resources, periodic tasks (issue 21) -------
# Calls nova makes to other OpenStack services through keystoneauth1
# (``Session.request``), keystonemiddleware's token validation in
# nova-api, per-process resource samples and nova's periodic tasks.
EV_KSA_REQUEST = 'ksa.request'
EV_AUTH_TOKEN = 'api.auth_token'  # noqa: S105 - an event name
EV_PROCESS_SAMPLE = 'process.sample'
EV_PERIODIC_TASK = 'periodic.task'

# ksa.request (and ATTR_METHOD, ATTR_ROUTE, ATTR_STATUS above)
ATTR_SERVICE_TYPE = 'service_type'  # identity, network, placement ...
ATTR_ATTEMPTS = 'attempts'  # sends: 1 + retries + redirects
# Why a call failed: connect_timeout, read_timeout, connect_failure,
# ssl, connection, http (then ATTR_STATUS), other.
ATTR_FAILURE = 'failure'
FAILURE_CLASSES = (
    'connect_timeout',
    'read_timeout',
    'connect_failure',
    'ssl',
    'connection',
    'http',
    'other',
)

# periodic.task
ATTR_TASK = 'task'  # ComputeManager._heal_instance_info_cache
# A periodic task run's own request id, which its SQL and lock waits
# inherit: ``periodic-<task>-<32 hex>``; the analyser reads it as a
# periodic run, never as a user request.
PERIODIC_REQ_PREFIX = 'periodic-'


def periodic_req(task: str, token: str) -> str:
    """The request id of one run of periodic task ``task``
    (``Class.method``; ``token`` a random hex string)."""
    return '%s%s-%s' % (PERIODIC_REQ_PREFIX, task, token)


def periodic_task_of(req: object) -> str | None:
    """The task of a periodic run's request id, else None."""
    if not isinstance(req, str) or not req.startswith(PERIODIC_REQ_PREFIX):
        return None
    return req[len(PERIODIC_REQ_PREFIX) :].rsplit('-', 1)[0] or None


# process.sample: one C record every [instrument] resource_sample_interval
ATTR_CPU_USER_S = 'cpu_user_s'  # cumulative CPU seconds, user
ATTR_CPU_SYS_S = 'cpu_sys_s'  # cumulative CPU seconds, system
ATTR_RSS_KB = 'rss_kb'  # resident set size now
ATTR_THREADS = 'threads'  # OS threads of the process
ATTR_GREEN = 'green'  # greenthreads parked in the eventlet hub
ATTR_FDS = 'fds'  # open file descriptors
ATTR_POOLS = 'pools'  # {db: [checked out, overflow, size]}
ATTR_BUF_FILL = 'buf_fill'  # events queued in the library's buffer
ATTR_BUF_SIZE = 'buf_size'  # its bound ([instrument] buffer_size)
ATTR_BUF_DROPS = 'buf_drops'  # events dropped so far (buffer full)
# cumulative CPU seconds of the library's writer thread (encoding,
# aggregating, writing: the library's own cost off nova's threads);
# only in the samples the writer takes
ATTR_WRITER_CPU_S = 'writer_cpu_s'
