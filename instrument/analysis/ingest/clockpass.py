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
"""Pass 1 of the analysis: the RPC hops that date the hosts' clocks.

Only complete RPC spans are read (a substring test skips every other
line undecoded), with the ``api.*`` records that pair request ids to
rejoin (``aliases.Rejoin``).  Each dispatch is matched with
its send on another host within a horizon of input time, and the pairs
go to ``clocks.PairCollector``; ``clocks.solve`` turns them into offsets.
The dispatches of sends made by a periodic task run (a ``periodic-...``
request id; the start of such a send is read too) are noted for pass 2,
which reads what the other side did for them as the run's
(``HopMatcher._periodic``).
A span whose other half has not been read when the horizon passes
waits another horizon (up to ``MAX_WAITING`` spans, the oldest given
up first): the files are read in step by their raw clocks, so a host
whose clock is hours off is read hours "late", and its hops must still
be found.

With ``jobs`` > 1 the files are split between worker processes, each
reading only its own files and sending back, per chunk, the few RPC
spans found in it; the parent rebuilds the order in which one process
would have read the chunks (``stream.order``) and matches the spans in
that order, so the result is the same as with one process.  Memory is
bounded by the spans within the horizon and a few chunks in flight.

Asked to (``hashes``: pass 2 will split the requests between workers),
pass 1 also notes the ``crc32`` of each line's request id, four bytes a
line (``request_hashes``), so that pass 2's workers find their lines
without looking into the others' (``ingest.reader``).
"""

import array
import collections
import itertools
import json
import multiprocessing
import os
import queue as queue_mod
import traceback
import typing
import zlib

from instrument import _native
from instrument import schema
from instrument.analysis.ingest import aliases as aliases_mod
from instrument.analysis.ingest import codec
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream
from instrument.analysis.model import clocks

CALL = 'rpc.call'
SENDERS = frozenset((CALL, 'rpc.cast'))
API_REQUEST = schema.EV_API_REQUEST
# (pass 1's tuple of an api.* span under an api.request span)
API_CHILD = 'api.child'
# chunks a worker sends at once, and batches waiting in its queue
BATCH = 16
QUEUED = 8
# RPC spans waiting for their other half beyond the horizon, at most
MAX_WAITING = 1 << 18
PERIODIC = schema.PERIODIC_REQ_PREFIX
# (pass 1's tuple of a periodic run's send read from its start)
PERIODIC_SEND = 'rpc.periodic'
# dispatches of periodic task runs' sends kept for pass 2, at most
MAX_PERIODIC_HOPS = 1 << 18
# a line's hash when pass 1 did not find its request id (pass 2 looks
# at the line itself; also the hash of a request id that has this
# crc32, which is then looked at too: the answer is the same)
NO_REQ = 0xFFFFFFFF
# request_hashes in C (instrument._native._scan), None: the twin only
_SCAN = _native.load('_scan') if array.array('I').itemsize == 4 else None


def request_hashes(lines: list) -> array.array:
    """``crc32`` of the request id of each line of ``lines``, found as
    pass 2 finds it (``reader.PartReader.chunk``: after the log marker
    of a service log line, up to its closing quote), ``NO_REQ`` for a
    line where none is found.  In C when built (``_native._scan``:
    the same values, five to ten times as fast); ``py_request_hashes``
    is its twin."""
    if _SCAN is not None:
        try:
            packed = _SCAN.request_hashes(lines)
        except TypeError:  # a line not of bytes: the twin decides
            return py_request_hashes(lines)
        out = array.array('I')
        out.frombytes(packed)
        return out
    return py_request_hashes(lines)


def py_request_hashes(lines: list) -> array.array:
    """``request_hashes`` in Python (the C helper's twin)."""
    out = array.array('I')
    append = out.append
    marker = spanfiles.LOG_MARKER
    crc32 = zlib.crc32
    for raw in lines:
        if raw[0] != 123:  # not '{'
            j = raw.find(marker)
            if j < 0:
                append(NO_REQ)
                continue
            raw = raw[j:]
        i = raw.find(b'"req":"')
        if i < 0:
            append(NO_REQ)
            continue
        i += 7
        j = raw.find(b'"', i, i + 256)
        append(crc32(raw[i : j if j > 0 else i + 40]))
    return out


