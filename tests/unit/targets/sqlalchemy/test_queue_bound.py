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

from instrument.runtime import buffer as buffer_mod
from instrument.runtime import process
from instrument.runtime import record
from instrument.runtime import recorder as recorder_mod
from instrument.targets.sqlalchemy import timing as instrument_db
from tests.unit import base


class SqlQueueBoundTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.conf = self.make_conf(buffer_size=16)
        ident = process.ProcessIdentity.create('nova-conductor', 'h1')
        self.sink = base.MemorySink()
        # The writer never gets to the queue during the test.
        self.buffer = buffer_mod.EventBuffer([self.sink], 1000, 3600.0, ident)
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
        while (
            'SQL statements are being dropped' not in self.logger.output
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        self.assertIn(
            'SQL statements are being dropped: 16 wait', self.logger.output
        )
        self.handle.process()
        self.buffer.drain()
        [dropped] = [r for r in self.sink.records if r['ev'] == 'sql.dropped']
        self.assertEqual(85, dropped['attrs']['count'])
        # The writer logs the count, once (rate-limited per cause).
        self.assertIn(
            'events are being dropped: 85 SQL statements dropped '
            '(more than 16 waited for the writer) since the start '
            '(85 in all)',
            self.logger.output,
        )
        self.buffer.drain()
        self.assertEqual(2, self.logger.output.count('being dropped'))


class SqlDropReportTest(base.TestCase):
    """``sql.dropped`` reaches the span log whatever the state of the
    buffer when it is due, and with the final total at close."""

    def setUp(self):
        super().setUp()
        self.conf = self.make_conf(buffer_size=16)
        ident = process.ProcessIdentity.create('nova-conductor', 'h1')
        self.fail_next = []

        class Sink(base.MemorySink):
            def write(sink, batch, first_seq, pid):
                if self.fail_next and any(
                    rec[record.I_EV] == self.fail_next[0] for rec in batch
                ):
                    self.fail_next.pop(0)
                    raise OSError(28, 'No space left on device')
                super(Sink, sink).write(batch, first_seq, pid)

        self.sink = Sink()
        self.buffer = buffer_mod.EventBuffer([self.sink], 16, 3600.0, ident)
        self.addCleanup(self.buffer.close, 1.0)
        self.recorder = recorder_mod.Recorder(self.buffer, ident)
        self.handle = instrument_db.install(self.recorder, self.conf)
        self.addCleanup(self.handle.remove)
        self.engine = sqlalchemy.create_engine('sqlite://')

    def run_statements(self, count: int) -> None:
        with self.engine.connect() as conn:
            for n in range(count):
                conn.execute(sqlalchemy.text('SELECT %d' % n))

    def counts(self, ev: str) -> list:
        return [
            r['attrs']['count'] for r in self.sink.records if r['ev'] == ev
        ]

    def test_written_while_the_buffer_is_full(self):
        self.run_statements(100)
        self.assertEqual(85, self.handle.listeners.dropped)
        # The buffer is full when the writer turns the statements into
        # records: the count must not be emitted into it (and lost).
        for n in range(16):
            self.recorder.counter('test.event', {'n': n})
        self.assertEqual(16, self.buffer.pending())
        self.buffer.drain()
        self.assertEqual([85], self.counts('sql.dropped'))
        # The queued statements waited for room instead of being lost.
        self.assertEqual(0, self.buffer.dropped_full)
        self.assertEqual(
            16, len([r for r in self.sink.records if r['ev'] == 'sql.query'])
        )

    def test_tried_again_until_a_sink_takes_it(self):
        self.run_statements(100)
        self.fail_next.append('sql.dropped')
        self.buffer.drain()
        self.assertEqual([], self.counts('sql.dropped'))
        self.assertEqual([], self.fail_next)
        self.buffer.drain()
        self.assertEqual([85], self.counts('sql.dropped'))
        # not a lost event: the sink's drop count is unchanged
        self.assertEqual(0, self.sink.dropped)
        self.buffer.drain()
        self.assertEqual([85], self.counts('sql.dropped'))

    def test_final_total_written_and_logged_at_close(self):
        self.run_statements(100)
        self.buffer.drain()
        self.assertEqual([85], self.counts('sql.dropped'))
        self.run_statements(50)
        self.handle.remove()
        self.buffer.close()
        self.assertEqual([85, 85 + 50 - 15], self.counts('sql.dropped'))
        self.assertEqual(
            'process.end',
            [r['ev'] for r in self.sink.records if r['ev'] != 'sql.dropped'][
                -1
            ],
        )
        self.assertIn(
            'at close, 120 SQL statements dropped (more than 16 '
            'waited for the writer) since the start, 35 of them '
            'since the last warning; counted in sql.dropped '
            'records\n',
            self.logger.output + '\n',
        )
