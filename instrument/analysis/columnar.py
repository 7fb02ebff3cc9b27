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
"""Span files in DuckDB: normalised tables, the SQL digest, Parquet.

The columnar engine of the analyser (issue 17; the choice of DuckDB is
measured in ``doc/source/engines.rst``).  ``load_files`` reads span files
(plain, gzip, service logs whose lines carry a prefix before
``{"v":``) into ``events``, one row per valid record, with
every bad line counted under the kinds and with the ``file:line`` and
reason today's loader (``load``, ``pipeline.PartReader``) gives:

* the per-line work is DuckDB's: each file is read by ``read_csv``
  (a separator that never occurs, no quoting: one column per line,
  empty lines kept, numbered in file order; one statement per file,
  as many files at once as DuckDB has threads) into a table of lines,
  which one statement per batch of files decodes: the service-log
  prefix is cut at ``{"v":``, the line is typed by
  ``try(json_transform())`` (the top-level fields typed, ``attrs`` and
  ``err`` kept as JSON), and the schema's value checks are made in SQL;
* the schema's type checks are made in SQL too, on the JSON type of
  each field (``json_transform`` alone would coerce ``1.5`` or
  ``true`` to an integer), unknown fields by the number of keys; only
  the few lines found bad are handed to Python, which classifies them
  with today's reference decoder (``load.RecordDecoder.slow``): same
  kind, same reason;
* a process is ``(host, pid, start)`` as in ``load.FileLoss``: the
  ``process.start`` before a record in its file (an ``ASOF`` join),
  else ``PartReader.process_of``; a ``seq`` of a process read again
  is a duplicate, in any file;
* two kinds of line are read differently from today: a record with a
  field given twice (``"seq": 1, "seq": 2``: Python keeps the last
  value) and an integer beyond 64 bits that Python accepts (such a
  record is left out and named in ``problems``);
* files DuckDB cannot read (not UTF-8, a cut gzip stream) and files
  with a bad, blank or other line that hold a carriage return
  (``read_csv`` ends a line there too) are copied by Python, block by
  block, with the lines DuckDB would misread (not UTF-8, a carriage
  return) blanked and classified in Python.

Views over ``events`` (``VIEWS``): ``spans``, ``sql_statements``,
``requests_seen``.  ``sql_digest`` computes the SQL digest's classes in
DuckDB (``sqldigest.SqlDigest`` fed with finished classes: same
profile, percentiles, grouping).  ``export_parquet`` writes the
normalised tables, the analyser's requests and per-component times,
the SQL classes and the host offsets as Parquet partitioned by day and
host (``instrument-report export --parquet DIR``; columns and queries
in ``doc/source/export.rst``).

DuckDB is a library of the ``report`` extra; the runtime never imports
this module.
"""

from concurrent import futures
import gzip
import json
import os
import re
import shutil
import tempfile
import typing
import zlib

from instrument.analysis import load
from instrument.analysis import sqldigest
from instrument import schema

if typing.TYPE_CHECKING:  # the report extra's engine, for annotations
    import duckdb

    from instrument.analysis import pipeline

MARKER = '{"v":'
BLOCK_BYTES = 32 << 20
# the top-level fields, typed; ``err`` and ``attrs`` stay JSON
_SQL_TYPES = {int: 'BIGINT', str: 'VARCHAR', list: 'VARCHAR[]',
              dict: 'JSON'}
COLUMNS = tuple((name, _SQL_TYPES[schema._TYPES[name]])
                for name in schema.FIELDS)
# the keys of ``attrs`` the views read (name, SQL type)
SQL_ATTRS = (('fp', 'VARCHAR'), ('db', 'VARCHAR'), ('call', 'VARCHAR'),
             ('kind', 'VARCHAR'), ('rows', 'BIGINT'))

# Views over ``events`` (and the tables ``export_parquet`` adds): the
# same text is documented in doc/source/export.rst.
VIEWS = {
    'spans': (
        "SELECT host, svc, pid, tid, ev, span, parent, req, greq, inst, "
        "ts, ts_corr, dur_us, st, err->>'cls' AS err_cls, "
        "err->>'msg' AS err_msg, attrs FROM events "
        "WHERE ph = 'X' AND ev NOT IN ('sql.query', 'sql.txn')"),
    'sql_statements': (
        "SELECT host, svc, pid, req, parent, ts, ts_corr, dur_us, "
        "st = 'error' AS error, attrs->>'fp' AS fp, "
        "attrs->>'db' AS db, attrs->>'call' AS call, "
        "attrs->>'kind' AS kind, "
        "TRY_CAST(attrs->>'rows' AS BIGINT) AS rows FROM events "
        "WHERE ph = 'X' AND ev = 'sql.query'"),
    'requests_seen': (
        "SELECT req, min(ts_corr) AS first_us, "
        "max(ts_corr + coalesce(dur_us, 0)) AS last_us, "
        "count(*) AS records, list(DISTINCT host ORDER BY host) AS hosts, "
        "count_if(ev = 'sql.query') AS sql_statements FROM events "
        "WHERE req IS NOT NULL GROUP BY req"),
}


class EngineMissing(ImportError):
    """DuckDB is not installed (the ``report`` extra installs it)."""


class OutOfMemory(RuntimeError):
    """DuckDB needed more than its memory limit (``--memory-limit``)."""


def _oom_error() -> tuple:
    """DuckDB's out-of-memory exception (none when not installed)."""
    try:
        import duckdb
    except ImportError:
        return ()
    return (duckdb.OutOfMemoryException,)


def _out_of_memory(exc: Exception, limit: typing.Optional[str]):
    return OutOfMemory(
        'DuckDB needs more memory than --memory-limit %s allows (raise '
        'it): %s' % (limit, str(exc).splitlines()[0]))


# DuckDB's memory (``--memory-limit``): beyond it, tables and operators
# spill to the temp directory
MEMORY_LIMIT = '1GB'


