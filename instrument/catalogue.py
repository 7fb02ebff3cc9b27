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
"""The nova operations, one catalogue for both halves.

What each nova operation is, said once: the compute API method that
starts it and the HTTP routes and server actions that ask for it, the
steps it goes through in each service (``STEPS``: the event of each
step, the place in nova the runtime patches for it, the component its
time is charged to), the step whose success ends it, the failure each
step's error means, the steps counted once per attempt, and boot's
reschedule.

Both halves read it: the nova target (``instrument.targets.nova``)
generates its span points from ``STEPS`` (adding only how each one
reads its arguments), and the analyser
(``instrument.analysis.model.operations``) generates its operation
specs, which operation an API or downstream span names, and the
operations of refused routes from ``OPERATIONS``.  The event table
(``instrument.events``) takes the steps' events from here.  A new
operation, or a step nova moved, is a change here (and the runtime's
argument readers when a step reads more than its instance): see
doc/source/architecture.rst, "Adding an operation".

Like ``schema``, this module imports nothing but the standard library.
"""

import dataclasses
import types
import typing

# -- final states ---------------------------------------------------------
SUCCESS = 'success'
RESCHEDULED_SUCCESS = 'rescheduled_success'
COMPUTE_FAILURE = 'compute_failure'
SCHEDULING_FAILURE = 'scheduling_failure'
API_FAILURE = 'api_failure'
INCOMPLETE = 'incomplete'
PRECHECK_FAILURE = 'precheck_failure'
FAILED_ON_SOURCE = 'failed_on_source'
FAILED_ON_DEST = 'failed_on_destination'
ROLLED_BACK = 'rolled_back'
# the conductor's own part of the operation failed (across cells, the
# confirm's and revert's work in the cell databases, around the compute
# steps it calls)
CONDUCTOR_FAILURE = 'conductor_failure'
PARTIAL = 'partial'  # a list/show that a cell did not answer
OTHER = 'other'

# -- services -------------------------------------------------------------
API = 'api'
CONDUCTOR = 'conductor'
SCHEDULER = 'scheduler'
COMPUTE = 'compute'

_API_MOD = 'nova.compute.api'
_CONDUCTOR_MOD = 'nova.conductor.manager'
_SCHEDULER_MOD = 'nova.scheduler.manager'
_HOSTS_MOD = 'nova.scheduler.host_manager'
_COMPUTE_MOD = 'nova.compute.manager'


@dataclasses.dataclass(frozen=True)
class Step:
    """One nova call a span is recorded around: ``event`` around
    ``module``:``target`` (``Class.method``), recorded for ``service``
    (None: the service of the span it runs in), its exclusive time
    charged to ``component`` (``schema.EVENTS``; default the
    service)."""

    event: str
    module: str
    target: str
    service: str | None
    component: str | None = None

    @property
    def charged_to(self) -> str | None:
        return self.component or self.service


def _api(method: str) -> Step:
    return Step('api.compute.' + method, _API_MOD, 'API.' + method, API)


def _conductor(method: str, event: str) -> Step:
    return Step(
        event, _CONDUCTOR_MOD, 'ComputeTaskManager.' + method, CONDUCTOR
    )


def _compute(
    method: str, event: str | None = None, component: str | None = None
) -> Step:
    return Step(
        event or 'compute.' + method,
        _COMPUTE_MOD,
        'ComputeManager.' + method,
        COMPUTE,
        component,
    )


