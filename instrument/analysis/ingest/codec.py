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
"""Lines to valid records, and why a line is not one.

``RecordDecoder`` turns a line into a record object whose attributes
are the schema's fields (``None`` when absent).  With msgspec installed
it decodes and type-checks in one step; whatever msgspec refuses is
decoded again by the reference path (``loads`` and
``schema.validate``), which alone decides what is bad and why, so both
paths accept and reject the same lines.  The kinds of bad lines are
``loss.KINDS``.
"""

import json
import re
import typing

from instrument import schema

loads: typing.Callable[[bytes], typing.Any]
try:  # an optional accelerator (the ``report`` extra installs it)
    import orjson

    loads = orjson.loads
except ImportError:  # pragma: no cover - exercised without orjson
    import json

    loads = json.loads
try:  # decodes and type-checks a record in one go (``report`` extra)
    import msgspec
except ImportError:  # pragma: no cover - exercised without msgspec
    msgspec = None  # type: ignore[assignment]


def decode_error(raw: bytes, at_eof: bool) -> tuple:
    """``(kind, reason)`` of a line that did not decode to a record."""
    try:
        rec = loads(raw)
    except ValueError as exc:
        if at_eof and not raw.endswith(b'\n'):
            return 'truncated', 'last line cut short (%s)' % exc
        return 'malformed', 'not JSON: %s' % exc
    return check_error(rec)


# what a record's line names, read even when the line is cut short
_NAMES = {
    name: re.compile(rb'"%s":\s*(\d+)' % name.encode())
    for name in ('pid', 'seq', 'ts', 'dur_us')
}
_HOST = re.compile(rb'"host":\s*"([^"\\]{1,255})"')
# what only a record's line holds (the writer writes ``v`` first)
_RECORD_KEYS = (b'{"v":', b'"seq":', b'"ph":"')


def record_like(raw: bytes) -> bool:
    """Is ``raw`` (a bad line) a span record, or what is left of one (a
    line cut short, a record with a field missing), rather than a line
    that is no record of any process (garbage, another program's
    output)?"""
    return raw[:1] == b'{' and any(key in raw for key in _RECORD_KEYS)


def names(raw: bytes) -> tuple:
    """``(host, pid, seq, ts, dur_us)`` as far as line ``raw`` names
    them, each None when it does not (it need not be valid, nor whole:
    a line cut short names what is before the cut)."""
    out = []
    match = _HOST.search(raw)
    try:
        out.append(match.group(1).decode() if match else None)
    except UnicodeDecodeError:
        out.append(None)
    for name in ('pid', 'seq', 'ts', 'dur_us'):
        match = _NAMES[name].search(raw)
        out.append(int(match.group(1)) if match else None)
    return tuple(out)


def check_error(rec: typing.Any) -> tuple:
    """``(kind, reason)`` for a decoded value that is not a valid record,
    ``(None, None)`` when it is valid."""
    if not isinstance(rec, dict):
        return 'malformed', 'not a JSON object'
    if rec.get('v') != schema.SCHEMA_VERSION:
        return (
            'unknown_version',
            'schema version %r (this analyser '
            'reads %d)' % (rec.get('v'), schema.SCHEMA_VERSION),
        )
    try:
        schema.validate(rec)
    except schema.SchemaError as exc:
        return 'invalid', str(exc)
    return None, None


class Validator:
    """``schema.validate`` with a cache of record shapes known good.

    The type checks of the schema depend only on the phase, the field
    names and the value types, so a shape validated once is accepted by
    a signature lookup; the value checks (version, span id, duration,
    status, error class) are made on every record.
    """

    def __init__(self) -> None:
        self._good = set()

    def ok(self, rec: typing.Any) -> bool:
        if rec.__class__ is not dict:
            return False
        try:
            sig = (rec['ph'], tuple(rec), tuple(map(type, rec.values())))
        except (KeyError, TypeError):
            return False
        if sig not in self._good:
            if check_error(rec)[0] is not None:
                return False
            if len(self._good) < 4096:
                self._good.add(sig)
            return True
        if rec['v'] != 1:
            return False
        ph = rec['ph']
        if ph == 'X':
            if (
                not rec['span']
                or rec['dur_us'] < 0
                or rec['st'] not in ('ok', 'error')
            ):
                return False
        elif ph == 'B' and not rec['span']:
            return False
        err = rec.get('err')
        if err is not None and err.get('cls').__class__ is not str:
            return False
        return True


# The fields ``repair`` can take from the records around a record (its
# process's, on the same thread), and those it infers from the record
# itself.
FROM_NEIGHBOURS = ('host', 'svc', 'pid', 'ts')


