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
"""The advisor's findings, live: ``instrument-report follow``'s window.

The rules (``analysis.rules``) read the ``findings`` section's own
record tables, the finished requests and three other sections' report
values: ``processes`` (the settings each process ran with),
``periodic`` (the requests the periodic runs held up) and ``failures``
(the failure table).  ``Window`` keeps exactly those, and nothing
else, over a sliding window of input time, and runs the batch report's
own ``findings`` section over them: no second implementation of a
rule.

* **Slices.** The window (``window_us``, ``--findings-window``) is cut
  into ``SLICES`` slices of equal input time.  Each slice holds a state
  of the ``findings``, ``periodic`` and ``failures`` sections
  (``registry``'s classes, made as pass 2 makes them) and the finished
  requests that ended in it.  A record is given to the slice of its
  (corrected) time through ``Slot``, a stand-in with the section's own
  routes; a finished request (its failure rows, its summary) to the
  slice of its end, or to the oldest slice kept when that one was
  dropped (a request finalised long after its end, by ``--hung``: it
  is in the window from the time it is known).  The slices older than
  the watermark less the window are dropped as the watermark moves
  (``advance``); a record of a slice already dropped is counted
  (``before``), not kept.
* **``--once``** (``sliding`` False): one slice, the whole input,
  nothing dropped, as the batch report (``follow --once`` keeps the
  batch report's memory anyway: ``follow.Follower.defer``).
* **Evaluation.** ``evaluate`` merges the slices' states into fresh
  sections (``Section.merge``: how pass 2's workers' states add up; on
  copies, the slices stay as they are), adds the processes, builds a
  ``base.View`` of them and the requests and reads its ``findings``
  value: the batch report's.  On a finished run, ``follow --once``
  exports the findings the batch report prints (tested).
* **Bounded** (sliding). At most ``SLICES`` + 2 slices; each section state as
  bounded as in pass 2 (their own caps); at most ``max_requests``
  requests in the window (``max_requests // SLICES`` per slice, the
  rest counted, ``dropped``), each kept as the few fields the rules
  read (``Kept``); at most ``MAX_PROCESSES`` process starts (the
  oldest forgotten); the exported label sets capped at
  ``exposition.MAX_SERIES`` per family.

``series`` gives the families of ``exposition`` it owns: a gauge per
finding and setting it names, per service that ran with it
(``instrument_finding``), the finding's share (how sure it is) and the
value the service ran with, the evaluations made and the window's
state.
"""

import copy
import typing

from instrument.analysis import exposition
from instrument.analysis.sections import base
from instrument.analysis.sections import failures
from instrument.analysis.sections import findings
from instrument.analysis.sections import periodic
from instrument.analysis.sections import processes

# slices of the window
SLICES = 10
# process starts kept (a process restarted keeps its row until then)
MAX_PROCESSES = 10_000
# the sections kept per slice: what the rules read, but the processes
WINDOWED = (findings.Findings, periodic.Periodic, failures.Failures)


class Kept:
    """What the rules and the ``periodic`` section read of a finished
    request (``breakdown.RequestSummary``): its id, operation, final
    state, start and end, losses, waits, instance rows and its
    critical-path time per component."""

    __slots__ = (
        'req',
        'kind',
        'state',
        'start',
        'end',
        'loss',
        'waits',
        'instances',
        '_cp',
    )

    def __init__(self, s: typing.Any) -> None:
        self.req = s.req
        self.kind = s.kind
        self.state = s.state
        self.start = s.start
        self.end = s.end
        self.loss = getattr(s, 'loss', None)
        self.waits = s.waits
        self.instances = s.instances
        self._cp = s._cp

    @property
    def cp(self) -> dict:
        return dict(zip(*self._cp, strict=True))


class Slice:
    """The sections' states and the requests of one slice of time."""

    def __init__(self, ctx: base.Context) -> None:
        self.sections = {cls.key: cls(ctx) for cls in WINDOWED}
        self.requests: list = []


class Slot:
    """A section of the window as the reader sees it: the section's
    routes, each handler handing the record to the state of the slice
    of its time (``Window.slice_at``)."""

    def __init__(self, window: 'Window', cls: type[base.Section]) -> None:
        self.window = window
        self.key = cls.key
        self.routes = cls.routes

    def __getattr__(self, name: str) -> typing.Any:
        if name.startswith('_'):
            raise AttributeError(name)
        window = self.window
        key = self.key

        def handler(
            rec: typing.Any, ts: int, cursor: typing.Any
        ) -> typing.Any:
            part = window.slice_at(ts)
            if part is None:
                return None
            return getattr(part.sections[key], name)(rec, ts, cursor)

        return handler