def rpc_candidates(lines: list, ends: bool) -> typing.Optional[array.array]:
    """The indices of the lines of ``lines`` that ``rpc_spans`` may
    read, in order (``py_rpc_candidates`` says which), found in C
    (``_native._scan``); None when it is not built or refuses ``lines``:
    ``rpc_spans`` then looks at every line, its own tests skipping the
    same ones (in Python, one pass over the lines costs less than this
    filter and the loop over the lines it keeps)."""
    if _SCAN is None:
        return None
    try:
        packed = _SCAN.rpc_candidates(lines, ends)
    except TypeError:  # a line not of bytes: rpc_spans decides
        return None
    out = array.array('I')
    out.frombytes(packed)
    return out


def py_rpc_candidates(lines: list, ends: bool) -> list:
    """``rpc_candidates`` in Python (the C helper's twin): a line naming
    an RPC or ``api.*`` event or a ``process.start``, and with ``ends``
    an ``X`` record in the writer's key order without ``"ev":`` in its
    first 200 bytes (an end that lost its event name).  ``rpc_spans``
    skips the others whatever they hold."""
    rpc = b'"ev":"rpc.'
    api = b'"ev":"api.'
    started = b'"ev":"process.start"'
    xprefix = b'{"v":1,"ph":"X'
    return [
        k
        for k, raw in enumerate(lines)
        if rpc in raw
        or api in raw
        or started in raw
        or ends
        and raw.startswith(xprefix)
        and b'"ev":' not in raw[:200]
    ]


def rpc_span_decoder(
    fast_decode: bool = True,
) -> typing.Callable[[bytes], typing.Any]:
    """``decode(raw)``: ``(host, ev, ts, end, span, parent, req)`` of an
    ``X`` record usable for clocks, else None.  ``end`` is None for an
    ``rpc.call`` that did not get its reply (timed out: its dispatch
    may have ended after it).

    Pass 1 reads the RPC spans leniently (an invalid record is reported
    by pass 2 and may still date a hop): msgspec decodes the common
    case; what it refuses, and a record without a span id, is read as
    plain JSON with the same rules."""
    loads = codec.loads

    def lenient(raw):
        try:
            rec = loads(raw)
            # a record that lost its version or its phase (pass 2
            # repairs it the same way: codec.repair) still dates a hop
            if (
                rec.get('v', 1) != 1
                or rec.get('ph', 'X' if 'dur_us' in rec else 'B') != 'X'
            ):
                return None
            host = rec.get('host')  # (None: ``rpc_spans`` names it)
            ts = rec['ts']
            end = ts + rec['dur_us']
            ev = rec['ev']
            if ev == CALL and not _replied(rec.get('st'), rec.get('err')):
                end = None
            fields = (
                host,
                ev,
                ts,
                end,
                rec['span'],
                rec.get('parent'),
                rec.get('req'),
            )
        except (ValueError, KeyError, TypeError):
            return None
        if (
            host is not None
            and host.__class__ is not str
            or ts.__class__ is not int
            or end is not None
            and end.__class__ is not int
        ):
            return None
        return fields

    if not fast_decode or codec.msgspec is None:
        return lenient
    msgspec_decode = codec.msgspec.json.Decoder(codec.Record).decode

    def fast(raw):
        try:
            rec = msgspec_decode(raw)
        except Exception:  # noqa: BLE001 - the lenient path decides
            return lenient(raw)
        sid = rec.span
        if sid is None:  # absent and null differ for the lenient path
            return lenient(raw)
        if rec.ph != 'X' or rec.dur_us is None:
            return None
        ts = rec.ts
        ev = rec.ev
        if ev == CALL and rec.st != 'ok' and not _replied(rec.st, rec.err):
            return (rec.host, ev, ts, None, sid, rec.parent, rec.req)
        return (rec.host, ev, ts, ts + rec.dur_us, sid, rec.parent, rec.req)

    return fast


def _replied(st: typing.Any, err: typing.Any) -> bool:
    """Whether an ``rpc.call`` record got its reply (``clocks.
    reply_received``): without it, no bound from its end."""
    return clocks.reply_received(
        st, err.get('cls') if err.__class__ is dict else None
    )


