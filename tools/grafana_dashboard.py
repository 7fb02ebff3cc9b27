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
"""Generate ``etc/grafana/instrument-dashboard.json``, the Grafana
dashboard of the live metrics (``doc/source/metrics.rst``).

``python tools/grafana_dashboard.py > etc/grafana/instrument-dashboard.json``
after editing a panel; ``tests/unit/test_grafana_dashboard.py`` checks
that the committed file is this script's output, and that every metric
its queries name is one ``instrument-metrics`` emits.
"""

import json
import sys

# Every query is filtered by the dashboard's variables.
SEL = 'service=~"$service",instance=~"$instance"'
RATE = '[$__rate_interval]'


def _q(metric: str, extra: str = '') -> str:
    """``metric{<variables>[,extra]}``."""
    return '%s{%s%s}' % (metric, SEL, ',' + extra if extra else '')


def _p(q: float, by: str, metric: str, extra: str = '') -> str:
    """The ``q`` quantile of a histogram, by ``by``."""
    return 'histogram_quantile(%s, sum by (%s, le) (rate(%s%s)))' % (
        q,
        by,
        _q(metric + '_bucket', extra),
        RATE,
    )


def _rate(by: str, metric: str, extra: str = '', top: int = 0) -> str:
    expr = 'sum by (%s) (rate(%s%s))' % (by, _q(metric, extra), RATE)
    return 'topk(%d, %s)' % (top, expr) if top else expr


