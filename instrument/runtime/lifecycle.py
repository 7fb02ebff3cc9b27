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
the sinks, the buffer, the recorder and the tracer, and runs the
lifecycle of every target (``instrument.targets`` entry points, see
``instrument.targets.base``): each is checked, then installed with its
own patcher, under fault isolation (a target whose install fails is
reported and undone, the others run).  The start-up banner names every
point by status and every target that did not run, and why.  ``setup``
is idempotent: the first successful call in a process wins and later
calls return the same runtime.  ``teardown()`` removes the targets in
reverse order and writes what is buffered.

The writer is held until set-up is done, so the header it writes first
(``process.start``) names every point applied.
"""

import socket
import threading
import typing

from oslo_config import cfg
from oslo_log import log as logging
from stevedore import extension

from instrument import opts
from instrument import schema
from instrument import sinks as sink
from instrument import version as version_mod
from instrument.patching import patcher as patcher_mod
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import faults
from instrument.runtime import metrics as metrics_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import settings
from instrument.runtime import startlog
from instrument.runtime import threads
from instrument.runtime import tracer as tracer_mod
from instrument.sinks import metrics as metrics_sink
from instrument.targets import base as targets_base

LOG = logging.getLogger(__name__)

TARGETS_NAMESPACE = 'instrument.targets'

_ACTIVE = None
_LOCK = threading.Lock()


def _host(conf: cfg.ConfigOpts) -> str:
    if conf.instrument.host:
        return conf.instrument.host
    try:
        host = conf.host
    except (cfg.NoSuchOptError, AttributeError):
        host = None
    return host or socket.gethostname()


def load_targets() -> tuple:
    """``(targets, failures)``: an instance of every installed target,
    by name, and ``{name: reason}`` of those that could not be loaded.
    Loading imports the target modules only (never the library)."""
    failures = {}

    def failed(_manager, entrypoint, exc):
        LOG.error(
            'instrument: cannot load target %s: %s', entrypoint.name, exc
        )
        failures[entrypoint.name] = 'cannot load: %s' % exc

    mgr = extension.ExtensionManager(
        TARGETS_NAMESPACE, invoke_on_load=True, on_load_failure_callback=failed
    )
    loaded = []
    for ext in mgr:
        target = ext.obj
        if not isinstance(target, targets_base.Target):
            # The first form of the entry point: a function returning
            # patch points.
            target = targets_base.PointsTarget(target)
            target.name = ext.name
        elif target.name is None:
            target.name = ext.name
        loaded.append(target)
    return sorted(loaded, key=lambda t: t.name), failures


def _targets(points=None, targets=None) -> tuple:
    """The targets of a set-up: ``targets`` when given; else the
    installed ones, where ``points`` (when given) replace those that
    record a library's calls (``process_wide`` ones stay)."""
    if targets is not None:
        return list(targets), {}
    loaded, failures = load_targets()
    if points is not None:
        loaded = [targets_base.PointsTarget(points)] + [
            t for t in loaded if t.process_wide
        ]
    return loaded, failures


