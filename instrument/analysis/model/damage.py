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
"""Which requests the damage to the input can touch, and how they are
marked.

A record lost by a process (a ``seq`` gap, an invalid line, a sink's or
the buffer's drops, the unreadable end of a file) was written in a
window of time known from the records around it
(``ingest.losses.FileLoss.windows``).  It belonged to a request that
was doing something in that process then: ``mark`` names the requests
whose spans in a process that lost records overlap one of its windows
(``RequestSummary.procs``: from when to when each was in each process),
and those with a span there whose end, or whose parent, was not read
and began before a loss there (its end or its parent may be the record
lost); a request of SQL statements and no span (its process not known)
when its time overlaps any window.  A request none of whose records in
that process was read cannot be named: a loss that took every record a
request had there leaves nothing to mark.

A request is also marked when events of its were read after it was
finalised (``late``: the order of its process's records beyond the
horizon), and when the time of one of its records had to be estimated
(``repaired``: its ``ts`` missing, and its span's start not read).

A marked request (``summary.loss``: why) keeps its operation and its
state, and counts in the states; its times are left out of every
timing figure (as a request whose span's end was lost), and every
section says how many of its requests are marked.  One more thing
changes: an operation the API answers alone (a show, a list) whose
``api.request`` end was not read, but whose compute API call answered,
ended as the API answered when its end may be one of the records lost
(``summary.if_lost``): its end was lost, the request did not hang.
"""

import bisect
import typing

# why a request is marked (``summary.loss``)
LOST = 'lost'
LATE = 'late'
REPAIRED = 'repaired'


def mark(
    summaries: typing.Iterable,
    windows: dict,
    hosts: dict,
    repaired: typing.Collection = (),
    hung_us: int = 600_000_000,
) -> list:
    """Mark the requests the damage can touch (module doc); return
    them.

    ``windows``: ``{process key (host, pid, start): [(from, to)]}``
    (``FileLoss.windows``), ``hosts``: the hosts each such process
    wrote records for, ``repaired``: request ids of repaired records;
    ``hung_us``: how long after a span began its end may still come (a
    loss later than that is not where its end went)."""
    # (host, pid): [(window starts, window ends)]
    where: dict = {}
    for key, spans in windows.items():
        if not spans:
            continue
        starts = [a for a, _b in spans]
        ends = [b for _a, b in spans]
        for host in hosts.get(key) or (key[0],):
            where.setdefault((host, key[1]), []).append((starts, ends))
    out = []
    for s in summaries:
        reasons = []
        if getattr(s, 'late', 0):
            reasons.append(LATE)
        if repaired and s.req in repaired:
            reasons.append(REPAIRED)
        lost = open_lost = False
        procs = getattr(s, 'procs', ())
        if where and not procs:
            # (no span: SQL statements of no span read, of any process)
            lost = any(
                _overlaps(starts, ends, s.start, s.end)
                for found in where.values()
                for starts, ends in found
            )
        elif where:
            names = s.hosts
            for i in range(0, len(procs), 5):
                found = where.get((names[procs[i]], procs[i + 1]))
                if not found:
                    continue
                lo, hi, loose = procs[i + 2], procs[i + 3], procs[i + 4]
                for starts, ends in found:
                    if _overlaps(starts, ends, lo, hi):
                        lost = True
                    if loose >= 0:
                        # a loss after it began, within the horizon
                        j = bisect.bisect_right(starts, loose + hung_us) - 1
                        if j >= 0 and ends[j] >= loose:
                            lost = open_lost = True
        if lost:
            reasons.append(LOST)
        if open_lost and getattr(s, 'if_lost', None) is not None:
            s.state, s.instances, s.lost_ends = s.if_lost
            s.if_lost = None
        if reasons:
            s.loss = reasons
            out.append(s)
    return out


def _overlaps(starts: list, ends: list, lo: int, hi: int) -> bool:
    """Does one of the (sorted, disjoint) windows overlap lo .. hi?"""
    j = bisect.bisect_right(starts, hi) - 1
    return j >= 0 and ends[j] >= lo


def marked(s: typing.Any) -> bool:
    """Is request summary ``s`` left out of the times: marked by
    ``mark``, or a span's end lost?"""
    return bool(getattr(s, 'lost_ends', 0) or getattr(s, 'loss', None))
