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
"""nova's patch points (nova 29 to 34, see RELEASES): ``instrument.targets``.

``NovaTarget`` records the lifecycle of nova's operations in api,
conductor, scheduler and compute; its points are data (``points()``),
what each one records is documented in doc/source/events.rst.  Argument
positions come from each target's signature at patch time, so callers
passing arguments by position or by keyword are both understood (nova
does both for the same method on different hops).  Where code moved
between releases, ``alternatives`` name the older places.  The RPC hops
between the services are ``instrument.targets.oslo_messaging``'s; this
target names the services of nova's RPC endpoints for it.

Besides spans, two hooks keep the picture connected:

* ``thread_pool_factory.spawn_on`` carries the current span into nova's
  worker threads (the build thread, network allocation, cell
  scatter-gather), which do not inherit context variables.
* ``load_compute_driver`` adds a point for the concrete driver class's
  ``spawn`` once the driver is known, through the target's patcher.
"""

import dataclasses
import functools

from instrument import faults
from instrument import points as points_mod
from instrument import recorder as recorder_mod
from instrument import schema
from instrument.targets import base
from instrument import tracer as tracing

# The releases of RELEASES (at the end of this module).
TESTED_NOVA = ('34.0.0', '33.0.2', '31.3.1', '29.4.0')
# The oldest release the points were surveyed on (doc/source/releases.rst);
# older ones are not patched.
NOVA_VERSIONS = '>=29.0.0'

arg = points_mod.arg
uuids = points_mod.uuids
P = points_mod.PatchPoint
SELF_HOST = points_mod.self_attr('host')

# The services of nova's RPC endpoints, by module of the endpoint class
# (read by the oslo_messaging target for rpc.dispatch).
ENDPOINT_SERVICES = {
    'nova.compute.manager': 'compute',
    'nova.conductor.manager': 'conductor',
    'nova.scheduler.manager': 'scheduler',
}


# -- threads ---------------------------------------------------------------

# Faults of the frame switch in a spawned thread (no point state there).
_THREAD_FAULTS = faults.Faults('the span carried into a thread',
                               what='the thread runs unaffected')


def _enter(frame):
    try:
        return recorder_mod.set_frame(frame)
    except Exception as exc:
        _THREAD_FAULTS(exc)
        return None


def _leave(token) -> None:
    try:
        recorder_mod.reset_frame(token)
    except Exception as exc:
        _THREAD_FAULTS(exc)


def _run_in_frame(frame, func):
    """``func`` run inside ``frame``: called once whatever the frame
    switch does, its result and exception passed through."""
    @functools.wraps(func)
    def run(*args, **kwargs):
        token = _enter(frame)
        try:
            return func(*args, **kwargs)
        finally:
            if token is not None:
                _leave(token)
    return run


def _carry_span(instance, args, kwargs):
    """Hook on ``spawn_on(executor_type, func, ...)``: the new thread
    runs ``func`` inside the span that spawned it."""
    frame = recorder_mod.current_frame()
    if frame is None:
        return None
    if 'func' in kwargs:
        kwargs = dict(kwargs, func=_run_in_frame(frame, kwargs['func']))
        return args, kwargs
    for n, value in enumerate(args):
        if callable(value) and not isinstance(value, type):
            args = args[:n] + (_run_in_frame(frame, value),) + args[n + 1:]
            return args, kwargs
    return None


# -- compute driver ----------------------------------------------------------

def _patch_driver_spawn(patcher, driver):
    """After ``load_compute_driver``: time the real driver's spawn,
    through ``patcher`` (the nova target's)."""
    if patcher is None or driver is None:
        return
    cls = type(driver)
    if 'spawn' not in vars(cls):
        for base in cls.__mro__[1:]:
            if 'spawn' in vars(base):
                cls = base
                break
    patcher.add_points([P(
        cls.__module__, cls.__qualname__ + '.spawn', 'compute.spawn',
        'compute', instances=uuids('instance'))])


def _driver_loaded(patcher):
    """The HOOK's ``on_exit`` on ``load_compute_driver``."""
    def on_exit(instance, args, kwargs, driver):
        _patch_driver_spawn(patcher, driver)
    return on_exit


# -- attrs ----------------------------------------------------------------

def _count(instance, args, kwargs):
    value = _value(args, kwargs, 'build_requests', 1)
    return {schema.ATTR_COUNT: len(value)} if isinstance(value, list) else None


def _attempt(filter_properties):
    retry = filter_properties.get('retry') if isinstance(
        filter_properties, dict) else None
    if isinstance(retry, dict):
        return retry.get('num_attempts')
    return None


def _conductor_build_attrs(instance, args, kwargs):
    # build_instances(context, instances, image, filter_properties, ...)
    attempts = _attempt(_value(args, kwargs, 'filter_properties', 3))
    attrs = {schema.ATTR_ATTEMPT: (attempts or 0) + 1}
    if kwargs.get('host_lists') is not None:
        attrs[schema.ATTR_RESCHEDULE] = True
    return attrs


