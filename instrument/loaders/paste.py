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
"""The nova-api paste filter: records each HTTP request as ``api.request``.

Added to a pipeline of ``api-paste.ini`` (see README)::

    [filter:instrument]
    paste.filter_factory = instrument.loaders.paste:filter_factory

It starts the instrumentation of the API process with nova's global
configuration (idempotent with the notifier driver) and wraps the rest
of the pipeline.  The span's request id is the one nova's context
carries downstream (``environ['nova.context']``), falling back to the
``X-OpenStack-Request-ID`` of the request id middleware; when the two
differ (an auth middleware such as ``noauth2`` makes a context with an
id of its own) the span's end names the id it began with
(``req_began``), and the analyser reads the records of that id under
the context's.  The route is
the path with ids replaced by ``{id}``; bodies and query strings are
never recorded (a server action's name, ``action``, is the one nova's
dispatch found: ``instrument.targets.nova``).

The time the request waited before the filter was called (``queue_us``:
the front server's accept and worker queue, which the span does not
cover) is read from what the front server put in the environ, when it
did: mod_wsgi's ``mod_wsgi.request_start`` (when Apache accepted it)
or ``mod_wsgi.queue_start`` (when it was queued for the daemon
process), microseconds since the epoch as strings; else a proxy's
``X-Request-Start`` header (``HTTP_X_REQUEST_START``: ``t=<usec>`` as
Apache's mod_headers ``%t`` sets it, seconds with a fraction as
nginx's ``t=${msec}`` or haproxy's, milliseconds as Heroku's).  uWSGI
puts no arrival time in the environ: behind it, the proxy's header is
the evidence.  One float parsed per request; a value that cannot be
read, or puts the arrival more than a second ahead or an hour back, is
ignored and counted (``QUEUE_UNREAD``, in the ``instrument.faults``
records), never raised.
"""

import re
import time

from oslo_config import cfg
from oslo_log import log as logging

from instrument import loaders as loader
from instrument import schema
from instrument.runtime import faults
from instrument.runtime import lifecycle
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracing

LOG = logging.getLogger(__name__)

_ID_SEGMENT = re.compile(
    r'/(?:[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?'
    r'[0-9a-fA-F]{12}|[0-9a-fA-F]{32}|\d+|req-[0-9a-fA-F-]{36})(?=/|$)'
)


def route_of(path: str) -> str:
    """``/v2.1/servers/<uuid>/action`` -> ``/v2.1/servers/{id}/action``."""
    return _ID_SEGMENT.sub('/{id}', path or '/')


# the environ keys of an arrival time, first found wins: the server's
# own clock first (same host), then the proxy's header
_ARRIVAL_KEYS = (
    'mod_wsgi.request_start',
    'mod_wsgi.queue_start',
    'HTTP_X_REQUEST_START',
)
# a queue longer than this is a wrong clock or a wrong header, not a wait
_QUEUE_MAX_US = 3600 * 1_000_000
# a proxy's clock a little ahead of this host's: a wait of 0, not garbage
_QUEUE_SKEW_US = 1_000_000
# arrival values ignored in this process: counted in the process's
# instrument.faults records (a client's header, not a fault of ours:
# never logged)
QUEUE_UNREAD = faults.Faults(
    'the paste filter: unreadable arrival time',
    what='the request is recorded without queue_us',
)


def queue_us(environ, now: float | None = None) -> int | None:
    """The µs the request waited before ``now`` (``time.time()``, read
    only when an arrival is there) since the arrival the front server
    recorded in ``environ``; None when it recorded none or an
    unreadable one (counted in ``QUEUE_UNREAD``).  Never raises."""
    try:
        for key in _ARRIVAL_KEYS:
            value = environ.get(key)
            if value is None:
                continue
            if isinstance(value, str) and value[:2] == 't=':
                value = value[2:]
            arrival = float(value)
            # the unit by magnitude: µs (1e15 today), ms (1e12), s (1e9)
            if arrival >= 1e14:
                arrival_us = arrival
            elif arrival >= 1e11:
                arrival_us = arrival * 1e3
            else:
                arrival_us = arrival * 1e6
            if now is None:
                now = time.time()
            waited = now * 1e6 - arrival_us
            if not (-_QUEUE_SKEW_US <= waited <= _QUEUE_MAX_US):
                # NaN, inf, a clock far off: not a wait
                QUEUE_UNREAD.count += 1
                return None
            return int(waited) if waited > 0 else 0
    except Exception:
        QUEUE_UNREAD.count += 1
    return None


# Faults of the filter in this process (see instrument.runtime.faults).
FAULTS = faults.Faults(
    'the paste filter', what='the request is answered unrecorded'
)


