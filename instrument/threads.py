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
"""

import sys
import threading
import time


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


def start_os_thread(target, name: str):
    """Start ``target`` in a daemon OS thread, even under eventlet."""
    real_threading, _ = _originals()
    thread = real_threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def os_event():
    """An Event whose ``wait`` blocks only the OS thread that waits."""
    real_threading, _ = _originals()
    return real_threading.Event()


def os_lock():
    """A lock that is a real OS lock, even under eventlet."""
    real_threading, _ = _originals()
    return real_threading.Lock()


def current_thread_id() -> int:
    """Thread id, or greenthread id when eventlet patched ``threading``."""
    return threading.get_ident()
