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
"""nova-api's wait before the paste filter, on real nova (rule 8).

A front proxy stamps each request's arrival (``X-Request-Start``); the
paste filter in nova's own API pipeline records the wait from that
arrival to its call as ``api.request`` ``queue_us``.  Requests go
through nova's functional API client and wsgi-intercept, headers and
all, as a proxy's would reach nova-api.
"""

import time

from instrument.analysis import pipeline
from tests.functional.nova import base


class ApiQueueTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def _get(self, uri, stamp=None):
        """GET ``uri`` with ``stamp(now)`` as its X-Request-Start;
        ``(seconds the call took)``."""
        headers = {}
        t0 = time.time()
        if stamp is not None:
            headers['X-Request-Start'] = stamp(t0)
        self.api.api_get(uri, headers=headers)
        return time.time() - t0

    def _queue(self, spans, route):
        [http] = [
            r
            for r in spans.done('api.request')
            if r['attrs']['route'] == route
        ]
        return http['attrs']

    def test_x_request_start_is_recorded_as_queue_us(self):
        # Apache mod_headers' form, microseconds: arrived 300 ms ago
        took_us = (
            self._get('/flavors', lambda now: 't=%d' % ((now - 0.3) * 1e6))
            * 1e6
        )
        # nginx's t=${msec}: seconds with milliseconds, 200 ms ago
        took_ms = (
            self._get('/os-keypairs', lambda now: 't=%.3f' % (now - 0.2)) * 1e6
        )
        # no front server stamp; a garbage one
        self._get('/servers')
        self._get('/os-availability-zone', lambda now: 't=yesterday')
        spans = self.spans(until=lambda s: len(s.done('api.request')) >= 4)
        waited = self._queue(spans, '/v2.1/flavors')['queue_us']
        self.assertGreaterEqual(waited, 300_000)
        self.assertLess(waited, 300_000 + took_us)
        waited = self._queue(spans, '/v2.1/os-keypairs')['queue_us']
        # the header's milliseconds: 1 ms of rounding either way
        self.assertGreaterEqual(waited, 199_000)
        self.assertLess(waited, 201_000 + took_ms)
        self.assertNotIn('queue_us', self._queue(spans, '/v2.1/servers'))
        self.assertNotIn(
            'queue_us', self._queue(spans, '/v2.1/os-availability-zone')
        )
        # a flat, short queue on an idle API: rule 8 silent
        report = pipeline.analyse([self.span_dir], pipeline.Options(jobs=1))
        self.assertEqual(
            [],
            [
                f
                for f in report['findings']['findings']
                if f['rule'] == 'service_saturation'
            ],
        )
