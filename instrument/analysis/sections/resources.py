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
"""``resources``: ``process.sample`` records beside the requests.

Each process's samples become a CPU rate (user + system seconds per
second between two samples: 1.0 is one core busy) and its RSS; a
service's figure is the sum over its processes (every host).  The run
is cut into phases by its requests: ``before`` the first request
started, ``load`` while requests ran, ``after`` the last one ended;
per service and phase the report gives the mean and peak of CPU and
RSS and the peaks of threads, open fds, DB connections checked out and
the library's own buffer fill and drops; and, over the whole run, the
CPU seconds of the library's writer thread beside the process's
(``library``).  The timeline (``series``)
puts the same figures in time buckets beside the requests in flight,
their median latency and the periodic tasks (``periodic.task`` spans)
that ran; the HTML report draws it, one chart per service.
"""

import bisect
import html
import statistics
import typing

from instrument import schema
from instrument.analysis import routes
from instrument.analysis.render import charts
from instrument.analysis.render import fmt
from instrument.analysis.sections import base

PHASES = ('before', 'load', 'after')
# Time buckets of the timeline, at most.
BUCKETS = 120
# Periodic task marks kept.
MAX_MARKS = 2000
# Request ids kept per periodic task run.
KEEP_REQUESTS = 5


class Samples:
    """``process.sample`` records and ``periodic.task`` spans of a pass
    (mergeable)."""

    def __init__(self) -> None:
        # (host, svc, pid): [(ts, attrs)]
        self.procs: dict = {}
        # (ts, dur, host, svc, task, st, req)
        self.marks: list = []

    def add(self, rec: typing.Any, ts: int) -> None:
        """A ``process.sample`` record at corrected time ``ts``."""
        self.procs.setdefault((rec.host, rec.svc, rec.pid), []).append(
            (ts, rec.attrs or {})
        )

    def periodic(self, rec: typing.Any, ts: int) -> None:
        """A ``periodic.task`` span (``X``) at corrected time ``ts``."""
        if len(self.marks) < MAX_MARKS:
            attrs = rec.attrs or {}
            self.marks.append(
                (
                    ts,
                    rec.dur_us,
                    rec.host,
                    rec.svc,
                    attrs.get(schema.ATTR_TASK),
                    rec.st,
                    rec.req,
                )
            )

    def merge(self, other: 'Samples') -> None:
        for key, samples in other.procs.items():
            self.procs.setdefault(key, []).extend(samples)
        self.marks.extend(other.marks[: MAX_MARKS - len(self.marks)])


def _points(samples: list) -> list:
    """Per sample after the first: (ts, cpu cores, rss MB, attrs)."""
    samples = sorted(samples, key=lambda s: s[0])
    out = []
    prev = None
    for ts, attrs in samples:
        cpu = None
        user = attrs.get(schema.ATTR_CPU_USER_S)
        sys_ = attrs.get(schema.ATTR_CPU_SYS_S)
        if prev is not None and user is not None and sys_ is not None:
            pts, puser, psys = prev
            if ts > pts and puser is not None and psys is not None:
                cpu = max(
                    0.0, ((user - puser) + (sys_ - psys)) / ((ts - pts) / 1e6)
                )
        prev = (ts, user, sys_)
        rss = attrs.get(schema.ATTR_RSS_KB)
        out.append((ts, cpu, rss / 1024.0 if rss is not None else None, attrs))
    return out


def _pool_in_use(attrs: dict):
    """Connections checked out over the process's engines; None when
    no pool counts them (sqlite's StaticPool, NullPool)."""
    pools = attrs.get(schema.ATTR_POOLS) or {}
    counts = [
        v[0]
        for v in pools.values()
        if isinstance(v, list) and v and isinstance(v[0], int)
    ]
    return sum(counts) if counts else None


def _phase(ts: int, start, end) -> str:
    if start is None or ts < start:
        return 'before'
    if ts <= end:
        return 'load'
    return 'after'


def _stat(values: list) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {'mean': None, 'peak': None}
    return {
        'mean': round(statistics.fmean(values), 3),
        'peak': round(max(values), 3),
    }


