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
"""Two runs side by side: a tuning experiment's before and after.

What each run's figures stand on (its boots, the successful ones, the
incomplete boot instances, what its input lost), then each section of
the registry that compares (``registry.in_compare``), in its order:
the boots' throughput, success and reschedule rates and the latency of
successful boots end to end and per component (medians, p95, and a
two-sided Mann-Whitney U test on the per-request distributions, so a
change is called significant only when p < ``alpha``:
``sections.summary``), the top SQL classes of either run (calls and
time per call: ``sections.sql``), and the same per operation
(``sections.operations``).
"""

import typing

import numpy
from scipy import stats as sstats

from instrument.analysis import registry
from instrument.analysis.render import views
from instrument.analysis.sections import base
from instrument.analysis.sections import summary


def _run(report: dict, good: list) -> dict:
    """What a run's figures stand on: its boots, the successful ones,
    the boot instances left incomplete, and what its input lost
    (``loss``: the report's warning, None when it lost nothing)."""
    s = report['summary']
    q = report.get('quality') or {}
    return {
        'boots': s['boots'],
        'successful': len(good),
        'incomplete': (s.get('states') or {}).get('incomplete', 0),
        'lost_records': q.get('lost_records') or 0,
        'sql_dropped': q.get('sql_dropped') or 0,
        'unreadable': [u['file'] for u in q.get('unreadable') or ()],
        'loss': views.loss_text(q),
    }


def losses(cmp: dict) -> list:
    """``(run, warning)`` of each run whose input lost records (``A``,
    ``B``)."""
    return [
        (name.upper(), cmp['runs'][name]['loss'])
        for name in 'ab'
        if cmp['runs'][name].get('loss')
    ]


def _reminder(cmp: dict) -> list:
    """The line under each section of a comparison with a lossy run."""
    runs = [run for run, _note in losses(cmp)]
    if not runs:
        return []
    return [
        '! %s: computed from input with losses (see the top)'
        % ' and '.join(runs)
    ]


def p_value(a: list, b: list) -> typing.Optional[float]:
    """The p-value of the two samples being alike (None: too few)."""
    if len(a) < 2 or len(b) < 2:
        return None
    if numpy.ptp(a + b) == 0:
        return 1.0
    return float(sstats.mannwhitneyu(a, b, alternative='two-sided').pvalue)


def compare(a: dict, b: dict, alpha: float = 0.05, top: int = 10) -> dict:
    """The differences between run ``a`` and run ``b``."""
    out = {
        'alpha': alpha,
        'runs': {
            'a': _run(a, summary.successful_boots(a)),
            'b': _run(b, summary.successful_boots(b)),
        },
    }
    how = base.Comparing(alpha, top, p_value)
    for section in registry.in_compare():
        out.update(section.compare(a, b, how))
    return out


def render(cmp: dict, name_a: str = 'A', name_b: str = 'B') -> str:
    """The comparison ``cmp`` as text."""
    out = ['# compare %s (A) -> %s (B)' % (name_a, name_b)]
    for name in 'ab':
        run = cmp['runs'][name]
        out.append(
            '# %s: %d boots, %d successful%s'
            % (
                name.upper(),
                run['boots'],
                run['successful'],
                ', %d boot instances incomplete' % run['incomplete']
                if run.get('incomplete')
                else '',
            )
        )
    # beside every figure: a run read from input with losses
    out.extend('! %s: %s' % kv for kv in losses(cmp))
    reminder = _reminder(cmp)
    for section in registry.in_compare():
        lines = section.compare_text(cmp, reminder)
        if lines:
            out.append('')
            out.extend(lines)
    return '\n'.join(out) + '\n'
