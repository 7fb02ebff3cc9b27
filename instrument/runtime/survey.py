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
"""What a host records, asked directly (``instrument-report points``).

``survey(conf)`` runs the runtime's own target lifecycle
(``instrument.runtime.lifecycle.Runtime.install``: each target checked,
then installed with its patcher) in the calling process, with a buffer
that writes nowhere, then imports every module its points name, so
that the patcher's post-import hooks resolve each point as they would
in nova: patched, missing (no such attribute in the installed
release) or failed.  A patched point whose target's signature cannot
pass an argument the point reads (``PatchPoint.unread``, the check by
name the wrappers make) is missing too: it would record None.  A
``per_object`` point stays pending (it is patched on each object at
run time), as does one whose module is not installed here (a DB
driver this host does not use).  Everything is removed before
``survey`` returns.  This imports nova: run it in a process of its
own (the command is one), never in a nova service.

The result names the releases installed, the targets that run or not
and why, the effective ``[instrument]`` options, every point with its
status and why, and the metric families the process would expose;
``verdict`` turns it into a Nagios status (``OK``, ``WARNING``,
``CRITICAL``, ``UNKNOWN``) and a one-line summary.
"""

import importlib
import sys
import typing

from oslo_config import cfg

from instrument import opts
from instrument import version as version_mod
from instrument.patching import patcher as patcher_mod
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import lifecycle
from instrument.runtime import metrics as metrics_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracer_mod
from instrument.targets import base as targets_base

PATCHED = patcher_mod.PATCHED
PENDING = patcher_mod.PENDING
MISSING = patcher_mod.MISSING
FAILED = patcher_mod.FAILED
STATUSES = (PATCHED, PENDING, MISSING, FAILED)

# Nagios plugin exit statuses.
OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATE_NAMES = ('OK', 'WARNING', 'CRITICAL', 'UNKNOWN')
SERVICE = 'INSTRUMENT POINTS'

# What a pending point is waiting for, as ``why`` says it.
WHY_PER_OBJECT = 'per object: patched on each object at run time'
WHY_ABSENT = 'not installed here:'

# Names listed in the summary line at most.
SUMMARY_NAMES = 3


def _surveyed(target: targets_base.Target, releases: dict) -> list:
    """[(distribution, version, note)] for the releases ``target``'s
    points were surveyed on (``Target.surveyed``)."""
    out = []
    for dist, versions in target.surveyed.items():
        found = releases.get(dist)
        if found is None:
            continue
        if found in versions:
            note = 'surveyed'
        elif any(_series(v) == _series(found) for v in versions):
            note = 'a point release of a surveyed one (%s)' % ', '.join(
                versions
            )
        else:
            note = 'not surveyed (points are for %s)' % ', '.join(versions)
        out.append((dist, found, note))
    return out


def _series(version: str) -> tuple:
    return tuple(version.split('.')[:2])


def _import_all(patchers) -> dict:
    """Import every module a point names (each post-import hook
    patches what it can); {module: error} of those that fail, None
    for one that is not installed."""
    modules = []
    for patcher in patchers:
        for point in patcher.points:
            for module, _target in point.candidates():
                if module not in modules:
                    modules.append(module)
    errors: dict[str, str | None] = {}
    for module in modules:
        if module in sys.modules:
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and (
                module == exc.name or module.startswith(exc.name + '.')
            ):
                # Not installed (a driver this host does not use).
                errors[module] = None
            else:
                errors[module] = '%s: %s' % (
                    tracer_mod.error_class(exc),
                    tracer_mod.short_message(exc),
                )
        except Exception as exc:
            errors[module] = '%s: %s' % (
                tracer_mod.error_class(exc),
                tracer_mod.short_message(exc),
            )
    return errors


def _function(original):
    """The function a patched callable was (a staticmethod or
    classmethod's ``__func__``)."""
    return getattr(original, '__func__', original)


