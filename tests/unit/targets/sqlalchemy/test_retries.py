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
"""db.retry events from oslo_db.api.wrap_db_retry."""

from oslo_context import context as oslo_context
from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc

from instrument.targets.sqlalchemy import retries
from tests.unit import base
from tests.unit.targets.sqlalchemy import fixtures as db_fixtures


def _flaky(failures: int):
    """A DB API function decorated like nova's, before instrumentation:
    deadlocks ``failures`` times, then succeeds."""
    calls = []

    @oslo_db_api.wrap_db_retry(max_retries=2, retry_interval=0.001,
                               inc_retry_interval=False,
                               retry_on_deadlock=True)
    def quota_reserve(context):
        calls.append(context)
        if len(calls) <= failures:
            raise db_exc.DBDeadlock()
        return 'reserved'

    return quota_reserve, calls


class TestRetries(base.TestCase):

    def setUp(self):
        super().setUp()
        self.addCleanup(setattr, oslo_context._request_store, 'context',
                        None)

    def test_retries_counted_and_tied_to_the_request(self):
        reserve, calls = _flaky(failures=2)   # decorated before install
        timing = self.useFixture(db_fixtures.SqlTiming())
        ctx = oslo_context.RequestContext(request_id='req-quota')
        with timing.tracer.span('api.compute.create', ctx=ctx):
            self.assertEqual('reserved', reserve(ctx))
        self.assertEqual(3, len(calls))
        events = timing.records('db.retry')
        self.assertEqual([1, 2], [e['attrs']['attempt'] for e in events])
        span, = [r for r in timing.records('api.compute.create')
                 if r['ph'] == 'X']
        for event in events:
            self.assertEqual('I', event['ph'])
            self.assertEqual('req-quota', event['req'])
            self.assertEqual(span['span'], event['parent'])
            self.assertFalse(event['attrs']['exhausted'])
            self.assertEqual('oslo_db.exception.DBDeadlock',
                             event['attrs']['cls'])
            self.assertTrue(event['attrs']['func'].endswith(
                '_flaky.<locals>.quota_reserve'), event['attrs']['func'])

    def test_exhausted(self):
        reserve, calls = _flaky(failures=10)
        timing = self.useFixture(db_fixtures.SqlTiming())
        ctx = oslo_context.RequestContext(request_id='req-out')
        with timing.tracer.span('api.compute.create', ctx=ctx):
            self.assertRaises(db_exc.DBDeadlock, reserve, None)
        events = timing.records('db.retry')
        self.assertEqual([(1, False), (2, False), (3, True)],
                         [(e['attrs']['attempt'], e['attrs']['exhausted'])
                          for e in events])
        self.assertEqual({'req-out'}, {e['req'] for e in events})

    def test_unexpected_errors_are_not_retries(self):
        @oslo_db_api.wrap_db_retry(max_retries=2, retry_on_deadlock=True)
        def broken():
            raise ValueError('not a DB error')

        timing = self.useFixture(db_fixtures.SqlTiming())
        self.assertRaises(ValueError, broken)
        self.assertEqual([], timing.records('db.retry'))

    def test_removed(self):
        reserve, calls = _flaky(failures=1)
        timing = self.useFixture(db_fixtures.SqlTiming())
        self.assertTrue(timing.handle.retries.patched)
        timing.remove()
        self.assertFalse(timing.handle.retries.patched)
        self.assertNotIsInstance(
            vars(oslo_db_api.wrap_db_retry)[retries.METHOD],
            retries.wrapt.FunctionWrapper)
        self.assertEqual('reserved', reserve(None))
        self.assertEqual([], timing.records('db.retry'))