# Every step of every operation, each once, in the order the nova
# target patches them (its banner's order).
STEPS: tuple = (
    # a boot, and the scheduling every move shares
    _api('create'),
    _conductor(
        'schedule_and_build_instances',
        'conductor.schedule_and_build_instances',
    ),
    _conductor('build_instances', 'conductor.build_instances'),
    _conductor('_schedule_instances', 'conductor.schedule'),
    _conductor('_bury_in_cell0', 'conductor.bury_in_cell0'),
    # the conductor gave up rescheduling a build (MaxRetriesExceeded,
    # AllocationUpdateFailed): the instance is set to ERROR
    _conductor(
        '_cleanup_when_reschedule_fails', 'conductor.reschedule_failed'
    ),
    Step(
        'scheduler.select_destinations',
        _SCHEDULER_MOD,
        'SchedulerManager.select_destinations',
        SCHEDULER,
    ),
    Step(
        'scheduler.placement.candidates',
        'nova.scheduler.client.report',
        'SchedulerReportClient.get_allocation_candidates',
        None,
        'scheduler.placement',
    ),
    Step(
        'scheduler.host_states',
        _HOSTS_MOD,
        'HostManager._get_computes_for_cells',
        None,
        'scheduler.db',
    ),
    # each host's state brought up to date: its instances read from its
    # cell's database, one query per host, unless the computes report
    # them (track_instance_changes): it grows with the computes
    Step(
        'scheduler.host_states.update',
        _HOSTS_MOD,
        'HostManager._get_host_states',
        None,
        'scheduler.db',
    ),
    Step(
        'scheduler.filter',
        _HOSTS_MOD,
        'HostManager.get_filtered_hosts',
        None,
        SCHEDULER,
    ),
    Step(
        'scheduler.weigh',
        _HOSTS_MOD,
        'HostManager.get_weighed_hosts',
        None,
        SCHEDULER,
    ),
    Step(
        'scheduler.claim',
        'nova.scheduler.utils',
        'claim_resources',
        None,
        'scheduler.placement',
    ),
    _compute('build_and_run_instance'),
    _compute('_do_build_and_run_instance', 'compute.build'),
    _compute('_build_and_run_instance', 'compute.build_and_run'),
    Step(
        'compute.claim',
        'nova.compute.resource_tracker',
        'ResourceTracker.instance_claim',
        COMPUTE,
        'compute.claim',
    ),
    _compute('_allocate_network_async', 'compute.network', 'compute.network'),
    _compute(
        '_prep_block_device', 'compute.block_device', 'compute.block_device'
    ),
    # nova-api: one span per compute API method a route reached
    _api('delete'),
    # resize(context, instance, flavor_id=None, ...): no flavor is a
    # cold migration
    _api('resize'),
    _api('confirm_resize'),
    _api('revert_resize'),
    _api('live_migrate'),
    _api('rebuild'),
    _api('evacuate'),
    _api('shelve'),
    _api('shelve_offload'),
    _api('unshelve'),
    _api('reboot'),
    _api('stop'),
    _api('start'),
    _api('soft_delete'),
    _api('restore'),
    _api('force_delete'),
    _api('attach_volume'),
    _api('detach_volume'),
    _api('live_migrate_abort'),
    _api('get'),
    _api('get_all'),
    # nova-conductor
    _conductor('migrate_server', 'conductor.migrate_server'),
    _conductor('_cold_migrate', 'conductor.cold_migrate'),
    _conductor('_live_migrate', 'conductor.live_migrate'),
    Step(
        'conductor.live_migrate.checks',
        'nova.conductor.tasks.live_migrate',
        'LiveMigrationTask._call_livem_checks_on_host',
        CONDUCTOR,
    ),
    _conductor('rebuild_instance', 'conductor.rebuild_instance'),
    _conductor('unshelve_instance', 'conductor.unshelve_instance'),
    # nova-compute (attrs role: the side of a move the host is on)
    _compute('terminate_instance'),
    _compute('prep_resize'),
    _compute('resize_instance'),
    _compute('finish_resize'),
    _compute('confirm_resize'),
    _compute('revert_resize'),
    _compute('finish_revert_resize'),
    # a resize or cold migration across cells (snapshot-based: the
    # conductor calls each step), its confirm and its revert
    _compute('prep_snapshot_based_resize_at_dest'),
    _compute('prep_snapshot_based_resize_at_source'),
    _compute('finish_snapshot_based_resize_at_dest'),
    _compute('confirm_snapshot_based_resize_at_source'),
    _compute('revert_snapshot_based_resize_at_dest'),
    _compute('finish_revert_snapshot_based_resize_at_source'),
    _compute('check_can_live_migrate_destination'),
    _compute('check_can_live_migrate_source'),
    _compute('pre_live_migration'),
    # the whole migration on the source, in nova's live-migration
    # thread (live_migration itself only queues it)
    _compute('_do_live_migration', 'compute.live_migration'),
    _compute('_post_live_migration', 'compute.post_live_migration'),
    _compute('post_live_migration_at_destination'),
    _compute('_rollback_live_migration', 'compute.rollback_live_migration'),
    _compute('rollback_live_migration_at_destination'),
    _compute('rebuild_instance'),
    _compute('shelve_instance'),
    # offloading, asked for or right after a shelve
    _compute('_shelve_offload_instance', 'compute.shelve_offload_instance'),
    _compute('unshelve_instance'),
    _compute('reboot_instance'),
    _compute('stop_instance'),
    _compute('start_instance'),
    _compute('soft_delete_instance'),
    _compute('restore_instance'),
    # a volume attach: the device name reserved (an RPC call from the
    # API), then the attachment (a cast)
    _compute('reserve_block_device_name'),
    _compute('attach_volume'),
    _compute('detach_volume'),
    _compute('live_migration_abort'),
)

