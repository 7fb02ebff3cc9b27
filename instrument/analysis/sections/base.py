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
"""The ``Section`` protocol: one part of the report, end to end.

A section owns one key of the report dict (``Section.key``) and
everything about it:

* **the records it reads** (``routes``: ``analysis.routes.Route``): by
  phase, event and what the record's request id says it belongs to;
  pass 2's reader (``ingest.reader``) gives each record to the handlers
  whose routes take it, and knows no event name itself;
* **the finished requests it reads** (``finished``): the request model
  (``model.requests.Assembler``) hands each request it finalises
  (``model.requests.Done``) to every section that defines it;
* **its partial state**: one instance per worker of pass 2, made with
  a ``Context``; the workers' instances are added up by ``merge``
  into one made for the merge;
* **its value in the report** (``report``), from its merged state and
  the shared ``View`` (the requests, the losses, the clocks, and the
  other sections' values, ``view[key]``);
* **how it is shown** (``text``, ``html``, ``compare``,
  ``compare_text``): functions of report dicts only (a run read back
  from a JSON report is rendered and compared the same way), keyed by
  section; ``registry`` says where each form shows it.

A section that needs none of these leaves it as defined here.  The
``registry`` lists every section once; the reader, the merge, the
report, the JSON, text and HTML writers and ``compare`` iterate it.
"""

import bisect
import typing


def keep_best(kept: list, item: typing.Any, n: int) -> bool:
    """Keep ``item`` in ``kept`` (sorted, at most ``n`` items, each
    once) if it is among the ``n`` smallest; whether it is.

    A section's examples are picked by a total key of the example (a
    figure, then the request's start and id), never by the order the
    records arrived in: a worker's ``merge`` keeps the same ones as a
    single pass, whatever the partition (``-j``)."""
    if item in kept:
        return True
    if len(kept) >= n and not item < kept[-1]:
        return False
    bisect.insort(kept, item)
    if len(kept) > n:
        kept.pop()
    return True


def merge_best(kept: list, other: typing.Iterable, n: int) -> None:
    """``keep_best`` of each of ``other``'s items."""
    for item in other:
        keep_best(kept, item, n)


class Context:
    """What a section's state is made with: the ``--since``/``--until``
    window, on the corrected clock (None: open), and the options
    (``pipeline.Options``: plain values)."""

    def __init__(
        self,
        since: typing.Optional[int] = None,
        until: typing.Optional[int] = None,
        opts: typing.Any = None,
    ) -> None:
        self.since = since
        self.until = until
        self.opts = opts


class Page:
    """What a form's sections share while it is made: the HTML page's
    ``title`` and the colours given to components outside the palette,
    in the order they were first drawn (``render.views.color``); the
    text report's count of SQL class blocks (``sql_blocks``) and the
    terms its legends defined so far (``defined``:
    ``render.glossary.legend_lines``)."""

    def __init__(
        self, title: str = 'instrument-report', sql_blocks: int = 5
    ) -> None:
        self.title = title
        self.sql_blocks = sql_blocks
        self.extra: dict = {}
        self.defined: set = set()


class Comparing(typing.NamedTuple):
    """What ``compare`` gives each section's ``compare``: the
    significance level, the number of top rows of a table, and its test
    of two samples (``p_value(a, b)``: the p-value of their being
    alike, None for too few values)."""

    alpha: float
    top: int
    p_value: typing.Callable[[list, list], typing.Optional[float]]


class Section:
    """One part of the report (see the module's doc)."""

    # the report dict's key this section makes
    key: typing.ClassVar[str] = ''
    # the records it reads
    routes: typing.ClassVar[tuple] = ()

    def __init__(self, ctx: Context) -> None:
        """A worker's (or the merge's) empty state."""

    def finished(self, done: typing.Any) -> typing.Optional[bool]:
        """A request the model finalised; False: its lifecycle is not
        to be kept (``sections.timelines``)."""
        return None

    def merge(self, other: typing.Self) -> None:
        """Add another worker's state (of this section) to this one."""

    def report(self, view: 'View') -> typing.Any:
        """This section's value in the report dict (JSON-ready)."""
        raise NotImplementedError

    # -- forms: functions of report dicts (``registry`` places them) -----

    @staticmethod
    def text(report: dict, page: Page) -> list:
        """The text report's lines for this section."""
        return []

    @staticmethod
    def html(report: dict, page: Page) -> list:
        """The HTML report's parts for this section."""
        return []

    @staticmethod
    def compare(a: dict, b: dict, how: Comparing) -> dict:
        """The comparison's keys for this section (runs ``a``, ``b``)."""
        return {}

    @staticmethod
    def compare_text(cmp: dict, reminder: list) -> list:
        """The comparison's lines for this section; ``reminder``: the
        lines that say a run's input had losses."""
        return []


