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
"""Resource samples of the process: ``process.sample`` counter records.

Every ``[instrument] resource_sample_interval`` seconds (0: never) a
``Sampler`` writes one ``C`` record on the spans' clock: CPU user and
system seconds (``resource.getrusage``), resident set size and OS
threads (``/proc/self/stat``), open file descriptors
(``/proc/self/fd``), greenthreads parked in the eventlet hub (its
timers and file-descriptor waits, under eventlet only), per SQL
engine the pool's connections checked out, in overflow and its size,
and the library's own buffer: events queued, its bound, drops so far;
and the CPU seconds of the library's writer thread so far
(``time.thread_time``, in the samples the writer takes: not the final
one a closing thread may take).

It runs in the buffer's writer, a real OS thread even under eventlet
(``instrument.runtime.threads``), before a drain: no nova thread or greenthread
ever waits for it, and the hub is never blocked.  Nothing is imported
that the process does not have: SQLAlchemy's engines are seen where
``create_engine`` makes them (``Dialect.engine_created``, a REPLACE
point; those made before, at ``attach``, among the garbage collector's
objects), or under SQLAlchemy 1.4 through one ``engine_connect``
listener (a dictionary look-up per connection, a LISTEN point,
``ENGINE_CONNECT``), points of the target's patcher: added on
its post-import hook when the process imports SQLAlchemy, in the
start-up banner and the start record, removed by ``stop``.  In a
forked child the next sample comes at its first drain; its figures are
its own.
"""

import os
import resource
import time
import weakref

from instrument import schema
from instrument.patching import patcher as patcher_mod
from instrument.patching import points as points_mod
from instrument.runtime import faults
from instrument.runtime import threads
from instrument.targets.sqlalchemy import names

# The place listened to: every engine's engine_connect (SQLAlchemy
# 1.4); from 2.0 on, where an engine is made (no engine listener:
# ``names.engine_events``), and the engines made before at attach.
ENGINE_CONNECT = ('sqlalchemy.engine.base', 'Engine', 'engine_connect')
ENGINE_CREATED = ('sqlalchemy.engine.interfaces', 'Dialect.engine_created')
POINT = (
    '%s:%s@%s' % ENGINE_CONNECT
    if names.engine_events()
    else '%s:%s' % ENGINE_CREATED
)

_SAMPLERS = weakref.WeakSet()
_FAULTS = faults.Faults(
    'the resource sampler\'s engine listener',
    what='the connection is unaffected',
)


def _after_fork_in_child() -> None:
    for sampler in list(_SAMPLERS):
        sampler.last = None
        sampler.final_taken = False


os.register_at_fork(after_in_child=_after_fork_in_child)

try:
    PAGE_KB = os.sysconf('SC_PAGE_SIZE') // 1024
except (ValueError, OSError, AttributeError):  # pragma: no cover
    PAGE_KB = 4


def proc_stat() -> tuple:
    """``(OS threads, RSS in kB)`` from ``/proc/self/stat``, or
    ``(None, None)`` where there is no ``/proc``."""
    # os.open and one read, not open(): the file object's set-up
    # (fstat, isatty, a second read for the end) is 3 more system
    # calls at every sample.  The line is far below 4 kB.
    try:
        fd = os.open('/proc/self/stat', os.O_RDONLY)
    except OSError:
        return None, None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None, None
    finally:
        os.close(fd)
    # Fields after the command name, which may hold spaces: state is
    # the first, num_threads the 18th, rss (pages) the 22nd.
    fields = data[data.rindex(b')') + 2 :].split()
    return int(fields[17]), int(fields[21]) * PAGE_KB


def open_fds():
    """Open file descriptors of the process, or None without ``/proc``."""
    try:
        return len(os.listdir('/proc/self/fd'))
    except OSError:
        return None


class Pools:
    """The SQLAlchemy engines of the process, by pool (weakly held),
    seen by the ``engine_connect`` listener that ``attach`` adds as a
    point of ``patcher``."""

    def __init__(self) -> None:
        self.pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # (SQLAlchemy 2.0) engines: their database names
        self.engines: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.patcher = None
        self._point: points_mod.PatchPoint | None = None

    def _on_connect(self, conn, *_branch) -> None:
        # An engine_connect listener (SQLAlchemy 1.4 passes a second
        # argument, 2.0 one): it runs in nova's thread, and an
        # exception here would fail nova's connect.
        try:
            engine = conn.engine
            pool = engine.pool
            if pool not in self.pools:
                # the name the SQL records and the pool's records give
                # the database (a sqlite file's name, not its path)
                self.pools[pool] = names.database_name(engine.url)
        except Exception as exc:  # noqa: BLE001 - counted
            _FAULTS(exc)

    def _seen(self, engine) -> None:
        # (SQLAlchemy 2.0) an engine made, or found at attach: its pool
        # is read at each sample (dispose() makes another)
        try:
            if engine not in self.engines:
                self.engines[engine] = names.database_name(engine.url)
        except Exception as exc:  # noqa: BLE001 - counted
            _FAULTS(exc)

    def _on_created(self, original, state=None, owner=None):
        """``Dialect.engine_created`` (a classmethod, called once
        ``create_engine`` has made an engine) that notes the engine
        (guarded: the engine is returned whatever happens)."""
        func = original.__func__
        seen = self._seen

        def engine_created(cls, engine):
            func(cls, engine)
            if state is None or state.active:
                seen(engine)

        engine_created.__wrapped__ = func  # type: ignore[attr-defined]
        engine_created.__qualname__ = getattr(
            func, '__qualname__', 'engine_created'
        )
        return classmethod(engine_created)

    def point(self) -> points_mod.PatchPoint:
        """The LISTEN point of every engine's ``engine_connect``
        (SQLAlchemy 1.4), else the REPLACE point of
        ``Dialect.engine_created``."""
        if names.engine_events():
            return points_mod.listen(*ENGINE_CONNECT, self._on_connect)
        return points_mod.replace(*ENGINE_CREATED, self._on_created)

    def attach(self, patcher) -> None:
        """Listen to SQLAlchemy engines, now if the process imported
        it, else when it does (``patcher``'s post-import hook)."""
        if self._point is not None:
            return
        self.patcher = patcher
        self._point = self.point()
        patcher.add_points([self._point])
        patcher.apply()
        if not names.engine_events():
            for engine in names.existing_engines():
                self._seen(engine)

    def detach(self) -> None:
        point, self._point = self._point, None
        if point is not None and self.patcher is not None:
            self.patcher.discard([point.name])

    def sample(self) -> dict:
        """{database: [checked out, overflow in use, pool size]}; a
        pool without those counters (NullPool, StaticPool) gives its
        checked-out count only where it has one."""
        out = {}
        for engine, name in list(self.engines.items()):
            try:
                pool = engine.pool
                if pool not in self.pools:
                    self.pools[pool] = name
            except Exception:  # noqa: BLE001,S112 - a half-made engine
                continue
        for pool, name in list(self.pools.items()):
            checked = _call(pool, 'checkedout')
            overflow = _call(pool, 'overflow')
            size = _call(pool, 'size')
            key = name
            n = 2
            while key in out:
                key = '%s#%d' % (name, n)
                n += 1
            out[key] = [
                checked,
                max(0, overflow) if overflow is not None else None,
                size,
            ]
        return out


