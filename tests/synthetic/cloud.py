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
"""A synthetic nova cloud: its hosts, processes, clocks and load.

api hosts, one controller (conductor and scheduler: two processes on
one clock) and compute hosts, each host with its own clock skew (the
truth's offsets are the corrections).  ``generate`` drives it: requests
arrive as a Poisson process whose rate doubles in each phase while the
work of every service grows with the load; ``NovaRequests`` writes each
request, ``SpanFiles`` the files.  All randomness comes from one seeded
``random.Random``: the same seed writes the same files.
"""

import os
import random

from tests.synthetic import files
from tests.synthetic import nova
from tests.synthetic import operations
from tests.synthetic import procs
from tests.synthetic import spans
from tests.synthetic import truth


class Cloud:
    """Generates the span files of a synthetic nova cloud."""

    def __init__(
        self,
        seed: int = 1,
        computes: int = 6,
        skew_us: int = 3_000_000,
        api_hosts: int = 2,
        p_quota: float = 0.03,
        p_novalidhost: float = 0.03,
        p_port: float = 0.03,
        p_resched: float = 0.06,
        p_hang: float = 0.01,
        p_deadlock: float = 0.04,
        p_multi: float = 0.05,
        p_other: float = 0.1,
        max_attempts: int = 3,
        bad_input: bool = False,
        gzip_computes: bool = True,
        log_sink: bool = True,
        p_ops: float = 0.0,
        p_op_fail: float = 0.15,
        parallel_cells: bool = True,
        buffer_drops: int = 7,
    ) -> None:
        self.rng = random.Random(seed)
        self.p = dict(
            quota=p_quota,
            novalidhost=p_novalidhost,
            port=p_port,
            resched=p_resched,
            hang=p_hang,
            deadlock=p_deadlock,
            multi=p_multi,
            other=p_other,
        )
        # share of requests that are server actions other than create
        # (operations.py; 0: none, and no random draw for them)
        self.p_ops = p_ops
        self.max_attempts = max_attempts
        self.bad_input = bad_input
        # events one compute reports lost in its buffer (sink.drops;
        # 0: a run without losses)
        self.buffer_drops = buffer_drops
        self.truth = truth.Truth()
        self.skews = {}
        hosts = (
            ['api-%d' % i for i in range(api_hosts)]
            + ['ctl-0']
            + ['cmp-%03d' % i for i in range(computes)]
        )
        for host in hosts:
            skew = self.rng.randint(-skew_us, skew_us) if skew_us else 0
            self.skews[host] = skew
            self.truth.offsets[host] = -skew
        pid = iter(range(2000, 100000, 7))
        self.apis = []
        for i in range(api_hosts):
            fmt = 'log' if (log_sink and i == 1) else 'file'
            self.apis.append(
                self._proc('api-%d' % i, 'api', 'nova-api', next(pid), fmt=fmt)
            )
        self.conductor = self._proc(
            'ctl-0', 'conductor', 'nova-conductor', next(pid)
        )
        self.scheduler = self._proc(
            'ctl-0', 'scheduler', 'nova-scheduler', next(pid)
        )
        self.computes = [
            self._proc(
                'cmp-%03d' % i,
                'compute',
                'nova-compute',
                next(pid),
                gz=gzip_computes and i % 2 == 1,
            )
            for i in range(computes)
        ]
        self.procs = self.apis + [self.conductor, self.scheduler]
        self.procs += self.computes
        self.killed = None
        if bad_input:
            # A second api worker that is killed mid-write.
            self.killed = self._proc('api-0', 'api', 'nova-api', next(pid))
            self.procs.append(self.killed)
        self.load = 1.0
        self.spans = spans.Spans(self)
        self.nova = nova.NovaRequests(self, self.spans)
        self.ops = operations.OperationRequests(
            self, self.spans, p_fail=p_op_fail, parallel_cells=parallel_cells
        )

    def _proc(
        self, host: str, svc: str, service: str, pid: int, **kwargs
    ) -> procs.Proc:
        return procs.Proc(
            self.rng, self.skews[host], host, svc, service, pid, **kwargs
        )

    def draw(self, median: float, sigma: float = 0.25) -> int:
        """A duration around ``median`` microseconds (log-normal)."""
        return max(1, int(self.rng.lognormvariate(0.0, sigma) * median))

    def work(self, median: float, sigma: float = 0.25) -> int:
        """A service's work: ``draw``, slower as the load rises."""
        return self.draw(median * self.load, sigma)

    def generate(
        self,
        directory: str,
        requests: int = 200,
        rate: float = 4.0,
        phases: int = 4,
        start_us: int = 1_700_000_000_000_000,
    ) -> truth.Truth:
        """Write the span files of ``requests`` requests into
        ``directory``; arrivals are Poisson, ``rate`` per second in the
        first phase, doubling each phase (rising concurrency)."""
        os.makedirs(directory, exist_ok=True)
        out = files.SpanFiles(self, directory)
        t = start_us
        for proc in self.procs:
            out.open(proc, start_us - 1_000_000)
        per_phase = max(1, requests // phases)
        next_agg = start_us
        done = 0
        for n in range(requests):
            phase = min(phases - 1, n // per_phase)
            self.load = 1.0 + 0.25 * phase
            t += int(self.rng.expovariate(rate * (2**phase)) * 1e6) + 1
            while next_agg <= t:
                for proc in self.computes:
                    self.nova.periodic_agg(proc, next_agg, 60)
                next_agg += 60_000_000
            if self.p_ops and self.rng.random() < self.p_ops:
                self.ops.any(t)
            elif self.rng.random() < self.p['other']:
                self.nova.other(t)
            else:
                self.nova.boot(t)
            done += 1
            if done % 200 == 0:
                out.flush(t - 600_000_000)
        out.finish(t)
        return self.truth
