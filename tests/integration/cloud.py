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
"""A small nova cloud of separate OS processes, and its teardown.

One "controller" host runs nova-api (``nova.wsgi.osapi_compute`` under
``wsgi_server.py``), nova-conductor and nova-scheduler; placement runs
under the same WSGI server; each compute is a ``nova-compute`` process
with its own nova.conf (``host``, ``state_path``, virt driver) on its
own skewed wall clock (``clockskew.py`` under libfaketime).  The
databases (API, cell0, cell1, placement) are made by nova-manage and
placement-manage on MariaDB; RabbitMQ carries RPC in a vhost of the
run.  Everything the run created is removed by ``stop`` (also after a
failed start); service logs, configuration and span files stay in the
work directory.
"""

import functools
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import time
import typing

import requests

from tests.integration import backends
from tests.integration import config
from tests.integration import procs
from tests.integration import standins

HERE = os.path.dirname(os.path.abspath(__file__))
CONTROLLER = 'controller'


class Compute:
    """What one compute host is: name, virt driver, clock offset (s)."""

    def __init__(self, host: str, driver: str, offset_s: float) -> None:
        self.host = host
        self.driver = driver
        self.offset_s = offset_s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _script(name: str) -> str:
    """A console script of this venv (nova-manage ...)."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.exists(path):
        raise procs.ServiceFailed(
            '%s is not installed in %s' % (name, sys.prefix)
        )
    return path


def nova_paste_ini() -> str:
    """nova's api-paste.ini as the wheel installs it."""
    for base in (
        os.path.join(sys.prefix, 'etc'),
        os.path.join(sysconfig.get_paths()['purelib'], 'etc'),
    ):
        path = os.path.join(base, 'nova', 'api-paste.ini')
        if os.path.exists(path):
            return path
    raise procs.ServiceFailed(
        'nova api-paste.ini not found under %s/etc' % sys.prefix
    )


def _listening(port: int) -> bool:
    try:
        socket.create_connection(('127.0.0.1', port), 2).close()
    except OSError:
        return False
    return True


def _http_ok(url: str, **kwargs) -> bool:
    try:
        return requests.get(url, timeout=2, **kwargs).status_code < 500
    except requests.RequestException:
        return False


