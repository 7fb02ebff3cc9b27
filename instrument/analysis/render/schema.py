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
"""The JSON Schema of the JSON report (``--json``), built from parts.

``PARTS`` holds one part per section of the registry (its key in the
report dict: the schema of its value, with a description of what it
holds); ``build`` puts them in one schema (JSON Schema 2020-12) in the
registry's order, with the keys that are not a section's
(``report_version``, ``schema_version``, ``run``) and the shapes several
sections share (``$defs``: a distribution's statistics, a request's
row, an operation's figures ...).  A section without a part is an
error of ``build``: adding a section to the registry is one entry here
too.

The schema is shipped beside this module (``report.schema.json``,
kept identical to ``build()`` by a test) for tools that read reports.
Objects list the properties every report has as ``required`` and
allow others (a later analyser may add fields; ``report_version``
changes when a field changes its meaning); maps keyed by names from
the input (hosts, components, operations, states) are
``additionalProperties``.  Times are microseconds (``_us``) unless
their name says otherwise (``_s``, ``_mb``).
"""

import json
import os
import typing

from instrument.analysis import registry

SCHEMA_PATH = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), 'report.schema.json'
)
DIALECT = 'https://json-schema.org/draft/2020-12/schema'
ID = 'https://opendev.org/openstack-instrument/report.schema.json'

INT = {'type': 'integer'}
NUM = {'type': 'number'}
STR = {'type': 'string'}
BOOL = {'type': 'boolean'}
INT_OR_NULL = {'type': ['integer', 'null']}
NUM_OR_NULL = {'type': ['number', 'null']}
STR_OR_NULL = {'type': ['string', 'null']}
STRS = {'type': 'array', 'items': STR}


def ref(name: str) -> dict:
    return {'$ref': '#/$defs/%s' % name}


def obj(
    description: str, properties: dict, optional: typing.Iterable[str] = ()
) -> dict:
    """An object: every property required except ``optional``; others
    allowed."""
    optional = set(optional)
    out = {
        'type': 'object',
        'description': description,
        'properties': properties,
    }
    required = [k for k in properties if k not in optional]
    if required:
        out['required'] = required
    return out


def arr(items: dict, description: str = '') -> dict:
    out = {'type': 'array', 'items': items}
    if description:
        out['description'] = description
    return out


def mapping(values: dict, description: str) -> dict:
    """An object keyed by names from the input."""
    return {
        'type': 'object',
        'description': description,
        'additionalProperties': values,
    }


def either(*shapes: dict) -> dict:
    return {'anyOf': list(shapes)}


# -- shapes several sections share ------------------------------------------

