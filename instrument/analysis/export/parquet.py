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
"""``instrument-report export --parquet DIR``: DuckDB as the writer.

Pass 2 (``pipeline``) is the one reader and validator of span files.
The export asks it to write down every record it accepted
(``accepted``: valid, read once, with the file and line it was read at
and its process's start), analyses as ``instrument-report`` does, then
lets DuckDB type those records and write them, with the analysis's
results, as Parquet partitioned by day and host (the tables of
``EXPORTED``; columns and queries in ``doc/source/export.rst``).
DuckDB validates nothing, identifies no process and finds no duplicate:
the export holds exactly the records every figure of the report was
computed from.  Why DuckDB here and nowhere else:
``doc/source/engines.rst``.

DuckDB is a library of the ``report`` extra; the runtime never imports
this module.
"""

import datetime
import json
import os
import shutil
import tempfile
import typing

from instrument import schema
from instrument.analysis import pipeline
from instrument.analysis.model import sqldigest

try:  # the report extra's writer
    import duckdb
except ImportError:  # pragma: no cover - the command says what to install
    duckdb = None  # type: ignore[assignment]

# The records' columns, typed; ``err`` and ``attrs`` stay JSON.
_SQL_TYPES = {int: 'BIGINT', str: 'VARCHAR', list: 'VARCHAR[]', dict: 'JSON'}
COLUMNS = tuple(
    (name, _SQL_TYPES[schema.TYPES[name]]) for name in schema.FIELDS
)
# Where pass 2 read each record (``accepted``).
WHERE = (
    ('file_name', 'VARCHAR'),
    ('line', 'BIGINT'),
    ('process_start', 'BIGINT'),
    ('offset_us', 'BIGINT'),
)

# Views over ``events``: the same text is documented in
# doc/source/export.rst.
VIEWS = {
    'spans': (
        "SELECT host, svc, pid, tid, ev, span, parent, req, greq, inst, "
        "ts, ts_corr, dur_us, st, err->>'cls' AS err_cls, "
        "err->>'msg' AS err_msg, attrs FROM events "
        "WHERE ph = 'X' AND ev NOT IN ('sql.query', 'sql.txn')"
    ),
    'sql_statements': (
        "SELECT host, svc, pid, req, parent, ts, ts_corr, dur_us, "
        "st = 'error' AS error, attrs->>'fp' AS fp, "
        "attrs->>'db' AS db, attrs->>'call' AS call, "
        "attrs->>'kind' AS kind, "
        "TRY_CAST(attrs->>'rows' AS BIGINT) AS rows FROM events "
        "WHERE ph = 'X' AND ev = 'sql.query'"
    ),
}

# Tables written: name: partition columns.
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
# DuckDB's memory (``--memory-limit``): beyond it, tables and operators
# spill to the temp directory
MEMORY_LIMIT = '1GB'


class EngineMissing(ImportError):
    """DuckDB is not installed (the ``report`` extra installs it)."""


class OutOfMemory(RuntimeError):
    """DuckDB needed more than its memory limit (``--memory-limit``)."""


class WriteFailed(RuntimeError):
    """A table could not be written (a full disk, a directory made
    read-only meanwhile); the message says why."""


def connect(
    memory_limit: typing.Optional[str] = None,
    threads: typing.Optional[int] = None,
    temp_directory: typing.Optional[str] = None,
) -> 'duckdb.DuckDBPyConnection':
    """An in-memory DuckDB connection; ``memory_limit`` (DuckDB's
    syntax: ``1GB``, ``512MiB``) bounds its memory, what does not fit
    is written under ``temp_directory``."""
    if duckdb is None:
        raise EngineMissing(
            'DuckDB is not installed: pip install '
            "'openstack-instrument[report]'"
        )
    con = duckdb.connect()
    if threads:
        con.execute('SET threads = %d' % int(threads))
    if memory_limit:
        con.execute('SET memory_limit = %s' % _q(memory_limit))
    if temp_directory:
        con.execute('SET temp_directory = %s' % _q(temp_directory))
    con.execute('SET preserve_insertion_order = true')
    # (the command draws its own progress line; DuckDB's would print on
    # standard output)
    con.execute('SET enable_progress_bar = false')
    return con


