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
import inspect

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


def _carry_span(instance, args, kwargs, recorder=None):
    """Hook on ``spawn_on(executor_type, func, ...)``: the new thread
    runs ``func`` inside the span that spawned it; with ``recorder``,
    one cell's part of an API scatter-gather is recorded too."""
    return _carry(recorder, args, kwargs)


def _carry_span_of(patcher):
    """``_carry_span`` that also records each cell's part of an API
    scatter-gather (``api.cells.query``) through ``patcher``'s
    recorder."""
    recorder = getattr(patcher, 'recorder', None)
    if recorder is None:
        return _carry_span

    def carry(instance, args, kwargs):
        return _carry_span(instance, args, kwargs, recorder)
    return carry


def _carry(recorder, args, kwargs):
    frame = recorder_mod.current_frame()
    if frame is None:
        return None
    if 'func' in kwargs:
        kwargs = dict(kwargs, func=_run_in_frame(frame, kwargs['func']))
        return args, kwargs
    for n, value in enumerate(args):
        if callable(value) and not isinstance(value, type):
            if (recorder is not None and
                    frame[recorder_mod.F_EV] == EV_SCATTER_GATHER and
                    not _lazy(args[n + 2:n + 3])):
                # scatter_gather_cells spawns gather_result(cell_uuid,
                # fn, cell_context, ...): one thread per cell
                run = _cell_query(recorder, frame, value, args[n + 1:])
            else:
                run = _run_in_frame(frame, value)
            args = args[:n] + (run,) + args[n + 1:]
            return args, kwargs
    return None


# -- cells ------------------------------------------------------------------

EV_SCATTER_GATHER = 'api.cells.scatter_gather'
EV_CELL_QUERY = 'api.cells.query'
# cell uuid -> attrs of its api.cells.query spans (name and database, read
# once per cell from its mapping); bounded.
_CELLS: dict = {}
_MAX_CELLS = 4096


def _lazy(fn) -> bool:
    """Is a cell's function (in a 0- or 1-tuple) a generator function?
    nova's cross-cell lists (``CrossCellLister.query_wrapper``) only
    make a generator in the cell's thread: the queries run later, in
    the API thread, as the results are merged (``_cell_batch``)."""
    return bool(fn) and inspect.isgeneratorfunction(fn[0])


def _cell_batch(instance, args, kwargs):
    # CrossCellLister.get_by_filters(ctx, filters, limit, marker, ...):
    # one batch of one cell's rows, ctx targeted at the cell
    uuid = getattr(_value(args, kwargs, 'ctx', 0), 'cell_uuid', None)
    return _CELLS.get(uuid) or {schema.ATTR_CELL: uuid}


def _in_api(instance, args, kwargs) -> bool:
    """Scatter-gathers are the API's (list, show, quotas): the scheduler
    and conductor use them too, inside spans of their own that keep
    their time."""
    frame = recorder_mod.current_frame()
    return frame is not None and frame[recorder_mod.F_SVC] == 'api'


def _database_of(url) -> str | None:
    try:
        from sqlalchemy.engine import make_url

        from instrument.db import listeners
        return listeners.database_name(make_url(url)) or None
    except Exception:  # not a URL (a test's label): no database name
        return None


def _remember_cell(mapping) -> None:
    uuid = getattr(mapping, 'uuid', None)
    if uuid is None or uuid in _CELLS or len(_CELLS) >= _MAX_CELLS:
        return
    try:
        name = mapping.name
    except Exception:
        name = None
    try:
        db = _database_of(mapping.database_connection)
    except Exception:
        db = None
    _CELLS[uuid] = {schema.ATTR_CELL: uuid, schema.ATTR_CELL_NAME: name,
                    schema.ATTR_DB: db}


def _cells_enter(instance, args, kwargs):
    # scatter_gather_cells(context, cell_mappings, timeout, fn, ...)
    mappings = _value(args, kwargs, 'cell_mappings', 1) or ()
    for mapping in mappings:
        if getattr(mapping, 'uuid', None) not in _CELLS:
            _remember_cell(mapping)
    return {schema.ATTR_COUNT: len(mappings)}


def _cells_exit(instance, args, kwargs, result):
    if not isinstance(result, dict):
        return None
    timeouts = errors = 0
    for value in result.values():
        if isinstance(value, BaseException):
            errors += 1
        elif value.__class__ is object:  # did_not_respond_sentinel
            timeouts += 1
    return {schema.ATTR_ERRORS: errors, schema.ATTR_TIMEOUTS: timeouts}


