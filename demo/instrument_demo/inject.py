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
"""The causes ``instrument-demo --inject`` sets up, one per finding.

Each is what the finding's test on real nova injects
(``tests/functional/nova/test_findings*.py``), on the demo's cloud: a
setting set badly, a stand-in slowed or failing.  ``INJECTIONS`` maps
the flag's value to its ``Injection``: the rule it makes fire, what it
does, ``before(case, args)`` (before the cloud's ``setUp``: nova.conf,
patches the instrumentation must wrap) and ``after(case, args)`` (the
cloud up: stand-ins that need its fixtures).  ``case`` is the cloud, a
test case of nova's functional base.

Rule ``db_deadlocks`` has no injection here: the cloud's databases are
sqlite, which does not deadlock (its test runs on MariaDB).
"""

import itertools
import threading
import time
import typing
import uuid

import fixtures
from oslo_config import cfg

CONF = cfg.CONF

# rpc-timeout: the scheduler's answer, against long_rpc_timeout 1
SCHEDULER_SLOW_S = 2.0
# scheduler-collisions: a scheduler claims this long after reading
# placement's candidates
CLAIM_DELAY_S = 0.5
# audit-collision: the audit waits (up to) this long for a claim to
# queue behind it on compute_resources, then holds it this long more
AUDIT_WAIT_S = 2.0
AUDIT_HOLD_S = 0.5
AUDIT = 'update_available_resource'
# identity-slow: each token validation
KEYSTONE_SLOW_S = 0.5
# network-fail: every ``NEUTRON_LATE_EVERY``th port creation answered
# this late, against [neutron] timeout 1
NEUTRON_LATE_S = 2.0
NEUTRON_LATE_EVERY = 2


class Injection(typing.NamedTuple):
    rule: str
    what: str
    before: typing.Callable
    after: typing.Callable
    threads_only: bool = False


def _nothing(case, args) -> None:
    pass


# -- db-pool -----------------------------------------------------------------


def _db_pool_before(case, args) -> None:
    """Pools of one connection, no overflow; nova's sqlite files get the
    ``QueuePool`` oslo.db gives MySQL (sized by the same options)."""
    import sqlalchemy
    from sqlalchemy import pool as sa_pool

    for group in ('database', 'api_database'):
        case.flags(max_pool_size=1, max_overflow=0, group=group)
    engines = case._instrument_demo_engines = []
    original = sqlalchemy.create_engine

    def create(url, **engine_args):
        url = sqlalchemy.engine.make_url(url)
        name = (url.database or '').rsplit('/', 1)[-1]
        nova = (
            url.get_backend_name() == 'sqlite'
            and name.startswith('nova')
            and engine_args.get('poolclass') is sa_pool.NullPool
        )
        if nova:
            # oslo.db's defaults while nova's fixtures migrate (they
            # hold a connection); sized as configured once up
            engine_args.update(
                poolclass=sa_pool.QueuePool,
                pool_size=5,
                max_overflow=50,
                pool_timeout=60,
            )
        engine = original(url, **engine_args)
        if nova:
            engines.append((name, engine))
        return engine

    case.useFixture(fixtures.MonkeyPatch('sqlalchemy.create_engine', create))


def _db_pool_after(case, args) -> None:
    for name, engine in case._instrument_demo_engines:
        group = CONF.api_database if name == 'nova_api' else CONF.database
        old = engine.pool
        old._pool.maxsize = group.max_pool_size
        old._max_overflow = group.max_overflow
        engine.pool = old.recreate()
        old.dispose()


# -- rpc-timeout -------------------------------------------------------------


def _rpc_timeout_before(case, args) -> None:
    """``long_rpc_timeout`` 1, the scheduler ``SCHEDULER_SLOW_S`` to
    answer ``select_destinations``."""
    from nova.scheduler import manager

    case.flags(long_rpc_timeout=1)
    select = manager.SchedulerManager.select_destinations

    def slow(mgr, *a, **kw):
        time.sleep(SCHEDULER_SLOW_S)
        return select(mgr, *a, **kw)

    case.useFixture(
        fixtures.MonkeyPatch(
            'nova.scheduler.manager.SchedulerManager.select_destinations', slow
        )
    )


# -- scheduler-collisions ----------------------------------------------------


def scheduler_hosts(count: int) -> tuple:
    """The hosts of ``count`` schedulers: the cloud's own
    (``scheduler``), then ``sched2``, ``sched3``..."""
    return ('scheduler',) + tuple('sched%d' % n for n in range(2, count + 1))


