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
"""The process's one registry of post-import hooks.

``when_imported(module, callback)`` calls ``callback(module object)``
once the process imports ``module`` (at once when it is imported
already), without importing it.  wrapt's hooks cannot be unregistered,
so one wrapt hook is registered per module, whatever asks for it, and
a callback is registered once however often it is asked for: the
patcher (``instrument.patching.patcher``, whose callback dispatches to
every patcher) and the start-up log (``instrument.runtime.startlog``,
which waits for oslo.log's ``setup``) go through here; nothing else of
the library registers a post-import hook.  A callback that raises is
logged and the others run: an exception here would fail the import.
"""

import logging
import threading

import wrapt

LOG = logging.getLogger(__name__)

_LOCK = threading.Lock()
# module name -> callbacks, in order of registration
_CALLBACKS: dict = {}
# modules whose wrapt hook ran: a callback registered since is called
# at once
_FIRED: dict = {}


def when_imported(module_name: str, callback) -> None:
    """``callback(module)`` once ``module_name`` is imported; asking
    again for the same pair does nothing."""
    with _LOCK:
        first = module_name not in _CALLBACKS
        callbacks: list = _CALLBACKS.setdefault(module_name, [])
        if callback in callbacks:
            return
        callbacks.append(callback)
        module = _FIRED.get(module_name)
    if first:
        # at once when imported already (wrapt calls _imported now)
        wrapt.register_post_import_hook(_imported, module_name)
    elif module is not None:
        _call(callback, module)


def _call(callback, module) -> None:
    try:
        callback(module)
    except Exception:
        LOG.exception(
            'instrument: a post-import hook of %s failed', module.__name__
        )


def _imported(module) -> None:
    with _LOCK:
        _FIRED[module.__name__] = module
        callbacks = list(_CALLBACKS.get(module.__name__, ()))
    for callback in callbacks:
        _call(callback, module)


def registered(module_name: str) -> tuple:
    """The callbacks waiting for (or called on) ``module_name``."""
    with _LOCK:
        return tuple(_CALLBACKS.get(module_name, ()))
