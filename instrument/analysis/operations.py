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
"""The operation of every request, and the final states of each one.

``operation_of`` names a request's nova operation (``schema.OPERATIONS``)
from what it recorded, never from a guess:

1. the compute API method the route reached (``api.compute.*``): an
   action method (create, delete, resize...) wins over the ``get`` that
   nearly every server action makes first to load the instance;
   ``api.compute.resize`` is a cold migration when the API says so (the
   ``api.request`` attribute ``action`` is ``migrate``, or the span's
   ``flavor_id`` attribute is present and null: nova's migrate action
   calls ``resize`` without a flavor); ``get`` alone is ``show`` on a
   ``GET`` of one server, ``get_all`` is ``list``;
2. without an API span (its process's file missing, a request id
   begun downstream): the conductor's and computes' spans of one
   operation (a build is a boot, ``prep_resize`` a resize, a
   ``rollback_live_migration`` a live migration...);
3. else ``other``.  The scheduler's spans alone name no operation (boots,
   resizes, evacuations and unshelves all schedule).

Boots keep the state machine of ``classify`` (unchanged).  Every other
operation has its own final states here (``STATES``), one row per
instance like a boot's: ``{inst, state, cause, stopped, attempts}``.
The rules are data (``SPECS``): which span's success ends the operation,
which spans' errors mean which failure, which spans count attempts;
live migration adds its roll-back.  An error in a span that names no
state of its own (its exception left the span of a known step) falls
to the step it happened under.
"""

import typing

from instrument.analysis import classify
from instrument import schema

S_EV, S_HOST, S_SVC, S_PID, S_START, S_DUR, S_PARENT, S_ST, S_ERR, \
    S_ATTRS, S_INST = range(11)

OP_BOOT = schema.OP_BOOT
OTHER = 'other'

# attributes read (besides schema's): the server action's name on
# api.request, the flavor asked for on api.compute.resize, the role of
# a compute (source / dest) and a cell's name
ATTR_ACTION = 'action'
ATTR_FLAVOR_ID = 'flavor_id'
ATTR_ROLE = 'role'
ATTR_CELL = 'cell'

# -- final states ---------------------------------------------------------
SUCCESS = classify.SUCCESS
RESCHEDULED_SUCCESS = classify.RESCHEDULED_SUCCESS
API_FAILURE = classify.API_FAILURE
SCHEDULING_FAILURE = classify.SCHEDULING_FAILURE
COMPUTE_FAILURE = classify.COMPUTE_FAILURE
INCOMPLETE = classify.INCOMPLETE
PRECHECK_FAILURE = 'precheck_failure'
FAILED_ON_SOURCE = 'failed_on_source'
FAILED_ON_DEST = 'failed_on_destination'
ROLLED_BACK = 'rolled_back'
PARTIAL = 'partial'          # a list/show that a cell did not answer

GOOD_STATES = (SUCCESS, RESCHEDULED_SUCCESS)


class Spec:
    """The final-state rules of one operation.

    ``done``: spans whose success ends the operation (the last step);
    ``fail``: span -> the state its error means; ``attempts``: spans
    counted once per attempt (a second one is a retry on another host);
    ``api_only``: the API's answer is the outcome (no downstream step);
    ``states``: the operation's states, best first, for reports.
    """

    def __init__(self, done: tuple = (), fail: dict = None,
                 attempts: tuple = (), api_only: bool = False,
                 states: tuple = ()) -> None:
        self.done = frozenset(done)
        self.fail = fail or {}
        self.attempts = frozenset(attempts)
        self.api_only = api_only
        self.states = states


_SCHED = {'conductor.schedule': SCHEDULING_FAILURE,
          'scheduler.select_destinations': SCHEDULING_FAILURE}
_MOVE = (SUCCESS, RESCHEDULED_SUCCESS, SCHEDULING_FAILURE, FAILED_ON_SOURCE,
         FAILED_ON_DEST, API_FAILURE, INCOMPLETE)
_ONE_HOST = (SUCCESS, COMPUTE_FAILURE, API_FAILURE, INCOMPLETE)

