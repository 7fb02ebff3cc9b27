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
"""The nova.conf values a process ran with, for the report's findings.

``ALLOWED`` is a fixed allow-list of non-secret options (worker counts,
DB pool sizes and time-outs, RPC time-outs and pool, scheduler subset
and attempts, build and periodic settings, the cells list strategy,
neutron and identity time-outs and caching): the settings the
analyser's findings name (``instrument/analysis/rules.py``).
``effective(conf)`` reads their values from the process's own
``ConfigOpts`` when its ``process.start`` record is written (the
writer thread, after set-up: nova has parsed its configuration by
then); nova is never imported here.

Read defensively: a group or option the process never registered
(another service, another release), or a value that cannot be read,
is left out, never an error.  Never a secret: only allow-listed
options are read, an option oslo.config marks ``secret`` is skipped
even when allow-listed, and a string that looks like a URL or holds
credentials (``://``, ``@``) is dropped.

``front_server()`` adds, under the pseudo-group ``wsgi``, the processes
and threads of the WSGI server that hosts the process, when it is one
that says so from inside: mod_wsgi's daemon mode (its built-in module's
``process_group``, ``maximum_processes``, ``threads_per_process``: the
``WSGIDaemonProcess`` directive) or uWSGI (its built-in module's
``numproc`` and the ``processes`` / ``threads`` of ``uwsgi.opt``).
Read only when the server's module is already imported; nothing
imported here.
"""

import sys
import typing

# (group, (option, ...)); 'DEFAULT' is nova.conf's [DEFAULT].
ALLOWED: tuple = (
    (
        'DEFAULT',
        (
            'osapi_compute_workers',
            'metadata_workers',
            'max_concurrent_builds',
            'max_concurrent_snapshots',
            'max_concurrent_live_migrations',
            'update_resources_interval',
            'rpc_response_timeout',
            'long_rpc_timeout',
            'rpc_conn_pool_size',
            'executor_thread_pool_size',
            'vif_plugging_timeout',
            'vif_plugging_is_fatal',
            'network_allocate_retries',
            'report_interval',
            'service_down_time',
            'heal_instance_info_cache_interval',
            'sync_power_state_interval',
        ),
    ),
    ('conductor', ('workers',)),
    (
        'scheduler',
        ('workers', 'max_attempts', 'discover_hosts_in_cells_interval'),
    ),
    ('filter_scheduler', ('host_subset_size',)),
    (
        'database',
        (
            'max_pool_size',
            'max_overflow',
            'pool_timeout',
            'max_retries',
            'db_max_retries',
            'db_retry_interval',
            'connection_recycle_time',
        ),
    ),
    (
        'api_database',
        (
            'max_pool_size',
            'max_overflow',
            'pool_timeout',
            'max_retries',
            'db_max_retries',
            'db_retry_interval',
            'connection_recycle_time',
        ),
    ),
    (
        'api',
        (
            'instance_list_per_project_cells',
            'instance_list_cells_batch_strategy',
            'instance_list_cells_batch_fixed_size',
            'list_records_by_skipping_down_cells',
            'max_limit',
        ),
    ),
    ('neutron', ('timeout', 'http_retries', 'connect_retries')),
    (
        'keystone_authtoken',
        (
            'memcached_servers',
            'token_cache_time',
            'memcache_use_advanced_pool',
            'http_connect_timeout',
            'http_request_max_retries',
        ),
    ),
    (
        'oslo_messaging_rabbit',
        ('rabbit_qos_prefetch_count', 'heartbeat_timeout_threshold'),
    ),
)

_SCALARS = (bool, int, float, str, type(None))


def _safe(value: typing.Any) -> typing.Any:
    """The value as JSON, or ``_SKIP`` when it is not one to write."""
    if isinstance(value, str):
        return _SKIP if ('://' in value or '@' in value) else value
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        items = [_safe(v) for v in value]
        if any(i is _SKIP or isinstance(i, list) for i in items):
            return _SKIP
        return items
    return _SKIP


_SKIP = object()


def _secret(conf: typing.Any, name: str, group: str | None) -> bool:
    """Is the option marked secret (or unknowable)?"""
    try:
        info = conf._get_opt_info(name, group)  # noqa: SLF001
        return bool(getattr(info['opt'], 'secret', False))
    except Exception:  # noqa: BLE001 - not registered: skipped anyway
        return True


def effective(conf: typing.Any) -> dict:
    """``{group: {option: value}}`` of ``ALLOWED`` options ``conf``
    has registered and can read; nothing else, never an error."""
    out: dict = {}
    for group, names in ALLOWED:
        gname = None if group == 'DEFAULT' else group
        values = {}
        for name in names:
            try:
                if _secret(conf, name, gname):
                    continue
                value = conf[name] if gname is None else conf[gname][name]
            except Exception:  # noqa: BLE001 - unknown, unreadable
                continue
            value = _safe(value)
            if value is not _SKIP:
                values[name] = value
        if values:
            out[group] = values
    front = front_server()
    if front:
        out[FRONT_GROUP] = front
    return out


# the pseudo-group of the WSGI server's own processes and threads
FRONT_GROUP = 'wsgi'


def _count(value: typing.Any) -> int | None:
    if isinstance(value, bytes):
        value = value.decode('ascii', 'replace')
    if isinstance(value, (list, tuple)) and value:
        value = value[-1]
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def front_server(modules: typing.Any = None) -> dict:
    """``{server, processes, threads}`` of the WSGI server hosting this
    process (mod_wsgi daemon mode, uWSGI), what of it is known; ``{}``
    otherwise.  Never an error."""
    modules = sys.modules if modules is None else modules
    out: dict = {}
    try:
        mod_wsgi = modules.get('mod_wsgi')
        uwsgi = modules.get('uwsgi')
        if (
            mod_wsgi is not None
            and getattr(mod_wsgi, 'process_group', None) is not None
        ):
            out['server'] = 'mod_wsgi'
            group = mod_wsgi.process_group
            if isinstance(group, str) and group and _safe(group) is group:
                out['process_group'] = group
            for key, attr in (
                ('processes', 'maximum_processes'),
                ('threads', 'threads_per_process'),
            ):
                n = _count(getattr(mod_wsgi, attr, None))
                if n is not None:
                    out[key] = n
        elif uwsgi is not None and hasattr(uwsgi, 'opt'):
            out['server'] = 'uwsgi'
            opt = uwsgi.opt if isinstance(uwsgi.opt, dict) else {}
            for key in ('processes', 'threads'):
                n = _count(opt.get(key))
                if n is not None:
                    out[key] = n
            if 'processes' not in out:
                n = _count(getattr(uwsgi, 'numproc', None))
                if n is not None:
                    out['processes'] = n
    except Exception:  # noqa: BLE001 - a server's module is not ours
        return {}
    return out
