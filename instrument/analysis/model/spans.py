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
"""The span entries of an open request, declared once, and their tree.

The request model (``requests.Assembler``) keeps each span of an open
request as a list (``OpenRequest.spans``: span id to entry), compact
and mutable (a ``B`` record opens it, its ``X`` ends it); every module
that reads spans indexes the entry by the positions below, named here
and nowhere else.  ``Tree`` links the spans of one finished request,
parent to children (on any host), and the helpers read it without
changing it.
"""

import typing

from instrument import _native
from instrument import schema

# Positions of a span entry: event, host, service, pid, start (corrected
# clock, us), duration (None: not ended), parent span id, status, error
# ({cls, msg} or None), attrs, instance uuids.
(
    S_EV,
    S_HOST,
    S_SVC,
    S_PID,
    S_START,
    S_DUR,
    S_PARENT,
    S_ST,
    S_ERR,
    S_ATTRS,
    S_INST,
) = range(11)
# The events of ``X`` records that are not spans of the tree: SQL
# statements (summed per enclosing span) and transactions.
NOT_SPANS = frozenset((schema.EV_SQL_QUERY, schema.EV_SQL_TXN))


class OpenRequest:
    """A request still open: its span entries (``spans``, by span id),
    its SQL time summed per enclosing span (``sql``), its SQL errors
    and instant events, and when it last did something (``last``)."""

    __slots__ = (
        'req',
        'spans',
        'sql',
        'sql_errors',
        'instants',
        'last',
        'open',
        'terminal',
        'greq',
        'events',
        'begun',
    )

    def __init__(self, req: str) -> None:
        self.req = req
        self.spans = {}
        # parent span: [us, count, svc, host, pid]
        self.sql = {}
        self.sql_errors = []
        self.instants = []
        self.last = 0
        self.open = 0
        self.terminal = False
        self.greq = None
        self.events = 0
        # ended spans whose start (``B``) was read, before or after
        # their end: another start is a duplicate (None: none yet)
        self.begun: typing.Optional[set] = None


def links(spans: dict) -> tuple:
    """``(children, roots)`` of ``spans``: span id to the ids of its
    children, in the order of ``spans``, and the spans whose parent is
    not one of them (the pure-Python twin of
    ``instrument._native._breakdown.tree``)."""
    children: dict = {}
    roots: list = []
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
    return children, roots


# ``links`` in C (instrument/_native/breakdown.c), or None
_native_breakdown = _native.load('_breakdown')
_native_links = None if _native_breakdown is None else _native_breakdown.tree


class Tree:
    """The spans of one request, linked parent to children."""

    def __init__(self, spans: dict, sql_errors: typing.Iterable = ()) -> None:
        self.spans = spans
        found = None
        if _native_links is not None:
            try:
                found = _native_links(spans)
            except Exception:  # noqa: BLE001 - the twin says what Python does
                found = None
        if found is None:
            found = links(spans)
        self.children, self.roots = found
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


def end(s: list) -> typing.Optional[int]:
    """When span entry ``s`` ended (None: it did not)."""
    return None if s[S_DUR] is None else s[S_START] + s[S_DUR]


def failed(s: list) -> bool:
    """Did span entry ``s`` end in an error?"""
    return s[S_ST] == 'error' or s[S_ERR] is not None


def belongs(s: list, inst: typing.Optional[str]) -> bool:
    """Is span entry ``s`` one of instance ``inst``'s (a span that
    names no instance belongs to each one)?"""
    return inst is None or not s[S_INST] or inst in s[S_INST]


def cause(tree: Tree, sid: typing.Any) -> dict:
    """The cause a final state names: the error of span ``sid``."""
    s = tree.spans[sid]
    err = s[S_ERR] or {}
    return {
        'cls': err.get('cls') or 'error',
        'msg': err.get('msg') or '',
        'ev': s[S_EV],
        'host': s[S_HOST],
    }
