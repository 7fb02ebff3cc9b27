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
"""The wait records: ``lock.wait``, ``db.pool.wait``, ``pool.wait``.

A wait is recorded once, when it is over (for a lock: when the lock is
released, so that the record also says how long it was held), as one
complete (``X``) record measured on the waiting thread: its start and
duration are the wait, its parent is the span that waited, and its
request, instances, service and host are that span's (outside any
span: no request, the process's service and host).  The analyser
takes it out of the parent's exclusive time (``wait.*`` components).

``WaitRecorder.record`` is the one call on the hot path: no formatting,
one tuple and one enqueue.  A wait that never ends (a deadlock) is not
written; its enclosing span's start is on disk and shows it as hung.
"""

import time

from instrument import schema
from instrument.runtime import faults as faults_mod
from instrument.runtime import recorder as recorder_mod

PH_X = schema.PH_COMPLETE
ST_OK = schema.ST_OK
ST_ERROR = schema.ST_ERROR

F_SPAN = recorder_mod.F_SPAN
F_REQ = recorder_mod.F_REQ
F_GREQ = recorder_mod.F_GREQ
F_INST = recorder_mod.F_INST
F_SVC = recorder_mod.F_SVC
F_HOST = recorder_mod.F_HOST
F_EV = recorder_mod.F_EV

clock = time.perf_counter_ns


class WaitRecorder:
    """Writes wait records through one ``Recorder``; ``faults`` counts
    what goes wrong (the waiting call is never affected)."""

    def __init__(self, recorder, what: str) -> None:
        self.recorder = recorder
        self.faults = faults_mod.Faults(
            what, limit=100, what='the lock or pool is unaffected'
        )
        self.record = self._make_record()

    def _make_record(self):
        emit = self.recorder.emit
        host = self.recorder.host
        svc = self.recorder.svc
        get_frame = recorder_mod.current_frame
        # module attributes read per call: a fork renews the span id
        # prefix, the writer the wall clock anchor
        rm = recorder_mod
        faults = self.faults
        call_key = schema.ATTR_CALL

        def record_wait(
            ev: str, t0: int, t1: int, attrs: dict, err=None
        ) -> None:
            """Queue the wait ``[t0, t1)`` (``clock()`` readings) of the
            current thread; ``attrs`` gets ``call`` (the enclosing
            span's event).  Never raises.  The tuple has the layout of
            ``instrument.runtime.record`` (``I_*``)."""
            if not faults.active:
                return
            try:
                frame = get_frame()
                span = rm.span_prefix | (next(rm.span_counter) & 0xFFFFFFFF)
                ts = (t0 + rm.wall_offset_ns) // 1000
                if frame is not None:
                    attrs[call_key] = frame[F_EV]
                    emit(
                        (
                            PH_X,
                            ts,
                            (t1 - t0) // 1000,
                            frame[F_HOST],
                            frame[F_SVC],
                            None,
                            ev,
                            span,
                            frame[F_SPAN],
                            frame[F_REQ],
                            frame[F_GREQ],
                            frame[F_INST],
                            ST_OK if err is None else ST_ERROR,
                            err,
                            attrs,
                        )
                    )
                else:
                    # no request: oslo.context's current one is stale
                    # outside a span (nova's periodic tasks and threads
                    # inherit an old one), as for SQL statements
                    emit(
                        (
                            PH_X,
                            ts,
                            (t1 - t0) // 1000,
                            host,
                            svc,
                            None,
                            ev,
                            span,
                            None,
                            None,
                            None,
                            None,
                            ST_OK if err is None else ST_ERROR,
                            err,
                            attrs,
                        )
                    )
            except Exception as exc:  # noqa: BLE001 - counted, never raised
                faults(exc)

        return record_wait


def error_of(exc: BaseException) -> tuple:
    """The ``err`` of a failed wait: class name and a short message."""
    cls = type(exc)
    return ('%s.%s' % (cls.__module__, cls.__qualname__), str(exc)[:200])
