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
"""The SQL queue is bounded by ``[instrument] buffer_size``; its first
drop is logged at once, by the side that drops."""

import time

import sqlalchemy

from instrument import buffer as buffer_mod
from instrument import db as instrument_db
from instrument import process
from instrument import recorder as recorder_mod
from tests.unit import base


class SqlQueueBoundTest(base.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = self.make_conf(buffer_size=16)
        ident = process.ProcessIdentity.create('nova-conductor', 'h1')
        self.sink = base.MemorySink()
        # The writer never gets to the queue during the test.
        self.buffer = buffer_mod.EventBuffer([self.sink], 1000, 3600.0,
                                             ident)
        self.addCleanup(self.buffer.close, 1.0)
        self.recorder = recorder_mod.Recorder(self.buffer, ident)
        self.handle = instrument_db.install(self.recorder, self.conf)
        self.addCleanup(self.handle.remove)

    def test_queue_bounded_by_buffer_size_and_first_drop_logged(self):
        engine = sqlalchemy.create_engine('sqlite://')
        with engine.connect() as conn:
            for n in range(100):
                conn.execute(sqlalchemy.text('SELECT %d' % n))
        listeners = self.handle.listeners
        self.assertEqual(16, listeners.max_pending)
        self.assertEqual(16, len(listeners.pending))
        # 100 statements and the transaction's end: 16 kept.
        self.assertEqual(101 - 16, listeners.dropped)
        # Logged from the watchdog thread: the writer may be stuck.
        deadline = time.monotonic() + 10
        while 'SQL statements are being dropped' not in \
                self.logger.output and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIn('SQL statements are being dropped: 16 wait',
                      self.logger.output)
        self.handle.process()
        self.buffer.drain()
        [dropped] = [r for r in self.sink.records
                     if r['ev'] == 'sql.dropped']
        self.assertEqual(85, dropped['attrs']['count'])
        self.assertEqual(1, self.logger.output.count('being dropped'))