def schedulers(args) -> int:
    """How many schedulers the demo starts: ``--schedulers``, at least
    two with ``--inject scheduler-collisions``."""
    count = getattr(args, 'schedulers', 1) or 1
    if 'scheduler-collisions' in (args.inject or ()):
        count = max(count, 2)
    return count


def start_schedulers(case, servers: tuple) -> None:
    """The schedulers of ``servers`` after the cloud's own (the first),
    on the one ``scheduler`` topic.  nova's start_service refuses a
    second scheduler; its fixture runs one as start_service does."""
    from nova.tests import fixtures as nova_fixtures

    for host in servers[1:]:
        case.useFixture(nova_fixtures.ServiceFixture('scheduler', host))


def late_claims_schedulers_in_turn(
    case, delay_s: float = CLAIM_DELAY_S, servers=('scheduler', 'sched2')
) -> None:
    """Each scheduler claims ``delay_s`` after reading placement's
    candidates, and the conductor's ``select_destinations`` calls go to
    each of ``servers`` in turn (``schedulers_in_turn``).  Patched
    before the instrumentation starts: its point wraps the late
    claim."""
    from nova.scheduler import utils as scheduler_utils

    claim = scheduler_utils.claim_resources

    def late(*a, **kw):
        time.sleep(delay_s)
        return claim(*a, **kw)

    case.useFixture(
        fixtures.MonkeyPatch('nova.scheduler.utils.claim_resources', late)
    )
    schedulers_in_turn(case, servers)


def schedulers_in_turn(case, servers: tuple) -> None:
    """The conductor's ``select_destinations`` calls go to each of
    ``servers`` in turn, to its own queue, as RabbitMQ hands a queue's
    messages to its consumers (the fake transport gives each message to
    whichever scheduler polls first).  Patched before the
    instrumentation starts."""
    import copy

    from nova.scheduler import rpcapi

    select = rpcapi.SchedulerAPI.select_destinations
    turn = itertools.cycle(servers)
    turn_lock = threading.Lock()

    class InTurn:
        def __init__(self, client, server):
            self.client = client
            self.server = server

        def prepare(self, **kwargs):
            return self.client.prepare(server=self.server, **kwargs)

        def __getattr__(self, name):
            return getattr(self.client, name)

    def in_turn(api, *a, **kw):
        with turn_lock:
            server = next(turn)
        routed = copy.copy(api)
        routed.client = InTurn(api.client, server)
        return select(routed, *a, **kw)

    case.useFixture(
        fixtures.MonkeyPatch(
            'nova.scheduler.rpcapi.SchedulerAPI.select_destinations', in_turn
        )
    )