SPECS = {
    'delete': Spec(
        done=('compute.terminate_instance',),
        fail={'compute.terminate_instance': COMPUTE_FAILURE},
        states=_ONE_HOST),
    'resize': Spec(
        done=('compute.finish_resize',),
        fail=dict(_SCHED, **{
            'conductor.migrate_server': SCHEDULING_FAILURE,
            'conductor.cold_migrate': SCHEDULING_FAILURE,
            'compute.prep_resize': FAILED_ON_DEST,
            'compute.resize_instance': FAILED_ON_SOURCE,
            'compute.finish_resize': FAILED_ON_DEST}),
        attempts=('compute.prep_resize',), states=_MOVE),
    'confirm_resize': Spec(
        done=('compute.confirm_resize',),
        fail={'compute.confirm_resize': FAILED_ON_SOURCE},
        states=(SUCCESS, FAILED_ON_SOURCE, API_FAILURE, INCOMPLETE)),
    'revert_resize': Spec(
        done=('compute.finish_revert_resize',),
        fail={'compute.revert_resize': FAILED_ON_DEST,
              'compute.finish_revert_resize': FAILED_ON_SOURCE},
        states=(SUCCESS, FAILED_ON_DEST, FAILED_ON_SOURCE, API_FAILURE,
                INCOMPLETE)),
    'live_migrate': Spec(
        done=('compute.post_live_migration_at_destination',),
        fail=dict(_SCHED, **{
            'conductor.live_migrate.checks': PRECHECK_FAILURE,
            'conductor.live_migrate': PRECHECK_FAILURE,
            'compute.check_can_live_migrate_destination': PRECHECK_FAILURE,
            'compute.check_can_live_migrate_source': PRECHECK_FAILURE,
            'compute.pre_live_migration': FAILED_ON_DEST,
            'compute.live_migration': FAILED_ON_SOURCE,
            'compute.post_live_migration': FAILED_ON_SOURCE,
            'compute.post_live_migration_at_destination': FAILED_ON_DEST,
            'compute.rollback_live_migration': FAILED_ON_SOURCE,
            'compute.rollback_live_migration_at_destination':
                FAILED_ON_DEST}),
        attempts=('compute.check_can_live_migrate_destination',),
        states=(SUCCESS, RESCHEDULED_SUCCESS, PRECHECK_FAILURE,
                SCHEDULING_FAILURE, ROLLED_BACK, FAILED_ON_SOURCE,
                FAILED_ON_DEST, API_FAILURE, INCOMPLETE)),
    'rebuild': Spec(
        done=('compute.rebuild_instance',),
        fail=dict(_SCHED, **{
            'conductor.rebuild_instance': SCHEDULING_FAILURE,
            'compute.rebuild_instance': COMPUTE_FAILURE}),
        states=(SUCCESS, SCHEDULING_FAILURE, COMPUTE_FAILURE, API_FAILURE,
                INCOMPLETE)),
    'shelve': Spec(
        done=('compute.shelve_instance',),
        fail={'compute.shelve_instance': COMPUTE_FAILURE,
              'compute.shelve_offload_instance': COMPUTE_FAILURE},
        states=_ONE_HOST),
    'shelve_offload': Spec(
        done=('compute.shelve_offload_instance',),
        fail={'compute.shelve_offload_instance': COMPUTE_FAILURE},
        states=_ONE_HOST),
    'unshelve': Spec(
        done=('compute.unshelve_instance',),
        fail=dict(_SCHED, **{
            'conductor.unshelve_instance': SCHEDULING_FAILURE,
            'compute.unshelve_instance': COMPUTE_FAILURE}),
        states=(SUCCESS, SCHEDULING_FAILURE, COMPUTE_FAILURE, API_FAILURE,
                INCOMPLETE)),
    'reboot': Spec(
        done=('compute.reboot_instance',),
        fail={'compute.reboot_instance': COMPUTE_FAILURE},
        states=_ONE_HOST),
    'stop': Spec(
        done=('compute.stop_instance',),
        fail={'compute.stop_instance': COMPUTE_FAILURE},
        states=_ONE_HOST),
    'start': Spec(
        done=('compute.start_instance',),
        fail={'compute.start_instance': COMPUTE_FAILURE},
        states=_ONE_HOST),
    'list': Spec(api_only=True,
                 states=(SUCCESS, PARTIAL, API_FAILURE, INCOMPLETE)),
    'show': Spec(api_only=True,
                 states=(SUCCESS, PARTIAL, API_FAILURE, INCOMPLETE)),
}
SPECS['cold_migrate'] = SPECS['resize']
SPECS['evacuate'] = SPECS['rebuild']

BOOT_STATES = classify.STATES


