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
"""An in-process nova 34 cloud, instrumented the way operators do it.

nova's ``_IntegratedTestBase`` (sqlite, fake transport, in-process
placement, glance/neutron/cinder fixtures) with asynchronous casts and
several compute hosts.  neutron's fixture is served over HTTP to nova's
own neutron client (``standins``), so that nova's calls to neutron go
through keystoneauth1 as in a deployment.  The instrumentation is
switched on through the configuration only: the ``[instrument]`` group,
``[oslo_messaging_notifications] driver = instrument`` (``rpc.init``
starts it) and an api-paste.ini whose pipelines carry the ``instrument``
filter.  ``Settings`` chooses computes, driver, and whether to
instrument at all or to run osprofiler instead (for the benchmark).

The databases carry the names a deployment gives them (``nova_api``,
``nova_cell0``, ``nova_cell1``, ``placement``), so that the SQL records,
whose database name is the engine URL's
(``instrument.targets.sqlalchemy.listeners``), say which is which:
under native threads nova's fixtures put each in a temporary sqlite
file, named here after the database
(``LogicalDatabases``); under eventlet each is an in-memory sqlite
database with that name.
"""

import contextlib
import os
import sqlite3
import sys
import sysconfig
import tempfile
import threading

# isort: off
# First: importing nova's functional tests runs nova's monkey_patch,
# which must come before anything imports eventlet (under native
# threads it forbids the import, which then breaks the demo).
from nova.tests.functional import integrated_helpers

# isort: on
import fixtures
from nova import objects
from nova import utils
from nova.db.main import api as main_db_api
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional import fixtures as func_fixtures
from oslo_config import cfg
from oslo_utils.fixture import uuidsentinel

from instrument import opts
from instrument.loaders import paste
from instrument.runtime import lifecycle
from instrument.runtime import threads
from instrument_demo import standins

CONF = cfg.CONF

OSPROFILER_KEY = 'instrument-demo-hmac'


class Settings:
    """How the cloud is built; plain values."""

    def __init__(
        self,
        span_dir=None,
        computes=('host1',),
        driver=None,
        instrument=True,
        osprofiler=None,
        flush_interval=0.2,
        sql_timing=True,
        served_neutron=True,
        metrics_dir=None,
    ) -> None:
        self.span_dir = span_dir
        self.computes = tuple(computes)
        self.driver = driver
        self.instrument = instrument
        # None, or an osprofiler connection string (redis://...).
        self.osprofiler = osprofiler
        self.flush_interval = flush_interval
        self.sql_timing = sql_timing
        # nova's neutron stand-in behind nova's own neutron client over
        # (intercepted) HTTP (standins.ServedNeutronFixture), or called
        # directly as nova's fixture does.
        self.served_neutron = served_neutron
        # [instrument] metrics_dir: the live metrics' files, or None.
        self.metrics_dir = metrics_dir


def nova_paste_ini() -> str:
    """nova's own api-paste.ini: in site-packages/etc/nova once bridged
    (tools/nova_paste_bridge.py), else where the wheel put it."""
    for base in (
        os.path.join(sysconfig.get_paths()['purelib'], 'etc'),
        os.path.join(sys.prefix, 'etc'),
    ):
        path = os.path.join(base, 'nova', 'api-paste.ini')
        if os.path.exists(path):
            return path
    raise RuntimeError(
        'nova api-paste.ini not found under %s/etc/nova; is '
        'nova installed in this environment?' % sys.prefix
    )


def logical_name(label: str) -> str:
    """The deployment's name of the database nova's fixtures call
    ``label``: ``api``, ``placement``, ``main``, or a cell mapping's
    ``database_connection`` (the cell's uuid in nova's test base)."""
    names = {
        'api': 'nova_api',
        'placement': 'placement',
        'main': 'nova',
        objects.CellMapping.CELL0_UUID: 'nova_cell0',
    }
    if label in names:
        return names[label]
    for n in range(1, 10):
        # nova's test base names cell N's uuid uuidsentinel.cellN
        if label == getattr(uuidsentinel, 'cell%d' % n):
            return 'nova_cell%d' % n
    return 'nova_' + label.replace('/', '_').replace(':', '_')


def memory_url(name: str) -> str:
    """An in-memory sqlite database whose URL's database name is
    ``name`` (a ``mode=memory`` URI: no file is written; SQLAlchemy and
    oslo.db give it one static connection, as ``sqlite://``)."""
    return 'sqlite:///file:/instrument-demo/%s?mode=memory&uri=true' % name


