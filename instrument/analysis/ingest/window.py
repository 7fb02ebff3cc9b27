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
"""The time window of ``--since`` and ``--until``.

A report limited to a window counts the requests that *started* in it
(each with all its spans and SQL, also after ``--until``), the SQL
statements that started in it (``sql.agg`` aggregates by the start of
their interval) and the DB retries that happened in it.  The clock
offsets and the input checks always use the whole input.  Times are on
the corrected clock; ``since`` is included, ``until`` is not.

``check`` refuses what can be refused before reading (unreadable
times, an empty window); ``resolve`` turns the options into a
``Window`` once the time of the first request's start (the start of
the run, corrected) is known, from which ``+10m`` counts.
"""

import datetime
import typing

Time = typing.Union[None, int, str]


class Window:
    """``[since, until)`` in microseconds; either end may be open."""

    __slots__ = ('since', 'until')

    def __init__(
        self,
        since: typing.Optional[int] = None,
        until: typing.Optional[int] = None,
    ) -> None:
        self.since = since
        self.until = until

    def __bool__(self) -> bool:
        return self.since is not None or self.until is not None

    def contains(self, ts: int) -> bool:
        """Is ``ts`` (microseconds, corrected clock) in the window?"""
        return (self.since is None or ts >= self.since) and (
            self.until is None or ts < self.until
        )

    def to_dict(self) -> dict:
        return {'since_us': self.since, 'until_us': self.until}


def _relative(value: Time) -> bool:
    return isinstance(value, str) and value.strip().startswith('+')


def _parse(
    value: Time, start_us: typing.Optional[int]
) -> typing.Optional[int]:
    if value is None or isinstance(value, int):
        return value
    if start_us is None and _relative(value):
        raise ValueError(
            '%s is counted from the first request, and the '
            'input has none: give an absolute time' % value
        )
    try:
        return parse_time(value, start_us)
    except ValueError:
        raise ValueError(
            'cannot read time %r (use ISO 8601, epoch seconds or +10m)' % value
        ) from None


def _empty(since: Time, until: Time) -> ValueError:
    return ValueError(
        '--since %s is not before --until %s: the window '
        'is empty' % (since, until)
    )


def check(since: Time, until: Time) -> None:
    """ValueError for a time that cannot be read, or for ``since`` not
    before ``until`` when that is known before reading (both absolute,
    or both relative to the first event)."""
    for value in (since, until):
        _parse(value, 0)
    if since is None or until is None:
        return
    if _relative(since) != _relative(until):
        return  # known once the first request's start is
    start = 0 if _relative(since) else None
    a, b = _parse(since, start), _parse(until, start)
    if a is not None and b is not None and a >= b:
        raise _empty(since, until)


def resolve(
    since: Time, until: Time, first_us: typing.Optional[int]
) -> Window:
    """The window of the options, ``+DURATION`` counted from
    ``first_us`` (the first request's start, corrected); ValueError when it is
    empty or cannot be placed."""
    a = _parse(since, first_us)
    b = _parse(until, first_us)
    if a is not None and b is not None and a >= b:
        raise _empty(since, until)
    return Window(a, b)


def parse_time(value: str, start_us: typing.Optional[int] = None) -> int:
    """``--since``/``--until``: ISO 8601 time, epoch seconds, or
    ``+DURATION`` (``s``/``m``/``h``/``d``) after the first event."""
    value = value.strip()
    if value.startswith('+'):
        units = {'s': 1, 'm': 60, 'h': 3600, 'd': 86400}
        unit = value[-1]
        number = value[1:-1] if unit in units else value[1:]
        secs = float(number) * units.get(unit, 1)
        if start_us is None:
            raise ValueError('relative time needs the start of the input')
        return start_us + int(secs * 1e6)
    try:
        return int(float(value) * 1e6)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            'cannot read time %r (use ISO 8601, epoch seconds or +10m)' % value
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1e6)