def decode_prefixed(raw: bytes) -> typing.Any:
    """A line's JSON value (a service log line from its record marker
    on), or None."""
    if raw[:1] != b'{':
        j = raw.find(spanfiles.LOG_MARKER)
        if j < 0:
            return None
        raw = raw[j:]
    try:
        return codec.loads(raw)
    except ValueError:
        return None


def file_host(lines: list) -> typing.Optional[str]:
    """The host of the first record in ``lines`` that names one."""
    for raw in lines:
        rec = decode_prefixed(raw)
        if rec.__class__ is dict and isinstance(rec.get('host'), str):
            return rec['host']
    return None


def rpc_spans(
    lines: list,
    first: int,
    decode: typing.Callable[[bytes], typing.Any],
    begun: typing.Optional[dict] = None,
) -> list:
    """``(host, ev, ts, end, span, parent, req, lineno)`` of the complete
    RPC spans in a chunk, in line order, and of its ``process.start``
    records (``ev`` ``process.start``, the pid in place of ``end``: pass
    2 needs every process's start to know, wherever it reads a record,
    which process wrote it).  ``begun``: the file's ``{span id: event}``
    of the RPC spans whose start was read, kept by the caller from chunk
    to chunk: an end that lost its event name is read with its start's,
    as pass 2 repairs it."""
    out = []
    marker = spanfiles.LOG_MARKER
    prefix = b'{"v":1,"ph":"'
    rpc = b'"ev":"rpc.'
    started = b'"ev":"process.start"'
    # api.request, and the api.* spans under it (aliases.Rejoin)
    api = b'"ev":"api.'
    periodic = b'"req":"' + PERIODIC.encode()
    # (the lines that may matter: ``rpc_candidates``, else all)
    picked = rpc_candidates(lines, begun is not None)
    numbered = (
        enumerate(lines, first + 1)
        if picked is None
        else zip(
            map((first + 1).__add__, picked),
            map(lines.__getitem__, picked),
            strict=True,
        )
    )
    for lineno, raw in numbered:
        # (a B without its X adds nothing the X would not)
        # (a line cut short after the prefix, as a file cut by a crash
        # can end, is read as one without it: skipped)
        if raw.startswith(prefix) and len(raw) > 13:  # the writer's order
            ph = raw[13]
            if ph != 88:  # 'X'
                if ph == 77 and started in raw:  # 'M'
                    _add_start(out, raw, lineno)
                elif ph == 66:  # 'B'
                    if api in raw:
                        _add_api(out, raw, lineno)
                    elif rpc in raw:
                        if periodic in raw:
                            _add_periodic_send(out, raw, lineno)
                        if begun is not None:
                            _note_start(begun, raw)
                continue
            if rpc not in raw:
                if api in raw:
                    _add_api(out, raw, lineno)
                    continue
                # (the writer puts the event name in a line's first 200
                # bytes)
                if not begun or b'"ev":' in raw[:200]:
                    continue
                raw = _with_started_event(raw, begun)
                if raw is None:
                    continue
        else:
            if rpc not in raw:
                if started in raw:
                    _add_start(out, raw, lineno)
                elif api in raw:
                    _add_api(out, raw, lineno)
                continue
            if raw[:1] != b'{':
                j = raw.find(marker)
                if j < 0:
                    continue
                raw = raw[j:]
            if (
                raw[:15] != b'{"v":1,"ph":"X"'
                and b'"ph":"X"' not in raw
                and (b'"ph":' in raw or b'"dur_us":' not in raw)
            ):
                if periodic in raw:
                    _add_periodic_send(out, raw, lineno)
                continue
        fields = decode(raw)
        if fields is not None:
            if fields[0] is None:
                # a record that lost its host: that of the records of
                # its thread around it, as pass 2 repairs it
                fields = _repaired_host(fields, raw, lines, lineno - first - 1)
                if fields is None:
                    continue
            out.append(fields + (lineno,))
    return out


# the RPC span starts pass 1 remembers per file (the oldest forgotten)
MAX_BEGUN = 1 << 16


def _note_start(begun: dict, raw: bytes) -> None:
    """Remember the event of an RPC span's start (``rpc_spans``)."""
    try:
        rec = codec.loads(raw)
    except ValueError:
        return
    if rec.__class__ is dict and rec.get('span').__class__ is str:
        if len(begun) >= MAX_BEGUN:
            del begun[next(iter(begun))]
        begun[rec['span']] = rec.get('ev')