def _q(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + str(text).replace("'", "''") + "'"


def _one(con: 'duckdb.DuckDBPyConnection', query: str) -> typing.Any:
    """The one value of ``query``'s one row."""
    row = con.execute(query).fetchone()
    if row is None:
        raise ValueError('no row: %s' % query)
    return row[0]


def load_accepted(con: 'duckdb.DuckDBPyConnection', directory: str) -> int:
    """The table ``events`` (and its views) of the records pass 2 wrote
    to ``directory`` (``accepted``); returns how many it left out: a
    record with an integer beyond 64 bits (Python reads up to 2**64 - 1,
    a ``BIGINT`` holds up to 2**63 - 1)."""
    parts = sorted(
        os.path.join(directory, name)
        for name in os.listdir(directory)
        if name.endswith('.jsonl')
    )
    # read wide (HUGEINT), then kept where every integer fits
    columns = tuple(
        (n, 'HUGEINT' if t == 'BIGINT' else t) for n, t in WHERE + COLUMNS
    )
    if parts:
        con.execute(
            'CREATE OR REPLACE TEMP TABLE events_read AS SELECT * FROM '  # noqa: S608
            "read_json(%s, format = 'newline_delimited', columns = {%s})"
            % (
                '[%s]' % ', '.join(_q(p) for p in parts),
                ', '.join('%s: %s' % (_q(n), _q(t)) for n, t in columns),
            )
        )
    else:
        con.execute(
            'CREATE OR REPLACE TEMP TABLE events_read (%s)'
            % (', '.join('"%s" %s' % c for c in columns))
        )
    fits = (
        ' AND '.join(
            'coalesce(%s BETWEEN %d AND %d, true)'
            % (n, -(1 << 63), (1 << 63) - 1)
            for n, t in WHERE + COLUMNS
            if t == 'BIGINT'
        )
        or 'true'
    )
    untyped = _one(
        con,
        'SELECT count(*) FROM events_read WHERE NOT (%s)'  # noqa: S608
        % fits,
    )
    names = ', '.join('%s::%s AS %s' % (n, t, n) for n, t in COLUMNS)
    con.execute(
        'CREATE OR REPLACE TEMP TABLE events AS SELECT file_name, '  # noqa: S608
        'line::BIGINT AS line, %s, offset_us::BIGINT AS offset_us, '
        '(ts + offset_us)::BIGINT AS ts_corr, process_start::BIGINT AS '
        'process_start FROM events_read WHERE %s' % (names, fits)
    )
    con.execute('DROP TABLE events_read')
    for name, query in VIEWS.items():
        con.execute('CREATE OR REPLACE TEMP VIEW %s AS %s' % (name, query))
    return untyped


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
            "format = 'newline_delimited', columns = {%s})"
            % (
                name,
                _q(path),
                ', '.join(
                    '%s: %s' % (_q(k), _q(v)) for k, v in columns.items()
                ),
            )
        )
    else:
        con.execute(
            'CREATE OR REPLACE TEMP TABLE %s (%s)'
            % (name, ', '.join('"%s" %s' % kv for kv in columns.items()))
        )


