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
"""Two request ids for one HTTP request (nova's noauth2), one request.

nova's functional fixtures authenticate with ``noauth2``, which makes
a context with a request id of its own: the paste filter begins
``api.request`` with the environ's id and ends it with the context's.
The analyser must still find one request per HTTP request.
"""

from instrument.analysis import pipeline
from tests.functional.nova import base


class RequestIdsTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def test_environ_and_context_ids_make_one_request(self):
        uuid = self.boot()['id']
        spans = self.spans(
            until=lambda s: bool(s.done('compute.build', inst=uuid))
        )
        [create] = spans.done('api.compute.create', inst=uuid)
        req = create['req']
        [http] = [
            r
            for r in spans.done('api.request', req=req)
            if r['attrs']['method'] == 'POST'
        ]
        began = {
            r['attrs']['req_began']
            for r in spans.done('api.request')
            if 'req_began' in r['attrs']
        }
        # noauth2: the context's id is not the environ's
        self.assertIn(http['attrs'].get('req_began'), began)
        self.assertNotIn(req, began)
        # (one job: forking workers from this process, where nova's
        # threads run, could deadlock; the unit tests cover --jobs 2)
        report = pipeline.analyse([self.span_dir], pipeline.Options(jobs=1))
        reqs = {r['req']: r for r in report['requests']}
        self.assertEqual(set(), began & set(reqs))
        self.assertEqual('boot', reqs[req]['kind'])
        self.assertEqual('success', reqs[req]['state'])
