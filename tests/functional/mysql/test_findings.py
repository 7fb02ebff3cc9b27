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
"""Rule ``db_deadlocks`` on real InnoDB deadlocks (issue 29): two
requests update the same two rows in opposite orders inside a function
oslo.db retries on deadlock (``wrap_db_retry``, as nova's DB API
functions are); InnoDB rolls one back, oslo.db retries it.  The last
round allows no retry: its loser fails.  Silent on the same requests
updating the rows in one order (they wait, never deadlock).

MariaDB as ``test_sql_timing`` (skips when unreachable, outside CI).
"""

import json
import os
import threading

import fixtures
from oslo_context import context as oslo_context
from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc

from instrument.analysis import pipeline
from tests.functional.mysql import test_sql_timing


class _Rounds(test_sql_timing.MariaDBTestCase):
    def rounds(self, crossed: bool, retries=(1, 1, 0)) -> tuple:
        """One round per ``retries``: two requests at once, each
        updating both rows (``crossed``: in opposite orders) in one
        transaction, retried on deadlock that many times.  The
        requests that failed, and the report."""
        failed = []
        for n, max_retries in enumerate(retries):
            first = threading.Barrier(2)
            attempts: dict = {}

            def reserve(
                name, rows, retries=max_retries, first=first, attempts=attempts
            ):
                attempts[name] = attempts.get(name, 0) + 1
                with self.engine.begin() as conn:
                    conn.exec_driver_sql(
                        'SET SESSION innodb_lock_wait_timeout = 20'
                    )
                    conn.execute(self.update, {'h': 'param-x', 'i': rows[0]})
                    if crossed and attempts[name] == 1:
                        first.wait(10)  # both hold their first row
                    conn.execute(self.update, {'h': 'param-y', 'i': rows[1]})

            retried = oslo_db_api.wrap_db_retry(
                max_retries=max_retries,
                retry_interval=0.05,
                retry_on_deadlock=True,
            )(reserve)

            def request(name, rows, n=n, retried=retried):
                req = 'req-%d-%s' % (n, name)
                ctx = oslo_context.RequestContext(request_id=req)
                try:
                    with self.timing.tracer.span(
                        'api.compute.create', ctx=ctx
                    ):
                        retried(name, rows)
                except db_exc.DBDeadlock:
                    failed.append(req)

            other = threading.Thread(target=request, args=('a', (1, 2)))
            other.start()
            request('b', (2, 1) if crossed else (1, 2))
            other.join(30)
        path = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(path, 'h.jsonl'), 'w') as f:
            for rec in self.timing.records():
                f.write(json.dumps(rec) + '\n')
        return failed, pipeline.analyse([path])

    def fired(self, report):
        return [
            f
            for f in report['findings']['findings']
            if f['rule'] == 'db_deadlocks'
        ]


class DeadlockFindingTest(_Rounds):
    def test_fires_naming_the_function_and_the_failed_request(self):
        failed, report = self.rounds(crossed=True)
        # the last round allowed no retry: its loser failed
        self.assertEqual(1, len(failed), failed)
        self.assertTrue(failed[0].startswith('req-2-'), failed)
        [f] = self.fired(report)
        self.assertTrue(f['key'].endswith('reserve'), f['key'])
        figures = f['figures']
        self.assertEqual(
            (3, {'DBDeadlock': 3}, 1),
            (figures['retries'], figures['classes'], figures['exhausted']),
        )
        self.assertEqual(failed, figures['failed_requests'])
        self.assertEqual(failed[0], f['requests'][0])
        # the statement that deadlocked: the update, on database test
        [query] = figures['deadlocked_queries']
        self.assertEqual(
            ('test', 'api.compute.create', 3),
            (query['db'], query['call'], query['count']),
        )
        options = [(s['section'], s['option']) for s in f['settings']]
        self.assertEqual(
            [('database', 'connection'), ('database', 'db_max_retries')],
            options,
        )
        self.assertIn('raise', f['settings'][1]['direction'])
        self.assertNotIn('param-', json.dumps(report))


class OrderedUpdatesTest(_Rounds):
    def test_silent(self):
        failed, report = self.rounds(crossed=False)
        self.assertEqual([], failed)
        self.assertEqual([], self.fired(report))
