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
"""Survey the patch points against the nova installed in this venv.

``survey`` (run with a tox env's python) imports every module that
``instrument.targets.oslo_messaging.points()`` and
``instrument.targets.nova.points()`` name, resolves each point and its
``alternatives``, and writes JSON: found or not, the parameters of what
was found, and whether the arguments the point reads by name are
parameters of it.  ``table``
reads several such files (one per release) and prints the comparison as
reStructuredText, the first file being the reference release::

    .tox/functional-nova29/bin/python tools/survey_points.py survey \\
        > survey-29.json
    python3 tools/survey_points.py table survey-34.json survey-29.json ...

Only imports and ``inspect``: no nova service is started.  Eventlet is
not monkey-patched (OS_NOVA_DISABLE_EVENTLET_PATCHING=1 is set before
nova is imported), which does not change what a module defines.
"""

import importlib
import inspect
import json
import os
import sys

# Arguments that a hook reads without an ``Arg``: (point name,
# argument name, position or None).  None: every argument a point
# reads is an ``Arg``, found from the signature
# (``PatchPoint.arguments``: its extractors, ``reads`` and ``places``
# hooks).
FIXED: tuple = ()

# Other places where the code of a point may live in some release,
# probed besides the point's own ``alternatives`` (what a new
# alternative would name).
PROBES = {
    'nova.thread_pool_factory:spawn_on': (
        ('nova.utils', 'spawn_on'),
        ('nova.utils', 'spawn'),
        ('nova.utils', 'spawn_n'),
    ),
}

# Places that are not points of targets/nova/ but that the runtime
# relies on: the concrete drivers whose ``spawn`` the load_compute_driver
# hook times, and oslo.db's retry decorator
# (instrument/targets/sqlalchemy/retries.py).
EXTRA = (
    ('nova.virt.fake', 'FakeDriver.spawn', ('instance',)),
    ('nova.virt.libvirt.driver', 'LibvirtDriver.spawn', ('instance',)),
    ('oslo_db.api', 'wrap_db_retry._is_exception_expected', ()),
)


def _resolve(module_name, target):
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 (any import failure is data)
        return None, 'module: %s: %s' % (exc.__class__.__name__, exc)
    obj = module
    for part in target.split('.'):
        if not hasattr(obj, part):
            return None, 'attribute %s' % part
        obj = getattr(obj, part)
    return obj, None


def _params(func):
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    if params and params[0].name in ('self', 'cls'):
        params = params[1:]
    out = []
    for param in params:
        prefix = {
            param.VAR_POSITIONAL: '*',
            param.VAR_KEYWORD: '**',
            param.KEYWORD_ONLY: 'kw:',
        }.get(param.kind, '')
        out.append(prefix + param.name)
    return out


def _where(func):
    try:
        func = inspect.unwrap(func)
        return '%s:%d' % (
            os.path.relpath(inspect.getsourcefile(func), _site()),
            inspect.getsourcelines(func)[1],
        )
    except (TypeError, OSError):
        return None


def _site():
    import sysconfig

    return sysconfig.get_paths()['purelib']


def _position(params, name):
    for n, param in enumerate(params):
        if param.startswith(('*', 'kw:')):
            break
        if param == name:
            return n
    if 'kw:' + name in params:
        return -1
    return None


def _arg_names(point):
    from instrument.patching import patcher

    if point.kind not in (patcher.SPAN, patcher.HOOK):
        return []
    return [('argument', spec.name, None) for spec in point.arguments()]


