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
"""Ending the exporter thread's stuck green wait from another thread.

Owns the one rule the ``otlp`` sink's exporter thread must keep under
eventlet: it may not be inside its eventlet hub when the interpreter
finalizes.

Why.  Under eventlet the SDK's sockets, locks and events are green, so
the exporter thread (a real OS thread, see ``instrument.runtime.threads``) runs
an eventlet hub of its own, in a greenlet of its own: while an export
waits for the collector, that thread's current greenlet is its hub,
blocked in ``epoll_wait``.  When close() gives up on a hung export the
thread was left behind as a daemon.  If it then wakes after
``Py_FinalizeEx`` has begun (any hub timer, an answer or a reset from
the collector), CPython 3.11 to 3.13 end it with ``pthread_exit`` as it
takes the GIL, and the forced unwinding runs greenlet's C++ frames that
were never meant to be unwound: the process dies with SIGSEGV after it
did all its work.  The core of such a crash (``tests.system.sinks.
test_otlp_process``, the eventlet hang test: 3 runs in 11 under load
in the report, 1 in 50 here)::

    Thread 1 (instrument-otlp, "Exiting"):
    #0  Py_DECREF (op=0x1)
    #1  greenlet::refs::OwnedReference<_greenlet,...>::~OwnedReference
    #3  greenlet::Greenlet::switchstack_result_t::~switchstack_result_t
    #4  greenlet::UserGreenlet::g_initialstub   (TUserGreenlet.cpp:387)
    #5  greenlet::UserGreenlet::g_switch
        ... requests/sessions.py:651 request  <- OTLPSpanExporter.export
        ... instrument/sinks/otlp/__init__.py _export <- _run
    Thread 2 (main):
    #3  gc_collect_main <- _PyGC_CollectNoFail <- interpreter_clear
    #8  Py_FinalizeEx

The wake that lands in finalization is a matter of timing (there, a
5 s timer the SDK's resource detection left in that hub): on an
operator's service it is a restart that crashes.  A thread that is in
plain C or in its main greenlet when it is ended that way is not
harmed: only a live hub on its stack is.  (Python 3.14 parks such a
thread for good instead of unwinding it.)

So close() does not leave the thread in its hub: ``GreenInterrupt``
registers a socket pair (real sockets, not eventlet's) with the exporter
thread's hub; close() writes a byte into it,
the hub wakes at once and throws ``Interrupted`` into the thread's main
greenlet, where the export was waiting; the thread unwinds out of the
SDK (which catches ``Exception`` only) and ends, and close() waits a
bounded time for that.  The byte is never read, so a thread that would
enter its hub again is thrown out again at once.
"""

from instrument.runtime import threads


class Interrupted(BaseException):
    """Thrown into the exporter thread's main greenlet by its hub once
    close() gave up on the export (a BaseException: the SDK, requests
    and urllib3 catch ``Exception``)."""


class GreenInterrupt:
    """A socket pair the exporter thread's eventlet hub watches (see the
    module docstring).  Built where the thread is started, armed by the
    thread itself, fired from any thread, closed once the thread has
    ended."""

    def __init__(self, socket_module) -> None:
        self._read, self._write = socket_module.socketpair()
        self._write.setblocking(False)
        self._closed = False

    @classmethod
    def create(cls):
        """A new one under eventlet; None otherwise (native threads run
        no hub) or when no sockets can be had (then close() cannot end
        a stuck export early, as before)."""
        if not threads.eventlet_patched():
            return None
        from eventlet import patcher

        try:
            # The unpatched module: these sockets never wait on a hub.
            return cls(patcher.original('socket'))
        except OSError:
            return None

    def arm(self):
        """In the exporter thread, before any green wait: its hub throws
        ``Interrupted`` into this (main) greenlet whenever a byte is
        waiting.  Returns what ``disarm`` takes."""
        from eventlet import greenthread
        from eventlet import hubs

        hub = hubs.get_hub()
        target = greenthread.getcurrent()  # this thread's main greenlet

        def interrupt(_fileno):
            # Runs in the hub greenlet, so ``target`` is suspended in a
            # green wait: the exception surfaces there.
            target.throw(Interrupted())

        def obsolete(*_args):
            pass

        return hub, hub.add(
            hub.READ, self._read.fileno(), interrupt, obsolete, obsolete
        )

    @staticmethod
    def disarm(armed) -> None:
        """In the exporter thread, at its end."""
        hub, listener = armed
        try:
            hub.remove(listener)
        except Exception:  # best effort: the thread ends anyway
            pass

    def fire(self) -> None:
        """Any thread: make the exporter thread's hub throw (never
        blocks)."""
        if self._closed:
            return
        try:
            self._write.send(b'x')
        except OSError:  # full: it was fired already
            pass

    def close(self) -> None:
        """Once the exporter thread has ended (or in a forked child,
        where it never ran): the sockets."""
        if self._closed:
            return
        self._closed = True
        self._read.close()
        self._write.close()