# (title, unit, description, [(expr, legend)]) per row of panels.
ROWS = [
    (
        'Calls',
        [
            (
                'p95 latency per component',
                's',
                (
                    'The 95th percentile of every instrumented call (span) of '
                    'each '
                    'component.'
                ),
                [
                    (
                        _p(
                            0.95,
                            'component',
                            'instrument_span_duration_seconds',
                        ),
                        '{{component}}',
                    )
                ],
            ),
            (
                'p50 / p95 / p99 per event (top 10 by p95)',
                's',
                'Latency of the slowest events.',
                [
                    (
                        'topk(10, %s)'
                        % _p(q, 'event', 'instrument_span_duration_seconds'),
                        'p%d {{event}}' % round(q * 100),
                    )
                    for q in (0.5, 0.95, 0.99)
                ],
            ),
            (
                'Calls per second per component',
                'reqps',
                'Instrumented calls that ended, per second.',
                [
                    (
                        _rate(
                            'component',
                            'instrument_span_duration_seconds_count',
                        ),
                        '{{component}}',
                    )
                ],
            ),
            (
                'Operation errors',
                'reqps',
                'Instrumented calls that raised, by event and exception '
                'class.',
                [
                    (
                        _rate(
                            'component, event, error',
                            'instrument_span_errors_total',
                        ),
                        '{{event}} {{error}}',
                    )
                ],
            ),
        ],
    ),
    (
        'SQL',
        [
            (
                'SQL time per query class (top 10)',
                's',
                (
                    'Seconds spent in SQL per second, by query class (the MD5 '
                    'of the fingerprint: instrument-report\'s SQL digest has '
                    'the text).'
                ),
                [
                    (
                        _rate(
                            'db, query',
                            'instrument_sql_duration_seconds_total',
                            top=10,
                        ),
                        '{{db}} {{query}}',
                    )
                ],
            ),
            (
                'SQL statements per kind',
                'ops',
                'Statements per second, by database and kind.',
                [
                    (
                        _rate('db, kind', 'instrument_sql_statements_total'),
                        '{{db}} {{kind}}',
                    )
                ],
            ),
            (
                'SQL deadlocks per query class',
                'ops',
                'Statements failed with a deadlock, per second.',
                [
                    (
                        _rate('db, query', 'instrument_sql_deadlocks_total'),
                        '{{db}} {{query}}',
                    )
                ],
            ),
            (
                'SQL errors and oslo.db retries',
                'ops',
                'Failed statements by exception class; wrap_db_retry retries.',
                [
                    (
                        _rate('db, error', 'instrument_sql_errors_total'),
                        'error {{db}} {{error}}',
                    ),
                    (
                        _rate(
                            'error, exhausted', 'instrument_db_retries_total'
                        ),
                        'retry {{error}} exhausted={{exhausted}}',
                    ),
                ],
            ),
            (
                'oslo.db retries per query class (top 10)',
                'ops',
                'wrap_db_retry retries caused by a failed statement, per '
                'database and query class of that statement.',
                [
                    (
                        _rate(
                            'db, query, exhausted',
                            'instrument_sql_retries_total',
                            top=10,
                        ),
                        '{{db}} {{query}} exhausted={{exhausted}}',
                    )
                ],
            ),
            (
                'Rows per second per query class (top 10)',
                'short',
                'Rows returned or changed, where the driver gave a count.',
                [
                    (
                        _rate(
                            'db, query', 'instrument_sql_rows_total', top=10
                        ),
                        '{{db}} {{query}}',
                    )
                ],
            ),
        ],
    ),
    (
        'Locks and pools',
        [
            (
                'Lock wait (seconds per second, top 10)',
                's',
                'Time waited on each oslo.concurrency lock per second: the '
                'average number of threads waiting on it.',
                [
                    (
                        _rate(
                            'lock', 'instrument_lock_wait_seconds_sum', top=10
                        ),
                        '{{lock}}',
                    )
                ],
            ),
            (
                'Lock wait p95',
                's',
                '95th percentile wait per lock.',
                [
                    (
                        _p(0.95, 'lock', 'instrument_lock_wait_seconds'),
                        '{{lock}}',
                    )
                ],
            ),
            (
                'Lock held (seconds per second, top 10)',
                's',
                'Time each lock was held per second.',
                [
                    (
                        _rate(
                            'lock',
                            'instrument_lock_held_seconds_total',
                            top=10,
                        ),
                        '{{lock}}',
                    )
                ],
            ),
            (
                'DB pool checkout wait p95, timeouts',
                's',
                'Checkouts that waited for a connection (95th percentile) and '
                'those that timed out (per second).',
                [
                    (
                        _p(0.95, 'db', 'instrument_db_pool_wait_seconds'),
                        'p95 {{db}}',
                    ),
                    (
                        _rate('db', 'instrument_db_pool_timeouts_total'),
                        'timeouts/s {{db}}',
                    ),
                ],
            ),
        ],
    ),
    (
        'Other services and periodic tasks',
        [
            (
                'Service calls by status',
                'reqps',
                'Calls through keystoneauth per second, by service type and '
                'status class (or failure: read_timeout ...).',
                [
                    (
                        _rate(
                            'service_type, status',
                            'instrument_service_request_duration_seconds_count',
                        ),
                        '{{service_type}} {{status}}',
                    )
                ],
            ),
            (
                'Service call p95',
                's',
                '95th percentile of the calls to each service type.',
                [
                    (
                        _p(
                            0.95,
                            'service_type',
                            'instrument_service_request_duration_seconds',
                        ),
                        '{{service_type}}',
                    )
                ],
            ),
            (
                'Periodic task p95',
                's',
                '95th percentile of each oslo.service periodic task\'s runs.',
                [
                    (
                        _p(
                            0.95,
                            'task',
                            'instrument_periodic_task_duration_seconds',
                        ),
                        '{{task}}',
                    )
                ],
            ),
        ],
    ),
    (
        'Instrumentation',
        [
            (
                'Dropped records',
                'ops',
                (
                    'Records the instrumentation lost, per host, service and '
                    'cause. '
                    'Anything but 0 means the span files and metrics '
                    'undercount.'
                ),
                [
                    (
                        _rate(
                            'instance, service, cause',
                            'instrument_dropped_events_total',
                        ),
                        '{{instance}} {{service}} {{cause}}',
                    )
                ],
            ),
            (
                'Buffer fill',
                'short',
                'Events queued in the buffer at the last process sample.',
                [
                    (
                        'max by (instance, service) (%s)'
                        % _q('instrument_buffer_events'),
                        '{{instance}} {{service}}',
                    )
                ],
            ),
            (
                'Points missing',
                'short',
                'Patch points missing (not in the installed nova release) or '
                'failed, per host and service; instrument-report points on '
                'the host names them.',
                [
                    (
                        'sum by (instance, service) (%s)'
                        % _q('instrument_points', 'status=~"missing|failed"'),
                        '{{instance}} {{service}}',
                    )
                ],
            ),
        ],
    ),
]


# The per-operation row: ``instrument-report follow``'s families (the
# cloud's requests, not a host's or a service's: no variable filters
# them but the operation).
OP = 'operation=~"$operation"'


def _op(metric: str, extra: str = '') -> str:
    """``metric{operation=~"$operation"[,extra]}``."""
    return '%s{%s%s}' % (metric, OP, ',' + extra if extra else '')


