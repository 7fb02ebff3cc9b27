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
"""The in-memory form of an event and its encoding to one JSON line.

On the hot path an event is a plain tuple (no formatting, no dict), or
for spans a list that the span's end completes in place: the positions
are the ``I_*`` constants below, the only layout there is.  The
builders here (``instant``, ``complete``, ``meta``, ``counter``,
``begin_snapshot``) make every event tuple; span lists are made by
``instrument.runtime.recorder.Recorder.begin`` alone.  The writer
thread turns them into JSON lines (``encode_lines``), off the calling thread.

A batch is encoded in one call of msgspec's ``encode_lines`` from
``Line`` structs (no dict per record, no per-record validation: the
tuple layout guarantees the schema, and the struct leaves out the
fields that are None exactly as ``to_dict`` does); the bytes are those
of ``to_dict`` encoded by orjson.  A batch msgspec cannot encode (a
lone surrogate, an attr value of no JSON type), or a process without
msgspec, takes the record-by-record path: schema-v1 dicts
(``to_dict``) encoded with orjson when it is installed, else the
standard library.  There a record that cannot be encoded never costs
the rest of its batch.

Where the optional C extension ``instrument._native._lines`` is built
(and ``INSTRUMENT_PURE_PYTHON`` is not set), it writes the same bytes as
the ``Line`` structs in one call, with no object per record; its
pure-Python twin is ``_lines_fast``, which a batch it refuses takes.
"""

import codecs
import json
import typing

try:  # orjson encodes a record in a third of json's time
    import orjson
except ImportError:  # pragma: no cover - a platform without its wheel
    orjson = None  # type: ignore[assignment]
try:  # msgspec encodes a whole batch of structs in one call
    import msgspec
except ImportError:  # pragma: no cover - a platform without its wheel
    msgspec = None  # type: ignore[assignment]

from instrument import _native
from instrument import schema

# Positions in the event tuple.
I_PH = 0
I_TS = 1
I_DUR = 2
I_HOST = 3
I_SVC = 4
I_TID = 5
I_EV = 6
I_SPAN = 7
I_PARENT = 8
I_REQ = 9
I_GREQ = 10
I_INST = 11
I_ST = 12
I_ERR = 13
I_ATTRS = 14
SIZE = 15
# A span record (a list) has two more, in memory only: the monotonic
# start (perf_counter_ns) and the token that resets the current span.
I_T0 = 15
I_TOKEN = 16
SPAN_SIZE = 17

# JSON text of any value (``default=str`` for objects): the writer's
# last resort, and the OTLP sink's text of a structured attr.
dumps = json.JSONEncoder(
    separators=(',', ':'), ensure_ascii=False, default=str
).encode


def span_hex(span) -> str:
    """Span ids are ints in memory and 16 hex digits on disk."""
    if span.__class__ is int:
        return '%016x' % span
    return span


def to_dict(rec: tuple, seq: int, pid: int) -> dict:
    """The schema-v1 dict of one event tuple (``None`` fields left out)."""
    out = {
        'v': schema.SCHEMA_VERSION,
        'ph': rec[I_PH],
        'seq': seq,
        'ts': rec[I_TS],
    }
    if rec[I_DUR] is not None:
        out['dur_us'] = rec[I_DUR]
    out['host'] = rec[I_HOST]
    out['svc'] = rec[I_SVC]
    out['pid'] = pid
    if rec[I_TID] is not None:
        out['tid'] = rec[I_TID]
    out['ev'] = rec[I_EV]
    if rec[I_SPAN] is not None:
        out['span'] = span_hex(rec[I_SPAN])
    if rec[I_PARENT] is not None:
        out['parent'] = span_hex(rec[I_PARENT])
    if rec[I_REQ] is not None:
        out['req'] = rec[I_REQ]
    if rec[I_GREQ] is not None:
        out['greq'] = rec[I_GREQ]
    inst = rec[I_INST]
    if inst:
        out['inst'] = inst if inst.__class__ is list else list(inst)
    if rec[I_ST] is not None:
        out['st'] = rec[I_ST]
    err = rec[I_ERR]
    if err is not None:
        out['err'] = {'cls': err[0], 'msg': err[1]}
    if rec[I_ATTRS]:
        out['attrs'] = rec[I_ATTRS]
    return out


# Lone surrogates (a non-UTF-8 file name through ``os.fsdecode``, say)
# cannot be UTF-8 encoded, and orjson refuses them.  They are written
# out the way Python shows them: ``\xff`` for a byte that
# ``surrogateescape`` decoded, ``\udXXX`` for any other lone surrogate.
# In JSON output (a surrogate can only be inside a string) the backslash
# is itself escaped, so the line is valid UTF-8 and valid JSON for every
# parser (orjson and msgspec reject a lone ``\udXXX`` escape).
SURROGATE_ERRORS = 'instrument-escape-surrogates'
_JSON_SURROGATE_ERRORS = 'instrument-json-escape-surrogates'