def _compute_build_attrs(instance, args, kwargs):
    # _do_build_and_run_instance(context, instance, image, request_spec,
    #                            filter_properties, ...)
    attempt = _attempt(_value(args, kwargs, 'filter_properties', 4))
    return {schema.ATTR_ATTEMPT: attempt or 1}


def _value(args, kwargs, name, pos):
    if name in kwargs:
        return kwargs[name]
    return args[pos] if len(args) > pos else None


def _selected_hosts(result):
    hosts = []
    for alternatives in result or ():
        if isinstance(alternatives, list) and alternatives:
            first = alternatives[0]
        else:
            first = alternatives
        host = getattr(first, 'service_host', None)
        if host is None and isinstance(first, dict):
            host = first.get('host')
        hosts.append(host)
    return hosts


def _selected(instance, args, kwargs, result):
    return {schema.ATTR_SELECTED: _selected_hosts(result)}


def _outcome(instance, args, kwargs, result):
    return {schema.ATTR_OUTCOME: result} if isinstance(result, str) else None


def _created(result):
    instances = result[0] if isinstance(result, tuple) else None
    return [i.uuid for i in instances or () if getattr(i, 'uuid', None)]


def _created_attrs(instance, args, kwargs, result):
    instances = result[0] if isinstance(result, tuple) else None
    return {schema.ATTR_COUNT: len(instances or ())}


def _candidates(instance, args, kwargs, result):
    if isinstance(result, tuple) and result and result[0] is not None:
        return {schema.ATTR_COUNT: len(result[0])}
    return {schema.ATTR_COUNT: 0}


def _host_count(instance, args, kwargs, result):
    if isinstance(result, tuple) and result and isinstance(result[0], dict):
        return {schema.ATTR_COUNT: sum(len(v) for v in
                                       result[0].values())}
    return None


def _len_result(instance, args, kwargs, result):
    if isinstance(result, list):
        return {schema.ATTR_COUNT: len(result)}
    return None


def _claimed(instance, args, kwargs, result):
    return {schema.ATTR_CLAIMED: bool(result)}


def _reason(name, pos):
    def attrs(instance, args, kwargs):
        exc = _value(args, kwargs, name, pos)
        if isinstance(exc, BaseException):
            cls, msg = tracing.error_of(exc)
            return {schema.ATTR_REASON: cls, schema.ATTR_MSG: msg}
        return None
    return attrs


def points(patcher=None) -> list:
    """Every patch point of nova; ``patcher`` (the target's) gets the
    point of the compute driver's spawn once it is known."""
    conductor = 'nova.conductor.manager'
    scheduler = 'nova.scheduler.manager'
    hosts = 'nova.scheduler.host_manager'
    compute = 'nova.compute.manager'
    return [
        # Threads started by nova carry the span that started them.
        # nova 32-33: nova.utils.spawn_on (spawn calls it); 29-31:
        # nova.utils.spawn, and spawn_n (release_points).  See RELEASES.
        P('nova.thread_pool_factory', 'spawn_on', 'thread.spawn',
          kind=points_mod.HOOK, on_enter=_carry_span,
          alternatives=(('nova.utils', 'spawn_on'), ('nova.utils', 'spawn'))),
        # nova-api
        P('nova.compute.api', 'API.create', 'api.compute.create', 'api',
          result_instances=_created, on_exit=_created_attrs),
        # nova-conductor
        P(conductor, 'ComputeTaskManager.schedule_and_build_instances',
          'conductor.schedule_and_build_instances', 'conductor',
          instances=uuids('request_specs', attr='instance_uuid'),
          host=SELF_HOST, on_enter=_count),
        P(conductor, 'ComputeTaskManager.build_instances',
          'conductor.build_instances', 'conductor',
          instances=uuids('instances'), host=SELF_HOST,
          on_enter=_conductor_build_attrs),
        P(conductor, 'ComputeTaskManager._schedule_instances',
          'conductor.schedule', 'conductor',
          instances=uuids('instance_uuids'), host=SELF_HOST,
          on_exit=_selected),
        P(conductor, 'ComputeTaskManager._bury_in_cell0',
          'conductor.bury_in_cell0', 'conductor',
          instances=uuids('build_requests', attr='instance_uuid'),
          host=SELF_HOST, on_enter=_reason('exc', 2)),
        P(conductor, 'ComputeTaskManager._cleanup_when_reschedule_fails',
          'conductor.reschedule_failed', 'conductor',
          instances=uuids('instance'), host=SELF_HOST,
          on_enter=_reason('exception', 2)),
        # nova-scheduler
        P(scheduler, 'SchedulerManager.select_destinations',
          'scheduler.select_destinations', 'scheduler',
          instances=uuids('instance_uuids'), host=SELF_HOST,
          on_exit=_selected),
        P('nova.scheduler.client.report',
          'SchedulerReportClient.get_allocation_candidates',
          'scheduler.placement.candidates', None, on_exit=_candidates),
        P(hosts, 'HostManager._get_computes_for_cells',
          'scheduler.host_states', None, on_exit=_host_count),
        P(hosts, 'HostManager.get_filtered_hosts', 'scheduler.filter',
          None, context=None, on_exit=_len_result, detail=True),
        P(hosts, 'HostManager.get_weighed_hosts', 'scheduler.weigh', None,
          context=None, on_exit=_len_result, detail=True),
        P('nova.scheduler.utils', 'claim_resources', 'scheduler.claim',
          None, context=arg('ctx'), instances=uuids('instance_uuid'),
          on_exit=_claimed),
        # nova-compute
        P(compute, 'ComputeManager.build_and_run_instance',
          'compute.build_and_run_instance', 'compute',
          instances=uuids('instance'), host=SELF_HOST),
        P(compute, 'ComputeManager._do_build_and_run_instance',
          'compute.build', 'compute', instances=uuids('instance'),
          host=SELF_HOST, on_enter=_compute_build_attrs, on_exit=_outcome),
        P(compute, 'ComputeManager._build_and_run_instance',
          'compute.build_and_run', 'compute', instances=uuids('instance'),
          host=SELF_HOST),
        P('nova.compute.resource_tracker', 'ResourceTracker.instance_claim',
          'compute.claim', 'compute', instances=uuids('instance'),
          host=SELF_HOST),
        P(compute, 'ComputeManager._allocate_network_async',
          'compute.network', 'compute', instances=uuids('instance'),
          host=SELF_HOST),
        P(compute, 'ComputeManager._prep_block_device',
          'compute.block_device', 'compute', instances=uuids('instance'),
          host=SELF_HOST),
        P('nova.virt.driver', 'load_compute_driver', 'compute.driver',
          kind=points_mod.HOOK, on_exit=_driver_loaded(patcher)),
    ]