class Window:
    """The rules' inputs over the last ``window_us`` of input time
    (module doc); ``opts``: ``pipeline.Options`` of the follower."""

    def __init__(
        self,
        window_us: int,
        opts: typing.Any,
        max_requests: int = 50_000,
        slices: int = SLICES,
        sliding: bool = True,
    ) -> None:
        # False (``--once``): one slice, the whole input, nothing
        # dropped (the memory of the batch report, as ``--once``'s)
        self.sliding = sliding
        self.window_us = max(int(window_us), 1)
        self.nslices = max(int(slices), 1)
        self.slice_us = max(self.window_us // self.nslices, 1)
        self.per_slice = max(int(max_requests) // self.nslices, 1)
        self.ctx = base.Context(None, None, opts)
        self.opts = opts
        # slice number (time // slice_us): Slice
        self.slices: dict = {}
        # the first slice still kept (those before were dropped)
        self.first: typing.Optional[int] = None
        self.processes = processes.Processes(self.ctx)
        # the reader's consumers and the request model's hook
        self.consumers = (self.processes,) + tuple(
            Slot(self, cls) for cls in WINDOWED
        )
        self.dropped = 0
        self.before = 0
        self.evaluations = 0
        # the last evaluation's findings (``rules`` dicts)
        self.found: list = []
        self.checked: list = []

    # -- what is read ------------------------------------------------------

    def slice_at(self, ts: int, clamp: bool = False) -> typing.Optional[Slice]:
        """The slice of time ``ts``; None when it was dropped (or, with
        ``clamp``, the oldest slice kept)."""
        n = ts // self.slice_us if self.sliding else 0
        if self.first is not None and n < self.first:
            if not clamp:
                self.before += 1
                return None
            n = self.first
        part = self.slices.get(n)
        if part is None:
            part = self.slices[n] = Slice(self.ctx)
            if self.sliding and len(self.slices) > self.nslices + 2:
                # (a time far ahead of the others': the oldest go)
                for old in sorted(self.slices)[: -(self.nslices + 2)]:
                    self._drop(old)
        return part

    def finished(self, done: typing.Any) -> None:
        """The request model's hook: a finalised request's failure
        rows, in the slice of its end (``request``)."""
        part = self.slice_at(done.summary.end, clamp=True)
        if part is not None:
            part.sections['failures'].finished(done)

    def request(self, s: typing.Any) -> None:
        """A finished request, marked (``damage.mark``), in the slice
        of its end, or the oldest slice kept when that one was dropped
        (a request finalised long after its end: ``--hung``): a request
        is in the window from the time it is known."""
        part = self.slice_at(s.end, clamp=True)
        if part is None:
            return
        if self.sliding and len(part.requests) >= self.per_slice:
            self.dropped += 1
            return
        part.requests.append(Kept(s))

    def advance(self, watermark: int) -> None:
        """Drop the slices that ended before ``watermark`` less the
        window; forget the oldest process starts past
        ``MAX_PROCESSES``."""
        first = (watermark - self.window_us) // self.slice_us
        if self.sliding and (self.first is None or first > self.first):
            self.first = first
            for n in [n for n in self.slices if n < first]:
                self._drop(n)
        rows = self.processes.rows
        if self.sliding and len(rows) > MAX_PROCESSES:
            del rows[: len(rows) - MAX_PROCESSES]

    def _drop(self, n: int) -> None:
        self.slices.pop(n, None)
        if self.first is None or n >= self.first:
            self.first = n + 1

    # -- the rules ---------------------------------------------------------

    def requests(self) -> list:
        """The requests of the window, in the batch report's order."""
        out = [k for part in self.slices.values() for k in part.requests]
        out.sort(key=lambda s: (s.start, s.req))
        return out

    def view(self) -> base.View:
        """The ``base.View`` of the window: the sections the rules read,
        merged over the slices (on copies), and its requests."""
        parts: dict = {cls.key: cls(self.ctx) for cls in WINDOWED}
        for n in sorted(self.slices):
            for key, section in self.slices[n].sections.items():
                parts[key].merge(copy.deepcopy(section))
        parts['processes'] = self.processes
        return base.View.of_parts(
            parts, summaries=self.requests(), opts=self.opts
        )

    def evaluate(self) -> list:
        """Run the rules over the window; its findings."""
        section = self.view()['findings']
        self.found = section['findings']
        self.checked = section['rules']
        self.evaluations += 1
        return self.found

    # -- the exposition ----------------------------------------------------

    def series(self) -> dict:
        """``{family: {labels: value}}`` of the window (``exposition``'s
        ``FINDING`` families)."""
        held, share, value = finding_series(self.found)
        kept = exposition.capped(held)
        out = {
            exposition.FINDING: kept,
            exposition.FINDING_SHARE: {
                k: v for k, v in share.items() if k in kept
            },
            exposition.FINDING_VALUE: {
                k: v for k, v in value.items() if k in kept
            },
            exposition.FINDINGS_EVALUATIONS: {(): self.evaluations},
            exposition.FINDINGS_REQUESTS: {
                (): sum(len(p.requests) for p in self.slices.values())
            },
            exposition.FINDINGS_WINDOW: {(): self.window_us / 1e6},
            exposition.FINDINGS_DROPPED: {
                ('requests_past_cap',): self.dropped,
                ('before_window',): self.before,
            },
        }
        return out


def _number(value: typing.Any) -> typing.Optional[float]:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def finding_series(found: typing.Iterable) -> tuple:
    """``(held, share, value)``: ``{(rule, section, option, host,
    service): ...}`` of findings (``rules`` dicts): 1 per setting a
    finding names and service that ran with it (host and service empty
    when it names none), the finding's share (the largest of the
    findings of that label set) and the value the service ran with
    (numbers and booleans only)."""
    held: dict = {}
    share: dict = {}
    value: dict = {}
    for f in found:
        sure = (f.get('sure') or {}).get('share') or 0.0
        for s in f.get('settings') or ():
            rows = s.get('values') or [{}]
            for v in rows:
                key = (
                    str(f['rule']),
                    str(s['section']),
                    str(s['option']),
                    str(v.get('host') or ''),
                    str(v.get('svc') or ''),
                )
                held[key] = 1
                share[key] = max(share.get(key, 0.0), float(sure))
                number = _number(v.get('value')) if v.get('recorded') else None
                if number is not None:
                    value[key] = number
    return held, share, value