class Cloud:
    """Start with ``start()``, always ``stop()``.

    ``scheduler`` replaces the command of nova-scheduler (its argv
    before ``--config-file``: a test's launcher of nova's console
    script) and ``scheduler_env`` adds to its environment;
    ``controller`` adds ``{section: {option: value}}`` to the
    controller's nova.conf; ``api`` replaces the command of nova-api:
    called with the port, it returns the argv (a pre-forking server),
    and nova-api is then taken as ready once its port accepts a
    connection, without an HTTP request (a test counts every request
    the API served)."""

    def __init__(
        self,
        computes: list,
        work_dir: str,
        scheduler: typing.Optional[list] = None,
        scheduler_env: typing.Optional[dict] = None,
        controller: typing.Optional[dict] = None,
        api: typing.Optional[typing.Callable[[int], list]] = None,
    ) -> None:
        self.computes = computes
        self.api = api
        self.scheduler = scheduler
        self.scheduler_env = dict(scheduler_env or {})
        self.controller = controller or {}
        self.run = backends.new_run_id()
        self.work_dir = work_dir
        self.log_dir = os.path.join(work_dir, 'logs')
        self.etc_dir = os.path.join(work_dir, 'etc')
        self.span_dir = os.path.join(work_dir, 'spans')
        self.state_dir = None
        self.backends = backends.Backends(self.run)
        self.services = []
        self.standins = []
        self.api_url = None
        self.placement_url = None
        self.cell1_db = None
        self.timings = {}

    # -- helpers -----------------------------------------------------------

    def log(self, name: str) -> str:
        return os.path.join(self.log_dir, name + '.log')

    def _env(self, **extra) -> dict:
        env = dict(os.environ)
        env.pop('LD_PRELOAD', None)
        env.update(extra)
        return env

    def _service(self, name: str, argv: list, **env) -> procs.Service:
        service = procs.Service(
            name, argv, self.log(name), self._env(**env)
        ).start()
        self.services.append(service)
        return service

    def _mark(self, what: str, since: float) -> float:
        now = time.monotonic()
        self.timings[what] = round(now - since, 1)
        return now

    # -- start -------------------------------------------------------------

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        t0 = t = time.monotonic()
        for path in (self.log_dir, self.etc_dir, self.span_dir):
            os.makedirs(path, exist_ok=True)
        self.state_dir = tempfile.mkdtemp(prefix='instrument-it-')
        faketime = backends.faketime_library()
        backends.sweep()
        transport = self.backends.transport_url()
        api_db = self.backends.database('nova_api')
        cell0_db = self.backends.database('nova_cell0')
        self.cell1_db = self.backends.database('nova')
        placement_db = self.backends.database('placement')
        glance = standins.Glance(self.log('glance-standin')).start()
        neutron = standins.Neutron(self.log('neutron-standin')).start()
        self.standins = [glance, neutron]
        self.placement_url = 'http://127.0.0.1:%d' % free_port()
        api_port = free_port()
        self.api_url = 'http://127.0.0.1:%d/v2.1' % api_port
        ep = config.Endpoints(
            transport_url=transport,
            api_db=api_db,
            cell0_db=cell0_db,
            cell1_db=self.cell1_db,
            placement_db=placement_db,
            placement_url=self.placement_url,
            glance_url=glance.url,
            neutron_url=neutron.url,
            span_dir=self.span_dir,
        )
        ctl_dir = os.path.join(self.etc_dir, CONTROLLER)
        ctl_conf = config.write(
            os.path.join(ctl_dir, 'nova.conf'),
            config.controller_conf(
                ep,
                os.path.join(self.state_dir, CONTROLLER),
                extra=self.controller,
            ),
        )
        with open(nova_paste_ini()) as f:
            config.write(
                os.path.join(ctl_dir, 'api-paste.ini'),
                config.api_paste_ini(f.read()),
            )
        placement_dir = os.path.join(self.etc_dir, 'placement')
        placement_conf = config.write(
            os.path.join(placement_dir, 'placement.conf'),
            config.placement_conf(ep),
        )
        compute_confs = {}
        for c in self.computes:
            compute_confs[c.host] = config.write(
                os.path.join(self.etc_dir, c.host, 'nova.conf'),
                config.compute_conf(
                    ep, c.host, os.path.join(self.state_dir, c.host), c.driver
                ),
            )
        t = self._mark('backends_and_config', t)

        # Schemas: placement's in parallel with nova's.
        manage = [_script('nova-manage'), '--config-file', ctl_conf]
        placement_sync = procs.Service(
            'placement-manage',
            [
                _script('placement-manage'),
                '--config-file',
                placement_conf,
                'db',
                'sync',
            ],
            self.log('placement-manage'),
            self._env(),
        ).start()
        setup_log = self.log('nova-manage')
        procs.run(
            'nova-manage api_db sync', manage + ['api_db', 'sync'], setup_log
        )
        procs.run(
            'nova-manage cell_v2 map_cell0',
            manage
            + ['cell_v2', 'map_cell0', '--database_connection', cell0_db],
            setup_log,
        )
        procs.run(
            'nova-manage cell_v2 create_cell',
            manage + ['cell_v2', 'create_cell', '--name', 'cell1'],
            setup_log,
        )
        procs.run('nova-manage db sync', manage + ['db', 'sync'], setup_log)
        if placement_sync.proc.wait(300) != 0:
            raise placement_sync.failure('failed')
        t = self._mark('db_sync', t)

        # Services.
        python = sys.executable
        server = os.path.join(HERE, 'wsgi_server.py')
        placement = self._service(
            'placement-api',
            [
                python,
                server,
                '--threads',
                '4',
                '--port',
                self.placement_url.rsplit(':', 1)[1],
                'placement.wsgi.api',
            ],
            OS_PLACEMENT_CONFIG_DIR=placement_dir,
        )
        conductor = self._service(
            'nova-conductor',
            [_script('nova-conductor'), '--config-file', ctl_conf],
        )
        scheduler = self._service(
            'nova-scheduler',
            (self.scheduler or [_script('nova-scheduler')])
            + ['--config-file', ctl_conf],
            **self.scheduler_env,
        )
        if self.api is not None:
            api_argv = self.api(api_port)
        else:
            api_argv = [
                python,
                server,
                '--threads',
                '8',
                '--port',
                str(api_port),
                'nova.wsgi.osapi_compute',
            ]
        api = self._service('nova-api', api_argv, OS_NOVA_CONFIG_DIR=ctl_dir)
        skew = os.path.join(HERE, 'clockskew.py')
        computes = []
        for c in self.computes:
            computes.append(
                self._service(
                    c.host,
                    [
                        python,
                        skew,
                        'nova-compute',
                        '--config-file',
                        compute_confs[c.host],
                    ],
                    LD_PRELOAD=faketime,
                    FAKETIME='%+.3f' % c.offset_s,
                    FAKETIME_DONT_FAKE_MONOTONIC='1',
                    FAKETIME_NO_CACHE='1',
                )
            )
        everyone = list(self.services)
        procs.wait_for(
            'placement', lambda: _http_ok(self.placement_url), everyone, 120
        )
        if self.api is not None:
            api_ready = functools.partial(_listening, api_port)
        else:
            api_ready = functools.partial(_http_ok, self.api_url + '/')
        procs.wait_for('nova-api', api_ready, everyone, 180)
        hosts = {c.host for c in self.computes}
        procs.wait_for(
            'every compute registered (cell1 compute_nodes)',
            lambda: self._registered() >= hosts,
            everyone,
            180,
        )
        procs.wait_for(
            'conductor and scheduler consuming RPC',
            lambda: {'conductor', 'scheduler'} <= self._consumed_queues(),
            [conductor, scheduler],
            120,
        )
        t = self._mark('services_up', t)
        procs.run(
            'nova-manage cell_v2 discover_hosts',
            manage + ['cell_v2', 'discover_hosts', '--verbose'],
            setup_log,
        )
        procs.wait_for(
            'placement inventories of every compute',
            lambda: self._providers() >= hosts,
            everyone,
            120,
        )
        del api, placement, computes
        self._mark('discover', t)
        self.timings['start_total'] = round(time.monotonic() - t0, 1)

    def _query(self, sql: str) -> list:
        db = self.cell1_db.rsplit('/', 1)[1].split('?')[0]
        conn = backends.mysql(db)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()

    def _registered(self) -> set:
        return {
            row[0]
            for row in self._query(
                'SELECT host FROM compute_nodes WHERE deleted = 0'
            )
        }

    def _consumed_queues(self) -> set:
        out = backends.rabbitmqctl(
            'list_queues', '-p', self.backends.vhost, 'name', 'consumers'
        )
        queues = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit() and int(parts[1]):
                queues.add(parts[0])
        return queues

    def _providers(self) -> set:
        try:
            resp = requests.get(
                self.placement_url + '/resource_providers',
                timeout=5,
                headers={
                    'X-Auth-Token': 'admin',
                    'OpenStack-API-Version': 'placement latest',
                },
            )
        except requests.RequestException:
            return set()
        if resp.status_code != 200:
            return set()
        return {rp['name'] for rp in resp.json()['resource_providers']}

    def leftovers(self) -> list:
        """What of this run is still there (after ``stop``): service
        processes, databases, the vhost."""
        out = [
            'process %s (pid %d)' % (s.name, s.pid)
            for s in self.services
            if s.alive()
        ]
        out += ['database %s' % db for db in backends.databases_of(self.run)]
        if backends.vhost_exists(self.backends.vhost):
            out.append('vhost %s' % self.backends.vhost)
        return out

    # -- stop --------------------------------------------------------------

    def stop(self) -> list:
        """Stop every service, remove databases, vhost and state; returns
        the problems met (never raises)."""
        problems = []
        killed = procs.stop_all(self.services)
        if killed:
            problems.append(
                'killed after SIGTERM timed out: %s' % ', '.join(killed)
            )
        for standin in self.standins:
            try:
                standin.stop()
            except Exception as exc:
                problems.append('%s stand-in: %s' % (standin.name, exc))
        problems.extend(self.backends.drop())
        if self.state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return problems
