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
   ``GET /servers/{id}`` (not of a sub-resource of the server: its
   instance actions, migrations...), ``get_all`` is ``list``;
   a request the API refused (status >= 400) before it reached the
   compute API method of its operation (a schema's 400, a policy's
   403): the operation its HTTP method and route ask for, and for a
   server action the action's name (``route_operation``);
2. without an API span (its process's file missing, a request id
   begun downstream): the conductor's and computes' spans of one
   operation (a build is a boot, ``prep_resize`` a resize, a
   ``rollback_live_migration`` a live migration...);
3. else ``other``.  The scheduler's spans alone name no operation (boots,
   resizes, evacuations and unshelves all schedule).

What each operation is comes from the operation catalogue
(``instrument.catalogue``, which the nova target's points are
generated from too): ``SPECS``, the API and downstream spans that name
an operation and the routes and actions of a refused request are made
from it here.  Boot's spec carries its reschedule extension, whose
state machine is ``classify``'s (it reads its events and its
reschedule from the catalogue's boot).  Every
other operation has its own final states here, one row per instance
like a boot's: ``{inst, state, cause, stopped, attempts}``.  The rules
are data (``SPECS``): which span's success ends the operation, which
spans' errors mean which failure, which spans count attempts; live
migration adds its roll-back.  An error in a span that names no state
of its own (its exception left the span of a known step) falls to the
step it happened under.
"""

import typing

from instrument import catalogue
from instrument import schema
from instrument.analysis.model import classify
from instrument.analysis.model import spans as spans_mod

# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_HOST = spans_mod.S_HOST
S_SVC = spans_mod.S_SVC
S_START = spans_mod.S_START
S_DUR = spans_mod.S_DUR
S_PARENT = spans_mod.S_PARENT
S_ST = spans_mod.S_ST
S_ATTRS = spans_mod.S_ATTRS
S_INST = spans_mod.S_INST

OP_BOOT = schema.OP_BOOT
EV_DISPATCH = 'rpc.dispatch'
OTHER = 'other'

# attributes read (besides schema's): the server action's name on
# api.request, the flavor asked for on api.compute.resize, the role of
# a compute (source / dest) and a cell's name
ATTR_ACTION = schema.ATTR_ACTION
ATTR_FLAVOR_ID = 'flavor_id'
ATTR_ROLE = 'role'
ATTR_CELL = 'cell'

# -- final states ---------------------------------------------------------
SUCCESS = catalogue.SUCCESS
RESCHEDULED_SUCCESS = catalogue.RESCHEDULED_SUCCESS
API_FAILURE = catalogue.API_FAILURE
SCHEDULING_FAILURE = catalogue.SCHEDULING_FAILURE
COMPUTE_FAILURE = catalogue.COMPUTE_FAILURE
INCOMPLETE = catalogue.INCOMPLETE
PRECHECK_FAILURE = catalogue.PRECHECK_FAILURE
FAILED_ON_SOURCE = catalogue.FAILED_ON_SOURCE
FAILED_ON_DEST = catalogue.FAILED_ON_DEST
ROLLED_BACK = catalogue.ROLLED_BACK
CONDUCTOR_FAILURE = catalogue.CONDUCTOR_FAILURE
PARTIAL = catalogue.PARTIAL  # a list/show that a cell did not answer

GOOD_STATES = (SUCCESS, RESCHEDULED_SUCCESS)


class Spec:
    """The final-state rules of one operation.

    ``done``: spans whose success ends the operation (the last step);
    ``fail``: span -> the state its error means; ``attempts``: spans
    counted once per attempt (a second one is a retry on another host);
    ``api_only``: the API's answer is the outcome (no downstream step);
    ``api_may_finish``: nova may finish it in the API (an instance
    without a host, a shelved-offloaded one): a success when the API
    answered and sent nothing on;
    ``rollback``: the span whose run rolls it back (live migration);
    ``conductor``: RPC method of the conductor -> the state its error
    means, for a conductor that finishes the operation itself after its
    last compute step (across cells, confirm and revert): a request
    with such an ``rpc.dispatch`` succeeds only once that dispatch has
    ended ok;
    ``states``: the operation's states, best first, for reports;
    ``reschedule``: a boot's extension (its builds rescheduled to
    other hosts, burials in cell0): its states are ``classify``'s
    machine's, which reads it.
    """

    def __init__(
        self,
        done: tuple = (),
        fail: typing.Optional[dict] = None,
        attempts: tuple = (),
        api_only: bool = False,
        states: tuple = (),
        api_may_finish: bool = False,
        rollback: typing.Optional[str] = None,
        reschedule: typing.Optional[catalogue.Reschedule] = None,
        conductor: typing.Optional[dict] = None,
    ) -> None:
        self.done = frozenset(done)
        self.fail = fail or {}
        self.conductor = conductor or {}
        self.attempts = frozenset(attempts)
        self.api_only = api_only
        self.api_may_finish = api_may_finish
        self.rollback = rollback
        self.states = states
        self.reschedule = reschedule

    @classmethod
    def of(cls, op: catalogue.Operation) -> 'Spec':
        """The spec of the catalogue's operation ``op``."""
        return cls(
            done=op.done,
            fail=dict(op.fail),
            attempts=op.attempts,
            api_only=op.api_only,
            states=op.states,
            api_may_finish=op.api_may_finish,
            rollback=op.rollback,
            reschedule=op.reschedule,
            conductor=dict(op.conductor),
        )


