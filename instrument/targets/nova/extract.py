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
"""What the points of nova's operation steps read from a call: the
attrs of each step (``on_enter``/``on_exit``), by argument name,
resolved against the target's signature when the point is applied
(``points.reads``, ``points.arg``)."""

from instrument import schema
from instrument.patching import points as points_mod
from instrument.runtime import tracer as tracing

reads = points_mod.reads


# -- a boot ------------------------------------------------------------------


def count(instance, value):
    return {schema.ATTR_COUNT: len(value)} if isinstance(value, list) else None


def _attempt(filter_properties):
    retry = (
        filter_properties.get('retry')
        if isinstance(filter_properties, dict)
        else None
    )
    if isinstance(retry, dict):
        return retry.get('num_attempts')
    return None


def conductor_build_attrs(instance, filter_properties, host_lists):
    # build_instances(context, instances, image, filter_properties, ...,
    #                 host_lists=None)
    attempts = _attempt(filter_properties)
    attrs = {schema.ATTR_ATTEMPT: (attempts or 0) + 1}
    if host_lists is not None:
        attrs[schema.ATTR_RESCHEDULE] = True
    return attrs


def compute_build_attrs(instance, filter_properties):
    # _do_build_and_run_instance(context, instance, image, request_spec,
    #                            filter_properties, ...)
    attempt = _attempt(filter_properties)
    return {schema.ATTR_ATTEMPT: attempt or 1}


def selected_hosts(result):
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


def selected(instance, args, kwargs, result):
    return {schema.ATTR_SELECTED: selected_hosts(result)}


def outcome(instance, args, kwargs, result):
    return {schema.ATTR_OUTCOME: result} if isinstance(result, str) else None


def created(result):
    instances = result[0] if isinstance(result, tuple) else None
    return [i.uuid for i in instances or () if getattr(i, 'uuid', None)]


def created_attrs(instance, args, kwargs, result):
    instances = result[0] if isinstance(result, tuple) else None
    return {schema.ATTR_COUNT: len(instances or ())}


def candidates(instance, args, kwargs, result):
    if isinstance(result, tuple) and result and result[0] is not None:
        return {schema.ATTR_COUNT: len(result[0])}
    return {schema.ATTR_COUNT: 0}


def host_count(instance, args, kwargs, result):
    if isinstance(result, tuple) and result and isinstance(result[0], dict):
        return {schema.ATTR_COUNT: sum(len(v) for v in result[0].values())}
    return None


def hosts_in(instance, compute_nodes):
    # _get_host_states(context, compute_nodes, services): the compute
    # nodes of each cell
    if isinstance(compute_nodes, dict):
        return {schema.ATTR_COUNT: sum(len(v) for v in compute_nodes.values())}
    return None


def len_result(instance, args, kwargs, result):
    if isinstance(result, list):
        return {schema.ATTR_COUNT: len(result)}
    return None


def claimed(instance, args, kwargs, result):
    return {schema.ATTR_CLAIMED: bool(result)}


def reason(name):
    """``on_enter``: the exception in argument ``name``."""

    def attrs(instance, exc):
        if isinstance(exc, BaseException):
            cls, msg = tracing.error_of(exc)
            return {schema.ATTR_REASON: cls, schema.ATTR_MSG: msg}
        return None

    return reads(attrs, name)


# -- server actions other than create ---------------------------------------

# -- server actions other than create ---------------------------------------


def const(attrs):
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


def _move_attrs(base, migration, dest):
    attrs = dict(base)
    if migration is not None:
        attrs[schema.ATTR_MIGRATION_TYPE] = _set(migration, 'migration_type')
        attrs[schema.ATTR_SOURCE] = _set(migration, 'source_compute')
        attrs[schema.ATTR_DEST] = _set(migration, 'dest_compute')
    if dest.__class__ is str:
        attrs[schema.ATTR_DEST] = dest
    return attrs


