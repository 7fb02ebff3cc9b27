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
"""``causality``: the corrected clocks checked against the requests.

Every cross-host hop of a finished request (a span whose parent ran on
another host) is checked: the child must not start before its parent,
nor, under a synchronous call (``rpc.call``) that got its reply, end
after it.  The section counts the hops checked, those that still
violate causality after the clock correction, and keeps a few
examples; the text form shows it under the clock offsets
(``clocks``).
"""

import typing

from instrument import schema
from instrument.analysis.model import clocks
from instrument.analysis.model import spans as spans_mod
from instrument.analysis.sections import base

SYNC = schema.SYNC_EVENTS
EXAMPLES = 10
# Positions of a span entry (``spans``).
S_EV = spans_mod.S_EV
S_HOST = spans_mod.S_HOST
S_START = spans_mod.S_START
S_DUR = spans_mod.S_DUR
S_PARENT = spans_mod.S_PARENT
S_ST = spans_mod.S_ST
S_ERR = spans_mod.S_ERR


def _replied(span: typing.Any) -> bool:
    """Whether a call span got its reply (a call that timed out may end
    before its dispatch does: no violation then)."""
    err = span[S_ERR]
    return clocks.reply_received(
        span[S_ST], err.get('cls') if err.__class__ is dict else None
    )


def _int(value: typing.Any) -> int:
    return value if value.__class__ is int else 0


class Causality(base.Section):
    """``report['causality']``: ``{checked, violations, examples}``."""

    key = 'causality'

    def __init__(self, ctx: base.Context) -> None:
        self.table: dict[str, typing.Any] = {
            'checked': 0,
            'violations': 0,
            'examples': [],
        }

    def finished(self, done: typing.Any) -> None:
        """Check the request's cross-host hops against the corrected
        clocks."""
        r = done.request
        spans = r.spans
        c = self.table
        for s in spans.values():
            parent = s[S_PARENT]
            if parent is None:
                continue
            p = spans.get(parent)
            if p is None or p[S_HOST] == s[S_HOST]:
                continue
            c['checked'] += 1
            bad = s[S_START] < p[S_START]
            if (
                not bad
                and p[S_EV] in SYNC
                and p[S_DUR] is not None
                and s[S_DUR] is not None
                and _replied(p)
            ):
                bad = s[S_START] + s[S_DUR] > p[S_START] + p[S_DUR]
            if bad:
                c['violations'] += 1
                # the first by (child's start, request, ...), whatever
                # the order requests finished in (the same at any -j)
                base.keep_best(
                    c['examples'],
                    (
                        _int(s[S_START]),
                        str(r.req),
                        str(p[S_EV]),
                        str(p[S_HOST]),
                        str(s[S_EV]),
                        str(s[S_HOST]),
                        (r.req, p[S_EV], p[S_HOST], s[S_EV], s[S_HOST]),
                    ),
                    EXAMPLES,
                )

    def merge(self, other: 'Causality') -> None:
        mine = self.table
        mine['checked'] += other.table['checked']
        mine['violations'] += other.table['violations']
        base.merge_best(mine['examples'], other.table['examples'], EXAMPLES)

    def report(self, view: base.View) -> dict:
        out = dict(self.table)
        out['examples'] = [
            {
                'req': req,
                'parent': parent,
                'parent_host': parent_host,
                'child': child,
                'child_host': child_host,
            }
            for req, parent, parent_host, child, child_host in (
                example[-1] for example in self.table['examples']
            )
        ]
        return out
