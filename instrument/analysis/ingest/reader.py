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
"""Pass 2: the one reader and validator of span records.

``PartReader`` reads every line of every file (``stream.chunks``:
the files in step by corrected time) and:

* keeps the lines of its partition (with ``nparts`` > 1 a line belongs
  to partition ``crc32(request id) % nparts``; lines without a request
  id belong to partition 0, and process metadata is read by every
  partition, the ``shared`` routes, but counted by partition 0 only);
* decodes and validates each (``codec.RecordDecoder``), counting every
  bad line (``losses.Issues``) and charging it to its process when it is
  (what is left of) a record, repairing one that is a record but for
  one required field the records around it say (``repair``: read, not
  lost, its request marked when its time had to be estimated);
* gives each record its process, ``(host, pid, start)`` (``process_of``
  for records read before any ``process.start`` of their file), and
  follows each process's ``seq`` wherever its records are found:
  duplicates, restarts, gaps (``losses.FileLoss``), and the times of its
  records per bucket of numbers (where a loss near them was:
  ``losses.SeqSet.times``); reads the request
  ids pass 1 told it to read under another (``aliases``, periodic
  runs' RPC: ``periodic_run``);
* corrects its time by its host's clock offset, writes it down for the
  export when asked (``accepted``), and hands it to the consumers whose
  routes take it (``analysis.routes``): the request model, the
  sections, and its own loss accounting (``routes``: the drops the
  sinks and the SQL listeners reported, the processes that ended).

It knows no other event name: what reads which record is declared by
the consumers.  ``read`` returns when every file is read, after
``finish`` on each consumer that has one.
"""

import itertools
import typing
import zlib

from instrument import schema
from instrument.analysis import routes as routing
from instrument.analysis.ingest import accepted
from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import codec
from instrument.analysis.ingest import losses
from instrument.analysis.ingest import spanfiles
from instrument.analysis.ingest import stream

# (the bucket of a seq number is found from the byte of its bit)
assert losses.BUCKET_SHIFT == 4 and losses.TIMES_SHIFT == 12
# request ids of repaired records kept (``damage``), at most
MAX_REPAIRED = 1 << 16
NONE = routing.NONE
PERIODIC = routing.PERIODIC
REQUEST = routing.REQUEST
# a line's partition when the reader must find its request id itself
# (``pipeline.line_parts``)
UNDECIDED = 255


def chain(handlers: tuple) -> typing.Callable:
    """One handler calling ``handlers`` in turn; one that returns False
    (a span read twice) stops the others, and the chain returns False.

    Two or three handlers (every chain of the registry's consumers:
    a span's, a statement's) are called without a loop."""
    if len(handlers) == 2:
        first, second = handlers

        def handle2(rec: typing.Any, ts: int, cursor: typing.Any) -> bool:
            if first(rec, ts, cursor) is False:
                return False
            return second(rec, ts, cursor) is not False

        return handle2
    if len(handlers) == 3:
        first, second, third = handlers

        def handle3(rec: typing.Any, ts: int, cursor: typing.Any) -> bool:
            if first(rec, ts, cursor) is False:
                return False
            if second(rec, ts, cursor) is False:
                return False
            return third(rec, ts, cursor) is not False

        return handle3

    def handle(rec: typing.Any, ts: int, cursor: typing.Any) -> bool:
        for each in handlers:
            if each(rec, ts, cursor) is False:
                return False
        return True

    return handle


def _unfolding(
    txn: typing.Optional[typing.Callable], query: typing.Callable
) -> typing.Callable:
    """The handler of an ``sql.txn`` record: the ``sql.query`` records
    it carries to ``query`` (in the order they were sent, at the times
    ``ts`` corrected as the transaction's), then the transaction to
    ``txn`` (if any takes it)."""
    unfolded = codec.unfolded

    def handle(rec: typing.Any, ts: int, cursor: typing.Any) -> typing.Any:
        if rec.attrs:
            shift = ts - rec.ts
            for each in unfolded(rec):
                query(each, each.ts + shift, cursor)
        if txn is not None:
            return txn(rec, ts, cursor)
        return None

    return handle


