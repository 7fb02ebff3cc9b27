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
"""Concurrent boots through the compute API, with a progress line.

``boot_all`` posts N servers with at most C in flight, waits for each to
become ACTIVE or ERROR (the API's own answer is the truth the report is
checked against), and prints ``booted 12/30: 10 active, 2 error,
3.1 boots/s`` while it runs.  ``stop`` (a threading.Event, set on
Ctrl-C) stops new boots; those in flight still finish or time out.
``boot_waves`` boots in waves, as a scale test does: a wave of N
servers, nothing more until every one of them is ACTIVE or ERROR
(or timed out), then the next; each wave's time and throughput
(``Wave``).
"""

import concurrent.futures
import sys
import threading
import time

POLL_S = 0.2
# Server n is named NAME_FORMAT % n (the fault plan refers to names).
NAME_FORMAT = 'demo-%04d'
TIMEOUT_S = 180.0


class BootResult:
    """One server as the API saw it."""

    __slots__ = (
        'name',
        'id',
        'status',
        'host',
        'fault',
        'started',
        'finished',
        'error',
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.id = None
        self.status = None
        self.host = None
        self.fault = None
        self.started = time.time()
        self.finished = None
        self.error = None

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


def _boot_one(
    api, body_for, name: str, stop, timeout: float = TIMEOUT_S
) -> BootResult:
    result = BootResult(name)
    try:
        server = api.post_server({'server': body_for(name)})
        result.id = server['id']
        deadline = time.monotonic() + timeout
        while True:
            server = api.get_server(result.id)
            if server['status'] in ('ACTIVE', 'ERROR'):
                break
            if time.monotonic() > deadline:
                server['status'] = 'TIMEOUT'
                break
            time.sleep(POLL_S)
        result.status = server['status']
        result.host = server.get('OS-EXT-SRV-ATTR:host')
        fault = server.get('fault')
        if fault:
            result.fault = fault.get('message')
    except Exception as exc:  # the API said no: that is a result too
        result.status = 'API_ERROR'
        result.error = '%s: %s' % (exc.__class__.__name__, exc)
    result.finished = time.time()
    return result


class Progress:
    """A single updating line on a terminal, plain lines elsewhere."""

    def __init__(
        self, total: int, out=None, verb: str = 'booted', unit: str = 'boots'
    ) -> None:
        self.total = total
        self.verb = verb
        self.unit = unit
        self.out = out or sys.stderr
        self.started = time.monotonic()
        self.counts = {}
        self.done = 0
        self._lock = threading.Lock()
        self._last = 0.0

    def add(self, result: BootResult) -> None:
        with self._lock:
            self.done += 1
            key = (result.status or 'unknown').lower()
            self.counts[key] = self.counts.get(key, 0) + 1
            self.show(final=self.done == self.total)

    def show(self, final=False) -> None:
        now = time.monotonic()
        tty = hasattr(self.out, 'isatty') and self.out.isatty()
        if not final and not tty and now - self._last < 5.0:
            return
        self._last = now
        rate = self.done / max(now - self.started, 1e-6)
        detail = ', '.join(
            '%d %s' % (n, k) for k, n in sorted(self.counts.items())
        )
        line = '%s %d/%d: %s, %.1f %s/s' % (
            self.verb,
            self.done,
            self.total,
            detail or 'none yet',
            rate,
            self.unit,
        )
        if tty:
            self.out.write('\r' + line.ljust(78) + ('\n' if final else ''))
        else:
            self.out.write(line + '\n')
        self.out.flush()


def boot_all(
    api,
    body_for,
    count: int,
    concurrency: int,
    stop=None,
    progress: Progress = None,
    first: int = 0,
    timeout: float = TIMEOUT_S,
) -> list:
    """Boot ``count`` servers, ``concurrency`` at a time (named from
    number ``first`` on), each given up on (``TIMEOUT``) ``timeout``
    seconds after it was posted."""
    stop = stop or threading.Event()
    results = []
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        pending = set()
        for n in range(first, first + count):
            if stop.is_set():
                break
            if len(pending) >= concurrency:
                finished, pending = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in finished:
                    results.append(future.result())
                    if progress:
                        progress.add(results[-1])
            pending.add(
                pool.submit(
                    _boot_one, api, body_for, NAME_FORMAT % n, stop, timeout
                )
            )
        for future in concurrent.futures.as_completed(pending):
            results.append(future.result())
            if progress:
                progress.add(results[-1])
    return results


class Wave:
    """One wave of ``boot_waves``: its servers, when its first request
    was sent and its last answer came (``time.time()``), its outcomes."""

    def __init__(
        self, number: int, results: list, started: float, finished: float
    ) -> None:
        self.number = number
        self.results = results
        self.started = started
        self.finished = finished

    @property
    def duration_s(self) -> float:
        return max(self.finished - self.started, 1e-6)

    def counts(self) -> dict:
        out: dict = {}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def as_dict(self) -> dict:
        return {
            'wave': self.number,
            'servers': len(self.results),
            'started': self.started,
            'finished': self.finished,
            'duration_s': self.duration_s,
            'boots_per_s': len(self.results) / self.duration_s,
            'counts': self.counts(),
        }

    def line(self) -> str:
        return 'wave %d: %d servers in %.1f s, %.2f boots/s (%s)' % (
            self.number,
            len(self.results),
            self.duration_s,
            len(self.results) / self.duration_s,
            ', '.join(
                '%d %s' % (n, s) for s, n in sorted(self.counts().items())
            ),
        )


def boot_waves(
    api,
    body_for,
    size: int,
    count: int,
    concurrency: int,
    stop=None,
    progress: Progress = None,
    timeout: float = TIMEOUT_S,
) -> tuple:
    """``count`` waves of ``size`` servers, ``concurrency`` at a time in
    a wave; each wave starts when every server of the one before is
    ACTIVE or ERROR (or timed out).  Returns every server's result and
    the waves."""
    stop = stop or threading.Event()
    results: list = []
    waves = []
    for number in range(1, count + 1):
        if stop.is_set():
            break
        started = time.time()
        got = boot_all(
            api,
            body_for,
            size,
            concurrency,
            stop,
            progress,
            first=len(results),
            timeout=timeout,
        )
        finished = max(
            (r.finished for r in got if r.finished), default=time.time()
        )
        results.extend(got)
        waves.append(Wave(number, got, started, finished))
    return results, waves
