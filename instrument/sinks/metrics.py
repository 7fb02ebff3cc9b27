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
"""Metrics exposition: per-process state files, merged into Prometheus
text.

Each recording process writes its aggregates
(``instrument.runtime.metrics``) to ``<metrics_dir>/<service>_<pid>.json``
from its writer thread, atomically (a temporary file, then ``rename``):
a reader never sees half a file.  ``instrument-metrics`` (``dump``,
``serve``) reads every file of the directory, sums the series of the
processes of each program (nova-api's forked workers are one
``service``), and renders Prometheus' text format (version 0.0.4) by
hand: the runtime half depends on no client library.

Files of processes that ended stay and keep counting in the sums, so a
worker that exits does not make a counter go down; they are removed by
``prune`` (``instrument-metrics dump --prune-after S``) once their
process is gone and the file has not changed for that long: the sum
then drops, which Prometheus' ``rate()`` takes as a counter reset.
"""

import glob
import json
import math
import os
import time

from instrument.runtime import metrics as metrics_mod

SUFFIX = '.json'
STATE_VERSION = 1


class StateFile:
    """Writes one process's state file (called by ``Metrics.tick``)."""

    def __init__(self, directory: str, identity) -> None:
        self.directory = directory
        self.identity = identity
        self.errors = 0
        self.last_error: str | None = None

    def path(self, pid: int | None = None) -> str:
        pid = os.getpid() if pid is None else pid
        service = os.path.basename(self.identity.service) or 'unknown'
        return os.path.join(self.directory, '%s_%d%s' % (service, pid, SUFFIX))

    def __call__(self, state: dict, final: bool = False) -> None:
        pid = os.getpid()
        doc = {
            'v': STATE_VERSION,
            'service': self.identity.service,
            'svc': self.identity.svc,
            'host': self.identity.host,
            'pid': pid,
            'written': time.time(),
            'final': final,
            'bounds': list(metrics_mod.LATENCY_BOUNDS_S),
            'families': state,
        }
        path = self.path(pid)
        tmp = '%s.tmp' % path
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(tmp, 'w', encoding='utf-8') as out:
                json.dump(doc, out, separators=(',', ':'))
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError) as exc:
            self.errors += 1
            self.last_error = '%s: %s' % (exc.__class__.__name__, exc)
            raise


def read_states(directory: str) -> list:
    """Every readable state file of ``directory`` (unreadable ones, a
    foreign JSON file, are skipped)."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, '*' + SUFFIX))):
        try:
            with open(path, encoding='utf-8') as src:
                doc = json.load(src)
        except (OSError, ValueError):
            continue
        if (
            isinstance(doc, dict)
            and doc.get('v') == STATE_VERSION
            and isinstance(doc.get('families'), dict)
        ):
            doc['path'] = path
            out.append(doc)
    return out


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError, OverflowError):
        return True
    return True


def prune(directory: str, after: float, now: float | None = None) -> list:
    """Remove the state files of processes that are gone (no such pid on
    this host) and that did not change for ``after`` seconds; returns
    their paths."""
    now = time.time() if now is None else now
    removed = []
    for doc in read_states(directory):
        path = doc['path']
        try:
            age = now - os.stat(path).st_mtime
        except OSError:
            continue
        if age >= after and not _alive(doc.get('pid')):
            try:
                os.unlink(path)
            except OSError:
                continue
            removed.append(path)
    return removed


def merge(states: list) -> dict:
    """``{family: {label tuple with the service first: value}}``: the
    series of every state summed per program (``service`` label)."""
    out: dict = {name: {} for name in metrics_mod.FAMILIES}
    bounds = metrics_mod.LATENCY_BOUNDS_S
    for doc in states:
        service = str(doc.get('service') or '')
        for name, rows in doc['families'].items():
            if name not in out or not isinstance(rows, list):
                continue
            kind = metrics_mod.FAMILIES[name][0]
            series = out[name]
            for row in rows:
                labels = (service,) + tuple(str(x) for x in row[:-1])
                value = row[-1]
                if kind == 'histogram':
                    if (
                        not isinstance(value, list)
                        or len(value) != len(bounds) + 2
                    ):
                        continue  # another release's buckets
                    have = series.get(labels)
                    if have is None:
                        series[labels] = list(value)
                    else:
                        series[labels] = [
                            a + b for a, b in zip(have, value, strict=True)
                        ]
                elif isinstance(value, (int, float)):
                    series[labels] = series.get(labels, 0) + value
    return out


def escape_label(value: str) -> str:
    """A label value as the text format quotes it."""
    return value.replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace('\\', '\\\\').replace('\n', '\\n')


def number(value) -> str:
    """A sample value: integers as such, floats with repr's precision."""
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return 'NaN'
    if math.isinf(value):
        return '+Inf' if value > 0 else '-Inf'
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _labels(names, values, extra=()) -> str:
    pairs = [
        '%s="%s"' % (n, escape_label(v))
        for n, v in list(zip(names, values, strict=True)) + list(extra)
    ]
    return '{%s}' % ','.join(pairs) if pairs else ''


def render(
    merged: dict, families: dict | None = None, lead: tuple = ('service',)
) -> str:
    """Prometheus text exposition of ``merge()``'s result: HELP and
    TYPE for each family that has series, histograms as cumulative
    ``_bucket`` (``le`` up to ``+Inf``, the bounds of
    ``LATENCY_BOUNDS_S``), ``_sum`` and ``_count``.

    ``families``: ``{name: (type, help, label names)}`` in the order
    written (default: the runtime's, ``metrics.FAMILIES``); ``lead``:
    the label names every series' tuple starts with before the
    family's own (default the program, ``service``).  A histogram's
    value is its count per bucket (the last one +Inf) then its sum in
    seconds.  (``instrument-report follow`` writes its per-operation
    families with it.)"""
    lines = []
    bounds = [number(b) for b in metrics_mod.LATENCY_BOUNDS_S] + ['+Inf']
    if families is None:
        families = metrics_mod.FAMILIES
    for name, (kind, help_text, label_names) in families.items():
        series = merged.get(name)
        if not series:
            continue
        names = tuple(lead) + tuple(label_names)
        lines.append('# HELP %s %s' % (name, escape_help(help_text)))
        lines.append('# TYPE %s %s' % (name, kind))
        for labels in sorted(series):
            value = series[labels]
            if kind != 'histogram':
                lines.append(
                    '%s%s %s' % (name, _labels(names, labels), number(value))
                )
                continue
            counts, total = value[:-1], value[-1]
            running = 0
            for le, count in zip(bounds, counts, strict=True):
                running += count
                lines.append(
                    '%s_bucket%s %d'
                    % (name, _labels(names, labels, [('le', le)]), running)
                )
            lines.append(
                '%s_sum%s %s' % (name, _labels(names, labels), number(total))
            )
            lines.append(
                '%s_count%s %d' % (name, _labels(names, labels), running)
            )
    return '\n'.join(lines) + '\n' if lines else ''


def exposition(directory: str) -> str:
    """The text exposition of every state file of ``directory``."""
    return render(merge(read_states(directory)))
