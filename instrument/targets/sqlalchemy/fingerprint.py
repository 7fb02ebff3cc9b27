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
"""Query fingerprints: one class per statement shape, pt-query-digest style.

``fingerprint(sql)`` follows the semantics of pt-query-digest's
fingerprint, adapted to the already-parameterised SQL that SQLAlchemy
sends: comments are stripped; bind markers of every DBAPI paramstyle
(``?``, ``%s``, ``%(name)s``, ``:name``, ``$1``) and literals (strings,
numbers, ``NULL``) all become ``?``; identifier quotes are dropped (so
the same statement on MySQL and sqlite has the same class); on MySQL
(``double_quoted_strings``: ``"x"`` is a string there unless the server
runs with ``ANSI_QUOTES``) double-quoted strings are literals and become
``?`` as in pt-fingerprint, elsewhere they are identifiers; whitespace
and case are normalised; ``IN`` lists and (multi-row) ``VALUES`` lists
collapse to ``(?+)``; ``LIMIT``/``OFFSET`` become ``limit ?``; repeated
``UNION`` arms collapse; ``ASC`` after ``ORDER BY`` goes.

The query id is the MD5 of the fingerprint, 32 hex digits.

``Memo`` remembers the class of each statement text it has seen (bounded)
so that the hot path normalises a statement once per process.
"""

import collections
import hashlib
import re

KIND_SELECT = 'SELECT'
KIND_INSERT = 'INSERT'
KIND_UPDATE = 'UPDATE'
KIND_DELETE = 'DELETE'
KIND_BEGIN = 'BEGIN'
KIND_COMMIT = 'COMMIT'
KIND_ROLLBACK = 'ROLLBACK'
KIND_OTHER = 'OTHER'
# Not verbs: why the statement was sent.  The pool's reset-on-return
# ROLLBACK (COMMIT), and what a new connection sends before it is used
# (SET NAMES, SET AUTOCOMMIT, sql_mode, the dialect's start-up queries).
KIND_POOL_RESET = 'POOL_RESET'
KIND_CONNECT = 'CONNECT'

_KIND_OF_VERB = {
    'select': KIND_SELECT,
    'insert': KIND_INSERT,
    'replace': KIND_INSERT,
    'update': KIND_UPDATE,
    'delete': KIND_DELETE,
    'begin': KIND_BEGIN,
    'start': KIND_BEGIN,
    'commit': KIND_COMMIT,
    'rollback': KIND_ROLLBACK,
}

_FLAGS = re.IGNORECASE | re.DOTALL

# Comments: /* ... */ (hints included), -- to end of line, # to end of line.
_BLOCK_COMMENT = re.compile(r'/\*.*?\*/', re.DOTALL)
_LINE_COMMENT = re.compile(r'(?:--|#)[^\'"\r\n]*(?=[\r\n]|$)')
# Literals and bind markers.
_STRING = re.compile(r"[nb]?'(?:[^'\\]|\\.|'')*'", _FLAGS)
_DQ_STRING = re.compile(r'"(?:[^"\\]|\\.|"")*"', re.DOTALL)
_PYFORMAT = re.compile(r'%\(\w+\)s')
_FORMAT = re.compile(r'%s')
_NAMED = re.compile(r'(?<![:\w]):[a-z_]\w*', re.IGNORECASE)
_NUMERIC = re.compile(r'\$\d+')
_POSTCOMPILE = re.compile(r'\(?__\[postcompile_\w+\]\)?', re.IGNORECASE)
_HEX = re.compile(r'\b0x[0-9a-f]+\b', re.IGNORECASE)
_NUMBER = re.compile(
    r'(?<![\w.])\d+(?:\.\d*)?(?:e[+-]?\d+)?\b'
    r'|(?<![\w.])\.\d+(?:e[+-]?\d+)?\b',
    re.IGNORECASE,
)
_SIGNED = re.compile(r'(?<=[\s(,=<>])[+-]\?')
_IDENT_QUOTES = re.compile(r'[`"]')
_NULL = re.compile(r'\bnull\b')
_SPACE = re.compile(r'\s+')
_COMMA = re.compile(r'\s*,\s*')
_OPEN = re.compile(r'\(\s+')
_CLOSE = re.compile(r'\s+\)')
# One parenthesised group, allowing one level of nested parentheses.
_GROUP = r'\((?:[^()]|\([^()]*\))*\)'
_REPEATED_ROWS = re.compile(r'\bvalues ?(' + _GROUP + r')(?:, ?\1)+')
_PLACEHOLDER_LIST = re.compile(
    r'\b(in|values?) ?\((?:[\s?,]*|(?: ?\([\s?,]*\) ?,?)+)\)'
    r'(?:, ?\([\s?,]*\))*'
)
_UNION = re.compile(r'\b(select .*?)(?:( union(?: all)?) \1)+')
_LIMIT = re.compile(r'\blimit \?(?:, ?\?| offset \?)?')
_OFFSET_ONLY = re.compile(r'\boffset \?')
_ORDER_BY = re.compile(r'\border by ')
_ASC = re.compile(r'\s+asc\b')
_SAVEPOINT = re.compile(
    r'\b(savepoint|release savepoint|rollback to savepoint) \S+'
)
_FIRST_WORD = re.compile(r'[\s(]*([a-z]+)')
_MAIN_VERB = re.compile(r'\b(insert|update|delete|select)\b')


