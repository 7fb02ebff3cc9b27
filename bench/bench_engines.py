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
"""Which columnar engine for the analyser: Polars, DuckDB or pyarrow.

Issue 17 moves the analyser's per-event work into one columnar engine
chosen by measurement.  This bench runs the same representative kernels
on the same span files with each engine, every run in a fresh
subprocess, and prints events/s, peak RSS and ratios against two
baselines measured in the same run: a plain ``json.loads`` loop
(``json``) and the current analyser's per-line work (``msgspec``:
``load.RecordDecoder`` and the analyser's own structures).

Kernels (``--kernels``):

``decode``    every line of every file (plain, ``.gz``, service logs
              with a prefix before ``{"v":``) into one table of the
              schema's fields, ``attrs`` flattened to the keys the
              analyser reads (``a_fp``, ``a_db``, ``a_kind``,
              ``a_rows``, ``a_status``, ``a_host`` ...), with file and
              line number; bad lines counted per kind with file:line
              (malformed, truncated, unknown_version, invalid,
              duplicate) and the rest validated as the schema says.
``digest``    the ``sql.`` lines only (a substring filter before any
              JSON is parsed), then the SQL classes ``(fp, svc, db,
              call, kind)``: count, sum, sum of squares, min, max, rows,
              errors, first/last, the 50-per-decade histogram, and per
              fingerprint / database / service the median and p95 read
              from the histogram as ``sqldigest.percentile`` does.
``clocks``    the complete ``rpc.`` spans only; sends (``rpc.call``,
              ``rpc.cast``) joined to their dispatches by span id
              across hosts; per directed host pair the 16 tightest
              bounds with their origin (file, line, request), the
              number of hops and the min/max difference.
``assembly``  all records of a request, sorted by time per request id,
              SQL time summed per enclosing span in the engine, then
              handed to Python one request at a time (column lists cut
              at request boundaries; Polars also ``partition_by``).
``stream``    the whole of ``decode`` + ``digest`` + ``assembly`` in
              bounded memory: blocks of the input decoded one at a time
              and written as Parquet parts partitioned by a hash bucket
              of the request id (one bucket per 100 MB of input; the
              export would partition by day and host); the digest from
              the parts; requests handed to Python one bucket at a
              time.  Run on the 10M-event set (``--big-events 0``: on
              the main set); DuckDB under ``--duckdb-memory``.

Variants of ``decode``: ``1thread`` (the engine limited to one
thread), ``ndjson`` (the engine's own NDJSON reader on the files it can
read: no line numbers, no bad-line report; a ceiling) and, for DuckDB,
``fast`` (``read_json`` on the NDJSON files, the numbered lines path
only for service logs and files with a bad row or a repeated seq).

Each row prints seconds, events (or statements) per second of wall time
and per CPU second of the child (less sensitive to other work on the
shared cores), peak RSS of the child, the ratio to the ``msgspec``
baseline of the same kernel and whether the kernel's result equals the
baseline's (``check``); ``--repeat`` keeps the fastest of N runs.  The
load average is printed next to each row: the machine has two shared
cores.  With ``pt-query-digest`` installed (Debian: percona-toolkit),
the digest's rate is also given as a multiple of its rate on the same
statements.

Data: the 1M-event set of ``bench/bench_report.py`` (cached under the
temp directory) and a 10M-event set made by the same generator with ten
times the requests (``--big-events``, cached as
``instrument-bench-engines-<requests>``); a small damaged set (the
generator's bad input plus a binary line, a type conflict and an
unknown ``attrs`` type) checks that each engine reports the same bad
lines as today's analyser.

Engines that are not installed are skipped with a line saying so
(``pip install polars duckdb pyarrow``).  Usage::

    nice -n 10 python bench/bench_engines.py [--kernels decode,digest]
        [--engines polars,duckdb] [--big-events 0]
"""

import argparse
import collections
import glob
import gzip
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

ENGINES = ('polars', 'duckdb', 'pyarrow')
BASELINES = ('json', 'msgspec')
KERNELS = ('decode', 'digest', 'clocks', 'assembly', 'stream')
BLOCK_BYTES = 32 << 20
BUCKETS = 8  # at least; one per 100 MB of input
PER_DECADE = 50
KEEP_BOUNDS = 16
PHASES = ('B', 'X', 'I', 'M', 'C')
SENDERS = ('rpc.call', 'rpc.cast')
MARKER = '{"v":'
FILTERS = {'digest': '"ev":"sql.', 'clocks': '"ev":"rpc.'}

# The table every engine builds: the schema's fields, ``err`` and the
# ``attrs`` keys the analyser reads, flattened.  ``strs`` is a list of
# strings.  ``attrs`` of metadata and counters (``ph`` M and C: process
# start, fingerprint texts, sink drops, sql.agg) have free keys: their
# raw line is kept (``raw``) for Python, a few per process.
TOP = (('v', 'int'), ('ph', 'str'), ('seq', 'int'), ('ts', 'int'),
       ('dur_us', 'int'), ('host', 'str'), ('svc', 'str'), ('pid', 'int'),
       ('tid', 'int'), ('ev', 'str'), ('span', 'str'), ('parent', 'str'),
       ('req', 'str'), ('greq', 'str'), ('inst', 'strs'), ('st', 'str'))
ERR = (('cls', 'str'), ('msg', 'str'))
ATTRS = (('fp', 'str'), ('db', 'str'), ('kind', 'str'), ('call', 'str'),
         ('rows', 'int'), ('status', 'int'), ('route', 'str'),
         ('method', 'str'), ('outcome', 'str'), ('reason', 'str'),
         ('attempt', 'int'), ('host', 'str'), ('func', 'str'),
         ('cls', 'str'), ('count', 'int'), ('topic', 'str'))
COLUMNS = ([n for n, _t in TOP] + ['err_' + n for n, _t in ERR] +
           ['a_' + n for n, _t in ATTRS])
TYPES = dict([(n, t) for n, t in TOP] + [('err_' + n, t) for n, t in ERR] +
             [('a_' + n, t) for n, t in ATTRS])
REQUIRED = ('v', 'ph', 'seq', 'ts', 'host', 'svc', 'pid', 'ev')


# -- data ------------------------------------------------------------------

def _bench_report():
    sys.path.insert(0, HERE)
    import bench_report
    return bench_report


def synthetic_module():
    """The synthetic cloud generator: ``tests/synthetic`` (where it is
    moving), else ``instrument.analysis.synthetic``."""
    try:
        from tests import synthetic
    except ImportError:
        from instrument.analysis import synthetic
    return synthetic


def one_million(events: int) -> tuple:
    """The set of ``bench_report.py`` (generated there, cached)."""
    base, info = _bench_report().generate(events)
    return os.path.join(base, 'logs'), info['events'], info['sql']