def connect(memory_limit: typing.Optional[str] = None,
            threads: typing.Optional[int] = None,
            temp_directory: typing.Optional[str] = None
            ) -> 'duckdb.DuckDBPyConnection':
    """An in-memory DuckDB connection; ``memory_limit`` (DuckDB's
    syntax: ``1GB``, ``512MiB``) bounds its memory, what does not fit
    is written under ``temp_directory``."""
    try:
        import duckdb
    except ImportError as exc:
        raise EngineMissing(
            'DuckDB is not installed: pip install '
            "'openstack-instrument[report]'") from exc
    con = duckdb.connect()
    if threads:
        con.execute('SET threads = %d' % int(threads))
    if memory_limit:
        con.execute('SET memory_limit = %s' % _q(memory_limit))
    if temp_directory:
        con.execute('SET temp_directory = %s' % _q(temp_directory))
    con.execute('SET preserve_insertion_order = true')
    # (the report draws its own progress bar; DuckDB's would print on
    # stdout, into the report)
    con.execute('SET enable_progress_bar = false')
    return con


def _q(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + str(text).replace("'", "''") + "'"


# -- reading ---------------------------------------------------------------

def _read_lines(path: str, keep: typing.Optional[str] = None) -> str:
    """Every line of ``path`` (gzip too), numbered from 1 in file order;
    empty lines are kept (``text`` NULL).  ``keep``: a regular
    expression; the text of the other lines is NULL (tested before the
    numbering, which runs on one thread: only the lines kept go
    through it with their text)."""
    text = 'column0'
    if keep is not None:
        text = 'CASE WHEN regexp_matches(column0, %s) THEN column0 END' % (
            _q(keep))
    return ('SELECT row_number() OVER () AS line, text FROM (SELECT %s '  # noqa: S608
            "AS text FROM read_csv(%s, columns = {'column0': 'VARCHAR'}, "
            "delim = '\\x1e', quote = '', escape = '', header = false, "
            "auto_detect = false, strict_mode = false, new_line = '\\n', "
            "compression = %s))" % (
                text, _q(path),
                _q('gzip' if path.endswith('.gz') else 'none')))


def _value_checks() -> str:
    """SQL true when a typed row ``r`` passes what ``schema.validate``
    checks of the values (``_types_ok`` checks the types)."""
    required = ' AND '.join('r.%s IS NOT NULL' % n for n in schema.REQUIRED)
    return (
        "coalesce(%s AND r.v = %d AND r.ph IN (%s) AND (r.ph NOT IN ('B', "
        "'X') OR coalesce(r.span, '') <> '') AND (r.ph <> 'X' OR "
        "(r.dur_us >= 0 AND r.st IN ('ok', 'error'))) AND (r.err IS NULL OR "
        "json_type(r.err) = 'NULL' OR json_type(r.err, '$.cls') = "
        "'VARCHAR'), false)" % (
            required, schema.SCHEMA_VERSION,
            ', '.join(_q(p) for p in sorted(schema.PHASES))))


# what bytes.strip() strips (a line of only these is skipped)
_WHITESPACE = ' || '.join('chr(%d)' % c for c in (32, 9, 10, 11, 12, 13))


# JSON types (``json_type``) each schema type accepts
_JSON_TYPES = {int: ('UBIGINT', 'BIGINT'), str: ('VARCHAR',),
               list: ('ARRAY',), dict: ('OBJECT',)}

# the columns ``events`` holds when only the SQL digest's records are
# read (``load_files(only=...)``): those the digest reads, ``attrs``
# only for the records other than ``sql.query`` (few), and the keys of
# ``attrs`` a statement's class is made of, extracted once
DIGEST_COLUMNS = ('ph', 'seq', 'ts', 'dur_us', 'host', 'svc', 'pid', 'ev',
                  'st', 'attrs')
DIGEST_ATTRS = (('fp', 'VARCHAR'), ('db', 'VARCHAR'), ('call', 'VARCHAR'),
                ('sql_kind', 'VARCHAR'), ('rows', 'BIGINT'))


def _types_ok(shape: str) -> str:
    """SQL true when ``shape`` (``json_type`` of each schema field, in
    ``schema.FIELDS`` order: NULL when absent, ``'NULL'`` for a null)
    passes the type checks of ``schema.validate``."""
    checks = []
    for i, name in enumerate(schema.FIELDS, 1):
        ok = ' OR '.join('%s[%d] = %s' % (shape, i, _q(t))
                         for t in _JSON_TYPES[schema._TYPES[name]])
        if name not in schema.REQUIRED:
            ok = "%s[%d] IS NULL OR %s[%d] = 'NULL' OR %s" % (
                shape, i, shape, i, ok)
        checks.append('(%s)' % ok)
    return ' AND '.join(checks)


def _present(shape: str) -> str:
    """SQL: how many schema fields ``shape`` holds (a record with as
    many keys has no unknown field and no field twice)."""
    return ' + '.join('(%s[%d] IS NOT NULL)::INTEGER' % (shape, i)
                      for i in range(1, len(schema.FIELDS) + 1))


def _stage_columns(only: tuple) -> tuple:
    """``(name, SQL type)`` of the record columns ``_stage_sql`` keeps
    (all of ``COLUMNS``, or the digest's when ``only``)."""
    if not only:
        return COLUMNS
    types = dict(COLUMNS)
    return tuple((n, types[n]) for n in DIGEST_COLUMNS) + DIGEST_ATTRS


def _raw_sql(fi: int, path: str, only: tuple = ()) -> str:
    """The numbered lines ``(file, line, text)`` of one file; ``only``:
    the lines holding one of these strings (on the raw line, before any
    other work: one regular expression, RE2, costs a third of a
    ``contains`` per string; a line holding one only before the
    record's ``{"v":`` is read and checked too)."""
    if not only:
        return 'SELECT %d AS file, * FROM (%s)' % (  # noqa: S608
            fi, _read_lines(path))
    keep = '|'.join(re.escape(s) for s in only)
    return ('SELECT %d AS file, * FROM (%s) WHERE text IS NOT '  # noqa: S608
            'NULL' % (fi, _read_lines(path, keep)))


def _stage_sql(lines: str, only: tuple = ()) -> str:
    """The staged rows of ``lines`` (a query of ``(file, line, text)``
    rows: ``_raw_sql``): ``kind`` NULL for a valid row,
    ``'blank'``, ``'other'`` (no record on the line) or ``'bad'`` (to be
    classified in Python, as today); ``text`` kept only for those.  The
    types are checked on ``json_type`` of each schema field (one call;
    ``json_transform`` alone would coerce ``1.5`` or ``true`` to an
    integer), unknown fields by the number of keys (``json_keys``):
    a field given twice is flagged too, and Python's verdict taken.
    ``only``: the lines are those of the digest's records
    (``_raw_sql``), the columns those of ``_stage_columns``."""
    if only:
        cols = ', '.join('r.%s AS %s' % (n, n) for n in DIGEST_COLUMNS
                         if n != 'attrs')
        # the class keys of a statement typed with the record (as
        # ``sql_digest`` reads them from ``attrs``: ``->>``, ``rows``
        # cast from its JSON); ``attrs`` itself only for the others
        cols += (
            ", CASE WHEN r.ev <> 'sql.query' THEN json_extract(rec, "
            "'$.attrs') END AS attrs, r.attrs.fp AS fp, r.attrs.db AS db, "
            'r.attrs.call AS call, r.attrs.kind AS sql_kind, '
            'TRY_CAST(r.attrs.rows AS BIGINT) AS rows')
        struct = dict(COLUMNS, attrs={
            'fp': 'VARCHAR', 'db': 'VARCHAR', 'call': 'VARCHAR',
            'kind': 'VARCHAR', 'rows': 'JSON'})
    else:
        cols = ', '.join('r.%s AS %s' % (n, n) for n, _t in COLUMNS)
        struct = dict(COLUMNS)
    fields = ', '.join(_q('$.' + n) for n in schema.FIELDS)
    marker = _q(MARKER)
    return (
        'SELECT file, line, kind, CASE WHEN kind IN (\'bad\', '  # noqa: S608
        "'other') THEN text END AS text, %s FROM (SELECT file, line, text, "
        "rec, r, CASE WHEN rec IS NULL AND trim(coalesce(text, ''), "
        "%s) = '' THEN 'blank' WHEN rec IS NULL THEN 'other' WHEN r IS "
        "NULL THEN 'bad' WHEN NOT coalesce(%s, false) THEN 'bad' WHEN NOT "
        "(%s) THEN 'bad' WHEN len(json_keys(rec)) <> %s THEN 'bad' END AS "
        'kind FROM (SELECT *, CASE WHEN r IS NOT NULL THEN json_type(rec, '
        '[%s]) END AS s FROM (SELECT file, line, text, rec, try('
        "json_transform(rec, %s)) AS r FROM (SELECT file, line, text, CASE "
        "WHEN starts_with(text, '{') THEN text WHEN strpos(text, %s) > 0 "
        'THEN substr(text, strpos(text, %s)) END AS rec FROM (%s)))))' % (
            cols, _WHITESPACE, _types_ok('s'), _value_checks(),
            _present('s'), fields, _q(json.dumps(struct)), marker, marker,
            lines))


class _Copy:
    """A copy of a file DuckDB should not read as it is (a service log,
    a file not UTF-8, a cut gzip stream): lines that are not UTF-8 or
    hold a carriage return (``read_csv`` splits lines there too) are
    blanked; the kind and reason of each is today's."""

    def __init__(self, fi: int, path: str, tmp: str) -> None:
        self.fi = fi
        self.path = path
        self.name = os.path.basename(path)
        self.copy = os.path.join(tmp, '%d.txt' % fi)
        # (line, raw bytes) of the lines blanked
        self.blanked: list = []
        # line: raw bytes, of the lines whose final CR was taken out
        self.raw_of: dict = {}
        self.error: typing.Optional[str] = None
        self.lines = 0
        self.ends_with_newline = True

    def make(self) -> None:
        f = load.SpanFile(self.path, self.fi)
        rest = b''
        with open(self.copy, 'wb') as out:
            while True:
                lines = f.read_chunk(BLOCK_BYTES)
                if not lines:
                    break
                block = b''.join(lines)
                if block.isascii() and b'\r' not in block:
                    out.write(block)
                else:
                    out.write(self._clean(lines))
                self.lines += len(lines)
                rest = lines[-1]
        self.error = f.error
        self.ends_with_newline = rest.endswith(b'\n') or not rest

    def _clean(self, lines: list) -> bytes:
        out = []
        for i, raw in enumerate(lines, self.lines + 1):
            body = raw[:-1] if raw.endswith(b'\n') else raw
            end = raw[len(body):]
            ok = raw.isascii()
            if not ok:
                try:
                    raw.decode('utf-8')
                    ok = True
                except UnicodeDecodeError:
                    pass
            if ok and body.endswith(b'\r') and b'\r' not in body[:-1]:
                # a line ending in CR LF: the record is the same without
                # the CR (JSON white space); a bad one is classified
                # from the line as read
                self.raw_of[i] = raw
                out.append(body[:-1] + end)
            elif ok and b'\r' not in body:
                out.append(raw)
            else:
                self.blanked.append((i, raw))
                out.append(end)
        return b''.join(out)


class Loaded:
    """What ``load`` found: ``issues`` (``load.Issues``: counts, samples
    and per file, as today's loader), ``lines``, ``records``,
    ``files`` (names), ``paths``, ``problems``."""

    def __init__(self, paths: list) -> None:
        self.paths = paths
        self.files = [os.path.basename(p) for p in paths]
        self.issues = load.Issues()
        self.lines = 0
        self.records = 0
        self.problems: list = []


def load_files(con: 'duckdb.DuckDBPyConnection', paths: list,
               progress: typing.Optional[typing.Callable[[int], None]] = None,
               tmp: typing.Optional[str] = None, only: tuple = ()) -> Loaded:
    """Read ``paths`` (from ``load.discover``) into the table ``events``
    of ``con``; ``progress(bytes done)`` after each file.  ``only``:
    read only the records holding one of these strings (``SQL_ONLY``:
    what the SQL digest needs; the bad lines are then those of these
    records only)."""
    out = Loaded(paths)
    work = tmp or tempfile.mkdtemp(prefix='instrument-columnar-')
    try:
        _load(con, paths, out, work, progress, only)
    finally:
        if tmp is None:
            shutil.rmtree(work, ignore_errors=True)
    return out


# the records the SQL digest reads, and the process starts that tell
# which process wrote them (duplicates)
SQL_ONLY = ('"ev":"sql.', '"ev":"process.start"')


def _load(con, paths, out, work, progress, only=()) -> None:
    import duckdb
    cols = ', '.join('%s %s' % c for c in _stage_columns(only))
    # not a temp table: the cursors below (connections of their own)
    # append to it
    con.execute('CREATE OR REPLACE TABLE staged (file INTEGER, '
                'line BIGINT, kind VARCHAR, text VARCHAR, %s)' % cols)
    copies = {}
    sizes = [os.path.getsize(p) for p in paths]
    con.execute('CREATE OR REPLACE TABLE raw (file INTEGER, line BIGINT, '
                'text VARCHAR)')

    def read(fi: int) -> bool:
        # the lines of a file, numbered in order (one thread per file),
        # several files at once; decoded by one statement per batch
        # (planning it costs more than a small file's lines)
        cur = con.cursor()
        try:
            cur.execute('INSERT INTO raw ' + _raw_sql(fi, paths[fi], only))
            return True
        except duckdb.Error:
            return False
        finally:
            cur.close()

    threads = int(con.execute(
        "SELECT current_setting('threads')").fetchone()[0])
    failed = []
    done = 0
    with futures.ThreadPoolExecutor(max(1, threads)) as pool:
        for batch in _batches(paths, sizes, only):
            for fi, ok in zip(batch, pool.map(read, batch), strict=True):
                if not ok:
                    failed.append(fi)
                done += sizes[fi]
            con.execute('INSERT INTO staged ' + _stage_sql(  # noqa: S608
                'SELECT * FROM raw', only))
            con.execute('DELETE FROM raw')
            if progress is not None:
                progress(done)
    con.execute('DROP TABLE raw')
    for fi in sorted(failed):
        _load_one(con, fi, paths[fi], paths[fi], copies, work, only)
    _carriage_returns(con, paths, copies, work, only)
    for fi in sorted(copies):
        if copies[fi].error:
            out.problems.append(load.unreadable(
                copies[fi].name, copies[fi].error, copies[fi].lines))
    _classify(con, paths, copies, out)
    out.lines = con.execute('SELECT count(*) FROM staged').fetchone()[0]
    _processes(con, out, _stage_columns(only))
    out.records = con.execute('SELECT count(*) FROM events').fetchone()[0]


# input bytes whose lines are held at once before they are decoded
# (all of them, or the digest's: a few in ten); a gzip file counts as
# this many times its size
BATCH_BYTES = 64 << 20
DIGEST_BATCH_BYTES = 512 << 20
GZIP_RATIO = 10


def _batches(paths: list, sizes: list, only: tuple) -> list:
    """The files in batches of about ``BATCH_BYTES`` of text, the
    largest files first in each."""
    limit = DIGEST_BATCH_BYTES if only else BATCH_BYTES
    batches: list = [[]]
    held = 0
    for fi in range(len(paths)):
        n = sizes[fi] * (GZIP_RATIO if paths[fi].endswith('.gz') else 1)
        if batches[-1] and held + n > limit:
            batches.append([])
            held = 0
        batches[-1].append(fi)
        held += n
    return [sorted(b, key=lambda fi: -sizes[fi]) for b in batches]


def _has_cr(path: str) -> bool:
    f = gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')
    with f:
        try:
            while True:
                block = f.read(BLOCK_BYTES)
                if not block:
                    return False
                if b'\r' in block:
                    return True
        except (OSError, EOFError, zlib.error):
            return False


def _carriage_returns(con, paths, copies, work, only) -> None:
    """``read_csv`` ends a line at a carriage return too: a file read
    directly that gave a blank or bad line is searched for one (rare:
    the runtime writes neither), and read again through a copy (lines
    with one are then classified in Python, as today)."""
    import duckdb
    for fi, in con.execute(
            "SELECT DISTINCT file FROM staged WHERE kind IN ('blank', "
            "'bad', 'other') ORDER BY file").fetchall():
        if fi in copies or not _has_cr(paths[fi]):
            continue
        copies[fi] = _Copy(fi, paths[fi], work)
        copies[fi].make()
        con.execute('DELETE FROM staged WHERE file = ?', [fi])
        try:
            con.execute('INSERT INTO staged ' + _stage_sql(
                _raw_sql(fi, copies[fi].copy, only), only))
        except duckdb.Error:
            con.execute('DELETE FROM staged WHERE file = ?', [fi])
            raise


def _load_one(con, fi, path, source, copies, work, only) -> None:
    """A file whose statement failed, again alone; through a copy when
    DuckDB cannot read it (not UTF-8, a cut gzip stream)."""
    import duckdb
    con.execute('DELETE FROM staged WHERE file = ?', [fi])
    try:
        con.execute('INSERT INTO staged ' + _stage_sql(
            _raw_sql(fi, source, only), only))
        return
    except duckdb.Error:
        if fi in copies:
            raise
    con.execute('DELETE FROM staged WHERE file = ?', [fi])
    copies[fi] = _Copy(fi, path, work)
    copies[fi].make()
    con.execute('INSERT INTO staged ' + _stage_sql(
        _raw_sql(fi, copies[fi].copy, only), only))


def _file_ends(path: str) -> tuple:
    """``(lines, ends with a newline)`` of a file (read whole: only for
    a file whose last line is bad)."""
    f = gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')
    n = 0
    last = b''
    with f:
        try:
            while True:
                block = f.read(BLOCK_BYTES)
                if not block:
                    break
                n += block.count(b'\n')
                last = block
        except (OSError, EOFError, zlib.error):
            pass
    newline = not last or last.endswith(b'\n')
    return n + (0 if newline else 1), newline


def _classify(con, paths, copies, out) -> None:
    """Kinds and reasons of the lines DuckDB flagged, by today's code;
    and the bad lines of the copies."""
    issues = out.issues
    decoder = load.RecordDecoder(fast=False)
    ends: dict = {}
    # lines blanked in the copies, and the flagged rows, in file order
    logs = ', '.join(str(fi) for fi, name in enumerate(out.files)
                     if load._is_log_name(name)) or '-1'
    # other lines of service logs are only counted
    issues.other_lines += con.execute(
        "SELECT count(*) FROM staged WHERE kind = 'other' AND file IN "  # noqa: S608
        '(%s)' % logs).fetchone()[0]
    flagged = con.execute(
        "SELECT file, line, kind, text FROM staged WHERE kind = 'bad' OR "  # noqa: S608
        "kind = 'other' AND file NOT IN (%s) ORDER BY file, line" % logs
    ).fetchall()
    rows = [(fi, line, kind, None if text is None else
             text.encode('utf-8')) for fi, line, kind, text in flagged]
    for fi, copy in copies.items():
        for line, raw in copy.blanked:
            rows.append((fi, line, 'raw', raw))
    rows.sort(key=lambda r: (r[0], r[1]))
    keyed = []
    for fi, line, kind, raw in rows:
        fname = out.files[fi]
        log_file = load._is_log_name(fname)
        if kind != 'raw':
            last, newline = _ends(ends, fi, paths, copies)
            raw = typing.cast(bytes, raw) + (
                b'' if line == last and not newline else b'\n')
            if fi in copies:
                raw = copies[fi].raw_of.get(line, raw)
        if raw[:1] != b'{':
            j = raw.find(load.LOG_MARKER)
            if j < 0:
                issues.no_record(fname, line, raw, log_file)
                continue
            raw = raw[j:]
        if decoder.slow(raw) is not None:
            # valid after all (a value DuckDB's types cannot hold)
            out.problems.append(
                '%s:%d: a valid record the columnar engine cannot type '
                '(left out)' % (fname, line))
            continue
        kind, reason = decoder.error or ('invalid', '')
        issues.add(kind, fname, line, reason)
        key = _occupant(raw)
        if key is not None:
            keyed.append((fi, line) + key)
    con.execute('CREATE OR REPLACE TEMP TABLE occupants (file INTEGER, '
                'line BIGINT, host VARCHAR, pid BIGINT, seq BIGINT, '
                'ts BIGINT)')
    if keyed:
        con.executemany('INSERT INTO occupants VALUES (?, ?, ?, ?, ?, ?)',
                        keyed)


def _ends(ends, fi, paths, copies) -> tuple:
    if fi not in ends:
        copy = copies.get(fi)
        if copy is not None:
            ends[fi] = (copy.lines, copy.ends_with_newline)
        else:
            ends[fi] = _file_ends(paths[fi])
    return ends[fi]


def _occupant(raw: bytes) -> typing.Optional[tuple]:
    """``(host, pid, seq, ts)`` a bad line names (today, its ``seq``
    counts as read in that process: ``PartReader.bad_line``)."""
    try:
        rec = load.loads(raw)
    except ValueError:
        return None
    if rec.__class__ is not dict:
        return None
    host, pid, seq = rec.get('host'), rec.get('pid'), rec.get('seq')
    if host.__class__ is str and pid.__class__ is int and \
            seq.__class__ is int and abs(pid) < 1 << 63 and \
            abs(seq) < 1 << 63:
        ts = rec.get('ts')
        return host, pid, seq, ts if ts.__class__ is int and \
            abs(ts) < 1 << 63 else 0
    return None


def _process_of(starts: dict, start_hosts: set, host: str, pid: int,
                ts: int) -> tuple:
    """``PartReader.process_of``: the process of a record read before any
    ``process.start`` of its file."""
    found = starts.get(pid)
    if not found:
        return (host, pid, None)
    mine = [t for t, h in found if h == host]
    if mine:
        before = [t for t in mine if t <= ts]
        return (host, pid, max(before) if before else min(mine))
    if len(found) == 1 and host not in start_hosts:
        t, h = found[0]
        return (h, pid, t)
    return (host, pid, None)


def _processes(con, out, columns: tuple) -> None:
    """Each valid row's process ``(p_host, pid, p_start)``; a ``seq``
    read again in a process is a duplicate (the first read, in file
    and line order, is kept); the table ``events`` (with ``columns``
    of the rows)."""
    cols = ', '.join('v.' + n for n, _t in columns)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE starts AS SELECT file, line, host, "
        "pid, ts FROM staged WHERE kind IS NULL AND ph = 'M' AND ev = "
        "'process.start'")
    starts: dict = {}
    start_hosts = set()
    for host, pid, ts in con.execute(
            'SELECT DISTINCT host, pid, ts FROM starts ORDER BY ALL'
            ).fetchall():
        starts.setdefault(pid, []).append((ts, host))
        start_hosts.add(host)
    # the rows before any process.start of their pid in their file take
    # the process of the first of them (PartReader.current)
    rows = con.execute(
        'SELECT v.file, v.pid, arg_min(v.host, v.line), arg_min(v.ts, '
        'v.line) FROM staged v LEFT JOIN (SELECT file, pid, min(line) AS '
        'first FROM starts GROUP BY ALL) f USING (file, pid) WHERE v.kind '
        'IS NULL AND (f.first IS NULL OR v.line < f.first) GROUP BY '
        'v.file, v.pid').fetchall()
    con.execute('CREATE OR REPLACE TEMP TABLE first_proc (file INTEGER, '
                'pid BIGINT, p_host VARCHAR, p_start BIGINT)')
    if rows:
        con.executemany(
            'INSERT INTO first_proc VALUES (?, ?, ?, ?)',
            [(fi, pid) + _process_of(starts, start_hosts, host, pid, ts)[::2]
             for fi, pid, host, ts in rows])
    occupants = con.execute(
        'SELECT o.file, o.line, o.host, o.pid, o.seq, o.ts, s.host, s.ts, '
        'f.p_host, f.p_start FROM occupants o ASOF LEFT JOIN starts s ON '
        'o.file = s.file AND o.pid = s.pid AND o.line >= s.line LEFT JOIN '
        'first_proc f ON f.file = o.file AND f.pid = o.pid').fetchall()
    con.execute('CREATE OR REPLACE TEMP TABLE occupied (file INTEGER, '
                'line BIGINT, p_host VARCHAR, pid BIGINT, p_start BIGINT, '
                'seq BIGINT)')
    taken = []
    for fi, line, host, pid, seq, ts, s_host, s_ts, f_host, f_start in \
            occupants:
        if s_host is not None:
            key = (s_host, pid, s_ts)
        elif f_host is not None or f_start is not None:
            key = (f_host, pid, f_start)
        else:
            key = _process_of(starts, start_hosts, host, pid, ts)
        taken.append((fi, line, key[0], pid, key[2], seq))
    if taken:
        con.executemany('INSERT INTO occupied VALUES (?, ?, ?, ?, ?, ?)',
                        taken)
    full = columns == COLUMNS
    if not full:
        # the digest's rows stay in ``staged``: only the keys of their
        # processes are computed (for the duplicates), not copied with
        # them
        cols = 'v.pid, v.seq'
    con.execute(
        'CREATE OR REPLACE TEMP TABLE events_base AS SELECT v.file, '  # noqa: S608
        'v.line, %s, coalesce(s.host, f.p_host) AS p_host, CASE WHEN '
        's.host IS NOT NULL THEN s.ts ELSE f.p_start END AS p_start FROM '
        '(SELECT * FROM staged WHERE kind IS NULL) v ASOF '
        'LEFT JOIN '
        'starts s ON v.file = s.file AND v.pid = s.pid AND v.line >= '
        's.line LEFT JOIN first_proc f ON f.file = v.file AND f.pid = '
        'v.pid' % cols)
    if full:
        con.execute('DROP TABLE staged')
    # a seq taken twice in a process: a hash aggregate finds the few
    # (a window over every row would cost far more)
    con.execute(
        'CREATE OR REPLACE TEMP TABLE dups AS WITH taken AS (SELECT file, '
        'line, p_host, pid, p_start, seq, true AS ok FROM events_base '
        'UNION ALL '
        'SELECT *, false FROM occupied), twice AS (SELECT p_host, pid, '
        'p_start, seq, min((file, line)) AS first FROM taken GROUP BY ALL '
        'HAVING count(*) > 1) SELECT t.file, t.line, t.p_host, t.pid, '
        't.p_start, t.seq FROM taken t JOIN twice w ON t.p_host IS NOT '
        'DISTINCT FROM w.p_host AND t.pid = w.pid AND t.p_start IS NOT '
        'DISTINCT FROM w.p_start AND t.seq = w.seq WHERE t.ok AND '
        '(t.file, t.line) > w.first')
    for fi, line, host, pid, start, seq in con.execute(
            'SELECT * FROM dups ORDER BY file, line').fetchall():
        out.issues.add('duplicate', out.files[fi], line,
                       'seq %d of %s read before' % (
                           seq, load.process_label((host, pid, start))))
    if full:
        con.execute('DELETE FROM events_base WHERE (file, line) IN (SELECT '
                    '(file, line) FROM dups)')
        base = 'events_base'
    else:
        con.execute('DELETE FROM staged WHERE kind IS NOT NULL OR (file, '
                    'line) IN (SELECT (file, line) FROM dups)')
        con.execute('DROP TABLE events_base')
        base = '(SELECT * EXCLUDE (kind, text) FROM staged)'
    set_offsets(con, {})
    con.execute(
        'CREATE OR REPLACE TEMP VIEW events AS SELECT e.*, coalesce('  # noqa: S608
        'o.offset_us, 0) AS offset_us, e.ts + coalesce(o.offset_us, 0) AS '
        'ts_corr FROM %s e LEFT JOIN host_offset o ON o.host = e.host' % base)
    if full:
        # (the digest's columns are not enough for them)
        for name, query in VIEWS.items():
            con.execute('CREATE OR REPLACE TEMP VIEW %s AS %s' % (
                name, query))


