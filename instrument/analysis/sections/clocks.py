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
"""``clocks``: each host's clock offset, and how sure it is.

Pass 1 (``ingest.clockpass``) matches RPC sends and dispatches across
hosts and solves the offsets (``model.clocks``): per host the offset
added to its timestamps, the feasible interval the pairs give
(``low_us``, ``high_us``: every offset the bounds allow, against the
group's reference), its width, how far the offset can be from the
truth (``error_us``), the hops that make each end of the interval
(``low_by``, ``high_by``), its group and pairs, its status
(reference, corrected, one-sided, uncorrected), the pairs dropped as
inconsistent and the hops seen (``hops``).  A host whose every record
was rejected is left out (the input problems say so).  The text form
adds what the offsets mean and the causality checks (``causality``).
"""

import typing

from instrument.analysis.render import fmt
from instrument.analysis.sections import base

# what each kind of bound says (model.clocks.SEND, REPLY)
KINDS = {'send': 'start', 'reply': 'reply'}


class Clocks(base.Section):
    """``report['clocks']``."""

    key = 'clocks'

    def report(self, view: base.View) -> dict:
        return dict(view.clock_table, hops=view.hops)

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        return text_lines(report)

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return html_parts(report)


def interval(info: dict) -> str:
    """A host's feasible interval, ``low .. high`` (``-inf``/``+inf``
    for a side without a bound)."""
    low, high = info['low_us'], info['high_us']
    return '%s .. %s' % (
        '-inf' if low is None else fmt.fmt_offset(low),
        '+inf' if high is None else fmt.fmt_offset(high),
    )


def hops_text(hops: typing.Optional[list]) -> str:
    """The bounds of one end of an interval: ``parent->child kind
    (file:line)`` each, joined by ``+``."""
    if not hops:
        return '-'
    out = []
    for h in hops:
        origin: typing.Sequence = h.get('origin') or ()
        where = ' (%s:%s)' % (origin[0], origin[1]) if len(origin) >= 2 else ''
        out.append(
            '%s->%s %s%s'
            % (h['parent'], h['child'], KINDS.get(h['kind'], h['kind']), where)
        )
    return ' + '.join(out)


def text_lines(report: dict) -> list:
    """The text report's clock offsets, and the causality checks."""
    out: list = []
    clk = report['clocks']
    out.extend(fmt.title('Clock offsets (added to each host\'s timestamps)'))
    rows = []
    bounded = []
    for host, info in sorted(clk['hosts'].items()):
        status = info['status']
        if status == 'uncorrected':
            spread = 'no causal pairs'
        elif status == 'reference':
            spread = 'reference'
        else:
            spread = interval(info)
            bounded.append((host, info))
        rows.append(
            (
                host,
                fmt.fmt_offset(info['offset_us']),
                spread,
                fmt.fmt_us(info.get('width_us'))
                if status != 'reference'
                else '-',
                fmt.fmt_us(info.get('error_us'))
                if status != 'reference'
                else '-',
                '-' if info['group'] is None else info['group'],
                info['pairs'],
                status,
            )
        )
    out.extend(
        fmt.table(
            [
                'host',
                'offset',
                'feasible interval',
                'width',
                'error <=',
                'group',
                'pairs',
                'status',
            ],
            rows,
            'lrlrrrrl',
        )
    )
    out.append(
        '%d causal pairs from %d hops, %d group(s)'
        % (clk['pairs'], clk['hops']['hops'], clk['groups'])
    )
    out.extend(clock_notes(clk))
    if bounded:
        out.append(
            'what bounds each interval (start: a dispatch starts '
            'after its send; reply: a call\'s dispatch ends before '
            'the call; the file and line of the dispatch):'
        )
        for host, info in bounded:
            out.append(
                '  %s >= %s: %s'
                % (
                    host,
                    '-inf'
                    if info['low_us'] is None
                    else fmt.fmt_offset(info['low_us']),
                    hops_text(info.get('low_by')),
                )
            )
            out.append(
                '  %s <= %s: %s'
                % (
                    ' ' * len(host),
                    '+inf'
                    if info['high_us'] is None
                    else fmt.fmt_offset(info['high_us']),
                    hops_text(info.get('high_by')),
                )
            )
    for d in clk['dropped']:
        origin = d['origin']
        out.append(
            '! inconsistent pair dropped: %s (%s:%s %s)'
            % (d['reason'], origin[0], origin[1], origin[2] or '')
        )
    caus = report['causality']
    if caus['violations']:
        out.append(
            '! %d of %d cross-host hops still violate causality '
            'after correction' % (caus['violations'], caus['checked'])
        )
    return out