def _op_rate(by: str, metric: str, extra: str = '') -> str:
    return 'sum by (%s) (rate(%s%s))' % (by, _op(metric, extra), RATE)


ROWS.append(
    (
        'Operations, end to end (instrument-report follow)',
        [
            (
                'Finished requests per minute by operation and final state',
                'short',
                (
                    'Requests instrument-report follow finalised, per '
                    'operation and '
                    'final state (the batch report\'s operations section).'
                ),
                [
                    (
                        '%s * 60'
                        % _op_rate(
                            'operation, state',
                            'instrument_operation_requests_total',
                        ),
                        '{{operation}} {{state}}',
                    )
                ],
            ),
            (
                'p95 end to end of successful requests per operation',
                's',
                '95th percentile of the end-to-end time of the requests that '
                'succeeded (rescheduled ones too).',
                [
                    (
                        'histogram_quantile(0.95, %s)'
                        % _op_rate(
                            'operation, le',
                            'instrument_operation_duration_seconds_bucket',
                            'state=~"success|rescheduled_success"',
                        ),
                        '{{operation}}',
                    )
                ],
            ),
            (
                'Mean time per component of a successful request',
                's',
                (
                    'Exclusive time per component of the successful requests '
                    'whose '
                    'times count, per request: where the time of an operation '
                    'goes.'
                ),
                [
                    (
                        '%s / ignoring(component) group_left %s'
                        % (
                            _op_rate(
                                'operation, component',
                                'instrument_operation_component_seconds_total',
                            ),
                            _op_rate(
                                'operation',
                                'instrument_operation_timed_requests_total',
                            ),
                        ),
                        '{{operation}} {{component}}',
                    )
                ],
            ),
            (
                'Failures by component and class',
                'ops',
                (
                    'Errors of finished requests, once where raised, by '
                    'component, '
                    'event, exception class and fate (final, recovered by a '
                    'retry or '
                    'a reschedule, none).'
                ),
                [
                    (
                        _op_rate(
                            'operation, component, error, fate',
                            'instrument_operation_failures_total',
                        ),
                        '{{operation}} {{component}} {{error}} {{fate}}',
                    )
                ],
            ),
            (
                'Reschedules per minute',
                'short',
                'Attempts after an instance\'s first (a boot or resize '
                'rescheduled, another live-migration destination).',
                [
                    (
                        '%s * 60'
                        % _op_rate(
                            'operation',
                            'instrument_operation_reschedules_total',
                        ),
                        '{{operation}}',
                    )
                ],
            ),
            (
                'Follow: requests open, dropped, late events',
                'short',
                (
                    'instrument-report follow\'s own state: requests open, '
                    'and per second those dropped unfinished (--max-open) '
                    'and the events read after their request was finalised '
                    '(raise --lag if many).'
                ),
                [
                    ('sum(instrument_follow_open_requests)', 'open'),
                    (
                        'sum(rate(instrument_follow_dropped_requests_total%s))'
                        % RATE,
                        'dropped/s',
                    ),
                    (
                        'sum(rate(instrument_follow_late_events_total%s))'
                        % RATE,
                        'late/s',
                    ),
                ],
            ),
        ],
    )
)


# The findings row: the advisor's rules, run by ``instrument-report
# follow`` over its findings window (doc/source/findings.rst).
FINDING_BY = 'rule, section, option, host, service'
FINDING_LEGEND = '{{rule}} [{{section}}] {{option}} {{service}}@{{host}}'

ROWS.append(
    (
        'Findings: the nova.conf setting to change (instrument-report follow)',
        [
            (
                'Findings holding, with their share',
                'percentunit',
                (
                    'Each advisor finding over the follow mode\'s findings '
                    'window, per setting it names and service that ran '
                    'with it; the value is the share of the requests or '
                    'of their critical-path time it explains.  A line '
                    'ends when the cause left the window.'
                ),
                [
                    (
                        'max by (%s) (instrument_finding_share and '
                        'instrument_finding == 1)' % FINDING_BY,
                        FINDING_LEGEND,
                    )
                ],
            ),
            (
                'Setting values the findings name',
                'short',
                (
                    'The value each service ran with of the setting a '
                    'finding names (numbers and booleans), from its '
                    'start record.'
                ),
                [
                    (
                        'max by (%s) (instrument_finding_setting_value)'
                        % FINDING_BY,
                        FINDING_LEGEND,
                    )
                ],
            ),
            (
                'Findings window: requests, evaluations, left out',
                'short',
                (
                    'The finished requests in the findings window '
                    '(--findings-window), the rules\' runs per minute, '
                    'and per second what the window left out '
                    '(requests past --findings-max-requests, records '
                    'older than the window when read).'
                ),
                [
                    (
                        'sum(instrument_findings_window_requests)',
                        'requests in the window',
                    ),
                    (
                        'sum(rate(instrument_findings_evaluations_total%s))'
                        ' * 60' % RATE,
                        'evaluations/min',
                    ),
                    (
                        'sum by (why) (rate('
                        'instrument_findings_dropped_total%s))' % RATE,
                        'left out/s {{why}}',
                    ),
                ],
            ),
        ],
    )
)


