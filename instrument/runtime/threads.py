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
"""Real OS threads and sleeps, whether or not eventlet has patched them.

The sink's writer must never run on the eventlet hub: a slow disk would
stall every greenthread of the service.  When eventlet has monkey-patched
``threading`` and ``time``, this module hands out the unpatched originals
so that the writer is a real OS thread that sleeps without the hub.
Under native threads (nova's default since 2025.1) these are the
ordinary ``threading`` and ``time`` functions.

Such a thread must not take eventlet's green locks either, and every
logging handler has one: a log call from it can deadlock the hub (seen:
``logging.shutdown`` waiting forever for a handler lock).  Code that
runs in these threads logs through ``safe_logger``, which under eventlet
hands the call to a greenthread on the hub (``defer_to_hub``).

The calling side of the instrumentation (nova's own threads) must not
log either: a log call can block on a slow disk in the middle of a nova
call.  It hands a call to ``defer``, which only appends to a deque: the
hub runs it under eventlet, the watchdog thread otherwise.  The watchdog
is a second OS thread per process (``watch``), never the one that
writes, so it can still report when the writer is stuck in a write that
does not return (a hard-mounted NFS server that stopped answering).

While the hub's own thread waits for one of our OS threads (the helper
that closes the buffers at exit, the writer holding the drain lock), it
runs what was deferred to the hub itself (``wait_until``, ``acquire``):
the hub cannot run meanwhile, and the OS thread may be waiting for it
(the log sink at close waits for its lines to be logged).  At exit,
``finish_deferred`` also waits, briefly, for the call the watchdog is
running, so that a line handed over is not lost.
"""

import collections
import os
import sys
import threading
import time
import typing


def eventlet_patched() -> bool:
    """True when eventlet has monkey-patched the thread module."""
    if 'eventlet' not in sys.modules:
        return False
    try:
        from eventlet import patcher
    except ImportError:  # pragma: no cover - half-installed eventlet
        return False
    return bool(patcher.is_monkey_patched('thread'))


def _originals():
    if eventlet_patched():
        from eventlet import patcher

        return patcher.original('threading'), patcher.original('time')
    return threading, time


_WORKERS = set()


def _real_ident() -> int:
    if eventlet_patched():
        from eventlet import patcher

        return patcher.original('_thread').get_ident()
    return threading.get_ident()


def start_os_thread(target, name: str):
    """Start ``target`` in a daemon OS thread, even under eventlet."""
    real_threading, _ = _originals()

    def run():
        ident = _real_ident()
        _WORKERS.add(ident)
        try:
            target()
        finally:
            _WORKERS.discard(ident)

    thread = real_threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if eventlet_patched():
        _ensure_hub_pump()
    return thread


def run_bounded(fn, timeout: float, name: str) -> bool:
    """Run ``fn`` in a new OS thread and wait for it at most ``timeout``
    seconds; True when it finished.  Where no thread can be started any
    more (interpreter shutdown) ``fn`` runs here, unbounded.  In the
    hub's thread under eventlet, what ``fn`` defers to the hub is run
    while it waits (see ``wait_until``)."""
    try:
        thread = start_os_thread(fn, name)
    except RuntimeError:
        fn()
        return True
    if in_hub_thread():
        return wait_until(lambda: not thread.is_alive(), timeout)
    thread.join(timeout)
    return not thread.is_alive()


def real_ident() -> int:
    """The calling OS thread's ident (not a greenthread's)."""
    return _real_ident()


def in_os_worker() -> bool:
    """True in a thread started by ``start_os_thread``."""
    return bool(_WORKERS) and _real_ident() in _WORKERS


def in_hub_thread() -> bool:
    """True under eventlet in the thread of the hub (a greenthread, not
    one of our OS threads): the one that runs what is deferred to it."""
    return eventlet_patched() and not in_os_worker()


# Longest real sleep between two looks of ``wait_until`` and ``acquire``.
POLL_INTERVAL = 0.01