STEP_OF: dict = {step.event: step for step in STEPS}


@dataclasses.dataclass(frozen=True)
class Reschedule:
    """A boot's reschedule: each ``build`` span is an attempt on one
    host whose ``outcome`` attribute says how it ended (``active``,
    ``failed``, else rescheduled); ``buried`` spans end the instance
    in cell0 and ``given_up`` is the conductor giving up a
    reschedule (both a scheduling failure, with the reason the span
    records)."""

    build: str
    outcome_attr: str
    active: str
    failed: str
    buried: str
    given_up: str


@dataclasses.dataclass(frozen=True)
class Operation:
    """One nova operation.

    ``api``: the compute API spans (``api.compute.<method>``) that name
    it; ``routes``: ``(HTTP method, route after /servers)`` and
    ``actions``: server action names (``POST /servers/{id}/action``)
    that ask for it, for a request refused before it reached the
    compute API; ``steps``: the downstream steps that name it when no
    API span says; ``done``: the steps whose success ends it;
    ``fail``: step -> the state its error means; ``attempts``: steps
    counted once per attempt (a second one is a retry on another
    host); ``rollback``: the step that rolls it back; ``api_only``:
    the API's answer is the outcome (no downstream step);
    ``api_may_finish``: nova may finish it in the API (an instance
    without a host): a success when the API answered and sent nothing
    on; ``conductor``: RPC method of the conductor -> the state its
    error means, for a conductor that finishes the operation itself
    after its last compute step (across cells, confirm and revert): a
    request with such an ``rpc.dispatch`` succeeds only once that
    dispatch has ended ok; ``states``: its final states, best first;
    ``reschedule``: a boot's (its own state machine in
    ``analysis.model.classify``)."""

    name: str
    api: tuple = ()
    routes: tuple = ()
    actions: tuple = ()
    steps: tuple = ()
    done: tuple = ()
    fail: typing.Mapping = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    attempts: tuple = ()
    rollback: str | None = None
    api_only: bool = False
    api_may_finish: bool = False
    states: tuple = ()
    reschedule: Reschedule | None = None
    conductor: typing.Mapping = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )

    def events(self) -> frozenset:
        """Every event this operation's rules name."""
        return frozenset(
            self.api
            + self.steps
            + self.done
            + tuple(self.fail)
            + self.attempts
            + ((self.rollback,) if self.rollback else ())
        )


def _map(**kw) -> typing.Mapping:
    return types.MappingProxyType(kw)


def _fail(*pairs) -> typing.Mapping:
    return types.MappingProxyType(dict(pairs))


_SCHED = (
    ('conductor.schedule', SCHEDULING_FAILURE),
    ('scheduler.select_destinations', SCHEDULING_FAILURE),
)
_MOVE = (
    SUCCESS,
    RESCHEDULED_SUCCESS,
    SCHEDULING_FAILURE,
    FAILED_ON_SOURCE,
    FAILED_ON_DEST,
    API_FAILURE,
    INCOMPLETE,
)
_ONE_HOST = (SUCCESS, COMPUTE_FAILURE, API_FAILURE, INCOMPLETE)
_API_ONLY = (SUCCESS, PARTIAL, API_FAILURE, INCOMPLETE)

