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
"""``instrument-report points``: what this host's nova would record.

::

    instrument-report points [--json] [--config-file FILE]...
                             [--config-dir DIR]...

The configuration is read as nova reads it (oslo.config: the
``--config-file``/``--config-dir`` given, else nova's default files,
``/etc/nova/nova.conf``...).  Every point of every installed target
is resolved against the nova (and libraries) installed here
(``instrument.runtime.survey``); the first line of the text output is
a Nagios summary, then the releases, the targets, the effective
``[instrument]`` options, each point with its status and why, and the
metric families.  ``--json`` prints the same as one JSON document.

Exit status (Nagios): 0 OK, every point patched (or waiting for its
objects); 1 WARNING, the instrumentation is off, a release was not
surveyed or a point waits for a module that is not imported; 2
CRITICAL, a point is missing (no such attribute, or an argument it
reads, in this release) or failed, or a target failed; 3 UNKNOWN, the
configuration cannot be read or an ``[instrument]`` option is
invalid.
"""

import argparse
import json
import logging
import sys
import typing

from oslo_config import cfg

from instrument import opts
from instrument.runtime import survey

PROG = 'instrument-report points'


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        add_help=True,
        description='List every point and metric this host\'s nova would '
        'get, as configured, with a Nagios exit status. '
        'Other options (--config-file, --config-dir) are '
        'oslo.config\'s, as nova takes them.',
    )
    parser.add_argument(
        '--json',
        action='store_true',
        help='one JSON document instead of the text',
    )
    return parser


def load_config(args: list) -> cfg.ConfigOpts:
    """nova's configuration as oslo.config parses it for nova."""
    conf = cfg.ConfigOpts()
    opts.register_opts(conf)
    conf(args, project='nova', prog=PROG)
    return conf


def render_text(result: dict, summary: str) -> str:
    lines = [summary, '']
    lines.append('Releases installed:')
    for dist, version in sorted(result['releases'].items()):
        note = result['surveyed'].get('%s %s' % (dist, version))
        lines.append(
            '  %s %s%s' % (dist, version, ' (%s)' % note if note else '')
        )
    lines.append('')
    lines.append('Targets:')
    for name, status in result['targets'].items():
        lines.append('  %-20s %s' % (name, status))
    lines.append('')
    lines.append('[instrument] options in effect:')
    for name, value in result['options'].items():
        if isinstance(value, list):
            value = ', '.join(value)
        lines.append('  %s = %s' % (name, value))
    lines.append('')
    c = result['counts']
    lines.append(
        'Points: %s' % ', '.join('%d %s' % (c[k], k) for k in survey.STATUSES)
    )
    order = {
        k: n
        for n, k in enumerate(
            (survey.MISSING, survey.FAILED, survey.PENDING, survey.PATCHED)
        )
    }
    for entry in sorted(
        result['points'],
        key=lambda p: (order.get(p['status'], 9), p['target'], p['point']),
    ):
        lines.append(
            '  %-8s %-14s %s'
            % (entry['status'], entry['target'], entry['point'])
        )
        if entry['why'] and entry['status'] != survey.PATCHED:
            lines.append('           %s' % entry['why'])
    lines.append('')
    metrics = result['metrics']
    if metrics['enabled']:
        lines.append(
            'Metrics (written to %s; instrument-metrics serve or '
            'dump exposes them):' % metrics['metrics_dir']
        )
    else:
        lines.append(
            'Metrics: off ([instrument] metrics_dir is not set); '
            'with it, these families:'
        )
    for family in metrics['families']:
        lines.append(
            '  %s (%s) {%s}'
            % (family['name'], family['type'], ', '.join(family['labels']))
        )
    return '\n'.join(lines) + '\n'


def main(
    argv: typing.Sequence[str] | None = None,
    targets: typing.Sequence | None = None,
) -> int:
    """Run the command; returns the Nagios exit status (``targets``
    replace the installed ones: tests)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, rest = build_parser().parse_known_args(argv)
    try:
        conf = load_config(rest)
    except SystemExit as exc:
        # oslo.config's argparse said why on standard error.
        status, summary = survey.unknown(
            'bad arguments for the configuration: %s' % ' '.join(rest)
            if exc.code
            else 'help shown'
        )
        if not exc.code:
            return 0
        return _emit(args, status, summary, None)
    except cfg.Error as exc:
        status, summary = survey.unknown(
            'cannot read the configuration: %s' % exc
        )
        return _emit(args, status, summary, None)
    # What the runtime would log at start-up is in the result.
    logger = logging.getLogger('instrument')
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        result = survey.survey(conf, targets=targets)
    except opts.InvalidOption as exc:
        status, summary = survey.unknown(str(exc))
        return _emit(args, status, summary, None)
    finally:
        logger.setLevel(level)
        conf.reset()
    status, summary = survey.verdict(result)
    return _emit(args, status, summary, result)


def _emit(args, status: int, summary: str, result) -> int:
    if args.json:
        doc = {
            'status': survey.STATE_NAMES[status],
            'exit': status,
            'summary': summary,
        }
        if result is not None:
            doc.update(result)
        sys.stdout.write(
            json.dumps(doc, indent=2, sort_keys=True, default=str) + '\n'
        )
    elif result is None:
        sys.stdout.write(summary + '\n')
    else:
        sys.stdout.write(render_text(result, summary))
    sys.stdout.flush()
    return status


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