def _cell_query(recorder, frame, func, rest):
    """``func`` (nova's ``gather_result``) recorded as one cell's
    ``api.cells.query`` span, child of the scatter-gather span ``frame``
    (its request), in the thread or greenthread that runs it."""
    uuid = rest[0] if rest else None
    ctx = rest[2] if len(rest) > 2 else None
    begin = recorder.begin
    end = recorder.end
    clock = recorder.clock

    @functools.wraps(func)
    def run(*args, **kwargs):
        token = _enter(frame)
        rec = None
        try:
            attrs = _CELLS.get(uuid) or {schema.ATTR_CELL: uuid}
            rec = begin(EV_CELL_QUERY, None, None, ctx, None, None, attrs)
        except Exception as exc:
            _THREAD_FAULTS(exc)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            _end_cell(end, rec, clock(), exc)
            if token is not None:
                _leave(token)
            raise
        # gather_result returns a cell's exception instead of raising it
        _end_cell(end, rec, clock(),
                  result if isinstance(result, BaseException) else None)
        if token is not None:
            _leave(token)
        return result
    return run


def _end_cell(end, rec, t1, exc) -> None:
    if rec is None:
        return
    try:
        if exc is None:
            end(rec, t1)
        else:
            end(rec, t1, schema.ST_ERROR, tracing.error_of(exc))
    except Exception as fault:
        recorder_mod.abandon(rec, schema.ST_ERROR if exc else schema.ST_OK,
                             t1)
        _THREAD_FAULTS(fault)


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


# -- server actions other than create ---------------------------------------

def _const(attrs):
    """An ``on_enter`` that gives the same attrs to every call."""
    def on_enter(instance, args, kwargs):
        return attrs
    return on_enter


def _set(obj, field):
    """``obj.field`` if the versioned object has it loaded (never a
    lazy load), else None."""
    try:
        if obj is not None and obj.obj_attr_is_set(field):
            return getattr(obj, field)
    except Exception:  # noqa: S110 - a plain value: nothing to read
        pass
    return None


def _move(role, pos, name='migration', other=None):
    """``on_enter`` of a compute step of a move: its ``role`` and, from
    the migration record (argument ``name`` at ``pos``), its type and
    both hosts; ``other`` (name, pos) names a destination argument."""
    base = {schema.ATTR_ROLE: role} if role else {}

    def on_enter(instance, args, kwargs):
        attrs = dict(base)
        migration = _value(args, kwargs, name, pos) if pos is not None \
            else None
        if migration is not None:
            attrs[schema.ATTR_MIGRATION_TYPE] = _set(migration,
                                                     'migration_type')
            attrs[schema.ATTR_SOURCE] = _set(migration, 'source_compute')
            attrs[schema.ATTR_DEST] = _set(migration, 'dest_compute')
        if other is not None:
            dest = _value(args, kwargs, other[0], other[1])
            if dest.__class__ is str:
                attrs[schema.ATTR_DEST] = dest
        return attrs
    return on_enter


def _arg_attr(key, name, pos):
    """``on_enter``: argument ``name`` (a plain value) as ``key``."""
    def on_enter(instance, args, kwargs):
        value = _value(args, kwargs, name, pos)
        if value is None or value.__class__ in (str, bool, int):
            return {key: value}
        return None
    return on_enter


def _rebuild_attrs(instance, args, kwargs):
    # conductor's rebuild_instance(context, instance, orig_image_ref,
    #   image_ref, injected_files, new_pass, orig_sys_metadata, bdms,
    #   recreate, on_shared_storage, preserve_ephemeral=False, host=None,
    #   ...): recreate is an evacuation, host the one asked for
    attrs = {schema.ATTR_EVACUATE: bool(_value(args, kwargs, 'recreate',
                                               8))}
    host = _value(args, kwargs, 'host', 11)
    if host.__class__ is str:
        attrs[schema.ATTR_DEST] = host
    return attrs


_EVACUATED = _move(schema.ROLE_DEST, 11)


def _compute_rebuild(instance, args, kwargs):
    # compute's rebuild_instance(..., bdms, recreate, on_shared_storage,
    #   preserve_ephemeral, migration, ...): an evacuation arrives on
    #   its destination with its migration record
    if _value(args, kwargs, 'recreate', 8):
        attrs = _EVACUATED(instance, args, kwargs)
        attrs[schema.ATTR_EVACUATE] = True
        return attrs
    return {schema.ATTR_EVACUATE: False}