def _with_started_event(raw: bytes, begun: dict) -> typing.Optional[bytes]:
    """The line of a span's end that lost its event name, with the
    event of its start when that was an RPC span's, else None."""
    try:
        rec = codec.loads(raw)
    except ValueError:
        return None
    if rec.__class__ is not dict or rec.get('ev') is not None:
        return None
    ev = begun.get(rec.get('span'))
    if ev.__class__ is not str:
        return None
    rec['ev'] = ev
    return json.dumps(rec, separators=(',', ':')).encode()


def neighbour_records(lines: list, at: int, reach: int = 32) -> list:
    """The records of the lines around ``lines[at]``, nearest first
    (before, then after): what ``codec.repair`` fills a field from."""
    out = []
    for k in itertools.chain(
        range(at - 1, max(-1, at - reach), -1),
        range(at + 1, min(len(lines), at + reach)),
    ):
        line = lines[k]
        if line[:1] != b'{':
            j = line.find(spanfiles.LOG_MARKER)
            if j < 0:
                continue
            line = line[j:]
        try:
            near = codec.loads(line)
        except ValueError:
            continue
        if near.__class__ is dict:
            out.append(near)
    return out


def _repaired_host(
    fields: tuple, raw: bytes, lines: list, at: int
) -> typing.Optional[tuple]:
    """``fields`` of an RPC span without its host, with the host
    ``codec.repair`` gives it, or None."""
    try:
        rec = codec.loads(raw)
    except ValueError:
        return None
    fixed = codec.repair(rec, neighbour_records(lines, at))
    if fixed is None or fixed[1] != 'host':
        return None
    return (fixed[0].host,) + fields[1:]


def _add_start(out: list, raw: bytes, lineno: int) -> None:
    """A ``process.start`` record, as ``(host, 'process.start', ts,
    pid, None, None, None, lineno)`` (the shape of an RPC span)."""
    rec = decode_prefixed(raw)
    if (
        rec.__class__ is not dict
        or rec.get('ev') != 'process.start'
        or rec.get('ph') != 'M'
    ):
        return
    host, pid, ts = rec.get('host'), rec.get('pid'), rec.get('ts')
    if host.__class__ is str and pid.__class__ is int and ts.__class__ is int:
        out.append((host, 'process.start', ts, pid, None, None, None, lineno))


def _add_periodic_send(out: list, raw: bytes, lineno: int) -> None:
    """The start (``B``) of a periodic run's RPC send, as ``(host,
    'rpc.periodic', ts, None, span, None, req, lineno)``: a send still
    running when its process stopped has no end, and what the other side
    did for it is still the run's."""
    rec = decode_prefixed(raw)
    if (
        rec.__class__ is not dict
        or rec.get('ph') != 'B'
        or rec.get('ev') not in SENDERS
    ):
        return
    sid, req = rec.get('span'), rec.get('req')
    if (
        sid.__class__ is str
        and req.__class__ is str
        and req.startswith(PERIODIC)
    ):
        out.append(
            (
                rec.get('host'),
                PERIODIC_SEND,
                rec.get('ts'),
                None,
                sid,
                None,
                req,
                lineno,
            )
        )


def _add_api(out: list, raw: bytes, lineno: int) -> None:
    """The start (``B``) or end (``X``) of an ``api.request`` span, as
    ``(host, 'api.request', ts, ph, span, None, req, lineno)``, and
    another ``api.*`` span (``B`` or ``X``) as ``(host, 'api.child',
    ts, ph, span, parent, req, lineno)``: pass 1 pairs them to find the
    request ids to rejoin (``aliases.Rejoin``)."""
    rec = decode_prefixed(raw)
    if rec.__class__ is not dict:
        return
    if rec.get('ph') is None:
        # (read as pass 2 repairs it: codec.repair)
        rec['ph'] = 'X' if 'dur_us' in rec else 'B'
    ev = rec.get('ev')
    if ev != API_REQUEST:
        ph, parent, req = rec.get('ph'), rec.get('parent'), rec.get('req')
        if (
            (ph == 'B' or ph == 'X')
            and ev.__class__ is str
            and ev.startswith('api.')
            and parent.__class__ is str
            and req.__class__ is str
        ):
            out.append(
                (
                    rec.get('host'),
                    API_CHILD,
                    rec.get('ts'),
                    ph,
                    rec.get('span'),
                    parent,
                    req,
                    lineno,
                )
            )
        return
    ph, sid, req = rec.get('ph'), rec.get('span'), rec.get('req')
    if (
        (ph == 'B' or ph == 'X')
        and sid.__class__ is str
        and req.__class__ is str
    ):
        host, ts = rec.get('host'), rec.get('ts')
        attrs = rec.get('attrs')
        began = (
            attrs.get(schema.ATTR_REQ_BEGAN)
            if attrs.__class__ is dict
            else None
        )
        if ph == 'X' and began.__class__ is str:
            # the end names the id it began with (instrument >= the
            # paste filter's req_began): as if its B had been read
            out.append((host, API_REQUEST, ts, 'B', sid, None, began, lineno))
        out.append((host, API_REQUEST, ts, ph, sid, None, req, lineno))


