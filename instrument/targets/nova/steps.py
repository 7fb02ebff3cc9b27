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
"""The span points of nova's operation steps, generated from the
operation catalogue (``instrument.catalogue.STEPS``: event, place,
service).

A step of a service (api, conductor, scheduler, compute) records the
instance of its ``instance`` argument, and, off the API, the host of
its ``self`` (``self.host``); a step of no service of its own (the
scheduler's filters, placement) neither.  ``reads_of`` adds, per
step, only what differs: what else it reads from its arguments or
result (``extract``), by name, never at a position.  The table is made when
the points are (at install), so the points take the functions
``extract`` has then.
"""

from instrument import catalogue
from instrument import schema
from instrument.patching import points as points_mod
from instrument.targets.nova import extract as x

arg = points_mod.arg
reads = points_mod.reads
uuids = points_mod.uuids
SELF_HOST = points_mod.self_attr('host')
SOURCE = schema.ROLE_SOURCE
DEST = schema.ROLE_DEST

_CTXT = arg('ctxt')


def reads_of() -> dict:
    """step event -> the keyword arguments of its PatchPoint besides
    the defaults (module, target, event and service from the
    catalogue)."""
    return {
        # a boot
        'api.compute.create': dict(
            instances=None, result_instances=x.created, on_exit=x.created_attrs
        ),
        'conductor.schedule_and_build_instances': dict(
            instances=uuids('request_specs', attr='instance_uuid'),
            on_enter=reads(x.count, 'build_requests'),
        ),
        'conductor.build_instances': dict(
            instances=uuids('instances'),
            on_enter=reads(
                x.conductor_build_attrs, 'filter_properties', 'host_lists'
            ),
        ),
        'conductor.schedule': dict(
            instances=uuids('instance_uuids'), on_exit=x.selected
        ),
        'conductor.bury_in_cell0': dict(
            instances=uuids('build_requests', attr='instance_uuid'),
            on_enter=x.reason('exc'),
        ),
        'conductor.reschedule_failed': dict(on_enter=x.reason('exception')),
        'scheduler.select_destinations': dict(
            instances=uuids('instance_uuids'), on_exit=x.selected
        ),
        'scheduler.placement.candidates': dict(on_exit=x.candidates),
        'scheduler.host_states': dict(on_exit=x.host_count),
        'scheduler.host_states.update': dict(
            on_enter=reads(x.hosts_in, 'compute_nodes')
        ),
        'scheduler.filter': dict(
            context=None, on_exit=x.len_result, detail=True
        ),
        'scheduler.weigh': dict(
            context=None, on_exit=x.len_result, detail=True
        ),
        'scheduler.claim': dict(
            context=arg('ctx'),
            instances=uuids('instance_uuid'),
            on_exit=x.claimed,
        ),
        'compute.build': dict(
            on_enter=reads(x.compute_build_attrs, 'filter_properties'),
            on_exit=x.outcome,
        ),
        # nova-api: the compute API methods of the other operations
        # resize(context, instance, flavor_id=None, clean_shutdown=True,
        #        host_name=None, ...): no flavor is a cold migration
        'api.compute.resize': dict(
            on_enter=reads(x.resize_attrs, 'flavor_id', 'host_name')
        ),
        'api.compute.live_migrate': dict(
            on_enter=x.arg_attr(schema.ATTR_DEST, 'host_name')
        ),
        'api.compute.evacuate': dict(
            on_enter=x.arg_attr(schema.ATTR_DEST, 'host')
        ),
        'api.compute.reboot': dict(
            on_enter=x.arg_attr(schema.ATTR_REBOOT_TYPE, 'reboot_type')
        ),
        'api.compute.get': dict(instances=uuids('instance_id')),
        'api.compute.get_all': dict(instances=None, on_exit=x.listed),
        # nova-conductor
        'conductor.migrate_server': dict(
            on_enter=x.arg_attr(schema.ATTR_LIVE, 'live')
        ),
        'conductor.live_migrate': dict(
            on_enter=reads(x.live_hint, 'scheduler_hint', 'request_spec')
        ),
        'conductor.live_migrate.checks': dict(
            context=None,
            instances=None,
            host=None,
            on_enter=x.arg_attr(schema.ATTR_DEST, 'destination'),
        ),
        'conductor.rebuild_instance': dict(
            on_enter=reads(x.rebuild_attrs, 'recreate', 'host')
        ),
        # nova-compute; role: the side of a move the host is on
        'compute.prep_resize': dict(on_enter=x.move(DEST)),
        'compute.resize_instance': dict(on_enter=x.move(SOURCE)),
        'compute.finish_resize': dict(on_enter=x.move(DEST)),
        'compute.confirm_resize': dict(on_enter=x.move(SOURCE)),
        'compute.revert_resize': dict(on_enter=x.move(DEST)),
        'compute.finish_revert_resize': dict(on_enter=x.move(SOURCE)),
        catalogue.PREP_DEST_CROSS: dict(on_enter=x.move(DEST), context=_CTXT),
        catalogue.PREP_SOURCE_CROSS: dict(
            on_enter=x.move(SOURCE), context=_CTXT
        ),
        catalogue.FINISH_DEST_CROSS: dict(
            on_enter=x.move(DEST), context=_CTXT
        ),
        catalogue.CONFIRM_CROSS: dict(on_enter=x.move(SOURCE), context=_CTXT),
        catalogue.REVERT_DEST_CROSS: dict(
            on_enter=x.move(DEST), context=_CTXT
        ),
        catalogue.FINISH_REVERT_CROSS: dict(
            on_enter=x.move(SOURCE), context=_CTXT
        ),
        'compute.check_can_live_migrate_destination': dict(
            on_enter=x.move(DEST), context=_CTXT
        ),
        'compute.check_can_live_migrate_source': dict(
            on_enter=x.const(x.AT_SOURCE), context=_CTXT
        ),
        'compute.pre_live_migration': dict(on_enter=x.const(x.AT_DEST)),
        'compute.live_migration': dict(on_enter=x.move(SOURCE, other='dest')),
        'compute.post_live_migration': dict(
            on_enter=x.move(SOURCE, None, other='dest'), context=_CTXT
        ),
        'compute.post_live_migration_at_destination': dict(
            on_enter=x.const(x.AT_DEST)
        ),
        'compute.rollback_live_migration': dict(
            on_enter=reads(x.rollback_attrs, 'dest', 'migration_status')
        ),
        'compute.rollback_live_migration_at_destination': dict(
            on_enter=x.const(x.AT_DEST)
        ),
        'compute.rebuild_instance': dict(
            on_enter=reads(x.compute_rebuild, 'recreate', 'migration')
        ),
        'compute.reboot_instance': dict(
            on_enter=x.arg_attr(schema.ATTR_REBOOT_TYPE, 'reboot_type')
        ),
        'compute.live_migration_abort': dict(on_enter=x.const(x.AT_SOURCE)),
    }


def point(
    step: catalogue.Step, reads_by_event: dict | None = None
) -> points_mod.PatchPoint:
    """The span point of the catalogue's ``step`` (``reads_by_event``:
    ``reads_of()``)."""
    if reads_by_event is None:
        reads_by_event = reads_of()
    kw: dict = {}
    if step.service is not None:
        kw['instances'] = uuids('instance')
        if step.service != catalogue.API:
            kw['host'] = SELF_HOST
    kw.update(reads_by_event.get(step.event, ()))
    return points_mod.PatchPoint(
        step.module, step.target, step.event, step.service, **kw
    )


def points(of: tuple = catalogue.STEPS) -> list:
    """A span point for every step of ``of`` (the catalogue's), in its
    order."""
    table = reads_of()
    return [point(step, table) for step in of]


def action_point() -> points_mod.PatchPoint:
    """nova-api: the server action a request asked for (no span), left
    for the paste filter's ``api.request`` (``extract.action_found``)."""
    return points_mod.PatchPoint(
        'nova.api.openstack.wsgi',
        'Resource.get_method',
        'api.action',
        kind=points_mod.HOOK,
        on_exit=x.note_action,
    )
