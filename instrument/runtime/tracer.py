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
"""Spans by hand, and how an exception is described in a record.

``Tracer`` is the keyword API for code that records spans itself (the
nova-api paste filter, other launchers, tests): ``begin``/``end``,
``instant`` and ``with tracer.span(...)``.  It binds the process's
``instrument.runtime.recorder.Recorder``, which owns ids, clock, current span,
record layout and enqueue; patch point wrappers bind the recorder
directly.

``error_of`` (``instrument.runtime.errors``, named here too) describes
an exception as ``(class, short message)``, scrubbed of SQL, values
and URLs.  A fault of a span recorded by hand is counted by
``span_faults()`` (``instrument.runtime.faults``).
"""

import typing

from instrument import schema
from instrument.runtime import errors
from instrument.runtime import faults
from instrument.runtime import recorder as recorder_mod

ST_OK = schema.ST_OK
ST_ERROR = schema.ST_ERROR

# How an exception is described (``instrument.runtime.errors``), named
# here for the code that records spans by hand.
MAX_MESSAGE = errors.MAX_MESSAGE
CLIENT_PACKAGES = errors.CLIENT_PACKAGES
error_class = errors.error_class
scrub_message = errors.scrub_message
short_message = errors.short_message
client_message = errors.client_message
error_of = errors.error_of


class Tracer:
    """Records spans around arbitrary code, through a ``Recorder``."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder
        self._begin = recorder.begin
        self._end = recorder.end
        self._clock = recorder.clock
        self.host = recorder.host
        self.svc = recorder.svc

    def begin(
        self,
        ev: str,
        svc=None,
        host=None,
        ctx=None,
        inst=None,
        attrs=None,
        remote_parent=None,
    ) -> list:
        """Start a span; returns its record, which ``end`` completes.

        What is not given is inherited from the enclosing span (see
        ``Recorder.begin``).  Raises when the span cannot be queued; the
        caller then runs unrecorded.
        """
        return self._begin(ev, svc, host, ctx, inst, remote_parent, attrs)

    def end(
        self,
        rec: list,
        st: str = ST_OK,
        err=None,
        attrs=None,
        req=None,
        inst=None,
    ) -> None:
        """Finish the span ``begin`` returned (``req`` and ``inst`` may
        correct what was known at the start)."""
        self._end(rec, self._clock(), st, err, attrs, req, inst)

    def instant(
        self, ev: str, attrs=None, svc=None, host=None, req=None, inst=None
    ) -> None:
        """A point-in-time event inside the current span."""
        self.recorder.instant(ev, attrs, svc, host, req, inst)

    def span(self, ev: str, **kwargs) -> 'Span':
        """A context manager for a span around arbitrary code."""
        return Span(self, ev, kwargs)


class Span:
    """``with tracer.span('api.request', attrs={...}) as s:`` ...

    ``s.attrs`` may be updated before the block ends, ``s.req`` corrects
    the request id; an exception leaving the block is recorded and
    re-raised.  The block runs whatever the recording does: a fault
    starting or ending the span is counted (``span_faults``, logged
    once) and the block runs, or ends, unrecorded; its result and
    exception are never changed.
    """

    __slots__ = (
        '_tracer',
        '_ev',
        '_kwargs',
        '_state',
        'attrs',
        'error',
        'req',
    )

    def __init__(self, tracer: Tracer, ev: str, kwargs: dict) -> None:
        self._tracer = tracer
        self._ev = ev
        self._kwargs = kwargs
        self._state: typing.Optional[list] = None
        self.attrs: dict = {}
        self.error = None
        self.req = None

    def __enter__(self) -> 'Span':
        try:
            self._state = self._tracer.begin(self._ev, **self._kwargs)
        except Exception as fault:
            span_faults()(fault)
        return self

    def __exit__(self, exc_type, exc, tb) -> typing.Literal[False]:
        rec = self._state
        if rec is None:  # not started (a fault)
            return False
        self._state = None
        try:
            if exc is not None:
                st, err = ST_ERROR, error_of(exc)
            elif self.error is not None:
                st, err = ST_ERROR, self.error
            else:
                st, err = ST_OK, None
            self._tracer.end(rec, st, err, self.attrs or None, self.req)
        except Exception as fault:
            recorder_mod.abandon(rec, ST_ERROR if exc is not None else ST_OK)
            span_faults()(fault)
        return False


_SPAN_FAULTS = None


def span_faults():
    """The fault counter of ``Span`` (made at its first fault)."""
    global _SPAN_FAULTS
    if _SPAN_FAULTS is None:
        _SPAN_FAULTS = faults.Faults(
            'a span recorded by hand (tracer.span)',
            what='the block runs unaffected',
        )
    return _SPAN_FAULTS
