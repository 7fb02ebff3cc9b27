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
are the ``I_*`` constants below.  The writer thread turns
tuples into schema-v1 dicts (``to_dict``) and JSON lines
(``encode_batch``), off the calling thread.
"""

import json

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


_quote = json.encoder.encode_basestring
# Encoded forms of the few distinct hosts, services and event names.
_QUOTED = {}
_QUOTED_MAX = 4096


def _quoted(text: str) -> str:
    out = _QUOTED.get(text)
    if out is None:
        if len(_QUOTED) >= _QUOTED_MAX:
            _QUOTED.clear()
        out = _QUOTED[text] = _quote(text)
    return out


def _span_json(span) -> str:
    if span.__class__ is int:
        return '"%016x"' % span
    return _quote(span)


def _value_json(value) -> str:
    cls = value.__class__
    if cls is str:
        return _quote(value)
    if cls is int:
        return str(value)
    if value is None:
        return 'null'
    if cls is bool:
        return 'true' if value else 'false'
    if cls is list or cls is tuple:
        return '[' + ','.join([_value_json(v) for v in value]) + ']'
    return _dumps(value)


def _attrs_json(attrs: dict) -> str:
    """Small dicts of plain values, without json's per-call set-up cost
    (a third of json.dumps for the attrs of a span); others via json."""
    parts = []
    for key, value in attrs.items():
        if key.__class__ is not str:
            return _dumps(attrs)
        parts.append(_quote(key) + ':' + _value_json(value))
    return '{' + ','.join(parts) + '}'


def encode_line(rec, seq: int, pid: int) -> str:
    """One JSON line for an event, same content as ``to_dict`` gives.

    Built by hand from already-quoted parts: the writer thread spends its
    time here, and json.dumps of a dict costs three times as much.
    """
    (ph, ts, dur, host, svc, tid, ev, span, parent, req, greq, inst, st,
     err, attrs) = rec[:SIZE]
    return ''.join((
        '{"v":1,"ph":"', ph, '","seq":', str(seq), ',"ts":', str(ts),
        '' if dur is None else ',"dur_us":' + str(dur),
        ',"host":', _quoted(host), ',"svc":', _quoted(svc),
        ',"pid":', str(pid),
        '' if tid is None else ',"tid":' + str(tid),
        ',"ev":', _quoted(ev),
        '' if span is None else ',"span":' + _span_json(span),
        '' if parent is None else ',"parent":' + _span_json(parent),
        '' if req is None else ',"req":' + _quote(req),
        '' if greq is None else ',"greq":' + _quote(greq),
        ',"inst":[' + ','.join([_quote(u) for u in inst]) + ']' if inst
        else '',
        '' if st is None else ',"st":"' + st + '"',
        '' if err is None else ',"err":{"cls":' + _quote(err[0]) +
        ',"msg":' + _quote(err[1]) + '}',
        ',"attrs":' + _attrs_json(attrs) if attrs else '',
        '}'))


def encode_batch(batch, first_seq: int, pid: int) -> str:
    """JSON lines (newline terminated) for ``batch``, numbered from
    ``first_seq``.  A record that cannot be encoded is written with the
    reason in its attrs rather than lost."""
    lines = []
    seq = first_seq
    for rec in batch:
        try:
            lines.append(encode_line(rec, seq, pid))
        except (TypeError, ValueError) as exc:
            d = to_dict(rec, seq, pid)
            d['attrs'] = {'unencodable': repr(exc)[:200]}
            lines.append(_dumps(d))
        seq += 1
    lines.append('')
    return '\n'.join(lines)


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