def _call(obj, name):
    fn = getattr(obj, name, None)
    if fn is None:
        return None
    try:
        value = fn()
    except Exception:
        return None
    return value if isinstance(value, int) else None


def _eventlet_hub():
    """The hub of the calling (main) thread under eventlet, else None."""
    if not threads.eventlet_patched():
        return None
    try:
        from eventlet import hubs

        return hubs.get_hub()
    except Exception:  # pragma: no cover - half-installed eventlet
        return None


def parked_greenthreads(hub):
    """Greenthreads waiting in ``hub``: timers (sleeps, spawned ones not
    yet run) and file-descriptor waits; None without a hub."""
    if hub is None:
        return None
    try:
        count = len(hub.timers) + len(hub.next_timers)
        for listeners in hub.listeners.values():
            count += len(listeners)
        return count
    except Exception:
        return None


class Sampler:
    """Writes ``process.sample`` records through ``recorder``.

    ``tick`` is a buffer periodic (``EventBuffer.add_periodic``): it
    samples when ``interval`` seconds have passed since the last one,
    and at the final drain.
    """

    def __init__(self, recorder, interval: float, patcher=None) -> None:
        """``patcher`` (``instrument.patching.patcher.Patcher``, the
        target's) applies the engine listener; one of its own, applied
        by ``start`` and removed by ``stop``, when None."""
        self.recorder = recorder
        self.own_patcher = patcher is None
        self.patcher = (
            patcher
            if patcher is not None
            else patcher_mod.Patcher([], recorder, 'SQLAlchemy')
        )
        self.buffer = recorder.buffer
        self.interval = interval
        self.last: float | None = None
        # the final sample is taken once: at close both the woken writer
        # and the closing thread drain (one after the other, under the
        # buffer's drain lock), each with ``final``
        self.final_taken = False
        self.pools = Pools()
        # Read here, in the thread that sets up (the hub's own).
        self.hub = _eventlet_hub()
        self.clock = time.monotonic
        _SAMPLERS.add(self)

    def start(self) -> None:
        """Start sampling (the writer runs ``tick``)."""
        self.pools.attach(self.patcher)
        self.buffer.add_periodic(self.tick)

    def stop(self) -> None:
        """Stop sampling (idempotent)."""
        self.buffer.remove_periodic(self.tick)
        self.pools.detach()
        if self.own_patcher:
            self.patcher.remove()

    def sample(self) -> dict:
        """One sample's attributes."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        nthreads, rss_kb = proc_stat()
        buf = self.buffer
        out = {
            schema.ATTR_CPU_USER_S: round(usage.ru_utime, 3),
            schema.ATTR_CPU_SYS_S: round(usage.ru_stime, 3),
            schema.ATTR_RSS_KB: rss_kb,
            schema.ATTR_THREADS: nthreads,
            schema.ATTR_GREEN: parked_greenthreads(self.hub),
            schema.ATTR_FDS: open_fds(),
            schema.ATTR_POOLS: self.pools.sample(),
            schema.ATTR_BUF_FILL: len(buf.queue),
            schema.ATTR_BUF_SIZE: getattr(buf, 'max_records', None),
            schema.ATTR_BUF_DROPS: getattr(buf, 'dropped_full', 0),
        }
        writer = getattr(buf, 'writer', None)
        if writer is not None and writer.ident == threads.real_ident():
            out[schema.ATTR_WRITER_CPU_S] = round(time.thread_time(), 3)
        return out

    def tick(self, final: bool = False) -> None:
        """Sample if it is time (buffer periodic)."""
        now = self.clock()
        if final:
            if self.final_taken:
                return
            self.final_taken = True
        elif self.last is not None and now - self.last < self.interval:
            return
        self.last = now
        self.recorder.counter(schema.EV_PROCESS_SAMPLE, self.sample())
