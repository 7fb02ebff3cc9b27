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
boot"), applied per instance of a request.  ``Tree`` is the span tree of
one finished request (spans of every host, linked through ``parent``);
the functions here read it and never change it.

A failure's *origin* is an error span none of whose children (on any
host) failed: an exception that travels up through nested spans and
RPC hops is counted once, where it was raised.  Messages are
normalised (uuids, request ids, addresses, host names, hex ids and
numbers replaced by placeholders) so that one kind of failure is one
row of the table.
"""

import re
import typing

from instrument import schema

# Indices of a span entry (see requests.py).
S_EV, S_HOST, S_SVC, S_PID, S_START, S_DUR, S_PARENT, S_ST, S_ERR, \
    S_ATTRS, S_INST = range(11)

SUCCESS = 'success'
RESCHEDULED_SUCCESS = 'rescheduled_success'
COMPUTE_FAILURE = 'compute_failure'
SCHEDULING_FAILURE = 'scheduling_failure'
API_FAILURE = 'api_failure'
INCOMPLETE = 'incomplete'
OTHER = 'other'
STATES = (SUCCESS, RESCHEDULED_SUCCESS, COMPUTE_FAILURE, SCHEDULING_FAILURE,
          API_FAILURE, INCOMPLETE)
GOOD_STATES = (SUCCESS, RESCHEDULED_SUCCESS)
# worst first: the state of a request whose instances differ
_SEVERITY = (INCOMPLETE, COMPUTE_FAILURE, SCHEDULING_FAILURE, API_FAILURE,
             RESCHEDULED_SUCCESS, SUCCESS)

BOOT_EVENTS = frozenset((
    'api.compute.create', 'conductor.schedule_and_build_instances',
    'conductor.build_instances', 'conductor.schedule',
    'conductor.bury_in_cell0', 'scheduler.select_destinations',
    'compute.build_and_run_instance', 'compute.build'))
SCHEDULE_EVENTS = frozenset(('conductor.schedule',
                             'scheduler.select_destinations'))

_UUID = re.compile(r'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
                   r'[0-9a-fA-F]{4}-[0-9a-fA-F]{12}')
_IP4 = re.compile(r'(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?![\w.])')
_IP6 = re.compile(r'(?<![\w:])(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}'
                  r'(?![\w:])')
_HEX = re.compile(r'(?<![\w<])(?:0x)?(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}'
                  r'(?![\w>])')
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
            r'(?<![\w.-])(?:%s)(?![\w-])' % '|'.join(map(re.escape, names)))

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


class Tree:
    """The spans of one request, linked parent to children."""

    def __init__(self, spans: dict, sql_errors: typing.Iterable = ()) -> None:
        self.spans = spans
        self.children = children = {}
        self.roots = roots = []
        for sid, s in spans.items():
            parent = s[S_PARENT]
            if parent in spans:  # (None is never a span id)
                kids = children.get(parent)
                if kids is None:
                    children[parent] = [sid]
                else:
                    kids.append(sid)
            else:
                roots.append(sid)
        # parents of failed SQL statements
        self.sql_failed = {e[0] for e in sql_errors}
        self._depth = {}

    def depth(self, sid: int) -> int:
        d = self._depth.get(sid)
        if d is None:
            d = 0
            cur = self.spans[sid][S_PARENT]
            seen = {sid}
            while cur is not None and cur in self.spans and cur not in seen:
                seen.add(cur)
                d += 1
                cur = self.spans[cur][S_PARENT]
            self._depth[sid] = d
        return d

    def subtree(self, sid: int) -> typing.Iterator[int]:
        stack = [sid]
        seen = set()
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            yield cur
            stack.extend(self.children.get(cur, ()))

    def deepest_error(self, sid: int) -> typing.Optional[int]:
        """The error span deepest under ``sid`` (``sid`` included)."""
        best = None
        for cur in self.subtree(sid):
            s = self.spans[cur]
            if s[S_ERR] is None and s[S_ST] != 'error':
                continue
            key = (self.depth(cur), s[S_START])
            if best is None or key > best[0]:
                best = (key, cur)
        return None if best is None else best[1]

    def origins(self) -> typing.Iterator[int]:
        """Error spans none of whose children failed."""
        for sid, s in self.spans.items():
            if s[S_ST] != 'error' and s[S_ERR] is None:
                continue
            if sid in self.sql_failed:
                continue
            failed_child = False
            for child in self.children.get(sid, ()):
                c = self.spans[child]
                if c[S_ST] == 'error' or c[S_ERR] is not None:
                    failed_child = True
                    break
            if not failed_child:
                yield sid


def _end(s):
    return None if s[S_DUR] is None else s[S_START] + s[S_DUR]


def _cause(tree: Tree, sid) -> dict:
    s = tree.spans[sid]
    err = s[S_ERR] or {}
    return {'cls': err.get('cls') or 'error', 'msg': err.get('msg') or '',
            'ev': s[S_EV], 'host': s[S_HOST]}


def stopped_at(tree: Tree, sids: typing.Optional[typing.Iterable[int]] = None
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
    return {'ev': s[S_EV], 'host': s[S_HOST],
            'open': s[S_DUR] is None}


def is_boot(spans: dict) -> bool:
    for s in spans.values():
        if s[S_EV] in BOOT_EVENTS:
            return True
    return False


def final_states(tree: Tree) -> list:
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
            if isinstance(status, int) and status >= 400 or \
                    s[S_ST] == 'error':
                api_error = api_error or sid
        elif ev == 'api.compute.create' and (s[S_ST] == 'error'
                                             or s[S_ERR]):
            api_error = sid
        elif s[S_SVC] == 'conductor' or ev.startswith('conductor.'):
            conductor_work = True
    out = []
    for inst in insts or [None]:
        out.append(_instance_state(tree, inst, api_error, conductor_work))
    return out


def _belongs(s, inst) -> bool:
    return inst is None or not s[S_INST] or inst in s[S_INST]


def _instance_state(tree: Tree, inst, api_error, conductor_work) -> dict:
    spans = tree.spans
    outcomes = []
    builds = 0
    for sid, s in spans.items():
        if inst is not None and s[S_INST] and inst not in s[S_INST]:
            continue  # not _belongs(s, inst)
        ev = s[S_EV]
        if ev == 'compute.build':
            if inst is not None and not s[S_INST]:
                continue
            builds += 1
            end = _end(s)
            outcomes.append((end if end is not None else float('inf'),
                             s[S_START], 'build', sid))
        elif ev in SCHEDULE_EVENTS and (s[S_ST] == 'error' or s[S_ERR]):
            outcomes.append((_end(s) or s[S_START], s[S_START], 'sched',
                             sid))
        elif ev == 'conductor.bury_in_cell0':
            outcomes.append((_end(s) or s[S_START], s[S_START], 'bury',
                             sid))
    row = {'inst': inst, 'state': INCOMPLETE, 'cause': None,
           'stopped': None, 'attempts': builds}
    if not outcomes:
        if api_error is not None and not conductor_work:
            row['state'] = API_FAILURE
            deepest = tree.deepest_error(api_error)
            if deepest is not None:
                row['cause'] = _cause(tree, deepest)
            else:
                status = (spans[api_error][S_ATTRS] or {}).get(
                    schema.ATTR_STATUS)
                row['cause'] = {'cls': 'HTTP %s' % status, 'msg': '',
                                'ev': spans[api_error][S_EV],
                                'host': spans[api_error][S_HOST]}
            return row
        row['stopped'] = stopped_at(tree, [
            sid for sid, s in spans.items() if _belongs(s, inst)])
        return row
    outcomes.sort(key=lambda o: (o[0], o[1]))
    _end_t, _start, what, sid = outcomes[-1]
    s = spans[sid]
    if what == 'build':
        outcome = (s[S_ATTRS] or {}).get(schema.ATTR_OUTCOME)
        if s[S_DUR] is None:
            row['stopped'] = stopped_at(tree, list(tree.subtree(sid)))
        elif outcome == 'active':
            row['state'] = SUCCESS if builds == 1 else RESCHEDULED_SUCCESS
        elif outcome == 'failed':
            row['state'] = COMPUTE_FAILURE
            deepest = tree.deepest_error(sid)
            if deepest is not None:
                row['cause'] = _cause(tree, deepest)
        else:
            # rescheduled (or no outcome) and nothing after it
            row['stopped'] = stopped_at(tree, [
                x for x, sp in spans.items() if _belongs(sp, inst)])
        return row
    row['state'] = SCHEDULING_FAILURE
    failing = [o[3] for o in outcomes if o[2] == 'sched']
    if failing:
        # the latest failed scheduling step; its deepest error
        deepest = tree.deepest_error(failing[-1])
        row['cause'] = _cause(tree, deepest or failing[-1])
    else:
        reason = (s[S_ATTRS] or {}).get(schema.ATTR_REASON) or \
            'buried in cell0'
        row['cause'] = {'cls': reason, 'msg': '', 'ev': s[S_EV],
                        'host': s[S_HOST]}
    return row


def request_state(rows: list) -> str:
    """One state for a request: the worst of its instances'."""
    states = {r['state'] for r in rows}
    for state in _SEVERITY:
        if state in states:
            return state
    return INCOMPLETE