# the compute steps of a resize or cold migration across cells
# (snapshot-based), its confirm and revert
PREP_DEST_CROSS = catalogue.PREP_DEST_CROSS
PREP_SOURCE_CROSS = catalogue.PREP_SOURCE_CROSS
FINISH_DEST_CROSS = catalogue.FINISH_DEST_CROSS
CONFIRM_CROSS = catalogue.CONFIRM_CROSS
REVERT_DEST_CROSS = catalogue.REVERT_DEST_CROSS
FINISH_REVERT_CROSS = catalogue.FINISH_REVERT_CROSS


class Rules(typing.NamedTuple):
    """The analyser's tables of a catalogue's operations."""

    #: every operation's spec
    specs: dict
    #: api.compute.<method> -> operation (``get`` and ``resize`` decided
    #: in ``operation_of``)
    api: dict
    #: downstream spans -> operation, when no API span says
    downstream: dict
    #: (HTTP method, route after ``/servers``) -> operation
    routes: dict
    #: nova API action name -> operation
    actions: dict


def rules(ops: typing.Iterable[catalogue.Operation]) -> Rules:
    """The tables of operations ``ops`` (``catalogue.OPERATIONS``),
    the first operation to name a span or a route winning."""
    out = Rules({}, {}, {}, {}, {})
    for op in ops:
        out.specs[op.name] = Spec.of(op)
        for ev in op.api:
            out.api.setdefault(ev, op.name)
        for ev in op.steps:
            out.downstream.setdefault(ev, op.name)
        for route in op.routes:
            out.routes.setdefault(route, op.name)
        for action in op.actions:
            out.actions.setdefault(action, op.name)
    return out


RULES = rules(catalogue.OPERATIONS)
SPECS = RULES.specs

BOOT_STATES = classify.STATES


def states_of(op: str) -> tuple:
    """The final states of ``op``, best first (``()`` for ``other``)."""
    spec = SPECS.get(op)
    return spec.states if spec is not None else ()


# -- which operation ------------------------------------------------------

# api.compute.<method> -> operation (``get`` and ``resize`` decided below)
_API = RULES.api
# downstream spans -> operation, when no API span says
_DOWNSTREAM = RULES.downstream
# A request the API refused before it reached the compute API (a 400
# of the request's schema, a 403 of policy, a 404 of its server...):
# its operation from its HTTP method and route, the part after the
# last ``/servers`` (ids are ``{id}``), and for a server action the
# action's name (``api.request`` attrs ``action``).
_ROUTES = RULES.routes
_ACTION_ROUTE = ('POST', '/{id}/action')
# nova API action name -> operation
_ACTIONS = RULES.actions


def _server_route(api_attrs: dict) -> typing.Optional[tuple]:
    """``(method, the route after its last /servers)`` of a request
    (``('GET', '/{id}')``), None when its route has no ``/servers``."""
    route = api_attrs.get(schema.ATTR_ROUTE)
    if not isinstance(route, str):
        return None
    at = route.rfind('/servers')
    if at < 0:
        return None
    return (
        str(api_attrs.get(schema.ATTR_METHOD)),
        route[at + len('/servers') :].rstrip('/'),
    )


def route_operation(api_attrs: dict) -> typing.Optional[str]:
    """The operation an HTTP request asked for, from its ``api.request``
    attrs (method, route, action), else None."""
    key = _server_route(api_attrs)
    if key is None:
        return None
    if key == _ACTION_ROUTE:
        return _ACTIONS.get(str(api_attrs.get(ATTR_ACTION)))
    return _ROUTES.get(key)


def _refused(api_attrs: dict, api_failed: bool) -> bool:
    status = api_attrs.get(schema.ATTR_STATUS)
    return api_failed or (isinstance(status, int) and status >= 400)


def _is_cold(api_attrs: dict, span_attrs: dict) -> bool:
    if (api_attrs.get(ATTR_ACTION) or '') == 'migrate':
        return True
    return ATTR_FLAVOR_ID in span_attrs and span_attrs[ATTR_FLAVOR_ID] is None