def wait_until(done, timeout: float) -> bool:
    """Wait at most ``timeout`` seconds for ``done()`` to be true.

    The thread sleeps for real (under eventlet too, the hub does not run
    meanwhile); in the hub's thread, what was deferred to the hub is run
    between looks: an OS thread this one waits for may be waiting for
    the hub to run it (the log sink at close), and the hub cannot run
    while its thread waits."""
    if done():
        return True
    _, real_time = _originals()
    hub = in_hub_thread()
    deadline = real_time.monotonic() + timeout
    while True:
        if hub:
            run_deferred()
        if done():
            return True
        left = deadline - real_time.monotonic()
        if left <= 0:
            return False
        real_time.sleep(min(POLL_INTERVAL, left))


def acquire(lock, timeout: float) -> bool:
    """``lock.acquire(timeout=timeout)`` (-1: no limit) of an OS lock;
    in the hub's thread under eventlet, what was deferred to the hub is
    run while it waits (the holder may be waiting for it, see
    ``wait_until``)."""
    if lock.acquire(blocking=False):
        return True
    if timeout == 0:
        return False
    if not in_hub_thread():
        return lock.acquire(timeout=timeout)
    _, real_time = _originals()
    deadline = None if timeout < 0 else real_time.monotonic() + timeout
    while True:
        run_deferred()
        if deadline is None:
            wait = POLL_INTERVAL
        else:
            wait = min(POLL_INTERVAL, deadline - real_time.monotonic())
            if wait <= 0:
                return lock.acquire(blocking=False)
        if lock.acquire(timeout=wait):
            return True


# -- work handed from our OS threads to the eventlet hub ---------------------

MAX_DEFERRED = 100000
PUMP_INTERVAL = 0.2
_DEFERRED = collections.deque()
_pump_pid = None


def defer_to_hub(fn, *args, **kwargs) -> bool:
    """Run ``fn`` soon in a greenthread of the hub; False when too much
    is already waiting (the call is then dropped)."""
    if len(_DEFERRED) >= MAX_DEFERRED:
        return False
    _DEFERRED.append((fn, args, kwargs))
    return True


def run_deferred() -> None:
    """Run what was deferred (in the hub's thread; also at close)."""
    while _DEFERRED:
        try:
            fn, args, kwargs = _DEFERRED.popleft()
        except IndexError:  # pragma: no cover - another drainer won
            return
        try:
            fn(*args, **kwargs)
        except Exception:  # a failed log call must not stop the pump
            pass


def defer(fn, *args, **kwargs) -> bool:
    """Run ``fn`` soon, never in the calling thread and never blocking
    it: on the hub under eventlet, else in the watchdog thread.  False
    when too much is already waiting (the call is then dropped)."""
    if eventlet_patched():
        if not in_os_worker():
            _ensure_hub_pump()
        return defer_to_hub(fn, *args, **kwargs)
    if len(_DEFERRED) >= MAX_DEFERRED:
        return False
    _DEFERRED.append((fn, args, kwargs))
    _ensure_watchdog()
    wake = _watchdog_wake
    if wake is not None:
        wake.set()
    return True


def finish_deferred(timeout: float) -> bool:
    """Run what is deferred here, and wait at most ``timeout`` seconds
    for the watchdog thread to finish what it is running of it: at exit,
    a log line handed over is not lost to a watchdog thread that was
    logging it.  False when the watchdog did not finish in time (a log
    handler that hangs)."""
    _, real_time = _originals()
    deadline = real_time.monotonic() + timeout
    while True:
        run_deferred()
        if not _watchdog_busy and not _DEFERRED:
            return True
        if real_time.monotonic() >= deadline:
            return False
        real_time.sleep(POLL_INTERVAL)


def wait_deferred(timeout: float = 5.0) -> bool:
    """Wait at most ``timeout`` seconds until what was deferred before
    this call has run (tests; a caller about to read what it logged).
    In the hub's thread it is run here."""
    if in_hub_thread():
        run_deferred()
        return True
    done = os_event()
    if not defer(done.set):
        return False
    return done.wait(timeout)