def move(role, name='migration', other=None):
    """``on_enter`` of a compute step of a move: its ``role`` and, from
    the migration record (argument ``name``; None: none), its type and
    both hosts; ``other`` names a destination argument."""
    base = {schema.ATTR_ROLE: role} if role else {}
    if name is not None and other is not None:
        return reads(
            lambda instance, migration, dest: _move_attrs(
                base, migration, dest
            ),
            name,
            other,
        )
    if name is not None:
        return reads(
            lambda instance, migration: _move_attrs(base, migration, None),
            name,
        )
    return reads(lambda instance, dest: _move_attrs(base, None, dest), other)


def arg_attr(key, name):
    """``on_enter``: argument ``name`` (a plain value) as ``key``."""

    def on_enter(instance, value):
        if value is None or value.__class__ in (str, bool, int):
            return {key: value}
        return None

    return reads(on_enter, name)


def rebuild_attrs(instance, recreate, host):
    # conductor's rebuild_instance(context, instance, orig_image_ref,
    #   image_ref, injected_files, new_pass, orig_sys_metadata, bdms,
    #   recreate, on_shared_storage, preserve_ephemeral=False, host=None,
    #   ...): recreate is an evacuation, host the one asked for
    attrs: dict = {schema.ATTR_EVACUATE: bool(recreate)}
    if host.__class__ is str:
        attrs[schema.ATTR_DEST] = host
    return attrs


def compute_rebuild(instance, recreate, migration):
    # compute's rebuild_instance(..., bdms, recreate, on_shared_storage,
    #   preserve_ephemeral, migration, ...): an evacuation arrives on
    #   its destination with its migration record
    if recreate:
        attrs = _move_attrs(AT_DEST, migration, None)
        attrs[schema.ATTR_EVACUATE] = True
        return attrs
    return {schema.ATTR_EVACUATE: False}


def live_hint(instance, hint, request_spec):
    # _live_migrate(context, instance, scheduler_hint, block_migration,
    #               disk_over_commit, request_spec): a forced host is
    # the hint's, a host to check the request spec's destination
    host = hint.get('host') if isinstance(hint, dict) else None
    if host is None:
        wanted = _set(request_spec, 'requested_destination')
        host = _set(wanted, 'host')
    return {schema.ATTR_DEST: host if host.__class__ is str else None}


def rollback_attrs(instance, dest, status):
    # _rollback_live_migration(context, instance, dest, migrate_data,
    #                          migration_status='failed', ...)
    if status is None:
        status = 'failed'
    return {
        schema.ATTR_ROLE: schema.ROLE_SOURCE,
        schema.ATTR_MIGRATION_STATUS: status,
        schema.ATTR_DEST: dest if dest.__class__ is str else None,
    }


def action_found(instance, request, meth):
    """``on_exit`` of nova's WSGI ``Resource.get_method(request, action,
    content_type, body)``: the server action it found (the name its
    ``@wsgi.action`` gave the method) left in the request's environ for
    the paste filter's ``api.request`` (attrs ``action``): a request
    refused before it reached the compute API still names its
    operation.  Nothing is read from the body but what nova read."""
    name = getattr(meth, 'wsgi_action', None)
    if name.__class__ is str:
        request.environ[schema.ENV_ACTION] = name


note_action = reads(action_found, 'request')


def listed(instance, args, kwargs, result):
    """``on_exit``: the number of rows (or batches) listed."""
    try:
        return {schema.ATTR_COUNT: len(result)}
    except TypeError:
        return None


# the role of a host that is always the source / the destination
AT_SOURCE = {schema.ATTR_ROLE: schema.ROLE_SOURCE}
AT_DEST = {schema.ATTR_ROLE: schema.ROLE_DEST}


def resize_attrs(instance, flavor, host):
    # resize(context, instance, flavor_id=None, clean_shutdown=True,
    #        host_name=None, ...): no flavor is a cold migration
    return {
        schema.ATTR_FLAVOR_ID: flavor
        if flavor is None or flavor.__class__ in (str, int)
        else str(flavor),
        schema.ATTR_DEST: host if host.__class__ is str else None,
    }
