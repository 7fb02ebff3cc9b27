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
"""Final states of boots, their causes, and the failure table.

The rules are those of ``doc/source/events.rst`` ("Final states of a
boot"), applied per instance of a request; the events they read are
the catalogue's boot (``instrument.catalogue``: its steps, the failure
each one means, and its reschedule extension: the build attempts and
their outcome, the burial in cell0, the reschedule given up).
``spans.Tree`` is the span tree of one finished request (spans of
every host, linked through ``parent``); the functions here read it and
never change it.

A failure's *origin* is an error span none of whose children (on any
host) failed: an exception that travels up through nested spans and
RPC hops is counted once, where it was raised.  Messages are
normalised (uuids, request ids, addresses, host names, hex ids and
numbers replaced by placeholders) so that one kind of failure is one
row of the table.
"""

import re
import typing

from instrument import _native
from instrument import catalogue
from instrument import schema
from instrument.analysis.model import spans as spans_mod

# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_HOST = spans_mod.S_HOST
S_SVC = spans_mod.S_SVC
S_START = spans_mod.S_START
S_DUR = spans_mod.S_DUR
S_ST = spans_mod.S_ST
S_ERR = spans_mod.S_ERR
S_ATTRS = spans_mod.S_ATTRS
S_INST = spans_mod.S_INST

SUCCESS = catalogue.SUCCESS
RESCHEDULED_SUCCESS = catalogue.RESCHEDULED_SUCCESS
COMPUTE_FAILURE = catalogue.COMPUTE_FAILURE
SCHEDULING_FAILURE = catalogue.SCHEDULING_FAILURE
API_FAILURE = catalogue.API_FAILURE
INCOMPLETE = catalogue.INCOMPLETE
OTHER = catalogue.OTHER
BOOT = catalogue.OPERATION_OF[schema.OP_BOOT]
STATES = BOOT.states
GOOD_STATES = (SUCCESS, RESCHEDULED_SUCCESS)
# worst first: the state of a request whose instances differ
_SEVERITY = (
    INCOMPLETE,
    COMPUTE_FAILURE,
    SCHEDULING_FAILURE,
    API_FAILURE,
    RESCHEDULED_SUCCESS,
    SUCCESS,
)

_RESCHEDULE = typing.cast(catalogue.Reschedule, BOOT.reschedule)
# every event of a boot's rules
BOOT_EVENTS = BOOT.events()
# a build attempt on one host, and the attribute that says how it ended
EV_BUILD = _RESCHEDULE.build
ATTR_OUTCOME = _RESCHEDULE.outcome_attr
OUTCOME_ACTIVE = _RESCHEDULE.active
OUTCOME_FAILED = _RESCHEDULE.failed
# the conductor buried the instance in cell0
EV_BURY = _RESCHEDULE.buried
# the conductor gave up rescheduling a build (MaxRetriesExceeded,
# AllocationUpdateFailed): the instance is set to ERROR
EV_RESCHEDULE_FAILED = _RESCHEDULE.given_up
# the scheduling steps whose error is a scheduling failure
SCHEDULE_EVENTS = frozenset(
    ev
    for ev, state in BOOT.fail.items()
    if state == SCHEDULING_FAILURE
    and ev not in (EV_BURY, EV_RESCHEDULE_FAILED)
)
# the compute API method that starts a boot
EV_CREATE = BOOT.api[0]

_UUID = re.compile(
    r'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
    r'[0-9a-fA-F]{4}-[0-9a-fA-F]{12}'
)
_IP4 = re.compile(r'(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?![\w.])')
_IP6 = re.compile(
    r'(?<![\w:])(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}'
    r'(?![\w:])'
)
_HEX = re.compile(
    r'(?<![\w<])(?:0x)?(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}'
    r'(?![\w>])'
)
_NUM = re.compile(r'(?<![\w<.])[-+]?\d+(?:\.\d+)?(?![\w>])')


