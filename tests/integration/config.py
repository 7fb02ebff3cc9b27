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
"""The configuration files of the cloud: what an operator would write.

The instrumentation is switched on exactly as README ("Enabling it in
nova") says: ``[oslo_messaging_notifications] driver = instrument`` and
an ``[instrument]`` group in every nova.conf, and the ``instrument``
filter in api-paste.ini (``instrument.loaders.paste.add_to_pipelines``).

There is no keystone: the compute API pipelines lose ``authtoken`` (nova
34 has no noauth pipeline any more), so ``keystonecontext`` builds the
request context from the ``X-User-Id`` / ``X-Project-Id`` / ``X-Roles``
headers the load driver sends; placement runs with its own
``auth_strategy = noauth2``, and nova reaches it with keystoneauth's
``admin_token`` plugin (a fixed endpoint and token), glance through
``[glance] api_servers`` and neutron with the ``none`` plugin and an
``endpoint_override``.
"""

import configparser
import io
import os
import typing

from instrument.loaders import paste

NO_KEYSTONE_DROPS = ('authtoken',)


def render(sections: dict) -> str:
    """INI text of ``{section: {key: value}}`` (values as written)."""
    parser = configparser.RawConfigParser()
    parser.optionxform = str
    for section, values in sections.items():
        if section != 'DEFAULT':
            parser.add_section(section)
        for key, value in values.items():
            if isinstance(value, bool):
                value = 'true' if value else 'false'
            elif isinstance(value, (list, tuple)):
                value = ','.join(str(v) for v in value)
            parser.set(section, key, str(value))
    out = io.StringIO()
    parser.write(out)
    return out.getvalue()


def write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
    return path


def api_paste_ini(nova_paste_text: str, instrument: bool = True) -> str:
    """nova's api-paste.ini with the ``instrument`` filter (as README
    tells operators; left out when ``instrument`` is false: nova as it
    ships) and without keystone's ``authtoken``."""
    if instrument:
        nova_paste_text = paste.add_to_pipelines(nova_paste_text)
    lines = []
    for line in nova_paste_text.splitlines():
        key, sep, value = line.partition('=')
        if sep and key.strip() == 'keystone':
            words = [w for w in value.split() if w not in NO_KEYSTONE_DROPS]
            line = '%s= %s' % (key, ' '.join(words))
        lines.append(line)
    return '\n'.join(lines) + '\n'


class Endpoints:
    """Where the services of one run listen and store things."""

    def __init__(
        self,
        transport_url: str,
        api_db: str,
        cell0_db: str,
        cell1_db: str,
        placement_db: str,
        placement_url: str,
        glance_url: str,
        neutron_url: str,
        span_dir: str,
    ) -> None:
        self.transport_url = transport_url
        self.api_db = api_db
        self.cell0_db = cell0_db
        self.cell1_db = cell1_db
        self.placement_db = placement_db
        self.placement_url = placement_url
        self.glance_url = glance_url
        self.neutron_url = neutron_url
        self.span_dir = span_dir


def _common(
    ep: Endpoints, host: str, state_path: str, instrument: bool = True
) -> dict:
    sections = {
        'DEFAULT': {
            'host': host,
            'state_path': state_path,
            'transport_url': ep.transport_url,
            'my_ip': '127.0.0.1',
            'use_stderr': True,
            'debug': False,
            # SIGTERM at teardown: do not wait a minute for RPC workers.
            'graceful_shutdown_timeout': 5,
        },
        # README, "Enabling it in nova":
        'oslo_messaging_notifications': {'driver': 'instrument'},
        'instrument': {'enabled': True, 'output_dir': ep.span_dir},
        'oslo_concurrency': {'lock_path': os.path.join(state_path, 'locks')},
        'placement': {
            'auth_type': 'admin_token',
            'token': 'admin',
            'endpoint': ep.placement_url,
        },
        'glance': {'api_servers': ep.glance_url},
        'neutron': {
            'auth_type': 'none',
            'endpoint': ep.neutron_url,
            'endpoint_override': ep.neutron_url,
        },
        'cinder': {'catalog_info': 'volumev3:cinderv3:publicURL'},
    }
    if not instrument:
        # nova as it ships: neither the notifier driver that loads the
        # library nor its group
        del sections['oslo_messaging_notifications']
        del sections['instrument']
    return sections


def controller_conf(
    ep: Endpoints,
    state_path: str,
    host: str = 'controller',
    extra: typing.Optional[dict] = None,
    instrument: bool = True,
) -> str:
    """nova.conf of nova-api, nova-conductor and nova-scheduler;
    ``extra`` adds or overrides ``{section: {option: value}}``; without
    ``instrument``, nova uninstrumented."""
    sections = _common(ep, host, state_path, instrument)
    sections['api_database'] = {'connection': ep.api_db}
    sections['database'] = {'connection': ep.cell1_db}
    sections['conductor'] = {'workers': 1}
    sections['scheduler'] = {'workers': 1, 'max_attempts': 3}
    # Spread the boots over every compute (a random one of the best four)
    # instead of piling them on the first of equally weighed fake hosts.
    sections['filter_scheduler'] = {'host_subset_size': 4}
    # One project boots everything: no quota in the way.
    sections['quota'] = {'instances': -1, 'cores': -1, 'ram': -1}
    for section, values in (extra or {}).items():
        sections.setdefault(section, {}).update(values)
    return render(sections)


def compute_conf(
    ep: Endpoints,
    host: str,
    state_path: str,
    driver: str,
    instrument: bool = True,
    extra: typing.Optional[dict] = None,
) -> str:
    """nova.conf of one nova-compute (no database: it goes through the
    conductor, as deployed); without ``instrument``, uninstrumented;
    ``extra`` as for the controller."""
    sections = _common(ep, host, state_path, instrument)
    sections['DEFAULT'].update(
        {
            'compute_driver': driver,
            'instances_path': os.path.join(state_path, 'instances'),
            # The resource tracker's periodic refresh: a steady flow of
            # compute -> conductor calls, as in production.
            'update_resources_interval': 10,
        }
    )
    for section, values in (extra or {}).items():
        sections.setdefault(section, {}).update(values)
    return render(sections)


def placement_conf(ep: Endpoints) -> str:
    return render(
        {
            'DEFAULT': {'debug': False, 'use_stderr': True},
            'api': {'auth_strategy': 'noauth2'},
            'placement_database': {'connection': ep.placement_db},
        }
    )
