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
"""The advisor's rules: from the analysis results to the nova.conf knob.

``RULES`` is the table ``sections.findings`` runs: each ``Rule`` is a
small function of the ``Evidence`` (the finished requests, the other
sections' report values, the wait records per service and host, the
settings each process ran with) returning findings, plain dicts:

``rule``, ``title``, ``key`` (the rule and its subject: what
``compare`` matches two runs' findings by), ``seen`` (what was seen, in
words, with its figures and their denominators) and ``figures`` (the
same, as numbers), ``sure`` (``share``: the share of the requests or of
the critical-path time it explains, ``of``: of what), ``requests`` (a
few request ids, slowest first), ``settings`` (per knob: ``section``,
``option``, ``values``: the value each affected service ran with,
``direction``, ``tradeoff``), ``check`` (how to check the fix).

Adding a rule is one function and one line in ``RULES``, and its tests
(doc/source/findings.rst lists every rule and how it was proven).
"""

import typing

from instrument.analysis.model import classify
from instrument.analysis.model import waits as request_waits
from instrument.analysis.render import fmt

W_IN = request_waits.W_IN
W_KIND = request_waits.W_KIND
W_NAME = request_waits.W_NAME
W_US = request_waits.W_US
W_CP = request_waits.W_CP
GOOD_STATES = classify.GOOD_STATES
KEEP = 5

# Rule 1: a checkout is recorded only when every connection of the pool
# (overflow included) is out: a few are a spike, these many are a pool
# too small for the concurrency it serves.
DB_POOL_MIN_WAITS = 5
# ... or they held up this share of the requests' critical path
DB_POOL_MIN_SHARE = 0.005
# Rule 7: a build slot wait counts from this long (a slot free at once
# is taken in microseconds), and the queueing is a finding from this
# many such waits and this share of the boots' critical path
BUILD_QUEUED_US = 10_000
BUILD_MIN_WAITS = 2
BUILD_MIN_SHARE = 0.05
# the pools that hold builds: the build semaphore (eventlet), nova 34's
# long_task pool (native threads: its size, the larger of
# max_concurrent_builds and max_concurrent_snapshots, is the limit;
# eventlet: the pool holds max_concurrent_builds + _snapshots, and
# builds beyond that queue there before the semaphore)
BUILD_POOLS = frozenset(('max_concurrent_builds', 'long_task'))
# Rule 7: requests held up by the resource audit, in share of the time
# of the operations it held up
AUDIT_TASK = 'update_available_resource'
AUDIT_LOCK = 'compute_resources'
AUDIT_MIN_REQUESTS = 2
AUDIT_MIN_SHARE = 0.02
# ... and the interval is the knob: an affected compute ran with it
# shortened below nova's periodic default, or, where no value was
# recorded, the audit's runs took this share of the run's time per
# compute (a run back to back).  At nova's default a slow audit that
# holds claims up is the audit's own length, not its interval.
AUDIT_DEFAULT_S = 60
AUDIT_MIN_DUTY = 0.25
# Rule 4: claims lost to another scheduler's allocation (placement) or
# failed on the compute: a collision is a finding from this many, making
# this share of the claims made, with several schedulers seen
COLLISION_MIN = 2
COLLISION_MIN_SHARE = 0.05
# Rule 2: oslo.db retries of one function are a finding from this
# many, or from one whose retries ran out (the request failed)
DB_RETRY_MIN = 3
# Rule 3: the error classes (without their module) of an RPC call that
# timed out, and nova's
# calls made with ``timeout=long_rpc_timeout`` (nova 34's rpcapi
# modules); the others wait ``rpc_response_timeout``
RPC_TIMEOUTS = frozenset(('MessagingTimeout',))
LONG_RPC_METHODS = frozenset(
    (
        'select_destinations',
        'migrate_server',
        'attach_volume',
        'check_can_live_migrate_destination',
        'pre_live_migration',
        'post_live_migration_at_destination',
        'confirm_snapshot_based_resize_at_source',
        'finish_snapshot_based_resize_at_dest',
        'finish_revert_snapshot_based_resize_at_source',
        'prep_snapshot_based_resize_at_dest',
        'prep_snapshot_based_resize_at_source',
        'revert_snapshot_based_resize_at_dest',
        'set_host_enabled',
        'reserve_block_device_name',
        'cache_images',
    )
)

# Rules 5 and 6: a call to another service (a token request, a token
# validation, a neutron call) is slow from this long (Fernet tokens
# validate in milliseconds; a cached token is not validated again)
SLOW_CALL_US = 200_000
# Rule 5: identity is a finding from one token request or validation
# that timed out or could not reach keystone, or from this many slow
# ones making this share of the requests' critical path
IDENTITY_MIN_SLOW = 3
IDENTITY_MIN_SHARE = 0.05
# ... and this share of the validations and token requests (a few slow
# ones among many quick ones are keystone's hiccups, not a setting)
IDENTITY_MIN_SLOW_SHARE = 0.05
# ... the failure classes that say keystone did not answer in time,
# or could not be reached (a validation: the class nova-api's
# keystonemiddleware raised: its 503, or keystoneauth1's error, which
# nova-api answers with a 500)
CALL_TIMEOUTS = frozenset(('connect_timeout', 'read_timeout'))
CALL_UNREACHED = frozenset(('connect_failure', 'connection', 'ssl'))
VALIDATION_FAILURES = frozenset(
    (
        'HTTPServiceUnavailable',
        'ServiceError',
        'ConnectFailure',
        'ConnectTimeout',
        'ConnectionError',
        'SSLError',
        'RequestTimeout',
        'DiscoveryFailure',
    )
)
# the components of identity time on a request's critical path
IDENTITY_COMPONENTS = ('api.auth', 'service.identity')
# Rule 6: a neutron call failed (timed out, not reached, an HTTP 5xx);
# a 4xx is the caller's (a port already gone, a conflict nova handles)
NETWORK_MIN_FAILED = 1
# nova's exceptions of a port that could not be bound, of a VIF plug
# event that never came (the failures table)
PORT_BINDING_ERRORS = frozenset(('PortBindingFailed',))
VIF_PLUG_ERRORS = frozenset(('VirtualInterfaceCreateException',))
# the spans a port's failure is raised in (nova's network allocation);
# the same failure in another span of the request is raised again
NETWORK_ORIGINS = frozenset(('compute.network',))

# Rule 3: a reply waited for this share of the caller's configured
# time-out is a long wait, and this many of one method are a finding
RPC_LONG_SHARE = 0.5
RPC_LONG_MIN = 2
# Rule 8: a service is saturated when a process of it ran at this many
# cores (1.0: one core, all a Python process's interpreter can use)
# over the time its messages queued, and its queue grew: the mean
# wait of some SAT_WINDOW-th of its dispatches in a row (at least this
# many dispatches) is at least this long and this many times that of
# the first ones
SAT_CPU = 0.8
SAT_MIN_DISPATCHES = 6
SAT_WINDOW = 4
SAT_QUEUE_MIN_US = 100_000
SAT_QUEUE_GROWTH = 2.0
# the services whose queue is recorded, and their worker count: the
# RPC servers (the wait of each message before its dispatch) and
# nova-api (the wait of each request before the paste filter, which
# its front server recorded: ``api.request`` ``queue_us``); nova-api
# under a WSGI server (uWSGI, mod_wsgi) runs its processes and threads
# instead (``process.start`` settings ``wsgi``)
WORKERS = {
    'conductor': ('conductor', 'workers'),
    'scheduler': ('scheduler', 'workers'),
    'api': ('DEFAULT', 'osapi_compute_workers'),
}
FRONT_GROUP = 'wsgi'
# Rule 9: in a list over several cells, a cell dominates when its
# queries took this share of the list's cells' time and this much more
# than the next cell's; a finding from this many such lists, making
# at least half of the multi-cell lists it was queried in
CELL_DOMINANT_SHARE = 0.6
# cell0 holds only the instances that were never scheduled: near empty,
# every other cell outweighs it (nova's CellMapping.CELL0_UUID)
CELL0 = '00000000-0000-0000-0000-000000000000'
CELL_MIN_EXCESS_US = 50_000
CELL_MIN_LISTS = 3


