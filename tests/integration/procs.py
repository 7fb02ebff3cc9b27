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
"""Service processes: start with a log file each, watch, stop them all.

Each service runs in its own session (process group) with its output in
``<log dir>/<name>.log``; on Linux it also gets SIGTERM when the test
process dies, so a killed run leaves no nova behind.  ``stop_all`` sends
SIGTERM to every group (nova flushes its span buffer at exit), waits,
then SIGKILLs what is left.  Failure messages carry the tail of the
service's log.
"""

import ctypes
import os
import signal
import subprocess
import time

_PR_SET_PDEATHSIG = 1
try:
    # Resolved here, not in the forked child (no dlopen after fork).
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _prctl = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, 'rb') as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode('utf-8', 'replace')
    except OSError as exc:
        return '(no log: %s)' % exc
    return '\n'.join(text.splitlines()[-lines:])


class ServiceFailed(Exception):
    """A service died or never became ready."""


class Service:
    """One OS process of the cloud."""

    def __init__(
        self, name: str, argv: list, log_path: str, env: dict = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc = None

    def start(self) -> 'Service':
        log = open(self.log_path, 'ab')
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent if _prctl else None,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def failure(self, what: str) -> ServiceFailed:
        return ServiceFailed(
            '%s %s (exit status %s); last lines of %s:\n%s'
            % (
                self.name,
                what,
                self.proc.poll(),
                self.log_path,
                tail(self.log_path),
            )
        )

    def check(self) -> None:
        if not self.alive():
            raise self.failure('exited')

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


def run(
    name: str,
    argv: list,
    log_path: str,
    env: dict = None,
    timeout: float = 300,
) -> None:
    """Run a one-shot command (nova-manage ...); raise with its log tail
    when it fails."""
    with open(log_path, 'ab') as log:
        log.write(('$ %s\n' % ' '.join(argv)).encode())
        log.flush()
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise ServiceFailed(
                '%s timed out after %ds; last lines of '
                '%s:\n%s' % (name, timeout, log_path, tail(log_path))
            ) from exc
    if proc.returncode != 0:
        raise ServiceFailed(
            '%s failed (exit status %d); last lines of '
            '%s:\n%s' % (name, proc.returncode, log_path, tail(log_path))
        )


def wait_for(
    what: str, ready, services, timeout: float, interval: float = 0.25
):
    """Poll ``ready()`` until it returns a true value; fail early when one
    of ``services`` exits."""
    deadline = time.monotonic() + timeout
    while True:
        for service in services:
            service.check()
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ServiceFailed(
                'timed out after %ds waiting for %s%s'
                % (
                    timeout,
                    what,
                    ''.join(
                        '\n--- %s (%s):\n%s'
                        % (s.name, s.log_path, tail(s.log_path, 15))
                        for s in services
                    ),
                )
            )
        time.sleep(interval)


def stop_all(services, timeout: float = 20.0) -> list:
    """SIGTERM every service, wait, SIGKILL the rest; returns the names
    of those that had to be killed."""
    for service in services:
        service.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    killed = []
    for service in services:
        if service.proc is None:
            continue
        try:
            service.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(service.name)
            service.signal(signal.SIGKILL)
            service.proc.wait(10)
        # Children the service forked itself (none expected) go too.
        service.signal(signal.SIGKILL)
    return killed