def describe(
    patcher: patcher_mod.Patcher,
    point: patcher_mod.PatchPoint,
    import_errors: dict,
    release: str,
) -> dict:
    """One point: its place, event, status and why."""
    status = patcher.status(point.name)
    key = status.split(':', 1)[0]
    out = {
        'point': point.name,
        'kind': point.kind,
        'event': point.event or None,
        'service': point.service,
    }
    why = ''
    if key == PATCHED:
        used = patcher.state(point.name).used
        out['place'] = used
        why = 'patched at %s' % used
        original = patcher.original(point.name)
        if (
            point.kind
            in (patcher_mod.SPAN, patcher_mod.HOOK, patcher_mod.REPLACE)
            and original is not None
        ):
            unread = point.unread(_function(original))
            if unread:
                key = MISSING
                why = (
                    '%s has no argument %s that the point reads (it '
                    'would record None)' % (used, ', '.join(unread))
                )
    elif key == MISSING:
        why = 'not in %s: %s' % (
            release,
            '; '.join('%s has no %s' % (m, t) for m, t in point.candidates()),
        )
    elif key == FAILED:
        why = status.split(':', 1)[1].strip()
    elif key == PENDING:
        failed = [
            (m, import_errors[m])
            for m, _t in point.candidates()
            if m in import_errors
        ]
        absent = [m for m, error in failed if error is None]
        if point.per_object:
            why = WHY_PER_OBJECT
        elif absent and len(absent) == len(failed):
            why = '%s %s: %s' % (
                WHY_ABSENT,
                ', '.join(absent),
                'patched if a process imports it',
            )
        elif failed:
            key = MISSING
            why = '; '.join(
                '%s cannot be imported: %s' % f
                for f in failed
                if f[1] is not None
            )
        else:
            why = 'module not imported yet'
    out['status'] = key
    out['why'] = why
    return out


def families(enabled: bool) -> list:
    """The metric families a process exposes (with ``metrics_dir``)."""
    return [
        {
            'name': name,
            'type': kind,
            'labels': ['service'] + list(labels),
            'help': text,
            'enabled': enabled,
        }
        for name, (kind, text, labels) in metrics_mod.FAMILIES.items()
    ]


def options(conf) -> dict:
    """The effective ``[instrument]`` options (secret ones masked)."""
    group = getattr(conf, opts.GROUP)
    out = {}
    for _group, opt_list in opts.list_opts():
        for opt in opt_list:
            value = getattr(group, opt.dest)
            out[opt.dest] = '***' if opt.secret and value else value
    return out


def survey(
    conf: cfg.ConfigOpts,
    targets: typing.Sequence | None = None,
    service: str = 'instrument-points',
) -> dict:
    """Everything this host's nova would record, as configured in
    ``conf`` (a parsed ``ConfigOpts``); ``targets`` replace the
    installed ones (tests).  Raises ``opts.InvalidOption`` for an
    option that cannot be used."""
    opts.register_opts(conf)
    opts.validate(conf)
    group = conf.instrument
    releases = version_mod.releases()
    identity = process.ProcessIdentity.create(service, group.host)
    buf = buffer_mod.EventBuffer(
        [], group.buffer_size, group.flush_interval, identity
    )
    # Nothing is ever written: the writer is held until the buffer is
    # closed, with no sink.
    buf.hold()
    recorder = recorder_mod.Recorder(buf, identity, group.detail_sample_rate)
    runtime = lifecycle.Runtime(
        conf, identity, buf, recorder, tracer_mod.Tracer(recorder)
    )
    if targets is None:
        loaded, failures = lifecycle.load_targets()
    else:
        loaded, failures = list(targets), {}
    points = []
    surveyed = {}
    try:
        runtime.install(loaded, failures)
        patchers = [
            t.patcher for t in runtime.targets if t.patcher is not None
        ]
        import_errors = _import_all(patchers)
        for target in runtime.targets:
            if target.patcher is None:
                continue
            release = target.release or 'the library'
            found = releases.get(release)
            label = '%s %s' % (release, found) if found else release
            for dist, version, note in _surveyed(target, releases):
                surveyed['%s %s' % (dist, version)] = note
            for point in target.patcher.points:
                entry = describe(target.patcher, point, import_errors, label)
                entry['target'] = target.name
                points.append(entry)
    finally:
        runtime.remove_targets()
        buf.close(timeout=1.0)
    metrics_on = bool(group.metrics_dir)
    return {
        'enabled': bool(group.enabled),
        'releases': releases,
        'surveyed': surveyed,
        'targets': dict(sorted(runtime.status.items())),
        'options': options(conf),
        'points': points,
        'counts': counts(points),
        'metrics': {
            'metrics_dir': group.metrics_dir,
            'enabled': metrics_on,
            'families': families(metrics_on),
        },
    }


