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
"""Per-operation figures of finished requests, folded, as Prometheus
text.

``Totals`` folds each request the request model finalised
(``breakdown.RequestSummary``) into counters and fixed-bucket
histograms, keyed by operation and final state, and keeps nothing of
the request itself: ``instrument-report follow`` (``analysis.follow``)
runs for days in the memory of its open requests.  The figures are
those of the batch report's ``operations`` section, summed rather than
listed: requests and instances per final state (an instance row per
instance, a request without one counting as one, as there), the
end-to-end time per final state, the exclusive time per component of
the successful requests whose times count (not ``damage.marked``), the
instances tried on a host and retried on another, and the failure rows
of the ``failures`` section (its state, read as it is) summed over
their messages, per fate.

``render`` writes them with the runtime's text exposition
(``sinks.metrics.render``: the same escaping, number format and
histogram buckets, ``metrics.LATENCY_BOUNDS_S``, in seconds) under the
names of ``FAMILIES``.  Label sets past ``MAX_SERIES`` per family are
summed into ``other`` (an open-ended error class or event), as the
runtime caps its own.
"""

import typing

from instrument.analysis.model import damage
from instrument.analysis.model import operations
from instrument.runtime import metrics as metrics_mod
from instrument.sinks import metrics as metrics_sink

OTHER = metrics_mod.OTHER
MAX_SERIES = metrics_mod.MAX_SERIES
NBUCKETS = len(metrics_mod.LATENCY_BOUNDS_S) + 1
# what became of a failure row's errors (``sections.failures.Fates``);
# ``none``: neither final nor recovered
NO_FATE = 'none'

REQUESTS = 'instrument_operation_requests_total'
INSTANCES = 'instrument_operation_instances_total'
DURATION = 'instrument_operation_duration_seconds'
TIMED = 'instrument_operation_timed_requests_total'
COMPONENT = 'instrument_operation_component_seconds_total'
TRIED = 'instrument_operation_instances_tried_total'
RETRIED = 'instrument_operation_instances_retried_total'
RESCHEDULES = 'instrument_operation_reschedules_total'
MARKED = 'instrument_operation_marked_requests_total'
FAILURES = 'instrument_operation_failures_total'
DB_RETRIES = 'instrument_operation_db_retries_total'
LINES = 'instrument_follow_lines_total'
BAD = 'instrument_follow_bad_lines_total'
OPEN = 'instrument_follow_open_requests'
DROPPED = 'instrument_follow_dropped_requests_total'
LATE = 'instrument_follow_late_events_total'
WATERMARK = 'instrument_follow_watermark_seconds'
FILES = 'instrument_follow_files'
ROTATIONS = 'instrument_follow_rotations_total'
FINDING = 'instrument_finding'
FINDING_SHARE = 'instrument_finding_share'
FINDING_VALUE = 'instrument_finding_setting_value'
FINDINGS_EVALUATIONS = 'instrument_findings_evaluations_total'
FINDINGS_REQUESTS = 'instrument_findings_window_requests'
FINDINGS_WINDOW = 'instrument_findings_window_seconds'
FINDINGS_DROPPED = 'instrument_findings_dropped_total'
FINDING_LABELS = ('rule', 'section', 'option', 'host', 'service')

FAMILIES = {
    REQUESTS: (
        'counter',
        'Finished requests, by nova operation and final '
        'state (the batch report\'s operations section).',
        ('operation', 'state'),
    ),
    INSTANCES: (
        'counter',
        'Instances of finished requests, by operation '
        'and final state (a request without an instance counts '
        'as one).',
        ('operation', 'state'),
    ),
    DURATION: (
        'histogram',
        'End-to-end time of finished requests, by operation and final state.',
        ('operation', 'state'),
    ),
    TIMED: (
        'counter',
        'Successful requests whose times count (none of '
        'their records lost or late), by operation: the requests of '
        'the component times.',
        ('operation',),
    ),
    COMPONENT: (
        'counter',
        'Exclusive time per component of the '
        'successful requests whose times count, by operation '
        'and component.',
        ('operation', 'component'),
    ),
    TRIED: (
        'counter',
        'Instances tried on a host, by operation.',
        ('operation',),
    ),
    RETRIED: (
        'counter',
        'Instances tried on more than one host '
        '(rescheduled, another destination), by operation.',
        ('operation',),
    ),
    RESCHEDULES: (
        'counter',
        'Attempts after an instance\'s first (a '
        'reschedule of a boot or resize, another live-migration '
        'destination), by operation.',
        ('operation',),
    ),
    MARKED: (
        'counter',
        'Finished requests a loss, a late event or a '
        'repaired record may have touched (left out of the times), '
        'by operation.',
        ('operation',),
    ),
    FAILURES: (
        'counter',
        'Errors of finished requests, each counted once '
        'where it was raised, by operation, component, event, '
        'exception class and fate (final, db_retry, rescheduled, '
        'succeeded, none).',
        ('operation', 'component', 'event', 'error', 'fate'),
    ),
    DB_RETRIES: (
        'counter',
        'oslo.db retries (db.retry events), by '
        'retried function and exception class.',
        ('function', 'error'),
    ),
    LINES: ('counter', 'Span file lines read.', ()),
    BAD: (
        'counter',
        'Lines that were not valid records, by kind (counted, not fatal).',
        ('kind',),
    ),
    OPEN: ('gauge', 'Requests open (not finalised yet).', ()),
    DROPPED: (
        'counter',
        'Open requests dropped unfinished to bound memory (--max-open).',
        (),
    ),
    LATE: (
        'counter',
        'Events read after their request was finalised '
        '(raise --lag or --horizon if many).',
        (),
    ),
    WATERMARK: (
        'gauge',
        'The input time behind which requests are finalised, Unix seconds.',
        (),
    ),
    FILES: ('gauge', 'Span files followed.', ()),
    ROTATIONS: (
        'counter',
        'Span files rotated, by how (renamed, truncated).',
        ('how',),
    ),
    FINDING: (
        'gauge',
        'An advisor finding over the last --findings-window (1 while it '
        'holds): its rule, a nova.conf setting it names ([section] '
        'option) and a service that ran with it (host, service; empty '
        'when none was named).  doc/source/findings.rst lists the rules.',
        FINDING_LABELS,
    ),
    FINDING_SHARE: (
        'gauge',
        'How sure a finding is: the share of the requests or of their '
        'critical-path time it explains (0 to 1).',
        FINDING_LABELS,
    ),
    FINDING_VALUE: (
        'gauge',
        'The value the service ran with of the setting a finding names '
        '(numbers and booleans; absent when not recorded).',
        FINDING_LABELS,
    ),
    FINDINGS_EVALUATIONS: (
        'counter',
        'Times the advisor rules ran over the window.',
        (),
    ),
    FINDINGS_REQUESTS: (
        'gauge',
        'Finished requests in the findings window.',
        (),
    ),
    FINDINGS_WINDOW: (
        'gauge',
        'The findings window (--findings-window), seconds of input time.',
        (),
    ),
    FINDINGS_DROPPED: (
        'counter',
        'What the findings window left out, by why: requests past its '
        'cap (--findings-max-requests), records and requests older than '
        'the window when read (before_window).',
        ('why',),
    ),
}