def repair(
    rec: typing.Any,
    neighbours: typing.Sequence[dict],
    started: typing.Optional[str] = None,
) -> typing.Optional[tuple]:
    """``(record, field, how)``: a decoded line ``rec`` that is a valid
    record but for one required field missing (or null), with that field
    filled in, or None when it cannot be (several fields, another
    fault, a field only the record can say).

    ``v`` is the schema's (a line of this writer's shape); ``ph`` is
    ``X`` for a span with a duration, ``B`` for a span without one;
    ``seq`` stays None (the reader counts the number as read by no
    line); ``host``, ``svc``, ``pid``: those of ``neighbours`` (the
    records around it in its file, nearest first) of its thread and
    process (the same ``pid`` and ``tid``, or ``host`` and ``tid``),
    when they agree; ``ts``: when the nearest of them was written (an
    estimate, said by ``how``); ``ev``: the event of the start of its
    span (``started``: the reader asks the request model), when it was
    read.  ``span``, ``dur_us`` and ``st`` are the record's own: never
    filled."""
    if rec.__class__ is not dict:
        return None
    missing = [f for f in schema.REQUIRED if rec.get(f) is None]
    if len(missing) != 1:
        return None
    field = missing[0]
    fixed = dict(rec)
    how = ''
    if field == 'v':
        fixed['v'] = schema.SCHEMA_VERSION
    elif field == 'ph':
        if not fixed.get('span'):
            return None
        fixed['ph'] = (
            schema.PH_COMPLETE
            if 'dur_us' in fixed
            else schema.PH_BEGIN
            if 'st' not in fixed
            else None
        )
        if fixed['ph'] is None:
            return None
    elif field == 'seq':
        fixed['seq'] = 0  # (to validate; None again below)
    elif field == 'ev':
        if started is None:
            return None
        fixed['ev'] = started
        how = ' from the start of its span'
    elif field in FROM_NEIGHBOURS:
        value = _from_neighbours(field, fixed, neighbours)
        if value is None:
            return None
        fixed[field] = value
        how = ' from the records around it'
        if field == 'ts':
            how = ' estimated from when the record before it was written'
            if fixed.get('dur_us').__class__ is int:
                fixed['ts'] = value - fixed['dur_us']
    else:
        return None
    if check_error(fixed)[0] is not None:
        return None
    out: typing.Any = Repaired(fixed)
    if field == 'seq':
        out.seq = None
    return out, field, how


def _from_neighbours(
    field: str, rec: dict, neighbours: typing.Sequence[dict]
) -> typing.Any:
    """``field`` of the records of ``rec``'s thread in ``neighbours``,
    else of its process (for ``pid``: of its host and service), when
    they agree (for ``ts``: when the nearest was written); else None.
    Metadata records are not its process's work: left out."""
    # (records of its work: not the metadata a process writes for all)
    neighbours = [
        n
        for n in neighbours
        if n.get(field) is not None and n.get('ph') != schema.PH_META
    ]
    if field == 'pid':
        same = [
            n
            for n in neighbours
            if n.get('host') == rec.get('host')
            and n.get('svc') == rec.get('svc')
        ]
    else:
        same = [
            n
            for n in neighbours
            if n.get('pid') == rec.get('pid')
            and (field in ('host', 'ts') or n.get('host') == rec.get('host'))
        ]
    mine = [n for n in same if n.get('tid') == rec.get('tid')]
    for group in (mine, same):
        if not group:
            continue
        if field == 'ts':
            ts, dur = group[0].get('ts'), group[0].get('dur_us')
            if ts.__class__ is not int:
                return None
            return ts + (dur if dur.__class__ is int else 0)
        values = {n.get(field) for n in group}
        if len(values) == 1:
            return values.pop()
        return None
    return None


class SlowRecord:
    """A record decoded by the reference path: the fields of
    ``schema.FIELDS`` as attributes."""

    __slots__ = schema.FIELDS

    def __init__(self, rec: dict) -> None:
        for name in schema.FIELDS:
            setattr(self, name, rec.get(name))


class Repaired(SlowRecord):
    """A record ``repair`` made of a line that was not a valid one:
    ``repaired`` says which field it filled in, and how."""

    __slots__ = ('repaired',)

    def __init__(self, rec: dict) -> None:
        super().__init__(rec)
        self.repaired = ''


_FOLDED = schema.FOLDED