class Evidence:
    """What a rule reads: ``summaries`` (the finished requests),
    ``section(key)`` (another section's report value), ``waits`` (every
    wait record per kind, name, host and service: ``sections.findings``
    rows) and ``values(pairs, section, option)`` (what each process
    ran with, ``process.start`` ``settings``)."""

    def __init__(
        self,
        view: typing.Any,
        waits: list,
        rpc: typing.Sequence = (),
        scheduling: typing.Optional[dict] = None,
        db_retries: typing.Optional[dict] = None,
        load: typing.Optional[dict] = None,
        cells: typing.Optional[dict] = None,
        calls: typing.Sequence = (),
    ) -> None:
        self.view = view
        self.summaries = view.summaries
        self.waits = waits
        # ``rpc.call`` per topic and method (``sections.findings``)
        self.rpc = list(rpc)
        # the schedulers seen and the claims (``sections.findings``
        # ``Scheduling.table``)
        self.scheduling = scheduling or {}
        # oslo.db's retries per function, the deadlocked statements
        # (``sections.findings`` ``DbRetries.table``)
        self.db_retries = db_retries or {'funcs': [], 'deadlocks': []}
        # calls to other services and token validations per caller
        # (``sections.findings`` ``ServiceCallsByCaller.table``)
        self.calls = list(calls)
        # each dispatch's queue wait per service, the processes' CPU
        # (``sections.findings`` ``ServiceLoad.table``)
        self.load = load or {'queues': {}, 'cpu': {}}
        # the cells' query time per request (``CellLists.table``)
        self.cells = cells or {'reqs': {}, 'where': []}
        self._saturated: typing.Optional[list] = None

    def section(self, key: str) -> typing.Any:
        return self.view[key]

    def values(
        self, where: typing.Iterable, section: str, option: str
    ) -> list:
        """``[{host, svc, value, recorded}]`` per (host, svc, pid) in
        ``where``: the value its process ran with (the process of that
        host and pid, else one of that host and service, else the one
        process of that pid: services sharing a process, as the demo's,
        write their own host names), ``recorded`` False when none
        recorded it."""
        procs = [
            p
            for p in self.view['processes'] or []
            if isinstance((p.get('settings') or {}).get(section), dict)
            and option in p['settings'][section]
        ]
        out: dict = {}
        for host, svc, pid in sorted(set(where), key=repr):
            found = [
                p
                for p in procs
                if p.get('host') == host and p.get('pid') == pid
            ] or [
                p
                for p in procs
                if p.get('host') == host and p.get('svc') == svc
            ]
            if not found:
                same_pid = [p for p in procs if p.get('pid') == pid]
                found = same_pid if len(same_pid) == 1 else []
            row = {
                'host': host,
                'svc': svc,
                'value': None,
                'recorded': bool(found),
            }
            if found:
                row['value'] = found[0]['settings'][section][option]
            out.setdefault((host, svc), row)
        return list(out.values())

    def mode_of(self, host: str, pid: typing.Any) -> typing.Optional[str]:
        """``threads``/``eventlet``: the mode of the process ``pid``
        (of ``host``, else the one process of that pid), None: not
        known."""
        procs = [
            p for p in self.view['processes'] or [] if p.get('pid') == pid
        ]
        same = [p for p in procs if p.get('host') == host] or (
            procs if len(procs) == 1 else []
        )
        return same[0].get('mode') if same else None

    def critical_share(
        self,
        kinds: typing.Callable[[str, str], bool],
        ops: typing.Optional[frozenset] = None,
    ) -> tuple:
        """``(waited critical us, total us, requests that waited,
        requests)``: the critical-path time of the waits ``kinds(kind,
        name)`` takes, over the requests (of ``ops``, None: all)."""
        cp = total = waited = n = 0
        for s in self.summaries:
            if ops is not None and s.kind not in ops:
                continue
            if getattr(s, 'loss', None):
                continue
            n += 1
            total += max(s.end - s.start, 0)
            mine = sum(
                row[W_CP]
                for row in s.waits or ()
                if kinds(row[W_KIND], row[W_NAME])
            )
            if mine:
                cp += mine
                waited += 1
        return cp, total, waited, n


class Rule(typing.NamedTuple):
    """One rule: ``id`` (stable), ``title``, ``fn(evidence)`` ->
    findings, ``knobs`` (``section option`` names it may point at)."""

    id: str
    title: str
    fn: typing.Callable[[Evidence], list]
    knobs: tuple


def _slowest(pairs: typing.Iterable) -> list:
    """Request ids of ``(us, req)`` pairs, slowest first, once each."""
    out: list = []
    for _us, req in sorted(pairs, key=lambda p: (-p[0], str(p[1]))):
        if req and req not in out:
            out.append(req)
        if len(out) >= KEEP:
            break
    return out


def _where(rows: list) -> str:
    return ', '.join(
        '%s@%s' % (svc or '?', host or '?')
        for host, svc in sorted({(r['host'], r['svc']) for r in rows})
    )


def _share(part: int, whole: int) -> typing.Optional[float]:
    return part / whole if whole else None


def db_database_group(db: str) -> str:
    """The nova.conf section that sizes the pool of database ``db``:
    ``[api_database]`` for the API database (its name holds ``api``),
    ``[database]`` for a cell's."""
    return 'api_database' if 'api' in (db or '').lower() else 'database'


# -- rule 1: DB connection pool exhaustion -----------------------------------


def db_pool_exhaustion(ev: Evidence) -> list:
    """Checkouts that waited for a connection (the pool and its
    overflow all in use), per database, and those that timed out."""
    per_db: dict = {}
    for row in ev.waits:
        if row['kind'] == 'db_pool':
            per_db.setdefault(row['name'], []).append(row)
    out = []
    for db, rows in sorted(per_db.items()):
        count = sum(r['count'] for r in rows)
        errors = sum(r['errors'] for r in rows)
        total = sum(r['total_us'] for r in rows)
        longest = max(r['max_us'] for r in rows)

        def on_db(kind: str, name: str, db: str = db) -> bool:
            return kind == 'db_pool' and name == db

        cp, whole, waited, n = ev.critical_share(on_db)
        share = _share(cp, whole)
        if not errors and (
            count < DB_POOL_MIN_WAITS or (share or 0) < DB_POOL_MIN_SHARE
        ):
            continue
        where = [(r['host'], r['svc'], r['pid']) for r in rows]
        group = db_database_group(db)
        values = {
            opt: ev.values(where, group, opt)
            for opt in ('max_pool_size', 'max_overflow', 'pool_timeout')
        }
        out.append(
            {
                'rule': 'db_pool_exhaustion',
                'title': 'DB connection pool exhausted: %s on %s'
                % (db or '?', _where(rows)),
                'key': 'db_pool_exhaustion:%s' % db,
                'seen': '%d checkouts waited for a connection of %s with '
                'every connection of the pool in use (overflow '
                'included), %d timed out; %s waited in all, the '
                'longest %s'
                % (
                    count,
                    db or '?',
                    errors,
                    fmt.fmt_us(total),
                    fmt.fmt_us(longest),
                ),
                'figures': {
                    'waits': count,
                    'timeouts': errors,
                    'wait_us': total,
                    'max_us': longest,
                    'critical_us': cp,
                    'requests_waited': waited,
                    'requests': n,
                    'per_service': [
                        {
                            'host': r['host'],
                            'svc': r['svc'],
                            'waits': r['count'],
                            'timeouts': r['errors'],
                            'wait_us': r['total_us'],
                        }
                        for r in rows
                    ],
                },
                'sure': {
                    'share': share,
                    'of': 'critical-path time of the %d requests (%s), '
                    'spent waiting for a %s connection; %d of '
                    'them waited' % (n, fmt.fmt_us(whole), db or '?', waited),
                },
                'requests': _slowest(p for r in rows for p in r['requests']),
                'settings': [
                    {
                        'section': group,
                        'option': 'max_pool_size',
                        'values': values['max_pool_size'],
                        'direction': 'raise',
                        'tradeoff': 'each process of the service holds up to '
                        'this many connections: processes x '
                        '(max_pool_size + max_overflow) must stay '
                        'under the database\'s max_connections',
                    },
                    {
                        'section': group,
                        'option': 'max_overflow',
                        'values': values['max_overflow'],
                        'direction': 'raise',
                        'tradeoff': (
                            'overflow connections are opened and closed '
                            'under load: a burst costs connects to the '
                            'database instead of waits'
                        ),
                    },
                    {
                        'section': group,
                        'option': 'pool_timeout',
                        'values': values['pool_timeout'],
                        'direction': 'raise only if checkouts time out',
                        'tradeoff': 'a longer time-out turns failures into '
                        'slower requests; it does not add '
                        'connections',
                    },
                ],
                'check': 'run the same load with the pool raised and '
                '`instrument-report compare` the two runs: this '
                'finding resolved, no db_pool waits for %s in the '
                'waits table, boot latency down' % (db or '?'),
            }
        )
    return out


# -- rule 7: builds queueing, the resource audit's lock ---------------------


def build_queueing(ev: Evidence) -> list:
    """Builds waiting for a build slot on a compute (the build
    semaphore, or nova 34's long_task pool under native threads)."""
    rows = [
        r
        for r in ev.waits
        if r['kind'] == 'pool' and r['name'] in BUILD_POOLS and r['queued']
    ]
    # under eventlet the semaphore is the limit: a long_task pool's
    # wait there is mostly the hub's (a greenthread not yet scheduled)
    rows = [
        r
        for r in rows
        if r['name'] != 'long_task'
        or ev.mode_of(r['host'], r['pid']) != 'eventlet'
    ]
    if not rows:
        return []
    queued = sum(r['queued'] for r in rows)
    # the eventlet processes' long_task waits left out above are left
    # out of the share too (by name: a request's waits carry no pid)
    counted = frozenset(r['name'] for r in rows)

    def on_slot(kind: str, name: str) -> bool:
        return kind == 'pool' and name in counted

    cp, whole, waited, n = ev.critical_share(on_slot, frozenset(('boot',)))
    share = _share(cp, whole)
    if queued < BUILD_MIN_WAITS or (share or 0) < BUILD_MIN_SHARE:
        return []
    where = [(r['host'], r['svc'], r['pid']) for r in rows]
    total = sum(r['queued_us'] for r in rows)
    return [
        {
            'rule': 'build_queueing',
            'title': 'Builds queue for a build slot on %s' % _where(rows),
            'key': 'build_queueing',
            'seen': '%d builds waited over %s for a build slot (%s), %s in '
            'all, the longest %s'
            % (
                queued,
                fmt.fmt_us(BUILD_QUEUED_US),
                ', '.join(sorted({r['name'] for r in rows})),
                fmt.fmt_us(total),
                fmt.fmt_us(max(r['max_us'] for r in rows)),
            ),
            'figures': {
                'queued': queued,
                'wait_us': total,
                'critical_us': cp,
                'boots_waited': waited,
                'boots': n,
                'per_service': [
                    {
                        'host': r['host'],
                        'svc': r['svc'],
                        'pool': r['name'],
                        'queued': r['queued'],
                        'size': r['size'],
                    }
                    for r in rows
                ],
            },
            'sure': {
                'share': share,
                'of': 'critical-path time of the %d boots (%s), spent '
                'waiting for a build slot; %d of them waited'
                % (n, fmt.fmt_us(whole), waited),
            },
            'requests': _slowest(p for r in rows for p in r['requests']),
            'settings': [
                {
                    'section': 'DEFAULT',
                    'option': 'max_concurrent_builds',
                    'values': ev.values(
                        where, 'DEFAULT', 'max_concurrent_builds'
                    ),
                    'direction': 'raise',
                    'tradeoff': 'more builds at once on a compute: more image '
                    'downloads, disk and CPU contention there; under '
                    'native threads the long_task pool is sized by '
                    'the larger of it and max_concurrent_snapshots',
                }
            ],
            'check': 'run the same load with max_concurrent_builds raised and '
            '`instrument-report compare`: this finding resolved, '
            'pool waits for the build slot gone from the waits '
            'table, boot latency down',
        }
    ]