def bucket(seconds: float) -> int:
    """The histogram bucket of a time in seconds."""
    return metrics_mod.bucket(int(round(seconds * 1e6)))


class Totals:
    """Counters and histograms of finished requests (module doc)."""

    def __init__(self) -> None:
        # family: {label tuple: value} (a histogram's: counts per
        # bucket, then the sum in seconds)
        self.series: dict = {name: {} for name in FAMILIES}

    def _key(self, name: str, labels: tuple) -> tuple:
        series = self.series[name]
        if labels in series or len(series) < MAX_SERIES:
            return labels
        return tuple(OTHER for _ in labels)

    def add(self, name: str, labels: tuple, value: float = 1) -> None:
        """Add ``value`` to counter ``name``'s series ``labels``."""
        key = self._key(name, labels)
        series = self.series[name]
        series[key] = series.get(key, 0) + value

    def observe(self, name: str, labels: tuple, seconds: float) -> None:
        """One observation of histogram ``name``."""
        key = self._key(name, labels)
        series = self.series[name]
        row = series.get(key)
        if row is None:
            row = series[key] = [0] * NBUCKETS + [0]
        row[bucket(seconds)] += 1
        # (summed in microseconds: no float drift over days)
        row[-1] += int(round(seconds * 1e6))

    def fold(self, s: typing.Any) -> None:
        """A finished request (``breakdown.RequestSummary``)."""
        op = s.kind
        self.add(REQUESTS, (op, s.state))
        self.observe(DURATION, (op, s.state), max(s.latency, 0) / 1e6)
        rows = s.instances or [{'state': s.state, 'attempts': 0}]
        for row in rows:
            self.add(INSTANCES, (op, row['state']))
            attempts = row.get('attempts') or 0
            if attempts >= 1:
                self.add(TRIED, (op,))
                if attempts > 1:
                    self.add(RETRIED, (op,))
                    self.add(RESCHEDULES, (op,), attempts - 1)
        if damage.marked(s):
            self.add(MARKED, (op,))
        elif s.state in operations.GOOD_STATES:
            self.add(TIMED, (op,))
            for name, us in s.comp.items():
                # (microseconds here, seconds in ``export``)
                self.add(COMPONENT, (op, name), us)

    def export(self) -> dict:
        """``{family: {labels: value}}`` in the exposition's units
        (seconds; the sums are kept in microseconds)."""
        out = {}
        for name, series in self.series.items():
            kind = FAMILIES[name][0]
            if kind == 'histogram':
                out[name] = {
                    k: v[:-1] + [v[-1] / 1e6] for k, v in series.items()
                }
            elif name == COMPONENT:
                out[name] = {k: v / 1e6 for k, v in series.items()}
            else:
                out[name] = dict(series)
        return out


def failure_series(table: dict) -> dict:
    """``{(operation, component, event, error, fate): count}`` of the
    failure section's state (``sections.failures.Failures.table``),
    its messages summed."""
    out: dict = {}
    for (op, svc, ev, cls, _msg), (
        n,
        _reqs,
        final,
        recovered,
    ) in table.items():
        base = (op, str(svc), str(ev), str(cls))
        rest = n
        for fate, k in (('final', final),) + tuple(sorted(recovered.items())):
            if k:
                key = base + (fate,)
                out[key] = out.get(key, 0) + k
                rest -= k
        if rest > 0:
            key = base + (NO_FATE,)
            out[key] = out.get(key, 0) + rest
    return out


def capped(series: dict) -> dict:
    """``series`` with the label sets past ``MAX_SERIES`` summed into
    ``other``."""
    if len(series) <= MAX_SERIES:
        return series
    out: dict = {}
    for i, (labels, value) in enumerate(
        sorted(series.items(), key=lambda kv: -kv[1])
    ):
        key = labels if i < MAX_SERIES else tuple(OTHER for _ in labels)
        out[key] = out.get(key, 0) + value
    return out


def render(series: dict) -> str:
    """Prometheus text of ``{family: {labels: value}}`` (``FAMILIES``)."""
    return metrics_sink.render(series, FAMILIES, lead=())