def _written_out(exc: UnicodeEncodeError, backslash: str) -> tuple:
    out = []
    for char in exc.object[exc.start : exc.end]:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            out.append('%sx%02x' % (backslash, code - 0xDC00))
        else:
            out.append('%su%04x' % (backslash, code))
    return ''.join(out), exc.end


codecs.register_error(
    SURROGATE_ERRORS,
    lambda exc: _written_out(typing.cast(UnicodeEncodeError, exc), '\\'),
)
codecs.register_error(
    _JSON_SURROGATE_ERRORS,
    lambda exc: _written_out(typing.cast(UnicodeEncodeError, exc), '\\\\'),
)


def safe_text(text: str) -> str:
    """``text`` with lone surrogates written out (for encoders that
    reject them, e.g. protobuf's)."""
    if text.isascii():
        return text
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        return text.encode('utf-8', SURROGATE_ERRORS).decode('utf-8')
    return text


def _encode(d: dict) -> bytes:
    if orjson is not None:
        try:
            return orjson.dumps(d)
        except TypeError:
            pass
        try:  # odd attrs: non-str keys, objects (slower options)
            return orjson.dumps(d, default=str, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # an int beyond 64 bits, a lone surrogate
            pass
    return dumps(d).encode('utf-8', _JSON_SURROGATE_ERRORS)


if msgspec is not None:
    _UNSET = msgspec.UNSET

    class Line(msgspec.Struct, omit_defaults=True, gc=False):
        """One JSON line: the fields of ``to_dict`` in its order.  The
        optional ones default to None (left out when None, as
        ``to_dict`` does); the others default to UNSET, so that a None
        there is written as ``null``, as ``to_dict`` writes it.

        Not tracked by the garbage collector (``gc=False``): a batch
        makes up to ``MAX_BATCH`` of them, which would otherwise set
        off collections of the youngest generation while they are
        built.  A line is never part of a reference cycle: it is made
        here, encoded and dropped, and what it holds (a record's attrs
        and instances) never refers back to it."""

        v: object = _UNSET
        ph: object = _UNSET
        seq: object = _UNSET
        ts: object = _UNSET
        dur_us: object = None
        host: object = _UNSET
        svc: object = _UNSET
        pid: object = _UNSET
        tid: object = None
        ev: object = _UNSET
        span: object = None
        parent: object = None
        req: object = None
        greq: object = None
        inst: object = None
        st: object = None
        err: object = None
        attrs: object = None

    _encode_structs = msgspec.json.Encoder(enc_hook=str).encode_lines
else:  # pragma: no cover - a platform without msgspec's wheel
    Line = None  # type: ignore[misc,assignment]
    _encode_structs = None


def _lines_fast(
    batch, seq: int, pid: int, version=schema.SCHEMA_VERSION, int_=int
) -> bytes:
    """JSON lines for ``batch`` in one encoder call (see the module
    docstring); raises when any record cannot be encoded so."""
    line = Line
    structs = []
    append = structs.append
    for rec in batch:
        # One slice unpacked (a span's list has two more items, in
        # memory only): cheaper than fifteen subscripts.
        (
            ph,
            ts,
            dur,
            host,
            svc,
            tid,
            ev,
            span,
            parent,
            req,
            greq,
            inst,
            st,
            err,
            attrs,
        ) = rec[:15]
        if span.__class__ is int_:
            span = span.to_bytes(8, 'big').hex()
        if parent.__class__ is int_:
            parent = parent.to_bytes(8, 'big').hex()
        if err is not None:
            err = {'cls': err[0], 'msg': err[1]}
        if inst and inst.__class__ is not list and inst.__class__ is not tuple:
            inst = list(inst)
        append(
            line(
                version,
                ph,
                seq,
                ts,
                dur,
                host,
                svc,
                pid,
                tid,
                ev,
                span,
                parent,
                req,
                greq,
                inst or None,
                st,
                err,
                attrs or None,
            )
        )
        seq += 1
    return _encode_structs(structs)


# The same bytes as ``_lines_fast`` in one C call (instrument/_native/
# lines.c), when the extension is built and INSTRUMENT_PURE_PYTHON is
# not set; any record it cannot write the same way makes it raise, and
# the batch then takes the Python paths.
# It hands msgspec any value it does not write itself (a float, a big
# int, an object): ``_encode_value``, the encoder ``Line`` goes through.
_native_lines = _native.load('_lines') if msgspec is not None else None
_lines_c = None if _native_lines is None else _native_lines.lines
_encode_value: typing.Optional[typing.Callable[[object], bytes]] = None
if _lines_c is not None:
    _encode_value = msgspec.json.Encoder(enc_hook=str).encode


def encode_lines(batch, first_seq: int, pid: int) -> tuple:
    """``(data, lost)``: JSON lines (UTF-8, newline terminated) for
    ``batch``, numbered from ``first_seq``, and how many records could
    not be written at all.

    The whole batch is encoded at once when it can be (msgspec);
    otherwise each record is encoded on its own: a record that cannot
    be encoded as it is is written with the reason in its attrs
    instead, and one that cannot be encoded even so is left out (its
    ``seq`` is missing) and counted in ``lost``; never the rest of the
    batch.
    """
    if _encode_structs is not None and batch:
        if _lines_c is not None:
            try:
                return _lines_c(
                    batch,
                    first_seq,
                    pid,
                    schema.SCHEMA_VERSION,
                    _encode_value,
                    _UNSET,
                ), 0
            except Exception:  # noqa: S110 - the Python paths
                pass
        try:
            return _lines_fast(batch, first_seq, pid), 0
        except Exception:  # noqa: S110 - the record-by-record path
            pass
    return _encode_each(batch, first_seq, pid)


def _encode_each(batch, first_seq: int, pid: int) -> tuple:
    """``encode_lines`` one record at a time (dicts, orjson)."""
    lines = []
    lost = 0
    seq = first_seq
    for rec in batch:
        try:
            lines.append(_encode(to_dict(rec, seq, pid)))
        except Exception as exc:  # noqa: BLE001 - one record, not the batch
            line = _salvage(rec, seq, pid, exc)
            if line is None:
                lost += 1
            else:
                lines.append(line)
        seq += 1
    lines.append(b'')
    return b'\n'.join(lines), lost


def _salvage(rec, seq: int, pid: int, exc: Exception):
    """The line of a record that failed to encode, with the reason in
    its attrs; None when even that fails."""
    try:
        d = to_dict(rec, seq, pid)
        d['attrs'] = {'unencodable': repr(exc)[:200]}
        return _encode(d)
    except Exception:  # noqa: BLE001 - counted by the caller
        return None


def encode_batch(batch, first_seq: int, pid: int) -> bytes:
    """JSON lines for ``batch`` (see ``encode_lines``; records that
    could not be encoded at all are left out)."""
    return encode_lines(batch, first_seq, pid)[0]


def begin_snapshot(rec) -> tuple:
    """The ``B`` event of a span record that is still running."""
    return (
        schema.PH_BEGIN,
        rec[I_TS],
        None,
        rec[I_HOST],
        rec[I_SVC],
        rec[I_TID],
        rec[I_EV],
        rec[I_SPAN],
        rec[I_PARENT],
        rec[I_REQ],
        rec[I_GREQ],
        rec[I_INST],
        None,
        None,
        rec[I_ATTRS],
    )


def instant(
    ts: int, host: str, svc: str, tid, ev: str, parent, req, greq, inst, attrs
) -> tuple:
    """A point-in-time (``I``) event tuple inside span ``parent``."""
    return (
        schema.PH_INSTANT,
        ts,
        None,
        host,
        svc,
        tid,
        ev,
        None,
        parent,
        req,
        greq,
        inst,
        None,
        None,
        attrs,
    )


def complete(
    ts: int,
    dur: int,
    host: str,
    svc: str,
    ev: str,
    span,
    parent,
    req,
    greq,
    inst,
    st: str,
    err,
    attrs,
) -> tuple:
    """A complete span (``X``) event tuple, for a span measured outside
    ``Recorder.begin``/``end`` (no thread id)."""
    return (
        schema.PH_COMPLETE,
        ts,
        dur,
        host,
        svc,
        None,
        ev,
        span,
        parent,
        req,
        greq,
        inst,
        st,
        err,
        attrs,
    )


def meta(ev: str, host: str, svc: str, ts: int, attrs: dict) -> tuple:
    """A process-metadata (``M``) event tuple."""
    return (
        schema.PH_META,
        ts,
        None,
        host,
        svc,
        None,
        ev,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        attrs,
    )


def counter(
    ev: str, host: str, svc: str, ts: int, attrs: dict, req=None
) -> tuple:
    """A counter / aggregate (``C``) event tuple."""
    return (
        schema.PH_COUNTER,
        ts,
        None,
        host,
        svc,
        None,
        ev,
        None,
        None,
        req,
        None,
        None,
        None,
        None,
        attrs,
    )
