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
"""Resource samples of the process (``instrument.targets``).

Runs ``instrument.runtime.resources.Sampler`` in the buffer's writer every
``[instrument] resource_sample_interval`` seconds; skipped when that is
0.  The engine listener it counts SQL pools with is a point of its
patcher (``instrument.runtime.resources.POINT``).  Like the targets of
a library's calls, it is replaced by the points
given to ``instrument.setup(points=...)``.
"""

from instrument.runtime import resources
from instrument.targets import base


class ResourcesTarget(base.Target):
    """``process.sample`` records."""

    name = 'resources'

    def __init__(self) -> None:
        super().__init__()
        self.sampler: resources.Sampler | None = None

    def check(self, conf) -> str | None:
        if not conf.instrument.resource_sample_interval:
            return '[instrument] resource_sample_interval is 0'
        return super().check(conf)

    def install(self, ctx: base.Context) -> None:
        """Sample in the writer; the SQL engines' listener is a point
        of the target's patcher (in the banner and the start
        record)."""
        self.patcher = ctx.patcher
        self.sampler = resources.Sampler(
            ctx.recorder,
            ctx.conf.instrument.resource_sample_interval,
            ctx.patcher,
        )
        self.sampler.start()

    def remove(self) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.stop()
        super().remove()