class Normaliser:
    """Replaces the variable parts of error messages."""

    def __init__(self, hosts: typing.Iterable[str] = ()) -> None:
        self.hosts = set()
        self._host_re: typing.Optional[typing.Pattern[str]] = None
        self.add_hosts(hosts)

    def add_hosts(self, hosts: typing.Iterable[str]) -> None:
        new = {h for h in hosts if h and len(h) > 1} - self.hosts
        if not new:
            return
        self.hosts |= new
        names = sorted(self.hosts, key=len, reverse=True)
        self._host_re = re.compile(
            r'(?<![\w.-])(?:%s)(?![\w-])' % '|'.join(map(re.escape, names))
        )

    def __call__(self, msg: typing.Optional[str]) -> str:
        if not msg:
            return ''
        msg = _UUID.sub('<uuid>', msg)
        msg = _IP4.sub('<ip>', msg)
        msg = _IP6.sub('<ip>', msg)
        if self._host_re is not None:
            msg = self._host_re.sub('<host>', msg)
        msg = _HEX.sub('<hex>', msg)
        return _NUM.sub('<n>', msg)


def stopped_at(
    tree: spans_mod.Tree, sids: typing.Optional[typing.Iterable[int]] = None
) -> typing.Optional[dict]:
    """Where a request without an outcome stopped: its deepest open span,
    else the span that ended last."""
    sids = tree.spans if sids is None else sids
    best = None
    for sid in sids:
        s = tree.spans[sid]
        if s[S_DUR] is None:
            key = (1, tree.depth(sid), s[S_START])
        else:
            key = (0, s[S_START] + s[S_DUR], tree.depth(sid))
        if best is None or key > best[0]:
            best = (key, sid)
    if best is None:
        return None
    s = tree.spans[best[1]]
    return {'ev': s[S_EV], 'host': s[S_HOST], 'open': s[S_DUR] is None}


def is_boot(spans: dict) -> bool:
    for s in spans.values():
        if s[S_EV] in BOOT_EVENTS:
            return True
    return False


def final_states(tree: spans_mod.Tree) -> list:
    """``[{inst, state, cause, stopped, attempts}]``, one per instance
    (``inst`` None when the request created none)."""
    spans = tree.spans
    insts = []
    seen = set()
    api_error = None
    conductor_work = False
    for sid, s in spans.items():
        span_insts = s[S_INST]
        if span_insts:
            for inst in span_insts:
                if inst not in seen:
                    seen.add(inst)
                    insts.append(inst)
        ev = s[S_EV]
        if ev == 'api.request':
            status = (s[S_ATTRS] or {}).get(schema.ATTR_STATUS)
            if isinstance(status, int) and status >= 400 or s[S_ST] == 'error':
                api_error = api_error or sid
        elif ev == EV_CREATE and (s[S_ST] == 'error' or s[S_ERR]):
            api_error = sid
        elif s[S_SVC] == 'conductor' or ev.startswith('conductor.'):
            conductor_work = True
    out = []
    for inst in insts or [None]:
        out.append(_instance_state(tree, inst, api_error, conductor_work))
    return out


# ``_outcomes`` in C (instrument/_native/breakdown.c), or None
_native_breakdown = _native.load('_breakdown')
_native_outcomes = (
    None if _native_breakdown is None else _native_breakdown.outcomes
)


def _outcomes(spans: dict, inst: typing.Any) -> tuple:
    """``(outcomes, builds)``: the spans of instance ``inst`` (None:
    every span) that decide its state, ``(end, start, what, span id)``
    with ``what`` one of ``build``, ``sched`` (a failed scheduling
    step), ``bury``, and how many builds it had (the pure-Python twin of
    ``instrument._native._breakdown.outcomes``)."""
    outcomes = []
    builds = 0
    for sid, s in spans.items():
        if inst is not None and s[S_INST] and inst not in s[S_INST]:
            continue  # not spans_mod.belongs(s, inst)
        ev = s[S_EV]
        if ev == EV_BUILD:
            if inst is not None and not s[S_INST]:
                continue
            builds += 1
            end = spans_mod.end(s)
            outcomes.append(
                (
                    end if end is not None else float('inf'),
                    s[S_START],
                    'build',
                    sid,
                )
            )
        elif ev in SCHEDULE_EVENTS and (s[S_ST] == 'error' or s[S_ERR]):
            outcomes.append(
                (spans_mod.end(s) or s[S_START], s[S_START], 'sched', sid)
            )
        elif ev == EV_BURY or ev == EV_RESCHEDULE_FAILED:
            outcomes.append(
                (spans_mod.end(s) or s[S_START], s[S_START], 'bury', sid)
            )
    return outcomes, builds