def strip_comments(sql: str) -> str:
    """``sql`` without ``/* */``, ``--`` and ``#`` comments."""
    sql = _BLOCK_COMMENT.sub(' ', sql)
    if '--' in sql or '#' in sql:
        sql = _LINE_COMMENT.sub(' ', sql)
    return sql


def fingerprint(sql: str, double_quoted_strings: bool = False) -> str:
    """The normalised text of ``sql``'s query class (see module doc);
    ``double_quoted_strings`` for MySQL's default quoting."""
    text = strip_comments(sql)
    text = _STRING.sub('?', text)
    if double_quoted_strings and '"' in text:
        text = _DQ_STRING.sub('?', text)
    text = _POSTCOMPILE.sub('(?)', text)
    text = _PYFORMAT.sub('?', text)
    text = _FORMAT.sub('?', text)
    text = _NAMED.sub('?', text)
    text = _NUMERIC.sub('?', text)
    text = _HEX.sub('?', text)
    text = _NUMBER.sub('?', text)
    text = _SIGNED.sub('?', text)
    text = _IDENT_QUOTES.sub('', text)
    text = _SPACE.sub(' ', text).strip().rstrip(';').rstrip().lower()
    text = _NULL.sub('?', text)
    text = _COMMA.sub(', ', text)
    text = _OPEN.sub('(', text)
    text = _CLOSE.sub(')', text)
    text = _REPEATED_ROWS.sub(r'values \1', text)
    text = _PLACEHOLDER_LIST.sub(r'\1(?+)', text)
    text = _SAVEPOINT.sub(r'\1 ?', text)
    text = _UNION.sub(r'\1 /*repeat\2*/', text)
    text = _LIMIT.sub('limit ?', text)
    if ' offset ?' in text and ' limit ' not in text:
        text = _OFFSET_ONLY.sub('limit ?', text)
    order = _ORDER_BY.search(text)
    if order is not None:
        start = order.end()
        text = text[:start] + _ASC.sub('', text[start:])
    return text


def statement_kind(sql: str) -> str:
    """``SELECT``, ``INSERT``, ``UPDATE``, ``DELETE``, ``BEGIN``,
    ``COMMIT``, ``ROLLBACK`` or ``OTHER`` (first verb of ``sql``)."""
    match = _FIRST_WORD.match(strip_comments(sql).lower())
    if match is None:
        return KIND_OTHER
    verb = match.group(1)
    if verb == 'with':
        # A CTE: the statement is what follows the WITH clauses; the
        # data-changing verbs win over the SELECTs inside the CTEs.
        verbs = set(_MAIN_VERB.findall(sql.lower()))
        for candidate in ('insert', 'update', 'delete', 'select'):
            if candidate in verbs:
                return _KIND_OF_VERB[candidate]
        return KIND_OTHER
    return _KIND_OF_VERB.get(verb, KIND_OTHER)


def query_id(fp: str) -> str:
    """MD5 of a fingerprint, 32 hex digits."""
    return hashlib.md5(fp.encode('utf-8'), usedforsecurity=False).hexdigest()


QueryClass = collections.namedtuple('QueryClass', 'qid kind text')


def classify(sql: str, double_quoted_strings: bool = False) -> QueryClass:
    """Query id, kind and fingerprint of one statement text."""
    fp = fingerprint(sql, double_quoted_strings)
    return QueryClass(query_id(fp), statement_kind(sql), fp)


def memo_key(sql: str, double_quoted_strings: bool = False):
    """The ``Memo`` key of ``sql``: the text itself, unless MySQL's
    quoting gives it another class than elsewhere."""
    if double_quoted_strings and '"' in sql:
        return (sql, True)
    return sql


class Memo:
    """Statement text -> ``QueryClass``, bounded, oldest evicted first.

    ``get`` is a plain ``dict.get`` for the hot path; ``learn`` is called
    on a miss and also tells whether the query id is new to the process.
    Both are safe under threads and greenthreads (no yield inside).
    """

    def __init__(
        self, max_statements: int = 8192, max_ids: int = 65536
    ) -> None:
        self.max_statements = max_statements
        self.max_ids = max_ids
        self._known = {}
        self._ids = set()
        self.get = self._known.get

    def clear(self) -> None:
        """Forget everything (after fork: the child announces its own)."""
        self._known.clear()
        self._ids.clear()

    def __len__(self) -> int:
        return len(self._known)

    def learn(self, sql: str, double_quoted_strings: bool = False) -> tuple:
        """``(QueryClass, new_id)`` for ``sql``; remembers it under
        ``memo_key(sql, double_quoted_strings)``."""
        known = self._known
        key = memo_key(sql, double_quoted_strings)
        qclass = known.get(key)
        if qclass is not None:
            return qclass, False
        qclass = classify(sql, double_quoted_strings)
        while len(known) >= self.max_statements:
            try:
                del known[next(iter(known))]
            except (KeyError, RuntimeError, StopIteration):
                break
        known[key] = qclass
        ids = self._ids
        if qclass.qid in ids:
            return qclass, False
        if len(ids) >= self.max_ids:
            # Bounded memory: a class seen again is announced again; the
            # analyser keeps the first text of each id.
            ids.clear()
        ids.add(qclass.qid)
        return qclass, True