def clock_notes(clk: dict) -> list:
    """What the offsets are and which figures depend on them."""
    hosts = clk['hosts']
    errors = sorted(
        (
            i['error_us']
            for i in hosts.values()
            if i['status'] == 'corrected' and i.get('error_us') is not None
        ),
        reverse=True,
    )
    refs = sorted(h for h, i in hosts.items() if i['status'] == 'reference')
    out = [
        'feasible interval: every offset the causal pairs allow the '
        'host against the reference (%s), whatever the other hosts\' '
        'offsets; it holds the true offset.  offset: the interval\'s '
        'centre, the narrowest intervals first (a host tied closely to '
        'one placed before stays beside it); not the raw clock, so a '
        'clock shifted by any amount is corrected by that amount.  '
        'error <=: how far the offset can be from the truth (the same '
        'spans fit any offset in the interval, with other latencies).  '
        'Times between hosts (rpc, rpc.queue, the critical path, '
        'causality checks) depend on the offsets%s'
        % (
            ', '.join(refs) or 'none',
            ': each is uncertain by up to the errors of its two hosts '
            'added (largest here %s and %s)'
            % (
                fmt.fmt_us(errors[0]),
                fmt.fmt_us(errors[1] if len(errors) > 1 else 0),
            )
            if errors
            else '',
        )
    ]
    one = sorted(h for h, i in hosts.items() if i['status'] == 'one-sided')
    if one:
        out.append(
            '! bounded on one side only: %s (its one end is taken, '
            'as if the fastest hop had taken no time; a clock off '
            'in the other direction is not seen; times across '
            'these hosts may be wrong)' % ', '.join(one)
        )
    none = sorted(h for h, i in hosts.items() if i['status'] == 'uncorrected')
    if none and len(none) < len(hosts):
        out.append(
            '! no causal pairs: %s (their raw clocks are used '
            'as they are)' % ', '.join(none)
        )
    return out


def html_parts(report: dict) -> list:
    """The HTML report's clock offsets and the pairs dropped."""
    esc = fmt.esc
    table = fmt.html_table
    offset = fmt.fmt_offset
    out: list = []
    clk = report['clocks']
    out.append('<h2>Clock offsets</h2>')
    rows = []
    for h, i in sorted(clk['hosts'].items()):
        ref = i['status'] == 'reference'
        rows.append(
            (
                h,
                offset(i['offset_us']),
                '-' if i['low_us'] is None else offset(i['low_us']),
                '-' if i['high_us'] is None else offset(i['high_us']),
                '-' if ref else fmt.fmt_us(i.get('width_us')),
                '-' if ref else fmt.fmt_us(i.get('error_us')),
                '-' if i['group'] is None else i['group'],
                i['pairs'],
                i['status'],
                '-'
                if ref or i['status'] == 'uncorrected'
                else 'low: %s; high: %s'
                % (hops_text(i.get('low_by')), hops_text(i.get('high_by'))),
            )
        )
    out.append(
        table(
            [
                'host',
                'offset',
                'low',
                'high',
                'width',
                'error <=',
                'group',
                'pairs',
                'status',
                'bounded by',
            ],
            rows,
            left=(0, 8, 9),
        )
    )
    out.append('<p>%s</p>' % esc(clock_notes(clk)[0]))
    for d in clk['dropped']:
        out.append(
            '<p class="bad">inconsistent pair dropped: %s (%s)</p>'
            % (esc(d['reason']), esc(d['origin']))
        )
    return out