def _live_hint(instance, args, kwargs):
    # _live_migrate(context, instance, scheduler_hint, block_migration,
    #               disk_over_commit, request_spec): a forced host is
    # the hint's, a host to check the request spec's destination
    hint = _value(args, kwargs, 'scheduler_hint', 2)
    host = hint.get('host') if isinstance(hint, dict) else None
    if host is None:
        wanted = _set(_value(args, kwargs, 'request_spec', 5),
                      'requested_destination')
        host = _set(wanted, 'host')
    return {schema.ATTR_DEST: host if host.__class__ is str else None}


def _rollback_attrs(instance, args, kwargs):
    # _rollback_live_migration(context, instance, dest, migrate_data,
    #                          migration_status='failed', ...)
    status = kwargs.get('migration_status')
    if status is None:
        status = args[4] if len(args) > 4 else 'failed'
    dest = _value(args, kwargs, 'dest', 2)
    return {schema.ATTR_ROLE: schema.ROLE_SOURCE,
            schema.ATTR_MIGRATION_STATUS: status,
            schema.ATTR_DEST: dest if dest.__class__ is str else None}


def _listed(instance, args, kwargs, result):
    try:
        return {schema.ATTR_COUNT: len(result)}
    except TypeError:
        return None


SOURCE = schema.ROLE_SOURCE
DEST = schema.ROLE_DEST


def action_points() -> list:
    """Points of every server action other than create (delete, resize
    and cold migrate with confirm/revert, live migration, rebuild,
    evacuate, shelve/unshelve, reboot, stop/start, list/show): nova-api,
    conductor and compute (source and destination); the scheduler's
    ``select_destinations`` is the boot's point."""
    api = 'nova.compute.api'
    conductor = 'nova.conductor.manager'
    compute = 'nova.compute.manager'
    inst = uuids('instance')

    def a(method, event=None, **kw):
        kw.setdefault('instances', inst)
        return P(api, 'API.' + method, event or 'api.compute.' + method,
                 'api', **kw)

    def c(method, event, **kw):
        kw.setdefault('instances', inst)
        return P(conductor, method, event, 'conductor', host=SELF_HOST,
                 **kw)

    def m(method, event, on_enter=None, **kw):
        kw.setdefault('instances', inst)
        return P(compute, 'ComputeManager.' + method, event, 'compute',
                 host=SELF_HOST, on_enter=on_enter, **kw)

    ctxt = arg('ctxt', 0)
    return [
        # nova-api: one span per compute API method a route reached
        a('delete'),
        # resize(context, instance, flavor_id=None, clean_shutdown=True,
        #        host_name=None, ...): no flavor is a cold migration
        a('resize', on_enter=_resize_attrs),
        a('confirm_resize'),
        a('revert_resize'),
        a('live_migrate', on_enter=_arg_attr(schema.ATTR_DEST,
                                             'host_name', 4)),
        a('rebuild'),
        a('evacuate', on_enter=_arg_attr(schema.ATTR_DEST, 'host', 2)),
        a('shelve'),
        a('shelve_offload'),
        a('unshelve'),
        a('reboot', on_enter=_arg_attr(schema.ATTR_REBOOT_TYPE,
                                       'reboot_type', 2)),
        a('stop'),
        a('start'),
        a('get', instances=uuids('instance_id')),
        a('get_all', instances=None, on_exit=_listed),
        # nova-api across cells (api.cells.query: the thread hook above)
        P('nova.context', 'scatter_gather_cells', EV_SCATTER_GATHER, None,
          when=_in_api, on_enter=_cells_enter, on_exit=_cells_exit),
        # cross-cell lists: each cell's batches, queried as the API
        # thread merges the cells' results (see _lazy)
        P('nova.compute.instance_list', 'InstanceLister.get_by_filters',
          EV_CELL_QUERY, None, context=arg('ctx', 0), when=_in_api,
          on_enter=_cell_batch, on_exit=_listed),
        P('nova.compute.migration_list', 'MigrationLister.get_by_filters',
          EV_CELL_QUERY, None, context=arg('ctx', 0), when=_in_api,
          on_enter=_cell_batch, on_exit=_listed),
        # nova-conductor
        c('ComputeTaskManager.migrate_server', 'conductor.migrate_server',
          on_enter=_arg_attr(schema.ATTR_LIVE, 'live', 3)),
        c('ComputeTaskManager._cold_migrate', 'conductor.cold_migrate'),
        c('ComputeTaskManager._live_migrate', 'conductor.live_migrate',
          on_enter=_live_hint),
        P('nova.conductor.tasks.live_migrate',
          'LiveMigrationTask._call_livem_checks_on_host',
          'conductor.live_migrate.checks', 'conductor', context=None,
          on_enter=_arg_attr(schema.ATTR_DEST, 'destination', 0)),
        c('ComputeTaskManager.rebuild_instance',
          'conductor.rebuild_instance',
          on_enter=_rebuild_attrs),
        c('ComputeTaskManager.unshelve_instance',
          'conductor.unshelve_instance'),
        # nova-compute; role: the side of a move the host is on
        m('terminate_instance', 'compute.terminate_instance'),
        m('prep_resize', 'compute.prep_resize', _move(DEST, 8)),
        m('resize_instance', 'compute.resize_instance', _move(SOURCE, 3)),
        m('finish_resize', 'compute.finish_resize', _move(DEST, 4)),
        m('confirm_resize', 'compute.confirm_resize', _move(SOURCE, 2)),
        m('revert_resize', 'compute.revert_resize', _move(DEST, 2)),
        m('finish_revert_resize', 'compute.finish_revert_resize',
          _move(SOURCE, 2)),
        m('check_can_live_migrate_destination',
          'compute.check_can_live_migrate_destination', _move(DEST, 4),
          context=ctxt),
        m('check_can_live_migrate_source',
          'compute.check_can_live_migrate_source', _const(_SOURCE),
          context=ctxt),
        m('pre_live_migration', 'compute.pre_live_migration',
          _const(_DEST)),
        # the whole migration on the source, in nova's live-migration
        # thread (live_migration itself only queues it)
        m('_do_live_migration', 'compute.live_migration',
          _move(SOURCE, 4, other=('dest', 1))),
        m('_post_live_migration', 'compute.post_live_migration',
          _move(SOURCE, None, other=('dest', 2)), context=ctxt),
        m('post_live_migration_at_destination',
          'compute.post_live_migration_at_destination', _const(_DEST)),
        m('_rollback_live_migration', 'compute.rollback_live_migration',
          _rollback_attrs),
        m('rollback_live_migration_at_destination',
          'compute.rollback_live_migration_at_destination', _const(_DEST)),
        m('rebuild_instance', 'compute.rebuild_instance',
          _compute_rebuild),
        m('shelve_instance', 'compute.shelve_instance'),
        # offloading, asked for or right after a shelve
        m('_shelve_offload_instance', 'compute.shelve_offload_instance'),
        m('unshelve_instance', 'compute.unshelve_instance'),
        m('reboot_instance', 'compute.reboot_instance',
          _arg_attr(schema.ATTR_REBOOT_TYPE, 'reboot_type', 3)),
        m('stop_instance', 'compute.stop_instance'),
        m('start_instance', 'compute.start_instance'),
    ]


