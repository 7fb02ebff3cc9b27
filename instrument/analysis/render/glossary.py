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
"""What each component and column of the report means, in one place.

One definition per component a request's time is split into
(``COMPONENTS``; ``wait.*`` and ``service.*`` names outside the list
by their family's, ``PATTERNS``) and per column of the tables that
show them (``COLUMNS``; a column shown under another heading by its
``ALIASES``).  The text report prints a short legend under the tables
that use them (``legend_lines``), the HTML page shows them as
tooltips (``title`` attributes of headers, component cells and legend
entries: ``render.fmt.html_table``, ``render.charts.legend``), and
doc/source/reading.rst holds the same text (tested), so a figure can
be read without the source.
"""

import textwrap
import typing

COMPONENTS = {
    'api': "nova-api's own work on the request.",
    'api.auth': 'nova-api validating the request\'s token '
    '(keystonemiddleware).',
    'api.cells': "nova-api's queries to the cell databases.",
    'rpc': "an RPC call or cast on the caller's side, until the callee "
    'started to handle it.',
    'rpc.queue': 'a message waiting between being sent and being '
    "dispatched (RabbitMQ and the callee's executor).",
    'conductor': "nova-conductor's own work.",
    'scheduler': "nova-scheduler's own work (filters, weighers).",
    'scheduler.db': 'the scheduler refreshing the host states from the '
    'database.',
    'scheduler.placement': "the scheduler's own part of its calls to "
    'placement (allocation candidates, claims), '
    'outside the HTTP call itself.',
    'compute': "nova-compute's own work.",
    'compute.claim': 'the build claiming resources on the host.',
    'compute.network': "the build setting up the instance's ports.",
    'compute.block_device': "the build preparing the instance's "
    'volumes and disks.',
    'compute.spawn': 'the virt driver creating the guest.',
    'periodic': "a periodic task's own work (the resource audit, the "
    'power state sync).',
    'service': 'HTTP calls to another OpenStack service whose type '
    'was not recorded (the Services called section names '
    'each route).',
    'service.placement': 'HTTP calls to placement (allocation '
    'candidates, allocations, resource providers).',
    'service.network': 'HTTP calls to neutron (ports, networks).',
    'service.image': 'HTTP calls to glance (images).',
    'service.identity': 'HTTP calls to keystone (tokens).',
    'service.block-storage': 'HTTP calls to cinder (volumes, '
    'attachments; service types volume, '
    'volumev3).',
    'service.compute': 'HTTP calls to nova itself (compute API).',
    'wait.lock': 'waiting for a lock (oslo.concurrency, e.g. '
    'compute_resources).',
    'wait.db_pool': 'waiting for a database connection of the pool.',
    'wait.pool': "waiting for a slot of one of nova's worker pools or "
    'executors.',
    'sql': "the SQL statements' own time inside every component (not a "
    'place of its own).',
    'gap': 'time on the critical path that no recorded span covers: a '
    'wait nobody recorded (a queue inside nova, a thread '
    'switch), charged to no component.',
}

# Families: a name of the family outside ``COMPONENTS``.
PATTERNS = {
    'service.*': 'HTTP calls to another OpenStack service, of the type '
    'after the dot (keystoneauth).',
    'wait.*': 'waiting for a resource of the kind after the dot.',
}

COLUMNS = {
    'component': 'where the time was spent (see the components).',
    'min': 'the shortest time over the successful requests.',
    'median': 'half the successful requests spent less (a request that '
    'spent no time in the component counts 0).',
    'p90': '90% of the successful requests spent less.',
    'p95': '95% of the successful requests spent less.',
    'p99': '99% of the successful requests spent less.',
    'max': 'the longest time over the successful requests.',
    'mean': 'the average over the successful requests.',
    'sql mean': "the mean time of the component's SQL statements, "
    'inside its own time.',
    'crit.path': 'the share of the end-to-end time the component was on '
    'the critical path (the chain of spans that made the '
    'request as long as it was).',
    'end to end': "from the request's start to its last span's end.",
    'in flight': 'requests started and not yet ended when the request '
    'started.',
    'median e2e': 'the median end-to-end time of the group.',
    'change': 'B relative to A.',
    'p': 'the Mann-Whitney U p-value of A and B being alike.',
    'significant': 'p below --alpha.',
    'raised': 'how many times an error was raised (each once, where '
    'first raised).',
    'final': 'of those, how many were the final cause of an instance.',
    'recovered': 'of those, how many were retried by oslo.db, '
    'rescheduled, or raised in an instance that still '
    'succeeded.',
}

# Headers that show a column of ``COLUMNS`` under another name.
ALIASES = {
    'critical path': 'crit.path',
    'SQL inside (mean)': 'sql mean',
    'component (successful)': 'component',
    'median A': 'median',
    'median B': 'median',
    'p95 A': 'p95',
    'p95 B': 'p95',
}


def component(name: str) -> typing.Optional[str]:
    """The definition of component ``name``; its family's for a
    ``wait.*`` or ``service.*`` name outside the list; None when it has
    none."""
    text = COMPONENTS.get(name)
    if text is None and '.' in name:
        text = PATTERNS.get(name.split('.', 1)[0] + '.*')
    return text


def column(header: str) -> typing.Optional[str]:
    """The definition of the column headed ``header``, None when it has
    none."""
    return COLUMNS.get(ALIASES.get(header, header))


def term(name: str) -> typing.Optional[str]:
    """The definition of a table's row label: a component's, else a
    column's (``end to end``)."""
    return component(name) or column(name)


def legend_lines(
    components: typing.Iterable[str] = (),
    columns: typing.Iterable[str] = (),
    seen: typing.Optional[set] = None,
    width: int = 79,
) -> list:
    """The text legend under a table: ``name: definition`` of each
    component and column that has one, in order, each once, wrapped to
    ``width``; those in ``seen`` (a report's terms defined above) left
    out, and added to it."""
    seen = set() if seen is None else seen
    items = []
    for name in components:
        text = term(name)
        if text and ('c', name) not in seen:
            seen.add(('c', name))
            items.append((name, text))
    for header in columns:
        text = column(header)
        key = ALIASES.get(header, header)
        if text and ('h', key) not in seen:
            seen.add(('h', key))
            items.append((header, text))
    if not items:
        return []
    out = ['where:']
    for name, text in items:
        out.extend(
            textwrap.wrap(
                '%s: %s' % (name, text),
                width,
                initial_indent='  ',
                subsequent_indent='      ',
                break_on_hyphens=False,
            )
            or ['  ' + name]
        )
    return out
