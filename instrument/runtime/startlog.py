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
"""Start-up log lines held until the service's logging is set up.

nova's services parse their configuration (``nova.config.parse_args``,
which builds the oslo.messaging notifiers, so the ``instrument`` driver
starts the runtime and logs its banner) before they set their logging
up (``oslo_log.log.setup(CONF, 'nova')``).  Without help the runtime's
INFO lines are lost and its warnings and errors reach bare stderr.

``hold()`` (the loader calls it first) does nothing when logging is
already configured (the root logger has a handler): records are emitted
as usual.  Otherwise records of the ``instrument`` loggers at INFO and
above are held, at most ``LIMIT`` of them (later ones are counted), and
replayed through their own logger, with their own time, level and
logger name, once ``oslo_log.log.setup`` has returned (it is wrapped
for that, on a post-import hook of ``instrument.patching.hooks``).  A
process that never sets its logging up gets the held
warnings and errors on stderr at exit.  Nothing here raises.
"""

import atexit
import collections
import logging
import os
import sys
import threading
import typing

import wrapt

from instrument.patching import hooks

# The loggers whose records are held: the runtime's.
ROOT_NAME = 'instrument'
# Lines of the "log" sink are events, not start-up messages.
SPANS_NAME = 'instrument.spans'
# Records held at most; later ones are counted.
LIMIT = 40
# Where held records go at exit when logging was never set up.
EXIT_FORMAT = '%(asctime)s %(process)d %(levelname)s %(name)s %(message)s'

_LOCK = threading.Lock()
_HELD = collections.deque()


class _State:
    """What this module changed, and what it saw."""

    dropped = 0  # records past LIMIT
    handler: logging.Handler | None = None  # while holding
    level: tuple | None = None  # (found, set) on the instrument logger
    propagate = True  # found on the instrument logger
    wrapped = False  # oslo_log.log.setup hooked
    module: typing.Any = None  # oslo_log.log, once its setup is wrapped
    removed = False  # remove() was called: wrap nothing more
    atexit = False  # _at_exit registered
    set_up = False  # oslo_log.log.setup has returned


_STATE = _State()


def _placeholder(handler) -> bool:
    """The bare stderr handler oslo.log's ``register_options`` adds to
    the root logger until ``setup`` replaces it."""
    return (
        type(handler) is logging.StreamHandler
        and handler.formatter is None
        and getattr(handler, 'stream', None) is sys.stderr
    )


def configured() -> bool:
    """True once the process's logging is set up: oslo.log's ``setup``
    ran, or the root logger has a handler other than oslo.log's bare
    placeholder."""
    if _STATE.set_up:
        return True
    return any(not _placeholder(h) for h in logging.getLogger().handlers)