def audit_collision(ev: Evidence) -> list:
    """Claims held up by ``update_available_resource`` holding
    ``compute_resources`` (``report['periodic']['delayed']``)."""
    periodic = ev.section('periodic') or {}
    rows = [
        r
        for r in periodic.get('delayed') or ()
        if AUDIT_TASK in (r.get('task') or '') and r.get('lock') == AUDIT_LOCK
    ]
    if not rows:
        return []
    ops = set()
    for r in rows:
        ops |= set(r.get('operations') or ())
    held = sum(r['requests'] for r in rows)
    wait = sum(r['wait_us'] for r in rows)
    whole = n = 0
    for s in ev.summaries:
        if s.kind in ops and not getattr(s, 'loss', None):
            n += 1
            whole += max(s.end - s.start, 0)
    share = _share(wait, whole)
    if held < AUDIT_MIN_REQUESTS or (share or 0) < AUDIT_MIN_SHARE:
        return []
    # the audit's duty: its runs' time per compute over the run's time
    tasks = [
        t
        for t in periodic.get('tasks') or ()
        if AUDIT_TASK in (t.get('task') or '')
    ]
    audit_us = sum(t.get('total_us') or 0 for t in tasks)
    computes = max(sum(t.get('hosts') or 0 for t in tasks), 1)
    spans = [(s.start, s.end) for s in ev.summaries]
    window = (
        max(e for _s, e in spans) - min(s for s, _e in spans) if spans else 0
    )
    duty = _share(audit_us, window * computes)
    hosts = sorted({h for r in rows for h in r.get('hosts') or ()})
    # the processes that waited for the lock there
    waited_there = [
        w
        for w in ev.waits
        if w['kind'] == 'lock'
        and w['name'] == AUDIT_LOCK
        and w['host'] in hosts
    ]
    where = [
        (w['host'], w['svc'], w['pid'])
        for w in waited_there
        if w['svc'] == 'compute'
    ] or [(h, 'compute', None) for h in hosts]
    values = ev.values(where, 'DEFAULT', 'update_resources_interval')
    recorded = [
        v['value']
        for v in values
        if v['recorded'] and isinstance(v['value'], (int, float))
    ]
    shortened = any(0 < v < AUDIT_DEFAULT_S for v in recorded)
    if not shortened and (recorded or (duty or 0) < AUDIT_MIN_DUTY):
        return []
    examples: list = []
    for r in rows:
        for req in r.get('examples') or ():
            if req not in examples:
                examples.append(req)
    return [
        {
            'rule': 'audit_collision',
            'title': 'Claims wait for %s held by the resource audit on %s'
            % (AUDIT_LOCK, ', '.join(hosts) or '?'),
            'key': 'audit_collision',
            'seen': '%d requests (%s) waited %s in all for %s while the '
            'periodic %s held it, the longest %s; its %d runs took '
            '%s of the %s of the run on each of %d computes'
            % (
                held,
                ', '.join(
                    '%s %d' % kv
                    for kv in sorted(
                        {
                            k: v
                            for r in rows
                            for k, v in (r.get('operations') or {}).items()
                        }.items()
                    )
                ),
                fmt.fmt_us(wait),
                AUDIT_LOCK,
                AUDIT_TASK,
                fmt.fmt_us(max(r['max_us'] for r in rows)),
                sum(t.get('runs') or 0 for t in tasks),
                fmt.fmt_pct(duty),
                fmt.fmt_us(window),
                computes,
            ),
            'figures': {
                'requests_held': held,
                'wait_us': wait,
                'waits': sum(r['waits'] for r in rows),
                'requests': n,
                'time_us': whole,
                'audit_runs': sum(t.get('runs') or 0 for t in tasks),
                'audit_us': audit_us,
                'computes': computes,
                'window_us': window,
                'audit_duty': duty,
            },
            'sure': {
                'share': share,
                'of': 'time of the %d requests of the operations it held '
                'up (%s), spent waiting for the audit; %d of them '
                'waited' % (n, fmt.fmt_us(whole), held),
            },
            'requests': examples[:KEEP],
            'settings': [
                {
                    'section': 'DEFAULT',
                    'option': 'update_resources_interval',
                    'values': values,
                    'direction': 'raise (0: the periodic default, 60 s)',
                    'tradeoff': 'the placement inventory and the compute node '
                    'record are refreshed less often: drift after '
                    'an out-of-band change lasts longer',
                }
            ],
            'check': 'run the same load with the interval raised and '
            '`instrument-report compare`: this finding resolved, the '
            'periodic table\'s "requests held up" by %s down' % AUDIT_TASK,
        }
    ]


# -- rule 3: RPC calls timing out ---------------------------------------


def _served_by(ev: Evidence, method: str) -> set:
    """The services whose dispatches of ``method`` were seen."""
    return {
        svc
        for svc, rows in (ev.load.get('queues') or {}).items()
        if any(r['method'] == method for r in rows)
    }


def _long_waits(ev: Evidence, row: dict, option: str) -> tuple:
    """``(long waits [(us, req)], {caller: timeout s}, values)``: the
    calls answered after ``RPC_LONG_SHARE`` of their caller's configured
    time-out (callers that recorded none are left out)."""
    long: list = []
    limits: dict = {}
    callers = [caller for caller, _heap in row.get('waits') or ()]
    values = ev.values(callers, 'DEFAULT', option)
    for caller, heap in row.get('waits') or ():
        [v] = ev.values([caller], 'DEFAULT', option) or [None]
        if (
            not v
            or not v['recorded']
            or not isinstance(v['value'], (int, float))
            or isinstance(v['value'], bool)
            or v['value'] <= 0
        ):
            continue
        limits[caller] = v['value']
        floor = RPC_LONG_SHARE * v['value'] * 1e6
        long.extend((us, req) for us, req in heap if us >= floor)
    return long, limits, [v for v in values if v['recorded']]


