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
"""The progress line ``instrument-report`` draws on standard error.

The analysis reports how far it has read through a callback
(``pipeline.Options.progress``: stage, bytes done, bytes in all);
``ProgressLine`` is that callback for a terminal: one line rewritten in
place, ``clocks  42.0%  85.3 MB/s``, at most twice a second, then
erased.  It draws nothing when the output is not a terminal or the
input is small (under 20 MB it is read in seconds).
"""

import math
import sys
import time
import typing

LABELS = {'clocks': 'clocks ', 'spans': 'spans  ', 'export': 'export '}


class ProgressLine:
    """A ``progress(stage, done, total)`` callback drawing one line."""

    def __init__(
        self,
        out: typing.Optional[typing.TextIO] = None,
        min_bytes: int = 20 << 20,
        interval: float = 0.5,
    ) -> None:
        self.out = out or sys.stderr
        self.min_bytes = min_bytes
        self.interval = interval
        # decided when the total is known
        self.enabled: typing.Optional[bool] = None
        self.stage: typing.Optional[str] = None
        self.started = time.monotonic()
        # the first call draws, whatever the monotonic clock reads
        self.last = -math.inf

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.enabled is None:
            tty = getattr(self.out, 'isatty', None)
            self.enabled = total >= self.min_bytes and bool(tty and tty())
        if not self.enabled:
            return
        if stage == 'done':
            self.out.write('\r' + ' ' * 60 + '\r')
            self.out.flush()
            return
        now = time.monotonic()
        if stage != self.stage:
            self.stage = stage
            self.started = now
        if now - self.last < self.interval:
            return
        self.last = now
        pct = min(100.0, 100.0 * done / max(total, 1))
        rate = done / max(now - self.started, 1e-6) / 1e6
        self.out.write(
            '\r%s %5.1f%%  %.1f MB/s ' % (LABELS.get(stage, stage), pct, rate)
        )
        self.out.flush()