def big_set(events: int) -> tuple:
    """About ``events`` events: ``synthetic.generate`` with ten times the
    requests of the 1M set, same seed, rate and 40 computes (the same
    cloud, ten times longer).  Cached in the temp directory."""
    # ten times the 1M set's requests (bench_report: events // 67)
    requests = max(50, events // 10 // 67) * 10
    base = os.path.join(tempfile.gettempdir(),
                        'instrument-bench-engines-%d' % requests)
    marker = os.path.join(base, 'truth.json')
    if not os.path.exists(marker):
        code = ('import json, os, sys, time\n'
                'sys.path.insert(0, %r)\n'
                'sys.path.insert(0, %r)\n'
                'import bench_engines\n'
                'synthetic = bench_engines.synthetic_module()\n'
                't0 = time.monotonic()\n'
                'truth = synthetic.generate(%r, seed=11, requests=%d, '
                'rate=3.0, computes=40)\n'
                'info = {"events": truth.events, "requests": %d,\n'
                '        "sql": sum(v[0] for v in truth.sql.values()),\n'
                '        "generated_s": time.monotonic() - t0}\n'
                'json.dump(info, open(%r, "w"))\n' % (
                    ROOT, HERE, os.path.join(base, 'logs'), requests,
                    requests, marker))
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run([sys.executable, '-c', code], check=True)
    with open(marker) as f:
        info = json.load(f)
    return os.path.join(base, 'logs'), info['events'], info['sql']


# Lines added to the generator's damaged set: (file suffix, text, kind
# today's analyser gives it; None: valid).
EXTRA_BAD = (
    (b'{"v":1,"ph":"X","seq":99990,"ts":"abc","host":"ctl-0","svc":'
     b'"scheduler","pid":2021,"ev":"x","span":"a","st":"ok","dur_us":1}',
     'invalid'),
    (b'\x00\xff\xfebinary garbage\x01', 'malformed'),
    (b'{"v":1,"ph":"I","seq":99991,"ts":1700000000000000,"host":"ctl-0",'
     b'"svc":"scheduler","pid":2021,"ev":"y","attrs":{"rows":"many"}}',
     None),
    (b'', None),
    (b'[1, 2]', 'malformed'),
)


def damaged_set() -> str:
    """A small damaged set: the generator's bad input (duplicate,
    malformed, unknown version, invalid, truncated, lost seqs) and the
    lines of ``EXTRA_BAD`` appended to the scheduler's file."""
    base = os.path.join(tempfile.gettempdir(), 'instrument-bench-engines-bad')
    logs = os.path.join(base, 'logs')
    marker = os.path.join(base, 'truth.json')
    if not os.path.exists(marker):
        synthetic = synthetic_module()
        shutil.rmtree(base, ignore_errors=True)
        truth = synthetic.generate(logs, seed=3, requests=300, rate=3.0,
                                   computes=4, bad_input=True)
        path = glob.glob(os.path.join(logs, '*nova-scheduler*'))[0]
        with open(path, 'ab') as f:
            for text, _kind in EXTRA_BAD:
                f.write(text + b'\n')
        with open(marker, 'w') as f:
            json.dump({'events': truth.events}, f)
    return logs


def span_files(logs: str) -> list:
    from instrument.analysis import load
    return load.discover([logs])[0]


# -- the Python block reader shared by the Polars and pyarrow engines ------

def read_blocks(paths: list, block_bytes: int = BLOCK_BYTES):
    """Yield ``(file index, lines before, text, cut)`` per block of at
    most about ``block_bytes``, ending at a newline except the last
    block of a file when the file does not end with one (``cut``).

    Per block, not per line: gzip is inflated by zlib; UTF-8 is checked
    (``isascii`` first); a line that is not UTF-8 is blanked out and
    yielded as ``(file index, line, None, reason)`` to be counted as
    malformed, as today's decoders refuse it.
    """
    for fi, path in enumerate(paths):
        raw = open(path, 'rb')
        f = gzip.GzipFile(fileobj=raw) if path.endswith('.gz') else raw
        before = 0
        rest = b''
        with raw:
            while True:
                try:
                    data = f.read(block_bytes)
                except (OSError, EOFError) as exc:
                    yield fi, before, None, 'unreadable: %s' % exc
                    data = b''
                if not data:
                    break
                data = rest + data
                cut = data.rfind(b'\n') + 1
                if cut == 0:
                    rest = data
                    continue
                block, rest = data[:cut], data[cut:]
                yield from _text(fi, before, block, False)
                before += block.count(b'\n')
            if rest:
                yield from _text(fi, before, rest, True)


def _text(fi: int, before: int, block: bytes, cut: bool):
    if not block.isascii():
        while True:
            try:
                text = block.decode('utf-8')
                break
            except UnicodeDecodeError as exc:
                start = block.rfind(b'\n', 0, exc.start) + 1
                end = block.find(b'\n', exc.start)
                end = len(block) if end < 0 else end
                lineno = before + block.count(b'\n', 0, start) + 1
                line = block[start:end]
                # as today: a record is malformed, another line is
                # another line of a service log
                yield fi, lineno, None, (
                    'malformed' if line[:1] == b'{' or
                    MARKER.encode() in line else 'other')
                block = block[:start] + block[end:]
    else:
        text = block.decode('ascii')
    yield fi, before, text, cut


def classify_bad(line: str, cut_last: bool) -> tuple:
    """Today's analyser's verdict on one line an engine could not type:
    ``(kind, reason)``; kind None for a line valid by the schema whose
    values do not fit the table's types (it is kept, coerced)."""
    from instrument.analysis import load
    raw = line.encode('utf-8', 'surrogateescape')
    if not cut_last:
        raw += b'\n'
    return load.decode_error(raw, cut_last)


def coerce(line: str) -> dict:
    """One valid record as a row of the table; values of another type
    than the column's are left out (None)."""
    rec = json.loads(line)
    attrs = rec.get('attrs') if isinstance(rec.get('attrs'), dict) else {}
    err = rec.get('err') if isinstance(rec.get('err'), dict) else {}
    row = {}
    for name in COLUMNS:
        if name.startswith('a_'):
            value = attrs.get(name[2:])
        elif name.startswith('err_'):
            value = err.get(name[4:])
        else:
            value = rec.get(name)
        kind = TYPES[name]
        ok = (kind == 'int' and type(value) is int or
              kind == 'str' and isinstance(value, str) or
              kind == 'strs' and isinstance(value, list) and
              all(isinstance(v, str) for v in value))
        row[name] = value if ok else None
    return row


class Found:
    """Bad lines found by an engine: ``(file index, line, kind)``."""

    def __init__(self) -> None:
        self.bad = []
        self.coerced = 0
        self.other = 0
        self.problems = []
        self.slow_files = None

    def add(self, fi: int, line: int, kind: str) -> None:
        self.bad.append((fi, line, kind))

    def summary(self, paths: list) -> dict:
        counts = collections.Counter(k for _f, _l, k in self.bad)
        listed = sorted((os.path.basename(paths[f]), ln, k)
                        for f, ln, k in self.bad)
        return {'counts': dict(sorted(counts.items())),
                'lines': hashlib.md5(  # noqa: S324 - a checksum
                    json.dumps(listed).encode()).hexdigest()[:12],
                'first': ['%s:%d %s' % x for x in listed[:8]],
                'coerced': self.coerced}


def bisect_bad(decode, n: int, take, line_of, text_of, cut_of, found,
               fi: int, lo: int = 0, hi: int = None) -> list:
    """Decode rows ``lo:hi`` with ``decode(take(lo, hi))``; on failure
    split in halves down to single lines, and classify each line that
    fails alone with today's rules.  Returns the decoded pieces and the
    coerced rows (dicts).  Cost: about two extra decodes of the block
    per bad line."""
    hi = n if hi is None else hi
    try:
        return [decode(take(lo, hi))], []
    except Exception:  # noqa: BLE001 - the halves say which line
        pass
    if hi - lo == 1:
        kind, _reason = classify_bad(text_of(lo), cut_of(lo))
        if kind is None:
            found.coerced += 1
            row = coerce(text_of(lo))
            row['file'] = fi
            row['line'] = line_of(lo)
            return [], [row]
        found.add(fi, line_of(lo), kind)
        return [], []
    mid = (lo + hi) // 2
    a, ra = bisect_bad(decode, n, take, line_of, text_of, cut_of, found,
                       fi, lo, mid)
    b, rb = bisect_bad(decode, n, take, line_of, text_of, cut_of, found,
                       fi, mid, hi)
    return a + b, ra + rb


# -- baselines: the current analyser's per-line Python ---------------------

def _lines(paths: list):
    """``(file index, line number, raw bytes)`` of every line."""
    for fi, path in enumerate(paths):
        f = gzip.open(path, 'rb') if path.endswith('.gz') else \
            open(path, 'rb')
        with f:
            try:
                for lineno, raw in enumerate(f, 1):
                    yield fi, lineno, raw
            except (OSError, EOFError):
                pass


def py_decode(paths: list, how: str, needle: str = None) -> tuple:
    """The baselines: ``json`` (``json.loads`` on each record line) and
    ``msgspec`` (``load.RecordDecoder``, the analyser's pass 2, with
    its ``seq`` duplicate check).  Returns ``(records, found)``."""
    from instrument.analysis import load
    found = Found()
    needle = needle.encode() if needle else None
    marker = load.LOG_MARKER
    if how == 'json':
        loads = json.loads
        records = 0
        for _fi, _ln, raw in _lines(paths):
            if needle is not None and needle not in raw:
                continue
            if raw[:1] != b'{':
                j = raw.find(marker)
                if j < 0:
                    continue
                raw = raw[j:]
            try:
                loads(raw)
                records += 1
            except ValueError:
                pass
        return records, found
    decoder = load.RecordDecoder()
    decode = decoder.decode
    seen = {}
    out = []
    for fi, lineno, raw in _lines(paths):
        if needle is not None and needle not in raw:
            continue
        if raw[:1] != b'{':
            j = raw.find(marker)
            if j < 0:
                if raw.strip():
                    found.other += 1
                continue
            raw = raw[j:]
        rec = decode(raw)
        if rec is None:
            found.add(fi, lineno, decoder.error[0])
            continue
        key = (fi, rec.pid, rec.seq)
        if key in seen:
            found.add(fi, lineno, 'duplicate')
            continue
        seen[key] = None
        out.append((fi, lineno, rec))
    return out, found


def py_digest(recs: list) -> dict:
    from instrument.analysis import sqldigest
    digest = sqldigest.SqlDigest()
    add = digest.add
    for _fi, _ln, rec in recs:
        if rec.ph == 'X' and rec.ev == 'sql.query':
            a = rec.attrs or {}
            add(rec.ts, rec.dur_us, a.get('fp'), rec.svc, a.get('db'),
                a.get('call'), a.get('rows'), rec.st == 'error',
                a.get('kind'))
        elif rec.ev == 'sql.fingerprint':
            a = rec.attrs or {}
            digest.fingerprint(a.get('fp'), a.get('text'), a.get('kind'))
    out = {}
    for group in ('fingerprint', 'database', 'service'):
        groups, _members = digest.grouped(group)
        out[group] = sorted(
            (str(g), s[0], s[1], s[3], s[4], s[5], s[6],
             round(sqldigest.percentile(s, 50), 3),
             round(sqldigest.percentile(s, 95), 3))
            for g, s in groups.items())
    out['classes'] = len(digest.classes)
    return out


def py_clocks(paths: list) -> dict:
    """The current pass 1 (``clockpass.clock_pass``, one process)."""
    from instrument.analysis import clockpass
    from instrument.analysis import clocks
    captured = {}
    real_solve = clocks.solve

    def solve(collector, hosts=()):
        captured['c'] = collector
        return real_solve(collector, hosts)
    clocks.solve = solve
    try:
        _result, _fh, _first, counts = clockpass.clock_pass(
            paths, 600_000_000, jobs=1)
    finally:
        clocks.solve = real_solve
    collector = captured['c']
    return clock_check(counts['hops'], collector.pairs, {
        k: [w for w, _o in v] for k, v in collector.bounds.items()})


def clock_check(hops: int, pairs: int, bounds: dict) -> dict:
    listed = sorted((a, b, sorted(ws)[:KEEP_BOUNDS])
                    for (a, b), ws in bounds.items())
    return {'hops': hops, 'pairs': pairs, 'host_pairs': len(listed),
            'bounds': hashlib.md5(  # noqa: S324 - a checksum
                json.dumps(listed).encode()).hexdigest()[:12]}


def py_assembly(recs: list) -> dict:
    """Today's ingestion into ``requests.Assembler`` (no finalisation:
    that part stays in Python either way)."""
    from instrument.analysis import requests
    asm = requests.Assembler()
    for _fi, _ln, rec in recs:
        ph = rec.ph
        if ph == 'X':
            if rec.ev == 'sql.query':
                if rec.req is not None:
                    asm.sql(rec.req, rec.parent, rec.dur_us,
                            rec.ts + rec.dur_us, rec, rec.st == 'error')
            elif rec.ev != 'sql.txn':
                asm.span(rec, rec.ts, True)
        elif ph == 'B':
            asm.span(rec, rec.ts, False)
        elif ph == 'I':
            asm.instant(rec, rec.ts)
    return {'requests': len(asm.open),
            'events': sum(r.events for r in asm.open.values()),
            'sql_groups': sum(len(r.sql) for r in asm.open.values())}


# -- digest helpers shared by the engines ----------------------------------

def hist_percentile(n, lo, hi, buckets, pct) -> float:
    """``sqldigest.percentile`` from ``[(bucket, count)]`` sorted."""
    rank = pct / 100.0 * n
    seen = 0
    value = hi
    for b, c in buckets:
        seen += c
        if seen >= rank:
            value = 10 ** ((b + 0.5) / PER_DECADE)
            break
    return round(float(min(max(value, lo), hi)), 3)


def digest_rows(stats, hist) -> list:
    """Rows ``(group, count, sum, min, max, rows, errors, p50, p95)``
    from per-group statistics ``{g: (n, sum, min, max, rows, errors)}``
    and histograms ``{g: [(bucket, count)]}`` (small tables: one row per
    class and bucket)."""
    out = []
    for g, (n, total, lo, hi, rows, errors) in stats.items():
        b = sorted(hist[g])
        out.append((str(g), n, total, lo, hi, rows, errors,
                    hist_percentile(n, lo, hi, b, 50),
                    hist_percentile(n, lo, hi, b, 95)))
    return sorted(out)


# -- Polars ----------------------------------------------------------------

def _pl_types():
    import polars as pl

    def conv(kind):
        return {'int': pl.Int64, 'str': pl.String,
                'strs': pl.List(pl.String)}[kind]
    fields = {n: conv(t) for n, t in TOP}
    fields['err'] = pl.Struct({n: conv(t) for n, t in ERR})
    fields['attrs'] = pl.Struct({n: conv(t) for n, t in ATTRS})
    return pl.Struct(fields), {n: conv(t) for n, t in TYPES.items()}


def _pl_flatten(pl, r):
    cols = [r.struct.field(n).alias(n) for n, _t in TOP]
    cols += [r.struct.field('err').struct.field(n).alias('err_' + n)
             for n, _t in ERR]
    cols += [r.struct.field('attrs').struct.field(n).alias('a_' + n)
             for n, _t in ATTRS]
    return cols


def pl_decode(paths: list, needle: str = None, found: Found = None,
              blocks=None):
    """Blocks of text -> lines -> records -> typed columns.  Yields one
    DataFrame per block (``file``, ``line``, ``COLUMNS``, ``raw``)."""
    import polars as pl
    dtype, types = _pl_types()
    found = found if found is not None else Found()
    blocks = blocks if blocks is not None else read_blocks(paths)
    for fi, before, text, cut in blocks:
        if text is None:
            if cut == 'other':
                found.other += 1
            elif cut == 'malformed':
                found.add(fi, before, 'malformed')
            else:
                found.problems.append((fi, cut))
            continue
        lines = pl.Series('text', [text]).str.split('\n').explode()
        n = len(lines) - (0 if cut else 1)
        df = pl.DataFrame({'text': lines.head(n)}).with_columns(
            line=pl.int_range(before + 1, before + n + 1, dtype=pl.Int64),
            file=pl.lit(fi, pl.Int32))
        pos = pl.col('text').str.find(MARKER, literal=True)
        df = df.with_columns(rec=pl.when(pl.col('text').str.starts_with(
            '{')).then(pl.col('text')).when(pos.is_not_null()).then(
            pl.col('text').str.slice(pos)).otherwise(None))
        if needle is None:
            found.other += df.filter(
                pl.col('rec').is_null() &
                (pl.col('text').str.strip_chars() != '')).height
            cand = df.filter(pl.col('rec').is_not_null())
        else:
            cand = df.filter(pl.col('rec').is_not_null() &
                             pl.col('rec').str.contains(needle,
                                                        literal=True))
        cand = cand.select('file', 'line', 'rec')
        last = before + n

        def decode(part):
            r = pl.col('rec').str.json_decode(dtype)
            return part.lazy().select(
                'file', 'line', pl.col('rec').alias('raw'),
                r.alias('r')).select(
                'file', 'line', 'raw', *_pl_flatten(pl, pl.col('r'))
            ).collect()
        recs = cand['rec']
        lns = cand['line']
        pieces, rows = bisect_bad(
            decode, cand.height,
            lambda a, b, cand=cand: cand.slice(a, b - a),
            lambda i, lns=lns: lns[i], lambda i, recs=recs: recs[i],
            lambda i, lns=lns, cut=cut, last=last: cut and lns[i] == last,
            found, fi)
        if rows:
            pieces.append(pl.DataFrame(
                [dict(r, raw=None) for r in rows],
                schema=dict({'file': pl.Int32, 'line': pl.Int64,
                             'raw': pl.String}, **types)).select(
                pieces[0].columns if pieces else
                ['file', 'line', 'raw'] + COLUMNS))
        for piece in pieces:
            yield piece.with_columns(raw=pl.when(pl.col('ph').is_in(
                ['M', 'C'])).then(pl.col('raw')).otherwise(None))


def pl_validate(pl, df, found: Found):
    """The schema's value checks and ``seq`` duplicates, in the engine;
    returns the valid rows."""
    ph = pl.col('ph')
    bad_version = pl.col('v').is_null() | (pl.col('v') != 1)
    missing = pl.any_horizontal([pl.col(n).is_null() for n in REQUIRED])
    invalid = (missing | ~ph.is_in(PHASES) |
               (ph.is_in(['B', 'X']) & (pl.col('span').is_null() |
                                         (pl.col('span') == ''))) |
               ((ph == 'X') & (pl.col('dur_us').is_null() |
                               (pl.col('dur_us') < 0) |
                               ~pl.col('st').is_in(['ok', 'error']))))
    df = df.with_columns(kind=pl.when(bad_version).then(pl.lit(
        'unknown_version')).when(invalid).then(pl.lit('invalid')).otherwise(
        None))
    # rows come in file and line order: the first of each (file, pid,
    # seq) among the otherwise valid rows is kept
    df = df.with_columns(dup=(pl.col('kind').is_null() & ~pl.struct(
        'file', 'pid', 'seq', pl.col('kind').is_null()).is_first_distinct()
    ))
    bad = df.filter(pl.col('kind').is_not_null() | pl.col('dup')).select(
        'file', 'line', pl.when(pl.col('dup')).then(pl.lit(
            'duplicate')).otherwise(pl.col('kind')).alias('kind'))
    for fi, line, kind in bad.iter_rows():
        found.add(fi, line, kind)
    return df.filter(pl.col('kind').is_null() & ~pl.col('dup')).drop(
        'kind', 'dup')


def pl_table(paths: list, needle: str = None):
    import polars as pl
    found = Found()
    parts = list(pl_decode(paths, needle, found))
    df = pl.concat(parts, rechunk=False) if parts else None
    return pl_validate(pl, df, found), found


def pl_digest(pl, df) -> dict:
    q = df.lazy().filter((pl.col('ph') == 'X') &
                         (pl.col('ev') == 'sql.query'))
    d = pl.col('dur_us')
    q = q.with_columns(
        b=pl.when(d >= 1).then((d.cast(pl.Float64).log10() *
                                PER_DECADE).floor()).otherwise(0).cast(
            pl.Int64),
        err=(pl.col('st') == 'error').cast(pl.Int64))
    keys = ['a_fp', 'svc', 'a_db', 'a_call', 'a_kind']
    # classes x buckets: the only table whose size is the input's
    fine = q.group_by(keys + ['b']).agg(
        n=pl.len(), s=d.sum(), lo=d.min(), hi=d.max(),
        rows=pl.col('a_rows').sum(), errors=pl.col('err').sum(),
        sq=(d * d).sum(), first=pl.col('ts').min(),
        last=pl.col('ts').max()).collect()
    out = {'classes': fine.select(keys).unique().height}
    for group, key in (('fingerprint', 'a_fp'), ('database', 'a_db'),
                       ('service', 'svc')):
        g = fine.lazy().group_by(key, 'b').agg(
            pl.col('n').sum(), pl.col('s').sum(), pl.col('lo').min(),
            pl.col('hi').max(), pl.col('rows').sum(),
            pl.col('errors').sum()).sort(key, 'b')
        g = g.with_columns(
            cum=pl.col('n').cum_sum().over(key),
            tot=pl.col('n').sum().over(key),
            glo=pl.col('lo').min().over(key),
            ghi=pl.col('hi').max().over(key))
        val = (10 ** ((pl.col('b') + 0.5) / PER_DECADE)).clip(
            pl.col('glo'), pl.col('ghi')).round(3)
        rows = g.group_by(key).agg(
            pl.col('n').sum(), pl.col('s').sum(), pl.col('lo').min(),
            pl.col('hi').max(), pl.col('rows').sum(),
            pl.col('errors').sum(),
            val.filter(pl.col('cum') >= 0.5 * pl.col('tot')).first().alias(
                'p50'),
            val.filter(pl.col('cum') >= 0.95 * pl.col('tot')).first().alias(
                'p95')).collect()
        out[group] = sorted(
            (str(k), n, s, lo, hi, r or 0, e, p50, p95)
            for k, n, s, lo, hi, r, e, p50, p95 in rows.iter_rows())
    return out


def pl_clocks(pl, df) -> dict:
    x = df.lazy().filter((pl.col('ph') == 'X') &
                         pl.col('ev').str.starts_with('rpc.'))
    send = x.filter(pl.col('ev').is_in(SENDERS)).select(
        pl.col('span').alias('pspan'), pl.col('host').alias('phost'),
        pl.col('ts').alias('pts'),
        (pl.col('ts') + pl.col('dur_us')).alias('pend'),
        (pl.col('ev') == 'rpc.call').alias('sync'))
    recv = x.filter(~pl.col('ev').is_in(SENDERS) &
                    pl.col('parent').is_not_null()).select(
        'parent', 'host', 'ts', (pl.col('ts') + pl.col('dur_us')).alias(
            'end'), 'file', 'line', 'req')
    hops = recv.join(send, left_on='parent', right_on='pspan').collect()
    cross = hops.lazy().filter(pl.col('host') != pl.col('phost'))
    fwd = cross.select(pl.col('phost').alias('a'), pl.col('host').alias(
        'b'), (pl.col('ts') - pl.col('pts')).alias('w'), 'file', 'line',
        'req')
    back = cross.filter('sync').select(
        pl.col('host').alias('a'), pl.col('phost').alias('b'),
        (pl.col('pend') - pl.col('end')).alias('w'), 'file', 'line', 'req')
    bounds = pl.concat([fwd, back]).group_by('a', 'b').agg(
        pl.len().alias('n'), pl.col('w').min().alias('lo'),
        pl.col('w').max().alias('hi'),
        pl.col('w', 'file', 'line', 'req').top_k_by(
            'w', KEEP_BOUNDS, reverse=True)).collect()
    return clock_check(hops.height, cross.select(pl.len()).collect().item(),
                       {(a, b): ws for a, b, ws in bounds.select(
                           'a', 'b', 'w').iter_rows()})


def _handoff(reqs, cols: dict) -> tuple:
    """Hand each request's rows (sorted by request, time) to Python: the
    columns as lists once, then slices per request (a stand-in for the
    per-request state machine: counts its spans and open spans)."""
    n = len(reqs)
    requests = 0
    events = 0
    opened = 0
    ph = cols['ph']
    i = 0
    while i < n:
        j = i + 1
        r = reqs[i]
        while j < n and reqs[j] == r:
            j += 1
        mine = ph[i:j]
        events += j - i
        opened += mine.count('B') - mine.count('X')
        requests += 1
        i = j
    return requests, events, opened


def pl_assembly(pl, df, partition: bool = False) -> tuple:
    """Spans and instants sorted per request; SQL per enclosing span."""
    t0 = time.monotonic()
    lazy = df.lazy().filter(pl.col('req').is_not_null() &
                            pl.col('ph').is_in(['B', 'X', 'I']))
    sql = lazy.filter((pl.col('ev') == 'sql.query') &
                      (pl.col('ph') == 'X')).group_by('req', 'parent').agg(
        pl.col('dur_us').sum(), pl.len().alias('n')).collect()
    spans = lazy.filter((pl.col('ev') != 'sql.query') &
                        (pl.col('ev') != 'sql.txn')).select(
        'req', 'ts', 'line', 'ph', 'ev', 'host', 'svc', 'pid', 'span',
        'parent', 'dur_us', 'st', 'err_cls', 'a_status', 'a_outcome',
        'inst').sort('req', 'ts', 'line').collect()
    native = time.monotonic() - t0
    t0 = time.monotonic()
    if partition:
        requests = events = 0
        for _key, part in spans.partition_by('req', as_dict=True).items():
            requests += 1
            events += part.height
            part['ph'].to_list()
    else:
        cols = {c: spans[c].to_list() for c in (
            'req', 'ts', 'ph', 'ev', 'host', 'span', 'parent', 'dur_us')}
        requests, events, _open = _handoff(cols['req'], cols)
    handoff = time.monotonic() - t0
    reqs = set(spans['req'].unique().to_list()) | set(
        sql['req'].unique().to_list())
    return {'requests': len(reqs),
            'events': events + int(sql['n'].sum()),
            'sql_groups': sql.height, 'handed': requests}, native, handoff


# -- DuckDB ----------------------------------------------------------------

def _dd_types() -> str:
    """The ``json_transform`` structure: typed top-level fields;
    ``err`` and ``attrs`` kept as JSON (their keys vary; the ones the
    analyser reads are extracted from the JSON afterwards)."""
    def conv(kind):
        return {'int': 'BIGINT', 'str': 'VARCHAR',
                'strs': ['VARCHAR']}[kind]
    struct = {n: conv(t) for n, t in TOP}
    struct['err'] = 'JSON'
    struct['attrs'] = 'JSON'
    return json.dumps(struct)


def dd_connect(memory_limit: str = None, temp: str = None):
    import duckdb
    con = duckdb.connect()
    con.execute("SET threads = %d" % int(os.environ.get(
        'BENCH_ENGINES_DUCKDB_THREADS', len(os.sched_getaffinity(0)))))
    if memory_limit:
        con.execute("SET memory_limit = '%s'" % memory_limit)
    if temp:
        con.execute("SET temp_directory = '%s'" % temp)
    con.execute('SET preserve_insertion_order = true')
    return con


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _dd_read_lines(fi: int, path: str) -> str:
    # no file_row_number for CSV: the row number over the file's scan,
    # in file order (preserve_insertion_order)
    return ('SELECT %d AS file, row_number() OVER () AS line, column0 AS '  # noqa: S608
            "text FROM read_csv(%s, columns = {'column0': 'VARCHAR'}, "
            "delim = '\\x1e', quote = '', escape = '', header = false, "
            "auto_detect = false, strict_mode = false, new_line = '\\n')"
            % (fi, _sql_str(path)))


def dd_lines_sql(paths: list, needle: str = None, only=None) -> str:
    """One query over all files, no per-line Python: each file's lines
    numbered in file order (``read_csv`` with a separator that never
    occurs in a record, no quoting; empty lines kept), the service-log
    prefix cut at ``{"v":``, then typed with ``try(json_transform())``
    (NULL: not JSON), the analyser's ``attrs`` keys extracted from the
    ``attrs`` JSON.  Other lines of service logs are kept as rows with
    ``other`` set (counted), blank lines are dropped."""
    lines = ' UNION ALL '.join(_dd_read_lines(fi, path)
                               for fi, path in enumerate(paths)
                               if only is None or fi in only)
    rec = ("CASE WHEN starts_with(text, '{') THEN text WHEN "
           "strpos(text, '%s') > 0 THEN substr(text, strpos(text, '%s')) "
           "END" % (MARKER, MARKER))
    if needle:
        where = 'rec IS NOT NULL AND contains(rec, %s)' % _sql_str(needle)
    else:
        where = "rec IS NOT NULL OR trim(text) <> ''"
    flat = ['r.%s AS %s' % (n, n) for n, _t in TOP]
    return (
        'WITH lines AS (%s), recs AS (SELECT file, line, text, %s AS rec '  # noqa: S608
        'FROM lines), typed AS (SELECT file, line, rec IS NULL AS other, '
        'try(json_transform(rec, %s)) AS r FROM recs WHERE %s) '
        'SELECT file, line, other, NOT other AND r IS NOT NULL AS ok, '
        'r.attrs AS attrs, r.err AS err, %s FROM typed' % (
            lines, rec, _sql_str(_dd_types()), where, ', '.join(flat)))


def dd_attrs_view(name: str, source: str) -> str:
    """A view of ``source`` with the ``err_*`` and ``a_*`` columns read
    from the JSON of ``err`` and ``attrs`` when a query uses them (after
    its filters: the digest reads them on SQL rows only)."""
    attrs = json.dumps({n: {'int': 'BIGINT', 'str': 'VARCHAR'}[t]
                        for n, t in ATTRS})
    errs = json.dumps({n: 'VARCHAR' for n, _t in ERR})
    cols = ['e.%s AS err_%s' % (n, n) for n, _t in ERR]
    cols += ['a.%s AS a_%s' % (n, n) for n, _t in ATTRS]
    return ('CREATE OR REPLACE TEMP VIEW %s AS SELECT *, %s FROM (SELECT '  # noqa: S608
            '*, json_transform(attrs, %s) AS a, json_transform(err, %s) '
            'AS e FROM %s)' % (name, ', '.join(cols), _sql_str(attrs),
                               _sql_str(errs), source))


def dd_validate_sql() -> str:
    """The kind of a row of ``raw`` (NULL: valid so far)."""
    return (
        "CASE WHEN other THEN 'other' WHEN NOT ok THEN 'malformed' "
        "WHEN v IS NULL OR v <> 1 THEN 'unknown_version' "
        'WHEN %s OR ph NOT IN %s OR (ph IN (\'B\', \'X\') AND '
        "coalesce(span, '') = '') OR (ph = 'X' AND (dur_us IS NULL OR "
        "dur_us < 0 OR st IS NULL OR st NOT IN ('ok', 'error'))) "
        "OR (err IS NOT NULL AND (err->>'cls') IS NULL) THEN 'invalid' "
        'END' % (
            ' OR '.join('%s IS NULL' % n for n in REQUIRED),
            str(PHASES)))


def dd_table(con, paths: list, needle: str = None) -> Found:
    """View ``t``: the valid records; returns what was bad."""
    tmp = tempfile.mkdtemp(prefix='instrument-bench-engines-utf8-')
    try:
        return _dd_table(con, paths, needle, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _dd_table(con, paths, needle, tmp, only=None, fast=None) -> Found:
    """``only``: the file indices to read (all); ``fast``: a query of
    rows read by ``dd_table_fast``, added to the view."""
    import duckdb
    found = Found()
    # the value checks in the same statement as the decode
    query = ('CREATE OR REPLACE TEMP TABLE k AS SELECT *, %s AS kind '  # noqa: S608
             'FROM (%%s)' % dd_validate_sql())
    try:
        con.execute(query % dd_lines_sql(paths, needle, only))
    except duckdb.InvalidInputException as exc:
        if 'unicode' not in str(exc).lower():
            raise
        # read_csv refuses a file that is not UTF-8 (ignore_errors would
        # drop the line and shift the numbers): such files are copied
        # with their bad lines blanked out, and read again
        clean = _dd_sanitise(paths, tmp, found, only)
        con.execute(query % dd_lines_sql(clean, needle, only))
    # seq seen again in a file and pid among the valid rows: a hash
    # aggregate finds the few keys (a window over all rows costs 10x),
    # then every line of such a key but its first is a duplicate
    con.execute(
        'CREATE OR REPLACE TEMP TABLE dups AS SELECT file, line FROM k '
        'JOIN (SELECT file, pid, seq, min(line) AS first FROM k WHERE '
        'kind IS NULL GROUP BY ALL HAVING count(*) > 1) USING (file, pid, '
        'seq) WHERE kind IS NULL AND line > first')
    for fi, line in con.execute('SELECT * FROM dups').fetchall():
        found.add(fi, line, 'duplicate')
    ends = {}
    for fi, line, kind in con.execute(
            "SELECT file, line, kind FROM k WHERE kind IS NOT NULL AND "
            "kind <> 'other'").fetchall():
        if kind == 'malformed':
            kind = _dd_truncated(paths, fi, line, ends)
        found.add(fi, line, kind)
    found.other += con.execute(
        "SELECT count(*) FROM k WHERE kind = 'other'").fetchone()[0]
    rows = ('SELECT * EXCLUDE (kind, other, ok) FROM k ANTI JOIN dups '
            'USING (file, line) WHERE kind IS NULL')
    if fast:
        rows += ' UNION ALL BY NAME ' + fast
    con.execute(dd_attrs_view('t', '(%s)' % rows))
    return found


def ndjson_files(paths: list) -> list:
    return [i for i, p in enumerate(paths)
            if not p.endswith(('.log', '.log.gz'))]


def dd_ndjson_sql(paths: list, ndjson: list) -> str:
    """``read_json`` on the files ``ndjson`` (indices), in parallel, the
    columns of ``dd_lines_sql`` (``line`` NULL; ``ok`` false for a row
    it could not read)."""
    columns = json.loads(_dd_types())
    columns['inst'] = 'VARCHAR[]'
    return (
        'SELECT n.file, NULL::BIGINT AS line, false AS other, (j.v IS NOT '  # noqa: S608
        'NULL OR j.ph IS NOT NULL OR j.seq IS NOT NULL OR j.ts IS NOT '
        "NULL) AS ok, j.* EXCLUDE (filename) FROM read_json([%s], format = "
        "'newline_delimited', ignore_errors = true, filename = true, "
        'columns = {%s}) j JOIN (VALUES %s) n(name, file) ON j.filename = '
        'n.name' % (
            ', '.join(_sql_str(paths[i]) for i in ndjson),
            ', '.join('%s: %s' % (_sql_str(k), _sql_str(v))
                      for k, v in columns.items()),
            ', '.join('(%s, %d)' % (_sql_str(paths[i]), i)
                      for i in ndjson)))


def dd_table_fast(con, paths: list) -> Found:
    """DuckDB's parallel NDJSON reader (``read_json``) on the NDJSON
    files, without line numbers (a record is known by file, pid and
    seq).  A file where it finds a row it could not read or that fails
    a check, or a repeated seq, and the service logs, are read by the
    lines path instead (``dd_table``), for exact file:line."""
    ndjson = ndjson_files(paths)
    con.execute('CREATE OR REPLACE TEMP TABLE f AS ' +
                dd_ndjson_sql(paths, ndjson))
    suspects = {r[0] for r in con.execute(
        'SELECT DISTINCT file FROM f WHERE (%s) IS NOT NULL UNION '  # noqa: S608
        'SELECT DISTINCT file FROM f GROUP BY file, pid, seq HAVING '
        'count(*) > 1' % dd_validate_sql()).fetchall()}
    slow = (set(range(len(paths))) - set(ndjson)) | suspects
    fast = ('SELECT * EXCLUDE (other, ok) FROM f WHERE file NOT IN (%s)' %  # noqa: S608
            ', '.join(str(i) for i in sorted(slow) or [-1]))
    tmp = tempfile.mkdtemp(prefix='instrument-bench-engines-utf8-')
    try:
        found = _dd_table(con, paths, None, tmp, only=slow, fast=fast)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found.slow_files = len(slow)
    return found


def _dd_sanitise(paths: list, tmp: str, found: Found, only=None) -> list:
    """Copies of the files that are not UTF-8, bad lines blanked."""
    out = list(paths)
    texts = collections.defaultdict(list)
    bad = set()
    blocks = read_blocks([p if only is None or i in only else os.devnull
                          for i, p in enumerate(paths)])
    for fi, before, text, cut in blocks:
        if text is None:
            bad.add(fi)
            if cut == 'other':
                found.other += 1
            elif cut == 'malformed':
                found.add(fi, before, 'malformed')
            continue
        texts[fi].append(text)
    for fi in bad:
        out[fi] = os.path.join(tmp, '%d.jsonl' % fi)
        with open(out[fi], 'w', encoding='utf-8') as f:
            f.writelines(texts[fi])
    return out


def _dd_truncated(paths, fi, line, ends) -> str:
    """A bad last line of a file without a final newline is truncated
    (read once per file that has a bad line)."""
    if fi not in ends:
        path = paths[fi]
        f = gzip.open(path, 'rb') if path.endswith('.gz') else \
            open(path, 'rb')
        with f:
            data = f.read()
        ends[fi] = (data.count(b'\n') + (0 if data.endswith(b'\n') else 1),
                    data.endswith(b'\n'))
    last, newline = ends[fi]
    return 'truncated' if line == last and not newline else 'malformed'


def dd_digest(con) -> dict:
    con.execute(
        'CREATE OR REPLACE TEMP TABLE fine AS SELECT a_fp, svc, a_db, '  # noqa: S608
        'a_call, a_kind, CASE WHEN dur_us >= 1 THEN CAST(floor(log10('
        'dur_us) * %d) AS BIGINT) ELSE 0 END AS b, count(*) AS n, '
        'sum(dur_us) AS s, min(dur_us) AS lo, max(dur_us) AS hi, '
        'sum(a_rows) AS rows, count_if(st = \'error\') AS errors, '
        'sum(dur_us * dur_us) AS sq, min(ts) AS first, max(ts) AS last '
        "FROM t WHERE ph = 'X' AND ev = 'sql.query' "
        'GROUP BY ALL' % PER_DECADE)
    out = {'classes': con.execute(
        'SELECT count(*) FROM (SELECT DISTINCT a_fp, svc, a_db, a_call, '
        'a_kind FROM fine)').fetchone()[0]}
    for group, key in (('fingerprint', 'a_fp'), ('database', 'a_db'),
                       ('service', 'svc')):
        rows = con.execute(
            'WITH g AS (SELECT %s AS k, b, sum(n) AS n, sum(s) AS s, '  # noqa: S608
            'min(lo) AS lo, max(hi) AS hi, sum(rows) AS rows, '
            'sum(errors) AS errors FROM fine GROUP BY ALL), '
            'c AS (SELECT *, sum(n) OVER (PARTITION BY k ORDER BY b) AS '
            'cum, sum(n) OVER (PARTITION BY k) AS tot, min(lo) OVER '
            '(PARTITION BY k) AS glo, max(hi) OVER (PARTITION BY k) AS ghi '
            'FROM g), v AS (SELECT *, round(least(greatest(pow(10, (b + '
            '0.5) / %d), glo), ghi), 3) AS val FROM c) '
            'SELECT k, sum(n), sum(s), min(lo), max(hi), sum(rows), '
            'sum(errors), arg_min(val, b) FILTER (WHERE cum >= 0.5 * tot), '
            'arg_min(val, b) FILTER (WHERE cum >= 0.95 * tot) FROM v '
            'GROUP BY k' % (key, PER_DECADE)).fetchall()
        out[group] = sorted(
            (str(k), int(n), int(s), lo, hi, int(r or 0), int(e), p50, p95)
            for k, n, s, lo, hi, r, e, p50, p95 in rows)
    return out


def dd_clocks(con) -> dict:
    con.execute(
        "CREATE OR REPLACE TEMP TABLE x AS SELECT * FROM t WHERE ph = 'X' "
        "AND starts_with(ev, 'rpc.')")
    con.execute(
        'CREATE OR REPLACE TEMP TABLE hops AS SELECT r.host, r.ts, '  # noqa: S608
        'r.ts + r.dur_us AS "end", r.file, r.line, r.req, p.host AS phost, '
        'p.ts AS pts, p.ts + p.dur_us AS pend, p.ev = \'rpc.call\' AS sync '
        'FROM x r JOIN x p ON r.parent = p.span WHERE p.ev IN %s AND '
        'r.ev NOT IN %s' % (str(SENDERS), str(SENDERS)))
    hops, pairs = con.execute('SELECT count(*), count_if(host <> phost) '
                              'FROM hops').fetchone()
    rows = con.execute(
        'WITH w AS (SELECT phost AS a, host AS b, ts - pts AS w, file, '  # noqa: S608
        'line, req FROM hops WHERE host <> phost UNION ALL SELECT host, '
        'phost, pend - "end", file, line, req FROM hops WHERE host <> phost '
        'AND sync) SELECT a, b, count(*), min(w), max(w), '
        'min(w, %d) FROM w GROUP BY a, b' % KEEP_BOUNDS).fetchall()
    return clock_check(hops, pairs, {(a, b): ws for a, b, _n, _lo, _hi, ws
                                     in rows})


def dd_assembly(con) -> tuple:
    t0 = time.monotonic()
    sql = con.execute(
        "SELECT count(*), sum(n) FROM (SELECT req, parent, count(*) AS n "
        "FROM t WHERE req IS NOT NULL AND ph = 'X' AND ev = 'sql.query' "
        'GROUP BY req, parent)').fetchone()
    reqs = con.execute(
        "SELECT count(DISTINCT req) FROM t WHERE req IS NOT NULL AND ph IN "
        "('B', 'X', 'I') AND ev <> 'sql.txn'").fetchone()[0]
    res = con.execute(
        'SELECT req, ts, ph, ev, host, span, parent, dur_us FROM t WHERE '
        "req IS NOT NULL AND ph IN ('B', 'X', 'I') AND ev NOT IN "
        "('sql.query', 'sql.txn') ORDER BY req, ts, line").fetchnumpy()
    native = time.monotonic() - t0
    t0 = time.monotonic()
    cols = {k: v.tolist() for k, v in res.items()}
    requests, events, _open = _handoff(cols['req'], cols)
    handoff = time.monotonic() - t0
    return {'requests': reqs, 'events': events + int(sql[1]),
            'sql_groups': sql[0], 'handed': requests}, native, handoff


# -- pyarrow ---------------------------------------------------------------

def _pa_schema():
    import pyarrow as pa

    def conv(kind):
        return {'int': pa.int64(), 'str': pa.string(),
                'strs': pa.list_(pa.string())}[kind]
    fields = [(n, conv(t)) for n, t in TOP]
    fields.append(('err', pa.struct([(n, conv(t)) for n, t in ERR])))
    fields.append(('attrs', pa.struct([(n, conv(t)) for n, t in ATTRS])))
    return pa.schema(fields), {n: conv(t) for n, t in TYPES.items()}


def pa_decode(paths: list, needle: str = None, found: Found = None,
              blocks=None):
    """Blocks -> lines (``split_pattern``) -> record lines joined back
    into one NDJSON buffer -> ``pyarrow.json.read_json`` with the
    schema (multi-threaded) -> flattened columns."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj
    schema, types = _pa_schema()
    popts = pj.ParseOptions(explicit_schema=schema,
                            unexpected_field_behavior='ignore')
    empty = pa.scalar('', pa.large_string())
    newline = pa.scalar('\n', pa.large_string())
    found = found if found is not None else Found()
    blocks = blocks if blocks is not None else read_blocks(paths)
    for fi, before, text, cut in blocks:
        if text is None:
            if cut == 'other':
                found.other += 1
            elif cut == 'malformed':
                found.add(fi, before, 'malformed')
            else:
                found.problems.append((fi, cut))
            continue
        lines = pc.list_flatten(pc.split_pattern(
            pa.array([text], pa.large_string()), '\n'))
        n = len(lines) - (0 if cut else 1)
        lines = lines.slice(0, n)
        numbers = pa.array(range(before + 1, before + n + 1), pa.int64())
        rec = lines
        if not pc.all(pc.starts_with(lines, '{')).as_py():
            # a service log: cut each line's prefix at the record marker
            rec = pc.replace_substring_regex(
                lines, '^[^{].*?\\{"v":', '{"v":', max_replacements=1)
        keep = pc.starts_with(rec, '{')
        if needle is None:
            found.other += pc.sum(pc.and_(
                pc.invert(keep), pc.not_equal(pc.utf8_trim_whitespace(
                    lines), ''))).as_py() or 0
        else:
            keep = pc.and_(keep, pc.match_substring(rec, needle))
        rec = rec.filter(keep)
        numbers = numbers.filter(keep)
        last = before + n

        def take(a, b, rec=rec):
            return a, rec.slice(a, b - a)

        def decode(piece):
            a, part = piece
            if len(part) == 0:
                return None
            # "line\n" per line: the new array's data buffer is NDJSON
            joined = pc.binary_join_element_wise(part, empty, newline)
            size = pc.sum(pc.binary_length(joined)).as_py()
            data = joined.buffers()[2].slice(0, size)
            table = pj.read_json(pa.BufferReader(data),
                                 parse_options=popts)
            if table.num_rows != len(part):
                raise ValueError('rows do not match lines')
            return table, part, a
        pieces, rows = bisect_bad(
            decode, len(rec), take,
            lambda i, numbers=numbers: numbers[i].as_py(),
            lambda i, rec=rec: rec[i].as_py(),
            lambda i, numbers=numbers, cut=cut, last=last:
            cut and numbers[i].as_py() == last, found, fi)
        for piece in pieces:
            if piece is None:
                continue
            table, part, a = piece
            yield _pa_flat(pa, pc, table, fi, numbers.slice(a, len(part)),
                           part)
        if rows:
            yield pa.Table.from_pylist(
                [dict(r, raw=None) for r in rows],
                schema=pa.schema([('file', pa.int32()),
                                  ('line', pa.int64())] +
                                 [(c, types[c]) for c in COLUMNS] +
                                 [('raw', pa.large_string())]))


def _pa_flat(pa, pc, table, fi, numbers, part):
    cols = {'file': pa.array([fi] * table.num_rows, pa.int32()),
            'line': numbers}
    for n, _t in TOP:
        cols[n] = table.column(n)
    err = table.column('err')
    attrs = table.column('attrs')
    for n, _t in ERR:
        cols['err_' + n] = pc.struct_field(err, n)
    for n, _t in ATTRS:
        cols['a_' + n] = pc.struct_field(attrs, n)
    cols['raw'] = pc.if_else(pc.is_in(table.column('ph'), pa.array(
        ['M', 'C'])), part, pa.scalar(None, pa.large_string()))
    return pa.table(cols)


def pa_validate(pa, pc, table, found: Found):
    """The schema's value checks and ``seq`` duplicates (the first line
    of each file, pid and seq among the otherwise valid rows is kept);
    only the bad rows' file and line come to Python."""
    ph = table.column('ph')
    v = table.column('v')
    bad_version = pc.fill_null(pc.not_equal(v, 1), True)
    missing = None
    for n in REQUIRED:
        m = pc.is_null(table.column(n))
        missing = m if missing is None else pc.or_(missing, m)
    span = table.column('span')
    dur = table.column('dur_us')
    st = table.column('st')
    bx = pc.is_in(ph, pa.array(['B', 'X']))
    invalid = pc.or_(missing, pc.invert(pc.is_in(ph, pa.array(PHASES))))
    invalid = pc.or_(invalid, pc.and_(bx, pc.fill_null(pc.equal(
        span, ''), True)))
    invalid = pc.or_(invalid, pc.and_(pc.fill_null(pc.equal(ph, 'X'),
                                                   False), pc.or_(
        pc.fill_null(pc.less(dur, 0), True),
        pc.invert(pc.is_in(st, pa.array(['ok', 'error']))))))
    invalid = pc.and_(pc.invert(bad_version), pc.fill_null(invalid, True))
    for name, mask in (('unknown_version', bad_version),
                       ('invalid', invalid)):
        idx = pc.indices_nonzero(mask)
        if len(idx):
            for f, ln in zip(table.column('file').take(idx).to_pylist(),
                             table.column('line').take(idx).to_pylist(),
                             strict=True):
                found.add(f, ln, name)
    table = table.filter(pc.invert(pc.or_(bad_version, invalid)))
    keys = table.select(['file', 'pid', 'seq', 'line']).append_column(
        'i', pa.array(range(table.num_rows), pa.int64()))
    firsts = keys.group_by(['file', 'pid', 'seq'], use_threads=False
                           ).aggregate([('line', 'min')])
    joined = keys.join(firsts, ['file', 'pid', 'seq'])
    dups = joined.filter(pc.not_equal(joined.column('line'),
                                      joined.column('line_min')))
    if dups.num_rows:
        for f, ln in zip(dups.column('file').to_pylist(),
                         dups.column('line').to_pylist(), strict=True):
            found.add(f, ln, 'duplicate')
        keep = pc.invert(pc.is_in(keys.column('i'), dups.column('i')))
        table = table.filter(keep)
    return table


def pa_table(paths: list, needle: str = None):
    import pyarrow as pa
    import pyarrow.compute as pc
    found = Found()
    parts = list(pa_decode(paths, needle, found))
    table = pa.concat_tables(parts, promote_options='permissive')
    return pa_validate(pa, pc, table, found), found


def pa_digest(pa, pc, table) -> dict:
    ph = table.column('ph')
    sel = table.filter(pc.and_(pc.equal(ph, 'X'), pc.equal(
        table.column('ev'), 'sql.query')))
    d = sel.column('dur_us')
    b = pc.if_else(pc.greater_equal(d, 1), pc.cast(pc.floor(pc.multiply(
        pc.log10(pc.cast(d, pa.float64())), PER_DECADE)), pa.int64()), 0)
    sel = sel.append_column('b', b).append_column(
        'err', pc.cast(pc.equal(sel.column('st'), 'error'), pa.int64()))
    keys = ['a_fp', 'svc', 'a_db', 'a_call', 'a_kind']
    fine = sel.group_by(keys + ['b']).aggregate([
        ('dur_us', 'count'), ('dur_us', 'sum'), ('dur_us', 'min'),
        ('dur_us', 'max'), ('a_rows', 'sum'), ('err', 'sum'),
        ('ts', 'min'), ('ts', 'max')])
    out = {'classes': fine.group_by(keys).aggregate([]).num_rows}
    for group, key in (('fingerprint', 'a_fp'), ('database', 'a_db'),
                       ('service', 'svc')):
        g = fine.group_by([key, 'b']).aggregate([
            ('dur_us_count', 'sum'), ('dur_us_sum', 'sum'),
            ('dur_us_min', 'min'), ('dur_us_max', 'max'),
            ('a_rows_sum', 'sum'), ('err_sum', 'sum')]).to_pylist()
        stats = {}
        hist = collections.defaultdict(list)
        for row in g:
            k = row[key]
            n = row['dur_us_count_sum']
            cur = stats.get(k)
            new = (n, row['dur_us_sum_sum'], row['dur_us_min_min'],
                   row['dur_us_max_max'], row['a_rows_sum_sum'] or 0,
                   row['err_sum_sum'])
            stats[k] = new if cur is None else (
                cur[0] + new[0], cur[1] + new[1], min(cur[2], new[2]),
                max(cur[3], new[3]), cur[4] + new[4], cur[5] + new[5])
            hist[k].append((row['b'], n))
        out[group] = digest_rows(stats, hist)
    return out


def pa_clocks(pa, pc, table) -> dict:
    ph = table.column('ph')
    ev = table.column('ev')
    x = table.filter(pc.and_(pc.equal(ph, 'X'), pc.starts_with(ev, 'rpc.')))
    x = x.select(['file', 'line', 'host', 'ev', 'ts', 'dur_us', 'span',
                  'parent', 'req'])
    x = x.append_column('end', pc.add(x.column('ts'), x.column('dur_us')))
    senders = pa.array(SENDERS)
    send = x.filter(pc.is_in(x.column('ev'), senders)).select(
        ['span', 'host', 'ts', 'end', 'ev']).rename_columns(
        ['parent', 'phost', 'pts', 'pend', 'pev'])
    recv = x.filter(pc.and_(pc.invert(pc.is_in(x.column('ev'), senders)),
                            pc.is_valid(x.column('parent'))))
    hops = recv.join(send, 'parent', join_type='inner')
    cross = hops.filter(pc.not_equal(hops.column('host'),
                                     hops.column('phost')))
    fwd = pa.table({'a': cross.column('phost'), 'b': cross.column('host'),
                    'w': pc.subtract(cross.column('ts'),
                                     cross.column('pts'))})
    sync = cross.filter(pc.equal(cross.column('pev'), 'rpc.call'))
    back = pa.table({'a': sync.column('host'), 'b': sync.column('phost'),
                     'w': pc.subtract(sync.column('pend'),
                                      sync.column('end'))})
    w = pa.concat_tables([fwd, back])
    # the 16 tightest per pair: sort once, then the first of each run
    w = w.sort_by([('a', 'ascending'), ('b', 'ascending'),
                   ('w', 'ascending')])
    bounds = {}
    for a, b, val in zip(w.column('a').to_pylist(),
                         w.column('b').to_pylist(),
                         w.column('w').to_pylist(), strict=True):
        lst = bounds.setdefault((a, b), [])
        if len(lst) < KEEP_BOUNDS:
            lst.append(val)
    return clock_check(hops.num_rows, cross.num_rows, bounds)


def pa_assembly(pa, pc, table) -> tuple:
    t0 = time.monotonic()
    ph = table.column('ph')
    ev = table.column('ev')
    withreq = pc.and_(pc.is_valid(table.column('req')),
                      pc.is_in(ph, pa.array(['B', 'X', 'I'])))
    is_sql = pc.and_(pc.equal(ev, 'sql.query'), pc.equal(ph, 'X'))
    sql = table.filter(pc.and_(withreq, is_sql)).group_by(
        ['req', 'parent']).aggregate([('dur_us', 'sum'), ('dur_us',
                                                          'count')])
    spans = table.filter(pc.and_(withreq, pc.invert(pc.is_in(ev, pa.array(
        ['sql.query', 'sql.txn']))))).select(
        ['req', 'ts', 'line', 'ph', 'ev', 'host', 'span', 'parent',
         'dur_us']).sort_by([('req', 'ascending'), ('ts', 'ascending'),
                             ('line', 'ascending')])
    reqs = pc.count_distinct(pa.concat_arrays([
        spans.column('req').combine_chunks(),
        sql.column('req').combine_chunks()])).as_py()
    native = time.monotonic() - t0
    t0 = time.monotonic()
    cols = {c: spans.column(c).to_pylist() for c in (
        'req', 'ts', 'ph', 'ev', 'host', 'span', 'parent', 'dur_us')}
    requests, events, _open = _handoff(cols['req'], cols)
    handoff = time.monotonic() - t0
    return {'requests': reqs,
            'events': events + pc.sum(sql.column('dur_us_count')).as_py(),
            'sql_groups': sql.num_rows, 'handed': requests}, native, handoff


# -- the kernels, run in a child process -----------------------------------

def run_kernel(engine: str, kernel: str, logs: str, extra: str) -> dict:
    paths = span_files(logs)
    needle = FILTERS.get(kernel)
    t0 = time.monotonic()
    out = {}
    phases = {}
    if engine in BASELINES:
        if kernel == 'decode':
            recs, found = py_decode(paths, engine)
            out['events'] = recs if engine == 'json' else len(recs)
        elif engine == 'json':
            raise SystemExit('json: decode only')
        elif kernel == 'clocks':
            out['check'] = py_clocks(paths)
            found = None
        else:
            recs, found = py_decode(paths, 'msgspec', needle)
            phases['decode'] = time.monotonic() - t0
            t1 = time.monotonic()
            out['events'] = len(recs)
            if kernel == 'digest':
                out['check'] = py_digest(recs)
            elif kernel == 'assembly':
                out['check'] = py_assembly(recs)
            phases['kernel'] = time.monotonic() - t1
        if found is not None and kernel == 'decode':
            out['check'] = found.summary(paths)
            out['check']['other_lines'] = found.other
    elif kernel == 'stream':
        out.update(stream_kernel(engine, paths, extra))
    else:
        out.update(engine_kernel(engine, kernel, paths, needle, extra))
    out['seconds'] = time.monotonic() - t0
    out['phases'] = dict(out.get('phases', {}), **phases)
    return out


def ndjson_ceiling(engine: str, paths: list) -> int:
    """The engine's own NDJSON reader on the files it can read (plain
    and gzip NDJSON, not service logs), the same columns, no line
    numbers, no bad-line report: the ceiling of a fast path for clean
    files.  Returns the rows read."""
    files = [p for p in paths if not p.endswith(('.log', '.log.gz'))]
    if engine == 'polars':
        import polars as pl
        dtype, _types = _pl_types()
        return pl.scan_ndjson(files, schema=dict(dtype)).select(
            _pl_flatten(pl, pl.struct(pl.all()))).collect().height
    if engine == 'duckdb':
        # as the lines path: top-level fields typed, attrs and err as
        # JSON (their keys read by the queries that use them);
        # ignore_errors gives a NULL row for a bad line (but skips blank
        # lines: no line numbers)
        con = dd_connect()
        columns = json.loads(_dd_types())
        columns['inst'] = 'VARCHAR[]'
        con.execute(
            'CREATE TEMP TABLE k AS SELECT * FROM read_json([%s], '  # noqa: S608
            "format = 'newline_delimited', ignore_errors = true, "
            'columns = {%s})' % (
                ', '.join(_sql_str(f) for f in files),
                ', '.join('%s: %s' % (_sql_str(k), _sql_str(v))
                          for k, v in columns.items())))
        con.execute(dd_attrs_view('t', '(SELECT * FROM k WHERE v IS NOT '
                                  'NULL)'))
        return con.execute('SELECT count(*) FROM t').fetchone()[0]
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj
    schema, _types = _pa_schema()
    popts = pj.ParseOptions(explicit_schema=schema,
                            unexpected_field_behavior='ignore')
    rows = 0
    tables = []
    for path in files:
        table = pj.read_json(path, parse_options=popts)
        rows += table.num_rows
        tables.append(_pa_flat(pa, pc, table, 0, pa.array(
            range(table.num_rows), pa.int64()), pa.array(
            [None] * table.num_rows, pa.large_string())))
    return rows


def set_threads(engine: str, n: int) -> None:
    """Limit the engine to ``n`` threads (before its first use)."""
    if engine == 'polars':
        os.environ['POLARS_MAX_THREADS'] = str(n)
    elif engine == 'pyarrow':
        import pyarrow as pa
        pa.set_cpu_count(n)
        pa.set_io_thread_count(n)
    else:
        os.environ['BENCH_ENGINES_DUCKDB_THREADS'] = str(n)


def engine_kernel(engine, kernel, paths, needle, extra) -> dict:
    out = {'phases': {}}
    if extra == '1thread':
        set_threads(engine, 1)
    if extra == 'ndjson':
        out['events'] = ndjson_ceiling(engine, paths)
        out['rate_events'] = out['events']
        return out
    t0 = time.monotonic()
    if engine == 'polars':
        import polars as pl
        df, found = pl_table(paths, needle)
        out['events'] = df.height
    elif engine == 'duckdb':
        con = dd_connect()
        if extra == 'fast':
            found = dd_table_fast(con, paths)
            out['slow_files'] = found.slow_files
        else:
            found = dd_table(con, paths, needle)
        out['events'] = con.execute('SELECT count(*) FROM t').fetchone()[0]
    else:
        import pyarrow as pa
        import pyarrow.compute as pc
        table, found = pa_table(paths, needle)
        out['events'] = table.num_rows
    out['phases']['decode'] = time.monotonic() - t0
    t1 = time.monotonic()
    if kernel == 'decode':
        out['check'] = found.summary(paths)
        out['check']['other_lines'] = found.other
    elif kernel == 'digest':
        out['check'] = (pl_digest(pl, df) if engine == 'polars' else
                        dd_digest(con) if engine == 'duckdb' else
                        pa_digest(pa, pc, table))
    elif kernel == 'clocks':
        out['check'] = (pl_clocks(pl, df) if engine == 'polars' else
                        dd_clocks(con) if engine == 'duckdb' else
                        pa_clocks(pa, pc, table))
    elif kernel == 'assembly':
        if engine == 'polars':
            res, native, handoff = pl_assembly(pl, df, extra == 'partition')
        elif engine == 'duckdb':
            res, native, handoff = dd_assembly(con)
        else:
            res, native, handoff = pa_assembly(pa, pc, table)
        handed = res.pop('handed')
        out['check'] = res
        out['phases']['native'] = native
        out['phases']['handoff'] = handoff
        out['handed'] = handed
    out['phases']['kernel'] = time.monotonic() - t1
    return out


# -- streaming, bounded memory (kernel ``stream``) -------------------------

def stream_kernel(engine: str, paths: list, extra: str) -> dict:
    """Decode block by block into Parquet parts partitioned by a hash
    bucket of the request id (``bucket=K/``; the export layout would
    use day and host), the digest from all parts, then the requests one
    bucket at a time, each sorted and handed to Python.  Memory: a
    block, a bucket (about 100 MB of input each), the digest's classes.
    (The seq duplicate check across blocks, a max seq per file and pid,
    is left out here.)"""
    out = {'phases': {}}
    tmp = tempfile.mkdtemp(prefix='instrument-bench-engines-parts-')
    size = sum(os.path.getsize(p) for p in paths)
    buckets = max(BUCKETS, size // (100 << 20))
    out['buckets'] = buckets
    try:
        t0 = time.monotonic()
        if engine == 'polars':
            res = _pl_stream(paths, tmp, out, buckets)
        elif engine == 'duckdb':
            res = _dd_stream(paths, tmp, out, extra or '1GB', buckets)
        else:
            res = _pa_stream(paths, tmp, out, buckets)
        out['check'] = res
        out['parquet_mb'] = sum(
            os.path.getsize(p) for p in glob.glob(
                os.path.join(tmp, '**', '*.parquet'),
                recursive=True)) / 1e6
        out['phases']['total'] = time.monotonic() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _stream_result(requests, handed, digest) -> dict:
    return {'requests': requests, 'handed': handed,
            'classes': digest['classes'],
            'statements': sum(r[1] for r in digest['fingerprint'])}


HANDED = ('req', 'ts', 'line', 'ph', 'ev', 'host', 'span', 'parent',
          'dur_us')


def _pl_stream(paths, tmp, out, buckets) -> dict:
    import polars as pl
    found = Found()
    t0 = time.monotonic()
    events = 0
    for k, df in enumerate(pl_decode(paths, None, found)):
        df = df.with_columns(bucket=(pl.col('req').hash(7) % buckets))
        for (b,), part in df.partition_by('bucket', as_dict=True).items():
            where = os.path.join(tmp, 'bucket=%d' % b)
            os.makedirs(where, exist_ok=True)
            part.write_parquet(os.path.join(where, '%05d.parquet' % k),
                               compression='zstd')
        events += df.height
    out['phases']['decode+write'] = time.monotonic() - t0
    out['rss_decode_mb'] = _peak_mb()
    out['events'] = events
    t0 = time.monotonic()
    scan = pl.scan_parquet(os.path.join(tmp, '*', '*.parquet'),
                           hive_partitioning=False)
    digest = pl_digest(pl, scan.filter(
        (pl.col('ph') == 'X') & (pl.col('ev') == 'sql.query')).select(
        'ph', 'ev', 'a_fp', 'svc', 'a_db', 'a_call', 'a_kind', 'dur_us',
        'a_rows', 'st', 'ts').collect(engine='streaming'))
    out['phases']['digest'] = time.monotonic() - t0
    t0 = time.monotonic()
    requests = handed = 0
    for b in range(buckets):
        where = os.path.join(tmp, 'bucket=%d' % b)
        if not os.path.isdir(where):
            continue
        part = pl.scan_parquet(os.path.join(where, '*.parquet'),
                               hive_partitioning=False).filter(
            pl.col('req').is_not_null() & pl.col('ph').is_in(['B', 'X', 'I'])
            & ~pl.col('ev').is_in(['sql.query', 'sql.txn'])).select(
            HANDED).sort('req', 'ts', 'line').collect()
        cols = {c: part[c].to_list() for c in part.columns}
        r, e, _o = _handoff(cols['req'], cols)
        requests += r
        handed += e
    out['phases']['assembly'] = time.monotonic() - t0
    return _stream_result(requests, handed, digest)


def _dd_stream(paths, tmp, out, memory_limit, buckets) -> dict:
    """``memory_limit`` may start with ``fast:``: the NDJSON files are
    read by ``read_json`` (``dd_ndjson_sql``), the service logs by the
    lines path; files with a row ``read_json`` could not read are
    counted (``suspect_files``: the analyser would read them again by
    the lines path)."""
    import duckdb
    fast = memory_limit.startswith('fast:')
    memory_limit = memory_limit.split(':')[-1]
    con = dd_connect(memory_limit, os.path.join(tmp, 'spill'))
    t0 = time.monotonic()
    copy = ('COPY (SELECT * EXCLUDE (other), mod(hash(req), %d) AS '  # noqa: S608
            'bucket FROM (%%s) WHERE ok OR NOT other) TO %s (FORMAT '
            'parquet, COMPRESSION zstd, PARTITION_BY (bucket))' % (
                buckets, _sql_str(os.path.join(tmp, 'parts'))))
    try:
        if fast:
            ndjson = ndjson_files(paths)
            rest = set(range(len(paths))) - set(ndjson)
            source = dd_ndjson_sql(paths, ndjson)
            if rest:
                source = '(%s) UNION ALL BY NAME (%s)' % (
                    source, dd_lines_sql(paths, only=rest))
            con.execute(copy % source)
        else:
            con.execute(copy % dd_lines_sql(paths))
    except duckdb.InvalidInputException as exc:
        if 'unicode' not in str(exc).lower():
            raise
        shutil.rmtree(os.path.join(tmp, 'parts'), ignore_errors=True)
        os.makedirs(os.path.join(tmp, 'utf8'))
        con.execute(copy % dd_lines_sql(_dd_sanitise(
            paths, os.path.join(tmp, 'utf8'), Found())))
    out['phases']['decode+write'] = time.monotonic() - t0
    out['rss_decode_mb'] = _peak_mb()
    parts = ('read_parquet(%s, hive_partitioning = true)' %
             _sql_str(os.path.join(tmp, 'parts', '*', '*.parquet')))
    out['events'], out['suspect_files'] = con.execute(
        'SELECT count_if(ok), count(DISTINCT file) FILTER (WHERE NOT ok) '  # noqa: S608
        'FROM %s' % parts).fetchone()
    t0 = time.monotonic()
    con.execute(dd_attrs_view('t', '(SELECT * EXCLUDE (ok) FROM %s WHERE '  # noqa: S608
                              'ok)' % parts))
    digest = dd_digest(con)
    out['phases']['digest'] = time.monotonic() - t0
    t0 = time.monotonic()
    requests = handed = 0
    for b in range(buckets):
        res = con.execute(
            'SELECT %s FROM t WHERE bucket = %d AND req IS NOT NULL AND '  # noqa: S608
            "ph IN ('B', 'X', 'I') AND ev NOT IN ('sql.query', 'sql.txn') "
            'ORDER BY req, ts, line' % (', '.join(HANDED), b)).fetchnumpy()
        cols = {k: v.tolist() for k, v in res.items()}
        r, e, _o = _handoff(cols['req'], cols)
        requests += r
        handed += e
    out['phases']['assembly'] = time.monotonic() - t0
    return _stream_result(requests, handed, digest)


def _pa_stream(paths, tmp, out, buckets) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    found = Found()
    # pyarrow has no hash kernel: the request id's first two hex digits
    # (uniform in a uuid4) as a number, modulo ``buckets``
    pairs = ['%02x' % i for i in range(256)]
    of_pair = pa.array([i % buckets for i in range(256)], pa.int32())
    t0 = time.monotonic()
    events = 0
    for k, table in enumerate(pa_decode(paths, None, found)):
        req = pc.fill_null(table.column('req'), 'req-00')
        digits = pc.utf8_slice_codeunits(pc.cast(req, pa.string()), 4, 6)
        bucket = of_pair.take(pc.fill_null(pc.index_in(
            digits, value_set=pa.array(pairs)), 0))
        table = table.append_column('bucket', bucket)
        pq.write_to_dataset(table, tmp, partition_cols=['bucket'],
                            basename_template='%05d-{i}.parquet' % k,
                            compression='zstd')
        events += table.num_rows
    out['phases']['decode+write'] = time.monotonic() - t0
    out['rss_decode_mb'] = _peak_mb()
    out['events'] = events
    t0 = time.monotonic()
    dataset = ds.dataset(tmp, format='parquet', partitioning='hive')
    cols = ['ph', 'ev', 'a_fp', 'svc', 'a_db', 'a_call', 'a_kind', 'dur_us',
            'a_rows', 'st', 'ts']
    sql = dataset.to_table(columns=cols, filter=(
        ds.field('ph') == 'X') & (ds.field('ev') == 'sql.query'))
    digest = pa_digest(pa, pc, sql)
    del sql
    out['phases']['digest'] = time.monotonic() - t0
    t0 = time.monotonic()
    requests = handed = 0
    for b in range(buckets):
        part = dataset.to_table(
            columns=list(HANDED),
            filter=(ds.field('bucket') == b) & ds.field('req').is_valid() &
            ds.field('ph').isin(['B', 'X', 'I']) &
            ~ds.field('ev').isin(['sql.query', 'sql.txn']))
        part = part.sort_by([('req', 'ascending'), ('ts', 'ascending'),
                             ('line', 'ascending')])
        cols = {c: part.column(c).to_pylist() for c in part.column_names}
        r, e, _o = _handoff(cols['req'], cols)
        requests += r
        handed += e
    out['phases']['assembly'] = time.monotonic() - t0
    return _stream_result(requests, handed, digest)


# -- the parent: runs children, prints the table ---------------------------

def _loadavg() -> str:
    try:
        with open('/proc/loadavg') as f:
            return ' '.join(f.read().split()[:3])
    except OSError:
        return '?'


def _peak_mb() -> float:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM'):
                return int(line.split()[1]) / 1024
    return 0.0


def installed(engine: str):
    """The engine's version, or None."""
    if engine in BASELINES:
        if engine == 'msgspec':
            try:
                import msgspec
                return msgspec.__version__
            except ImportError:
                return None
        return 'stdlib'
    try:
        module = __import__(engine)
    except ImportError:
        return None
    return getattr(module, '__version__', '?')


def child(engine: str, kernel: str, logs: str, extra: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), '--child', engine,
           kernel, logs, extra or '']
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        return {'error': proc.stderr.strip().splitlines()[-1:] or
                ['exit %d' % proc.returncode], 'wall': wall}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res['wall'] = wall
    return res


def best_of(n: int, engine, kernel, logs, extra) -> tuple:
    """The fastest of ``n`` runs (peak RSS: the largest), and the load
    average (1, 5, 15 min) when it ended."""
    best = None
    load = None
    rss = 0.0
    cpu = float('inf')
    for _ in range(max(1, n)):
        res = child(engine, kernel, logs, extra)
        if 'error' in res:
            return res, _loadavg()
        rss = max(rss, res['rss_mb'])
        cpu = min(cpu, res['cpu_s'])
        if best is None or res['seconds'] < best['seconds']:
            best = res
            load = _loadavg()
    best['rss_mb'] = rss
    best['cpu_s'] = cpu
    return best, load


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='Kernels: ' + ', '.join(KERNELS) + '.  See the module '
        'docstring (and doc/source/engines.rst) for what each measures.')
    parser.add_argument('--events', type=int, default=1_000_000,
                        help='size of the main set (bench_report.py\'s)')
    parser.add_argument('--big-events', type=int, default=10_000_000,
                        help='size of the set of the stream kernel; 0 '
                        'runs it on the main set')
    parser.add_argument('--engines', default=','.join(ENGINES))
    parser.add_argument('--kernels', default=','.join(KERNELS))
    parser.add_argument('--no-damaged', action='store_true',
                        help='skip the bad-line check on the damaged set')
    parser.add_argument('--duckdb-memory', default='1GB',
                        help='memory_limit of DuckDB in the stream kernel')
    parser.add_argument('--repeat', type=int, default=2,
                        help='runs of each row; the fastest is shown '
                        '(the machine is shared)')
    parser.add_argument('--child', nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, kernel, logs, extra = args.child
        res = run_kernel(engine, kernel, logs, extra)
        res['rss_mb'] = _peak_mb()
        use = resource.getrusage(resource.RUSAGE_SELF)
        res['cpu_s'] = use.ru_utime + use.ru_stime
        print(json.dumps(res, default=str))
        return
    engines = [e for e in args.engines.split(',') if e]
    kernels = [k for k in args.kernels.split(',') if k]
    versions = {}
    for engine in engines + list(BASELINES):
        versions[engine] = installed(engine)
        if versions[engine] is None:
            print('%s: not installed, skipped (pip install %s)' % (
                engine, engine))
    engines = [e for e in engines if versions[e]]
    print('python %s; %s; %d CPUs' % (
        sys.version.split()[0], ', '.join(
            '%s %s' % (e, versions[e]) for e in engines + list(BASELINES)
            if versions[e]), len(os.sched_getaffinity(0))))
    logs, events, statements = one_million(args.events)
    print('main set: %s, %d events, %d SQL statements, %.0f MB' % (
        logs, events, statements, sum(
            os.path.getsize(p) for p in span_files(logs)) / 1e6))
    if not args.no_damaged and 'decode' in kernels:
        damaged(engines)
    header = '%-9s %-8s %-8s %7s %9s %9s %7s %6s %5s %s' % (
        'kernel', 'engine', 'variant', 'seconds', 'per s', 'per cpu s',
        'peak MB', 'x base', 'check', 'load average | phases (s)')
    print(header)
    for kernel in kernels:
        if kernel == 'stream':
            continue
        rows = []
        runs = [('msgspec', '')] + ([('json', '')] if kernel == 'decode'
                                    else [])
        runs += [(e, '') for e in engines]
        if kernel == 'decode':
            runs += [(e, '1thread') for e in engines]
            runs += [(e, 'ndjson') for e in engines]
            if 'duckdb' in engines:
                runs.append(('duckdb', 'fast'))
        if kernel == 'assembly' and 'polars' in engines:
            runs.append(('polars', 'partition'))
        for engine, extra in runs:
            if not versions.get(engine):
                continue
            res, load = best_of(args.repeat, engine, kernel, logs, extra)
            rows.append((engine, extra, res, load))
        rates = {}
        _print_rows(kernel, rows, events, statements, rates)
        if kernel == 'digest':
            pt_query_digest(logs, rates)
    if 'stream' in kernels:
        if args.big_events:
            blogs, bevents, bstatements = big_set(args.big_events)
        else:
            blogs, bevents, bstatements = logs, events, statements
        print('stream set: %s, %d events, %.0f MB' % (
            blogs, bevents, sum(os.path.getsize(p)
                                for p in span_files(blogs)) / 1e6))
        rows = []
        for engine in engines:
            extra = args.duckdb_memory if engine == 'duckdb' else ''
            res, load = best_of(1, engine, 'stream', blogs, extra)
            rows.append((engine, extra, res, load))
            if engine == 'duckdb':
                extra = 'fast:' + args.duckdb_memory
                res, load = best_of(1, engine, 'stream', blogs, extra)
                rows.append((engine, extra, res, load))
        _print_rows('stream', rows, bevents, bstatements)


def _print_rows(kernel, rows, events, statements, rates=None) -> None:
    """One line per run; ``rates`` gets the digest's statements/s."""
    rates = {} if rates is None else rates
    base = None
    ref = None
    for engine, _extra, res, _load in rows:
        if engine == 'msgspec' and 'error' not in res:
            base = res['seconds']
            ref = res.get('check')
    for engine, extra, res, load in rows:
        if 'error' in res:
            print('%-9s %-8s %-8s failed: %s' % (kernel, engine, extra,
                                                  res['error'][0][:120]))
            continue
        secs = res['seconds']
        n = events
        if kernel == 'digest' and res.get('check'):
            # the sql.query statements digested
            n = sum(r[1] for r in res['check']['fingerprint'])
        n = res.get('rate_events', n)
        if kernel == 'digest':
            rates[engine] = n / secs
        check = res.get('check')
        same = '-' if ref is None or engine in BASELINES or \
            check is None else (
            'same' if _same(kernel, check, ref) else 'DIFF')
        phases = ' '.join('%s %.2f' % kv for kv in res['phases'].items())
        print('%-9s %-8s %-8s %7.2f %9.0f %9.0f %7.0f %6s %5s %s | %s' % (
            kernel, engine, extra or '-', secs, n / secs,
            n / max(res['cpu_s'], 1e-3), res['rss_mb'],
            '%.2f' % (base / secs) if base else '-', same, load, phases))
        if kernel == 'stream':
            print('    result: %s; %d buckets; Parquet %.0f MB; peak RSS '
                  'after decode+write %.0f MB%s' % (
                      json.dumps(check), res.get('buckets', 0),
                      res.get('parquet_mb', 0),
                      res.get('rss_decode_mb', 0),
                      '; files with a row read_json could not read: %d' %
                      res['suspect_files'] if 'suspect_files' in res
                      else ''))
        if same == 'DIFF' or os.environ.get('BENCH_ENGINES_VERBOSE'):
            print('    check: %s' % json.dumps(check)[:600])
            print('    ref:   %s' % json.dumps(ref)[:600])


def _same(kernel, check, ref) -> bool:
    if check is None:
        return True
    if kernel == 'decode':
        return check['lines'] == ref['lines'] and \
            check['other_lines'] == ref['other_lines']
    return json.loads(json.dumps(check)) == json.loads(json.dumps(ref))


def pt_query_digest(logs: str, rates: dict) -> None:
    """pt-query-digest on the same statements (a MySQL slow log written
    by ``bench_report.slow_log``, cached beside the set), and each
    digest's rate as a multiple of its rate (issue 17: at least 5)."""
    digest = shutil.which('pt-query-digest')
    if digest is None:
        print('pt-query-digest: not installed (Debian: percona-toolkit)')
        return
    slow = os.path.join(os.path.dirname(logs), 'slow.log')
    if not os.path.exists(slow):
        _bench_report().slow_log(logs, slow + '.tmp')
        os.rename(slow + '.tmp', slow)
    with open(slow) as f:
        n = sum(1 for line in f if line.startswith('# Query_time'))
    t0 = time.monotonic()
    subprocess.run([digest, '--limit', '20', slow], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pt = time.monotonic() - t0
    print('pt-query-digest: %d statements in %.2f s (%.0f statements/s, '
          'load %s); digest rate / pt-query-digest rate: %s' % (
              n, pt, n / pt, _loadavg(), ', '.join(
                  '%s %.1f' % (e, r / (n / pt)) for e, r in rates.items())))


def damaged(engines) -> None:
    """The bad lines each engine reports on the damaged set, against
    today's decoder."""
    logs = damaged_set()
    ref = child('msgspec', 'decode', logs, '')
    if 'error' in ref:
        print('damaged set: baseline failed: %s' % ref['error'])
        return
    print('damaged set (%s): today\'s analyser finds %s' % (
        logs, json.dumps(ref['check']['counts'])))
    for engine in engines:
        res = child(engine, 'decode', logs, '')
        if 'error' in res:
            print('  %-8s failed: %s' % (engine, res['error'][0][:200]))
            continue
        same = res['check']['lines'] == ref['check']['lines']
        print('  %-8s %s %s%s' % (
            engine, 'same lines' if same else 'DIFFERENT lines',
            json.dumps(res['check']['counts']),
            '' if same else ' first: %s; today: %s' % (
                res['check']['first'], ref['check']['first'])))


if __name__ == '__main__':
    main()
