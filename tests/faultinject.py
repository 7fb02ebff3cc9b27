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
"""Faults injected into the library's internals, for the fault tests.

A ``Fault`` stands in for one function of the library (a clock, an
enqueue, an extractor, the end of a span...): ``fault.wrap(real)`` is
what replaces it.  While the fault is armed and the call is in its
scope (``where``: a test of the calling frames; ``skip``: the first
calls in scope pass), it either raises ``InjectedFault`` (kind
``raise``) or blocks for a while and then does the real thing (kind
``hang``: at most ``hang_times`` times, ``hang_s`` each, through
``sleep``, which defaults to ``time.sleep`` looked up at call time, so
that it is eventlet's under eventlet).  ``hits`` counts the calls that
reached the fault (armed, in scope), ``raised`` the faults raised,
``hanging`` says whether a call is blocked in it right now;
``reached`` counts those calls per function wrapped (the ``name`` given
to ``wrap``, else the function's).
"""

import collections
import inspect
import os
import sys
import threading
import time

from instrument.patching import points as points_mod
from instrument.runtime import threads

RAISE = 'raise'
HANG = 'hang'
KINDS = (RAISE, HANG)


class InjectedFault(Exception):
    """What a fault site raises: never one of nova's exceptions."""


class Fault:
    """One fault at one site (see the module docstring)."""

    def __init__(
        self,
        kind: str,
        hang_s: float = 0.05,
        hang_times: int = 3,
        skip: int = 0,
        where=None,
        sleep=None,
        error=None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError('no fault kind %r' % kind)
        self.kind = kind
        self.hang_s = hang_s
        self.hang_times = hang_times
        self.skip = skip
        self.where = where
        self.sleep = sleep
        self.error = error or (
            lambda: InjectedFault('injected into the instrumentation')
        )
        self.armed = True
        self.hits = 0
        self.raised = 0
        self.hung = 0
        self.hanging = 0
        # {name of the function wrapped: calls that reached the fault}
        self.reached: collections.Counter = collections.Counter()
        # the threads the site was reached from
        self.thread_ids: set = set()
        # A real lock: the site may run in the writer's OS thread; it is
        # never held across a sleep.
        self._lock = threads.os_lock()

    def __repr__(self) -> str:
        return '<Fault %s hits=%d raised=%d hung=%d>' % (
            self.kind,
            self.hits,
            self.raised,
            self.hung,
        )

    def _fires(self, frame, name=None) -> bool:
        if not self.armed:
            return False
        if self.where is not None and not self.where(frame):
            return False
        with self._lock:
            self.hits += 1
            self.reached[name] += 1
            self.thread_ids.add(threading.get_ident())
            if self.hits <= self.skip:
                return False
            if self.kind == RAISE:
                self.raised += 1
                return True
            if self.hung >= self.hang_times:
                return False
            self.hung += 1
            self.hanging += 1
            return True

    def _hang(self) -> None:
        try:
            (self.sleep or time.sleep)(self.hang_s)
        finally:
            with self._lock:
                self.hanging -= 1

    def wrap(self, real, name=None):
        """The function that replaces ``real`` at the site (a point's
        ``reads`` or ``places`` hook: the same hook of its function,
        wrapped); ``name`` keys ``reached`` (default: ``real``'s)."""
        if isinstance(real, (points_mod.Reads, points_mod.Places)):
            return type(real)(self.wrap(real.fn, name), *real.specs)
        fault = self
        if name is None:
            name = getattr(real, '__name__', repr(real))

        def site(*args, **kwargs):
            if fault._fires(sys._getframe(1), name):
                if fault.kind == RAISE:
                    raise fault.error()
                fault._hang()
            return real(*args, **kwargs)

        site.fault = fault  # type: ignore[attr-defined]
        return site


def in_files(*suffixes: str, depth: int = 10):
    """A ``where``: a call made (``depth`` frames up at most) from code
    in a file whose path ends with one of ``suffixes``."""

    def where(frame) -> bool:
        n = 0
        while frame is not None and n < depth:
            if frame.f_code.co_filename.endswith(suffixes):
                return True
            frame = frame.f_back
            n += 1
        return False

    return where


def in_functions(*names: str, depth: int = 10):
    """A ``where``: a call made from a function named one of ``names``."""

    def where(frame) -> bool:
        n = 0
        while frame is not None and n < depth:
            if frame.f_code.co_name in names:
                return True
            frame = frame.f_back
            n += 1
        return False

    return where


def all_of(*wheres):
    """A ``where`` true when every one of ``wheres`` is."""

    def where(frame) -> bool:
        return all(w(frame) for w in wheres)

    return where


def in_span_wrapper(depth: int = 2, after_call: bool = False, **locals_):
    """A ``where``: a call made (``depth`` frames up at most) from a
    span wrapper (``instrument.runtime.wrappers``) whose closure variables
    match ``locals_`` (``detail=True``, ``ev='ksa.request'``); never one made
    by ``abandon`` (a fault path that counts nothing by design).

    ``after_call``: only once the wrapper has called nova's callable
    (the span's end: the wrapper does the start's steps itself too,
    with the same clock)."""
    after = _after_nova_call() if after_call else None
    traced = _native_traced()

    def where(frame) -> bool:
        if frame.f_code.co_name == 'abandon':
            return False
        if traced is not None:
            # The C path (instrument._native._span): no frame of its
            # own; a part it calls (or one called by what it calls)
            # has the frame that called the wrapper that far up.
            info = traced()
            if info is not None:
                span_call, after_nova, caller = info
                up, n = frame, 0
                while up is not None and n < depth:
                    if up is caller:
                        if after_call and not after_nova:
                            return False
                        return all(
                            getattr(span_call, k, None) == v
                            for k, v in locals_.items()
                        )
                    up = up.f_back
                    n += 1
        n = 0
        while frame is not None and n < depth:
            code = frame.f_code
            if code.co_name == 'patched' and code.co_filename.endswith(
                _WRAPPERS
            ):
                if after is not None and not after(frame):
                    return False
                values = frame.f_locals
                return all(values.get(k) == v for k, v in locals_.items())
            frame = frame.f_back
            n += 1
        return False

    return where


_WRAPPERS = os.path.join('instrument', 'runtime', 'wrappers.py')


def _native_traced():
    """``_traced`` of the span wrapper's C path, its tracing turned on
    (each part it calls notes what called it), when span wrappers are
    made in C; else None."""
    from instrument.runtime import wrappers

    native = wrappers.native_span
    if native is None:
        return None
    native._trace(True)
    return native._traced


def _after_nova_call():
    """A ``where`` true in a span wrapper's frame past its call of
    nova's callable (the line ``result = call(*args, **kwargs)``)."""
    from instrument.runtime import wrappers

    [code] = [
        const
        for const in wrappers.span_wrapper.__code__.co_consts
        if inspect.iscode(const) and const.co_name == 'patched'
    ]
    return after_line(code, 'result = call(*args, **kwargs)')


def after_line(func, text: str):
    """A ``where``: a call made from ``func`` after its line that holds
    ``text`` (e.g. the clock read once a lock is held)."""
    code = getattr(func, '__code__', func)
    lines, first = inspect.getsourcelines(code)
    for n, line in enumerate(lines):
        if text in line:
            after = first + n
            break
    else:
        raise ValueError('%r not in %s' % (text, code.co_name))

    def where(frame) -> bool:
        return frame.f_code is code and frame.f_lineno > after

    return where