def _instance_state(
    tree: spans_mod.Tree, inst, api_error, conductor_work
) -> dict:
    spans = tree.spans
    found = None
    if _native_outcomes is not None:
        try:
            found = _native_outcomes(
                spans,
                inst,
                EV_BUILD,
                SCHEDULE_EVENTS,
                EV_BURY,
                EV_RESCHEDULE_FAILED,
            )
        except Exception:  # noqa: BLE001 - the twin says what Python does
            found = None
    outcomes, builds = found if found is not None else _outcomes(spans, inst)
    row = {
        'inst': inst,
        'state': INCOMPLETE,
        'cause': None,
        'stopped': None,
        'attempts': builds,
    }
    if not outcomes:
        if api_error is not None and not conductor_work:
            row['state'] = API_FAILURE
            deepest = tree.deepest_error(api_error)
            if deepest is not None:
                row['cause'] = spans_mod.cause(tree, deepest)
            else:
                status = (spans[api_error][S_ATTRS] or {}).get(
                    schema.ATTR_STATUS
                )
                row['cause'] = {
                    'cls': 'HTTP %s' % status,
                    'msg': '',
                    'ev': spans[api_error][S_EV],
                    'host': spans[api_error][S_HOST],
                }
            return row
        row['stopped'] = stopped_at(
            tree,
            [sid for sid, s in spans.items() if spans_mod.belongs(s, inst)],
        )
        return row
    outcomes.sort(key=lambda o: (o[0], o[1]))
    _end_t, _start, what, sid = _last_outcome(spans, outcomes)
    s = spans[sid]
    if what == 'build':
        outcome = (s[S_ATTRS] or {}).get(ATTR_OUTCOME)
        if s[S_DUR] is None:
            row['stopped'] = stopped_at(tree, list(tree.subtree(sid)))
        elif outcome == OUTCOME_ACTIVE:
            row['state'] = SUCCESS if builds == 1 else RESCHEDULED_SUCCESS
        elif outcome == OUTCOME_FAILED:
            row['state'] = COMPUTE_FAILURE
            deepest = tree.deepest_error(sid)
            if deepest is not None:
                row['cause'] = spans_mod.cause(tree, deepest)
        else:
            # rescheduled (or no outcome) and nothing after it
            row['stopped'] = stopped_at(
                tree,
                [x for x, sp in spans.items() if spans_mod.belongs(sp, inst)],
            )
        return row
    row['state'] = SCHEDULING_FAILURE
    failing = [o[3] for o in outcomes if o[2] == 'sched']
    if failing:
        # the latest failed scheduling step; its deepest error
        deepest = tree.deepest_error(failing[-1])
        row['cause'] = spans_mod.cause(tree, deepest or failing[-1])
    else:
        attrs = s[S_ATTRS] or {}
        given_up = s[S_EV] == EV_RESCHEDULE_FAILED
        reason = attrs.get(schema.ATTR_REASON) or (
            'reschedule failed' if given_up else 'buried in cell0'
        )
        msg = attrs.get(schema.ATTR_MSG) if given_up else None
        row['cause'] = {
            'cls': reason,
            'msg': msg or '',
            'ev': s[S_EV],
            'host': s[S_HOST],
        }
    return row


def _last_outcome(spans: dict, outcomes: list) -> tuple:
    """The outcome that decides an instance's state: the last one to
    end, but a build that rescheduled does not outlive the conductor's
    giving up on that reschedule (``conductor.reschedule_failed``),
    which can end before the build's span does (the build casts the
    reschedule and then cleans up)."""
    last = outcomes[-1]
    if last[2] != 'build' or (spans[last[3]][S_ATTRS] or {}).get(
        ATTR_OUTCOME
    ) in (OUTCOME_ACTIVE, OUTCOME_FAILED):
        return last
    for o in reversed(outcomes[:-1]):
        if (
            o[2] == 'bury'
            and o[1] >= last[1]
            and spans[o[3]][S_EV] == EV_RESCHEDULE_FAILED
        ):
            return o
    return last


def request_state(rows: list) -> str:
    """One state for a request: the worst of its instances'."""
    states = {r['state'] for r in rows}
    for state in _SEVERITY:
        if state in states:
            return state
    return INCOMPLETE