def states_of(op: str) -> tuple:
    """The final states of ``op``, best first (``()`` for ``other``)."""
    if op == OP_BOOT:
        return BOOT_STATES
    spec = SPECS.get(op)
    return spec.states if spec is not None else ()


# -- which operation ------------------------------------------------------

# api.compute.<method> -> operation (``get`` and ``resize`` decided below)
_API = {
    'api.compute.create': OP_BOOT,
    'api.compute.delete': 'delete',
    'api.compute.confirm_resize': 'confirm_resize',
    'api.compute.revert_resize': 'revert_resize',
    'api.compute.live_migrate': 'live_migrate',
    'api.compute.rebuild': 'rebuild',
    'api.compute.evacuate': 'evacuate',
    'api.compute.shelve': 'shelve',
    'api.compute.shelve_offload': 'shelve_offload',
    'api.compute.unshelve': 'unshelve',
    'api.compute.reboot': 'reboot',
    'api.compute.stop': 'stop',
    'api.compute.start': 'start',
    'api.compute.get_all': 'list',
}

# downstream spans -> operation, when no API span says
_DOWNSTREAM = {
    'conductor.schedule_and_build_instances': OP_BOOT,
    'conductor.build_instances': OP_BOOT,
    'conductor.bury_in_cell0': OP_BOOT,
    'compute.build_and_run_instance': OP_BOOT,
    'compute.build': OP_BOOT,
    'compute.terminate_instance': 'delete',
    'conductor.cold_migrate': 'resize',
    'compute.prep_resize': 'resize',
    'compute.resize_instance': 'resize',
    'compute.finish_resize': 'resize',
    'compute.confirm_resize': 'confirm_resize',
    'compute.revert_resize': 'revert_resize',
    'compute.finish_revert_resize': 'revert_resize',
    'conductor.live_migrate': 'live_migrate',
    'conductor.live_migrate.checks': 'live_migrate',
    'compute.check_can_live_migrate_destination': 'live_migrate',
    'compute.check_can_live_migrate_source': 'live_migrate',
    'compute.pre_live_migration': 'live_migrate',
    'compute.live_migration': 'live_migrate',
    'compute.post_live_migration': 'live_migrate',
    'compute.post_live_migration_at_destination': 'live_migrate',
    'compute.rollback_live_migration': 'live_migrate',
    'compute.rollback_live_migration_at_destination': 'live_migrate',
    'conductor.rebuild_instance': 'rebuild',
    'compute.rebuild_instance': 'rebuild',
    'conductor.unshelve_instance': 'unshelve',
    'compute.unshelve_instance': 'unshelve',
    'compute.shelve_instance': 'shelve',
    'compute.shelve_offload_instance': 'shelve_offload',
    'compute.reboot_instance': 'reboot',
    'compute.stop_instance': 'stop',
    'compute.start_instance': 'start',
}


def _is_cold(api_attrs: dict, span_attrs: dict) -> bool:
    if (api_attrs.get(ATTR_ACTION) or '') == 'migrate':
        return True
    return ATTR_FLAVOR_ID in span_attrs and span_attrs[ATTR_FLAVOR_ID] is None


def operation_of(spans: dict) -> str:
    """The operation of a request from its spans (see module doc)."""
    api_attrs: dict = {}
    api_op = None
    api_start = None
    got = False
    down = None
    down_start = None
    for s in spans.values():
        ev = s[S_EV]
        if ev == schema.EV_API_REQUEST:
            api_attrs = s[S_ATTRS] or {}
            continue
        if ev.startswith('api.compute.'):
            if ev == 'api.compute.get':
                got = True
                continue
            if ev == 'api.compute.resize':
                op = ev
            else:
                op = _API.get(ev)
                if op is None:
                    continue
            # the first action method the request reached
            if api_start is None or s[S_START] < api_start:
                api_op, api_start = op, s[S_START]
            continue
        op = _DOWNSTREAM.get(ev)
        if op is not None and (down_start is None or
                               s[S_START] < down_start):
            # the operation of the first downstream step
            down, down_start = op, s[S_START]
    if api_op == 'api.compute.resize':
        for s in spans.values():
            if s[S_EV] == 'api.compute.resize':
                return 'cold_migrate' if _is_cold(
                    api_attrs, s[S_ATTRS] or {}) else 'resize'
    if api_op is not None:
        return api_op
    if got:
        method = api_attrs.get(schema.ATTR_METHOD)
        route = api_attrs.get(schema.ATTR_ROUTE) or ''
        if method == 'GET' and route.rstrip('/').endswith('{id}'):
            return 'show'
        # a server action that only loaded the instance (a console...)
        return OTHER
    if down is not None:
        return down
    return OTHER