def counts(points: list) -> dict:
    out = dict.fromkeys(STATUSES, 0)
    for entry in points:
        out[entry['status']] = out.get(entry['status'], 0) + 1
    return out


def _names(names: list) -> str:
    shown = ', '.join(names[:SUMMARY_NAMES])
    if len(names) > SUMMARY_NAMES:
        shown += ' and %d more' % (len(names) - SUMMARY_NAMES)
    return shown


def verdict(result: dict) -> tuple:
    """(exit status, one-line Nagios summary with performance data):
    CRITICAL when a point is missing or failed or a target failed,
    WARNING when the instrumentation is off, a release was not
    surveyed or a point waits for a module (a per-object point does
    not: that is its normal state), else OK."""
    points = result['points']
    bad = [p['point'] for p in points if p['status'] in (MISSING, FAILED)]
    failed_targets = sorted(
        name
        for name, status in result['targets'].items()
        if status.startswith(targets_base.FAILED)
    )
    waiting = [
        p['point']
        for p in points
        if p['status'] == PENDING
        and p['why'] != WHY_PER_OBJECT
        and not p['why'].startswith(WHY_ABSENT)
    ]
    unsurveyed = sorted(
        k
        for k, note in result['surveyed'].items()
        if note.startswith('not surveyed')
    )
    nova = result['releases'].get('nova')
    where = 'nova %s' % nova if nova else 'nova not installed'
    c = result['counts']
    if bad or failed_targets:
        status = CRITICAL
        parts = []
        if bad:
            parts.append(
                '%d point%s missing: %s'
                % (len(bad), '' if len(bad) == 1 else 's', _names(bad))
            )
        if failed_targets:
            parts.append(
                'target%s failed: %s'
                % (
                    '' if len(failed_targets) == 1 else 's',
                    _names(failed_targets),
                )
            )
        text = '; '.join(parts)
    elif not result['enabled'] or waiting or unsurveyed:
        status = WARNING
        parts = []
        if not result['enabled']:
            parts.append('[instrument] enabled is False')
        if unsurveyed:
            parts.append('%s not surveyed' % ', '.join(unsurveyed))
        if waiting:
            parts.append(
                '%d point%s pending: %s'
                % (
                    len(waiting),
                    '' if len(waiting) == 1 else 's',
                    _names(waiting),
                )
            )
        text = '; '.join(parts)
    else:
        status = OK
        text = (
            '%d points patched, %d pending (per object or not '
            'installed), 0 missing' % (c[PATCHED], c[PENDING])
        )
    perf = ' '.join('%s=%d' % (k, c[k]) for k in STATUSES)
    return status, '%s %s - %s (%s) | %s' % (
        SERVICE,
        STATE_NAMES[status],
        text,
        where,
        perf,
    )


def unknown(reason: str) -> tuple:
    """(UNKNOWN, its summary line): the survey could not be made."""
    return UNKNOWN, '%s %s - %s' % (
        SERVICE,
        STATE_NAMES[UNKNOWN],
        ' '.join(reason.split()),
    )