def rpc_timeouts(ev: Evidence) -> list:
    """RPC calls that timed out (``MessagingTimeout``), or whose replies
    waited ``RPC_LONG_SHARE`` of their caller's configured time-out or
    more, per topic and method, with how long the server side took to
    answer; when the service answering is saturated (rule 8), its
    workers are named too."""
    out = []
    for row in ev.rpc:
        option = (
            'long_rpc_timeout'
            if row['method'] in LONG_RPC_METHODS
            else 'rpc_response_timeout'
        )
        served = (
            'the server side (rpc.dispatch) answered %d times, the '
            'longest in %s'
            % (row['dispatched'], fmt.fmt_us(row['dispatch_max_us']))
            if row['dispatched']
            else 'the server side recorded no dispatch of it'
        )
        by = _served_by(ev, row['method'])
        sats = [sat for sat in saturated(ev) if sat['svc'] in by]
        busy = (
            '; nova-%s, which answers it, is saturated (rule '
            'service_saturation: its queue wait grew from %s to %s)'
            % (
                sats[0]['svc'],
                fmt.fmt_us(sats[0]['queue']['first_mean_us']),
                fmt.fmt_us(sats[0]['queue']['peak_mean_us']),
            )
            if sats
            else ''
        )
        workers: list = [_workers_setting(ev, sat) for sat in sats]
        if row['timeouts']:
            where = row['callers']
            values = ev.values(where, 'DEFAULT', option)
            out.append(
                {
                    'rule': 'rpc_timeouts',
                    'title': 'RPC %s.%s timed out on %s'
                    % (
                        row['topic'],
                        row['method'],
                        ', '.join(
                            '%s@%s' % (svc or '?', host or '?')
                            for host, svc in sorted(
                                {(h, s) for h, s, _p in where}
                            )
                        ),
                    ),
                    'key': 'rpc_timeouts:%s.%s'
                    % (row['topic'], row['method']),
                    'seen': '%d of %d calls of %s.%s timed out '
                    '(MessagingTimeout), the longest call %s; %s%s'
                    % (
                        row['timeouts'],
                        row['calls'],
                        row['topic'],
                        row['method'],
                        fmt.fmt_us(row['max_us']),
                        served,
                        busy,
                    ),
                    'figures': {
                        'calls': row['calls'],
                        'timeouts': row['timeouts'],
                        'max_us': row['max_us'],
                        'dispatched': row['dispatched'],
                        'dispatch_max_us': row['dispatch_max_us'],
                        'saturated': [sat['svc'] for sat in sats],
                    },
                    'sure': {
                        'share': _share(row['timeouts'], row['calls']),
                        'of': '%d calls of %s.%s: those that timed out'
                        % (row['calls'], row['topic'], row['method']),
                    },
                    'requests': _slowest(row['requests']),
                    'settings': workers
                    + [
                        {
                            'section': 'DEFAULT',
                            'option': option,
                            'values': values,
                            'direction': (
                                'raise above the server side\'s longest answer'
                            ),
                            'tradeoff': (
                                'a caller waits that long for a server '
                                'that died; when the server side is slow '
                                'because it is saturated (its own queue '
                                'wait grows), its workers are the knob, '
                                'not the time-out'
                            ),
                        }
                    ],
                    'check': 'run the same load with %s raised (or the %s '
                    'service\'s workers) and `instrument-report '
                    'compare`: this finding resolved, no '
                    'MessagingTimeout of %s in the failures'
                    % (option, row['topic'], row['method']),
                }
            )
            continue
        long, limits, values = _long_waits(ev, row, option)
        if len(long) < RPC_LONG_MIN:
            continue
        shortest = min(limits.values())
        out.append(
            {
                'rule': 'rpc_timeouts',
                'title': 'RPC %s.%s replies wait long against %s on %s'
                % (
                    row['topic'],
                    row['method'],
                    option,
                    ', '.join(
                        '%s@%s' % (svc or '?', host or '?')
                        for host, svc in sorted(
                            {(h, s) for h, s, _p in limits}
                        )
                    ),
                ),
                'key': 'rpc_timeouts:%s.%s' % (row['topic'], row['method']),
                'seen': (
                    '%d of %d calls of %s.%s waited %d %% or more of their '
                    'caller\'s %s (%s s) for the reply, none timed out, '
                    'the longest %s; %s%s'
                )
                % (
                    len(long),
                    row['calls'],
                    row['topic'],
                    row['method'],
                    int(RPC_LONG_SHARE * 100),
                    option,
                    '/'.join(str(v) for v in sorted(set(limits.values()))),
                    fmt.fmt_us(row['max_us']),
                    served,
                    busy,
                ),
                'figures': {
                    'calls': row['calls'],
                    'timeouts': 0,
                    'long': len(long),
                    'timeout_s': shortest,
                    'max_us': row['max_us'],
                    'max_share_of_timeout': row['max_us'] / (shortest * 1e6),
                    'dispatched': row['dispatched'],
                    'dispatch_max_us': row['dispatch_max_us'],
                    'saturated': [sat['svc'] for sat in sats],
                },
                'sure': {
                    'share': _share(len(long), row['calls']),
                    'of': '%d calls of %s.%s: those that waited %d %% or '
                    'more of their time-out'
                    % (
                        row['calls'],
                        row['topic'],
                        row['method'],
                        int(RPC_LONG_SHARE * 100),
                    ),
                },
                'requests': _slowest(p for p in long if p[1]),
                'settings': workers
                + [
                    {
                        'section': 'DEFAULT',
                        'option': option,
                        'values': values,
                        'direction': (
                            'raise above the server side\'s longest '
                            'answer, with room: one slower answer times '
                            'out'
                            if not sats
                            else 'leave: the server side is saturated, '
                            'its workers first'
                        ),
                        'tradeoff': (
                            'a caller waits that long for a server that '
                            'died; when the server side is slow because '
                            'it is saturated (its own queue wait grows), '
                            'its workers are the knob, not the time-out'
                        ),
                    }
                ],
                'check': 'run the same load with %s and `instrument-report '
                'compare`: this finding resolved, the calls\' '
                'longest wait under half of the time-out'
                % (
                    'the %s service\'s workers raised' % sats[0]['svc']
                    if sats
                    else option + ' raised'
                ),
            }
        )
    return out


# -- rule 2: DB deadlocks and oslo.db retries --------------------------------


def db_deadlocks(ev: Evidence) -> list:
    """oslo.db's retries (``wrap_db_retry``: deadlocks, lost
    connections) concentrated on one DB API function, the operations of
    the requests that retried, the statements that deadlocked (query
    class, database, enclosing call) and the requests whose retries
    ran out."""
    table = ev.db_retries
    kind_of = {s.req: s.kind for s in ev.summaries}
    per_kind: dict = {}
    for s in ev.summaries:
        per_kind[s.kind] = per_kind.get(s.kind, 0) + 1
    deadlocks = table.get('deadlocks') or []
    out = []
    for row in table.get('funcs') or ():
        if row['count'] < DB_RETRY_MIN and not row['exhausted']:
            continue
        reqs = row['requests']
        ops: dict = {}
        for req in reqs:
            kind = kind_of.get(req)
            if kind is not None:
                ops[kind] = ops.get(kind, 0) + 1
        of = sum(per_kind[k] for k in ops)
        share = _share(sum(ops.values()), of)
        func = row['func']
        short = func.rsplit('.', 1)[-1]
        # the deadlocked statements of the requests that retried here
        mine = set(reqs)
        classes = [
            d for d in deadlocks if mine & {r for _us, r in d['requests']}
        ] or (deadlocks if len(table.get('funcs') or ()) == 1 else [])
        dbs = sorted({d['db'] for d in classes})
        groups = sorted({db_database_group(db) for db in dbs}) or ['database']
        where = row['where']
        settings = []
        for group in groups:
            settings.append(
                {
                    'section': group,
                    'option': 'connection',
                    'values': ev.values(where, group, 'connection'),
                    'direction': 'one writer: point it at a single node of a '
                    'multi-writer (Galera) cluster, or a VIP or '
                    'proxy that sends every write to one node; '
                    'reads may use slave_connection',
                    'tradeoff': 'writes no longer spread over the cluster\'s '
                    'nodes (they never scaled: each node applies '
                    'every write); failover to another writer '
                    'must be handled by the VIP or proxy.  Never '
                    'recorded: it holds credentials',
                }
            )
            settings.append(
                {
                    'section': group,
                    'option': 'db_max_retries',
                    'values': ev.values(where, group, 'db_max_retries'),
                    'direction': (
                        'raise: %d calls ran out of retries' % row['exhausted']
                    )
                    if row['exhausted']
                    else 'leave: no call ran out of retries',
                    'tradeoff': 'more retries turn failures into slower '
                    'requests and do not remove the conflicts; '
                    'nova\'s own DB API functions retry a fixed '
                    'number of times (wrap_db_retry(max_retries='
                    '5)), which this option does not change',
                }
            )
        out.append(
            {
                'rule': 'db_deadlocks',
                'title': 'DB retries concentrated on %s (%s) on %s'
                % (
                    short,
                    ', '.join(
                        '%s %d' % kv
                        for kv in sorted(
                            row['classes'].items(), key=lambda kv: -kv[1]
                        )
                    ),
                    _where([{'host': h, 'svc': sv} for h, sv, _p in where]),
                ),
                'key': 'db_deadlocks:%s' % func,
                'seen': '%d retries of %s by oslo.db (%s), %d ran out of '
                'retries; %d requests retried (%s); statements that '
                'deadlocked: %s'
                % (
                    row['count'],
                    func,
                    ', '.join(
                        '%s %d' % kv for kv in sorted(row['classes'].items())
                    ),
                    row['exhausted'],
                    len(reqs),
                    ', '.join(
                        '%s %d of %d' % (k, n, per_kind[k])
                        for k, n in sorted(ops.items())
                    )
                    or 'operations not known',
                    '; '.join(
                        'query %s on %s in %s: %d'
                        % (d['fp'][:12], d['db'], d['call'], d['count'])
                        for d in classes[:KEEP]
                    )
                    or 'none recorded',
                ),
                'figures': {
                    'retries': row['count'],
                    'classes': dict(row['classes']),
                    'exhausted': row['exhausted'],
                    'requests_retried': len(reqs),
                    'operations': ops,
                    'failed_requests': list(row['failed']),
                    'deadlocked_queries': [
                        {k: d[k] for k in ('fp', 'db', 'call', 'count')}
                        for d in classes
                    ],
                },
                'sure': {
                    'share': share,
                    'of': '%d requests of the operations that retried '
                    '(%s): those with a retry of %s'
                    % (of, ', '.join(sorted(ops)) or '-', short),
                },
                'requests': (
                    list(row['failed'])
                    + _slowest(
                        p
                        for d in classes
                        for p in d['requests']
                        if p[1] not in row['failed']
                    )
                )[:KEEP],
                'settings': settings,
                'check': 'run the same load with one writer and '
                '`instrument-report compare`: this finding '
                'resolved, the DB retry rate and DBDeadlock '
                'failures down',
            }
        )
    return out


# -- rule 4: scheduling collisions ------------------------------------------