def _ensure_hub_pump() -> None:
    global _pump_pid
    if _pump_pid == os.getpid() or in_os_worker():
        return
    _pump_pid = os.getpid()
    import eventlet

    def pump():
        while True:
            eventlet.sleep(PUMP_INTERVAL)
            run_deferred()

    eventlet.spawn_n(pump)


class SafeLogger:
    """A logger for code that runs in ``start_os_thread`` threads: under
    eventlet the call is made later from the hub; otherwise at once."""

    def __init__(self, logger) -> None:
        self._logger = logger

    def _log(self, method: str, msg, args, kwargs) -> None:
        if eventlet_patched() and in_os_worker():
            if method == 'exception':
                method = 'error'
                kwargs.setdefault('exc_info', sys.exc_info())
            defer_to_hub(getattr(self._logger, method), msg, *args, **kwargs)
        else:
            getattr(self._logger, method)(msg, *args, **kwargs)

    def debug(self, msg, *args, **kwargs) -> None:
        self._log('debug', msg, args, kwargs)

    def info(self, msg, *args, **kwargs) -> None:
        self._log('info', msg, args, kwargs)

    def warning(self, msg, *args, **kwargs) -> None:
        self._log('warning', msg, args, kwargs)

    def error(self, msg, *args, **kwargs) -> None:
        self._log('error', msg, args, kwargs)

    def exception(self, msg, *args, **kwargs) -> None:
        self._log('exception', msg, args, kwargs)


# -- the watchdog: a second OS thread, never the one stuck in a write --------

WATCH_INTERVAL = 1.0
_WATCHES = []
_watchdog_pid = None
# True while the watchdog runs deferred calls (see finish_deferred).
_watchdog_busy = False
_watchdog_wake = None
_watchdog_lock: typing.Any = None  # a real lock: see the end of this module


def watch(fn) -> None:
    """Call ``fn()`` about every ``WATCH_INTERVAL`` seconds from the
    watchdog thread of this process (started now if need be; once per
    process, again in a forked child).  ``fn`` must not block."""
    if fn not in _WATCHES:
        _WATCHES.append(fn)
    _ensure_watchdog()


def _ensure_watchdog() -> None:
    global _watchdog_pid, _watchdog_wake
    pid = os.getpid()
    if _watchdog_pid == pid:
        return
    with _watchdog_lock:
        if _watchdog_pid == pid:
            return
        wake = _watchdog_wake = os_event()
        _watchdog_pid = pid
        try:
            start_os_thread(
                lambda: _watchdog(pid, wake), 'instrument-watchdog'
            )
        except RuntimeError:  # interpreter shutdown: no thread any more
            _watchdog_pid = None


def _watchdog(pid: int, wake) -> None:
    global _watchdog_busy
    while _watchdog_pid == pid:
        wake.wait(WATCH_INTERVAL)
        wake.clear()
        for fn in list(_WATCHES):
            try:
                fn()
            except Exception:  # a check must never stop the watchdog
                pass
        if not eventlet_patched():
            _watchdog_busy = True
            try:
                run_deferred()
            finally:
                _watchdog_busy = False


def _after_fork_in_child() -> None:
    global _watchdog_lock, _watchdog_busy
    # What the parent deferred is the parent's to run; the watchdog
    # thread did not survive the fork (started again when needed).
    _DEFERRED.clear()
    _watchdog_busy = False
    _watchdog_lock = os_lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def safe_logger(logger) -> SafeLogger:
    return SafeLogger(logger)


def os_event():
    """An Event whose ``wait`` blocks only the OS thread that waits."""
    real_threading, _ = _originals()
    return real_threading.Event()


def os_lock():
    """A lock that is a real OS lock, even under eventlet."""
    real_threading, _ = _originals()
    return real_threading.Lock()


_watchdog_lock = os_lock()