def _one(con: 'duckdb.DuckDBPyConnection', query: str) -> typing.Any:
    """The one value of ``query``'s one row."""
    row = con.execute(query).fetchone()
    if row is None:
        raise ValueError('no row: %s' % query)
    return row[0]


def set_offsets(con: 'duckdb.DuckDBPyConnection', offsets: dict) -> None:
    """Correct ``ts_corr`` of the view ``events`` by the host offsets
    (``{host: offset_us}``, as ``clocks.ClockResult.offsets``); a host
    without one keeps 0, as in pass 2 of today's analyser."""
    con.execute('CREATE OR REPLACE TEMP TABLE host_offset (host VARCHAR, '
                'offset_us BIGINT)')
    if offsets:
        con.executemany('INSERT INTO host_offset VALUES (?, ?)',
                        sorted(offsets.items()))


# -- the SQL digest --------------------------------------------------------

def sql_digest(con: 'duckdb.DuckDBPyConnection',
               since: typing.Optional[int] = None,
               until: typing.Optional[int] = None,
               source: str = 'events',
               digest: typing.Optional[sqldigest.SqlDigest] = None,
               extracted: bool = False) -> sqldigest.SqlDigest:
    """The SQL digest of the ``sql.query``, ``sql.agg`` and
    ``sql.fingerprint`` records of ``source`` (columns as ``events``;
    times ``ts_corr``), aggregated by DuckDB: the classes hold exactly
    what ``SqlDigest.add`` gives them, so profiles, groupings and
    percentiles are today's.  ``digest``: an empty digest to fill.
    ``extracted``: ``source`` holds the class keys of the statements
    (``DIGEST_ATTRS``: ``load_files(only=...)``) instead of their
    ``attrs``."""
    if digest is None:
        digest = sqldigest.SqlDigest(since, until)
    window = []
    if since is not None:
        window.append('ts_corr >= %d' % int(since))
    if until is not None:
        window.append('ts_corr < %d' % int(until))
    inside = ' AND '.join(window) or 'true'
    keys = ("attrs->>'fp' AS fp, attrs->>'db' AS db, attrs->>'call' AS "
            "call, attrs->>'kind' AS kind, TRY_CAST(attrs->'rows' AS "
            'BIGINT) AS rows')
    if extracted:
        keys = 'fp, db, call, sql_kind AS kind, rows'
    statements = ('SELECT svc, %s, dur_us, ts_corr, st FROM %s WHERE '  # noqa: S608
                  "ph = 'X' AND ev = 'sql.query'" % (keys, source))
    digest.filtered = _one(
        con, 'SELECT count(*) FROM (%s) WHERE NOT (%s)' % (  # noqa: S608
            statements, inside))
    # one pass: per class and histogram bucket, the buckets of a class
    # added up here (a class has a few)
    for row in con.execute(
            'SELECT fp, svc, db, call, kind, CASE WHEN dur_us >= 1 THEN '  # noqa: S608
            'CAST(floor(log10(dur_us) * %d) AS BIGINT) ELSE 0 END AS b, '
            'count(*), sum(dur_us), sum(dur_us::HUGEINT * dur_us), '
            'min(dur_us), max(dur_us), coalesce(sum(rows) FILTER (WHERE '
            "rows > 0), 0), count_if(st = 'error'), min(ts_corr), "
            'max(ts_corr), count(rows) FROM (%s) WHERE %s GROUP BY ALL' % (
                sqldigest.PER_DECADE, statements, inside)).fetchall():
        key = row[:5]
        b, n, total, sq, lo, hi, rows, errors, first, last, rows_n = row[5:]
        part = [n, int(total), int(sq), lo, hi, int(rows), errors, {b: n},
                first, last, 0, rows_n]
        if key in digest.classes:
            sqldigest._combine(digest.classes[key], part)
        else:
            digest.classes[key] = part
    # the counters (one per process per minute) and the texts: few
    for ts, svc, attrs in con.execute(
            'SELECT ts_corr, svc, attrs FROM %s WHERE ph = \'C\' AND ev = '  # noqa: S608
            "'sql.agg' ORDER BY file, line" % source).fetchall():
        digest.add_agg(ts, svc, json.loads(attrs) if attrs else {})
    for fp, text, kind in con.execute(
            "SELECT attrs->>'fp', attrs->>'text', attrs->>'kind' FROM %s "  # noqa: S608
            "WHERE ph = 'M' AND ev = 'sql.fingerprint' ORDER BY file, line"
            % source
            ).fetchall():
        digest.fingerprint(fp, text, kind)
    return digest