class PartReader:
    """Pass 2 of one partition of the requests: a consumer of lines.

    ``consumers``: the objects whose ``routes`` (``analysis.routes
    .Route``) name the records their methods read; they are given each
    record in this order, after the reader's own (``routes``).  The
    cursor a handler gets is this reader: the file (``fname``) and the
    process (``process``: its ``losses.SeqSet``) of the record, and
    ``process_of``.
    """

    # the reader's own: what the runtime said it lost, and which
    # processes ended (``losses.FileLoss``)
    routes = (
        routing.Route(
            'C', frozenset((schema.EV_SINK_DROPS,)), routing.ALL, 'sink_drops'
        ),
        routing.Route(
            'C',
            frozenset((schema.EV_SQL_DROPPED,)),
            routing.ALL,
            'sql_dropped',
        ),
        routing.Route(
            'M',
            frozenset((schema.EV_PROCESS_END,)),
            routing.ALL,
            'process_end',
        ),
    )

    def __init__(
        self,
        offsets: dict,
        part: int,
        nparts: int,
        opts: typing.Any,
        consumers: typing.Sequence = (),
        line_parts: typing.Optional[dict] = None,
    ) -> None:
        # opts: pipeline.Options, its pass 1 findings set
        self.offsets = offsets
        # {file index: each line's partition} (``pipeline.line_parts``)
        self.line_parts = line_parts or {}
        self.part = part
        self.nparts = nparts
        # line_parts' byte of a line -> 1 when this partition looks at
        # the line (its own, or UNDECIDED), else 0
        self.keep_table = bytes(
            1 if p == part or p == UNDECIDED else 0 for p in range(256)
        )
        self.issues = losses.Issues()
        self.loss = losses.FileLoss()
        self.consumers = (self,) + tuple(consumers)
        # ph: {event: (handlers of NONE, of PERIODIC, of REQUEST)}
        self.table: dict = {ph: {} for ph in schema.PHASES}
        # event: handlers of the metadata every partition reads
        self.shared: dict = {}
        for consumer in self.consumers:
            for route in consumer.routes:
                if route.shared and route.events:
                    for ev in route.events:
                        self.shared.setdefault(ev, []).append(
                            getattr(consumer, route.handler)
                        )
        self.decoder = codec.RecordDecoder(opts.fast_decode)
        # (file index, pid): the SeqSet of the process its records
        # belong to there (the last process.start read in that file)
        self.current = {}
        # pid: [(ts, host)] of the process.start records of pass 1
        self.starts: dict = {}
        for host, pid, ts in sorted(opts.process_starts):
            self.starts.setdefault(pid, []).append((ts, host))
        self.start_hosts = {host for host, _p, _t in opts.process_starts}
        self.aliases = opts.aliases
        self.raw_aliases = {
            a.encode(): b.encode() for a, b in opts.aliases.items()
        }
        # request ids nova sent with periodic runs' RPC: their records
        # are the runs' (``periodic_run``); span id: run, grown by the
        # spans read under the dispatches
        self.periodic_contexts = opts.periodic_contexts
        self.periodic_spans = dict(opts.periodic_hops)
        self.lines = 0
        # hosts of the valid records read
        self.hosts: set = set()
        # spans read twice (a consumer said so)
        self.duplicate_spans = 0
        # request ids of the records repaired (``repair``)
        self.repaired: set = set()
        # the record being handed out: its file, its process
        self.fname: typing.Optional[str] = None
        # (a losses.SeqSet once a record was read)
        self.process: typing.Any = None
        # the records accepted, written for the export (None: not)
        self.accepted = (
            None
            if opts.accepted_dir is None
            else accepted.AcceptedWriter(opts.accepted_dir, part)
        )

    def handlers(self, ph: str, ev: str) -> tuple:
        """What takes records of phase ``ph`` and event ``ev``, per
        context: None (nothing), a consumer's handler, or ``chain`` of
        several (made on the first such record, then looked up)."""
        per_context = []
        for context in (NONE, PERIODIC, REQUEST):
            each = tuple(
                getattr(consumer, route.handler)
                for consumer in self.consumers
                for route in consumer.routes
                if route.takes(ph, ev, context)
            )
            per_context.append(
                None
                if not each
                else each[0]
                if len(each) == 1
                else chain(each)
            )
        if ph == 'X' and ev == schema.EV_SQL_TXN:
            # an sql.txn may carry its round trips: they are read as
            # the sql.query records they stand for (``codec.unfolded``)
            queries = self.table['X'].get(schema.EV_SQL_QUERY)
            if queries is None:
                queries = self.handlers('X', schema.EV_SQL_QUERY)
            per_context = [
                _unfolding(txn, query) if query is not None else txn
                for txn, query in zip(per_context, queries, strict=True)
            ]
        found = self.table[ph][ev] = tuple(per_context)
        return found

    def read(
        self, files: list, progress: typing.Optional[stream.Progress] = None
    ) -> None:
        """Consume every chunk of ``files``; ``progress(bytes_done)``
        after each."""
        sweeps = [c.sweep for c in self.consumers if hasattr(c, 'sweep')]
        for f, lines, first, watermark in stream.chunks(files, progress):
            self.chunk(f, lines, first)
            if watermark is not None:
                for sweep in sweeps:
                    sweep(watermark)
        self.finish(files)

    def chunk(self, f: spanfiles.SpanFile, lines: list, first: int) -> None:
        """The lines ``first + 1``... of the span file ``f``."""
        part = self.part
        nparts = self.nparts
        issues = self.issues
        loss = self.loss
        decoder = self.decoder
        decode = decoder.decode
        current = self.current
        track = self.track
        dups = loss.duplicates
        read = loss.read
        get_offset = self.offsets.get
        crc32 = zlib.crc32
        marker = spanfiles.LOG_MARKER
        aliases = self.aliases
        raw_aliases = self.raw_aliases
        periodic_contexts = self.periodic_contexts
        table = self.table
        shared = self.shared
        periodic_prefix = routing.PERIODIC_PREFIX
        repaired_record = codec.Repaired
        fi = f.index
        fname = f.name
        # (the line numbers of a file read from its end count down)
        line_of = f.line_of
        self.fname = fname
        log_file = spanfiles.is_log_name(fname)
        keep = self.accepted
        keep_prefix = b'' if keep is None else keep.prefix(fname)
        self.lines += len(lines)
        # the lines to look at: with pass 1's partitions of the lines,
        # this partition's and the undecided ones (others skipped)
        pairs: typing.Iterable = enumerate(lines, first + 1)
        decided = None
        if nparts > 1:
            parts = self.line_parts.get(fi)
            if parts is not None and len(parts) >= first + len(lines):
                decided = parts[first : first + len(lines)]
                # (a byte per line, 1 where it is to be looked at: the
                # lines and their numbers picked in C)
                mask = decided.translate(self.keep_table)
                pairs = zip(
                    itertools.compress(
                        range(first + 1, first + len(lines) + 1), mask
                    ),
                    itertools.compress(lines, mask),
                    strict=True,
                )
        # a file is mostly one process on one host: remember the last
        # (its seq bitmap page, and its latest time, kept in locals)
        c_pid = None
        c_seq: typing.Any = None
        c_pages: dict = {}
        c_pageno = -1
        c_page: typing.Any = bytearray()
        c_times: typing.Any = None
        c_timesno = -1
        c_last = 0
        c_host = None
        c_off = 0
        nread = 0
        for lineno, raw in pairs:
            if raw[0] != 123:  # not '{': a service log line?
                j = raw.find(marker)
                if j < 0:
                    if part == 0:
                        # (a bad line, not a record of any process: no
                        # record lost)
                        issues.no_record(fname, line_of(lineno), raw, log_file)
                    continue
                raw = raw[j:]
            meta = False
            if nparts > 1 and (
                decided is None or decided[lineno - first - 1] == UNDECIDED
            ):
                i = raw.find(b'"req":"')
                if i < 0:
                    # (the runtime writes ph second; any writer's
                    # order is read alike, at every -j)
                    meta = b'"ph":"M"' in raw
                    if part != 0 and not meta:
                        continue
                else:
                    # the request id, up to its closing quote (nova's
                    # are 40 characters long)
                    i += 7
                    j = raw.find(b'"', i, i + 256)
                    key = raw[i : j if j > 0 else i + 40]
                    if raw_aliases:
                        key = raw_aliases.get(key, key)
                    if crc32(key) % nparts != part:
                        continue
            rec = decode(raw)
            if rec is None:
                if part != 0 and meta:
                    continue
                kind, reason = decoder.error or ('invalid', '')
                rec = self.repair(raw, f, lines, lineno - first - 1)
                if rec is None:
                    issues.add(kind, fname, line_of(lineno), reason)
                    self.bad_line(raw, f, lines, lineno - first - 1, c_seq)
                    continue
                issues.add(
                    kind,
                    fname,
                    line_of(lineno),
                    '%s; repaired: %s' % (reason, rec.repaired),
                )
                raw = codec.dumps(rec)
                if rec.seq is None:
                    # (its number is none of those read)
                    self.unnumbered(rec, f, lineno)
                    continue
            if aliases:
                # the start of an api.request span written with the id
                # of the WSGI environ: read under the id it ended with
                req = aliases.get(rec.req)
                if req is not None:
                    rec.req = req
            if periodic_contexts and rec.req in periodic_contexts:
                rec.req = self.periodic_run(rec)
            pid = rec.pid
            seq = rec.seq
            ph = rec.ph
            if ph == 'M' and rec.ev == 'process.start' or pid != c_pid:
                if c_seq is not None and c_last > c_seq.last:
                    c_seq.last = c_last
                if ph == 'M' and rec.ev == 'process.start':
                    # a process (a new one, or one read before: a
                    # replay)
                    c_seq = current[(fi, pid)] = track(
                        (rec.host, pid, rec.ts), fi, fname
                    )
                else:
                    c_seq = current.get((fi, pid))
                    if c_seq is None:
                        # no process.start before it in this file
                        c_seq = current[(fi, pid)] = track(
                            self.process_of(rec.host, pid, rec.ts), fi, fname
                        )
                c_pid = pid
                self.process = c_seq
                c_pages = c_seq.pages
                c_pageno = -1
                c_timesno = -1
                c_last = c_seq.last
                c_host = None
            if meta and part != 0:
                # metadata is read by every worker, counted by worker 0
                for handle in shared.get(rec.ev, ()):
                    handle(rec, rec.ts, self)
                continue
            nread += 1
            # has this process's seq been read (here or in any file)?
            if seq >> 16 != c_pageno:
                c_pageno = seq >> 16
                c_page = c_pages.get(c_pageno)
                if c_page is None:
                    if c_pageno < c_seq.floor:
                        # folded (the follow mode): read before, or a
                        # record counted lost
                        c_pageno = -1
                        self.below_floor(c_seq, seq, fname, line_of(lineno))
                        continue
                    c_page = c_pages[c_pageno] = bytearray(8192)
            i = seq & 0xFFFF
            j = i >> 3
            bit = 1 << (i & 7)
            byte = c_page[j]
            if byte & bit:
                if rec.__class__ is repaired_record:
                    # (a repaired line is counted once, as a bad line)
                    nread -= 1
                    continue
                issues.add(
                    'duplicate',
                    fname,
                    line_of(lineno),
                    'seq %d of %s read before'
                    % (seq, losses.process_label(c_seq.key)),
                )
                dups[fname] = dups.get(fname, 0) + 1
                continue
            c_page[j] = byte | bit
            host = rec.host
            if host != c_host:
                c_host = host
                c_off = get_offset(host, 0)
                self.hosts.add(host)
                c_seq.hosts.add(host)
            ts = rec.ts + c_off
            if ts > c_last:
                c_last = ts
            # the times of its bucket of numbers: when a record lost
            # near it was (a span's end, an instant; not a start or
            # metadata, written later than their time)
            if ph == 'X':
                t = ts + rec.dur_us
            elif ph == 'I' or ph == 'C':
                t = ts
            else:
                t = 0
            if t:
                if seq >> 12 != c_timesno:
                    c_timesno = seq >> 12
                    c_times = c_seq.bucket(c_timesno)
                # (its bucket's earliest time: at 2 * ((seq & 0xFFF) >>
                # 4), that is j's last 9 bits, the last cleared)
                k = j & 0x1FE
                if t > c_times[k + 1]:
                    c_times[k + 1] = t
                lo = c_times[k]
                if not lo or t < lo:
                    c_times[k] = t
            if keep is not None:
                keep.write(
                    keep_prefix, line_of(lineno), raw, c_seq.key[2], c_off
                )
                if rec.ev == schema.EV_SQL_TXN:
                    for each in codec.unfolded(rec):
                        keep.write(
                            keep_prefix,
                            line_of(lineno),
                            codec.dumps(each),
                            c_seq.key[2],
                            c_off,
                        )
            try:
                handlers = table[ph][rec.ev]
            except KeyError:  # the first record of its phase and event
                handlers = self.handlers(ph, rec.ev)
            req = rec.req
            handle = handlers[
                NONE
                if req is None
                else PERIODIC
                if req.startswith(periodic_prefix)
                else REQUEST
            ]
            if handle is not None and handle(rec, ts, self) is False:
                # a span read twice (not given to the other handlers)
                self.duplicate_spans += 1
        if c_seq is not None and c_last > c_seq.last:
            c_seq.last = c_last
        if nread:
            read[fname] = read.get(fname, 0) + nread

    def below_floor(
        self, s: losses.SeqSet, seq: int, fname: str, lineno: int
    ) -> None:
        """A record whose number is below its process's floor (its
        pages folded: ``losses.SeqSet.fold``): not read again.  One of
        the numbers counted lost is ``late`` (still counted lost: its
        loss was final); any other is a ``duplicate`` (a rotated copy
        of records read)."""
        if s.below(seq):
            self.issues.add(
                'late',
                fname,
                lineno,
                'seq %d of %s: counted lost before it was read'
                % (seq, losses.process_label(s.key)),
            )
            return
        self.issues.add(
            'duplicate',
            fname,
            lineno,
            'seq %d of %s read before' % (seq, losses.process_label(s.key)),
        )
        dups = self.loss.duplicates
        dups[fname] = dups.get(fname, 0) + 1

    def periodic_run(self, rec: typing.Any) -> str:
        """The periodic run a record of a request id nova sent with a
        periodic run's RPC belongs to: the run whose send its span, or
        its parent's, answered (the dispatch, then what ran under it,
        read after its parent's start), else the first run that sent
        that id (nova's admin context of a run is shared by the tasks
        of that run)."""
        spans = self.periodic_spans
        run = spans.get(rec.span)
        if run is None:
            run = spans.get(rec.parent)
            if (
                run is not None
                and rec.span is not None
                and len(spans) < clockpass.MAX_PERIODIC_HOPS
            ):
                spans[rec.span] = run
        if run is None:
            run = self.periodic_contexts[rec.req]
        return run

    def bad_line(
        self,
        raw: bytes,
        f: spanfiles.SpanFile,
        lines: list,
        at: int,
        last: typing.Optional[losses.SeqSet],
    ) -> None:
        """Charge a line that is not a valid record (``lines[at]`` of
        file ``f``) to its process, when it is a record (or what is left
        of one): the process it names, with its ``seq`` (then not also
        reported missing), when it names them, even cut short; else the
        process of the record before it in its file (a number it does
        not name: one of its process's gaps), and when it was lost: after
        the record before it, before the record after it (none within 64
        lines: the process of the last record read in the file,
        ``last``, at a time not known).  A line that is not a record of
        any process (``codec.record_like``) is a bad line, not a record
        lost."""
        if not codec.record_like(raw):
            return
        fi = f.index
        try:
            rec = codec.loads(raw)
        except ValueError:
            rec = None
        if rec.__class__ is dict:
            host, pid, seq = rec.get('host'), rec.get('pid'), rec.get('seq')
            if (
                host.__class__ is str
                and pid.__class__ is int
                and seq.__class__ is int
            ):
                s = self.current.get((fi, pid))
                if s is None:
                    s = self.current[(fi, pid)] = self.track(
                        self.process_of(host, pid, rec.get('ts') or 0),
                        fi,
                        f.name,
                    )
                if s.add(seq):
                    s.invalid += 1
                    if len(s.bad) < losses.MAX_NOTED:
                        s.bad.append(seq)
                self.loss.bad[s.key] = self.loss.bad.get(s.key, 0) + 1
                return
        # (a line cut short may name its process, not what a sink that
        # cut it counts: one of the numbers missing, not one more)
        named = codec.names(raw)
        # the records around it in its file
        before = after = None
        for k in range(at - 1, max(-1, at - 64), -1):
            before = codec.names(lines[k])
            if before[1] is not None:
                break
            before = None
        for k in range(at + 1, min(len(lines), at + 64)):
            after = codec.names(lines[k])
            if after[1] is not None:
                break
            after = None
        near = (
            named
            if named[0] is not None and named[1] is not None
            else before or after
        )
        s = None if near is None else self.current.get((fi, near[1]))
        if s is None:
            if near is None or near[0] is None:
                s = last
            else:
                s = self.current[(fi, near[1])] = self.track(
                    self.process_of(near[0], near[1], near[3] or 0), fi, f.name
                )
        if s is None:
            return
        loss = self.loss
        loss.bad[s.key] = loss.bad.get(s.key, 0) + 1
        loss.unnumbered[s.key] = loss.unnumbered.get(s.key, 0) + 1
        if len(s.cuts) < losses.MAX_NOTED:
            s.cuts.append(
                (
                    self._written(before, 0),
                    self._written(after, losses.FOREVER),
                )
            )

    def repair(
        self, raw: bytes, f: spanfiles.SpanFile, lines: list, at: int
    ) -> typing.Any:
        """Line ``lines[at]`` of ``f``, not a valid record, repaired
        when it is one but for one required field the records around it
        (or itself) say (``codec.repair``), else None.  The repaired
        record says how (``repaired``); its request is marked
        (``damage``) when its time had to be estimated."""
        if not codec.record_like(raw):
            return None
        try:
            rec = codec.loads(raw)
        except ValueError:
            return None
        if rec.__class__ is not dict:
            return None
        neighbours = clockpass.neighbour_records(lines, at)
        # the event its span started with, when that was read
        started, under = self.started(rec)
        fixed = codec.repair(rec, neighbours, started)
        if fixed is None:
            return None
        out, field, how = fixed
        out.repaired = '%s%s' % (field, how)
        if under is not None and field == 'ev':
            # read with its start
            out.req = under
        if (
            field == 'ts'
            and started is None
            and out.req is not None
            and len(self.repaired) < MAX_REPAIRED
        ):
            # its time is an estimate (a span's start, when read, is
            # not): its request is marked
            self.repaired.add(self.aliases.get(out.req, out.req))
        self.loss.repaired[f.name] = self.loss.repaired.get(f.name, 0) + 1
        return out

    def started(self, rec: dict) -> tuple:
        """``(event, request id)`` of the start of the span of ``rec``
        (a decoded line) if a consumer read it (the request model:
        ``event_of``), under its request id or the id an API request
        began with (its end names it: pass 1 did not pair it when the
        end lacked its event), else ``(None, None)``."""
        sid, req = rec.get('span'), rec.get('req')
        if not sid or req.__class__ is not str:
            return None, None
        attrs = rec.get('attrs')
        began = (
            attrs.get(schema.ATTR_REQ_BEGAN)
            if attrs.__class__ is dict
            else None
        )
        for rid in (req, began):
            if rid.__class__ is not str:
                continue
            rid = self.aliases.get(rid, rid)
            for consumer in self.consumers:
                event_of = getattr(consumer, 'event_of', None)
                if event_of is not None:
                    ev = event_of(rid, sid)
                    if ev is not None:
                        return ev, rid
        return None, None

    def unnumbered(
        self, rec: typing.Any, f: spanfiles.SpanFile, lineno: int
    ) -> None:
        """A repaired record whose ``seq`` is missing: one of its
        process's missing numbers is this record (not lost), which is
        read as any other, but for the check that it was not read
        before (a span read twice is still one span)."""
        fi = f.index
        s = self.current.get((fi, rec.pid))
        if s is None:
            s = self.current[(fi, rec.pid)] = self.track(
                self.process_of(rec.host, rec.pid, rec.ts), fi, f.name
            )
        self.process = s
        loss = self.loss
        loss.found[s.key] = loss.found.get(s.key, 0) + 1
        if self.aliases:
            rec.req = self.aliases.get(rec.req, rec.req)
        if self.periodic_contexts and rec.req in self.periodic_contexts:
            rec.req = self.periodic_run(rec)
        off = self.offsets.get(rec.host, 0)
        self.hosts.add(rec.host)
        s.hosts.add(rec.host)
        ts = rec.ts + off
        if ts > s.last:
            s.last = ts
        if self.accepted is not None:
            self.accepted.write(
                self.accepted.prefix(f.name),
                f.line_of(lineno),
                codec.dumps(rec),
                s.key[2],
                off,
            )
        self.loss.read[f.name] = self.loss.read.get(f.name, 0) + 1
        try:
            handlers = self.table[rec.ph][rec.ev]
        except KeyError:
            handlers = self.handlers(rec.ph, rec.ev)
        req = rec.req
        handle = handlers[
            NONE
            if req is None
            else PERIODIC
            if req.startswith(routing.PERIODIC_PREFIX)
            else REQUEST
        ]
        if handle is not None and handle(rec, ts, self) is False:
            self.duplicate_spans += 1

    def _written(self, names: typing.Optional[tuple], default: int) -> int:
        """When the record of ``codec.names`` was written, corrected."""
        if names is None or names[3] is None:
            return default
        return names[3] + (names[4] or 0) + self.offsets.get(names[0], 0)

    def process_of(self, host: str, pid: int, ts: int) -> tuple:
        """The process ``(host, pid, start)`` that wrote a record of
        ``host`` and ``pid`` at ``ts`` read before any ``process.start``
        of its file (a log rotated away from its start): the latest
        start of that pid on that host before ``ts`` (pass 1 read every
        start); a process of another host only when it is the one
        process of that pid and ``host`` started none (one process
        writing for several hosts, as the demo does); else a process of
        unknown start."""
        starts = self.starts.get(pid)
        if not starts:
            return (host, pid, None)
        mine = [t for t, h in starts if h == host]
        if mine:
            before = [t for t in mine if t <= ts]
            return (host, pid, max(before) if before else min(mine))
        if len(starts) == 1 and host not in self.start_hosts:
            t, h = starts[0]
            return (h, pid, t)
        return (host, pid, None)

    def track(self, key: tuple, fi: int, fname: str) -> losses.SeqSet:
        """The ``seq`` numbers of process ``key`` (host, pid, start)
        read so far, wherever read."""
        s = self.loss.seqs.get(key)
        if s is None:
            s = self.loss.retired.get(key)
            if s is not None:
                # done with (the follow mode): folded whole
                return s
            s = self.loss.seqs[key] = losses.SeqSet((fi, fname), key)
        # the sink that wrote the file: its drops are this file's gaps
        self.loss.sinks.setdefault(key, set()).add(
            'log' if spanfiles.is_log_name(fname) else 'file'
        )
        return s

    # -- the reader's own routes: losses.FileLoss --------------------------

    def sink_drops(self, rec: typing.Any, ts: int, cursor: typing.Any) -> None:
        """A ``sink.drops`` counter: the records each sink (and the
        buffer) dropped so far, cumulative per process."""
        key = self.process.key
        mine = self.loss.drops.setdefault(key, {})
        attrs = rec.attrs or {}
        for sink, n in attrs.items():
            if isinstance(n, int) and n > mine.get(sink, 0):
                mine[sink] = n
        self.loss.report(
            key,
            ts,
            sum(
                n
                for cause, n in attrs.items()
                if cause in losses.UNNUMBERED_DROPS and isinstance(n, int)
            ),
            None,
        )

    def sql_dropped(
        self, rec: typing.Any, ts: int, cursor: typing.Any
    ) -> None:
        """A ``sql.dropped`` counter: the process's cumulative count of
        SQL statements dropped; the largest is its total."""
        n = (rec.attrs or {}).get(schema.ATTR_COUNT)
        key = self.process.key
        if n.__class__ is int:
            if n > self.loss.sql_dropped.get(key, 0):
                self.loss.sql_dropped[key] = n
            self.loss.report(key, ts, None, n)

    def process_end(
        self, rec: typing.Any, ts: int, cursor: typing.Any
    ) -> None:
        """A ``process.end`` record: its process ended."""
        self.process.ended = True

    def finish(self, files: list) -> None:
        """The files whose end could not be read; ``finish`` of every
        consumer that has one (the request model finalises the requests
        still open)."""
        for f in files:
            if f.error:
                if self.part == 0:
                    self.issues.problems.append(
                        spanfiles.unreadable(f.name, f.error, f.lines)
                    )
                self.loss.unreadable[f.name] = [
                    f.lines,
                    f.error,
                    set().union(
                        *(
                            s.hosts
                            for (fi, _pid), s in self.current.items()
                            if fi == f.index
                        )
                    ),
                ]
                self.loss.cut_processes.update(
                    s.key
                    for (fi, _pid), s in self.current.items()
                    if fi == f.index
                )
            if f.backwards is not None and self.part == 0:
                self.issues.problems.append(
                    '%s: its records run backwards (their seq going down '
                    'line after line): read from its end' % f.name
                )
        for consumer in self.consumers[1:]:
            finish = getattr(consumer, 'finish', None)
            if finish is not None:
                finish()
        if self.accepted is not None:
            self.accepted.close()

    def records(self) -> int:
        """Valid records read: each once, in its process's ``seq``."""
        return self.loss.records()
