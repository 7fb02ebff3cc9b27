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
"""``releases``: which nova release each process ran (mid-upgrade?).

Each process's ``process.start`` names its nova version (``releases``,
from openstack-instrument 2026.2 on; older span files have none) and its
concurrency mode.  The span records themselves do not depend on the
release: one analysis reads the files of every release together, and
this summary says which hosts and services ran which.
"""

import typing

from instrument.analysis.sections import base

UNKNOWN = 'unknown'


def summarise(processes: typing.Iterable[dict]) -> list:
    """One row per (nova version, mode): ``{'nova', 'mode', 'services',
    'hosts', 'processes'}``, the most processes first; processes whose
    ``process.start`` names no nova are ``unknown``."""
    groups: dict = {}
    for proc in processes:
        nova = (proc.get('releases') or {}).get('nova') or UNKNOWN
        key = (nova, proc.get('mode') or UNKNOWN)
        row = groups.setdefault(
            key,
            {
                'nova': key[0],
                'mode': key[1],
                'services': set(),
                'hosts': set(),
                'processes': 0,
            },
        )
        row['services'].add(proc.get('svc') or UNKNOWN)
        row['hosts'].add(proc.get('host') or UNKNOWN)
        row['processes'] += 1
    rows = []
    for row in groups.values():
        rows.append(
            dict(
                row,
                services=sorted(row['services']),
                hosts=sorted(row['hosts']),
            )
        )
    rows.sort(key=lambda r: (-r['processes'], r['nova'], r['mode']))
    return rows


def text(rows: list) -> typing.Optional[str]:
    """The report header's line when the processes ran more than one
    nova release or mode, else None."""
    if len(rows) < 2:
        return None
    parts = [
        '%s %s (%s; %d host%s)'
        % (
            r['nova'],
            r['mode'],
            ', '.join(r['services']),
            len(r['hosts']),
            '' if len(r['hosts']) == 1 else 's',
        )
        for r in rows
    ]
    return '# nova releases: ' + '; '.join(parts)


class Releases(base.Section):
    """``report['releases']``: the processes (``sections.processes``)
    per nova release and mode; the text report's header names them
    (``text``) when there are several."""

    key = 'releases'

    def report(self, view: base.View) -> list:
        return summarise(view.part('processes').rows)