def _op_variable() -> dict:
    query = 'label_values(instrument_operation_requests_total, operation)'
    return {
        'name': 'operation',
        'label': 'Operation',
        'type': 'query',
        'datasource': {'type': 'prometheus', 'uid': '${datasource}'},
        'query': {'query': query, 'refId': 'operation'},
        'definition': query,
        'refresh': 2,
        'multi': True,
        'includeAll': True,
        'allValue': '.*',
        'sort': 1,
        'current': {'text': 'All', 'value': '$__all'},
    }


def _variable(name: str, label: str) -> dict:
    query = 'label_values(instrument_span_duration_seconds_count, %s)' % (name)
    return {
        'name': name,
        'label': label,
        'type': 'query',
        'datasource': {'type': 'prometheus', 'uid': '${datasource}'},
        'query': {'query': query, 'refId': name},
        'definition': query,
        'refresh': 2,
        'multi': True,
        'includeAll': True,
        'allValue': '.*',
        'sort': 1,
        'current': {'text': 'All', 'value': '$__all'},
    }


def dashboard() -> dict:
    panels = []
    pid = 0
    y = 0
    for row_title, row in ROWS:
        pid += 1
        panels.append(
            {
                'id': pid,
                'type': 'row',
                'title': row_title,
                'collapsed': False,
                'panels': [],
                'gridPos': {'h': 1, 'w': 24, 'x': 0, 'y': y},
            }
        )
        y += 1
        for n, (title, unit, description, targets) in enumerate(row):
            pid += 1
            panels.append(
                {
                    'id': pid,
                    'type': 'timeseries',
                    'title': title,
                    'description': description,
                    'datasource': {
                        'type': 'prometheus',
                        'uid': '${datasource}',
                    },
                    'fieldConfig': {
                        'defaults': {'unit': unit},
                        'overrides': [],
                    },
                    'options': {
                        'legend': {
                            'displayMode': 'table',
                            'placement': 'bottom',
                            'calcs': ['mean', 'max'],
                        },
                        'tooltip': {'mode': 'multi', 'sort': 'desc'},
                    },
                    'gridPos': {
                        'h': 8,
                        'w': 12,
                        'x': 12 * (n % 2),
                        'y': y + 8 * (n // 2),
                    },
                    'targets': [
                        {
                            'refId': chr(ord('A') + i),
                            'expr': expr,
                            'legendFormat': legend,
                            'datasource': {
                                'type': 'prometheus',
                                'uid': '${datasource}',
                            },
                        }
                        for i, (expr, legend) in enumerate(targets)
                    ],
                }
            )
        y += 8 * ((len(row) + 1) // 2)
    return {
        'uid': 'openstack-instrument',
        'title': 'OpenStack instrument: nova live metrics',
        'description': 'The metrics of openstack-instrument '
        '(instrument-metrics, and per operation '
        'instrument-report follow): see '
        'doc/source/metrics.rst.',
        'tags': ['openstack', 'nova', 'instrument'],
        'editable': True,
        'graphTooltip': 1,
        'schemaVersion': 39,
        'version': 1,
        'refresh': '30s',
        'time': {'from': 'now-3h', 'to': 'now'},
        'templating': {
            'list': [
                {
                    'name': 'datasource',
                    'label': 'Data source',
                    'type': 'datasource',
                    'query': 'prometheus',
                    'current': {},
                    'hide': 0,
                },
                _variable('instance', 'Host'),
                _variable('service', 'Service'),
                _op_variable(),
            ]
        },
        'annotations': {'list': []},
        'panels': panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + '\n'


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == '__main__':
    sys.exit(main())