def _sqlite_file_named(label: str) -> tuple:
    """nova's ``_use_file_backed_sqlite_with_wal``, the file named after
    the database: ``(url, path)``.  Under ``fixtures.NestedTempfile``,
    as nova's, so the file goes when the test ends."""
    directory = tempfile.mkdtemp(prefix='instrument-demo-db-')
    path = os.path.join(directory, logical_name(label))
    conn = sqlite3.connect(path)
    try:
        conn.execute('PRAGMA journal_mode=WAL')
    finally:
        conn.close()
    return 'sqlite:///%s' % path, path


def _threading() -> bool:
    """nova runs under native threads (never before nova 32, which has
    no ``concurrency_mode_threading``)."""
    mode = getattr(utils, 'concurrency_mode_threading', None)
    return bool(mode()) if mode is not None else False


class LogicalDatabases(fixtures.Fixture):
    """nova's and placement's test databases, named as in a deployment.

    Native threads: nova's fixtures create a temporary sqlite file per
    database (``nova-test-<label>-<random>.sqlite``); the files get the
    logical names instead.  Eventlet: nova's fixtures use ``sqlite://``
    for every database; each gets an in-memory URL with its name.  Both:
    ``[database] connection`` (``sqlite://``, opened once at set-up)
    becomes an in-memory ``nova``.
    """

    def _setUp(self) -> None:
        # mock's patch (MockPatch), not MonkeyPatch: the attribute
        # "nova" of nova.tests.fixtures is the nova package (a star
        # import), not the module nova.tests.fixtures.nova
        # (nova 33 and older have neither the WAL files nor threads in
        # their test fixtures: only the eventlet branch applies)
        for module in (
            'nova.tests.fixtures.nova',
            'nova.tests.functional.fixtures',
        ):
            if hasattr(
                sys.modules.get(module), '_use_file_backed_sqlite_with_wal'
            ):
                self.useFixture(
                    fixtures.MockPatch(
                        module + '._use_file_backed_sqlite_with_wal',
                        _sqlite_file_named,
                    )
                )
        # [database] connection: the engine nova's set-up opens before
        # the cells are targeted (a deployment's "nova" database)
        groups = {'database': 'nova'}
        if not _threading():
            groups['api_database'] = 'nova_api'
        for group, name in groups.items():
            CONF.set_override('connection', memory_url(name), group=group)
            self.addCleanup(CONF.clear_override, 'connection', group=group)
        if _threading():
            return
        add_cell = nova_fixtures.CellDatabases.add_cell_database
        create = main_db_api.create_context_manager

        def add_cell_database(celldbs, connection_str, default=False):
            url = memory_url(logical_name(connection_str))

            def named(connection=None):
                return create(connection=connection or url)

            with fixtures.MockPatch(
                'nova.db.main.api.create_context_manager', named
            ):
                return add_cell(celldbs, connection_str, default=default)

        self.useFixture(
            fixtures.MockPatch(
                'nova.tests.fixtures.nova.CellDatabases.add_cell_database',
                add_cell_database,
            )
        )
        # placement's own fixture has this hook from nova 34's on only;
        # before, placement's database keeps its in-memory name.
        configure = getattr(
            func_fixtures.PlacementFixture, '_configure_placement', None
        )
        if configure is None:
            self._name_placement_database()
            return

        def configure_placement(placement, conf_fixture):
            configure(placement, conf_fixture)
            if placement.db:
                conf_fixture.config(
                    connection=memory_url('placement'),
                    group='placement_database',
                )

        self.useFixture(
            fixtures.MockPatch(
                'nova.tests.functional.fixtures.PlacementFixture.'
                '_configure_placement',
                configure_placement,
            )
        )

    def _name_placement_database(self) -> None:
        """Before nova 34: placement's database fixture (an oslo.db
        ad hoc database, ``sqlite://``) gets the in-memory ``placement``.
        """
        from placement.tests import fixtures as placement_fixtures

        init = placement_fixtures.Database.__init__

        def named(fixture, *args, **kwargs):
            init(fixture, *args, **kwargs)
            fixture.url = memory_url('placement')
            fixture.driver = 'sqlite'

        self.useFixture(
            fixtures.MockPatchObject(
                placement_fixtures.Database, '__init__', named
            )
        )