def operation_of(spans: dict) -> str:
    """The operation of a request from its spans (see module doc)."""
    api_attrs: dict = {}
    api_failed = False
    api_op = None
    api_start = None
    got = False
    down = None
    down_start = None
    for s in spans.values():
        ev = s[S_EV]
        if ev == schema.EV_API_REQUEST:
            api_attrs = s[S_ATTRS] or {}
            api_failed = spans_mod.failed(s)
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
        if op is not None and (down_start is None or s[S_START] < down_start):
            # the operation of the first downstream step
            down, down_start = op, s[S_START]
    if api_op == 'api.compute.resize':
        for s in spans.values():
            if s[S_EV] == 'api.compute.resize':
                return (
                    'cold_migrate'
                    if _is_cold(api_attrs, s[S_ATTRS] or {})
                    else 'resize'
                )
    if api_op is not None:
        return api_op
    if down is None and _refused(api_attrs, api_failed):
        # refused before the compute API's method of the operation
        op = route_operation(api_attrs)
        if op is not None:
            return op
    if got:
        if _server_route(api_attrs) == ('GET', '/{id}'):
            return 'show'
        # a server action that only loaded the instance (a console...),
        # a GET of one of the server's sub-resources (an instance
        # action, its migrations, its volume attachments...)
        return OTHER
    if down is not None:
        return down
    return OTHER


# -- final states -----------------------------------------------------------


def _api_error(spans: dict) -> typing.Optional[typing.Any]:
    """The failed API span (HTTP status >= 400, or an error), if any."""
    found = None
    for sid, s in spans.items():
        ev = s[S_EV]
        if ev == schema.EV_API_REQUEST:
            status = (s[S_ATTRS] or {}).get(schema.ATTR_STATUS)
            if (isinstance(status, int) and status >= 400) or spans_mod.failed(
                s
            ):
                found = found or sid
        elif ev.startswith('api.compute.') and spans_mod.failed(s):
            return sid
    return found


def _api_cause(tree: spans_mod.Tree, sid) -> dict:
    deepest = tree.deepest_error(sid)
    if deepest is not None:
        return spans_mod.cause(tree, deepest)
    s = tree.spans[sid]
    status = (s[S_ATTRS] or {}).get(schema.ATTR_STATUS)
    return {
        'cls': 'HTTP %s' % status,
        'msg': '',
        'ev': s[S_EV],
        'host': s[S_HOST],
    }


def _downstream(s) -> bool:
    return s[S_SVC] != 'api' and not s[S_EV].startswith('api.')


def final_states(op: str, tree: spans_mod.Tree, ended: bool = False) -> list:
    """One row per instance of a request of operation ``op`` (boot:
    ``classify.final_states``; ``other``: state ``other``).

    ``ended``: as if the ``api.request`` span of an operation the API
    answers alone (``Spec.api_only``: list, show) had ended when the
    compute API call it made answered and nothing else is open (its
    end lost, not its request hung: ``damage.mark`` decides)."""
    spec = SPECS.get(op)
    if spec is None:
        return [
            {
                'inst': None,
                'state': classify.OTHER,
                'cause': None,
                'stopped': None,
                'attempts': 0,
            }
        ]
    if spec.reschedule is not None:
        # a boot: builds rescheduled to other hosts (``classify``)
        return classify.final_states(tree)
    spans = tree.spans
    if spec.api_only:
        return [_api_only_state(tree, ended)]
    insts = []
    for s in spans.values():
        for inst in s[S_INST] or ():
            if inst not in insts:
                insts.append(inst)
    return [_instance_state(spec, tree, inst, op) for inst in insts or [None]]


def _api_only_state(tree: spans_mod.Tree, ended: bool = False) -> dict:
    spans = tree.spans
    row: dict[str, typing.Any] = {
        'inst': None,
        'state': INCOMPLETE,
        'cause': None,
        'stopped': None,
        'attempts': 0,
    }
    err = _api_error(spans)
    api = [s for s in spans.values() if s[S_EV] == schema.EV_API_REQUEST]
    if err is not None:
        row['state'] = API_FAILURE
        row['cause'] = _api_cause(tree, err)
        return row
    if not api or any(s[S_DUR] is None for s in api):
        if not (ended and api and _answered(spans)):
            row['stopped'] = classify.stopped_at(tree)
            return row
    for sid, s in spans.items():
        if s[S_EV] == 'api.cells.query' and spans_mod.failed(s):
            row['state'] = PARTIAL
            row['cause'] = spans_mod.cause(tree, sid)
            return row
    row['state'] = SUCCESS
    return row


def _answered(spans: dict) -> bool:
    """Did the compute API call of a request answer, and nothing but
    its ``api.request`` span stay open?"""
    answered = False
    for s in spans.values():
        ev = s[S_EV]
        if ev == schema.EV_API_REQUEST:
            continue
        if s[S_DUR] is None:
            return False
        if ev.startswith('api.compute.'):
            answered = True
    return answered


