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
"""``processes``: every recording process, from its ``process.start``.

One row per ``process.start`` record read: the file it was read in,
its host, service, pid, program, library version, nova releases,
concurrency mode and how many patch points it applied (and left
pending), sorted by host, service and pid.
"""

import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.sections import base


def _point_counts(points) -> dict:
    if not isinstance(points, dict):
        return {}
    return {k: len(v) for k, v in points.items() if isinstance(v, list)}


class Processes(base.Section):
    """``report['processes']``."""

    key = 'processes'
    routes = (
        routes.Route(
            'M', frozenset((schema.EV_PROCESS_START,)), routes.ALL, 'start'
        ),
    )

    def __init__(self, ctx: base.Context) -> None:
        # in the order read (``sections.releases`` counts them)
        self.rows: list = []

    def start(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        attrs = rec.attrs or {}
        self.rows.append(
            {
                'file': cursor.fname,
                'host': rec.host,
                'svc': rec.svc,
                'pid': rec.pid,
                'service': attrs.get('service'),
                'version': attrs.get('version'),
                'releases': attrs.get('releases') or {},
                'mode': attrs.get('mode'),
                'points': _point_counts(attrs.get('points')),
            }
        )
        setup = attrs.get(schema.ATTR_SETUP)
        if isinstance(setup, dict) and setup:
            self.rows[-1]['setup'] = setup
        # the allow-listed nova.conf values it ran with (the findings)
        conf = attrs.get(schema.ATTR_SETTINGS)
        if isinstance(conf, dict) and conf:
            self.rows[-1]['settings'] = conf

    def merge(self, other: 'Processes') -> None:
        self.rows.extend(other.rows)

    def report(self, view: base.View) -> list:
        return sorted(self.rows, key=lambda p: (p['host'], p['svc'], p['pid']))