# -- export ----------------------------------------------------------------

# Tables written by ``export_parquet``: name: partition columns.
EXPORTED = {
    'events': ('day', 'host'),
    'spans': ('day', 'host'),
    'sql_statements': ('day', 'host'),
    'requests': ('day',),
    'request_components': ('day',),
    'sql_classes': ('day',),
    'host_offsets': (),
}
_DAY = "strftime(make_timestamp(%s), '%%Y-%%m-%%d')"


def _rows_table(con, name: str, columns: dict, rows: list, tmp: str) -> None:
    """A table from Python rows (dicts), through an NDJSON file (one
    row per request or class: few)."""
    path = os.path.join(tmp, name + '.jsonl')
    with open(path, 'w', encoding='utf-8') as f:
        for row in rows:
            f.write(json.dumps(row) + '\n')
    if rows:
        con.execute(
            'CREATE OR REPLACE TEMP TABLE %s AS SELECT * FROM read_json(%s, '  # noqa: S608
            "format = 'newline_delimited', columns = {%s})" % (
                name, _q(path), ', '.join('%s: %s' % (_q(k), _q(v))
                                          for k, v in columns.items())))
    else:
        con.execute('CREATE OR REPLACE TEMP TABLE %s (%s)' % (
            name, ', '.join('"%s" %s' % kv for kv in columns.items())))