def _step_state(spec: Spec, tree: spans_mod.Tree, sid) -> typing.Optional[str]:
    """The state an error in span ``sid`` means: its own, else that of
    the nearest enclosing span that has one (a conductor's dispatch of
    one of ``spec.conductor``'s methods has that method's)."""
    spans = tree.spans
    cur = sid
    seen = set()
    while cur is not None and cur in spans and cur not in seen:
        seen.add(cur)
        state = spec.fail.get(spans[cur][S_EV])
        if state is None:
            state = _conductor_state(spec, spans[cur])
        if state is not None:
            return state
        cur = spans[cur][S_PARENT]
    return None


def _conductor_state(spec: Spec, s) -> typing.Optional[str]:
    """The state of ``spec.conductor`` for span ``s`` when it is the
    conductor's dispatch of one of those methods, else None."""
    if not spec.conductor or s[S_EV] != EV_DISPATCH or s[S_SVC] != 'conductor':
        return None
    method = (s[S_ATTRS] or {}).get(schema.ATTR_METHOD)
    return spec.conductor.get(method) if isinstance(method, str) else None


def _role_state(s, state: str) -> str:
    """A compute span's recorded role overrides the step's default."""
    role = (s[S_ATTRS] or {}).get(ATTR_ROLE)
    if state in (FAILED_ON_SOURCE, FAILED_ON_DEST):
        if role == 'source':
            return FAILED_ON_SOURCE
        if role in ('dest', 'destination'):
            return FAILED_ON_DEST
    return state


def _instance_state(spec: Spec, tree: spans_mod.Tree, inst, op: str) -> dict:
    spans = tree.spans
    mine = [sid for sid, s in spans.items() if spans_mod.belongs(s, inst)]
    row: dict[str, typing.Any] = {
        'inst': inst,
        'state': INCOMPLETE,
        'cause': None,
        'stopped': None,
        'attempts': 0,
    }
    attempts = 0
    done_ok = None
    rollback = None
    failures = []
    downstream = False
    # the conductor still at work, or failed, after the last compute
    # step (``Spec.conductor``)
    unfinished = False
    for sid in mine:
        s = spans[sid]
        ev = s[S_EV]
        if ev in spec.attempts:
            attempts += 1
        if _downstream(s):
            downstream = True
        if _conductor_state(spec, s) is not None and (
            s[S_DUR] is None or spans_mod.failed(s)
        ):
            unfinished = True
        if (
            ev in spec.done
            and s[S_DUR] is not None
            and not spans_mod.failed(s)
        ):
            if done_ok is None or s[S_START] > spans[done_ok][S_START]:
                done_ok = sid
        if ev == spec.rollback:
            rollback = sid
    for sid in tree.origins():
        if (
            sid in spans
            and spans_mod.belongs(spans[sid], inst)
            and not spans[sid][S_EV].startswith('api.')
        ):
            failures.append(sid)
    row['attempts'] = attempts
    if done_ok is not None and not unfinished:
        row['state'] = SUCCESS if attempts <= 1 else RESCHEDULED_SUCCESS
        return row
    if rollback is not None:
        row['state'] = ROLLED_BACK
        if failures:
            first = min(failures, key=lambda x: spans[x][S_START])
            row['cause'] = spans_mod.cause(tree, first)
        if spans[rollback][S_DUR] is None:
            row['state'] = INCOMPLETE
            row['stopped'] = classify.stopped_at(tree, mine)
        return row
    if failures:
        # the failure that ended it: the last one raised
        last = max(
            failures, key=lambda x: spans[x][S_START] + (spans[x][S_DUR] or 0)
        )
        state = _step_state(spec, tree, last)
        if state is not None:
            row['state'] = _role_state(spans[last], state)
            row['cause'] = spans_mod.cause(tree, last)
            return row
    if not downstream:
        err = _api_error(spans)
        if err is not None:
            row['state'] = API_FAILURE
            row['cause'] = _api_cause(tree, err)
            return row
        if spec.api_may_finish and _api_done(spans) and not _sent_on(spans):
            # nova did it in the API (an instance without a host)
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
    spec = SPECS.get(op)
    if spec is not None and spec.reschedule is not None:
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
    rows = final_states(op, spans_mod.Tree(spans))
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
        rows.append(
            {
                'cell': attrs.get(ATTR_CELL) or '?',
                'db': attrs.get(schema.ATTR_DB),
                'start_us': s[S_START] - req_start,
                'dur_us': dur,
                'st': s[S_ST] or 'open',
            }
        )
        groups.setdefault(s[S_PARENT], []).append(
            (s[S_START], s[S_START] + (dur or 0))
        )
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
