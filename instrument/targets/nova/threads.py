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
"""The thread hook: nova's ``spawn_on`` (``spawn``, ``spawn_n`` in older
releases) runs the new thread's function inside the span that spawned
it; a cell's part of an API scatter-gather is recorded as its own span
(``cells``)."""

from instrument.patching import points as points_mod
from instrument.runtime import recorder as recorder_mod
from instrument.targets.nova import cells
from instrument.targets.nova import frames

# The argument of nova's thread start that is the function the new
# thread runs: ``spawn_on(executor_type, func, *args, **kwargs)``,
# ``spawn(func, ...)`` and ``spawn_n(func, ...)`` in older releases.
FUNC = 'func'


def carry_span(instance, args, kwargs, at, recorder=None):
    """Hook on ``spawn_on(executor_type, func, ...)`` (a ``places``
    hook: ``at`` is the place of ``func`` in ``args``, from the
    signature): the new thread runs ``func`` inside the span that
    spawned it; with ``recorder``, one cell's part of an API
    scatter-gather is recorded too."""
    return _carry(recorder, args, kwargs, at)


def carry_span_of(patcher):
    """``carry_span`` that also records each cell's part of an API
    scatter-gather (``api.cells.query``) through ``patcher``'s
    recorder."""
    recorder = getattr(patcher, 'recorder', None)
    if recorder is None:
        return carry_span

    def carry(instance, args, kwargs, at):
        return carry_span(instance, args, kwargs, at, recorder)

    return carry


def hook(patcher=None) -> points_mod.Places:
    """The ``on_enter`` of the thread start's points: ``carry_span``
    (``carry_span_of(patcher)``) handed the place of ``func``."""
    return points_mod.places(carry_span_of(patcher), FUNC)


def _carry(recorder, args, kwargs, at):
    frame = recorder_mod.current_frame()
    if frame is None:
        return None
    if FUNC in kwargs:
        kwargs = dict(kwargs, func=frames.run_in_frame(frame, kwargs[FUNC]))
        return args, kwargs
    if not -1 < at < len(args):
        return None  # not passed (the survey names a signature without)
    value = args[at]
    if not callable(value):
        return None
    gather = (
        cells.gather_call(value, args[at + 1 :])
        if (
            recorder is not None
            and frame[recorder_mod.F_EV] == cells.EV_SCATTER_GATHER
        )
        else None
    )
    if gather is not None and not cells.lazy(gather[1]):
        # scatter_gather_cells spawns gather_result(cell_uuid, fn,
        # cell_context, ...): one thread per cell
        run = cells.cell_query(recorder, frame, value, gather[0], gather[2])
    else:
        run = frames.run_in_frame(frame, value)
    return args[:at] + (run,) + args[at + 1 :], kwargs


def point(patcher=None) -> points_mod.PatchPoint:
    """The HOOK on nova's thread start.  nova 32-33: nova.utils.spawn_on
    (spawn calls it); 29-31: nova.utils.spawn, and spawn_n
    (``releases.release_points``)."""
    return points_mod.PatchPoint(
        'nova.thread_pool_factory',
        'spawn_on',
        'thread.spawn',
        kind=points_mod.HOOK,
        on_enter=hook(patcher),
        alternatives=(('nova.utils', 'spawn_on'), ('nova.utils', 'spawn')),
    )
