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
"""Identity of the recording process: host, service, pid, start time.

Written into every event (host, service) and into the name of the span
file.  The ``process.start`` record that opens each process's output is
built here too.
"""

import dataclasses
import os
import socket
import sys
import time

from instrument import schema
from instrument.runtime import record


def short_service(service_name: str) -> str:
    """``nova-compute`` -> ``compute``, ``nova-api-os-compute`` -> ``api``;
    other names unchanged."""
    name = os.path.basename(service_name or '')
    if name.startswith('nova-api'):
        return 'api'
    if name.startswith('nova-'):
        name = name[len('nova-') :]
    return name or 'unknown'


def guess_service_name() -> str:
    """The running program's name, e.g. ``nova-conductor``."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ''
    name = os.path.basename(argv0)
    if name in ('', '-c', 'python', 'python3') or name.endswith('.py'):
        return 'python'
    return name


# How a tool that embeds nova set the process up, where that shapes the
# figures (the demo: its computes sharing this process, their periodic
# tasks' interval): written into ``process.start`` as ``setup``, so the
# report can say so beside the figures it shapes.  Empty: a deployment.
SETUP: dict = {}


@dataclasses.dataclass
class ProcessIdentity:
    """Who writes: ``service`` is the program (``nova-compute``), ``svc``
    its component (``compute``), ``host`` the host name written into
    events that have no better host of their own."""

    host: str
    service: str
    svc: str
    started: float = dataclasses.field(default_factory=time.time)

    @classmethod
    def create(cls, service_name: str | None, host: str | None = None):
        service_name = service_name or guess_service_name()
        return cls(
            host=host or socket.gethostname(),
            service=service_name,
            svc=short_service(service_name),
        )

    def start_record(self, attrs: dict) -> tuple:
        """The ``process.start`` metadata event of this process."""
        data = {
            schema.ATTR_SERVICE: self.service,
            schema.ATTR_ARGV0: os.path.basename(sys.argv[0])
            if sys.argv
            else '',
            schema.ATTR_PPID: os.getppid(),
        }
        data.update(attrs)
        if SETUP:
            data[schema.ATTR_SETUP] = dict(SETUP)
        return record.meta(
            schema.EV_PROCESS_START,
            self.host,
            self.svc,
            time.time_ns() // 1000,
            data,
        )