REQUEST_COLUMNS = {
    'req': 'VARCHAR',
    'kind': 'VARCHAR',
    'state': 'VARCHAR',
    'start_us': 'BIGINT',
    'end_us': 'BIGINT',
    'latency_us': 'BIGINT',
    'sql_us': 'BIGINT',
    'sql_statements': 'BIGINT',
    'attempts': 'BIGINT',
    'db_retries': 'BIGINT',
    'errors': 'BIGINT',
    'events': 'BIGINT',
    'lost_ends': 'BIGINT',
    'hosts': 'VARCHAR[]',
    'day': 'VARCHAR',
}
COMPONENT_COLUMNS = {
    'req': 'VARCHAR',
    'component': 'VARCHAR',
    'exclusive_us': 'BIGINT',
    'sql_us': 'BIGINT',
    'critical_us': 'BIGINT',
    'day': 'VARCHAR',
}
CLASS_COLUMNS = {
    'fp': 'VARCHAR',
    'svc': 'VARCHAR',
    'db': 'VARCHAR',
    'call': 'VARCHAR',
    'kind': 'VARCHAR',
    'text': 'VARCHAR',
    'count': 'BIGINT',
    'sum_us': 'BIGINT',
    'sumsq_us': 'HUGEINT',
    'min_us': 'BIGINT',
    'max_us': 'BIGINT',
    'rows': 'BIGINT',
    'rows_known': 'BIGINT',
    'errors': 'BIGINT',
    'first_us': 'BIGINT',
    'last_us': 'BIGINT',
    'aggregated': 'BIGINT',
    'hist': 'STRUCT(bucket BIGINT, n BIGINT)[]',
    'day': 'VARCHAR',
}
OFFSET_COLUMNS = {
    'host': 'VARCHAR',
    'offset_us': 'BIGINT',
    'low_us': 'BIGINT',
    'high_us': 'BIGINT',
    'width_us': 'BIGINT',
    'error_us': 'BIGINT',
    'status': 'VARCHAR',
    'pairs': 'BIGINT',
}


def _day(us: typing.Optional[int]) -> typing.Optional[str]:
    if us is None:
        return None
    return datetime.datetime.fromtimestamp(us / 1e6, datetime.UTC).strftime(
        '%Y-%m-%d'
    )