def defines(section: typing.Any, name: str) -> bool:
    """Does ``section`` (a class or an instance) define ``name`` itself
    (not ``Section``'s default)?"""
    cls = section if isinstance(section, type) else type(section)
    return getattr(cls, name) is not getattr(Section, name)


class View:
    """What every section's ``report`` reads.

    Of the merged pass 2: ``summaries`` (the finished requests, sorted
    by start), ``loss`` and ``issues`` (the input's:
    ``ingest.losses``), ``lines`` and ``records`` read, the spans read
    twice (``duplicate_spans``), the records of no request per event
    (``no_request``), the requests outside ``--since``/``--until``
    (``outside``), when the processes that lost records lost them
    (``windows``: ``FileLoss.windows``) and the requests that a loss may
    have touched (``marked``: ``model.damage.mark``); of pass 1: the
    clock table (``clock_table``: a host
    none of whose records was valid left out) and ``hops``; the
    options (``opts``), the inputs (``paths``, ``total_bytes``), the
    first request's start (``first_us``) and the window (``since``,
    ``until``).  Each section's merged state is ``part(key)``, its
    report value ``view[key]`` (computed once, on first use: a section
    may read another's), or made by another process (``elsewhere``).
    """

    def __init__(
        self,
        parts: dict,
        *,
        summaries: list,
        loss: typing.Any,
        issues: typing.Any,
        opts: typing.Any,
        clock_table: dict,
        hops: dict,
        paths: list,
        total_bytes: int,
        lines: int,
        records: int,
        first_us: typing.Optional[int],
        since: typing.Optional[int],
        until: typing.Optional[int],
        outside: int,
        duplicate_spans: int,
        no_request: typing.Mapping[str, int],
        windows: typing.Optional[dict] = None,
        marked: typing.Sequence = (),
    ) -> None:
        self.parts = parts
        self.windows = windows or {}
        self.marked = marked
        self.summaries = summaries
        self.loss = loss
        self.issues = issues
        self.opts = opts
        self.clock_table = clock_table
        self.hops = hops
        self.paths = paths
        self.total_bytes = total_bytes
        self.lines = lines
        self.records = records
        self.first_us = first_us
        self.since = since
        self.until = until
        self.outside = outside
        self.duplicate_spans = duplicate_spans
        self.no_request = no_request
        self._values: dict = {}
        self._making: set = set()
        self._elsewhere: frozenset = frozenset()
        self._fetch: typing.Optional[typing.Callable[[], dict]] = None

    @classmethod
    def of_parts(
        cls,
        parts: dict,
        summaries: list,
        opts: typing.Any = None,
    ) -> 'View':
        """A view of merged section states and requests alone, with no
        input read (no files, losses, clocks or window): what follow
        mode's findings window and tests build."""
        return cls(
            parts,
            summaries=summaries,
            loss=None,
            issues=None,
            opts=opts,
            clock_table={},
            hops={},
            paths=[],
            total_bytes=0,
            lines=0,
            records=0,
            first_us=None,
            since=None,
            until=None,
            outside=0,
            duplicate_spans=0,
            no_request={},
        )

    def elsewhere(
        self, keys: typing.Iterable[str], fetch: typing.Callable[[], dict]
    ) -> None:
        """The values of sections ``keys`` are being made by another
        process (of this view, forked): ``fetch()`` waits for them and
        returns ``{key: value}``, called once, on the first use of any;
        a key it does not return is made here, as any other."""
        self._elsewhere = frozenset(keys)
        self._fetch = fetch

    def part(self, key: str) -> typing.Any:
        """The merged state of section ``key``."""
        return self.parts[key]

    def __getitem__(self, key: str) -> typing.Any:
        if key not in self._values and key in self._elsewhere:
            fetch = typing.cast(typing.Callable[[], dict], self._fetch)
            self._elsewhere = frozenset()
            self._fetch = None
            self._values.update(fetch())
        if key not in self._values:
            if key in self._making:
                raise RuntimeError(
                    'sections read each other in a '
                    'cycle: %s' % ', '.join(self._making)
                )
            self._making.add(key)
            try:
                self._values[key] = self.parts[key].report(self)
            finally:
                self._making.discard(key)
        return self._values[key]