class Runtime:
    """Everything one process runs for instrumentation."""

    def __init__(self, conf, identity, buffer, recorder, tracer) -> None:
        self.conf = conf
        self.identity = identity
        self.buffer = buffer
        self.recorder = recorder
        self.tracer = tracer
        # Installed targets, in order of install; the status of every
        # target of the set-up by name.
        self.targets = []
        self.status = {}
        self._install_faults = {}
        self._faults_reported: typing.Optional[dict] = None
        # faults.changes() when the counts were last summed
        self._faults_seen: typing.Optional[tuple] = None

    # -- targets --------------------------------------------------------------

    def install(self, targets, failures=None) -> None:
        """Check and install ``targets`` in turn; a failure of one is
        counted, logged, undone and reported, and the next one runs."""
        for name, reason in (failures or {}).items():
            self.status[name] = '%s: %s' % (targets_base.FAILED, reason)
        targets = list(targets)
        for target in targets:
            name = target.name
            try:
                reason = target.check(self.conf)
            except Exception as exc:
                self._fault(name, exc)
                continue
            if reason:
                self.status[name] = '%s: %s' % (targets_base.SKIPPED, reason)
                LOG.info(
                    'instrument: target %s not installed: %s', name, reason
                )
                continue
            ctx = targets_base.Context(
                self.conf,
                self.recorder,
                self.tracer,
                patcher_mod.Patcher([], self.recorder, target.release),
                targets,
            )
            # Listed first: a set-up that stops half-way removes it too.
            self.targets.append(target)
            try:
                target.install(ctx)
            except Exception as exc:
                self.targets.remove(target)
                self._fault(name, exc)
                try:
                    target.remove()
                except Exception:
                    LOG.exception('instrument: undoing target %s', name)
                continue
            self.status[name] = targets_base.INSTALLED

    def _fault(self, name: str, exc: Exception) -> None:
        counter = self._install_faults.get(name)
        if counter is None:
            counter = self._install_faults[name] = faults.Faults(
                'target %s' % name,
                what='it is not installed, the other targets are',
            )
        counter(exc)
        self.status[name] = '%s: %s: %s' % (
            targets_base.FAILED,
            tracer_mod.error_class(exc),
            tracer_mod.short_message(exc),
        )

    def target(self, name: str):
        """The installed target ``name``, or None."""
        for target in self.targets:
            if target.name == name:
                return target
        return None

    def banner(self) -> dict:
        """Every installed point by status (see ``Patcher.banner``)."""
        banners = [t.banner() for t in self.targets]
        # the start-up log's one place, patched before any target
        status = startlog.place_status()
        if status is not None:
            banners.append({status: [startlog.PLACE]})
        return patcher_mod.merge_banners(b for b in banners if b is not None)

    def point_state(self, name: str):
        """The state (fault count, active) of point ``name``."""
        for target in self.targets:
            if target.patcher is not None:
                try:
                    return target.patcher.state(name)
                except KeyError:
                    pass
        raise KeyError(name)

    def log_banner(self) -> None:
        patcher_mod.log_totals(self.banner())
        for target in self.targets:
            if target.patcher is not None:
                target.patcher.log_banner(totals=False)

    # -- the span log --------------------------------------------------------

    def header(self) -> list:
        group = self.conf.instrument
        # Before the banner is read: a point added later is announced.
        for target in self.targets:
            if target.patcher is not None:
                target.patcher.headed = True
        return [
            self.identity.start_record(
                {
                    schema.ATTR_VERSION: version_mod.version(),
                    schema.ATTR_RELEASES: version_mod.releases(),
                    schema.ATTR_MODE: 'eventlet'
                    if threads.eventlet_patched()
                    else 'threads',
                    schema.ATTR_POINTS: self.banner(),
                    schema.ATTR_TARGETS: dict(self.status),
                    schema.ATTR_OPTIONS: {
                        'services': list(group.services),
                        'sinks': list(group.sinks),
                        'sql_timing': group.sql_timing,
                        'slow_query_threshold': group.slow_query_threshold,
                        'detail_sample_rate': group.detail_sample_rate,
                    },
                    schema.ATTR_SETTINGS: settings.effective(self.conf),
                }
            )
        ]

    def report_faults(self, final: bool = False) -> None:
        """Writer periodic: an ``instrument.faults`` counter record
        whenever the fault counts of the process changed.  The counts
        are summed only when one was set since the last look
        (``faults.changes``): there is one counter per patch point."""
        changes = faults.changes()
        if changes == self._faults_seen:
            return
        self._faults_seen = changes
        totals = faults.totals()
        if totals and totals != self._faults_reported:
            self._faults_reported = totals
            self.recorder.counter(faults.EVENT, totals)

    def close(self) -> None:
        # Write first, so the start record still shows what was patched.
        self.buffer.drain(timeout=buffer_mod.EXIT_TIMEOUT)
        self.remove_targets()
        self.buffer.close()

    def remove_targets(self) -> None:
        """Remove every installed target, the last installed first."""
        while self.targets:
            target = self.targets.pop()
            try:
                target.remove()
            except Exception:
                LOG.exception('instrument: removing target %s', target.name)
        startlog.remove()


def setup(
    conf: cfg.ConfigOpts,
    service_name: str | None = None,
    points=None,
    targets=None,
):
    """Start instrumenting this process as configured in ``conf``.

    ``service_name`` is the program (``nova-compute``); it names the span
    file.  ``points`` replace the patch points of the installed targets
    (tests, other projects; the process-wide targets, SQL timing and the
    flush at exit, still run); ``targets`` (``Target`` instances)
    replace the installed targets altogether.  Returns the ``Runtime``,
    or None when ``[instrument] enabled`` is False.  Raises
    ``opts.InvalidOption`` naming the option when a value cannot be
    used.
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
        runtime: typing.Any = None  # set below; the header is read later
        buf = buffer_mod.EventBuffer(
            sinks,
            group.buffer_size,
            group.flush_interval,
            identity,
            header=lambda: runtime.header(),
        )
        # The writer starts once everything is set up: its first drain
        # writes the header, which names the points.
        buf.hold()
        try:
            recorder = recorder_mod.Recorder(
                buf, identity, group.detail_sample_rate
            )
            runtime = Runtime(
                conf, identity, buf, recorder, tracer_mod.Tracer(recorder)
            )
            runtime.install(*_targets(points, targets))
            runtime.log_banner()
            buf.add_periodic(runtime.report_faults)
            if group.metrics_dir:
                buf.add_observer(
                    metrics_mod.Metrics(
                        metrics_sink.StateFile(group.metrics_dir, identity),
                        group.flush_interval,
                        group.metrics_max_series,
                    )
                )
            buf.release()
        except BaseException:
            # Half a start is worse than none: undo what was done.
            _undo(runtime, buf)
            raise
        _ACTIVE = runtime
        LOG.info(
            'instrument: recording %s on %s to %s',
            identity.service,
            identity.host,
            ', '.join(group.sinks),
        )
        return runtime


def _undo(runtime, buf) -> None:
    for step in (runtime and runtime.remove_targets, buf.close):
        if step:
            try:
                step()
            except Exception:
                LOG.exception('instrument: undoing a failed start')


def active():
    """The running ``Runtime`` or None."""
    return _ACTIVE


def teardown() -> None:
    """Remove every target and write what is buffered."""
    global _ACTIVE
    with _LOCK:
        runtime, _ACTIVE = _ACTIVE, None
    if runtime is not None:
        runtime.close()
    faults.reset()
