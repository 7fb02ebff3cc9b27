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
"""The running instrumentation of this process: set up and torn down.

``setup(conf, service_name)`` reads the ``[instrument]`` group, builds
the sinks, the buffer, the tracer and the patcher with the patch points
of every ``instrument.targets`` entry point, applies them, and (when
``sql_timing`` is on) attaches the SQL listeners.  It is idempotent: the
first successful call in a process wins and later calls return the same
runtime.  ``teardown()`` undoes all of it.

Besides the targets' points the runtime always hooks ``os._exit``: the
way oslo.service (both backends) and cotyledon end a worker process,
skipping ``atexit``.  The hook writes what is buffered, the current SQL
aggregates included, before the process goes (``EXIT_POINTS``).
"""

import inspect
import socket
import threading

from oslo_config import cfg
from oslo_log import log as logging
from stevedore import extension

from instrument import buffer as buffer_mod
from instrument import faults
from instrument import opts
from instrument import patcher as patcher_mod
from instrument import process
from instrument import recorder as recorder_mod
from instrument import sink
from instrument import threads
from instrument import tracer as tracer_mod

LOG = logging.getLogger(__name__)

TARGETS_NAMESPACE = 'instrument.targets'

_ACTIVE = None
_LOCK = threading.Lock()


def version() -> str:
    try:
        from importlib import metadata
        return metadata.version('openstack-instrument')
    except Exception:  # running from a source tree without metadata
        return 'unknown'


def _host(conf: cfg.ConfigOpts) -> str:
    if conf.instrument.host:
        return conf.instrument.host
    try:
        host = conf.host
    except (cfg.NoSuchOptError, AttributeError):
        host = None
    return host or socket.gethostname()


def _flush_before_exit(instance, args, kwargs) -> None:
    """HOOK on ``os._exit``: write everything before the process ends."""
    buffer_mod.flush_before_exit()


# Always applied, whatever the targets: nothing a worker measured is lost
# when it ends through os._exit().
EXIT_POINTS = (
    patcher_mod.PatchPoint('os', '_exit', 'process.exit', None,
                           context=None, kind=patcher_mod.HOOK,
                           on_enter=_flush_before_exit),
)


def load_points(services) -> list:
    """Patch points of every installed target, for ``services``."""
    points = []
    mgr = extension.ExtensionManager(
        TARGETS_NAMESPACE, invoke_on_load=False,
        on_load_failure_callback=lambda _m, ep, exc: LOG.error(
            'instrument: cannot load targets %s: %s', ep.name, exc))
    for ext in mgr:
        check = getattr(inspect.getmodule(ext.plugin), 'check_release', None)
        if check is not None:
            check()
        for point in ext.plugin():
            if (point.service is None or point.service not in opts.SERVICES
                    or point.service in services):
                points.append(point)
    return points


class Runtime:
    """Everything one process runs for instrumentation."""

    def __init__(self, conf, identity, buffer, recorder, tracer,
                 patcher) -> None:
        self.conf = conf
        self.identity = identity
        self.buffer = buffer
        self.recorder = recorder
        self.tracer = tracer
        self.patcher = patcher
        self.db = None
        self._faults_reported = None

    def header(self) -> list:
        group = self.conf.instrument
        return [self.identity.start_record({
            'version': version(),
            'mode': 'eventlet' if threads.eventlet_patched() else 'threads',
            'points': self.patcher.banner(),
            'options': {
                'services': list(group.services),
                'sinks': list(group.sinks),
                'sql_timing': group.sql_timing,
                'slow_query_threshold': group.slow_query_threshold,
                'detail_sample_rate': group.detail_sample_rate,
            },
        })]

    def report_faults(self, final: bool = False) -> None:
        """Writer periodic: an ``instrument.faults`` counter record
        whenever the fault counts of the process changed."""
        totals = faults.totals()
        if totals and totals != self._faults_reported:
            self._faults_reported = totals
            self.recorder.counter(faults.EVENT, totals)

    def close(self) -> None:
        # Write first, so the start record still shows what was patched.
        self.buffer.drain(timeout=buffer_mod.EXIT_TIMEOUT)
        self.patcher.remove()
        if self.db is not None:
            self.db.remove()
            self.db = None
        self.buffer.close()


def setup(conf: cfg.ConfigOpts, service_name: str | None = None,
          points=None):
    """Start instrumenting this process as configured in ``conf``.

    ``service_name`` is the program (``nova-compute``); it names the span
    file.  ``points`` overrides the installed targets (tests, other
    projects).  Returns the ``Runtime``, or None when ``[instrument]
    enabled`` is False.  Raises ``opts.InvalidOption`` naming the option
    when a value cannot be used.
    """
    global _ACTIVE
    opts.register_opts(conf)
    opts.validate(conf)
    group = conf.instrument
    if not group.enabled:
        return None
    with _LOCK:
        if _ACTIVE is not None:
            return _ACTIVE
        identity = process.ProcessIdentity.create(service_name, _host(conf))
        sinks = sink.load(group.sinks, conf, identity)
        runtime = None
        buf = buffer_mod.EventBuffer(
            sinks, group.buffer_size, group.flush_interval, identity,
            header=lambda: runtime.header())
        patcher = None
        # The writer starts once everything is set up: its first drain
        # writes the header, which names the points.
        buf.hold()
        try:
            if points is None:
                points = load_points(group.services)
            recorder = recorder_mod.Recorder(buf, identity,
                                             group.detail_sample_rate)
            tracer = tracer_mod.Tracer(recorder)
            patcher = patcher_mod.Patcher(
                list(points) + list(EXIT_POINTS), recorder)
            runtime = Runtime(conf, identity, buf, recorder, tracer,
                              patcher)
            patcher.apply()
            patcher.log_banner()
            if group.sql_timing:
                runtime.db = _install_sql_timing(recorder, conf)
            buf.add_periodic(runtime.report_faults)
            buf.release()
        except BaseException:
            # Half a start is worse than none: undo what was done.
            _undo(patcher, runtime, buf)
            raise
        _ACTIVE = runtime
        LOG.info('instrument: recording %s on %s to %s', identity.service,
                 identity.host, ', '.join(group.sinks))
        return runtime


def _undo(patcher, runtime, buf) -> None:
    for step in (patcher and patcher.remove,
                 runtime and runtime.db and runtime.db.remove, buf.close):
        if step:
            try:
                step()
            except Exception:
                LOG.exception('instrument: undoing a failed start')


def _install_sql_timing(recorder, conf):
    try:
        from instrument import db
    except ImportError as exc:
        LOG.warning('instrument: [instrument] sql_timing needs SQLAlchemy '
                    '(%s); SQL statements are not timed', exc)
        return None
    return db.install(recorder, conf)


def active():
    """The running ``Runtime`` or None."""
    return _ACTIVE


def teardown() -> None:
    """Remove every patch and listener and write what is buffered."""
    global _ACTIVE
    with _LOCK:
        runtime, _ACTIVE = _ACTIVE, None
    if runtime is not None:
        runtime.close()
    faults.reset()
