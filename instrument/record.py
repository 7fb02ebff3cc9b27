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
are the ``I_*`` constants below.  The writer thread turns them into
schema-v1 dicts (``to_dict``) and JSON lines (``encode_batch``, with
orjson when it is installed, else the standard library), off the
calling thread.
"""

import json

try:  # orjson encodes a record in a third of json's time
    import orjson
except ImportError:  # pragma: no cover - a platform without its wheel
    orjson = None

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

_dumps = json.JSONEncoder(separators=(',', ':'), ensure_ascii=False,
                          default=str).encode


def span_hex(span) -> str:
    """Span ids are ints in memory and 16 hex digits on disk."""
    if span.__class__ is int:
        return '%016x' % span
    return span


def to_dict(rec: tuple, seq: int, pid: int) -> dict:
    """The schema-v1 dict of one event tuple (``None`` fields left out)."""
    out = {'v': schema.SCHEMA_VERSION, 'ph': rec[I_PH], 'seq': seq,
           'ts': rec[I_TS]}
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


def _encode(d: dict) -> bytes:
    if orjson is not None:
        try:
            return orjson.dumps(d)
        except TypeError:
            pass
        try:  # odd attrs: non-str keys, objects (slower options)
            return orjson.dumps(d, default=str,
                                option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # e.g. an int beyond 64 bits: json copes
            pass
    return _dumps(d).encode('utf-8')


def encode_batch(batch, first_seq: int, pid: int) -> bytes:
    """JSON lines (UTF-8, newline terminated) for ``batch``, numbered
    from ``first_seq``.  A record that cannot be encoded is written with
    the reason in its attrs rather than lost."""
    lines = []
    seq = first_seq
    for rec in batch:
        d = to_dict(rec, seq, pid)
        try:
            lines.append(_encode(d))
        except (TypeError, ValueError) as exc:
            d['attrs'] = {'unencodable': repr(exc)[:200]}
            lines.append(_encode(d))
        seq += 1
    lines.append(b'')
    return b'\n'.join(lines)


def begin_snapshot(rec) -> tuple:
    """The ``B`` event of a span record that is still running."""
    return (schema.PH_BEGIN, rec[I_TS], None, rec[I_HOST], rec[I_SVC],
            rec[I_TID], rec[I_EV], rec[I_SPAN], rec[I_PARENT], rec[I_REQ],
            rec[I_GREQ], rec[I_INST], None, None, rec[I_ATTRS])


def meta(ev: str, host: str, svc: str, ts: int, attrs: dict) -> tuple:
    """A process-metadata (``M``) event tuple."""
    return (schema.PH_META, ts, None, host, svc, None, ev, None, None,
            None, None, None, None, None, attrs)


def counter(ev: str, host: str, svc: str, ts: int, attrs: dict,
            req=None) -> tuple:
    """A counter / aggregate (``C``) event tuple."""
    return (schema.PH_COUNTER, ts, None, host, svc, None, ev, None, None,
            req, None, None, None, None, attrs)