PREP_DEST_CROSS = 'compute.prep_snapshot_based_resize_at_dest'
PREP_SOURCE_CROSS = 'compute.prep_snapshot_based_resize_at_source'
FINISH_DEST_CROSS = 'compute.finish_snapshot_based_resize_at_dest'
CONFIRM_CROSS = 'compute.confirm_snapshot_based_resize_at_source'
REVERT_DEST_CROSS = 'compute.revert_snapshot_based_resize_at_dest'
FINISH_REVERT_CROSS = 'compute.finish_revert_snapshot_based_resize_at_source'


def _one_host(
    name: str,
    api: str,
    done: str,
    routes: tuple = (),
    actions: tuple = (),
    steps: tuple | None = None,
    **kw,
) -> Operation:
    """An operation of one compute step ``done``."""
    return Operation(
        name,
        api=('api.compute.' + api,),
        routes=routes,
        actions=actions,
        steps=(done,) if steps is None else steps,
        done=(done,),
        fail=_fail((done, COMPUTE_FAILURE)),
        states=_ONE_HOST,
        **kw,
    )


_RESIZE_STEPS = (
    'conductor.cold_migrate',
    'compute.prep_resize',
    'compute.resize_instance',
    'compute.finish_resize',
    PREP_DEST_CROSS,
    PREP_SOURCE_CROSS,
    FINISH_DEST_CROSS,
)
_RESIZE_FAIL = _fail(
    *_SCHED,
    *(
        ('conductor.migrate_server', SCHEDULING_FAILURE),
        ('conductor.cold_migrate', SCHEDULING_FAILURE),
        ('compute.prep_resize', FAILED_ON_DEST),
        ('compute.resize_instance', FAILED_ON_SOURCE),
        ('compute.finish_resize', FAILED_ON_DEST),
        (PREP_DEST_CROSS, FAILED_ON_DEST),
        (PREP_SOURCE_CROSS, FAILED_ON_SOURCE),
        (FINISH_DEST_CROSS, FAILED_ON_DEST),
    ),
)
_REBUILD_FAIL = _fail(
    *_SCHED,
    ('conductor.rebuild_instance', SCHEDULING_FAILURE),
    ('compute.rebuild_instance', COMPUTE_FAILURE),
)
_REBUILD_STATES = (
    SUCCESS,
    SCHEDULING_FAILURE,
    COMPUTE_FAILURE,
    API_FAILURE,
    INCOMPLETE,
)

