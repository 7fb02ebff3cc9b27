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
"""Durations counted in bounded memory, with their percentiles.

``Durations`` keeps count, errors, total and maximum of a series of
durations (us), with the request of the longest, and of a lock the
longest hold; its percentiles are exact up to ``EXACT_MAX`` values,
then read from a histogram of 2^(1/8) buckets (within 5 %).  The top
waits (``sections.waits``) and the periodic tasks
(``sections.periodic``) count theirs with it.
"""

import math
import typing

EXACT_MAX = 10000
HIST_STEPS = 8  # buckets per doubling


def bucket(us: int) -> int:
    """The histogram bucket of ``us``."""
    return int(math.log2(us + 1) * HIST_STEPS)


def bucket_value(b: int) -> float:
    """The geometric middle of bucket ``b``."""
    return 2 ** ((b + 0.5) / HIST_STEPS) - 1


def tie_key(ts: typing.Any, req: typing.Any) -> tuple:
    """The key that picks one of equal durations: the earliest start,
    then the smallest request id (a total order, whatever the order the
    records arrived in)."""
    return (ts if ts.__class__ is int else 0, '' if req is None else str(req))


def held_key(holder: tuple) -> tuple:
    """``tie_key`` of a lock's holder ``(req, call, host, svc, ts)``
    (``sections.waits``), then the rest of it."""
    req, call, host, svc, ts = holder
    return tie_key(ts, req) + (str(call), str(host), str(svc))


class Durations:
    """A series of durations: ``add`` one, ``merge`` another series,
    read a ``percentile``.  ``held_*`` and ``holder`` are a lock's
    holds (``sections.waits`` sets them)."""

    __slots__ = (
        'count',
        'errors',
        'total',
        'max',
        'max_req',
        'max_at',
        'values',
        'hist',
        'held_max',
        'holder',
        'held_total',
    )

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.total = 0
        self.max = -1
        self.max_req = None
        # (start, request id) of the longest: of equal ones, the first
        # by it (the same at any -j, whatever the order of arrival)
        self.max_at: tuple = (0, '')
        self.values: list | None = []
        self.hist: dict = {}
        self.held_max = -1
        self.holder = None
        self.held_total = 0

    def add(self, dur: int, error: bool, req: typing.Any, ts: int = 0) -> None:
        """One duration of ``req`` (``error``: it ended in one) that
        started at ``ts``."""
        self.count += 1
        if error:
            self.errors += 1
        self.total += dur
        if dur >= self.max:
            at = tie_key(ts, req)
            if dur > self.max or at < self.max_at:
                self.max = dur
                self.max_req = req
                self.max_at = at
        if self.values is not None:
            if len(self.values) < EXACT_MAX:
                self.values.append(dur)
            else:
                self.values = None
        b = bucket(dur)
        self.hist[b] = self.hist.get(b, 0) + 1

    def merge(self, other: 'Durations') -> None:
        self.count += other.count
        self.errors += other.errors
        self.total += other.total
        if other.max > self.max or (
            other.max == self.max and other.max_at < self.max_at
        ):
            self.max, self.max_req = other.max, other.max_req
            self.max_at = other.max_at
        if (
            self.values is not None
            and other.values is not None
            and len(self.values) + len(other.values) <= EXACT_MAX
        ):
            self.values.extend(other.values)
        else:
            self.values = None
        for b, n in other.hist.items():
            self.hist[b] = self.hist.get(b, 0) + n
        if other.held_max > self.held_max or (
            other.held_max == self.held_max
            and other.holder is not None
            and self.holder is not None
            and held_key(other.holder) < held_key(self.holder)
        ):
            self.held_max, self.holder = other.held_max, other.holder
        self.held_total += other.held_total

    def percentile(self, p: float) -> float | None:
        if not self.count:
            return None
        if self.values is not None:
            ordered = sorted(self.values)
            rank = max(0, math.ceil(p / 100.0 * len(ordered)) - 1)
            return float(ordered[rank])
        want = max(1, math.ceil(p / 100.0 * self.count))
        seen = 0
        for b in sorted(self.hist):
            seen += self.hist[b]
            if seen >= want:
                return min(bucket_value(b), float(self.max))
        return float(self.max)