REQUEST_COLUMNS = {
    'req': 'VARCHAR', 'kind': 'VARCHAR', 'state': 'VARCHAR',
    'start_us': 'BIGINT', 'end_us': 'BIGINT', 'latency_us': 'BIGINT',
    'sql_us': 'BIGINT', 'sql_statements': 'BIGINT', 'attempts': 'BIGINT',
    'db_retries': 'BIGINT', 'errors': 'BIGINT', 'events': 'BIGINT',
    'lost_ends': 'BIGINT', 'hosts': 'VARCHAR[]', 'day': 'VARCHAR'}
COMPONENT_COLUMNS = {
    'req': 'VARCHAR', 'component': 'VARCHAR', 'exclusive_us': 'BIGINT',
    'sql_us': 'BIGINT', 'critical_us': 'BIGINT', 'day': 'VARCHAR'}
CLASS_COLUMNS = {
    'fp': 'VARCHAR', 'svc': 'VARCHAR', 'db': 'VARCHAR', 'call': 'VARCHAR',
    'kind': 'VARCHAR', 'text': 'VARCHAR', 'count': 'BIGINT',
    'sum_us': 'BIGINT', 'sumsq_us': 'HUGEINT', 'min_us': 'BIGINT',
    'max_us': 'BIGINT', 'rows': 'BIGINT', 'rows_known': 'BIGINT',
    'errors': 'BIGINT', 'first_us': 'BIGINT', 'last_us': 'BIGINT',
    'aggregated': 'BIGINT', 'hist': 'STRUCT(bucket BIGINT, n BIGINT)[]',
    'day': 'VARCHAR'}
