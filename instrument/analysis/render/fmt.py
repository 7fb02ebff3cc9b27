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
"""Formatting shared by every form of the report: the leaf of the
analyser's modules (it imports none of them).

Numbers in pt-query-digest's units (``fmt_us``: ``850us``, ``12ms``,
``3s``), shares, times and clock offsets; plain-text tables
(``table``); lists that would grow with the cloud cut to a few examples
(``some``); text cut after a whole word (``clip_words``); and the HTML
escaping and table every HTML part uses (``esc``, ``html_table``).
"""

import datetime
import html
import os
import typing

from instrument.analysis.render import glossary


def fmt_us(us: typing.Optional[float]) -> str:
    """pt-query-digest style durations: ``850us``, ``12ms``, ``3s``."""
    if us is None:
        return '-'
    us = float(us)
    if abs(us) < 1000:
        return '%dus' % round(us)
    if abs(us) < 1_000_000:
        ms = us / 1000
        return ('%.1fms' % ms) if abs(ms) < 10 else '%dms' % round(ms)
    s = us / 1e6
    return ('%.2fs' % s) if abs(s) < 10 else '%.1fs' % s


def fmt_offset(us: float) -> str:
    """A clock offset in ms with microsecond precision."""
    return '%+.3fms' % (us / 1000.0)


def fmt_pct(value: typing.Optional[float]) -> str:
    """A share as a percentage with one decimal (``-`` for none)."""
    return '-' if value is None else '%.1f%%' % (100.0 * value)


def clip_words(
    text: str,
    width: int,
    seps: str = ' ',
    ellipsis: str = '...',
    hard: bool = True,
) -> str:
    """``text`` in at most ``width`` characters: whole, or cut after the
    last complete word that fits (words end at a character of ``seps``)
    followed by ``ellipsis``; a first word longer than the room is cut
    short with the ellipsis (empty instead when not ``hard``).  Empty
    when not even the ellipsis fits."""
    text = ' '.join(str(text).split())
    if len(text) <= width:
        return text
    room = width - len(ellipsis)
    if room <= 0:
        return ''
    cut = max(text.rfind(sep, 0, room + 1) for sep in seps)
    if cut <= 0:
        return text[:room] + ellipsis if hard else ''
    return text[:cut].rstrip() + ellipsis


def clip_distinct(
    texts: typing.Sequence[str], width: int, most: int = 400
) -> list:
    """Each of ``texts`` cut as ``clip_words`` cuts it at ``width``,
    except where what is left of it could be another of the texts: that
    one is cut where it differs from every other (up to ``most``
    characters), so two ``DBDuplicateEntry`` messages that differ only
    in the column named at their end read as two."""
    texts = [' '.join(str(t).split()) for t in texts]
    out = []
    for text in texts:
        cut = clip_words(text, width)
        kept = cut[:-3] if cut.endswith('...') else None
        others = [t for t in texts if t != text]
        if kept is not None and any(t.startswith(kept) for t in others):
            common = max(len(os.path.commonprefix([text, t])) for t in others)
            cut = clip_words(text, min(max(width, common + 24), most))
        out.append(cut)
    return out


def fmt_change(change: typing.Optional[float]) -> str:
    """A relative change as a signed percentage (``-`` for none)."""
    return '-' if change is None else '%+.1f%%' % (100 * change)


def fmt_time(us: typing.Optional[int]) -> str:
    """Microseconds since the epoch as a UTC time to the millisecond."""
    if not us:
        return '-'
    return datetime.datetime.fromtimestamp(us / 1e6, datetime.UTC).strftime(
        '%Y-%m-%d %H:%M:%S.%f'
    )[:-3]


def title(text: str) -> list:
    """The lines that open a section of the text report."""
    return ['', text, '=' * len(text)]


def table(
    headers: list,
    rows: typing.Iterable[typing.Sequence],
    aligns: typing.Optional[str] = None,
) -> list:
    """The lines of a plain-text table: a header line, a rule and one
    line per row.  ``aligns`` has one letter per column, ``l`` (left) or
    ``r`` (right); by default the first column is left-aligned, the
    others right-aligned (numbers)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    aligns = aligns or ('l' + 'r' * (len(headers) - 1))

    def line(row):
        out = []
        for i, c in enumerate(row):
            out.append(
                c.ljust(widths[i]) if aligns[i] == 'l' else c.rjust(widths[i])
            )
        return '  '.join(out).rstrip()

    return [line(headers), '  '.join('-' * w for w in widths)] + [
        line(r) for r in cells
    ]


# Lines that would grow with the cloud (one per process, host or
# file) show this many examples, then how many more; the JSON report
# keeps every one.
EXAMPLES = 3


def some(names: typing.Sequence, limit: int = EXAMPLES) -> str:
    """``a, b, c and 37 more``: the first ``limit`` of ``names``."""
    names = [str(n) for n in names]
    if len(names) <= limit:
        return ', '.join(names)
    return '%s and %d more' % (', '.join(names[:limit]), len(names) - limit)


def where_phrase(hosts: list) -> str:
    """``cmp-000`` or ``40 hosts (cmp-007, cmp-002, cmp-021 and 37
    more)``."""
    if len(hosts) == 1:
        return hosts[0]
    return '%d hosts (%s)' % (len(hosts), some(hosts))


def esc(value: typing.Any) -> str:
    return html.escape('' if value is None else str(value), quote=True)


def wrap_points(value: typing.Any) -> str:
    """``value`` escaped, with line-break opportunities after the dots
    and underscores of dotted names (``nova.exception.QuotaError``), so
    that a narrow column wraps between words, never inside one."""
    return esc(value).replace('.', '.<wbr>').replace('_', '_<wbr>')


def tip(text: typing.Optional[str]) -> str:
    """A ``title`` attribute (a tooltip) of ``text``, '' for None."""
    return ' title="%s"' % esc(text) if text else ''


def html_table(
    headers: typing.Sequence,
    rows: typing.Iterable[typing.Sequence],
    left: typing.Container[int] = (0,),
    terms: typing.Container[int] = (),
) -> str:
    """An HTML table: a header row, then ``rows``; the columns of
    ``left`` are text (left-aligned, dotted names may wrap), the others
    numbers; every cell escaped.  A header the glossary defines has its
    definition as a tooltip, and so has each cell of the columns of
    ``terms`` (component names)."""
    out = ['<table><tr>']
    for i, h in enumerate(headers):
        out.append(
            '<th class="%s"%s>%s</th>'
            % ('l' if i in left else '', tip(glossary.column(h)), esc(h))
        )
    out.append('</tr>')
    for row in rows:
        out.append('<tr>')
        for i, c in enumerate(row):
            out.append(
                '<td class="%s"%s>%s</td>'
                % (
                    'l' if i in left else '',
                    tip(glossary.term(str(c))) if i in terms else '',
                    wrap_points(c) if i in left else esc(c),
                )
            )
        out.append('</tr>')
    out.append('</table>')
    return ''.join(out)