# -- final states -----------------------------------------------------------

def _failed(s) -> bool:
    return s[S_ST] == 'error' or s[S_ERR] is not None


def _api_error(spans: dict) -> typing.Optional[typing.Any]:
    """The failed API span (HTTP status >= 400, or an error), if any."""
    found = None
    for sid, s in spans.items():
        ev = s[S_EV]
        if ev == schema.EV_API_REQUEST:
            status = (s[S_ATTRS] or {}).get(schema.ATTR_STATUS)
            if (isinstance(status, int) and status >= 400) or _failed(s):
                found = found or sid
        elif ev.startswith('api.compute.') and _failed(s):
            return sid
    return found


def _api_cause(tree: classify.Tree, sid) -> dict:
    deepest = tree.deepest_error(sid)
    if deepest is not None:
        return classify._cause(tree, deepest)
    s = tree.spans[sid]
    status = (s[S_ATTRS] or {}).get(schema.ATTR_STATUS)
    return {'cls': 'HTTP %s' % status, 'msg': '', 'ev': s[S_EV],
            'host': s[S_HOST]}


def _downstream(s) -> bool:
    return s[S_SVC] != 'api' and not s[S_EV].startswith('api.')


def final_states(op: str, tree: classify.Tree) -> list:
    """One row per instance of a request of operation ``op`` (boot:
    ``classify.final_states``; ``other``: state ``other``)."""
    if op == OP_BOOT:
        return classify.final_states(tree)
    spec = SPECS.get(op)
    if spec is None:
        return [{'inst': None, 'state': classify.OTHER, 'cause': None,
                 'stopped': None, 'attempts': 0}]
    spans = tree.spans
    if spec.api_only:
        return [_api_only_state(tree)]
    insts = []
    for s in spans.values():
        for inst in s[S_INST] or ():
            if inst not in insts:
                insts.append(inst)
    return [_instance_state(spec, tree, inst, op)
            for inst in insts or [None]]


def _api_only_state(tree: classify.Tree) -> dict:
    spans = tree.spans
    row: dict[str, typing.Any] = {'inst': None, 'state': INCOMPLETE,
                                  'cause': None, 'stopped': None,
                                  'attempts': 0}
    err = _api_error(spans)
    api = [s for s in spans.values() if s[S_EV] == schema.EV_API_REQUEST]
    if err is not None:
        row['state'] = API_FAILURE
        row['cause'] = _api_cause(tree, err)
        return row
    if not api or any(s[S_DUR] is None for s in api):
        row['stopped'] = classify.stopped_at(tree)
        return row
    for sid, s in spans.items():
        if s[S_EV] == 'api.cells.query' and _failed(s):
            row['state'] = PARTIAL
            row['cause'] = classify._cause(tree, sid)
            return row
    row['state'] = SUCCESS
    return row


def _step_state(spec: Spec, tree: classify.Tree, sid) -> typing.Optional[
        str]:
    """The state an error in span ``sid`` means: its own, else that of
    the nearest enclosing span that has one."""
    spans = tree.spans
    cur = sid
    seen = set()
    while cur is not None and cur in spans and cur not in seen:
        seen.add(cur)
        state = spec.fail.get(spans[cur][S_EV])
        if state is not None:
            return state
        cur = spans[cur][S_PARENT]
    return None


def _role_state(s, state: str) -> str:
    """A compute span's recorded role overrides the step's default."""
    role = (s[S_ATTRS] or {}).get(ATTR_ROLE)
    if state in (FAILED_ON_SOURCE, FAILED_ON_DEST):
        if role == 'source':
            return FAILED_ON_SOURCE
        if role in ('dest', 'destination'):
            return FAILED_ON_DEST
    return state