OFFSET_COLUMNS = {
    'host': 'VARCHAR', 'offset_us': 'BIGINT', 'low_us': 'BIGINT',
    'high_us': 'BIGINT', 'status': 'VARCHAR', 'pairs': 'BIGINT'}


def _day(us: typing.Optional[int]) -> typing.Optional[str]:
    import datetime
    if us is None:
        return None
    return datetime.datetime.fromtimestamp(
        us / 1e6, datetime.UTC).strftime('%Y-%m-%d')


def analyser_tables(con: 'duckdb.DuckDBPyConnection', report: dict,
                    digest: sqldigest.SqlDigest,
                    tmp: str) -> None:
    """The analyser's results as tables: ``requests`` and
    ``request_components`` (its request rows: state machines in
    Python), ``sql_classes`` (the digest's fine classes) and
    ``host_offsets`` (its clock pass)."""
    reqs = []
    comps = []
    for r in report['requests']:
        day = _day(r['start_us'])
        reqs.append(dict({k: r.get(k) for k in REQUEST_COLUMNS}, day=day))
        excl = r.get('components_us') or {}
        sql_in = r.get('sql_in_us') or {}
        crit = r.get('critical_path_us') or {}
        for name in sorted(set(excl) | set(sql_in) | set(crit)):
            comps.append({'req': r['req'], 'component': name,
                          'exclusive_us': excl.get(name),
                          'sql_us': sql_in.get(name),
                          'critical_us': crit.get(name), 'day': day})
    _rows_table(con, 'requests', REQUEST_COLUMNS, reqs, tmp)
    _rows_table(con, 'request_components', COMPONENT_COLUMNS, comps, tmp)
    classes = []
    for (fp, svc, db, call, kind), s in sorted(
            digest.classes.items(), key=lambda kv: str(kv[0])):
        classes.append({
            'fp': fp, 'svc': svc, 'db': db, 'call': call, 'kind': kind,
            'text': digest.texts.get(fp), 'count': s[sqldigest.C_COUNT],
            'sum_us': s[sqldigest.C_SUM], 'sumsq_us': s[sqldigest.C_SUMSQ],
            'min_us': s[sqldigest.C_MIN], 'max_us': s[sqldigest.C_MAX],
            'rows': s[sqldigest.C_ROWS], 'rows_known': s[sqldigest.C_ROWS_N],
            'errors': s[sqldigest.C_ERRORS],
            'first_us': s[sqldigest.C_FIRST], 'last_us': s[sqldigest.C_LAST],
            'aggregated': s[sqldigest.C_AGG],
            'hist': [{'bucket': b, 'n': n}
                     for b, n in sorted(s[sqldigest.C_HIST].items())],
            'day': _day(s[sqldigest.C_FIRST])})
    _rows_table(con, 'sql_classes', CLASS_COLUMNS, classes, tmp)
    offsets = [{'host': h, 'offset_us': i.get('offset_us'),
                'low_us': i.get('low_us'), 'high_us': i.get('high_us'),
                'status': i.get('status'), 'pairs': i.get('pairs')}
               for h, i in sorted(report['clocks']['hosts'].items())]
    _rows_table(con, 'host_offsets', OFFSET_COLUMNS, offsets, tmp)