def report(samples: Samples, summaries: list) -> dict:
    """The ``resources`` section of the report."""
    if not samples.procs:
        return {}
    starts = [s.start for s in summaries]
    ends = [s.end for s in summaries]
    req_start = min(starts) if starts else None
    req_end = max(ends) if ends else None
    per_proc = {key: _points(v) for key, v in samples.procs.items()}
    all_ts = [p[0] for pts in per_proc.values() for p in pts]
    t0 = min(all_ts + starts)
    t1 = max(all_ts + ends)
    width = max(1, (t1 - t0) // BUCKETS + 1)
    nb = (t1 - t0) // width + 1
    services: dict = {}
    for (host, svc, pid), pts in per_proc.items():
        entry = services.setdefault(
            svc,
            {
                'processes': 0,
                'hosts': set(),
                'writer': [0.0, 0.0, 0],
                'cpu': [{} for _ in range(nb)],
                'rss': [{} for _ in range(nb)],
                'phase': {
                    ph: {
                        'cpu': [],
                        'rss': [],
                        'threads': [],
                        'fds': [],
                        'db_in_use': [],
                        'buf_fill': [],
                        'buf_drops': [],
                    }
                    for ph in PHASES
                },
            },
        )
        entry['processes'] += 1
        entry['hosts'].add(host)
        _library_cpu(entry['writer'], pts)
        for ts, cpu, rss, attrs in pts:
            b = (ts - t0) // width
            ph = entry['phase'][_phase(ts, req_start, req_end)]
            for name, value in (('cpu', cpu), ('rss', rss)):
                if value is not None:
                    acc = entry[name][b].setdefault((host, pid), [0.0, 0])
                    acc[0] += value
                    acc[1] += 1
            ph['threads'].append(attrs.get(schema.ATTR_THREADS))
            ph['fds'].append(attrs.get(schema.ATTR_FDS))
            ph['db_in_use'].append(_pool_in_use(attrs))
            ph['buf_fill'].append(attrs.get(schema.ATTR_BUF_FILL))
            ph['buf_drops'].append(attrs.get(schema.ATTR_BUF_DROPS))
    out_services = {}
    for svc, entry in sorted(services.items()):
        # A service's figure in a bucket: the sum over its processes of
        # each one's mean there (a process without a sample: nothing).
        cpu_series = [_sum_of_means(acc, 3) for acc in entry['cpu']]
        rss_series = [_sum_of_means(acc, 1) for acc in entry['rss']]
        phases = {}
        for ph in PHASES:
            idx = [
                b
                for b in range(nb)
                if _phase(t0 + b * width + width // 2, req_start, req_end)
                == ph
            ]
            data = entry['phase'][ph]
            if not data['threads']:  # no sample in this phase
                continue
            phases[ph] = {
                'cpu_cores': _stat([cpu_series[b] for b in idx]),
                'rss_mb': _stat([rss_series[b] for b in idx]),
                'threads_peak': _max(data['threads']),
                'fds_peak': _max(data['fds']),
                'db_in_use_peak': _max(data['db_in_use']),
                'buf_fill_peak': _max(data['buf_fill']),
                'buf_drops': _max(data['buf_drops']),
            }
        writer_s, process_s, measured = entry['writer']
        out_services[svc] = {
            'processes': entry['processes'],
            'hosts': sorted(entry['hosts']),
            'library': {
                'writer_cpu_s': round(writer_s, 3),
                'process_cpu_s': round(process_s, 3),
                'processes': measured,
            }
            if measured
            else None,
            'phases': phases,
            'series': {'cpu_cores': cpu_series, 'rss_mb': rss_series},
        }
    in_flight = [0.0] * nb
    latency: list = [[] for _ in range(nb)]
    for s in summaries:
        b0 = max(0, (s.start - t0) // width)
        b1 = min(nb - 1, (s.end - t0) // width)
        for b in range(b0, b1 + 1):
            lo = max(s.start, t0 + b * width)
            hi = min(s.end, t0 + (b + 1) * width)
            if hi > lo:
                in_flight[b] += (hi - lo) / width
        latency[b1].append(s.end - s.start)
    marks = sorted(samples.marks, key=lambda m: (m[0], m[2], m[4] or ''))
    overlapped = _overlapped(marks, summaries)
    return {
        'start_us': t0,
        'bucket_us': width,
        'buckets': nb,
        'requests_start_us': req_start,
        'requests_end_us': req_end,
        'in_flight': [round(v, 2) for v in in_flight],
        'latency_p50_us': [
            int(statistics.median(v)) if v else None for v in latency
        ],
        'services': out_services,
        'periodic': [
            {
                'ts_us': ts,
                'dur_us': dur,
                'host': host,
                'svc': svc,
                'task': task,
                'st': st,
                'overlapped': n,
                'requests': reqs,
            }
            for (ts, dur, host, svc, task, st, _req), (n, reqs) in zip(
                marks, overlapped, strict=True
            )
        ],
    }


def _library_cpu(acc: list, pts: list) -> None:
    """Adds to ``acc`` (writer s, process s, processes) a process's
    writer thread CPU seconds at its last sample that has them, and
    its own CPU seconds at that sample."""
    for _ts, _cpu, _rss, attrs in reversed(pts):
        writer = attrs.get(schema.ATTR_WRITER_CPU_S)
        if writer is None:
            continue
        acc[0] += writer
        acc[1] += (attrs.get(schema.ATTR_CPU_USER_S) or 0) + (
            attrs.get(schema.ATTR_CPU_SYS_S) or 0
        )
        acc[2] += 1
        return


def library_lines(res: dict) -> list:
    """One line per service whose samples give the library's writer
    thread's CPU."""
    out = []
    for svc, entry in res.get('services', {}).items():
        lib = entry.get('library')
        if not lib:
            continue
        share = (
            lib['writer_cpu_s'] / lib['process_cpu_s']
            if lib['process_cpu_s']
            else 0.0
        )
        out.append(
            '%s: %.2f s of CPU in the library\'s writer thread of '
            '%.2f s of the process%s (%.1f%%)'
            % (
                svc,
                lib['writer_cpu_s'],
                lib['process_cpu_s'],
                'es' if lib['processes'] > 1 else '',
                share * 100,
            )
        )
    return out


def _overlapped(marks: list, summaries: list) -> list:
    """Per periodic task run, ``(count, ids)`` of the requests that
    had a span on its host while it ran (its own request left out; at
    most ``KEEP_REQUESTS`` ids)."""
    ordered = sorted(summaries, key=lambda s: s.start)
    starts = [s.start for s in ordered]
    longest = max((s.end - s.start for s in ordered), default=0)
    out = []
    for ts, dur, host, _svc, _task, _st, req in marks:
        end = ts + (dur or 0)
        found = []
        count = 0
        lo = bisect.bisect_left(starts, ts - longest)
        hi = bisect.bisect_right(starts, end)
        for s in ordered[lo:hi]:
            if s.end >= ts and s.req != req and host in s.hosts:
                count += 1
                if len(found) < KEEP_REQUESTS:
                    found.append(s.req)
        out.append((count, found))
    return out


def _sum_of_means(acc: dict, digits: int):
    if not acc:
        return None
    return round(sum(total / n for total, n in acc.values()), digits)


def _max(values: list):
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None


def _fmt(value, scale: float = 1.0, digits: int = 2) -> str:
    if value is None:
        return '-'
    return '%.*f' % (digits, value * scale)


HEADERS = [
    'service',
    'phase',
    'CPU % mean',
    'CPU % peak',
    'RSS MB mean',
    'RSS MB peak',
    'threads',
    'fds',
    'DB conns',
    'buffer',
    'drops',
]


def _rows(res: dict) -> list:
    rows = []
    for svc, entry in res.get('services', {}).items():
        for ph in PHASES:
            p = entry['phases'].get(ph)
            if p is None:
                continue
            rows.append(
                [
                    svc,
                    ph,
                    _fmt(p['cpu_cores']['mean'], 100, 1),
                    _fmt(p['cpu_cores']['peak'], 100, 1),
                    _fmt(p['rss_mb']['mean'], 1, 1),
                    _fmt(p['rss_mb']['peak'], 1, 1),
                    _fmt(p['threads_peak'], 1, 0),
                    _fmt(p['fds_peak'], 1, 0),
                    _fmt(p['db_in_use_peak'], 1, 0),
                    _fmt(p['buf_fill_peak'], 1, 0),
                    _fmt(p['buf_drops'], 1, 0),
                ]
            )
    return rows


PERIODIC_HEADERS = [
    'service',
    'periodic task',
    'runs',
    'mean ms',
    'max ms',
    'requests',
    'e.g.',
]


def _periodic_summary(res: dict) -> list:
    tasks: dict = {}
    for m in res.get('periodic', ()):
        key = (m['svc'], m['task'] or '?')
        entry = tasks.setdefault(key, [0, 0, 0, 0, []])
        entry[0] += 1
        entry[1] += m['dur_us'] or 0
        entry[2] = max(entry[2], m['dur_us'] or 0)
        entry[3] += m.get('overlapped') or 0
        for req in m.get('requests') or ():
            if len(entry[4]) < 1 and req not in entry[4]:
                entry[4].append(req)
    return [
        [
            svc,
            task,
            str(n),
            '%.1f' % (total / n / 1000.0),
            '%.1f' % (peak / 1000.0),
            str(over),
            ', '.join(reqs) or '-',
        ]
        for (svc, task), (n, total, peak, over, reqs) in sorted(tasks.items())
    ]


class Resources(base.Section):
    """``report['resources']``: each service's CPU, memory, threads...
    before, under and after load, and over time."""

    key = 'resources'
    routes = (
        routes.Route(
            'C', frozenset((schema.EV_PROCESS_SAMPLE,)), routes.ALL, 'sample'
        ),
        routes.Route(
            'X', frozenset((schema.EV_PERIODIC_TASK,)), routes.ALL, 'mark'
        ),
    )

    def __init__(self, ctx: base.Context) -> None:
        self.samples = Samples()

    def sample(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.samples.add(rec, ts)

    def mark(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        self.samples.periodic(rec, ts)

    def merge(self, other: 'Resources') -> None:
        self.samples.merge(other.samples)

    def report(self, view: base.View) -> dict:
        return report(self.samples, view.summaries)

    @staticmethod
    def text(report: dict, page: base.Page) -> list:
        out: list = []
        text(report, out)
        return out

    @staticmethod
    def html(report: dict, page: base.Page) -> list:
        return [html_section(report)]


def text(report: dict, out: list) -> None:
    """The "Resources" section of the text report."""
    res = report.get('resources')
    if not res:
        return
    title = 'Resources per service (process.sample; CPU 100% = one core)'
    out.extend(['', title, '=' * len(title)])
    out.extend(
        fmt.table(HEADERS, _rows(res), aligns='ll' + 'r' * (len(HEADERS) - 2))
    )
    out.append(
        'phases: before the first request, load (requests running), '
        'after the last; peaks of threads, fds, DB connections '
        'checked out, buffer fill'
    )
    library = library_lines(res)
    if library:
        out.append(
            'the library\'s own cost, up to the last sample '
            '(encoding, aggregating, writing the records):'
        )
        out.extend('  ' + line for line in library)
    periodic = _periodic_summary(res)
    if periodic:
        out.append('')
        out.append('periodic tasks:')
        out.extend(
            '  ' + line
            for line in fmt.table(PERIODIC_HEADERS, periodic, aligns='llrrrrl')
        )
        out.append(
            '  requests: those with a span on the task\'s host while it ran'
        )


# -- HTML ---------------------------------------------------------------------


def _xs(res: dict) -> list:
    """The time of each bucket's centre, in seconds from the start."""
    width = res['bucket_us']
    return [round((b + 0.5) * width / 1e6, 6) for b in range(res['buckets'])]


def _marks(res: dict, svc: typing.Optional[str]) -> list:
    """The periodic tasks of ``svc`` (red) and the first request's start
    and the last one's end (grey), as ``charts.lines_chart`` marks."""
    t0 = res['start_us']
    marks = []
    if svc is not None:
        marks.extend(
            (
                (m['ts_us'] - t0) / 1e6,
                '%s (periodic task on %s): %s'
                % (
                    m['task'],
                    m.get('host') or '-',
                    fmt.fmt_us(m['dur_us'] or 0),
                ),
                '#d62728',
            )
            for m in res['periodic']
            if m['svc'] == svc
        )
    for t, what in (
        (res['requests_start_us'], 'first request started'),
        (res['requests_end_us'], 'last request ended'),
    ):
        if t is not None:
            marks.append(((t - t0) / 1e6, what, '#767676'))
    return marks


def _chart(res: dict, svc: typing.Optional[str]) -> str:
    """The charts of the requests (``svc`` None: in flight, median
    latency) or of a service (CPU, RSS), each with its axes."""
    xs = _xs(res)
    x_title = 'time since the first sample'
    marks = _marks(res, svc)
    if svc is None:
        flight = charts.lines_chart(
            [
                (
                    'requests in flight',
                    list(zip(xs, res['in_flight'], strict=True)),
                    '#4e79a7',
                )
            ],
            x_title,
            'requests in flight (mean)',
            y_what='in flight',
            marks=marks,
            height=180,
        )
        latency = charts.lines_chart(
            [
                (
                    'median latency of requests ending',
                    list(zip(xs, res['latency_p50_us'], strict=True)),
                    '#7b3294',
                )
            ],
            x_title,
            'median latency',
            y_unit='us',
            y_what='median latency',
            marks=marks,
            height=180,
        )
        return flight + latency
    series = res['services'][svc]['series']
    cpu = [None if v is None else v * 100 for v in series['cpu_cores']]
    out = charts.lines_chart(
        [('CPU', list(zip(xs, cpu, strict=True)), '#1f77b4')],
        x_title,
        'CPU',
        y_unit='% of one core',
        y_what='CPU',
        marks=marks,
        height=180,
    )
    out += charts.lines_chart(
        [('RSS', list(zip(xs, series['rss_mb'], strict=True)), '#c45a00')],
        x_title,
        'RSS',
        y_unit='MB',
        y_what='RSS',
        marks=marks,
        height=180,
    )
    return out


def html_section(report: dict) -> str:
    """The "Resources over time" section of the HTML report."""
    res = report.get('resources')
    if not res:
        return ''
    out = [
        '<h2>Resources over time</h2>',
        '<p>Per service, CPU (100% = one core, summed over its '
        'processes) and RSS from the processes\' own samples, over the '
        'requests in flight and their median latency; red lines are '
        'periodic tasks, grey lines the first request\'s start and '
        'the last one\'s end (hover a line or a point for its '
        'value).</p>',
        '<h3>requests</h3>',
        _chart(res, None),
    ]
    for svc in res['services']:
        out.append('<h3>%s</h3>' % html.escape(svc))
        out.append(_chart(res, svc))

    def cls(i):
        return ' class="l"' if i < 2 else ''

    head = ''.join(
        '<th%s>%s</th>' % (cls(i), html.escape(h))
        for i, h in enumerate(HEADERS)
    )
    out.append(
        '<table><tr>%s</tr>%s</table>'
        % (
            head,
            ''.join(
                '<tr>%s</tr>'
                % ''.join(
                    '<td%s>%s</td>' % (cls(i), html.escape(c))
                    for i, c in enumerate(row)
                )
                for row in _rows(res)
            ),
        )
    )
    periodic = _periodic_summary(res)
    if periodic:
        out.append(
            '<table><tr>%s</tr>%s</table>'
            % (
                ''.join(
                    '<th>%s</th>' % html.escape(h) for h in PERIODIC_HEADERS
                ),
                ''.join(
                    '<tr>%s</tr>'
                    % ''.join(
                        '<td%s>%s</td>'
                        % (
                            ' class="l"' if i in (0, 1, 6) else '',
                            html.escape(c),
                        )
                        for i, c in enumerate(row)
                    )
                    for row in periodic
                ),
            )
        )
    return '\n'.join(out)