_SOURCE = {schema.ATTR_ROLE: schema.ROLE_SOURCE}
_DEST = {schema.ATTR_ROLE: schema.ROLE_DEST}


def _resize_attrs(instance, args, kwargs):
    # resize(context, instance, flavor_id=None, clean_shutdown=True,
    #        host_name=None, ...): no flavor is a cold migration
    flavor = _value(args, kwargs, 'flavor_id', 2)
    host = _value(args, kwargs, 'host_name', 4)
    return {schema.ATTR_FLAVOR_ID: flavor if flavor is None or
            flavor.__class__ in (str, int) else str(flavor),
            schema.ATTR_DEST: host if host.__class__ is str else None}


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
          kind=points_mod.HOOK, on_enter=_carry_span_of(patcher),
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
    ] + action_points()


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
    #: {mode: tox env} for a mode verified by another env than
    #: ``tox_env`` (the integration tier: separate nova processes).
    mode_envs: dict = dataclasses.field(default_factory=dict)

    def env_of(self, mode: str) -> str:
        """The tox env that verifies ``mode`` (one of ``modes``)."""
        return self.mode_envs.get(mode, self.tox_env)


THREAD_HOOK = 'nova.thread_pool_factory:spawn_on'
SPAWN_N = 'nova.utils:spawn_n'
_NO_THREADS = 'none: eventlet-only release'

RELEASES = (
    # Every service defaults to native threads.
    Release('34.0.0', '2026.2', 'functional', ('eventlet', 'threads'),
            {THREAD_HOOK: THREAD_HOOK}, {}),
    # api and scheduler default to threads, conductor and compute to
    # eventlet; threads start with nova.utils.spawn_on (spawn calls it).
    # That default (threads) is verified by the integration tier: nova
    # 33's in-process test fixtures fail under threads
    # (doc/source/releases.rst).
    Release('33.0.2', '2026.1', 'functional-nova33',
            ('eventlet', 'threads'), {THREAD_HOOK: 'nova.utils:spawn_on'}, {},
            mode_envs={'threads': 'integration-nova33'}),
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