def _collisions_before(case, args) -> None:
    """Two schedulers on the one topic, ``host_subset_size`` 1, computes
    with room for the servers and little more, each scheduler claiming
    ``CLAIM_DELAY_S`` after reading placement's candidates; the
    conductor's calls go to each scheduler in turn (as RabbitMQ hands a
    queue's messages to its consumers)."""
    case.flags(
        host_subset_size=1,
        shuffle_best_same_weighed_hosts=False,
        group='filter_scheduler',
    )
    case.flags(initial_cpu_allocation_ratio=1.0)
    room = -(-args.servers // args.computes)
    case.useFixture(
        fixtures.MonkeyPatch('instrument_demo.faults.FaultyDriver.vcpus', room)
    )
    # the demo starts the schedulers (``schedulers``: two at least)
    late_claims_schedulers_in_turn(
        case, servers=scheduler_hosts(schedulers(args))
    )


# -- build-queue -------------------------------------------------------------


def _build_queue_before(case, args) -> None:
    """``max_concurrent_builds`` 1 (and, under native threads, where
    nova 34 sizes its long_task pool by the larger of the two,
    ``max_concurrent_snapshots`` 1)."""
    case.flags(max_concurrent_builds=1)
    if args.mode == 'threads':
        case.flags(max_concurrent_snapshots=1)


# -- audit-collision ---------------------------------------------------------


def _audit_before(case, args) -> None:
    """``update_resources_interval`` 1 s, the audit slowed inside
    ``compute_resources`` as a large compute's is (it holds the lock
    until a claim queues behind it, then ``AUDIT_HOLD_S`` more)."""
    from oslo_concurrency import lockutils

    case.flags(update_resources_interval=1)
    from nova.compute import resource_tracker

    pair = resource_tracker.ResourceTracker._pair_instances_to_migrations
    lock = lockutils.internal_fair_lock('compute_resources')

    def slow(tracker, *a, **kw):
        deadline = time.monotonic() + AUDIT_WAIT_S
        while not lock.has_pending_writers and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(AUDIT_HOLD_S)
        return pair(tracker, *a, **kw)

    case.useFixture(
        fixtures.MonkeyPatch(
            'nova.compute.resource_tracker.ResourceTracker.'
            '_pair_instances_to_migrations',
            slow,
        )
    )


def _audit_after(case, args) -> None:
    # what nova's periodic decorator read from nova.conf at import
    for compute in case.computes.values():
        compute.manager._periodic_spacing[AUDIT] = (
            CONF.update_resources_interval
        )


# -- identity-slow -----------------------------------------------------------


def _identity_before(case, args) -> None:
    """The real keystonemiddleware in nova-api against a keystone that
    takes ``KEYSTONE_SLOW_S`` per validation, its token cache off
    (``[keystone_authtoken] token_cache_time = -1``)."""
    from instrument_demo import standins

    keystone = standins.Keystone(
        'tok-%s' % uuid.uuid4().hex,
        'svc-%s' % uuid.uuid4().hex,
        delay=KEYSTONE_SLOW_S,
    )
    standins.real_auth_token(case, keystone)
    case.flags(token_cache_time=-1, group='keystone_authtoken')


# -- network-fail ------------------------------------------------------------


def _network_before(case, args) -> None:
    case.flags(timeout=1, http_retries=0, group='neutron')


def _network_after(case, args) -> None:
    """neutron on a real socket, every ``NEUTRON_LATE_EVERY``th port
    creation answered ``NEUTRON_LATE_S`` late, against
    ``[neutron] timeout`` 1 (``http_retries`` 0): those time out reading
    in the compute, their builds fail."""
    from instrument_demo import standins

    local = case.useFixture(
        standins.LocalServer(standins.NeutronAPI(case.neutron))
    )
    case.flags(endpoint_override=local.url, group='neutron')
    standins.reset_neutron_session()
    answer = threading.Event()
    case.addCleanup(answer.set)
    create_port = case.neutron.create_port
    count = itertools.count()

    def late(body=None):
        if next(count) % NEUTRON_LATE_EVERY == 0:
            answer.wait(NEUTRON_LATE_S)
        return create_port(body=body)

    case.useFixture(
        fixtures.MockPatchObject(case.neutron, 'create_port', side_effect=late)
    )


INJECTIONS = {
    'db-pool': Injection(
        'db_pool_exhaustion',
        '[database]/[api_database] max_pool_size 1, '
        'max_overflow 0 (threads mode only: the databases are files '
        'there)',
        _db_pool_before,
        _db_pool_after,
        threads_only=True,
    ),
    'rpc-timeout': Injection(
        'rpc_timeouts',
        'long_rpc_timeout 1, the scheduler 2 s to answer (every boot fails)',
        _rpc_timeout_before,
        _nothing,
    ),
    'scheduler-collisions': Injection(
        'scheduling_collisions',
        'two schedulers, host_subset_size 1, '
        'computes with room for the servers, claims 0.5 s late',
        _collisions_before,
        _nothing,
    ),
    'build-queue': Injection(
        'build_queueing',
        'max_concurrent_builds 1',
        _build_queue_before,
        _nothing,
    ),
    'audit-collision': Injection(
        'audit_collision',
        'update_resources_interval 1, the resource '
        'audit slowed inside compute_resources',
        _audit_before,
        _audit_after,
    ),
    'identity-slow': Injection(
        'identity_slow',
        'keystonemiddleware in nova-api, keystone 0.5 s '
        'per validation, token_cache_time -1',
        _identity_before,
        _nothing,
    ),
    'network-fail': Injection(
        'network_failures',
        'neutron answering every second port creation '
        '2 s late, [neutron] timeout 1, http_retries 0',
        _network_before,
        _network_after,
    ),
}


def before(case, args) -> None:
    """The causes before the cloud's ``setUp``; and, with more than one
    scheduler, the conductor's calls to each in turn (the late claims of
    ``scheduler-collisions`` route them already)."""
    for name in args.inject or ():
        INJECTIONS[name].before(case, args)
    count = schedulers(args)
    if count > 1 and 'scheduler-collisions' not in (args.inject or ()):
        schedulers_in_turn(case, scheduler_hosts(count))


def after(case, args) -> None:
    """The schedulers after the first, then the causes that need the
    cloud up."""
    start_schedulers(case, scheduler_hosts(schedulers(args)))
    for name in args.inject or ():
        INJECTIONS[name].after(case, args)