def _instance_state(spec: Spec, tree: classify.Tree, inst, op: str) -> dict:
    spans = tree.spans
    mine = [sid for sid, s in spans.items() if classify._belongs(s, inst)]
    row: dict[str, typing.Any] = {'inst': inst, 'state': INCOMPLETE,
                                  'cause': None, 'stopped': None,
                                  'attempts': 0}
    attempts = 0
    done_ok = None
    rollback = None
    failures = []
    downstream = False
    for sid in mine:
        s = spans[sid]
        ev = s[S_EV]
        if ev in spec.attempts:
            attempts += 1
        if _downstream(s):
            downstream = True
        if ev in spec.done and s[S_DUR] is not None and not _failed(s):
            if done_ok is None or s[S_START] > spans[done_ok][S_START]:
                done_ok = sid
        if ev == 'compute.rollback_live_migration':
            rollback = sid
    for sid in tree.origins():
        if sid in spans and classify._belongs(spans[sid], inst) and \
                not spans[sid][S_EV].startswith('api.'):
            failures.append(sid)
    row['attempts'] = attempts
    if done_ok is not None:
        row['state'] = SUCCESS if attempts <= 1 else RESCHEDULED_SUCCESS
        return row
    if rollback is not None:
        row['state'] = ROLLED_BACK
        if failures:
            first = min(failures, key=lambda x: spans[x][S_START])
            row['cause'] = classify._cause(tree, first)
        if spans[rollback][S_DUR] is None:
            row['state'] = INCOMPLETE
            row['stopped'] = classify.stopped_at(tree, mine)
        return row
    if failures:
        # the failure that ended it: the last one raised
        last = max(failures, key=lambda x: (spans[x][S_START] + (
            spans[x][S_DUR] or 0)))
        state = _step_state(spec, tree, last)
        if state is not None:
            row['state'] = _role_state(spans[last], state)
            row['cause'] = classify._cause(tree, last)
            return row
    if not downstream:
        err = _api_error(spans)
        if err is not None:
            row['state'] = API_FAILURE
            row['cause'] = _api_cause(tree, err)
            return row
        if op == 'delete' and _api_done(spans) and not _sent_on(spans):
            # nova deleted it in the API (an instance without a host)
            row['state'] = SUCCESS
            return row
    row['stopped'] = classify.stopped_at(tree, mine)
    return row


def _api_done(spans: dict) -> bool:
    api = [s for s in spans.values() if s[S_EV] == schema.EV_API_REQUEST]
    return bool(api) and all(s[S_DUR] is not None for s in api)


def _sent_on(spans: dict) -> bool:
    """Did the request send an RPC message on (to a compute...)?"""
    return any(s[S_EV] in ('rpc.cast', 'rpc.call') for s in spans.values())


def request_state(op: str, rows: list) -> str:
    """One state for a request: the worst of its instances' (the order
    of ``states_of(op)`` is best first)."""
    if op == OP_BOOT:
        return classify.request_state(rows)
    order = states_of(op)
    if not order:
        return classify.OTHER
    states = {r['state'] for r in rows}
    for state in reversed(order):
        if state in states:
            return state
    return rows[0]['state'] if rows else INCOMPLETE


def terminal(op: str, spans: dict) -> bool:
    """Has a request of ``op`` (not a boot) reached its outcome?"""
    if any(s[S_DUR] is None for s in spans.values()):
        return False
    rows = final_states(op, classify.Tree(spans))
    return all(r['state'] != INCOMPLETE for r in rows)


# -- cells of a list / show -----------------------------------------------

def cells(spans: dict, req_start: int) -> typing.Optional[dict]:
    """The cells a request queried (``api.cells.query`` spans): ``{mode,
    cells: [{cell, db, start_us, dur_us, st}]}``, ``mode`` ``parallel``
    when two queries of one scatter-gather overlapped in time,
    ``serial`` when none did, ``single`` with one cell; None without
    cell spans."""
    groups: dict = {}
    rows = []
    for s in spans.values():
        if s[S_EV] != 'api.cells.query':
            continue
        attrs = s[S_ATTRS] or {}
        dur = s[S_DUR]
        rows.append({'cell': attrs.get(ATTR_CELL) or '?',
                     'db': attrs.get(schema.ATTR_DB),
                     'start_us': s[S_START] - req_start, 'dur_us': dur,
                     'st': s[S_ST] or 'open'})
        groups.setdefault(s[S_PARENT], []).append(
            (s[S_START], s[S_START] + (dur or 0)))
    if not rows:
        return None
    mode = 'single'
    for intervals in groups.values():
        if len(intervals) < 2:
            continue
        if mode == 'single':
            mode = 'serial'
        intervals.sort()
        hi = intervals[0][1]
        for a, b in intervals[1:]:
            if a < hi:
                mode = 'parallel'
                break
            hi = max(hi, b)
        if mode == 'parallel':
            break
    rows.sort(key=lambda r: r['start_us'])
    return {'mode': mode, 'cells': rows}
