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
"""``db.retry`` events from ``oslo_db.api.wrap_db_retry``.

nova decorates its DB API functions with ``wrap_db_retry`` when its
modules are imported, usually before ``instrument.setup`` runs, so
patching the decorator would miss them.  Every retry loop, however old,
asks its decorator instance ``_is_exception_expected(exc)`` once per
failure, looked up on the class at call time: that method is wrapped
(wrapt, on the class; restored by ``remove``).  When it answers True the
call is retried unless the retries are exhausted; the attempt number and
the remaining count are read from the retry loop's frame (``remaining``
and ``f`` of oslo.db's wrapper).  If a future oslo.db renames them the
event is still written, without ``attempt``/``exhausted``.

The method is a REPLACE point of ``instrument.patching.patcher``: patched when
oslo.db is imported (its post-import hook) if it is not imported yet,
in the start-up banner, restored by the patcher's ``remove()``;
nothing of oslo.db is imported here.

A retry caused by a failed statement names its query class and
database (``fp``, ``db``): the SQL listeners put the statement on its
exception (``listeners.ATTR_SQL``), found here through the exceptions
that wrap it (``failed_statement``).
"""

import os
import sys

import wrapt

from instrument import schema
from instrument.patching import patcher as patcher_mod
from instrument.patching import points as points_mod
from instrument.runtime import faults as faults_mod
from instrument.runtime import tracer as tracing
from instrument.targets.sqlalchemy import fingerprint
from instrument.targets.sqlalchemy import listeners

EV_RETRY = schema.EV_DB_RETRY
MODULE = 'oslo_db.api'
CLASS = 'wrap_db_retry'
METHOD = '_is_exception_expected'
# its argument: the exception raised by the call retried
EXC_ARG = 'exc'
# How far up from the wrapper to look for oslo.db's retry loop frame.
MAX_FRAME_DEPTH = 5
# How many exceptions deep to look for the failed statement's.
MAX_CHAIN = 6

POINT = '%s:%s.%s' % (MODULE, CLASS, METHOD)

_API_FILE = os.path.join('oslo_db', 'api.py')


def _callable_name(fn) -> str | None:
    if fn is None:
        return None
    module = getattr(fn, '__module__', None)
    name = getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None)
    if name is None:
        return None
    return '%s.%s' % (module, name) if module else name


def _retry_loop_locals(frame):
    """Locals of oslo.db's retry wrapper, found above ``frame``."""
    depth = 0
    while frame is not None and depth < MAX_FRAME_DEPTH:
        code = frame.f_code
        if (
            code.co_filename.endswith(_API_FILE)
            and 'remaining' in code.co_varnames
        ):
            return frame.f_locals
        frame = frame.f_back
        depth += 1
    return None


def failed_statement(exc) -> tuple | None:
    """(statement, database, double-quoted strings) of the failed
    statement behind ``exc``, as the SQL listeners put it on its
    exception (``listeners.ATTR_SQL``): on ``exc`` itself, or on what it
    wraps (oslo.db's ``inner_exception``, a ``RetryRequest``'s
    ``inner_exc``, SQLAlchemy's ``orig``, the cause or context)."""
    for _ in range(MAX_CHAIN):
        if exc is None:
            return None
        tag = getattr(exc, listeners.ATTR_SQL, None)
        if tag is not None:
            return tag
        exc = (
            getattr(exc, 'inner_exc', None)
            or getattr(exc, 'inner_exception', None)
            or getattr(exc, 'orig', None)
            or getattr(exc, '__cause__', None)
            or getattr(exc, '__context__', None)
        )
    return None


class RetryRecorder:
    """Writes a ``db.retry`` instant for every retried DB call."""

    def __init__(self, recorder, patcher=None, memo=None) -> None:
        """``recorder``: the ``instrument.runtime.recorder.Recorder`` whose
        ``instant`` records the retry inside the current span;
        ``patcher`` (``instrument.patching.patcher.Patcher``) applies the point
        (one of its own when None); ``remove`` undoes it.  ``memo``: the
        SQL listeners' ``fingerprint.Memo``, where the query class of a
        failed statement is looked up first."""
        self.recorder = recorder
        self.memo = memo
        self.faults = faults_mod.Faults(
            'the DB retry recorder', what='the retry is unaffected'
        )
        self.patcher = (
            patcher
            if patcher is not None
            else patcher_mod.Patcher([], recorder, 'oslo.db')
        )
        self._active = False
        self._exc_pos = -1

    def points(self) -> list:
        """The REPLACE point of ``_is_exception_expected``."""
        return [
            points_mod.replace(
                MODULE,
                '%s.%s' % (CLASS, METHOD),
                self._replacement,
                replace_reads=(points_mod.Arg(EXC_ARG),),
            )
        ]

    def _replacement(self, original, state, owner):
        # the exception checked, read by keyword or at its position in
        # the method's signature (-1: keyword only or unreadable)
        pos = points_mod.Arg(EXC_ARG).position(original)
        self._exc_pos = pos if pos is not None else -1
        return wrapt.FunctionWrapper(original, self._wrapper)

    def install(self) -> None:
        self._active = True
        self.patcher.add_points(self.points())
        self.patcher.apply()

    def remove(self) -> None:
        self._active = False
        self.patcher.discard([POINT])

    @property
    def patched(self) -> bool:
        try:
            return self.patcher.status(POINT) == patcher_mod.PATCHED
        except KeyError:  # not installed
            return False

    def _wrapper(self, wrapped, instance, args, kwargs):
        expected = wrapped(*args, **kwargs)
        if expected and self._active:
            try:
                pos = self._exc_pos
                exc = (
                    kwargs[EXC_ARG]
                    if EXC_ARG in kwargs
                    else args[pos]
                    if -1 < pos < len(args)
                    else None
                )
                self._record(instance, exc, sys._getframe(1))
            except Exception as exc:
                self.faults(exc)
        return expected

    def _record(self, decorator, exc, frame) -> None:
        local = _retry_loop_locals(frame)
        attempt = exhausted = func = None
        if local is not None:
            remaining = local.get('remaining')
            max_retries = getattr(decorator, 'max_retries', None)
            if isinstance(remaining, int) and isinstance(max_retries, int):
                attempt = max_retries - remaining + 1
                exhausted = remaining <= 0
            func = _callable_name(local.get('f'))
        cause = getattr(exc, 'inner_exc', None) or exc
        attrs = {
            schema.ATTR_ATTEMPT: attempt,
            schema.ATTR_CLS: tracing.error_class(cause)
            if cause is not None
            else None,
            schema.ATTR_FUNC: func,
            schema.ATTR_EXHAUSTED: exhausted,
        }
        failed = failed_statement(exc)
        if failed is not None:
            statement, db, dq = failed
            attrs[schema.ATTR_FP] = self._query_id(statement, dq)
            attrs[schema.ATTR_DB] = db
        self.recorder.instant(EV_RETRY, attrs)

    def _query_id(self, statement: str, dq: bool) -> str:
        """The query class of a failed statement: from the memo when
        the writer has classified it already, else computed here (a
        retry is rare, and oslo.db sleeps before the next try); the
        writer announces its fingerprint with the failed statement's
        record, which is always written."""
        memo = self.memo
        if memo is not None:
            qclass = memo.get(fingerprint.memo_key(statement, dq))
            if qclass is not None:
                return qclass.qid
        return fingerprint.classify(statement, dq).qid