def scheduling_collisions(ev: Evidence) -> list:
    """Claims lost because several schedulers chose the same hosts: a
    ``scheduler.claim`` that placement refused (another scheduler's
    allocation took the room first) or a ``compute.claim`` that failed
    on the compute (then the conductor reschedules), with more than one
    scheduler seen and ``[filter_scheduler] host_subset_size`` not
    above their number."""
    sc = ev.scheduling
    schedulers = list(sc.get('schedulers') or ())
    lost = sc.get('lost') or 0
    failed = sc.get('compute_failed') or 0
    claims = sc.get('claims') or 0
    compute_claims = sc.get('compute_claims') or 0
    collisions = lost + failed
    share = max(_share(lost, claims) or 0, _share(failed, compute_claims) or 0)
    if (
        len(schedulers) < 2
        or collisions < COLLISION_MIN
        or share < COLLISION_MIN_SHARE
    ):
        return []
    subset = ev.values(schedulers, 'filter_scheduler', 'host_subset_size')
    sizes = [
        v['value']
        for v in subset
        if v['recorded'] and isinstance(v['value'], int)
    ]
    # a subset above the number of schedulers spreads their choices:
    # collisions left there are not this knob's
    if sizes and min(sizes) > len(schedulers):
        return []
    # the hosts more than one scheduler selected
    chosen: dict = {}
    for key, hosts in (sc.get('selected') or {}).items():
        for host in hosts:
            chosen.setdefault(host, set()).add(key)
    shared = sorted(h for h, keys in chosen.items() if len(keys) > 1)
    reqs = sc.get('requests') or {}
    gave_up = sc.get('gave_up') or 0
    rescheduled = sum(
        1
        for s in ev.summaries
        if s.kind == 'boot'
        for row in getattr(s, 'instances', None) or ()
        if (row.get('attempts') or 0) > 1
    )
    conductors = [
        p for p in ev.view['processes'] or [] if p.get('svc') == 'conductor'
    ]
    attempts = ev.values(
        [(p.get('host'), 'conductor', p.get('pid')) for p in conductors]
        or schedulers,
        'scheduler',
        'max_attempts',
    )
    n = len(schedulers)
    return [
        {
            'rule': 'scheduling_collisions',
            'title': 'Schedulers collide on the same hosts: %d schedulers, '
            'host_subset_size %s'
            % (
                n,
                '/'.join(str(v) for v in sorted(set(sizes))) or 'not recorded',
            ),
            'key': 'scheduling_collisions',
            'seen': '%d schedulers (%s) selected hosts for the same builds; '
            '%d of %d placement claims were refused (another '
            'scheduler\'s allocation took the room), %d of %d claims '
            'failed on the compute; %d instances rescheduled, %d '
            'builds out of attempts; hosts selected by several '
            'schedulers: %s'
            % (
                n,
                _where([{'host': h, 'svc': s} for h, s, _p in schedulers]),
                lost,
                claims,
                failed,
                compute_claims,
                rescheduled,
                gave_up,
                ', '.join(shared[:KEEP]) or 'none',
            ),
            'figures': {
                'schedulers': n,
                'claims': claims,
                'claims_lost': lost,
                'compute_claims': compute_claims,
                'compute_claims_failed': failed,
                'rescheduled': rescheduled,
                'out_of_attempts': gave_up,
                'shared_hosts': shared,
                'failed_requests': _slowest(reqs.get('gave_up') or ()),
            },
            'sure': {
                'share': share,
                'of': 'claims made (%d in placement, %d on computes): '
                'those another scheduler\'s choice made fail'
                % (claims, compute_claims),
            },
            'requests': _slowest(
                list(reqs.get('lost') or ()) + list(reqs.get('failed') or ())
            ),
            'settings': [
                {
                    'section': 'filter_scheduler',
                    'option': 'host_subset_size',
                    'values': subset,
                    'direction': 'raise above the number of schedulers (%d)'
                    % n,
                    'tradeoff': (
                        'each scheduler picks at random among that many '
                        'best-weighed hosts: the weighers\' order '
                        '(packing or spreading) is followed less '
                        'strictly'
                    ),
                },
                {
                    'section': 'scheduler',
                    'option': 'max_attempts',
                    'values': attempts,
                    'direction': (
                        'raise: %d builds failed out of attempts' % gave_up
                    )
                    if gave_up
                    else 'leave: no build ran out of attempts',
                    'tradeoff': 'more reschedules per build: a failing build '
                    'takes longer to fail, and each attempt holds '
                    'an alternate host\'s allocation',
                },
            ],
            'check': 'run the same load with host_subset_size above the '
            'number of schedulers and `instrument-report compare`: '
            'this finding resolved, the reschedule rate and '
            'NoValidHost / MaxRetriesExceeded failures down',
        }
    ]


# -- rule 5: identity ---------------------------------------------------------


def _count(errors: dict, classes: typing.AbstractSet) -> int:
    return sum(n for cls, n in errors.items() if cls in classes)


def _server_errors(errors: dict) -> int:
    return sum(n for cls, n in errors.items() if cls.startswith('http_5'))


def _callers(rows: list) -> list:
    return sorted({(r['host'], r['svc'], r['pid']) for r in rows}, key=repr)


def identity_slow(ev: Evidence) -> list:
    """Token validations (keystonemiddleware in nova-api) and token
    requests (keystoneauth1's auth plugins) that timed out, could not
    reach keystone, or were slow on the requests' critical path."""
    rows = [r for r in ev.calls if r['service'] == 'identity']
    if not rows:
        return []
    validations = [r for r in rows if r['call'] == 'validation']
    calls = [r for r in rows if r['call'] == 'call']
    errors: dict = {}
    for r in calls:
        for cls, n in r['errors'].items():
            errors[cls] = errors.get(cls, 0) + n
    timeouts = _count(errors, CALL_TIMEOUTS)
    unreached = _count(errors, CALL_UNREACHED)
    server = _server_errors(errors)
    refused = sum(
        _count(r['errors'], VALIDATION_FAILURES) for r in validations
    )
    # a validation's own keystone call (GET) is inside it: counted once
    inner = [r for r in calls if not (validations and r['method'] == 'GET')]
    slow = sum(r['slow'] for r in validations) + sum(r['slow'] for r in inner)
    cp = whole = waited = n = 0
    for s in ev.summaries:
        if getattr(s, 'loss', None):
            continue
        n += 1
        whole += max(s.end - s.start, 0)
        times = s.cp
        mine = sum(times.get(c, 0) for c in IDENTITY_COMPONENTS)
        if mine:
            cp += mine
            waited += 1
    share = _share(cp, whole)
    n_valid = sum(r['calls'] for r in validations)
    n_tokens = sum(r['calls'] for r in inner)
    failed = timeouts + unreached + server + refused
    if not failed and (
        slow < IDENTITY_MIN_SLOW
        or (share or 0) < IDENTITY_MIN_SHARE
        or (_share(slow, n_valid + n_tokens) or 0) < IDENTITY_MIN_SLOW_SHARE
    ):
        return []
    longest = max(r['max_us'] for r in rows)
    cached_where = _callers(validations)
    settings = []
    if validations:
        cache_time = ev.values(
            cached_where, 'keystone_authtoken', 'token_cache_time'
        )
        servers = ev.values(
            cached_where, 'keystone_authtoken', 'memcached_servers'
        )
        off = any(
            v['recorded'] and isinstance(v['value'], int) and v['value'] <= 0
            for v in cache_time
        )
        shared = [v for v in servers if v['recorded'] and v['value']]
        settings.append(
            {
                'section': 'keystone_authtoken',
                'option': 'token_cache_time',
                'values': cache_time,
                'direction': 'raise above 0: the token cache is off, every '
                'request validates its token with keystone'
                if off
                else 'leave (or raise): a cached token is validated '
                'again after this many seconds',
                'tradeoff': (
                    'a revoked token is still accepted until its cached '
                    'validation expires'
                ),
            }
        )
        settings.append(
            {
                'section': 'keystone_authtoken',
                'option': 'memcached_servers',
                'values': servers,
                'direction': 'leave: a shared cache is set'
                if shared and len(shared) == len(servers)
                else (
                    'set: without it each nova-api process caches tokens in '
                    'its '
                    'own memory, and every worker and host validates each '
                    'token '
                    'again'
                ),
                'tradeoff': 'a memcached to run beside nova-api; '
                'memcache_security_strategy to protect what it '
                'holds',
            }
        )
        if timeouts or unreached or refused:
            settings.append(
                {
                    'section': 'keystone_authtoken',
                    'option': 'http_connect_timeout',
                    'values': ev.values(
                        cached_where,
                        'keystone_authtoken',
                        'http_connect_timeout',
                    ),
                    'direction': 'raise only when keystone answers, slowly '
                    '(the longest validation took %s)'
                    % fmt.fmt_us(max(r['max_us'] for r in validations)),
                    'tradeoff': (
                        'an API request waits that long for a keystone '
                        'that is down'
                    ),
                }
            )
    settings.append(
        {
            'section': 'token',
            'option': 'provider',
            'values': [],
            'direction': 'fernet, in keystone.conf (keystone\'s, not recorded '
            'by nova): validated by keystone without a database '
            'lookup; PKI and UUID tokens slow down and time out '
            'under load',
            'tradeoff': 'Fernet keys to distribute and rotate on every '
            'keystone node',
        }
    )
    failed_pairs = [p for r in rows for p in r['failed']]
    slow_pairs = [p for r in validations + inner for p in r['slowest']]
    where = rows
    return [
        {
            'rule': 'identity_slow',
            'title': 'Identity slow or failing: %s' % _where(where),
            'key': 'identity_slow',
            'seen': (
                '%d token validations by keystonemiddleware (%d failed for '
                'want of keystone) and %d token requests to keystone; %d '
                'calls to keystone timed out, %d could not reach it, %d '
                'answered with a server error; %d validations or token '
                'requests took %s or more, the longest %s'
            )
            % (
                n_valid,
                refused,
                n_tokens,
                timeouts,
                unreached,
                server,
                slow,
                fmt.fmt_us(SLOW_CALL_US),
                fmt.fmt_us(longest),
            ),
            'figures': {
                'validations': n_valid,
                'validations_failed': refused,
                'token_requests': n_tokens,
                'timeouts': timeouts,
                'unreached': unreached,
                'server_errors': server,
                'slow': slow,
                'max_us': longest,
                'critical_us': cp,
                'requests_waited': waited,
                'requests': n,
                'per_service': [
                    {
                        'host': r['host'],
                        'svc': r['svc'],
                        'call': r['call'],
                        'method': r['method'],
                        'route': r['route'],
                        'calls': r['calls'],
                        'slow': r['slow'],
                        'errors': r['errors'],
                        'max_us': r['max_us'],
                    }
                    for r in rows
                ],
            },
            'sure': {
                'share': share,
                'of': 'critical-path time of the %d requests (%s), spent '
                'validating tokens or getting them; %d of them '
                'did' % (n, fmt.fmt_us(whole), waited),
            },
            'requests': _slowest(failed_pairs + slow_pairs),
            'settings': settings,
            'check': 'run the same load with the token cache on (and shared) '
            'and `instrument-report compare`: this finding resolved, '
            'identity\'s rows in the services table fewer and faster',
        }
    ]


