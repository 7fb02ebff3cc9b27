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
"""oslo.service periodic tasks as ``periodic.task`` spans.

nova's periodic tasks (``update_available_resource``,
``_heal_instance_info_cache``, ``_sync_power_states``...) are run by
``PeriodicTasks.run_periodic_tasks``, which calls each due task from
the class's ``_periodic_tasks`` list, collected when the class was
made: patching the methods would not reach them.  A hook on
``run_periodic_tasks`` gives the instance, for the length of the call,
its own copy of that list with each task wrapped to record a span
(``task``: ``Class.method``).  Its SQL, its locks and its calls to
other services (``ksa.request``) are children of the span.  Each run
has a request id of its own, ``periodic-<task>-<32 hex>``
(``schema.periodic_req``), which those children inherit through the
current span, so the analyser can charge them to the task and name it
as the holder of a lock a request waited for; it never counts the run
as a user request.  Neither nova's admin context of the run (one for
every task of the run) nor oslo.context's current one (stale there) is
taken.  The span's host is the service's ``host`` (a compute's), else
the process's.  The copy is removed when the call returns (and
replaced at the next call if an exception kept it).
"""

import functools
import os

from instrument import schema
from instrument.patching import points as points_mod
from instrument.runtime import faults
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracing
from instrument.targets import base

ATTR = '_periodic_tasks'
_FAULTS = faults.Faults(
    'a periodic task span', what='the task runs unrecorded'
)


def traced(recorder, owner: str, name: str, task):
    """``task(service, context)`` recording a ``periodic.task`` span."""
    label = '%s.%s' % (owner, name)
    begin = recorder.begin
    end = recorder.end
    clock = recorder.clock

    @functools.wraps(task)
    def run(service, context, *args, **kwargs):
        rec = outer = None
        try:
            outer = recorder_mod.set_frame(recorder_mod.NO_FRAME)
            host = getattr(service, 'host', None)
            # (a periodic run is rare: a fresh id costs nothing here)
            own = {
                'request_id': schema.periodic_req(label, os.urandom(16).hex())
            }
            rec = begin(
                schema.EV_PERIODIC_TASK,
                None,
                host if host.__class__ is str else None,
                own,
                None,
                None,
                {schema.ATTR_TASK: label},
            )
        except Exception as exc:
            _FAULTS(exc)
        if rec is None:
            _leave(outer)
            return task(service, context, *args, **kwargs)
        try:
            result = task(service, context, *args, **kwargs)
        except BaseException as exc:
            _end(end, clock, rec, schema.ST_ERROR, exc)
            _leave(outer)
            raise
        _end(end, clock, rec, schema.ST_OK, None)
        _leave(outer)
        return result

    run.__instrument_task__ = task  # type: ignore[attr-defined]
    return run


def _end(end, clock, rec, st, exc) -> None:
    """End the span of a run (``exc``: what the task raised); never
    raises: the clock read and the error's description included."""
    t1 = None
    try:
        t1 = clock()
        end(rec, t1, st, tracing.error_of(exc) if exc is not None else None)
    except Exception as fault:
        recorder_mod.abandon(rec, st, t1)
        _FAULTS(fault)


def _leave(token) -> None:
    if token is not None:
        recorder_mod.reset_frame(token)


def _hooks(recorder):
    def on_enter(instance, args, kwargs):
        tasks = type(instance).__dict__.get(ATTR)
        if tasks is None:
            tasks = getattr(type(instance), ATTR, None)
        if not tasks:
            return None
        owner = type(instance).__name__
        instance.__dict__[ATTR] = [
            (name, traced(recorder, owner, name, task)) for name, task in tasks
        ]
        return None

    def on_exit(instance, args, kwargs, result):
        instance.__dict__.pop(ATTR, None)

    return on_enter, on_exit


def points(recorder) -> list:
    on_enter, on_exit = _hooks(recorder)
    return [
        points_mod.PatchPoint(
            'oslo_service.periodic_task',
            'PeriodicTasks.run_periodic_tasks',
            'periodic.run',
            kind=points_mod.HOOK,
            on_enter=on_enter,
            on_exit=on_exit,
        )
    ]


class PeriodicTarget(base.Target):
    """``periodic.task`` spans."""

    name = 'periodic'
    requires = {'oslo.service': ''}
    surveyed = {'oslo.service': ('4.8.0',)}

    def points(self, ctx: base.Context) -> list:
        return points(ctx.recorder)
