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
"""Ways a service switches the instrumentation on without code changes.

``start(conf)`` is what the notifier driver and the paste filter run.
Its log lines are held until the service has set its logging up
(``instrument.runtime.startlog``): nova parses its configuration, which starts
the driver, before it calls ``oslo_log.log.setup``.  It records only in
the programs of ``[instrument] programs`` (nova's services); any other
program that loads the driver (nova-manage, nova-status, the console
proxies) logs one INFO line and is left alone.
"""

import fnmatch
import os
import sys

from oslo_config import cfg
from oslo_config import types
from oslo_log import log as logging

from instrument import opts
from instrument.runtime import faults
from instrument.runtime import lifecycle
from instrument.runtime import process
from instrument.runtime import startlog

LOG = logging.getLogger(__name__)

# The module nova's API runs as a WSGI application through (nova.wsgi,
# and the wsgi scripts of older releases, whose program is the server's).
NOVA_WSGI_APP = 'nova.api.openstack.wsgi_app'
NOVA_API = 'nova-api'


def service_conf(conf):
    """The ConfigOpts behind oslo.messaging's per-transport proxy."""
    return getattr(conf, '_conf', conf)


# Faults of starting the instrumentation (see instrument.runtime.faults).
FAULTS = faults.Faults(
    'the start of the instrumentation', what='nova runs uninstrumented'
)

# Messages logged once per process (each Notifier nova makes starts the
# driver again).
_SAID = set()


def _once(level: int, msg: str, *args) -> None:
    key = (msg,) + args
    if key in _SAID:
        return
    _SAID.add(key)
    LOG.log(level, msg, *args)


def program_of(conf) -> str:
    """The program ``conf`` was parsed for (``nova-compute``)."""
    try:
        prog = conf.prog
    except Exception:
        prog = None
    return os.path.basename(prog) if prog else process.guess_service_name()


def listed(program: str, patterns) -> bool:
    """True when ``program`` matches one of ``patterns`` (shell-style)."""
    return any(fnmatch.fnmatchcase(program, pattern) for pattern in patterns)


def service_name(prog: str, patterns, service=None):
    """The name to record this process under, or None to skip it:
    ``prog`` when listed; else ``service`` (what the caller knows it
    runs in: the paste filter is nova-api) or, in nova's API WSGI
    application, nova-api, when listed."""
    if listed(prog, patterns):
        return prog
    if service is None and NOVA_WSGI_APP in sys.modules:
        service = NOVA_API
    if service is not None and listed(service, patterns):
        return service
    return None


def start(conf, service=None) -> None:
    """``instrument.setup`` for the service that owns ``conf``.

    ``service`` names the nova service the caller runs in when the
    program's own name may not say (the paste filter: nova-api).
    Never raises: a bad option is logged as an error naming it, any
    other fault is counted and logged once; nova then runs uninstrumented.
    """
    startlog.hold()
    invalid = None
    try:
        real = service_conf(conf)
        prog = program_of(real)
        opts.register_opts(real)
        opts.validate(real)
        group = real.instrument
        if not group.enabled:
            _once(
                logging.INFO,
                'instrument: loaded by %s but [%s] enabled '
                'is false; not recording',
                prog,
                opts.GROUP,
            )
            return
        name = service_name(prog, group.programs, service)
        if name is None:
            _once(
                logging.INFO,
                'instrument: loaded by %s, which is not '
                'one of [%s] programs (%s); not recording',
                prog,
                opts.GROUP,
                ', '.join(group.programs),
            )
            return
        lifecycle.setup(real, name)
    except opts.InvalidOption as exc:
        invalid = exc
    except Exception as exc:
        FAULTS(exc)
    if invalid is not None:
        # Outside the except block: oslo.log would add the exception's
        # text again to the line.
        try:
            _once(
                logging.ERROR,
                'instrument: not started, %s',
                describe_invalid(real, invalid),
            )
        except Exception as exc:
            FAULTS(exc)


def describe_invalid(conf, exc: opts.InvalidOption) -> str:
    """One line for an invalid option: the option, the value as written
    and the config file when known, and the rule it breaks."""
    name = exc.option
    cause = exc.__cause__
    opt = _opt(name)
    if opt is None or not isinstance(cause, ValueError):
        return 'fix nova.conf: %s' % exc
    value, where = _written(conf, name)
    rule = _rule(opt) or _reason(cause)
    return 'fix %s: [%s] %s%s: %s' % (
        where or 'nova.conf',
        opts.GROUP,
        name,
        '' if value is None else ' = %s' % value,
        rule,
    )


def _opt(name: str):
    for _group, options in opts.list_opts():
        for opt in options:
            if opt.name == name:
                return opt
    return None


def _written(conf, name: str) -> tuple:
    """(the value as written, the file) of option ``name``, or Nones."""
    try:
        values, location = conf._namespace._get_file_value(
            [(opts.GROUP, name)]
        )
        value = values[-1] if isinstance(values, list) else values
        value = str(value)
        if len(value) > 60:
            value = value[:57] + '...'
        return value, getattr(location, 'detail', None)
    except Exception:
        return None, None


def _choices(item_type) -> list:
    choices = getattr(item_type, 'choices', None)
    return [str(c) for c in choices] if choices else []


def _rule(opt):
    """What a value of ``opt`` must be, in words, or None."""
    kind = opt.type
    if isinstance(kind, types.Boolean):
        return 'must be true or false'
    if isinstance(kind, types.List):
        choices = _choices(getattr(kind, 'item_type', None))
        if choices:
            return 'must be a comma-separated list of %s' % ', '.join(choices)
        return None
    if isinstance(kind, (types.Integer, types.Float)):
        what = 'an integer' if isinstance(kind, types.Integer) else 'a number'
        low, high = getattr(kind, 'min', None), getattr(kind, 'max', None)
        if low is not None and high is not None:
            return 'must be %s from %s to %s' % (what, low, high)
        if low is not None:
            return 'must be %s of at least %s' % (what, low)
        if high is not None:
            return 'must be %s of at most %s' % (what, high)
        return 'must be %s' % what
    choices = _choices(kind)
    if choices:
        return 'must be one of %s' % ', '.join(choices)
    return None


def _reason(cause: Exception) -> str:
    """oslo.config's reason without its location's repr."""
    text = str(cause)
    if isinstance(cause, cfg.ConfigFileValueError):
        text = text.split(' is not valid: ', 1)[-1]
    return text.splitlines()[0] if text else type(cause).__name__