def export_parquet(con: 'duckdb.DuckDBPyConnection', loaded: Loaded,
                   out_dir: str,
                   progress: typing.Optional[
                       typing.Callable[[int], None]] = None) -> dict:
    """Write the tables of ``EXPORTED`` under ``out_dir/<table>/`` as
    Parquet (Hive partitions ``day=YYYY-MM-DD/host=H``); returns the
    rows written per table.  ``events`` carries the file name and
    line of each record."""
    con.execute('CREATE OR REPLACE TEMP TABLE file_names (file INTEGER, '
                'fname VARCHAR)')
    con.executemany('INSERT INTO file_names VALUES (?, ?)',
                    list(enumerate(loaded.files)))
    day = _DAY % 'ts_corr'
    sources = {
        'events': 'SELECT n.fname AS file_name, e.* EXCLUDE (file, '  # noqa: S608
                  'p_host, p_start), e.p_start AS process_start, %s AS day '
                  'FROM events e JOIN file_names n USING (file)' % day,
        'spans': 'SELECT *, %s AS day FROM spans' % day,  # noqa: S608
        'sql_statements': 'SELECT *, %s AS day FROM sql_statements' % day,  # noqa: S608
    }
    written = {}
    os.makedirs(out_dir, exist_ok=True)
    for i, (name, parts) in enumerate(EXPORTED.items()):
        query = sources.get(name, 'SELECT * FROM %s' % name)  # noqa: S608
        target = os.path.join(out_dir, name)
        shutil.rmtree(target, ignore_errors=True)
        options = 'FORMAT parquet, COMPRESSION zstd'
        if parts:
            options += ', PARTITION_BY (%s), OVERWRITE_OR_IGNORE' % \
                ', '.join(parts)
        else:
            os.makedirs(target, exist_ok=True)
            target = os.path.join(target, 'data.parquet')
        written[name] = _one(
            con, 'SELECT count(*) FROM (%s)' % query)  # noqa: S608
        con.execute('COPY (%s) TO %s (%s)' % (query, _q(target), options))
        if progress is not None:
            progress(i + 1)
    return written