DEFS = {
    'stats': {
        'description': 'a distribution (microseconds unless the '
        'property says otherwise): only count 0 when '
        'empty',
        'oneOf': [
            obj('no value', {'count': {'const': 0}}),
            obj(
                'count values',
                {
                    'count': {'type': 'integer', 'minimum': 1},
                    'min': NUM,
                    'median': NUM,
                    'p90': NUM,
                    'p95': NUM,
                    'p99': NUM,
                    'max': NUM,
                    'mean': NUM,
                    'sum': NUM,
                },
            ),
        ],
    },
    'us_by_name': mapping(INT, 'microseconds per component'),
    'failure': obj(
        'an error, counted once where first raised',
        {
            'operation': STR,
            'component': STR,
            'ev': {'type': 'string', 'description': 'the event that raised'},
            'cls': STR,
            'message': STR,
            'count': {'type': 'integer', 'description': 'times raised'},
            'requests': STRS,
            'final': {
                'type': 'integer',
                'description': 'the final cause of an instance',
            },
            'recovered': INT,
            'recovered_by': mapping(INT, 'how it was recovered: count'),
        },
    ),
    'cause': obj(
        'a final state and the error class behind it',
        {'state': STR, 'cls': STR, 'count': INT},
    ),
    'gap': obj(
        'an unrecorded wait on the critical path, where it sits',
        {
            'after': STR_OR_NULL,
            'before': STR_OR_NULL,
            'critical_us': INT,
            'mean_us': NUM,
            'requests': INT,
            'examples': STRS,
        },
        optional=('mean_us', 'requests', 'examples'),
    ),
    'series': arr(arr(NUM), '[seconds since the start, value] points'),
    'concurrency': obj(
        'requests in flight',
        {
            'max': INT,
            'mean': NUM,
            'counted': STR,
            'series': ref('series'),
            'series_all': ref('series'),
        },
        optional=('counted', 'series', 'series_all'),
    ),
    'level': obj(
        'the requests that started with this many in flight',
        {
            'level': STR,
            'requests': INT,
            'latency': ref('stats'),
            'mean_us': mapping(NUM, 'mean exclusive time per component'),
        },
    ),
    'stopped': obj(
        'where incomplete instances stopped',
        {'ev': STR, 'host': STR, 'open': BOOL, 'count': INT, 'requests': STRS},
    ),
    'instance': obj(
        'an instance of a request and its final state',
        {
            'inst': STR_OR_NULL,
            'state': STR,
            'attempts': INT,
            'cause': either(
                {'type': 'null'},
                obj(
                    'the error that ended it',
                    {'cls': STR, 'ev': STR, 'host': STR, 'msg': STR},
                    optional=('ev', 'host', 'msg'),
                ),
            ),
            'stopped': either(
                {'type': 'null'},
                obj(
                    'the last event it reached',
                    {'ev': STR, 'host': STR, 'open': BOOL},
                ),
            ),
        },
        optional=('attempts', 'cause', 'stopped'),
    ),
    'lifecycle_entry': obj(
        'a span of the request, in start order',
        {
            't_us': {
                'type': 'integer',
                'description': "since the request's start",
            },
            'dur_us': INT_OR_NULL,
            'host': STR,
            'svc': STR,
            'ev': STR,
            'st': STR,
            'sql_us': INT,
            'err': STR_OR_NULL,
            'critical': BOOL,
            'comp': {
                'type': 'string',
                'description': 'its component where the event does '
                'not say it (service.placement)',
            },
        },
        optional=('comp',),
    ),
    'request': obj(
        'one request: every figure can be traced to these',
        {
            'req': STR,
            'kind': {'type': 'string', 'description': 'its operation'},
            'state': STR,
            'start_us': INT,
            'end_us': INT,
            'latency_us': INT,
            'instances': arr(ref('instance')),
            'components_us': ref('us_by_name'),
            'sql_in_us': ref('us_by_name'),
            'sql_us': INT,
            'sql_statements': INT,
            'critical_path_us': ref('us_by_name'),
            'attempts': INT,
            'db_retries': INT,
            'errors': INT,
            'hosts': STRS,
            'events': INT,
            'lost_ends': INT,
            'loss': arr(STR, 'why a loss may have touched it'),
            'gaps': arr(ref('gap')),
            'waits': arr(
                obj(
                    'a wait',
                    {
                        'in': STR,
                        'kind': STR,
                        'name': STR,
                        'wait_us': INT,
                        'critical_us': INT,
                    },
                )
            ),
            'held_by_periodic': arr(
                obj(
                    'a lock wait behind a periodic task',
                    {'lock': STR, 'task': STR, 'wait_us': INT},
                )
            ),
            'cells': obj(
                'the cells its listing queried',
                {
                    'mode': STR,
                    'cells': arr(
                        obj(
                            'a cell query',
                            {
                                'cell': STR,
                                'db': STR_OR_NULL,
                                'start_us': INT,
                                'dur_us': INT,
                                'st': STR,
                            },
                        )
                    ),
                },
            ),
            'lifecycle': arr(ref('lifecycle_entry')),
        },
        optional=(
            'loss',
            'gaps',
            'waits',
            'held_by_periodic',
            'cells',
            'lifecycle',
        ),
    ),
    'operation': obj(
        "one operation's requests and figures",
        {
            'operation': STR,
            'requests': INT,
            'instances': INT,
            'state_order': STRS,
            'states': mapping(INT, 'state: count'),
            'state_requests': mapping(STRS, 'state: example requests'),
            'causes': arr(ref('cause')),
            'stopped': arr(ref('stopped')),
            'failures': arr(ref('failure')),
            'duration_s': NUM,
            'throughput_rps': NUM,
            'success_rate': NUM_OR_NULL,
            'retry_rate': NUM_OR_NULL,
            'db_retry_rate': NUM_OR_NULL,
            'latency': ref('stats'),
            'latency_by_state': mapping(ref('stats'), 'state: end to end'),
            'components': mapping(
                ref('stats'),
                'component: exclusive time of the successful requests',
            ),
            'component_order': STRS,
            'critical_path_us': ref('us_by_name'),
            'critical_path_share': mapping(NUM, 'component: share'),
            'gaps': arr(ref('gap')),
            'concurrency': ref('concurrency'),
            'levels': arr(ref('level')),
            'cells': obj(
                'cells queried',
                {
                    'cells': mapping(
                        obj(
                            'a cell',
                            {
                                'db': STR_OR_NULL,
                                'errors': INT,
                                'time': ref('stats'),
                            },
                        ),
                        'cell uuid: its queries',
                    ),
                    'modes': mapping(INT, 'single or parallel: requests'),
                    'mode_requests': mapping(STRS, 'mode: requests'),
                    'slow_cell': STR_OR_NULL,
                },
                optional=('mode_requests',),
            ),
        },
        optional=('cells',),
    ),
    'process_loss': obj(
        'what one process lost',
        {
            'file': STR,
            'host': STR,
            'pid': INT,
            'records': INT,
            'lost': INT,
            'missing': INT,
            'dropped': INT,
            'sink_dropped': INT,
            'buffer_dropped': INT,
            'unreported_gaps': INT,
            'invalid': INT,
            'sql_dropped': INT,
            'windows': arr(
                arr(INT_OR_NULL), '[from, to] times of a loss (null: open)'
            ),
        },
        optional=(
            'missing',
            'dropped',
            'sink_dropped',
            'buffer_dropped',
            'unreported_gaps',
            'invalid',
            'sql_dropped',
            'windows',
        ),
    ),
}

