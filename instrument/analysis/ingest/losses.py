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
"""What was lost on the way from the runtime to the report.

Bad lines never stop the analysis: each is counted under one kind and
the first few of each kind are kept with file and line number
(``Issues``):

``malformed``        not JSON, or not a JSON object
``truncated``        the last line of a file, cut short (a killed process)
``unknown_version``  ``v`` is not the schema version this analyser reads
``invalid``          fails ``instrument.schema.validate``
``duplicate``        the same process's ``seq`` seen again, in this
                     file or any other (``FileLoss``)
``late``             a record of a request already finalised

``FileLoss`` adds, per file and process, the ``seq`` numbers missing and
the events the runtime itself reported lost (``sink.drops``), and the
files whose end could not be read (a cut gzip stream, a read error):
every line before is read (``files.SpanFile``), the rest is named, not
counted; and when each process lost records (``FileLoss.windows``:
what ``model.damage`` marks requests by).  ``SeqSet`` holds the numbers
one process's records were read with, and the times of its records per
bucket of numbers (the reader of pass 2 writes both itself).  A line
that is no record of any process (garbage) is a bad line, not a record
lost.
"""

import array
import bisect
import typing

KINDS = (
    'malformed',
    'truncated',
    'unknown_version',
    'invalid',
    'duplicate',
    'late',
)
MAX_SAMPLES = 20
# The numbers of a process in buckets of ``BUCKET`` (``SeqSet.times``):
# the earliest and the latest time of the records of each bucket read (a
# span's end, an instant's time): a lost record's time is among those of
# the records written around it.
BUCKET_SHIFT = 4
BUCKET = 1 << BUCKET_SHIFT
# ... kept in pages of ``1 << TIMES_SHIFT`` numbers (4 KiB each: a
# process of a few records costs a few KiB)
TIMES_SHIFT = 12
# A process's lost records whose number is known, and those whose
# number could not be read, noted at most (more: the whole life of the
# process is where they were lost)
MAX_NOTED = 4096
# The windows of loss of one process, at most (more are merged), and
# the margin each is widened by (a record is numbered when the buffer
# hands it over, a little after it was timed)
MAX_WINDOWS = 1024
WINDOW_SLACK_US = 5_000
# "until the end of the process"
FOREVER = 1 << 62
# processes done with (``FileLoss.retire``) remembered, at most
MAX_RETIRED = 10_000


# the bytes of a line that is not text shown in a message
BINARY_SHOWN = 16
# the characters of a line of text shown in a message
TEXT_SHOWN = 60


def shown(raw: bytes) -> str:
    """A bad line as a message shows it: the first ``TEXT_SHOWN``
    characters of text, quoted; of a line that is not text (not UTF-8,
    or control characters: a binary file given as input) its length and
    the first ``BINARY_SHOWN`` bytes, escaped."""
    raw = raw.rstrip(b'\r\n')
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError:
        text = None
    if text is not None and not any(
        ord(c) < 32 and c not in '\t\r\n' for c in text[:TEXT_SHOWN]
    ):
        return '%r' % text[:TEXT_SHOWN] + (
            '...' if len(text) > TEXT_SHOWN else ''
        )
    return 'binary data, %d bytes: %s%s' % (
        len(raw),
        repr(raw[:BINARY_SHOWN])[1:],
        '...' if len(raw) > BINARY_SHOWN else '',
    )


