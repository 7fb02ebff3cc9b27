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
"""The recording processes of the synthetic cloud, and the request.

A ``Proc`` is one nova service process: its host (and so its clock
skew), span and thread ids, the ``seq`` numbering and the records it has
produced but not yet written (a heap by the time they become visible:
an ``X`` record is written when its span ends).  Records are the
runtime's in-memory tuples (``instrument.runtime.record``), turned into lines
by the runtime's own ``record.to_dict`` when written.

A ``Ctx`` is the request being generated, with its truth.
"""

import heapq
import random
import uuid

from instrument.runtime import record
from tests.synthetic import statements
from tests.synthetic import truth


class Proc:
    """One recording process: its host, clock and pending records."""

    def __init__(
        self,
        rng: random.Random,
        skew: int,
        host: str,
        svc: str,
        service: str,
        pid: int,
        fmt: str = 'file',
        gz: bool = False,
    ) -> None:
        self.host = host
        self.svc = svc
        self.service = service
        self.pid = pid
        # 'file': a span file; 'log': the log sink's lines in a service
        # log.  gz: gzip-compressed, as a rotated file.
        self.fmt = fmt
        self.gz = gz
        self.skew = skew
        self.prefix = (rng.getrandbits(31) | 1) << 32
        self.ids = 0
        self.tids = 0
        self.tid = self.new_tid()
        self.pending = []
        self.count = 0
        self.seq = 1
        self.fps = set()
        self.fh = None
        self.path = None
        self.lines = 0

    def new_span(self) -> int:
        self.ids += 1
        return self.prefix | self.ids

    def new_tid(self) -> int:
        self.tids += 1
        return 139000000000000 + self.pid * 1000 + self.tids

    def raw(self, t: int) -> int:
        """The process's own clock reading at true time ``t``."""
        return t + self.skew

    def put(self, when: int, rec: tuple) -> None:
        """Queue ``rec``, written once the output reaches ``when``."""
        self.count += 1
        heapq.heappush(self.pending, (when, self.count, rec))

    def fingerprint(self, when: int, name: str) -> None:
        """The ``sql.fingerprint`` record of a class, once per process."""
        if name in self.fps:
            return
        self.fps.add(name)
        text, kind, _db, _med = statements.SQL_CLASSES[name]
        self.put(
            when,
            record.meta(
                'sql.fingerprint',
                self.host,
                self.svc,
                self.raw(when),
                {
                    'fp': statements.fingerprint_id(text),
                    'text': text,
                    'kind': kind,
                },
            ),
        )


class Ctx:
    """The request being generated."""

    def __init__(self, req: str, insts: list, rt: truth.RequestTruth) -> None:
        self.req = req
        self.greq = None
        self.insts = insts
        self.rt = rt

    def reach(self, t: int) -> None:
        if t > self.rt.end:
            self.rt.end = t


def new_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))