class InstrumentMiddleware:
    """WSGI middleware recording one ``api.request`` span per request.

    Recording is isolated from the request: a fault while starting the
    span (including the start of the instrumentation itself) is counted
    and logged once, and nova's app is then called unrecorded; a fault
    while ending it is counted and logged once.  The app is called
    exactly once, outside any guarded block, and what it returns or
    raises goes back unchanged.
    """

    def __init__(self, app, conf=None, service_name='nova-api') -> None:
        self.app = app
        self.conf = conf if conf is not None else cfg.CONF
        self.service_name = service_name
        self._started = False

    def _tracer(self):
        active = lifecycle.active()
        if active is None and not self._started:
            self._started = True
            loader.start(self.conf, self.service_name)
            active = lifecycle.active()
        return active.tracer if active is not None else None

    def __call__(self, environ, start_response):
        rec = None
        try:
            tracer = self._tracer()
            if tracer is not None:
                status = []

                def recording_start_response(code, headers, *exc_info):
                    # nova's start_response gets what nova's app gave
                    try:
                        status.append(code)
                    except Exception as fault:
                        FAULTS(fault)
                    return start_response(code, headers, *exc_info)

                attrs = {
                    schema.ATTR_METHOD: environ.get('REQUEST_METHOD'),
                    schema.ATTR_ROUTE: route_of(
                        environ.get('SCRIPT_NAME', '')
                        + environ.get('PATH_INFO', '')
                    ),
                }
                waited = queue_us(environ)
                if waited is not None:
                    attrs[schema.ATTR_QUEUE_US] = waited
                rec = tracer.begin(
                    schema.EV_API_REQUEST,
                    svc='api',
                    attrs=attrs,
                    ctx={
                        'request_id': environ.get('openstack.request_id'),
                        'global_request_id': environ.get(
                            'openstack.global_request_id'
                        ),
                    },
                )
        except Exception as exc:
            FAULTS(exc)
            rec = None
        if rec is None:  # not instrumenting, or a fault: unrecorded
            return self.app(environ, start_response)
        try:
            result = self.app(environ, recording_start_response)
        except BaseException as exc:
            self._end(tracer, rec, environ, status, exc)
            raise
        self._end(tracer, rec, environ, status, None)
        return result

    @staticmethod
    def _end(tracer, rec, environ, status, exc) -> None:
        """Complete the span; never raises."""
        try:
            context = environ.get('nova.context')
            req = getattr(context, 'request_id', None)
            attrs = None
            st, err = tracing.ST_OK, None
            if exc is not None:
                st, err = tracing.ST_ERROR, tracing.error_of(exc)
            if status:
                try:
                    code = int(status[0].split(None, 1)[0])
                except (ValueError, IndexError):
                    code = None
                if code is not None:
                    attrs = {schema.ATTR_STATUS: code}
                    if code >= 500 and err is None:
                        st, err = (
                            tracing.ST_ERROR,
                            ('HTTP %d' % code, status[0][:100]),
                        )
            action = environ.get(schema.ENV_ACTION)
            if action is not None:
                attrs = dict(attrs or (), **{schema.ATTR_ACTION: action})
            began = environ.get('openstack.request_id')
            if req and began and req != began:
                # records written under the environ's id before the
                # context existed (a B flushed while the request ran,
                # its SQL) belong to the context's request: say so
                attrs = dict(attrs or (), **{schema.ATTR_REQ_BEGAN: began})
            tracer.end(rec, st, err, attrs, req or None)
        except Exception as fault:
            FAULTS(fault)
            recorder_mod.abandon(
                rec, tracing.ST_ERROR if exc is not None else tracing.ST_OK
            )


FILTER_SECTION = (
    '[filter:instrument]\n'
    'paste.filter_factory = instrument.loaders.paste:'
    'filter_factory\n'
)


def add_to_pipelines(ini_text: str, after: str = 'compute_req_id') -> str:
    """nova's api-paste.ini with ``instrument`` placed after ``after`` in
    every pipeline that has it, and its ``[filter:instrument]`` section.
    Idempotent."""
    if '[filter:instrument]' in ini_text:
        return ini_text
    lines = []
    for line in ini_text.splitlines():
        key, sep, value = line.partition('=')
        words = value.split()
        if sep and after in words and not line.lstrip().startswith('#'):
            at = words.index(after) + 1
            words.insert(at, 'instrument')
            line = '%s= %s' % (key, ' '.join(words))
        lines.append(line)
    return '\n'.join(lines) + '\n\n' + FILTER_SECTION


def filter_factory(global_conf, **local_conf):
    """``paste.filter_factory`` entry point."""

    def make(app):
        return InstrumentMiddleware(app)

    return make