class Issues:
    """Counts and first examples of bad lines, per kind and per file."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(KINDS, 0)
        self.samples = {kind: [] for kind in KINDS}
        self.per_file = {}
        self.other_lines = 0
        self.files = []
        self.problems = []

    def add(self, kind: str, fname: str, lineno: int, reason: str) -> None:
        self.counts[kind] += 1
        per = self.per_file.setdefault(fname, dict.fromkeys(KINDS, 0))
        per[kind] += 1
        samples = self.samples[kind]
        if len(samples) < MAX_SAMPLES:
            samples.append((fname, lineno, reason[:200]))

    def no_record(
        self, fname: str, lineno: int, raw: bytes, log_file: bool
    ) -> None:
        """A non-blank line without a span record: a service log's own
        line (counted), or garbage in a span file (a bad line)."""
        if not raw.strip():
            return
        if log_file:
            self.other_lines += 1
        else:
            self.add(
                'malformed',
                fname,
                lineno,
                'not a span record: %s' % shown(raw),
            )

    def merge(self, other: 'Issues') -> None:
        for kind in KINDS:
            self.counts[kind] += other.counts[kind]
            # the first lines of the files, whichever worker read them
            self.samples[kind] = sorted(
                self.samples[kind] + other.samples[kind],
                key=lambda s: (s[0], s[1]),
            )[:MAX_SAMPLES]
        for fname, per in other.per_file.items():
            mine = self.per_file.setdefault(fname, dict.fromkeys(KINDS, 0))
            for kind, n in per.items():
                mine[kind] += n
        self.other_lines += other.other_lines
        for problem in other.problems:
            if problem not in self.problems:
                self.problems.append(problem)

    def total(self) -> int:
        return sum(self.counts.values())


class SeqSet:
    """The ``seq`` numbers of one process (one incarnation: host, pid
    and start) read so far, in any order: a bitmap in pages of 64 Ki
    numbers (``pages``: page number to 8 KiB), so memory follows the
    range of numbers, not the records.  The reader of pass 2 sets the
    bits itself (its hot loop); ``add`` does the same.

    ``invalid`` counts the numbers of lines read but rejected (their
    bits are set: not missing, not records), ``first`` is the ``(file
    index, file name)`` where the process was first read, ``key`` its
    ``(host, pid, start)``, ``last`` the latest (corrected) time of its
    records, ``ended`` whether its ``process.end`` was read, ``hosts``
    the hosts of its records (one process may write for several: the
    demo's).

    Where its losses are in time (``windows``): ``times`` holds, per
    bucket of ``BUCKET`` numbers, the earliest and the latest time of
    the records read (``seq >> TIMES_SHIFT`` to an array of pairs; the
    reader of pass 2 writes them itself: ``bucket``), ``bad`` the
    numbers of its
    invalid lines, ``cuts`` when each line of it whose number could not
    be read was written: ``(the record before it was, the record after
    it was)`` in its file.
    """

    __slots__ = (
        'pages',
        'invalid',
        'first',
        'key',
        'last',
        'ended',
        'hosts',
        'times',
        'bad',
        'cuts',
        'floor',
        'folded',
        'folded_lo',
        'folded_hi',
        'folded_windows',
        'holes',
    )

    def __init__(self, first: tuple, key: tuple = ()) -> None:
        self.pages: dict = {}
        self.invalid = 0
        self.first = first
        self.key = key
        self.last = 0
        self.ended = False
        self.hosts: set = set(key[:1])
        self.times: dict = {}
        self.bad: list = []
        self.cuts: list = []
        self.floor = 0
        self.folded = 0
        self.folded_lo: typing.Optional[int] = None
        self.folded_hi: typing.Optional[int] = None
        self.folded_windows: list = []
        self.holes: list = []

    def bucket(self, pageno: int) -> array.array:
        """The times of the buckets of numbers ``pageno << TIMES_SHIFT``
        on: ``[earliest, latest]`` of its ``k``-th bucket at ``2k``,
        ``2k + 1`` (0: none read)."""
        page = self.times.get(pageno)
        if page is None:
            page = self.times[pageno] = array.array(
                'q', bytes(16 << (TIMES_SHIFT - BUCKET_SHIFT))
            )
        return page

    def merge(self, other: 'SeqSet') -> None:
        """Add what another reader (a partition) read of this process."""
        for pageno, page in other.pages.items():
            mine = self.pages.get(pageno)
            if mine is None:
                self.pages[pageno] = bytearray(page)
            else:
                value = int.from_bytes(mine, 'little') | int.from_bytes(
                    page, 'little'
                )
                mine[:] = value.to_bytes(len(mine), 'little')
        for pageno, page in other.times.items():
            mine = self.times.get(pageno)
            if mine is None:
                self.times[pageno] = array.array('q', page)
                continue
            for k in range(0, len(page), 2):
                lo, hi = page[k], page[k + 1]
                if lo and (not mine[k] or lo < mine[k]):
                    mine[k] = lo
                if hi > mine[k + 1]:
                    mine[k + 1] = hi
        self.invalid += other.invalid
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)
        self.ended = self.ended or other.ended
        self.hosts |= other.hosts
        self.bad.extend(other.bad[: MAX_NOTED - len(self.bad)])
        self.cuts.extend(other.cuts[: MAX_NOTED - len(self.cuts)])

    def missing(
        self, upto: typing.Optional[int] = None
    ) -> typing.Iterator[tuple]:
        """``(first, last)`` of each run of numbers not read between the
        lowest and the highest read (or ``upto``), in order; above the
        floor (``fold``)."""
        _n, lo, hi = self.span()
        if lo is None:
            return
        if upto is not None:
            hi = min(hi, upto)
        # (below the floor: ``holes``)
        lo = max(lo, self.floor << 16)
        run = None
        for pageno in range(lo >> 16, (hi >> 16) + 1):
            base = pageno << 16
            page = self.pages.get(pageno)
            value = int.from_bytes(page, 'little') if page else 0
            # this page's numbers between lo and hi: a .. b
            a = max(lo, base) - base
            b = min(hi, base + 0xFFFF) - base
            holes = ~value & ((1 << (b + 1)) - 1) & ~((1 << a) - 1)
            while holes:
                low = (holes & -holes).bit_length() - 1
                above = value >> low
                length = (
                    (above & -above).bit_length() - 1 if above else b + 1 - low
                )
                length = min(length, b + 1 - low)
                start = base + low
                if run is not None and run[1] + 1 == start:
                    run = (run[0], start + length - 1)
                else:
                    if run is not None:
                        yield run
                    run = (start, start + length - 1)
                holes &= ~((1 << (low + length)) - 1)
            if run is not None and run[1] < base + b:
                yield run
                run = None
        if run is not None:
            yield run

    def around(self, a: int, b: int) -> tuple:
        """When records ``a`` .. ``b`` (not read) may have been timed:
        from the earliest to the latest time of the records read in
        their buckets, and in the nearest bucket read before (after)
        when ``a`` (``b``) is the first (last) of its bucket; 0
        (``FOREVER``) when none was read before (after)."""
        _n, lo_seq, hi_seq = self.span()
        if lo_seq is None or not self.times:
            return (0, FOREVER)
        first, last = a >> BUCKET_SHIFT, b >> BUCKET_SHIFT
        ks = list(range(first, last + 1))
        per_page = 1 << (TIMES_SHIFT - BUCKET_SHIFT)
        low_k = min(self.times) * per_page
        high_k = (max(self.times) + 1) * per_page
        if not a & (BUCKET - 1):
            for k in range(first - 1, low_k - 1, -1):
                if self._bucket(k) is not None:
                    ks.append(k)
                    break
        if b & (BUCKET - 1) == BUCKET - 1:
            for k in range(last + 1, high_k):
                if self._bucket(k) is not None:
                    ks.append(k)
                    break
        found = [t for t in map(self._bucket, ks) if t is not None]
        if not found:
            return (0, FOREVER)
        return (
            min(t[0] for t in found) if lo_seq < a else 0,
            max(t[1] for t in found) if hi_seq > b else FOREVER,
        )

    def _bucket(self, k: int) -> typing.Optional[tuple]:
        """``(earliest, latest)`` of bucket ``k``, None when none of its
        records was read (or timed)."""
        page = self.times.get(k >> (TIMES_SHIFT - BUCKET_SHIFT))
        if page is None:
            return None
        i = (k & ((1 << (TIMES_SHIFT - BUCKET_SHIFT)) - 1)) << 1
        if not page[i + 1]:
            return None
        return (page[i], page[i + 1])

    def add(self, seq: int) -> bool:
        """Mark ``seq`` read; False when it was read before (or is
        below the floor: ``below``)."""
        page = self.pages.get(seq >> 16)
        if page is None:
            if seq >> 16 < self.floor:
                return False
            page = self.pages[seq >> 16] = bytearray(8192)
        i = seq & 0xFFFF
        bit = 1 << (i & 7)
        byte = page[i >> 3]
        if byte & bit:
            return False
        page[i >> 3] = byte | bit
        return True

    def __contains__(self, seq: int) -> bool:
        page = self.pages.get(seq >> 16)
        i = seq & 0xFFFF
        return page is not None and bool(page[i >> 3] & (1 << (i & 7)))

    def span(self) -> tuple:
        """``(numbers read, lowest, highest)``; lowest and highest None
        when none."""
        n = self.folded
        lo, hi = self.folded_lo, self.folded_hi
        for pageno in sorted(self.pages):
            value = int.from_bytes(self.pages[pageno], 'little')
            if not value:
                continue
            n += value.bit_count()
            base = pageno << 16
            if lo is None:
                lo = base + (value & -value).bit_length() - 1
            hi = base + value.bit_length() - 1
        return n, lo, hi

    def latest(self, pageno: int) -> int:
        """The latest time of the records of page ``pageno`` (its
        buckets', 0: none timed)."""
        per = 1 << (16 - TIMES_SHIFT)
        out = 0
        for k in range(pageno * per, (pageno + 1) * per):
            page = self.times.get(k)
            if page is not None:
                out = max(out, max(page[1::2]))
        return out

    def fold(self, floor: int) -> None:
        """Drop the pages below page ``floor`` (and their times), their
        counts, the windows of their gaps and their holes kept (class
        doc)."""
        if floor <= self.floor:
            return
        below = [p for p in self.pages if p < floor]
        if not below:
            self.floor = floor
            return
        top = (floor << 16) - 1
        windows = self.folded_windows
        for a, b in self.missing(top):
            windows.append(self.around(a, b))
            self.holes.append((a, b))
        if len(self.bad) >= MAX_NOTED:
            # more than were noted (``FileLoss.windows``): anywhere
            windows.append((0, FOREVER))
        keep = []
        for seq in self.bad:
            if seq <= top:
                windows.append(self.around(seq, seq))
            else:
                keep.append(seq)
        self.bad = keep
        del self.holes[: max(0, len(self.holes) - MAX_NOTED)]
        for pageno in sorted(below):
            value = int.from_bytes(self.pages.pop(pageno), 'little')
            if not value:
                continue
            self.folded += value.bit_count()
            base = pageno << 16
            if self.folded_lo is None:
                self.folded_lo = base + (value & -value).bit_length() - 1
            self.folded_hi = base + value.bit_length() - 1
        per = 1 << (16 - TIMES_SHIFT)
        for k in [k for k in self.times if k < floor * per]:
            del self.times[k]
        self.floor = floor
        if len(windows) > MAX_WINDOWS:
            windows[:] = _merged(windows, 0)

    def forget(self, before: int) -> None:
        """Drop the folded windows that ended before ``before``."""
        self.folded_windows = [
            w for w in self.folded_windows if w[1] >= before
        ]

    def below(self, seq: int) -> bool:
        """A number below the floor read now: True when it is one of
        the holes kept (a record counted lost, read late: the hole
        shrinks), False when not (read before, or not known: a copy of
        a record read)."""
        holes = self.holes
        # (in order: the pages are folded upwards)
        i = bisect.bisect_right(holes, (seq, FOREVER)) - 1
        if i < 0 or holes[i][1] < seq:
            return False
        a, b = holes[i]
        holes[i : i + 1] = [
            h for h in ((a, seq - 1), (seq + 1, b)) if h[0] <= h[1]
        ]
        return True

    def retire(self) -> None:
        """Everything folded, nothing kept but the counts: every
        number read from now on is below the floor."""
        self.fold(FOREVER >> 16)
        self.times.clear()
        self.folded_windows = []
        self.holes = []
        self.bad = []
        self.cuts = []

    def row(self) -> list:
        """``[count, lo, hi, first, invalid, last, ended, hosts]``
        (``count``: the valid records; what ``FileLoss.merge`` adds)."""
        n, lo, hi = self.span()
        return [
            n - self.invalid,
            lo,
            hi,
            self.first,
            self.invalid,
            self.last,
            self.ended,
            set(self.hosts),
        ]


def process_label(key: tuple) -> str:
    """``pid P on H (started at ts T)`` for a process key ``(host, pid,
    start)``."""
    host, pid, start = key
    if start is None:
        return 'pid %s on %s' % (pid, host)
    return 'pid %s on %s (started at ts %d)' % (pid, host, start)


class FileLoss:
    """Per process: ``seq`` numbers read, and what was lost.

    A process is ``(host, pid, start)``: the host and ``ts`` of its
    ``process.start`` record (``start`` None for records read before
    any, as in a file rotated away from its start, when pass 1 found no
    start of that pid), whatever file its records are found in: a
    record of a process already read is a duplicate wherever it is
    found (a copied file, a file holding its records twice), and a
    process that restarts (same pid) has a new ``process.start``.

    What a process lost is counted once per record (``per_process``):
    the runtime numbers a record (``seq``) when it hands it to its
    sinks, so a record a sink could not write is a ``seq`` gap in that
    sink's files, while one dropped before (a full buffer, a running
    span forgotten) leaves no gap; an invalid line is a record lost
    too, and one whose number cannot be read is one of its process's
    gaps when there are any.
    """

    def __init__(self) -> None:
        # process key: SeqSet (merged: its ``row()``)
        self.seqs = {}
        # process key: {sink: cumulative count} (sink.drops)
        self.drops = {}
        # process key: lines of it that were not valid records
        self.bad = {}
        # process key: of those, the lines whose seq could not be read
        # (charged to the process of the lines around them)
        self.unnumbered = {}
        # process key: SQL statements it dropped before they became
        # records (the largest cumulative count of its sql.dropped)
        self.sql_dropped = {}
        # process key: the sinks whose files its records were read from
        # (``file``; ``log``: a service log)
        self.sinks = {}
        # file name: records left out as duplicates, and records read
        self.duplicates = {}
        self.read = {}
        # file name: [lines read, why the rest is unreadable, hosts of
        # its records] of the files whose end could not be read (a cut
        # gzip stream): what was lost after is not known
        self.unreadable = {}
        # process key: the processes of the files whose end could not be
        # read (what they lost is after the last record read there)
        self.cut_processes: set = set()
        # process key: [(time, records dropped unnumbered so far, SQL
        # statements dropped so far)] of its sink.drops and sql.dropped
        # counters (``windows``: where their counts grew)
        self.reports: dict = {}
        # file name: its lines repaired (a field missing, filled in:
        # ``codec.repair``), records read, not lost; process key: those
        # of them whose seq was the field (each one of its missing
        # numbers)
        self.repaired: dict = {}
        self.found: dict = {}
        # process key: SeqSet of the processes done with (``retire``;
        # the follow mode), the latest ``MAX_RETIRED``
        self.retired: dict = {}

    def report(
        self,
        key: tuple,
        ts: int,
        unnumbered: typing.Optional[int],
        sql: typing.Optional[int],
    ) -> None:
        """A drop counter of process ``key`` read, at ``ts``: the
        records it dropped before numbering them so far, or the SQL
        statements it dropped so far (None: not this counter)."""
        rows = self.reports.setdefault(key, [])
        if len(rows) < MAX_NOTED:
            rows.append((ts, unnumbered, sql))

    def merge(self, other: 'FileLoss') -> None:
        for key, s in other.seqs.items():
            mine = self.seqs.get(key)
            if mine is None:
                self.seqs[key] = s
            else:
                mine.merge(s)
        for key, rows in other.reports.items():
            mine = self.reports.setdefault(key, [])
            mine.extend(rows[: MAX_NOTED - len(mine)])
        self.cut_processes |= other.cut_processes
        for key, counts in other.drops.items():
            mine = self.drops.setdefault(key, {})
            for sink, n in counts.items():
                if n > mine.get(sink, 0):
                    mine[sink] = n
        for key, n in other.sql_dropped.items():
            if n > self.sql_dropped.get(key, 0):
                self.sql_dropped[key] = n
        for key, names in other.sinks.items():
            self.sinks[key] = self.sinks.get(key, set()) | names
        for attr in (
            'bad',
            'unnumbered',
            'duplicates',
            'read',
            'repaired',
            'found',
        ):
            mine = getattr(self, attr)
            for key, n in getattr(other, attr).items():
                mine[key] = mine.get(key, 0) + n
        for fname, (line, error, hosts) in other.unreadable.items():
            row = self.unreadable.setdefault(fname, [line, error, set()])
            row[2] = row[2] | hosts

    def records(self) -> int:
        return sum(_seq_row(s)[0] for s in self.seqs.values()) + sum(
            self.found.values()
        )

    def windows(self) -> dict:
        """``{process key: [(from, to)]}``: when each process that lost
        records lost them, on the corrected clock (sorted, merged,
        widened by ``WINDOW_SLACK_US``; ``FOREVER``: until its end).

        A record lost with a number (a ``seq`` gap, an invalid line with
        its number) was written between the records numbered around it
        (``SeqSet.timeline``: the nearest noted before and after); one
        whose number could not be read, after the record read before it
        in its file; a sink's drops beyond the last number read, and
        what a file whose end could not be read held, after the last
        record read; what the buffer dropped unnumbered (and the SQL
        statements dropped), between the counter that counted them and
        the one before it."""
        rows = self.per_process()
        out = {}
        for key, s in self.seqs.items():
            found = self.windows_of(key, s, rows[key])
            if found is not None:
                out[key] = found
        return out

    def windows_of(
        self, key: tuple, s: SeqSet, row: dict
    ) -> typing.Optional[list]:
        """The windows of ``windows`` of process ``key`` (``row``: its
        ``per_process``), None when it lost nothing."""
        if not (
            row['lost'] or row['sql_dropped'] or key in self.cut_processes
        ):
            return None
        _n, _lo, hi = s.span()
        spans = [s.around(a, b) for a, b in s.missing()]
        spans.extend(s.folded_windows)
        spans.extend(s.around(seq, seq) for seq in s.bad)
        spans.extend(s.cuts)
        if len(s.bad) >= MAX_NOTED or len(s.cuts) >= MAX_NOTED:
            # more than were noted: anywhere
            spans.append((0, FOREVER))
        by_sink = row['dropped'] - row['buffer_dropped']
        if hi is not None and (
            by_sink > row['missing'] or key in self.cut_processes
        ):
            # a sink's drops after the last number read, or the
            # unreadable end of a file
            spans.append(s.around(hi + 1, hi + 1))
        if row['buffer_dropped'] or row['sql_dropped']:
            spans.extend(_counter_windows(self.reports.get(key, [])))
        return _merged(spans)

    def per_process(self) -> dict:
        """``{key: row}`` of every process read.  A row has ``file``
        (where it was first read), ``host``, ``pid``, ``records`` (valid
        records read), ``last_us``, ``ended``, ``hosts``, and:

        ``missing``: ``seq`` numbers never read, between its lowest and
        its highest; ``dropped``: records it reported dropped
        (``sink.drops``) that the files read lack: the full buffer's,
        the running spans forgotten, and the drops of the sinks whose
        files were read (``file``, ``log``; not ``otlp``'s: those
        records are in the files); ``sql_dropped``: SQL statements it
        dropped before they became records (``sql.dropped``; not
        records, not in ``lost``);

        and ``lost``, each lost record counted once, the sum of its
        causes (``LOSS_CAUSES``): ``invalid``, its lines that were not
        valid records (a line repeating a record read is not counted:
        nothing is lost); ``sink_dropped``, the drops of the sinks
        read (their records were numbered: a gap, or after the last
        record read); ``buffer_dropped``, the full buffer's and the
        running spans forgotten (never numbered: no gap);
        ``unreported_gaps``, missing numbers that nothing explains (a
        file lost or cut, a process killed mid-write).  An invalid line
        whose number cannot be read and a sink's drop may be the same
        record (a line a full disk cut short is both), and each may be
        a missing number or one after the last read: the numbers lost
        are the most of the three counts, never their sum."""
        return {key: self.row(key, s) for key, s in self.seqs.items()}

    def row(self, key: tuple, s: typing.Any) -> dict:
        """The row of ``per_process`` of process ``key`` (``s``: its
        ``SeqSet`` or its ``row()``)."""
        n, lo, hi, first, numbered, last, ended, hosts = _seq_row(s)
        host, pid, _start = key
        missing = 0
        if lo is not None and hi is not None:
            # (less the repaired records whose number was not read)
            missing = max(
                0, hi - lo + 1 - n - numbered - self.found.get(key, 0)
            )
        unnumbered = self.unnumbered.get(key, 0)
        drops = self.drops.get(key) or {}
        buffer_dropped = sum(
            n for cause, n in drops.items() if cause in UNNUMBERED_DROPS
        )
        read_from = self.sinks.get(key) or {'file'}
        by_sink = min(drops.get(sink, 0) for sink in read_from)
        numbers = max(missing, unnumbered, by_sink)
        sink_dropped = min(by_sink, numbers - unnumbered)
        row = {
            'key': key,
            'file': first[1],
            'host': host,
            'pid': pid,
            'records': n + self.found.get(key, 0),
            'missing': missing,
            'dropped': buffer_dropped + by_sink,
            'sql_dropped': self.sql_dropped.get(key, 0),
            'invalid': numbered + unnumbered,
            'sink_dropped': sink_dropped,
            'buffer_dropped': buffer_dropped,
            'unreported_gaps': numbers - unnumbered - sink_dropped,
            'last_us': last,
            'ended': ended,
            'hosts': sorted(hosts),
        }
        row['lost'] = sum(row[cause] for cause in LOSS_CAUSES)
        return row

    def retire(self, key: tuple) -> tuple:
        """Process ``key`` is done with (the follow mode: ended long
        ago): its row (``per_process``) and its windows (``windows``,
        None: none), then all it holds dropped but
        its ``SeqSet``, kept folded whole (``SeqSet.retire``: a record
        of it read later is not read again) among the last
        ``MAX_RETIRED`` (``retired``)."""
        s = self.seqs.pop(key)
        row = self.row(key, s)
        windows = self.windows_of(key, s, row)
        s.retire()
        for attr in (
            'drops',
            'bad',
            'unnumbered',
            'sql_dropped',
            'sinks',
            'reports',
            'found',
        ):
            getattr(self, attr).pop(key, None)
        self.cut_processes.discard(key)
        retired = self.retired
        retired[key] = s
        while len(retired) > MAX_RETIRED:
            del retired[next(iter(retired))]
        return row, windows

    def summary(self) -> list:
        """Rows ``{file, host, pid, records, missing, dropped, invalid,
        sql_dropped, lost}`` and the causes of ``lost``
        (``LOSS_CAUSES``) of the processes that lost records or SQL
        statements (``file``: where each was first read)."""
        keys = (
            'file',
            'host',
            'pid',
            'records',
            'missing',
            'dropped',
            'invalid',
            'sql_dropped',
            'lost',
        ) + LOSS_CAUSES
        return [
            {k: r[k] for k in keys}
            for r in sorted(
                self.lossy(), key=lambda r: (r['file'], r['pid'], r['host'])
            )
        ]

    def lossy(self) -> list:
        """Rows of ``per_process`` that lost records or SQL
        statements."""
        return sorted(
            (
                r
                for r in self.per_process().values()
                if r['lost'] or r['sql_dropped']
            ),
            key=lambda r: (r['host'], r['pid'], r['file']),
        )

    def unended(self) -> list:
        """Rows ``{file, host, pid, last_us}`` of the processes read
        without a ``process.end`` record: killed (``kill -9``, the OOM
        killer), or still running when collected."""
        return sorted(
            (
                {k: r[k] for k in ('file', 'host', 'pid', 'last_us')}
                for r in self.per_process().values()
                if not r['ended'] and r['records']
            ),
            key=lambda r: (r['host'], r['pid'], r['file']),
        )

    def duplicate_files(self) -> list:
        """Rows ``{file, duplicates, records}`` of the files holding
        records already read (``records``: all the valid records read
        from the file, duplicates included)."""
        return sorted(
            (
                {'file': f, 'duplicates': n, 'records': self.read.get(f, n)}
                for f, n in self.duplicates.items()
                if n
            ),
            key=lambda r: r['file'],
        )


# The causes of lost records (``FileLoss.per_process``), each record
# counted under one.
LOSS_CAUSES = ('sink_dropped', 'buffer_dropped', 'unreported_gaps', 'invalid')
# The drop counts of ``sink.drops`` that are not a sink's: records
# dropped before they were numbered (``instrument.runtime.buffer``).
UNNUMBERED_DROPS = ('buffer_full', 'open_untracked')


def _counter_windows(rows: list) -> list:
    """Where the cumulative drop counts of ``rows`` (``FileLoss.
    reports``) grew: from the counter before to the one that counted
    them (from the start when no counter came before)."""
    out = []
    for col in (1, 2):
        before = (0, 0)
        for row in sorted(r for r in rows if r[col] is not None):
            if row[col] > before[1]:
                out.append((before[0], row[0]))
            if row[col] >= before[1]:
                before = (row[0], row[col])
    return out


def _merged(spans: list, slack: int = WINDOW_SLACK_US) -> list:
    """``spans`` widened by the slack, sorted and merged, at most
    ``MAX_WINDOWS`` (the closest merged first)."""
    out: list = []
    for a, b in sorted(spans):
        a -= slack
        b = b + slack if b < FOREVER else FOREVER
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    if len(out) > MAX_WINDOWS:
        # close the smallest gaps between windows
        gaps = sorted(out[i + 1][0] - out[i][1] for i in range(len(out) - 1))
        close = gaps[len(out) - MAX_WINDOWS - 1]
        fewer = [out[0]]
        for a, b in out[1:]:
            if a - fewer[-1][1] <= close:
                fewer[-1] = (fewer[-1][0], b)
            else:
                fewer.append((a, b))
        out = fewer
    return out


def _seq_row(s) -> list:
    if isinstance(s, SeqSet):
        return s.row()
    return list(s)