def digest_of(paths: list, offsets: dict, since: typing.Optional[int],
              until: typing.Optional[int],
              progress: typing.Optional[
                  typing.Callable[[int], None]] = None,
              memory_limit: typing.Optional[str] = MEMORY_LIMIT,
              threads: typing.Optional[int] = None
              ) -> sqldigest.SqlDigest:
    """The SQL digest of span files, computed by DuckDB (``--engine
    duckdb``): the records today's pass 2 accepts, times corrected by
    ``offsets``, ``--since``/``--until`` applied; only the SQL records
    and process starts are decoded (``SQL_ONLY``).  DuckDB holds at
    most ``memory_limit``, and spills the rest to a temp directory;
    ``threads``: DuckDB's (``--jobs``; default, as many as cores)."""
    tmp = tempfile.mkdtemp(prefix='instrument-columnar-')
    con = None
    try:
        con = connect(memory_limit, threads,
                      temp_directory=os.path.join(tmp, 'spill'))
        load_files(con, paths, progress, tmp, only=SQL_ONLY)
        set_offsets(con, offsets)
        return sql_digest(con, since, until, extracted=True)
    except _oom_error() as exc:
        raise _out_of_memory(exc, memory_limit) from exc
    finally:
        if con is not None:
            con.close()
        shutil.rmtree(tmp, ignore_errors=True)


def export(inputs: list, out_dir: str,
           opts: 'pipeline.Options') -> dict:
    """``instrument-report export --parquet DIR``: the analysis of
    ``inputs`` (``pipeline.analyse`` with ``opts``: requests, states,
    components, clock offsets) and the columnar tables of the same
    files, written as Parquet.  Returns ``{'report': report dict,
    'rows': rows per table, 'load': Loaded}``."""
    from instrument.analysis import pipeline
    progress = opts.progress
    report = pipeline.analyse(inputs, opts)
    paths = report['inputs']['paths']
    total = report['inputs']['bytes']
    tmp = tempfile.mkdtemp(prefix='instrument-export-')
    con = None
    try:
        con = connect(opts.memory_limit,
                      temp_directory=os.path.join(tmp, 'spill'))
        loaded = load_files(
            con, paths, None if progress is None else
            lambda done: progress('load', done, total), tmp)
        offsets = {h: i['offset_us']
                   for h, i in report['clocks']['hosts'].items()}
        set_offsets(con, offsets)
        window = report['window']
        digest = sql_digest(con, window['since_us'], window['until_us'])
        analyser_tables(con, report, digest, tmp)
        # (tables written, shown as a share of the input's bytes)
        rows = export_parquet(
            con, loaded, out_dir, None if progress is None else
            lambda done: progress('export', total * done // len(EXPORTED),
                                  total))
        if progress is not None:
            progress('done', total, total)
    except _oom_error() as exc:
        raise _out_of_memory(exc, opts.memory_limit) from exc
    finally:
        if con is not None:
            con.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return {'report': report, 'rows': rows, 'load': loaded}