def analyser_tables(
    con: 'duckdb.DuckDBPyConnection',
    report: dict,
    digest: sqldigest.SqlDigest,
    tmp: str,
) -> None:
    """The analyser's results as tables: ``requests`` and
    ``request_components`` (its request rows), ``sql_classes`` (the
    digest's fine classes, within ``--since``/``--until``) and
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
            comps.append(
                {
                    'req': r['req'],
                    'component': name,
                    'exclusive_us': excl.get(name),
                    'sql_us': sql_in.get(name),
                    'critical_us': crit.get(name),
                    'day': day,
                }
            )
    _rows_table(con, 'requests', REQUEST_COLUMNS, reqs, tmp)
    _rows_table(con, 'request_components', COMPONENT_COLUMNS, comps, tmp)
    classes = []
    for (fp, svc, db, call, kind), s in sorted(
        digest.classes.items(), key=lambda kv: str(kv[0])
    ):
        classes.append(
            {
                'fp': fp,
                'svc': svc,
                'db': db,
                'call': call,
                'kind': kind,
                'text': digest.texts.get(fp),
                'count': s[sqldigest.C_COUNT],
                'sum_us': s[sqldigest.C_SUM],
                'sumsq_us': s[sqldigest.C_SUMSQ],
                'min_us': s[sqldigest.C_MIN],
                'max_us': s[sqldigest.C_MAX],
                'rows': s[sqldigest.C_ROWS],
                'rows_known': s[sqldigest.C_ROWS_N],
                'errors': s[sqldigest.C_ERRORS],
                'first_us': s[sqldigest.C_FIRST],
                'last_us': s[sqldigest.C_LAST],
                'aggregated': s[sqldigest.C_AGG],
                'hist': [
                    {'bucket': b, 'n': n}
                    for b, n in sorted(s[sqldigest.C_HIST].items())
                ],
                'day': _day(s[sqldigest.C_FIRST]),
            }
        )
    _rows_table(con, 'sql_classes', CLASS_COLUMNS, classes, tmp)
    offsets = [
        dict({k: i.get(k) for k in OFFSET_COLUMNS}, host=h)
        for h, i in sorted(report['clocks']['hosts'].items())
    ]
    _rows_table(con, 'host_offsets', OFFSET_COLUMNS, offsets, tmp)


def export_parquet(
    con: 'duckdb.DuckDBPyConnection',
    out_dir: str,
    progress: typing.Optional[typing.Callable[[int], None]] = None,
) -> dict:
    """Write the tables of ``EXPORTED`` under ``out_dir/<table>/`` as
    Parquet (Hive partitions ``day=YYYY-MM-DD/host=H``); returns the
    rows written per table."""
    day = _DAY % 'ts_corr'
    sources = {
        'events': 'SELECT *, %s AS day FROM events' % day,  # noqa: S608
        'spans': 'SELECT *, %s AS day FROM spans' % day,  # noqa: S608
        'sql_statements': 'SELECT *, %s AS day FROM sql_statements' % day,  # noqa: S608
    }
    written = {}
    for i, (name, parts) in enumerate(EXPORTED.items()):
        query = sources.get(name, 'SELECT * FROM %s' % name)  # noqa: S608
        target = os.path.join(out_dir, name)
        options = 'FORMAT parquet, COMPRESSION zstd'
        written[name] = _one(con, 'SELECT count(*) FROM (%s)' % query)  # noqa: S608
        try:
            # (out_dir's parent was checked to exist: instrument-report's
            # check_outputs)
            os.makedirs(out_dir, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            if parts:
                options += (
                    ', PARTITION_BY (%s), OVERWRITE_OR_IGNORE'
                    % ', '.join(parts)
                )
            else:
                os.makedirs(target, exist_ok=True)
                target = os.path.join(target, 'data.parquet')
            con.execute('COPY (%s) TO %s (%s)' % (query, _q(target), options))
        except (OSError, duckdb.IOException) as exc:
            raise WriteFailed(
                '%s: %s'
                % (
                    name,
                    (
                        exc.strerror
                        if isinstance(exc, OSError) and exc.strerror
                        else str(exc).splitlines()[0]
                    ),
                )
            ) from exc
        if progress is not None:
            progress(i + 1)
    return written


def export(
    inputs: list,
    out_dir: str,
    opts: pipeline.Options,
    memory_limit: typing.Optional[str] = MEMORY_LIMIT,
) -> dict:
    """The analysis of ``inputs`` (``pipeline.run`` with ``opts``)
    and the records it read, written as Parquet under ``out_dir``.
    Returns ``{'report': report dict, 'rows': rows per table,
    'untyped': records DuckDB could not type (left out)}``."""
    if duckdb is None:
        raise EngineMissing(
            'DuckDB is not installed: pip install '
            "'openstack-instrument[report]'"
        )
    progress = opts.progress
    tmp = tempfile.mkdtemp(prefix='instrument-export-')
    con = None
    try:
        records = os.path.join(tmp, 'records')
        os.mkdir(records)
        opts.accepted_dir = records
        analysis = pipeline.run(inputs, opts)
        report = analysis.report
        total = report['inputs']['bytes']
        con = connect(memory_limit, temp_directory=os.path.join(tmp, 'spill'))
        untyped = load_accepted(con, records)
        shutil.rmtree(records)
        analyser_tables(con, report, analysis.sections['sql'].digest, tmp)
        # (tables written, shown as a share of the input's bytes)
        rows = export_parquet(
            con,
            out_dir,
            None
            if progress is None
            else lambda done: progress(
                'export', total * done // len(EXPORTED), total
            ),
        )
        if progress is not None:
            progress('done', total, total)
    except duckdb.OutOfMemoryException as exc:
        raise OutOfMemory(
            'DuckDB needs more memory than --memory-limit %s allows '
            '(raise it): %s' % (memory_limit, str(exc).splitlines()[0])
        ) from exc
    finally:
        opts.accepted_dir = None
        if con is not None:
            con.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return {'report': report, 'rows': rows, 'untyped': untyped}
