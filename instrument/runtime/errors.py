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
"""How an exception is described in a record: ``(class, short message)``.

``error_of`` describes an exception as ``(class, short message)``: the
message's first line, without SQL, its parameters or any value a driver
quoted in it (``scrub_message``), a URL reduced to its path (no host,
query string or fragment).  The exceptions of OpenStack service clients
(keystoneauth1, neutronclient, glanceclient...), whose messages quote
the URL or the response body, keep only their HTTP status.  Only ever
called on the error path.

A leaf of the runtime (the standard library only): the fault counters
(``instrument.runtime.faults``) describe what they count with it, and
``instrument.runtime.tracer``, which counts its own faults there, names
these functions for the code that records spans by hand.
"""

import ast
import re

MAX_MESSAGE = 200
# oslo.db / SQLAlchemy messages carry the statement and its bound
# parameters after these markers; they never reach a span file.
_SECRET_MARKERS = ('[SQL:', '[parameters:', '(Background on this error')

# Drivers put bound values in their own messages too (MySQL's
# "Duplicate entry 'x' for key 'k'", PostgreSQL's "Key (k)=(x)"):
# ``scrub_message`` turns them into ``?``.  First the message templates
# whose value may hold quotes of its own (the server does not escape
# it): the value runs to the template's fixed tail.
_VALUE_TEMPLATES = tuple(
    (re.compile(pattern, re.DOTALL), repl)
    for pattern, repl in (
        # MySQL/MariaDB
        (r"(Duplicate entry )'.*'( for key '[^']*')$", r'\1?\2'),
        (r"(value: )'.*'( for column .*? at row \d+)$", r'\1?\2'),
        (r"( near )'.*'( at line \d+)$", r'\1?\2'),
        (r"(Cannot convert string )'.*'( from \S+ to \S+)$", r'\1?\2'),
        (r"(to the value of )'.*'$", r'\1?'),
        # MySQL "value: '...'", PostgreSQL 'for type integer: "..."'
        (r"(: )'.*'$", r'\1?'),
        (r'(: )".*"$', r'\1?'),
        # PostgreSQL DETAIL lines
        (r'(\bKey \(.*?\)=)\(.*\)', r'\1(?)'),
        (r'(\bFailing row contains )\(.*\)', r'\1(?)'),
    )
)
# Any other quoted literal ('...', "...", x'..', N'..', _utf8'..') is a
# value unless a word that names an object precedes it (MySQL quotes
# key and column names, PostgreSQL relations and constraints; both the
# server a connection failed to reach).  Backquoted names are never
# touched.
_QUOTED = re.compile(
    r"""(?<!\w)(?:[xXbBnN]|_[A-Za-z0-9]+)?"""
    r"""(?:'(?:[^'\\]|\\.|'')*(?:'|$)|"(?:[^"\\]|\\.|"")*(?:"|$))""",
    re.DOTALL,
)
_NAME_BEFORE = re.compile(
    r'\b(?:key|column|constraint|relation|table|index|sequence|schema|'
    r'database|encoding|type|view|trigger|function|collation|savepoint|'
    r'role|user|server on|server at)\s+$',
    re.IGNORECASE,
)
_HEX = re.compile(r'\b0x[0-9a-fA-F]+(?:\s+0x[0-9a-fA-F]+)*')
# PyMySQL's and mysqlclient's ``(1062, "Duplicate entry ...")``: the
# server's message as a Python string literal.
_DRIVER_TUPLE = re.compile(
    r"""\((\d+), ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\)"""
)


def error_class(exc: BaseException) -> str:
    """``nova.exception.NoValidHost``; builtins without a module."""
    cls = exc.__class__
    module = cls.__module__
    if module == 'builtins':
        return cls.__qualname__
    return module + '.' + cls.__qualname__


def _keep_name(match) -> str:
    text = match.string
    start = match.start()
    if _NAME_BEFORE.search(text, max(0, start - 24), start):
        return match.group(0)
    return '?'


def _scrub_plain(text: str) -> str:
    for pattern, repl in _VALUE_TEMPLATES:
        text = pattern.sub(repl, text)
    if "'" in text or '"' in text:
        text = _QUOTED.sub(_keep_name, text)
    return _HEX.sub('?', text)


def _driver_message(match) -> str:
    try:
        message = ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError):
        return '(%s, ?)' % match.group(1)
    return '(%s, %r)' % (match.group(1), _scrub_plain(str(message)))


def scrub_message(text: str) -> str:
    """``text`` with the values a statement or its parameters may have
    put in it replaced by ``?``: quoted literals (but the names of keys,
    columns, constraints... and backquoted names), hex literals,
    PostgreSQL's ``Key (name)=(value)``; error codes stay.

    ``(1062, "Duplicate entry 'a@b.org' for key 'name'")`` becomes
    ``(1062, "Duplicate entry ? for key 'name'")``.
    """
    out = []
    pos = 0
    for match in _DRIVER_TUPLE.finditer(text):
        out.append(_scrub_plain(text[pos : match.start()]))
        out.append(_driver_message(match))
        pos = match.end()
    out.append(_scrub_plain(text[pos:]))
    return ''.join(out)


_URL = re.compile(
    r'\b[a-zA-Z][\w+.-]*://[^/\s\'"]*([^?#\s\'"]*)'
    r'[^\s\'"]*'
)


def _url_path(match) -> str:
    return match.group(1) or '/'


def short_message(exc: BaseException) -> str:
    """First line of the message, without SQL, its parameters or any
    value the driver quoted in it (``scrub_message``), capped.

    Only called on the error path.
    """
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not break the call
        return ''
    for marker in _SECRET_MARKERS:
        cut = text.find(marker)
        if cut >= 0:
            text = text[:cut]
    text = text.strip().split('\n', 1)[0]
    if '://' in text:
        text = _URL.sub(_url_path, text)
    try:
        text = scrub_message(text)
    except Exception:  # never let the scrubbing break the call
        return '?'
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 3] + '...'
    return text


# Service clients: their exceptions' messages quote the URL (with its
# query string) or the response body.
CLIENT_PACKAGES = frozenset(
    (
        'keystoneauth1',
        'neutronclient',
        'glanceclient',
        'cinderclient',
        'novaclient',
        'ironicclient',
        'openstack',
        'requests',
        'urllib3',
    )
)


def client_message(exc: BaseException) -> str:
    """What is kept of a service client's exception: its HTTP status
    (``HTTP 409``), else nothing."""
    for name in ('http_status', 'status_code', 'code'):
        status = getattr(exc, name, None)
        if isinstance(status, int) and status >= 100:
            return 'HTTP %d' % status
    return ''


def error_of(exc: BaseException) -> tuple:
    """``(class, short message)`` of an exception, looking through
    oslo.messaging's ExpectedException to the exception it carries."""
    if exc.__class__.__name__ == 'ExpectedException':
        info = getattr(exc, 'exc_info', None)
        if info and isinstance(info[1], BaseException):
            exc = info[1]
    module = exc.__class__.__module__ or ''
    if module.split('.', 1)[0] in CLIENT_PACKAGES:
        return (error_class(exc), client_message(exc))
    return (error_class(exc), short_message(exc))