class NovaTarget(base.Target):
    """Spans of nova's api, conductor, scheduler and compute."""

    name = 'nova'
    requires = {'nova': NOVA_VERSIONS}
    surveyed = {'nova': TESTED_NOVA}
    rpc_endpoint_services = ENDPOINT_SERVICES

    def points(self, ctx: base.Context) -> list:
        return points(ctx.patcher) + release_points(
            base.distribution_version('nova'))


# -- releases ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Release:
    """A nova release the points are verified on: its functional tier
    (``tox_env``) boots, reschedules and fails servers on it in each of
    ``modes`` and checks the banner (tests/functional/nova/
    test_releases.py): no point missing or failed, and each point of
    ``used`` patched at that place.  README.rst's support matrix is made
    from these (tests/unit/targets/test_releases.py checks it)."""

    version: str
    series: str
    tox_env: str
    #: Concurrency modes verified.
    modes: tuple
    #: {point name: the place (module:target) patched in this release},
    #: for the points whose code moved.
    used: dict
    #: {mode: why it is not verified} for the other modes.
    unverified: dict
    #: Points whose code this release does not have (the banner's
    #: "missing", checked by the release's functional tier).
    missing: tuple = ()


THREAD_HOOK = 'nova.thread_pool_factory:spawn_on'
SPAWN_N = 'nova.utils:spawn_n'
_NO_THREADS = 'none: eventlet-only release'

RELEASES = (
    # Every service defaults to native threads.
    Release('34.0.0', '2026.2', 'functional', ('eventlet', 'threads'),
            {THREAD_HOOK: THREAD_HOOK}, {}),
    # api and scheduler default to threads, conductor and compute to
    # eventlet; threads start with nova.utils.spawn_on (spawn calls it).
    Release('33.0.2', '2026.1', 'functional-nova33', ('eventlet',),
            {THREAD_HOOK: 'nova.utils:spawn_on'},
            # nova 33's in-process test fixtures fail under threads
            # (doc/source/releases.rst)
            {'threads': 'not verified (nova 33\'s fixtures)'}),
    # eventlet only; threads start with nova.utils.spawn and (the build
    # thread) spawn_n.
    Release('31.3.1', '2025.1', 'functional-nova31', ('eventlet',),
            {THREAD_HOOK: 'nova.utils:spawn', SPAWN_N: SPAWN_N},
            {'threads': _NO_THREADS}),
    # As 31, on SQLAlchemy 1.4 (1.4.51).
    Release('29.4.0', '2024.1', 'functional-nova29', ('eventlet',),
            {THREAD_HOOK: 'nova.utils:spawn', SPAWN_N: SPAWN_N},
            {'threads': _NO_THREADS}),
)


def release_of(found: str | None) -> Release | None:
    """The entry of RELEASES of the same major version as ``found``."""
    major = (found or '').split('.', 1)[0]
    for release in RELEASES:
        if release.version.split('.', 1)[0] == major:
            return release
    return None


def _major(found: str | None) -> int | None:
    try:
        return int((found or '').split('.', 1)[0])
    except ValueError:
        return None


def release_points(found: str | None) -> list:
    """Points of the nova release ``found`` only: nova 29 to 31 start
    the build thread with ``nova.utils.spawn_n`` (removed in 32 by
    "Replace utils.spawn_n with spawn"), the other threads with
    ``spawn`` (the thread hook's alternative)."""
    major = _major(found)
    if major is not None and major < 32:
        module, target = SPAWN_N.split(':')
        return [P(module, target, 'thread.spawn', kind=points_mod.HOOK,
                  on_enter=_carry_span)]
    return []
