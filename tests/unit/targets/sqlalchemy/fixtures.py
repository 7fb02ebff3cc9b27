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
"""A real buffer, recorder and tracer with SQL timing installed, records
in memory.

Shared by the unit tests of ``instrument.targets.sqlalchemy`` and the
MariaDB functional tests.
"""

import fixtures
from oslo_config import cfg

from instrument import opts
from instrument import schema
from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracer_mod
from instrument.targets.sqlalchemy import timing as instrument_db
from tests.unit import base


class SqlTiming(fixtures.Fixture):
    """``instrument.targets.sqlalchemy.timing.install`` on a real
    ``EventBuffer`` (memory sink).

    ``records(ev)`` processes what the listeners queued, drains the
    buffer and returns the validated records (of event ``ev``).
    """

    def __init__(
        self,
        slow_query_threshold: float = 0.0,
        sql_aggregate_interval: float = 10.0,
        detail_sample_rate: float = 1.0,
    ) -> None:
        super().__init__()
        self.options = dict(
            slow_query_threshold=slow_query_threshold,
            sql_aggregate_interval=sql_aggregate_interval,
            detail_sample_rate=detail_sample_rate,
        )

    def _setUp(self) -> None:
        self.conf = cfg.ConfigOpts()
        self.conf([], project='instrument-test')
        opts.register_opts(self.conf)
        for key, value in self.options.items():
            self.conf.set_override(key, value, opts.GROUP)
        self.identity = process.ProcessIdentity.create(
            'nova-conductor', 'testhost'
        )
        self.sink = base.MemorySink()
        # A long flush interval: the tests drain when they want to.
        self.buffer = buffer_mod.EventBuffer(
            [self.sink], 100000, 60.0, self.identity
        )
        self.addCleanup(self.buffer.close, 1.0)
        self.recorder = recorder_mod.Recorder(
            self.buffer, self.identity, self.conf.instrument.detail_sample_rate
        )
        self.tracer = tracer_mod.Tracer(self.recorder)
        self.handle = instrument_db.install(self.recorder, self.conf)
        self.addCleanup(self.handle.remove)

    def records(self, ev: str | None = None, raw: bool = False) -> list:
        """The records written (of ``ev``): read as the analyser reads
        them (an ``sql.txn`` that carries its round trips gives their
        ``sql.query`` records: ``schema.unfold``) unless ``raw``."""
        self.handle.process()
        self.handle.listeners.flush_held()
        self.buffer.drain()
        out = [schema.validate(rec) for rec in self.sink.records]
        if not raw:
            out = [each for rec in out for each in schema.unfold(rec)]
        if ev is None:
            return out
        return [rec for rec in out if rec['ev'] == ev]

    def remove(self) -> None:
        """Detach now (final aggregates written) and drain."""
        self.handle.remove()
        self.buffer.drain()