# In the order of the reports (``other`` last: a request that reached
# none of them).
OPERATIONS: tuple = (
    Operation(
        'boot',
        api=('api.compute.create',),
        routes=(('POST', ''),),
        steps=(
            'conductor.schedule_and_build_instances',
            'conductor.build_instances',
            'conductor.bury_in_cell0',
            'compute.build_and_run_instance',
            'compute.build',
        ),
        done=('compute.build',),
        fail=_fail(
            *_SCHED,
            ('conductor.bury_in_cell0', SCHEDULING_FAILURE),
            ('conductor.reschedule_failed', SCHEDULING_FAILURE),
            ('compute.build', COMPUTE_FAILURE),
        ),
        attempts=('compute.build',),
        states=(
            SUCCESS,
            RESCHEDULED_SUCCESS,
            COMPUTE_FAILURE,
            SCHEDULING_FAILURE,
            API_FAILURE,
            INCOMPLETE,
        ),
        reschedule=Reschedule(
            build='compute.build',
            outcome_attr='outcome',
            active='active',
            failed='failed',
            buried='conductor.bury_in_cell0',
            given_up='conductor.reschedule_failed',
        ),
    ),
    _one_host(
        'delete',
        'delete',
        'compute.terminate_instance',
        routes=(('DELETE', '/{id}'),),
        api_may_finish=True,
    ),
    Operation(
        'resize',
        api=('api.compute.resize',),
        actions=('resize',),
        steps=_RESIZE_STEPS,
        done=('compute.finish_resize', FINISH_DEST_CROSS),
        fail=_RESIZE_FAIL,
        attempts=('compute.prep_resize', PREP_DEST_CROSS),
        states=_MOVE,
    ),
    # api.compute.resize without a flavor (operations.operation_of)
    Operation(
        'cold_migrate',
        actions=('migrate',),
        done=('compute.finish_resize', FINISH_DEST_CROSS),
        fail=_RESIZE_FAIL,
        attempts=('compute.prep_resize', PREP_DEST_CROSS),
        states=_MOVE,
    ),
    Operation(
        'confirm_resize',
        api=('api.compute.confirm_resize',),
        actions=('confirmResize',),
        steps=('compute.confirm_resize', CONFIRM_CROSS),
        done=('compute.confirm_resize', CONFIRM_CROSS),
        fail=_fail(
            ('compute.confirm_resize', FAILED_ON_SOURCE),
            (CONFIRM_CROSS, FAILED_ON_SOURCE),
        ),
        # across cells the conductor's task runs the compute steps and
        # finishes in the cell databases (ConfirmResizeTask)
        conductor=_map(confirm_snapshot_based_resize=CONDUCTOR_FAILURE),
        states=(
            SUCCESS,
            FAILED_ON_SOURCE,
            CONDUCTOR_FAILURE,
            API_FAILURE,
            INCOMPLETE,
        ),
    ),
    Operation(
        'revert_resize',
        api=('api.compute.revert_resize',),
        actions=('revertResize',),
        steps=(
            'compute.revert_resize',
            'compute.finish_revert_resize',
            REVERT_DEST_CROSS,
            FINISH_REVERT_CROSS,
        ),
        done=('compute.finish_revert_resize', FINISH_REVERT_CROSS),
        fail=_fail(
            ('compute.revert_resize', FAILED_ON_DEST),
            ('compute.finish_revert_resize', FAILED_ON_SOURCE),
            (REVERT_DEST_CROSS, FAILED_ON_DEST),
            (FINISH_REVERT_CROSS, FAILED_ON_SOURCE),
        ),
        # RevertResizeTask, as confirm's
        conductor=_map(revert_snapshot_based_resize=CONDUCTOR_FAILURE),
        states=(
            SUCCESS,
            FAILED_ON_DEST,
            FAILED_ON_SOURCE,
            CONDUCTOR_FAILURE,
            API_FAILURE,
            INCOMPLETE,
        ),
    ),
    Operation(
        'live_migrate',
        api=('api.compute.live_migrate',),
        actions=('os-migrateLive',),
        steps=(
            'conductor.live_migrate',
            'conductor.live_migrate.checks',
            'compute.check_can_live_migrate_destination',
            'compute.check_can_live_migrate_source',
            'compute.pre_live_migration',
            'compute.live_migration',
            'compute.post_live_migration',
            'compute.post_live_migration_at_destination',
            'compute.rollback_live_migration',
            'compute.rollback_live_migration_at_destination',
        ),
        done=('compute.post_live_migration_at_destination',),
        fail=_fail(
            *_SCHED,
            *(
                ('conductor.live_migrate.checks', PRECHECK_FAILURE),
                ('conductor.live_migrate', PRECHECK_FAILURE),
                (
                    'compute.check_can_live_migrate_destination',
                    PRECHECK_FAILURE,
                ),
                ('compute.check_can_live_migrate_source', PRECHECK_FAILURE),
                ('compute.pre_live_migration', FAILED_ON_DEST),
                ('compute.live_migration', FAILED_ON_SOURCE),
                ('compute.post_live_migration', FAILED_ON_SOURCE),
                ('compute.post_live_migration_at_destination', FAILED_ON_DEST),
                ('compute.rollback_live_migration', FAILED_ON_SOURCE),
                (
                    'compute.rollback_live_migration_at_destination',
                    FAILED_ON_DEST,
                ),
            ),
        ),
        attempts=('compute.check_can_live_migrate_destination',),
        rollback='compute.rollback_live_migration',
        states=(
            SUCCESS,
            RESCHEDULED_SUCCESS,
            PRECHECK_FAILURE,
            SCHEDULING_FAILURE,
            ROLLED_BACK,
            FAILED_ON_SOURCE,
            FAILED_ON_DEST,
            API_FAILURE,
            INCOMPLETE,
        ),
    ),
    Operation(
        'rebuild',
        api=('api.compute.rebuild',),
        actions=('rebuild',),
        steps=('conductor.rebuild_instance', 'compute.rebuild_instance'),
        done=('compute.rebuild_instance',),
        fail=_REBUILD_FAIL,
        states=_REBUILD_STATES,
    ),
    Operation(
        'evacuate',
        api=('api.compute.evacuate',),
        actions=('evacuate',),
        done=('compute.rebuild_instance',),
        fail=_REBUILD_FAIL,
        states=_REBUILD_STATES,
    ),
    # a volume-backed server's shelve is offloaded at once: the API
    # casts shelve_offload_instance, not shelve_instance
    Operation(
        'shelve',
        api=('api.compute.shelve',),
        actions=('shelve',),
        steps=('compute.shelve_instance',),
        done=('compute.shelve_instance', 'compute.shelve_offload_instance'),
        fail=_fail(
            ('compute.shelve_instance', COMPUTE_FAILURE),
            ('compute.shelve_offload_instance', COMPUTE_FAILURE),
        ),
        states=_ONE_HOST,
    ),
    _one_host(
        'shelve_offload',
        'shelve_offload',
        'compute.shelve_offload_instance',
        actions=('shelveOffload',),
    ),
    # a server shelved but not offloaded is started on its host (the
    # conductor calls start_instance)
    Operation(
        'unshelve',
        api=('api.compute.unshelve',),
        actions=('unshelve',),
        steps=('conductor.unshelve_instance', 'compute.unshelve_instance'),
        done=('compute.unshelve_instance', 'compute.start_instance'),
        fail=_fail(
            *_SCHED,
            ('conductor.unshelve_instance', SCHEDULING_FAILURE),
            ('compute.unshelve_instance', COMPUTE_FAILURE),
            ('compute.start_instance', COMPUTE_FAILURE),
        ),
        states=_REBUILD_STATES,
    ),
    _one_host(
        'reboot', 'reboot', 'compute.reboot_instance', actions=('reboot',)
    ),
    _one_host('stop', 'stop', 'compute.stop_instance', actions=('os-stop',)),
    _one_host(
        'start', 'start', 'compute.start_instance', actions=('os-start',)
    ),
    # nova finishes these in the API for an instance without a host
    # (or a shelved-offloaded one: its volumes)
    _one_host(
        'soft_delete',
        'soft_delete',
        'compute.soft_delete_instance',
        api_may_finish=True,
    ),
    _one_host(
        'restore',
        'restore',
        'compute.restore_instance',
        actions=('restore',),
        api_may_finish=True,
    ),
    # its compute step is a delete's (which names the operation)
    _one_host(
        'force_delete',
        'force_delete',
        'compute.terminate_instance',
        actions=('forceDelete',),
        steps=(),
        api_may_finish=True,
    ),
    Operation(
        'attach_volume',
        api=('api.compute.attach_volume',),
        routes=(('POST', '/{id}/os-volume_attachments'),),
        steps=('compute.reserve_block_device_name', 'compute.attach_volume'),
        done=('compute.attach_volume',),
        fail=_fail(
            ('compute.reserve_block_device_name', COMPUTE_FAILURE),
            ('compute.attach_volume', COMPUTE_FAILURE),
        ),
        states=_ONE_HOST,
        api_may_finish=True,
    ),
    _one_host(
        'detach_volume',
        'detach_volume',
        'compute.detach_volume',
        routes=(('DELETE', '/{id}/os-volume_attachments/{id}'),),
        api_may_finish=True,
    ),
    _one_host(
        'live_migrate_abort',
        'live_migrate_abort',
        'compute.live_migration_abort',
        routes=(('DELETE', '/{id}/migrations/{id}'),),
    ),
    # api.compute.get alone is a show on a GET of one server
    # (operations.operation_of)
    Operation(
        'show', routes=(('GET', '/{id}'),), api_only=True, states=_API_ONLY
    ),
    Operation(
        'list',
        api=('api.compute.get_all',),
        routes=(('GET', ''), ('GET', '/detail')),
        api_only=True,
        states=_API_ONLY,
    ),
)

OPERATION_OF: dict = {op.name: op for op in OPERATIONS}

# Every operation's name, in the order of the reports, ``other`` last.
NAMES: tuple = tuple(op.name for op in OPERATIONS) + (OTHER,)