def unfolded(rec: typing.Any) -> list:
    """The ``sql.query`` records an ``sql.txn`` record ``rec`` carries
    (``schema.folded``: its COMMIT/ROLLBACK, the pool's reset), as
    records of the type of ``rec``; none when it carries none (every
    record of the older shape), or when what it carries is not of that
    shape (then the transaction alone is read)."""
    attrs = rec.attrs
    if not attrs or not (_FOLDED[0] in attrs or _FOLDED[1] in attrs):
        return []
    try:
        parts = schema.folded(rec.ts, attrs, rec.span)
        if rec.__class__ is Record:
            replace = msgspec.structs.replace
            return [
                replace(
                    rec,
                    ts=ts,
                    dur_us=dur,
                    ev=schema.EV_SQL_QUERY,
                    span=None,
                    st=schema.ST_OK,
                    err=None,
                    attrs=qattrs,
                )
                for ts, dur, qattrs in parts
                if ts.__class__ is int and dur.__class__ is int
            ]
        out = []
        for ts, dur, qattrs in parts:
            if ts.__class__ is not int or dur.__class__ is not int:
                continue
            fields = {name: getattr(rec, name) for name in schema.FIELDS}
            fields.update(
                ts=ts,
                dur_us=dur,
                ev=schema.EV_SQL_QUERY,
                span=None,
                st=schema.ST_OK,
                err=None,
                attrs=qattrs,
            )
            query = SlowRecord(fields)
            out.append(query)
        return out
    except (TypeError, IndexError, KeyError, AttributeError):
        return []


def dumps(rec: typing.Any) -> bytes:
    """A record as its line would have been (its fields, not None)."""
    return json.dumps(
        {
            name: getattr(rec, name)
            for name in schema.FIELDS
            if getattr(rec, name) is not None
        },
        separators=(',', ':'),
    ).encode()


def _record_type():
    """The msgspec struct of a record: the types of ``schema.TYPES``,
    the fields of ``schema.REQUIRED`` required and not null; integers
    limited to 64 bits (larger ones take the reference path); ``v`` and
    ``ph`` limited to the known values."""
    int64 = typing.Annotated[
        int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)
    ]
    special = {
        'v': typing.Literal[schema.SCHEMA_VERSION],
        'ph': typing.Literal[tuple(sorted(schema.PHASES))],
    }
    fields: list = []
    for name in schema.FIELDS:
        kind: typing.Any = schema.TYPES[name]
        kind = special.get(name, int64 if kind is int else kind)
        if name in schema.REQUIRED:
            fields.append((name, kind))
        else:
            fields.append((name, typing.Optional[kind], None))
    return msgspec.defstruct(
        'Record', fields, kw_only=True, forbid_unknown_fields=True, gc=False
    )


Record = _record_type() if msgspec is not None else None


class RecordDecoder:
    """Lines to valid records; why a line is not one.

    ``decode(raw)`` returns the record, or ``None`` and sets ``error``
    to ``(kind, reason)`` (a kind of ``loss.KINDS``).  ``fast`` False forces
    the reference path (tests compare the two).
    """

    def __init__(self, fast: bool = True) -> None:
        self.validator = Validator()
        self.error: typing.Optional[tuple[str, str]] = None
        if fast and msgspec is not None:
            self.decode = self._fast_decoder()
        else:
            self.decode = self.slow

    def _fast_decoder(self):
        fast = msgspec.json.Decoder(Record).decode
        slow = self.slow

        def decode(raw: bytes):
            try:
                rec = fast(raw)
            except Exception:  # noqa: BLE001 - the reference path says why
                return slow(raw)
            # the value checks of schema.validate that types do not make
            ph = rec.ph
            if ph == 'X':
                st = rec.st
                if (
                    not rec.span
                    or rec.dur_us is None
                    or rec.dur_us < 0
                    or st != 'ok'
                    and st != 'error'
                ):
                    return slow(raw)
            elif ph == 'B' and not rec.span:
                return slow(raw)
            err = rec.err
            if err is not None and err.get('cls').__class__ is not str:
                return slow(raw)
            return rec

        return decode

    def slow(self, raw: bytes) -> typing.Optional['SlowRecord']:
        """The reference path: ``loads`` and the schema's validator."""
        try:
            rec = loads(raw)
        except ValueError as exc:
            if not raw.endswith(b'\n'):
                self.error = ('truncated', 'last line cut short (%s)' % exc)
            else:
                self.error = ('malformed', 'not JSON: %s' % exc)
            return None
        if self.validator.ok(rec):
            return SlowRecord(rec)
        kind, reason = check_error(rec)
        self.error = (kind or 'invalid', reason or 'invalid record')
        return None