class HopMatcher:
    """Sends and dispatches matched by span id, within a horizon."""

    def __init__(
        self, horizon_us: int, max_waiting: int = MAX_WAITING
    ) -> None:
        self.horizon = horizon_us
        # spans kept beyond the horizon while their other half is not
        # read (memory bound; the oldest are given up first)
        self.max_waiting = max_waiting
        self.collector = clocks.PairCollector()
        self.hosts = set()
        self.first_ts = None
        # host: the earliest start of an RPC span or an api.request
        # read from it, on its own clock (``--since +10m`` counts from
        # the earliest, corrected: the first request's start)
        self.first_of_host: dict = {}
        self.counts = {'hops': 0, 'unmatched': 0}
        # (host, pid, ts) of every process.start read
        self.starts = set()
        # request ids to rejoin: the id an api.request span began with
        # -> the id it ended with, where they differ
        self.rejoin = aliases_mod.Rejoin()
        # span id: [host, start, end, sync, {child span: child}, first
        # ts, request id of the send]
        self.entries = {}
        # the dispatches of sends made by a periodic task run: span id:
        # the run's request id; and the request id such a dispatch
        # carried (the context nova sent): the first run that sent it
        self.periodic_hops: dict = {}
        self.periodic_contexts: dict = {}
        # periodic runs' sends whose start was read: span id: run
        self.periodic_begun: dict = {}
        # span ids in the order they entered ``entries`` (the oldest
        # leave first; a dict's first key is slow to find after many
        # deletions)
        self.arrived = collections.deque()

    def add(
        self, fname: str, spans: list, watermark: typing.Optional[int]
    ) -> None:
        """The RPC spans of one chunk; then forget what the horizon
        says is complete."""
        entries = self.entries
        arrival = self.arrived.append
        hosts = self.hosts
        sync_events = schema.SYNC_EVENTS
        first_ts = self.first_ts
        starts = self.starts
        first_of_host = self.first_of_host
        for host, ev, ts, end, sid, parent, req, lineno in spans:
            if ev == 'process.start':
                starts.add((host, end, ts))  # (host, pid, ts)
                continue
            if ev == API_REQUEST:
                if (
                    host.__class__ is str
                    and ts.__class__ is int
                    and (host not in first_of_host or ts < first_of_host[host])
                ):
                    first_of_host[host] = ts
                if end == 'B':
                    self.rejoin.begin(sid, req)
                else:
                    self.rejoin.end(sid, req)
                continue
            if ev == API_CHILD:
                self.rejoin.child(parent, req)
                continue
            if ev == PERIODIC_SEND:
                if len(self.periodic_begun) < MAX_PERIODIC_HOPS:
                    self.periodic_begun[sid] = req
                continue
            hosts.add(host)
            if first_ts is None or ts < first_ts:
                first_ts = ts
            if ts < first_of_host.get(host, ts + 1):
                first_of_host[host] = ts
            if ev in SENDERS:
                e = entries.get(sid)
                if e is None:
                    entries[sid] = [
                        host,
                        ts,
                        end,
                        ev in sync_events,
                        None,
                        ts,
                        req,
                    ]
                    arrival(sid)
                else:
                    e[0] = host
                    e[1] = ts
                    e[2] = end
                    e[3] = ev in sync_events
                    e[6] = req
            else:
                if parent is None:
                    continue
                e = entries.get(parent)
                if e is None:
                    e = entries[parent] = [
                        None,
                        None,
                        None,
                        False,
                        None,
                        ts,
                        None,
                    ]
                    arrival(parent)
                if e[4] is None:
                    e[4] = {}
                e[4][sid] = [host, ts, end, (fname, lineno, req)]
        self.first_ts = first_ts
        if watermark is not None and watermark > 0:
            cut = watermark - self.horizon
            arrived = self.arrived
            while arrived:
                sid = arrived[0]
                e = entries[sid]
                if e[5] >= cut:
                    break
                arrived.popleft()
                if (e[0] is None or not e[4]) and len(
                    entries
                ) <= self.max_waiting:
                    # its other half may be on a host whose clock is
                    # further off than the horizon: wait another one
                    e[5] = watermark
                    arrival(sid)
                    continue
                del entries[sid]
                self._evaluate(sid, e)

    def aliases_of(self) -> dict:
        """``{request id: request id}``: the ids under which pass 2 reads
        records of another request's id (``aliases.Rejoin``)."""
        return self.rejoin.aliases()

    def finish(self) -> None:
        self.rejoin.clear()
        for sid, e in self.entries.items():
            self._evaluate(sid, e)
        self.periodic_begun.clear()
        self.entries.clear()
        self.arrived.clear()

    def _evaluate(self, sid, e) -> None:
        p_host, p_start, p_end, sync, kids, _seen, p_req = e
        begun = self.periodic_begun.pop(sid, None)
        if not kids:
            return
        if p_req is None:
            p_req = begun
        if p_req.__class__ is str and p_req.startswith(PERIODIC):
            self._periodic(p_req, kids)
        if p_host is None:
            self.counts['unmatched'] += len(kids)
            return
        for c_host, c_start, c_end, origin in kids.values():
            self.counts['hops'] += 1
            self.collector.add_hop(
                p_host, p_start, p_end, c_host, c_start, c_end, sync, origin
            )

    def _periodic(self, run: str, kids: dict) -> None:
        """The dispatches of a send of periodic run ``run``: what the
        other side did for it is the run's (pass 2 re-keys it)."""
        hops = self.periodic_hops
        contexts = self.periodic_contexts
        for sid, kid in kids.items():
            if len(hops) >= MAX_PERIODIC_HOPS:
                self.counts['periodic_dropped'] = (
                    self.counts.get('periodic_dropped', 0) + 1
                )
                continue
            hops[sid] = run
            req = kid[3][2]
            if req.__class__ is str and not req.startswith(PERIODIC):
                contexts.setdefault(req, run)