class _HoldHandler(logging.Handler):
    """Keeps the records of the runtime's loggers (bounded)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)

    def emit(self, record) -> None:
        try:
            name = record.name
            if name == SPANS_NAME or name.startswith(SPANS_NAME + '.'):
                return
            with _LOCK:
                if len(_HELD) < LIMIT:
                    _HELD.append(record)
                else:
                    _STATE.dropped += 1
        except Exception:  # noqa: S110 - logging must never fail nova
            pass

    def handleError(self, record) -> None:  # never print a traceback
        pass


def holding() -> bool:
    return _STATE.handler is not None


def hold() -> None:
    """Hold the runtime's log records until logging is set up, unless it
    is already; idempotent.  Never raises."""
    try:
        if configured():
            if holding():
                release()
            return
        with _LOCK:
            if _STATE.handler is not None:
                return
            logger = logging.getLogger(ROOT_NAME)
            handler = _HoldHandler()
            logger.addHandler(handler)
            _STATE.handler = handler
            # Not to oslo.log's placeholder on stderr meanwhile.
            _STATE.propagate = logger.propagate
            logger.propagate = False
            if logger.level == logging.NOTSET or logger.level > logging.INFO:
                # INFO lines pass the (unconfigured) WARNING of the root.
                _STATE.level = (logger.level, logging.INFO)
                logger.setLevel(logging.INFO)
        _wrap_setup()
        if not _STATE.atexit:
            _STATE.atexit = True
            atexit.register(_at_exit)
    except Exception:  # noqa: S110 - logging must never fail nova
        pass


def _stop_holding() -> tuple:
    """Stop holding; the held records and the count of dropped ones."""
    with _LOCK:
        handler, _STATE.handler = _STATE.handler, None
        level, _STATE.level = _STATE.level, None
        records = list(_HELD)
        _HELD.clear()
        dropped, _STATE.dropped = _STATE.dropped, 0
    logger = logging.getLogger(ROOT_NAME)
    if handler is not None:
        logger.removeHandler(handler)
        logger.propagate = _STATE.propagate
    # Put back the level found, unless the set-up chose one since.
    if level is not None and logger.level == level[1]:
        logger.setLevel(level[0])
    return records, dropped


def release() -> None:
    """Emit the held records through their loggers (logging is set up
    now) and stop holding.  Never raises."""
    try:
        records, dropped = _stop_holding()
        for record in records:
            try:
                logger = logging.getLogger(record.name)
                if logger.isEnabledFor(record.levelno):
                    logger.handle(record)
            except Exception:  # noqa: S110
                pass
        if dropped:
            logging.getLogger(__name__).warning(
                'instrument: %d more start-up log lines were dropped (at '
                'most %d are kept until logging is set up)',
                dropped,
                LIMIT,
            )
    except Exception:  # noqa: S110 - logging must never fail nova
        pass


def _at_exit() -> None:
    """Logging never set up (or set up otherwise than by oslo.log): the
    held records through it if there is one now, else the warnings and
    errors on stderr."""
    try:
        if not holding():
            return
        if configured():
            release()
            return
        records, dropped = _stop_holding()
        formatter = logging.Formatter(EXIT_FORMAT)
        for record in records:
            if record.levelno >= logging.WARNING:
                sys.stderr.write(formatter.format(record) + '\n')
        if dropped:
            sys.stderr.write(
                'instrument: %d more start-up log lines were '
                'dropped\n' % dropped
            )
        sys.stderr.flush()
    except Exception:  # noqa: S110 - at exit, nothing may fail
        pass


def _after_setup(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    _STATE.set_up = True
    if holding():
        release()
    return result


def _wrap_setup() -> None:
    """Wrap ``oslo_log.log.setup`` (once) to release after it."""
    if _STATE.wrapped:
        return
    _STATE.wrapped = True
    _STATE.removed = False
    hooks.when_imported('oslo_log.log', _wrap_module)
    # registered once per process: after a remove(), wrap again here
    module = sys.modules.get('oslo_log.log')
    if module is not None and _STATE.module is None:
        _wrap_module(module)


def _wrap_module(module) -> None:
    if _STATE.removed:
        return
    try:
        wrapt.wrap_function_wrapper(module, 'setup', _after_setup)
        _STATE.module = module
    except Exception:  # noqa: S110 - a hook must not fail an import
        pass


# The one place this module patches, as the runtime's banner and start
# record name it.
PLACE = 'oslo_log.log.setup (start-up log)'


def place_status() -> str | None:
    """The status of ``PLACE`` in the patchers' terms: ``patched``
    while ``oslo_log.log.setup`` is wrapped, ``pending`` while the hook
    waits for ``oslo_log.log`` to be imported, None when it was never
    asked for (logging was configured) or was removed."""
    if _STATE.module is not None:
        return 'patched'
    if _STATE.wrapped and not _STATE.removed:
        return 'pending'
    return None


def remove() -> None:
    """Undo the wrapper of ``oslo_log.log.setup`` (the runtime's
    ``close``), and wrap nothing more.  Held records are released
    first.  Nothing here raises."""
    _STATE.removed = True
    _STATE.wrapped = False
    module, _STATE.module = _STATE.module, None
    try:
        if holding():
            release()
        current = getattr(module, 'setup', None)
        if (
            isinstance(current, wrapt.FunctionWrapper)
            and getattr(current, '_self_wrapper', None) is _after_setup
        ):
            module.setup = current.__wrapped__
    except Exception:  # noqa: S110 - closing must not fail
        pass


def _after_fork_in_child() -> None:
    # The parent emits what it held; a child keeps holding its own.
    global _LOCK
    _LOCK = threading.Lock()
    _HELD.clear()
    _STATE.dropped = 0


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_after_fork_in_child)