def _version(dist):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def survey() -> dict:
    os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
    from instrument.targets import nova
    from instrument.targets import oslo_messaging

    out = {
        'versions': {
            d: _version(d)
            for d in (
                'nova',
                'oslo.messaging',
                'oslo.db',
                'oslo.service',
                'eventlet',
                'SQLAlchemy',
                'openstack-placement',
            )
        },
        'points': [],
        'extra': [],
    }
    fixed = {}
    for name, arg, pos in FIXED:
        fixed.setdefault(name, []).append((arg, pos))
    for point in oslo_messaging.points() + nova.points():
        entry = {'name': point.name, 'event': point.event, 'candidates': []}
        places = point.candidates()
        places += [p for p in PROBES.get(point.name, ()) if p not in places]
        for module, target in places:
            obj, error = _resolve(module, target)
            cand = {
                'module': module,
                'target': target,
                'found': obj is not None,
                'error': error,
                'probe': (module, target) not in point.candidates(),
            }
            if obj is not None:
                params = _params(obj)
                cand['params'] = params
                cand['where'] = _where(obj)
                problems = []
                checks = list(_arg_names(point))
                checks += [
                    ('fixed', a, p) for a, p in fixed.get(point.name, ())
                ]
                for field, arg, pos in checks:
                    if params is None:
                        continue
                    at = _position(params, arg)
                    if at is None and '**kwargs' not in params:
                        problems.append('%s: no argument %r' % (field, arg))
                    elif at is None:
                        problems.append(
                            '%s: %r only through **kwargs' % (field, arg)
                        )
                    elif pos is not None and at != pos:
                        problems.append(
                            '%s: %r at %s, expected %s' % (field, arg, at, pos)
                        )
                    elif pos is not None and params[pos] != arg:
                        problems.append(
                            '%s: %r expected at %s, found %r'
                            % (field, arg, pos, params[pos])
                        )
                cand['problems'] = problems
            entry['candidates'].append(cand)
        out['points'].append(entry)
    for module, target, needed in EXTRA:
        obj, error = _resolve(module, target)
        params = _params(obj) if obj is not None else None
        entry = {
            'name': '%s:%s' % (module, target),
            'found': obj is not None,
            'error': error,
            'params': params,
            'where': _where(obj) if obj is not None else None,
            'problems': [
                n
                for n in needed
                if params is not None and _position(params, n) is None
            ],
        }
        if module == 'oslo_db.api' and obj is not None:
            # retries.py reads the retry loop's locals by name.
            call = (
                inspect.getsource(obj.__self__.__class__.__call__)
                if hasattr(obj, '__self__')
                else inspect.getsource(_resolve(module, 'wrap_db_retry')[0])
            )
            for local in ('remaining', 'f'):
                if local not in call:
                    entry['problems'].append(
                        'retry loop has no local %r' % local
                    )
        out['extra'].append(entry)
    return out


def _cell(entry, ref):
    """One table cell: how this release provides a point."""
    cands = entry['candidates']
    primary = cands[0]
    if primary['found']:
        theirs = ref['candidates'][0]
        if (primary['params'], primary['problems']) == (
            theirs.get('params'),
            theirs.get('problems'),
        ):
            return 'same', primary
        return 'signature', primary
    found = [c for c in cands[1:] if c['found']]
    if found:
        first = found[0]
        text = '%s %s:%s' % (
            'probe' if first['probe'] else 'alt',
            first['module'],
            first['target'],
        )
        if len(found) > 1:
            text += ' (also %s)' % ', '.join(
                '%s:%s' % (c['module'], c['target']) for c in found[1:]
            )
        return text, first
    return 'missing', primary


def table(paths) -> str:
    data = []
    for path in paths:
        with open(path) as f:
            data.append(json.load(f))
    ref = {p['name']: p for p in data[0]['points']}
    heads = ['point'] + ['nova %s' % d['versions']['nova'] for d in data]
    rows = []
    notes = []
    for n, entry in enumerate(data[0]['points']):
        row = ['``%s``' % entry['name']]
        for d in data:
            mine = d['points'][n]
            text, cand = _cell(mine, ref[entry['name']])
            row.append(text)
            if text != 'same':
                ref_params = ref[entry['name']]['candidates'][0].get('params')
                notes.append(
                    '%s, nova %s: %s; %s%s'
                    % (
                        entry['name'],
                        d['versions']['nova'],
                        text,
                        '; '.join(cand.get('problems') or ())
                        or (cand.get('error') or ''),
                        ''
                        if cand.get('params') == ref_params
                        or not cand.get('params')
                        else ' params %s (reference %s)'
                        % (cand.get('params'), ref_params),
                    )
                )
        rows.append(row)
    widths = [
        max(len(r[i]) for r in rows + [heads]) for i in range(len(heads))
    ]
    line = ' '.join('=' * w for w in widths)
    out = [line]
    for row in [heads, None] + rows + [None]:
        if row is None:
            out.append(line)
            continue
        out.append(
            ' '.join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        )
    out.append('')
    out.extend('* ' + note for note in notes)
    out.append('')
    for d in data:
        out.append(
            '* nova %s: %s'
            % (
                d['versions']['nova'],
                ', '.join(
                    '%s %s' % (k, v)
                    for k, v in d['versions'].items()
                    if k != 'nova'
                ),
            )
        )
        for extra in d['extra']:
            if not extra['found'] or extra['problems']:
                out.append(
                    '  %s: %s %s'
                    % (extra['name'], extra['error'], extra['problems'])
                )
    return '\n'.join(out)


def main(argv) -> int:
    if argv[:1] == ['survey']:
        json.dump(survey(), sys.stdout, indent=1)
        print()
        return 0
    if argv[:1] == ['table'] and len(argv) > 1:
        print(table(argv[1:]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