def clock_pass(
    paths: list,
    horizon_us: int,
    jobs: int = 1,
    fast_decode: bool = True,
    report: typing.Optional[stream.Progress] = None,
    hashes: bool = False,
) -> tuple:
    """``(ClockResult, {file index: host}, first ts, hop stats)``;
    with ``hashes`` the result's ``line_hashes`` is ``{file index:
    request_hashes of its lines}`` (else empty)."""
    matcher = HopMatcher(horizon_us)
    hosts_of_files = {}
    line_hashes: dict = {}
    if jobs > 1 and len(paths) > 1:
        chunks = _parallel_chunks(paths, jobs, fast_decode, report, hashes)
    else:
        chunks = _chunks(paths, fast_decode, report, hashes)
    for fi, fname, host, spans, watermark, crcs in chunks:
        if host is not None and fi not in hosts_of_files:
            hosts_of_files[fi] = host
            matcher.hosts.add(host)
        matcher.add(fname, spans, watermark)
        if crcs is not None:
            mine = line_hashes.get(fi)
            if mine is None:
                line_hashes[fi] = crcs
            else:
                mine.extend(crcs)
    matcher.finish()
    result = clocks.solve(matcher.collector, matcher.hosts)
    result.starts = matcher.starts
    result.aliases = matcher.aliases_of()
    result.periodic_hops = matcher.periodic_hops
    result.periodic_contexts = matcher.periodic_contexts
    result.first_of_host = matcher.first_of_host
    result.line_hashes = line_hashes
    return result, hosts_of_files, matcher.first_ts, matcher.counts


