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
"""The SQL of the synthetic cloud, in the runtime's own wire format.

``SQL_CLASSES`` are the statement classes nova's services run here, as
fingerprints (the form ``instrument.targets.sqlalchemy.fingerprint``
gives them).  Their
query ids are the runtime's (``fingerprint.query_id``) and the
``sql.agg`` histograms use the schema's bucket bounds
(``schema.SQL_HIST_BOUNDS_US``): nothing of the wire format is copied
here.
"""

import bisect

from instrument import schema
from instrument.targets.sqlalchemy import fingerprint

# name: (fingerprint, kind, db, median duration in us)
SQL_CLASSES = {
    'quota_usages': (
        'select * from quota_usages where project_id = ? and deleted = ?',
        'SELECT',
        'nova_api',
        450,
    ),
    'instance_insert': (
        'insert into instances (uuid, host, vm_state, project_id) values(?+)',
        'INSERT',
        'nova',
        900,
    ),
    'bdm_insert': (
        'insert into block_device_mapping (instance_uuid, '
        'source_type) values(?+)',
        'INSERT',
        'nova',
        600,
    ),
    'build_request': (
        'select * from build_requests where instance_uuid = ?',
        'SELECT',
        'nova_api',
        350,
    ),
    'instance_mapping': (
        'update instance_mappings set cell_id = ? where instance_uuid = ?',
        'UPDATE',
        'nova_api',
        700,
    ),
    'quota_reserve': (
        'update quota_usages set in_use = ? where id = ?',
        'UPDATE',
        'nova_api',
        1200,
    ),
    'compute_nodes': (
        'select * from compute_nodes where deleted = ?',
        'SELECT',
        'nova',
        14000,
    ),
    'services': (
        'select * from services where binary = ? and deleted = ?',
        'SELECT',
        'nova',
        2500,
    ),
    'aggregates': (
        'select * from aggregates join aggregate_hosts on '
        'aggregates.id = aggregate_hosts.aggregate_id',
        'SELECT',
        'nova_api',
        1800,
    ),
    'instance_update': (
        'update instances set vm_state = ?, task_state = ? where uuid = ?',
        'UPDATE',
        'nova',
        1100,
    ),
    'instance_get': (
        'select * from instances where uuid = ?',
        'SELECT',
        'nova',
        500,
    ),
    'cell0_insert': (
        'insert into instances (uuid, vm_state) values(?+)',
        'INSERT',
        'nova_cell0',
        900,
    ),
    'compute_node_update': (
        'update compute_nodes set free_ram_mb = ? where id = ?',
        'UPDATE',
        'nova',
        300,
    ),
}

# The query id of a fingerprint, as the runtime computes it.
fingerprint_id = fingerprint.query_id

# A deadlock as oslo.db reports it, and as the analyser normalises it.
DEADLOCK_CLS = 'oslo_db.exception.DBDeadlock'
DEADLOCK_MSG = (
    "(pymysql.err.OperationalError) (1213, 'Deadlock found "
    "when trying to get lock; try restarting transaction')"
)
DEADLOCK_NORM = (
    "(pymysql.err.OperationalError) (<n>, 'Deadlock found "
    "when trying to get lock; try restarting transaction')"
)


def histogram(durations: list) -> list:
    """The ``hist`` attribute of a ``sql.agg`` record: counts per bucket
    of ``schema.SQL_HIST_BOUNDS_US`` (upper bounds exclusive)."""
    hist = [0] * schema.SQL_HIST_SIZE
    for us in durations:
        hist[bisect.bisect_right(schema.SQL_HIST_BOUNDS_US, us)] += 1
    return hist