# -- one part per section (registry key: its value's schema) ----------------

_BOUND = obj(
    'a causal pair bounding the offset',
    {
        'kind': STR,
        'parent': STR,
        'child': STR,
        'bound_us': INT,
        'origin': arr({'type': ['integer', 'string']}),
    },
    optional=('origin',),
)

PARTS = {
    'findings': obj(
        'what is wrong and the nova.conf setting that fixes '
        'it (analysis.rules; doc: findings)',
        {
            'rules': STRS,
            'findings': arr(
                obj(
                    'a finding, the most sure first',
                    {
                        'rule': STR,
                        'title': STR,
                        'key': {
                            'type': 'string',
                            'description': 'the rule and its subject: what '
                            'compare matches runs by',
                        },
                        'seen': STR,
                        'figures': {'type': 'object'},
                        'sure': obj(
                            'how sure: the share it explains',
                            {'share': NUM_OR_NULL, 'of': STR},
                        ),
                        'requests': arr(
                            STR, 'a few request ids, slowest first'
                        ),
                        'settings': arr(
                            obj(
                                'a nova.conf option to change',
                                {
                                    'section': STR,
                                    'option': STR,
                                    'values': arr(
                                        obj(
                                            'the value a service ran with',
                                            {
                                                'host': STR,
                                                'svc': STR,
                                                'value': {
                                                    'description': (
                                                        'null: unset or not '
                                                        'recorded'
                                                    )
                                                },
                                                'recorded': BOOL,
                                            },
                                        )
                                    ),
                                    'direction': STR,
                                    'tradeoff': STR,
                                },
                            )
                        ),
                        'check': STR,
                    },
                )
            ),
        },
    ),
    'inputs': obj(
        'the files read',
        {
            'files': STRS,
            'paths': STRS,
            'bytes': INT,
            'lines': INT,
            'records': INT,
            'first_us': INT_OR_NULL,
            'last_us': INT_OR_NULL,
        },
        optional=('first_us', 'last_us'),
    ),
    'clocks': obj(
        'the offset of each host, from causal pairs',
        {
            'hosts': mapping(
                obj(
                    'a host',
                    {
                        'offset_us': INT,
                        'low_us': INT_OR_NULL,
                        'high_us': INT_OR_NULL,
                        'width_us': INT_OR_NULL,
                        'error_us': INT_OR_NULL,
                        'group': INT_OR_NULL,
                        'pairs': INT,
                        'status': STR,
                        'low_by': either({'type': 'null'}, arr(_BOUND)),
                        'high_by': either({'type': 'null'}, arr(_BOUND)),
                    },
                    optional=(
                        'low_us',
                        'high_us',
                        'width_us',
                        'error_us',
                        'group',
                        'low_by',
                        'high_by',
                    ),
                ),
                'host: its offset',
            ),
            'dropped': arr({}, 'pairs dropped as inconsistent'),
            'groups': INT,
            'pairs': INT,
            'hops': obj('RPC hops matched', {'hops': INT, 'unmatched': INT}),
        },
        optional=('dropped', 'groups', 'pairs', 'hops'),
    ),
    'load': obj(
        'what could not be read as records',
        {
            'counts': mapping(INT, 'problem: lines'),
            'samples': mapping(arr({}), 'problem: examples'),
            'per_file': mapping({}, 'file: its problems'),
            'other_lines': INT,
            'problems': arr({}),
            'loss': arr(ref('process_loss')),
            'duplicate_spans': INT,
            'duplicates': arr({}),
            'unended': arr(
                obj(
                    'a process without an end record',
                    {'file': STR, 'host': STR, 'pid': INT, 'last_us': INT},
                )
            ),
            'records_without_request': mapping(INT, 'event: records'),
        },
    ),
    'processes': arr(
        obj(
            'a process that wrote records',
            {
                'file': STR,
                'host': STR,
                'svc': STR,
                'pid': INT,
                'service': STR_OR_NULL,
                'version': STR_OR_NULL,
                'releases': mapping(STR, 'package: version'),
                'mode': STR_OR_NULL,
                'points': {'type': 'object'},
                'setup': {'type': 'object'},
            },
            optional=(
                'service',
                'version',
                'releases',
                'mode',
                'points',
                'setup',
            ),
        )
    ),
    'releases': arr(
        obj(
            'the processes that ran one nova release',
            {
                'nova': STR_OR_NULL,
                'mode': STR_OR_NULL,
                'services': STRS,
                'hosts': STRS,
                'processes': INT,
            },
        )
    ),
    'summary': obj(
        'the boots: states, rates, times per component',
        {
            'requests': INT,
            'boots': INT,
            'other_requests': INT,
            'instances': INT,
            'states': mapping(INT, 'state: instances'),
            'causes': arr(ref('cause')),
            'duration_s': NUM,
            'throughput_rps': NUM,
            'success_throughput_rps': NUM,
            'success_rate': NUM_OR_NULL,
            'reschedule_rate': NUM_OR_NULL,
            'instances_built': INT_OR_NULL,
            'db_retry_rate': NUM_OR_NULL,
            'latency': ref('stats'),
            'latency_by_state': mapping(ref('stats'), 'state: end to end'),
            'components': mapping(
                ref('stats'),
                'component: exclusive time of the successful boots',
            ),
            'sql_in_components': mapping(
                ref('stats'), 'component: its SQL time'
            ),
            'component_order': STRS,
            'multi_instance_boots': INT,
            'critical_path_us': ref('us_by_name'),
            'critical_path_share': mapping(NUM, 'component: share'),
            'gaps': arr(ref('gap')),
            'concurrency': ref('concurrency'),
            'levels': arr(ref('level')),
            'start_us': INT,
            'end_us': INT,
            'degraded': obj(
                'requests left out of the times',
                {
                    'requests': INT,
                    'boots': INT,
                    'lost_ends': INT,
                    'marked': INT,
                    'examples': STRS,
                },
                optional=('marked',),
            ),
        },
        optional=(
            'instances_built',
            'multi_instance_boots',
            'gaps',
            'start_us',
            'end_us',
            'degraded',
        ),
    ),
    'quality': obj(
        'what the input lost, and the requests it may touch',
        {
            'lost_records': INT,
            'causes': mapping(INT, 'cause: records'),
            'sql_dropped': INT,
            'sql_touched': INT,
            'processes': arr(ref('process_loss')),
            'unreadable': arr(
                obj(
                    'a file read up to a line',
                    {'file': STR, 'after_line': INT},
                )
            ),
            'hosts': STRS,
            'requests': INT,
            'requests_affected': INT,
            'boots_affected': INT,
            'examples': STRS,
            'by_operation': mapping(INT, 'operation: requests marked'),
            'why': mapping(INT, 'why marked: requests'),
            'note': STR_OR_NULL,
        },
        optional=(
            'sql_touched',
            'by_operation',
            'why',
            'boots_affected',
            'examples',
            'hosts',
        ),
    ),
    'operations': mapping(
        ref('operation'),
        'operation (boot, resize, live_migrate, ...): its figures',
    ),
    'failures': arr(ref('failure')),
    'retries': arr(
        obj(
            'oslo.db retries of one function',
            {'func': STR, 'cls': STR, 'count': INT},
        )
    ),
    'sql': obj(
        'the SQL profile (pt-query-digest)',
        {
            'group_by': STR,
            'order_by': STR,
            'limit': INT,
            'classes': INT,
            'calls': INT,
            'total_us': INT,
            'filtered_out': INT,
            'rows': arr(
                obj(
                    'a statement class',
                    {
                        'rank': INT,
                        'id': STR,
                        'item': STR,
                        'fingerprint': STR,
                        'calls': INT,
                        'total_us': INT,
                        'pct': NUM,
                        'pct_calls': NUM,
                        'avg_us': NUM,
                        'median_us': NUM,
                        'p95_us': NUM,
                        'min_us': INT,
                        'max_us': INT,
                        'stddev_us': NUM,
                        'r_call_us': NUM,
                        'v_m': NUM,
                        'errors': INT,
                        'rows': INT_OR_NULL,
                        'rows_unknown': INT,
                        'histogram': arr(INT),
                        'databases': STRS,
                        'services': STRS,
                        'calls_from': STRS,
                        'kinds': mapping(INT, 'kind: calls'),
                        'query_ids': STRS,
                        'first_us': INT,
                        'last_us': INT,
                        'aggregated': INT,
                    },
                    optional=(
                        'rank',
                        'id',
                        'item',
                        'pct_calls',
                        'median_us',
                        'p95_us',
                        'stddev_us',
                        'r_call_us',
                        'v_m',
                        'errors',
                        'rows',
                        'rows_unknown',
                        'histogram',
                        'databases',
                        'services',
                        'calls_from',
                        'kinds',
                        'query_ids',
                        'first_us',
                        'last_us',
                        'aggregated',
                    ),
                )
            ),
            'misc': either(
                {'type': 'null'},
                obj(
                    'the classes past the limit',
                    {
                        'classes': INT,
                        'calls': INT,
                        'total_us': INT,
                        'pct': NUM,
                    },
                ),
            ),
            'dropped': INT,
        },
        optional=(
            'group_by',
            'order_by',
            'limit',
            'filtered_out',
            'misc',
            'dropped',
        ),
    ),
    'causality': obj(
        'spans that contradict causality after correction',
        {'checked': INT, 'violations': INT, 'examples': arr({})},
    ),
    'window': obj(
        'the --since/--until window',
        {
            'since_us': INT_OR_NULL,
            'until_us': INT_OR_NULL,
            'requests_outside': INT,
            'sql_outside': INT,
        },
    ),
    'requests': arr(ref('request'), 'every request'),
    'timelines': arr(
        ref('request'), 'the requests drawn as timelines, with their lifecycle'
    ),
    'waits': obj(
        'waits for locks, DB connections and pool slots',
        {
            'top': arr(
                obj(
                    'a lock or pool waited for',
                    {
                        'kind': STR,
                        'name': STR,
                        'count': INT,
                        'errors': INT,
                        'exact': BOOL,
                        'total_us': INT,
                        'mean_us': NUM,
                        'p50_us': NUM,
                        'p95_us': NUM,
                        'max_us': INT,
                        'held_total_us': INT,
                        'longest_hold': either(
                            {'type': 'null'}, {'type': 'object'}
                        ),
                        'longest_wait_request': STR_OR_NULL,
                    },
                    optional=(
                        'errors',
                        'exact',
                        'held_total_us',
                        'longest_hold',
                        'longest_wait_request',
                    ),
                )
            ),
            'work_vs_wait': arr(
                obj(
                    'work and waits of a component',
                    {
                        'op': STR,
                        'component': STR,
                        'requests': INT,
                        'waited': INT,
                        'work_mean_us': NUM,
                        'wait_mean_us': NUM,
                        'wait_share': NUM,
                        'critical_work_mean_us': NUM,
                        'critical_wait_mean_us': NUM,
                        'waits': arr({'type': 'object'}),
                    },
                    optional=(
                        'waited',
                        'critical_work_mean_us',
                        'critical_wait_mean_us',
                        'waits',
                    ),
                )
            ),
            'connections': arr(
                obj(
                    'DB connections of a database',
                    {
                        'db': STR,
                        'connect': INT,
                        'close': INT,
                        'invalidate': INT,
                    },
                )
            ),
            'counted': STR,
        },
        optional=('connections', 'counted'),
    ),
    'services': arr(
        obj(
            'calls to another service by route',
            {
                'operation': STR,
                'service': STR,
                'method': STR,
                'route': STR,
                'count': INT,
                'total_us': INT,
                'p50_us': INT,
                'p95_us': INT,
                'p99_us': INT,
                'max_us': INT,
                'errors': mapping(INT, 'class: calls'),
                'retries': INT,
                'critical_share': NUM_OR_NULL,
                'requests': STRS,
            },
            optional=('total_us', 'p99_us'),
        )
    ),
    'resources': either(
        obj('no process samples', {}),
        obj(
            'CPU, memory, pools of each service over the run',
            {
                'start_us': INT,
                'bucket_us': INT,
                'buckets': INT,
                'requests_start_us': INT_OR_NULL,
                'requests_end_us': INT_OR_NULL,
                'in_flight': arr(NUM_OR_NULL),
                'latency_p50_us': arr(NUM_OR_NULL),
                'services': mapping(
                    {'type': 'object'}, 'service: its samples by phase'
                ),
                'periodic': arr({'type': 'object'}),
            },
            optional=(
                'requests_start_us',
                'requests_end_us',
                'in_flight',
                'latency_p50_us',
                'periodic',
            ),
        ),
    ),
    'periodic': either(
        obj('no periodic task records', {}),
        obj(
            "nova's periodic tasks and the requests they delayed",
            {
                'tasks': arr({'type': 'object'}),
                'delayed': arr({'type': 'object'}),
                'records': INT,
                'dropped': INT,
                'counted': STR,
            },
            optional=('dropped', 'counted'),
        ),
    ),
}