def _chunks(paths, fast_decode, report, hashes=False):
    """``(file index, name, host or None, RPC spans, watermark,
    request_hashes or None)``."""
    decode = rpc_span_decoder(fast_decode)
    found = set()
    begun: dict = {}
    for f, lines, first, watermark in stream.chunks(
        stream.open_files(paths), report
    ):
        host = None
        if f.index not in found:
            host = file_host(lines)
            if host is not None:
                found.add(f.index)
        yield (
            f.index,
            f.name,
            host,
            rpc_spans(lines, first, decode, begun.setdefault(f.index, {})),
            watermark,
            request_hashes(lines) if hashes else None,
        )


def _worker(
    paths: list, mine: list, fast_decode: bool, out, hashes: bool = False
) -> None:
    """Read the files ``mine`` and send per read ``(index, lines read,
    time after, host or None, RPC spans, position, request_hashes or
    None, what ``runs_backwards`` said of the file or None)`` in
    batches."""
    try:
        decode = rpc_span_decoder(fast_decode)
        files = [spanfiles.SpanFile(paths[i], i) for i in mine]
        found = set()
        sniffed: set = set()
        begun: dict = {}
        batch = []
        for f, lines, first, _heap in stream.reads(files):
            host = None
            spans: typing.Sequence = ()
            crcs = None
            if lines:
                if f.index not in found:
                    host = file_host(lines)
                    if host is not None:
                        found.add(f.index)
                spans = rpc_spans(
                    lines, first, decode, begun.setdefault(f.index, {})
                )
                if hashes:
                    crcs = request_hashes(lines)
            # (what runs_backwards said of the file, with its first
            # read: pass 2 will not look again)
            back = None
            if f.index not in sniffed:
                sniffed.add(f.index)
                back = spanfiles.backwards_seen(f.path)
            batch.append(
                (
                    f.index,
                    len(lines),
                    f.time,
                    host,
                    spans,
                    f.position(),
                    crcs,
                    back,
                )
            )
            if len(batch) >= BATCH:
                out.put(batch)
                batch = []
        if batch:
            out.put(batch)
    except BaseException:  # noqa: BLE001 - reported to the parent
        out.put(('error', traceback.format_exc()))


def _split(paths: list, jobs: int) -> list:
    """File indices per worker, balanced by size (largest first)."""
    sizes = sorted(
        ((os.path.getsize(p), i) for i, p in enumerate(paths)), reverse=True
    )
    # per worker: [bytes, file indices]
    loads = [0] * jobs
    members: list[list[int]] = [[] for _ in range(jobs)]
    for size, i in sizes:
        w = min(range(jobs), key=loads.__getitem__)
        loads[w] += size
        members[w].append(i)
    return [sorted(m) for m in members if m]


def _parallel_chunks(paths, jobs, fast_decode, report, hashes=False):
    ctx = multiprocessing.get_context('fork')
    groups = _split(paths, jobs)
    owner = {}
    queues = []
    procs = []
    for k, mine in enumerate(groups):
        for i in mine:
            owner[i] = k
        q = ctx.Queue(QUEUED)
        queues.append(q)
        procs.append(
            ctx.Process(
                target=_worker,
                daemon=True,
                args=(paths, mine, fast_decode, q, hashes),
            )
        )
    for p in procs:
        p.start()
    pending = [collections.deque() for _ in groups]
    names = [os.path.basename(p) for p in paths]
    current = {}

    def next_read(i):
        k = owner[i]
        if not pending[k]:
            while True:
                try:
                    batch = queues[k].get(timeout=1.0)
                    break
                except queue_mod.Empty:
                    if not procs[k].is_alive():
                        raise RuntimeError(
                            'clock pass worker %d died '
                            '(exit code %s)' % (k, procs[k].exitcode)
                        ) from None
            if batch and batch[0] == 'error':
                raise RuntimeError('clock pass worker failed:\n' + batch[1])
            pending[k].extend(batch)
        read = pending[k].popleft()
        if read[0] != i:  # pragma: no cover - stream.order's promise
            raise RuntimeError('clock pass: reads out of order')
        current[i] = read
        return read[1], read[2]

    try:
        done_bytes = 0
        positions = {}
        for i, watermark in stream.order(range(len(paths)), next_read):
            _i, nlines, _t, host, spans, pos, crcs, back = current.pop(i)
            if back is not None:
                spanfiles.remember_backwards(paths[i], back)
            done_bytes += pos - positions.get(i, 0)
            positions[i] = pos
            if report is not None:
                report(done_bytes)
            if nlines:
                yield i, names[i], host, spans, watermark, crcs
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
