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
"""nova-api across cells: the scatter-gather (``api.cells.scatter_gather``)
and each cell's part of it (``api.cells.query``), in the thread that
runs it or, for a cross-cell list's lazy queries, in the API thread."""

import functools
import inspect

from instrument import schema
from instrument.patching import points as points_mod
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracing
from instrument.targets.nova import extract
from instrument.targets.nova import frames
from instrument.targets.sqlalchemy import names

EV_SCATTER_GATHER = 'api.cells.scatter_gather'
EV_CELL_QUERY = 'api.cells.query'
# cell uuid -> attrs of its api.cells.query spans (name and database, read
# once per cell from its mapping); bounded.
CELLS: dict = {}
MAX_CELLS = 4096


def lazy(fn) -> bool:
    """Is a cell's function a generator function?  nova's cross-cell
    lists (``CrossCellLister.query_wrapper``) only make a generator in
    the cell's thread: the queries run later, in the API thread, as the
    results are merged (``cell_batch``)."""
    return fn is not None and inspect.isgeneratorfunction(fn)


# code of a spawned function -> (index of cell_uuid, of fn, of the
# cell's context: the first of *args) in its positional parameters, or
# None: not nova's gather_result(cell_uuid, fn, *args, **kwargs)
_GATHER: dict = {}


def _gather_layout(func):
    code = getattr(func, '__code__', None)
    if code is None:
        return None
    try:
        return _GATHER[code]
    except KeyError:
        pass
    layout = None
    try:
        params = list(inspect.signature(func).parameters.values())
        names = [p.name for p in params]
        if 'cell_uuid' in names and 'fn' in names:
            fn = names.index('fn')
            # the cell's context: what follows fn (the first of *args)
            after = params[fn + 1] if fn + 1 < len(params) else None
            if after is not None and after.kind in (
                after.POSITIONAL_OR_KEYWORD,
                after.VAR_POSITIONAL,
            ):
                layout = (names.index('cell_uuid'), fn, fn + 1)
    except (TypeError, ValueError):
        pass
    if len(_GATHER) < MAX_CELLS:
        _GATHER[code] = layout
    return layout


def gather_call(func, rest):
    """``(cell uuid, the cell's function, the cell's context)`` of a
    spawned call of nova's ``gather_result(cell_uuid, fn, *args)``
    (``rest``: its positional arguments, the context the first of
    ``args``), by its signature; None for any other function."""
    layout = _gather_layout(func)
    if layout is None:
        return None
    uuid, fn, first = layout
    size = len(rest)
    return (
        rest[uuid] if uuid < size else None,
        rest[fn] if fn < size else None,
        rest[first] if first < size else None,
    )


def cell_batch(instance, ctx):
    # CrossCellLister.get_by_filters(ctx, filters, limit, marker, ...):
    # one batch of one cell's rows, ctx targeted at the cell
    uuid = getattr(ctx, 'cell_uuid', None)
    return CELLS.get(uuid) or {schema.ATTR_CELL: uuid}


def in_api(instance, args, kwargs) -> bool:
    """Scatter-gathers are the API's (list, show, quotas): the scheduler
    and conductor use them too, inside spans of their own that keep
    their time."""
    frame = recorder_mod.current_frame()
    return frame is not None and frame[recorder_mod.F_SVC] == 'api'


def database_of(url) -> str | None:
    try:
        from sqlalchemy.engine import make_url

        return names.database_name(make_url(url)) or None
    except Exception:  # not a URL (a test's label): no database name
        return None


def _remember_cell(mapping) -> None:
    uuid = getattr(mapping, 'uuid', None)
    if uuid is None or uuid in CELLS or len(CELLS) >= MAX_CELLS:
        return
    try:
        name = mapping.name
    except Exception:
        name = None
    try:
        db = database_of(mapping.database_connection)
    except Exception:
        db = None
    CELLS[uuid] = {
        schema.ATTR_CELL: uuid,
        schema.ATTR_CELL_NAME: name,
        schema.ATTR_DB: db,
    }


def cells_enter(instance, mappings):
    # scatter_gather_cells(context, cell_mappings, timeout, fn, ...)
    mappings = mappings or ()
    for mapping in mappings:
        if getattr(mapping, 'uuid', None) not in CELLS:
            _remember_cell(mapping)
    return {schema.ATTR_COUNT: len(mappings)}


def cells_exit(instance, args, kwargs, result):
    if not isinstance(result, dict):
        return None
    timeouts = errors = 0
    for value in result.values():
        if isinstance(value, BaseException):
            errors += 1
        elif value.__class__ is object:  # did_not_respond_sentinel
            timeouts += 1
    return {schema.ATTR_ERRORS: errors, schema.ATTR_TIMEOUTS: timeouts}


def cell_query(recorder, frame, func, uuid, ctx):
    """``func`` (nova's ``gather_result``) recorded as one cell's
    ``api.cells.query`` span (cell ``uuid``, context ``ctx``), child of
    the scatter-gather span ``frame`` (its request), in the thread or
    greenthread that runs it."""
    begin = recorder.begin
    end = recorder.end
    clock = recorder.clock

    @functools.wraps(func)
    def run(*args, **kwargs):
        token = frames.enter(frame)
        rec = None
        try:
            attrs = CELLS.get(uuid) or {schema.ATTR_CELL: uuid}
            rec = begin(EV_CELL_QUERY, None, None, ctx, None, None, attrs)
        except Exception as exc:
            frames.FAULTS(exc)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            _end_cell(end, clock, rec, exc, True)
            if token is not None:
                frames.leave(token)
            raise
        # gather_result returns a cell's exception instead of raising it
        _end_cell(end, clock, rec, result, False)
        if token is not None:
            frames.leave(token)
        return result

    return run


def _end_cell(end, clock, rec, outcome, raised: bool) -> None:
    """End a cell's span: ``outcome`` is what ``gather_result`` raised
    (``raised``) or returned (a cell's exception, or its result).
    Never raises: the clock read and the error's description
    included."""
    if rec is None:
        return
    exc = None
    t1 = None
    try:
        t1 = clock()
        exc = outcome if raised or isinstance(outcome, BaseException) else None
        if exc is None:
            end(rec, t1)
        else:
            end(rec, t1, schema.ST_ERROR, tracing.error_of(exc))
    except Exception as fault:
        recorder_mod.abandon(
            rec, schema.ST_ERROR if exc is not None else schema.ST_OK, t1
        )
        frames.FAULTS(fault)


def points() -> list:
    """The scatter-gather's span, and each cell's batches of a
    cross-cell list, queried as the API thread merges the cells'
    results (see ``lazy``); each cell's part run in a thread is the
    thread hook's (``threads``)."""
    P = points_mod.PatchPoint
    reads = points_mod.reads
    ctx = points_mod.arg('ctx')
    return [
        P(
            'nova.context',
            'scatter_gather_cells',
            EV_SCATTER_GATHER,
            None,
            when=in_api,
            on_enter=reads(cells_enter, 'cell_mappings'),
            on_exit=cells_exit,
        ),
        P(
            'nova.compute.instance_list',
            'InstanceLister.get_by_filters',
            EV_CELL_QUERY,
            None,
            context=ctx,
            when=in_api,
            on_enter=reads(cell_batch, 'ctx'),
            on_exit=extract.listed,
        ),
        P(
            'nova.compute.migration_list',
            'MigrationLister.get_by_filters',
            EV_CELL_QUERY,
            None,
            context=ctx,
            when=in_api,
            on_enter=reads(cell_batch, 'ctx'),
            on_exit=extract.listed,
        ),
    ]
