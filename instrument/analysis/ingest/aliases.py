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
"""The request ids of one API request, rejoined (pass 1).

The paste filter begins the ``api.request`` span with the request id of
the WSGI environ and ends it with the id of nova's context, which the
compute API's spans (``api.compute.*``, ``api.cells.*``) carry; behind
an auth middleware that makes a context of its own (nova's ``noauth2``)
they differ: the start (``B``, written when the request is still
running at a drain), the SQL statements and the calls to other
services carry the first id, the rest the second.  ``Rejoin`` finds
the pairs, so that pass 2 reads the records of the first id as the
second's (``aliases``), from either of two facts:

* the span's end (``X``) names another id than its start (``B``): the
  pair, whichever of the two is read first (the order of a process's
  records does not matter);
* without its end (a lost record), an ``api.*`` span under the
  ``api.request`` span names another id than its start: the request
  keeps its identity when its end is lost.  The end, when read, wins.

Memory is bounded: the starts still open, the ends read without their
start and the children read before their parent's start are kept up to
``MAX_KEPT`` each, the oldest forgotten first (a start read more than
that many API requests away from its end, in its process's order, is
not paired).
"""

import collections
import typing

# ends without their start, children before their parent's start, and
# starts without their end, kept at most (each)
MAX_KEPT = 1 << 16


class _Fifo(collections.OrderedDict):
    """A dict that forgets its oldest entries beyond ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: typing.Any, value: typing.Any) -> None:
        self[key] = value
        if len(self) > self.limit:
            self.popitem(last=False)


class Rejoin:
    """The request ids to rejoin: ``begin`` and ``end`` of every
    ``api.request`` span, ``child`` of every ``api.*`` span under one;
    then ``aliases``."""

    def __init__(self, limit: int = MAX_KEPT) -> None:
        # span id: the request id of its start (end not read yet)
        self.begun = _Fifo(limit)
        # span id: the request id of its end (start not read yet)
        self.ended = _Fifo(limit)
        # span id of an api.request: the request id of an api.* child
        # read before the span's start
        self.early = _Fifo(limit)
        # the id a span began with -> the id it belongs to
        self.pairs: dict = {}

    def begin(self, sid: str, req: str) -> None:
        """The start (``B``) of an ``api.request`` span."""
        end = self.ended.pop(sid, None)
        if end is not None:
            self._pair(req, end, True)
            return
        kid = self.early.pop(sid, None)
        if kid is not None:
            self._pair(req, kid, False)
        self.begun.put(sid, req)

    def end(self, sid: str, req: str) -> None:
        """The end (``X``) of an ``api.request`` span."""
        began = self.begun.pop(sid, None)
        if began is None:
            self.ended.put(sid, req)
            return
        self._pair(began, req, True)

    def child(self, parent: str, req: str) -> None:
        """An ``api.*`` span (other than ``api.request``) whose parent
        is span ``parent``."""
        began = self.begun.get(parent)
        if began is not None:
            self._pair(began, req, False)
        elif parent not in self.early:
            self.early.put(parent, req)

    def _pair(self, began: str, req: str, from_end: bool) -> None:
        # (what the end names wins over what a child names)
        if from_end:
            if began != req:
                self.pairs[began] = req
            else:
                self.pairs.pop(began, None)
        elif began != req:
            self.pairs.setdefault(began, req)

    def clear(self) -> None:
        """Forget what waits for its other half (the input is read)."""
        self.begun.clear()
        self.ended.clear()
        self.early.clear()

    def aliases(self) -> dict:
        """``{request id: request id}``: the ids under which pass 2
        reads records of another request's id (chains resolved)."""
        pairs = self.pairs
        out = {}
        for a, b in pairs.items():
            seen = {a}
            while b in pairs and b not in seen:
                seen.add(b)
                b = pairs[b]
            if a != b:
                out[a] = b
        return out