# the keys of the report that are not a section's
TOP = {
    'report_version': {
        'type': 'integer',
        'description': 'changes when a field changes its meaning',
    },
    'schema_version': {
        'type': 'integer',
        'description': 'the span records\' schema read',
    },
}
TAIL = {
    'run': obj(
        'the analysis itself',
        {'seconds': NUM, 'clock_pass_seconds': NUM, 'jobs': INT},
        optional=('clock_pass_seconds', 'jobs'),
    ),
}


def build() -> dict:
    """The schema of the JSON report; KeyError when a section of the
    registry has no part in ``PARTS``."""
    missing = [k for k in registry.keys() if k not in PARTS]
    if missing:
        raise KeyError(
            'no schema part for section(s) %s (add it to '
            'render.schema.PARTS)' % ', '.join(missing)
        )
    props = dict(TOP)
    props.update((k, PARTS[k]) for k in registry.keys())
    props.update(TAIL)
    return {
        '$schema': DIALECT,
        '$id': ID,
        'title': 'instrument-report JSON report',
        'description': __doc__.split('\n\n')[0].strip(),
        'type': 'object',
        'required': list(props),
        'properties': props,
        'additionalProperties': False,
        '$defs': DEFS,
    }


def dumps(schema: typing.Optional[dict] = None) -> str:
    """The schema as shipped in ``report.schema.json``."""
    return (
        json.dumps(
            build() if schema is None else schema, indent=1, sort_keys=False
        )
        + '\n'
    )


def shipped() -> dict:
    """The shipped schema (``report.schema.json``)."""
    with open(SCHEMA_PATH, encoding='utf-8') as f:
        return json.load(f)