class ReaderPreferringLock:
    """Read/write lock whose readers never wait for a *pending* writer.

    nova's ``CellDatabases`` fixture guards its "current cell" with a
    writer-preferring lock and holds a read lock while the targeted code
    runs; when that code fans out to other threads (scatter-gather) which
    need a read lock too, a writer queued in between deadlocks all of
    them.  It shows only with many boots in flight under native threads,
    which is exactly what the demo does.  Readers here wait only for an
    active writer; writers wait until there is no reader.  Same interface
    as the fixture uses: ``read_lock()`` and ``write_lock()``.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = {}
        self._writer = None
        self._writer_depth = 0
        # Under eventlet the tests run in plain greenlets, which
        # threading.current_thread() cannot tell apart (see nova's own
        # ReaderWriterLock wrapper).
        if threads.eventlet_patched():
            import eventlet

            self._me = eventlet.getcurrent
        else:
            self._me = threading.get_ident

    @contextlib.contextmanager
    def read_lock(self):
        me = self._me()
        with self._cond:
            while self._writer is not None and self._writer is not me:
                self._cond.wait()
            self._readers[me] = self._readers.get(me, 0) + 1
        try:
            yield self
        finally:
            with self._cond:
                if self._readers[me] > 1:
                    self._readers[me] -= 1
                else:
                    del self._readers[me]
                self._cond.notify_all()

    @contextlib.contextmanager
    def write_lock(self):
        me = self._me()
        with self._cond:
            if me in self._readers:
                raise RuntimeError(
                    'Reader %s to writer privilege escalation not allowed' % me
                )
            while self._readers or (
                self._writer is not None and self._writer is not me
            ):
                self._cond.wait()
            self._writer = me
            self._writer_depth += 1
        try:
            yield self
        finally:
            with self._cond:
                self._writer_depth -= 1
                if not self._writer_depth:
                    self._writer = None
                self._cond.notify_all()


class InstrumentedCloud(integrated_helpers._IntegratedTestBase):
    """nova's integrated test base, instrumented, asynchronous casts."""

    CAST_AS_CALL = False
    ADMIN_API = True
    microversion = 'latest'
    settings = Settings()
    #: Fail set-up when rpc.init did not start the instrumentation (a
    #: test of a start that fails on purpose sets it False).
    require_instrumentation = True

    def setUp(self):
        settings = self.settings
        self.span_dir = (
            settings.span_dir or self.useFixture(fixtures.TempDir()).path
        )
        ini_dir = self.useFixture(fixtures.TempDir()).path
        with open(nova_paste_ini()) as f:
            text = f.read()
        if settings.instrument:
            self._configure_instrument(settings)
            text = paste.add_to_pipelines(text)
        if settings.osprofiler:
            self._configure_osprofiler(settings)
        ini = os.path.join(ini_dir, 'api-paste.ini')
        with open(ini, 'w') as f:
            f.write(text)
        self.flags(api_paste_config=ini, group='wsgi')
        # Boots are not limited by the demo project's quota.
        for name in ('instances', 'cores', 'ram'):
            self.flags(**{name: -1, 'group': 'quota'})
        if settings.driver:
            self.flags(compute_driver=settings.driver)
        # Cleanups run last-in first-out: this one after nova's own.
        self.addCleanup(lifecycle.teardown)
        self.useFixture(
            fixtures.MockPatch(
                'nova.tests.fixtures.nova.ReaderWriterLock',
                ReaderPreferringLock,
            )
        )
        self.useFixture(LogicalDatabases())
        if settings.served_neutron:
            self.useFixture(
                fixtures.MockPatch(
                    'nova.tests.fixtures.NeutronFixture',
                    standins.ServedNeutronFixture,
                )
            )
        super().setUp()
        if (
            settings.instrument
            and self.require_instrumentation
            and lifecycle.active() is None
        ):
            raise RuntimeError('rpc.init did not start the instrumentation')

    def _configure_instrument(self, settings) -> None:
        opts.register_opts(CONF)
        from oslo_messaging.notify import notifier

        CONF.register_opts(
            notifier._notifier_opts, group='oslo_messaging_notifications'
        )
        # What an operator writes into nova.conf; every program, as all
        # of nova runs in this one (named after the demo or the runner).
        self.flags(
            enabled=True,
            output_dir=self.span_dir,
            flush_interval=settings.flush_interval,
            sql_timing=settings.sql_timing,
            programs=['*'],
            group='instrument',
        )
        if settings.metrics_dir:
            self.flags(metrics_dir=settings.metrics_dir, group='instrument')
        self.flags(driver=['instrument'], group='oslo_messaging_notifications')

    def _configure_osprofiler(self, settings) -> None:
        from osprofiler import opts as profiler_opts

        profiler_opts.set_defaults(CONF)
        self.flags(
            enabled=True,
            trace_sqlalchemy=True,
            hmac_keys=OSPROFILER_KEY,
            connection_string=settings.osprofiler,
            group='profiler',
        )

    def _setup_compute_service(self):
        last = None
        for host in self.settings.computes:
            last = self._start_compute(host)
        return last

    def _setup_services(self):
        super()._setup_services()
        if self.settings.osprofiler:
            # Services set osprofiler up when they are created; the API
            # fixture does not, a WSGI deployment does (wsgi_app).
            from nova import service

            service.setup_profiler('nova-api', CONF.host)