# -- rule 6: network --------------------------------------------------------


def network_failures(ev: Evidence) -> list:
    """neutron calls that failed (timed out, could not reach neutron, a
    server error), per call, with the builds they failed or
    rescheduled; ports that could not be bound and VIF plug events that
    never came (nova's failures)."""
    per_call: dict = {}
    for r in ev.calls:
        if r['service'] == 'network' and r['call'] == 'call':
            per_call.setdefault((r['method'], r['route']), []).append(r)
    by_req = {s.req: s for s in ev.summaries}
    out = []
    for (method, route), rows in sorted(per_call.items()):
        errors: dict = {}
        for r in rows:
            for cls, n in r['errors'].items():
                errors[cls] = errors.get(cls, 0) + n
        timeouts = _count(errors, CALL_TIMEOUTS)
        unreached = _count(errors, CALL_UNREACHED)
        server = _server_errors(errors)
        failed = timeouts + unreached + server
        if failed < NETWORK_MIN_FAILED:
            continue
        calls = sum(r['calls'] for r in rows)
        bad = [
            r
            for r in rows
            if _count(r['errors'], CALL_TIMEOUTS | CALL_UNREACHED)
            or _server_errors(r['errors'])
        ]
        where = _callers(bad)
        reqs = sorted({q for r in bad for q in r['failed_requests']})
        mine = [by_req[q] for q in reqs if q in by_req]
        broke = sum(1 for s in mine if s.state not in GOOD_STATES)
        rescheduled = sum(
            1
            for s in mine
            for row in getattr(s, 'instances', None) or ()
            if (row.get('attempts') or 0) > 1
        )
        answered = max((r['ok_max_us'] for r in rows), default=0)
        classes = ', '.join(
            '%s %d' % kv
            for kv in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        settings = [
            {
                'section': 'neutron',
                'option': 'timeout',
                'values': ev.values(where, 'neutron', 'timeout'),
                'direction': (
                    'raise above neutron\'s longest answer (%s)'
                    % fmt.fmt_us(answered)
                )
                if timeouts
                else 'leave: no call timed out',
                'tradeoff': 'a call waits that long for a neutron that is '
                'down; a slow neutron is the cause to fix (its '
                'workers, its database)',
            },
            {
                'section': 'neutron',
                'option': 'http_retries',
                'values': ev.values(where, 'neutron', 'http_retries'),
                'direction': 'raise: %d calls could not reach neutron'
                % unreached
                if unreached
                else 'leave: it retries connection failures only',
                'tradeoff': 'each retry adds to a failing call\'s time',
            },
        ]
        if any(r['svc'] == 'compute' for r in bad):
            settings.append(
                {
                    'section': 'DEFAULT',
                    'option': 'network_allocate_retries',
                    'values': ev.values(
                        [w for w in where if w[1] == 'compute'],
                        'DEFAULT',
                        'network_allocate_retries',
                    ),
                    'direction': 'raise when neutron fails now and then: '
                    'the compute retries the allocation itself '
                    'instead of rescheduling the build to '
                    'another host (or failing it)',
                    'tradeoff': 'a build waits through the retries (1 s, '
                    'doubling, at most 30 s)',
                }
            )
        out.append(
            {
                'rule': 'network_failures',
                'title': 'neutron %s %s failing on %s'
                % (
                    method,
                    route,
                    _where([{'host': h, 'svc': s} for h, s, _p in where]),
                ),
                'key': 'network_failures:%s %s' % (method, route),
                'seen': (
                    '%d of %d calls of network %s %s failed (%s): %d timed '
                    'out, %d could not reach neutron, %d server errors; '
                    'their requests: %d, %d of them failed, %d instances '
                    'rescheduled; neutron\'s longest answer %s'
                )
                % (
                    failed,
                    calls,
                    method,
                    route,
                    classes,
                    timeouts,
                    unreached,
                    server,
                    len(reqs),
                    broke,
                    rescheduled,
                    fmt.fmt_us(answered),
                ),
                'figures': {
                    'calls': calls,
                    'failed': failed,
                    'timeouts': timeouts,
                    'unreached': unreached,
                    'server_errors': server,
                    'errors': dict(sorted(errors.items())),
                    'requests': len(reqs),
                    'requests_failed': broke,
                    'rescheduled': rescheduled,
                    'ok_max_us': answered,
                    'per_service': [
                        {
                            'host': r['host'],
                            'svc': r['svc'],
                            'calls': r['calls'],
                            'errors': r['errors'],
                            'retries': r['retries'],
                        }
                        for r in rows
                    ],
                },
                'sure': {
                    'share': _share(failed, calls),
                    'of': '%d calls of network %s %s: those that failed'
                    % (calls, method, route),
                },
                'requests': _slowest(p for r in bad for p in r['failed']),
                'settings': settings,
                'check': (
                    'run the same load with neutron answering in time (or '
                    'the time-out raised) and `instrument-report '
                    'compare`: this finding resolved, the network rows of '
                    'the failures table gone'
                ),
            }
        )
    out.extend(_nova_network_errors(ev))
    return out


def _service_where(ev: Evidence, svc: str) -> list:
    """``[(host, svc, pid)]`` of the processes of ``svc``: those that
    started as it, else those its RPC dispatches were recorded in
    (services sharing one process, as the demo's, start under another
    name)."""
    where = [
        (p.get('host'), svc, p.get('pid'))
        for p in ev.view['processes'] or []
        if p.get('svc') == svc
    ]
    if where:
        return where
    return sorted(
        {
            (r['host'], svc, r['pid'])
            for r in (ev.load.get('queues') or {}).get(svc) or ()
        },
        key=repr,
    )


def _nova_network_errors(ev: Evidence) -> list:
    """Ports that could not be bound (``PortBindingFailed``: the build
    is rescheduled) and VIF plug events that never came
    (``VirtualInterfaceCreateException``), from the failures table."""
    failures = ev.section('failures') or []
    out = []
    for key, classes in (
        ('port_binding', PORT_BINDING_ERRORS),
        ('vif_plugging', VIF_PLUG_ERRORS),
    ):
        rows = [
            f
            for f in failures
            if str(f.get('cls') or '').rsplit('.', 1)[-1] in classes
        ]
        if not rows:
            continue
        reqs = []
        for f in rows:
            for q in f.get('requests') or ():
                if q not in reqs:
                    reqs.append(q)
        # each row's are its slowest; of them all, the slowest first
        # (end-to-end time, then start and id)
        want = set(reqs)
        took = {
            s.req: (s.start - s.end, s.start)
            for s in ev.summaries
            if s.req in want
        }
        reqs.sort(key=lambda q: took.get(q, (0, 0)) + (q,))
        # one failure raised where the port was bound (nova's network
        # allocation, in a thread of its own) and raised again in the
        # threads that waited on it (the driver's spawn): counted once,
        # where it was raised
        origin = [f for f in rows if f.get('ev') in NETWORK_ORIGINS]
        counted = origin or rows
        count = sum(f['count'] for f in counted)
        recovered = sum(f.get('recovered') or 0 for f in counted)
        computes = [
            p for p in ev.view['processes'] or [] if p.get('svc') == 'compute'
        ]
        where = [(p.get('host'), 'compute', p.get('pid')) for p in computes]
        if key == 'vif_plugging':
            settings = [
                {
                    'section': 'DEFAULT',
                    'option': 'vif_plugging_timeout',
                    'values': ev.values(
                        where, 'DEFAULT', 'vif_plugging_timeout'
                    ),
                    'direction': 'raise above the time neutron\'s agents take '
                    'to wire a port under load',
                    'tradeoff': 'a build whose port is never wired fails that '
                    'much later',
                },
                {
                    'section': 'DEFAULT',
                    'option': 'vif_plugging_is_fatal',
                    'values': ev.values(
                        where, 'DEFAULT', 'vif_plugging_is_fatal'
                    ),
                    'direction': 'leave true: false boots servers whose '
                    'network may not work',
                    'tradeoff': 'false turns a failed build into a server '
                    'without network',
                },
            ]
            what = (
                'VIF plug events that never came (the build waited '
                'vif_plugging_timeout for neutron)'
            )
        else:
            settings = [
                {
                    'section': 'scheduler',
                    'option': 'max_attempts',
                    'values': ev.values(
                        _service_where(ev, 'conductor'),
                        'scheduler',
                        'max_attempts',
                    ),
                    'direction': 'leave: a build whose port could not be '
                    'bound is rescheduled to another host; the '
                    'host\'s neutron agent (down, or missing '
                    'the network\'s physical network) is the '
                    'cause',
                    'tradeoff': 'more attempts hide a host that binds no port',
                }
            ]
            what = (
                'ports neutron could not bind on the chosen host (its '
                'answer to the binding, PUT /v2.0/ports/{id}, said '
                'binding_failed)'
            )
        out.append(
            {
                'rule': 'network_failures',
                'title': 'Network: %s'
                % (
                    'ports neutron could not bind'
                    if key == 'port_binding'
                    else 'VIF plug events that never came'
                ),
                'key': 'network_failures:%s' % key,
                'seen': '%d %s (%s), %d recovered (rescheduled, or the '
                'instance still built)'
                % (
                    count,
                    what,
                    ', '.join(sorted({str(f.get('cls')) for f in rows})),
                    recovered,
                ),
                'figures': {
                    'failures': count,
                    'recovered': recovered,
                    'requests': len(reqs),
                },
                'sure': {
                    'share': _share(count - recovered, count),
                    'of': '%d such failures: those not recovered' % count,
                },
                'requests': reqs[:KEEP],
                'settings': settings,
                'check': 'run the same load after the change and '
                '`instrument-report compare`: this finding resolved',
            }
        )
    return out


# -- rule 8: a saturated service ---------------------------------------------


def _cpu_over(rates: list, t0: int, t1: int) -> tuple:
    """``(mean cores, peak cores, [(t0, t1, cores)])`` of a process's
    CPU rates over ``[t0, t1]`` (time-weighted), None when no rate
    overlaps it."""
    busy = span = 0.0
    peak = 0.0
    used = []
    for a, b, cores in rates:
        lo, hi = max(a, t0), min(b, t1)
        if hi <= lo:
            continue
        busy += cores * (hi - lo)
        span += hi - lo
        peak = max(peak, cores)
        used.append((a, b, cores))
    if not span:
        return None, None, []
    return busy / span, peak, used


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0


def _window_means(values: list, k: int) -> list:
    """The mean of each ``k`` values in a row of ``values`` (``k`` <=
    their count), as ``_mean`` of each slice gives it: integer values
    (times in microseconds) by a running sum, exact and the same
    floats in O(n) instead of O(n k); others slice by slice."""
    n = len(values)
    if not all(v.__class__ is int for v in values):
        return [_mean(values[i : i + k]) for i in range(n - k + 1)]
    total = sum(values[:k])
    out = [total / k]
    for i in range(k, n):
        total += values[i] - values[i - k]
        out.append(total / k)
    return out


def saturated(ev: Evidence) -> list:
    """The saturated services (computed once per ``ev``): ``[{svc,
    procs: [(host, svc, pid)], queue: {...}, cpu: [...], callers,
    requests: [(us, req)]}]``: a service of ``WORKERS`` whose queue
    wait grew while a process of it (sampled as that service: never a
    process shared with other services) ran near one core while the
    messages of its longest waits queued (from the first of them sent
    to the last of them dispatched), that others
    wait on (a call's caller), and that does not itself wait on
    another saturated one (its queue then grows because of that
    one's)."""
    if ev._saturated is not None:
        return ev._saturated
    queues = ev.load.get('queues') or {}
    cpu = ev.load.get('cpu') or {}
    found = {}
    for svc, rows in sorted(queues.items()):
        if svc not in WORKERS or len(rows) < SAT_MIN_DISPATCHES:
            continue
        # the mean wait of each SAT_WINDOW-th of its dispatches in a
        # row: the first, and the longest after it (the queue drains
        # once the burst has passed: its end is not the measure)
        k = max(len(rows) // SAT_WINDOW, 2)
        waits = [r['queue_us'] for r in rows]
        means = _window_means(waits, k)
        first = means[0]
        top = max(range(len(means)), key=lambda i: (means[i], -i))
        last = means[top]
        if last < SAT_QUEUE_MIN_US or last < SAT_QUEUE_GROWTH * first:
            continue
        callers = sorted({r['caller'] for r in rows if r['sync']} - {svc})
        if not callers:
            continue
        # the CPU while the longest waits' messages queued: from the
        # first of them sent to the last of them dispatched (not from
        # the service's first dispatch, maybe long before the burst,
        # nor to the end of their dispatches, whose own I/O may last
        # well after the queue drained)
        peak = rows[top : top + k]
        t0 = min(r['ts'] - r['queue_us'] for r in peak)
        t1 = max(r['ts'] for r in peak)
        procs = sorted({(r['host'], r['pid']) for r in rows}, key=repr)
        usage = []
        for host, pid in procs:
            # the samples of that very process as that service: a
            # process that hosts several services (the in-process demo
            # cloud samples itself under another name) cannot say which
            # of them burns its CPU
            rates = cpu.get((host, svc, pid))
            if rates is None:
                continue
            mean, peak, used = _cpu_over(rates, t0, t1)
            if mean is None:
                continue
            usage.append(
                {
                    'host': host,
                    'pid': pid,
                    'mean_cores': round(mean, 3),
                    'peak_cores': round(peak, 3),
                    'samples': [
                        {
                            'from_us': a - t0,
                            'to_us': b - t0,
                            'cores': round(c, 3),
                        }
                        for a, b, c in used[:20]
                    ],
                }
            )
        if not usage or max(u['mean_cores'] for u in usage) < SAT_CPU:
            continue
        found[svc] = {
            'svc': svc,
            'procs': [(h, svc, p) for h, p in procs],
            'queue': {
                'dispatches': len(rows),
                'window': k,
                'first_mean_us': int(first),
                'peak_mean_us': int(last),
                'max_us': max(r['queue_us'] for r in rows),
                'total_us': sum(r['queue_us'] for r in rows),
                'calls': sum(1 for r in rows if r['sync']),
                'window_us': t1 - t0,
            },
            'cpu': usage,
            'callers': callers,
            'requests': [(r['queue_us'], r['req']) for r in rows if r['req']],
        }
    # a saturated service that waits on another saturated one is its
    # victim, not its cause
    out = [
        f
        for svc, f in sorted(found.items())
        if not any(
            svc in g['callers'] for other, g in found.items() if other != svc
        )
    ]
    ev._saturated = out
    return out


def _front_server(ev: Evidence, sat: dict) -> str:
    """What nova-api's processes recorded of the WSGI server hosting
    them (``process.start`` settings ``wsgi``), as text; the knobs of
    both servers when none recorded it."""
    seen = []
    for key in ('server', 'processes', 'threads', 'process_group'):
        for row in ev.values(sat['procs'], FRONT_GROUP, key):
            if row['recorded']:
                seen.append((row['host'], key, row['value']))
    by_host: dict = {}
    for host, key, value in seen:
        by_host.setdefault(host, {})[key] = value
    told = []
    for host, v in sorted(by_host.items()):
        if v.get('server') == 'mod_wsgi':
            told.append(
                'mod_wsgi on %s: WSGIDaemonProcess %s '
                'processes=%s threads=%s'
                % (
                    host,
                    v.get('process_group') or '?',
                    v.get('processes', '?'),
                    v.get('threads', '?'),
                )
            )
        elif v.get('server') == 'uwsgi':
            told.append(
                'uWSGI on %s: processes = %s, threads = %s'
                % (host, v.get('processes', '?'), v.get('threads', '?'))
            )
    if told:
        return '; '.join(told)
    return (
        'under a WSGI server the processes and threads are its own: '
        'uWSGI `processes` / `threads`, mod_wsgi `WSGIDaemonProcess '
        'processes= threads=` (not recorded by this run: the server '
        'was neither, or eventlet\'s own)'
    )


def _workers_setting(ev: Evidence, sat: dict) -> dict:
    section, option = WORKERS[sat['svc']]
    if sat['svc'] == 'api':
        return {
            'section': section,
            'option': option,
            'values': ev.values(sat['procs'], section, option),
            'direction': 'raise (more nova-api processes: %d '
            'process(es) ran near one core each while '
            'requests queued before reaching nova; '
            '`osapi_compute_workers` sizes nova-api\'s '
            'own eventlet server; %s)'
            % (len(sat['procs']), _front_server(ev, sat)),
            'tradeoff': 'each process holds its own DB pools and '
            'memory; no gain past the host\'s cores: '
            'past them, more API hosts',
        }
    return {
        'section': section,
        'option': option,
        'values': ev.values(sat['procs'], section, option),
        'direction': 'raise (more processes of nova-%s: %d process(es) '
        'ran near one core each while its queue grew)'
        % (sat['svc'], len(sat['procs'])),
        'tradeoff': 'each process holds its own DB pool (processes x '
        '(max_pool_size + max_overflow) connections) and '
        'memory; no gain past the host\'s cores',
    }


def service_saturation(ev: Evidence) -> list:
    """A service saturated: a process of it near one core while the
    time its messages wait before their dispatch (nova-api: its
    requests before the paste filter) grows, with callers waiting on
    it (``saturated``) -> its worker count."""
    out = []
    durations = {
        s.req: max(s.end - s.start, 0)
        for s in ev.summaries
        if not getattr(s, 'loss', None)
    }
    for sat in saturated(ev):
        q = sat['queue']
        mine = {}
        for us, req in sat['requests']:
            mine[req] = mine.get(req, 0) + us
        whole = sum(durations[r] for r in mine if r in durations)
        waited = sum(us for r, us in mine.items() if r in durations)
        busiest = max(sat['cpu'], key=lambda u: u['mean_cores'])
        api = sat['svc'] == 'api'
        if api:
            # the request's time starts at the paste filter: its wait
            # before it is on top
            whole += waited
        out.append(
            {
                'rule': 'service_saturation',
                'title': 'nova-%s saturated: %s near one core, its queue '
                'growing'
                % (
                    sat['svc'],
                    _where(
                        [{'host': h, 'svc': sv} for h, sv, _p in sat['procs']]
                    ),
                ),
                'key': 'service_saturation:%s' % sat['svc'],
                'seen': '%d %s to nova-%s (%d calls, by %s) waited '
                '%s %s on average in the first '
                '%d, %s in the %d that waited longest (the longest '
                '%s), those queued over %s; '
                'its busiest process (pid %s on %s) ran %.2f cores on '
                'average (peak %.2f) in the samples of that time'
                % (
                    q['dispatches'],
                    'requests' if api else 'messages',
                    sat['svc'],
                    q['calls'],
                    ', '.join(sat['callers']),
                    'in the front server before the paste filter '
                    '(api.request queue_us)'
                    if api
                    else 'before their dispatch',
                    fmt.fmt_us(q['first_mean_us']),
                    q['window'],
                    fmt.fmt_us(q['peak_mean_us']),
                    q['window'],
                    fmt.fmt_us(q['max_us']),
                    fmt.fmt_us(q['window_us']),
                    busiest['pid'],
                    busiest['host'],
                    busiest['mean_cores'],
                    busiest['peak_cores'],
                ),
                'figures': {
                    'queue': q,
                    'cpu': sat['cpu'],
                    'callers': sat['callers'],
                    'processes': len(sat['procs']),
                    'requests_waited': len(mine),
                    'queue_wait_us': waited,
                    'time_us': whole,
                },
                'sure': {
                    'share': _share(waited, whole),
                    'of': 'time of the %d requests whose %s '
                    'queued for nova-%s (%s%s), spent in its '
                    'queue'
                    % (
                        len(mine),
                        'HTTP requests' if api else 'messages',
                        sat['svc'],
                        fmt.fmt_us(whole),
                        ', their wait before the paste filter included'
                        if api
                        else '',
                    ),
                },
                'requests': _slowest(sat['requests']),
                'settings': [_workers_setting(ev, sat)],
                'check': 'run the same load with more nova-%s workers and '
                '`instrument-report compare`: this finding resolved, '
                'its processes under one core each in the resources '
                'table, %s'
                % (
                    sat['svc'],
                    'the requests\' queue_us down'
                    if api
                    else 'the rpc.queue component down',
                ),
            }
        )
    return out


# -- rule 9: a cell dominating the lists across cells ------------------------


def cell_list_dominance(ev: Evidence) -> list:
    """Lists across cells (``api.cells.query`` per cell or batch) whose
    time one cell's queries took most of -> that cell, and ``[api]``'s
    list settings.  cell0 is left out: near empty, any cell outweighs
    it (a deployment of one cell has nothing to compare)."""
    reqs = (ev.cells or {}).get('reqs') or {}
    durations = {
        s.req: (max(s.end - s.start, 0), s.kind)
        for s in ev.summaries
        if not getattr(s, 'loss', None)
    }
    per_cell: dict = {}
    for req, every in reqs.items():
        cells = {
            cell: c
            for cell, c in every.items()
            if cell != CELL0 and c.get('name') != 'cell0'
        }
        if len(cells) < 2:
            continue
        ranked = sorted(cells.items(), key=lambda kv: -kv[1]['us'])
        total = sum(c['us'] for c in cells.values())
        for cell, _c in ranked:
            per_cell.setdefault(
                cell, {'lists': 0, 'dominated': [], 'info': _c}
            )['lists'] += 1
        (top, c), (_second, d) = ranked[0], ranked[1]
        excess = c['us'] - d['us']
        if (
            c['us'] >= CELL_DOMINANT_SHARE * total
            and excess >= CELL_MIN_EXCESS_US
        ):
            per_cell[top]['dominated'].append((excess, req, c['us'], total))
    out = []
    for cell, row in sorted(per_cell.items()):
        dom = row['dominated']
        if len(dom) < CELL_MIN_LISTS or 2 * len(dom) < row['lists']:
            continue
        info = row['info']
        known = [(x, r) for x, r, _u, _t in dom if r in durations]
        whole = sum(durations[r][0] for _x, r in known)
        ops: dict = {}
        for _x, r in known:
            kind = durations[r][1]
            ops[kind] = ops.get(kind, 0) + 1
        where = [w for w in (ev.cells.get('where') or ())]
        name = info.get('name') or cell
        settings = []
        for option, direction, tradeoff in (
            (
                'instance_list_per_project_cells',
                'true: a project\'s list queries only the cells where it '
                'has instances',
                'one more API database query per list; a project with '
                'instances in that cell still waits for it; an admin\'s '
                'list of all projects still queries every cell',
            ),
            (
                'instance_list_cells_batch_strategy',
                'distributed (each cell asked for its share of the '
                'limit) rather than fixed batches larger than that',
                'a list that needs more rows from one cell than its share '
                'asks it again',
            ),
            (
                'instance_list_cells_batch_fixed_size',
                'with the fixed strategy: lower, toward the limit over '
                'the number of cells',
                'more, smaller queries to every cell',
            ),
        ):
            settings.append(
                {
                    'section': 'api',
                    'option': option,
                    'values': ev.values(where, 'api', option),
                    'direction': direction,
                    'tradeoff': tradeoff,
                }
            )
        excess = sum(x for x, _r, _u, _t in dom)
        out.append(
            {
                'rule': 'cell_list_dominance',
                'title': 'Cell %s (%s) dominates the lists across cells'
                % (name, info.get('db') or '?'),
                'key': 'cell_list_dominance:%s' % cell,
                'seen': 'in %d of the %d lists over several cells that '
                'queried cell %s (uuid %s, database %s), its queries '
                'took at least %d %% of the cells\' time and %s more '
                'than the next cell in all (its queries %s of the '
                'cells\' %s); operations: %s'
                % (
                    len(dom),
                    row['lists'],
                    name,
                    cell,
                    info.get('db') or '?',
                    int(CELL_DOMINANT_SHARE * 100),
                    fmt.fmt_us(excess),
                    fmt.fmt_us(sum(u for _x, _r, u, _t in dom)),
                    fmt.fmt_us(sum(t for _x, _r, _u, t in dom)),
                    ', '.join('%s %d' % kv for kv in sorted(ops.items()))
                    or 'not known',
                ),
                'figures': {
                    'cell': cell,
                    'cell_name': info.get('name'),
                    'db': info.get('db'),
                    'lists': row['lists'],
                    'dominated': len(dom),
                    'excess_us': excess,
                    'cell_us': sum(u for _x, _r, u, _t in dom),
                    'cells_us': sum(t for _x, _r, _u, t in dom),
                    'requests_time_us': whole,
                    'operations': ops,
                },
                'sure': {
                    'share': _share(sum(x for x, _r in known), whole),
                    'of': 'time of the %d lists it dominated (%s): the '
                    'time its queries took beyond the next '
                    'cell\'s' % (len(known), fmt.fmt_us(whole)),
                },
                'requests': _slowest((x, r) for x, r, _u, _t in dom),
                'settings': settings,
                'check': 'look at the SQL of %s (the sql section, by '
                'database) first; then run the same lists with the '
                'settings changed and `instrument-report compare`: '
                'this finding resolved, list latency down'
                % (info.get('db') or 'that cell\'s database'),
            }
        )
    return out


RULES = (
    Rule(
        'db_pool_exhaustion',
        'DB connection pool exhaustion',
        db_pool_exhaustion,
        (
            'database max_pool_size',
            'database max_overflow',
            'database pool_timeout',
            'api_database max_pool_size',
            'api_database max_overflow',
            'api_database pool_timeout',
        ),
    ),
    Rule(
        'db_deadlocks',
        'DB deadlocks and oslo.db retries',
        db_deadlocks,
        (
            'database connection',
            'database db_max_retries',
            'api_database connection',
            'api_database db_max_retries',
        ),
    ),
    Rule(
        'rpc_timeouts',
        'RPC calls timing out',
        rpc_timeouts,
        ('DEFAULT rpc_response_timeout', 'DEFAULT long_rpc_timeout'),
    ),
    Rule(
        'scheduling_collisions',
        'Schedulers colliding on hosts',
        scheduling_collisions,
        ('filter_scheduler host_subset_size', 'scheduler max_attempts'),
    ),
    Rule(
        'build_queueing',
        'Builds queueing on the build slots',
        build_queueing,
        ('DEFAULT max_concurrent_builds',),
    ),
    Rule(
        'audit_collision',
        'Claims held up by the resource audit',
        audit_collision,
        ('DEFAULT update_resources_interval',),
    ),
    Rule(
        'identity_slow',
        'Identity: token validation or requests slow',
        identity_slow,
        (
            'keystone_authtoken token_cache_time',
            'keystone_authtoken memcached_servers',
            'keystone_authtoken http_connect_timeout',
            'token provider',
        ),
    ),
    Rule(
        'network_failures',
        'Network: neutron calls failing',
        network_failures,
        (
            'neutron timeout',
            'neutron http_retries',
            'DEFAULT network_allocate_retries',
            'DEFAULT vif_plugging_timeout',
            'DEFAULT vif_plugging_is_fatal',
            'scheduler max_attempts',
        ),
    ),
    Rule(
        'service_saturation',
        'A saturated service',
        service_saturation,
        ('conductor workers', 'scheduler workers'),
    ),
    Rule(
        'cell_list_dominance',
        'A cell dominating the lists across cells',
        cell_list_dominance,
        (
            'api instance_list_per_project_cells',
            'api instance_list_cells_batch_strategy',
            'api instance_list_cells_batch_fixed_size',
        ),
    ),
)


def run(ev: Evidence) -> list:
    """Every rule's findings, the most sure first."""
    out = []
    for rule in RULES:
        out.extend(rule.fn(ev))
    out.sort(key=lambda f: (-(f['sure']['share'] or 0), f['key']))
    return out
