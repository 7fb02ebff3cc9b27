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
"""Per-class, per-interval aggregates of statements not written one by one.

Only the buffer's writer thread feeds it (``SqlListeners.process`` calls
``add`` for every statement it does not write as a ``sql.query``
record), and ``rollover`` emits one ``sql.agg`` counter record per query
class once per ``sql_aggregate_interval`` and at close
(``doc/source/events.rst``).  Intervals are aligned to multiples of the
interval on the wall clock; a statement is charged to the interval in
which the writer processes it (at most one ``flush_interval`` late).
"""

import bisect
import os
import threading
import time
import typing
import weakref

from instrument import schema

EV_AGG = schema.EV_SQL_AGG

# Upper bounds (exclusive) of the histogram buckets, microseconds, as
# the analyser reads them: [0,1us) [1,10us) ... [1s,10s) [10s,inf).
HIST_BOUNDS = schema.SQL_HIST_BOUNDS_US
HIST_SIZE = schema.SQL_HIST_SIZE

# Per-class statistics list: positions (_ROWS_N: statements whose row
# count is known; _ROWS: their rows).
_COUNT, _ERRORS, _SUM, _MIN, _MAX, _SUMSQ, _ROWS, _HIST, _ROWS_N = range(9)

_LIVE = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for agg in list(_LIVE):
        agg.reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


def bucket(dur_us: int) -> int:
    """Histogram bucket index of a duration in microseconds."""
    return bisect.bisect_right(HIST_BOUNDS, dur_us)


class Aggregator:
    """Folds statement timings into ``sql.agg`` records per interval."""

    def __init__(self, recorder, interval_s: float) -> None:
        self.recorder = recorder
        self.interval_us = max(1, int(interval_s * 1000000))
        self.reset()
        _LIVE.add(self)

    def reset(self) -> None:
        """Start empty (at creation and in a forked child)."""
        self._classes = {}
        self._start_us: typing.Optional[int] = None
        self._lock = threading.Lock()

    def add(
        self, qid: str, db: str, kind: str, call, dur: int, rows, failed: bool
    ) -> None:
        """Count one statement of ``dur`` microseconds."""
        key = (qid, db, kind, call)
        agg = self._classes.get(key)
        if agg is None:
            agg = self._classes[key] = [
                0,
                0,
                0,
                dur,
                dur,
                0,
                0,
                [0] * HIST_SIZE,
                0,
            ]
        agg[_COUNT] += 1
        if failed:
            agg[_ERRORS] += 1
        agg[_SUM] += dur
        if dur < agg[_MIN]:
            agg[_MIN] = dur
        if dur > agg[_MAX]:
            agg[_MAX] = dur
        agg[_SUMSQ] += dur * dur
        if rows is not None and rows >= 0:
            # 0 rows is a count (an UPDATE that matched nothing); None
            # is no count (sqlite's SELECTs)
            agg[_ROWS] += rows
            agg[_ROWS_N] += 1
        agg[_HIST][bisect.bisect_right(HIST_BOUNDS, dur)] += 1

    def _emit(self, start_us: int, interval_s: float) -> None:
        counter = self.recorder.counter
        for (qid, db, kind, call), agg in self._classes.items():
            counter(
                EV_AGG,
                {
                    schema.ATTR_FP: qid,
                    schema.ATTR_DB: db,
                    schema.ATTR_KIND: kind,
                    schema.ATTR_CALL: call,
                    schema.ATTR_COUNT: agg[_COUNT],
                    schema.ATTR_ERRORS: agg[_ERRORS],
                    schema.ATTR_SUM_US: agg[_SUM],
                    schema.ATTR_MIN_US: agg[_MIN],
                    schema.ATTR_MAX_US: agg[_MAX],
                    schema.ATTR_SUMSQ_US: agg[_SUMSQ],
                    schema.ATTR_ROWS: agg[_ROWS],
                    schema.ATTR_ROWS_KNOWN: agg[_ROWS_N],
                    schema.ATTR_HIST: agg[_HIST],
                    schema.ATTR_INTERVAL_S: interval_s,
                },
                start_us,
            )
        self._classes = {}

    def rollover(self, final: bool = False) -> None:
        """Emit the interval if it is over; everything when ``final``.

        Call it before adding what was collected since the last call: a
        statement is charged to the interval current when it is added.
        """
        with self._lock:
            now_us = time.time_ns() // 1000
            start = self._start_us
            if start is None:
                start = self._start_us = now_us - now_us % self.interval_us
            if now_us >= start + self.interval_us:
                if self._classes:
                    self._emit(start, self.interval_us / 1000000)
                start = self._start_us = now_us - now_us % self.interval_us
            if final:
                if self._classes:
                    self._emit(start, round((now_us - start) / 1000000, 6))
                self._start_us = None
