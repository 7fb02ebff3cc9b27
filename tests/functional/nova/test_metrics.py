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
"""A boot in the in-process cloud with ``[instrument] metrics_dir`` set:
the exposition ``instrument-metrics`` serves has the boot's API,
conductor, scheduler and compute spans and its SQL query classes,
parsed back by prometheus_client's parser, and the process's points by
status, as its banner has them; no request id, instance uuid or SQL
text in it.  Eventlet or native threads, as the run is
(``OS_NOVA_DISABLE_EVENTLET_PATCHING=1``)."""

import os
import re
import shutil
import subprocess
import time

from prometheus_client import parser

from instrument.runtime import lifecycle
from instrument.sinks import metrics as metrics_sink
from tests.functional.nova import base

SPAN = 'instrument_span_duration_seconds'


class MetricsBootTest(base.InstrumentedCloud):
    settings = base.cloud.Settings(computes=('host1',), flush_interval=0.05)

    def _configure_instrument(self, settings) -> None:
        super()._configure_instrument(settings)
        self.metrics_dir = os.path.join(
            self.span_dir, os.pardir, 'metrics-%d' % os.getpid()
        )
        self.addCleanup(shutil.rmtree, self.metrics_dir, True)
        self.flags(metrics_dir=self.metrics_dir, group='instrument')

    def exposition(self, until, timeout: float = 30.0) -> str:
        """The exposition, once ``until(its samples)`` holds (the
        writer writes the file at most every flush interval)."""
        deadline = time.monotonic() + timeout
        while True:
            lifecycle.active().buffer.drain()
            text = metrics_sink.exposition(self.metrics_dir)
            samples = [
                s
                for f in parser.text_string_to_metric_families(text)
                for s in f.samples
            ]
            if until(samples):
                return text
            if time.monotonic() > deadline:
                self.fail(
                    'the exposition never satisfied %s:\n%s' % (until, text)
                )
            time.sleep(0.1)

    def test_a_boot_shows_in_the_exposition(self):
        server = self.boot()
        uuid = server['id']
        spans = self.spans(until=lambda s: s.done('compute.build', inst=uuid))
        [create] = spans.done('api.compute.create', inst=uuid)
        wanted = {
            ('api', 'api.compute.create'),
            ('conductor', 'conductor.schedule_and_build_instances'),
            ('scheduler', 'scheduler.select_destinations'),
            ('compute', 'compute.build'),
        }

        def counts(samples):
            return {
                (s.labels['component'], s.labels['event']): s.value
                for s in samples
                if s.name == SPAN + '_count'
            }

        text = self.exposition(
            lambda samples: all(
                counts(samples).get(key, 0) >= 1 for key in wanted
            )
        )
        samples = [
            s
            for f in parser.text_string_to_metric_families(text)
            for s in f.samples
        ]
        found = counts(samples)
        for key in wanted:
            self.assertEqual(1, found[key], key)
        # the histogram's +Inf bucket is its count
        for s in samples:
            if s.name == SPAN + '_bucket' and s.labels['le'] == '+Inf':
                key = (s.labels['component'], s.labels['event'])
                self.assertEqual(found[key], s.value, key)
        # the API span's duration is the one in the span file, in seconds
        [api_sum] = [
            s.value
            for s in samples
            if s.name == SPAN + '_sum'
            and s.labels['event'] == 'api.compute.create'
        ]
        self.assertAlmostEqual(create['dur_us'] / 1e6, api_sum, places=6)
        # SQL of the boot: per database, kind and query class (an id)
        sql = [
            s for s in samples if s.name == 'instrument_sql_statements_total'
        ]
        self.assertTrue(sql)
        dbs = {s.labels['db'] for s in sql}
        self.assertTrue({'nova_api', 'nova_cell1'} <= dbs, dbs)
        kinds = {s.labels['kind'] for s in sql}
        self.assertTrue({'SELECT', 'INSERT'} <= kinds, kinds)
        for s in sql:
            self.assertRegex(s.labels['query'], r'^([0-9a-f]{32}|other)$')
        self.assertGreater(
            sum(
                s.value
                for s in samples
                if s.name == 'instrument_sql_duration_seconds_total'
            ),
            0,
        )
        # the boot's calls to placement, by route and status class
        placement = [
            s
            for s in samples
            if s.name == 'instrument_service_request_duration_seconds_count'
            and s.labels['service_type'] == 'placement'
        ]
        self.assertTrue(placement, text)
        self.assertTrue(
            {s.labels['status'] for s in placement} <= {'2xx', '4xx'}
        )
        # the process's points by status: every point of its banner
        # (the start record and the later changes; a per-object point
        # counts as pending; a place two targets listen to, once), none
        # missing or failed
        banner = {k: len(v) for k, v in lifecycle.active().banner().items()}
        names = {
            name.split(' (', 1)[0]
            for listed in lifecycle.active().banner().values()
            for name in listed
        }

        def points(samples):
            return {
                s.labels['status']: s.value
                for s in samples
                if s.name == 'instrument_points'
            }

        text = self.exposition(
            lambda samples: sum(points(samples).values()) == len(names)
        )
        samples = [
            s
            for f in parser.text_string_to_metric_families(text)
            for s in f.samples
        ]
        self.assertEqual(0, banner['missing'])
        self.assertEqual(0, points(samples)['missing'])
        self.assertEqual(0, points(samples)['failed'])
        self.assertGreater(points(samples)['patched'], 50)
        self.assertLessEqual(points(samples)['patched'], banner['patched'])
        # bounded labels: no request id, instance uuid or SQL text
        self.assertNotIn(uuid, text)
        self.assertNotIn(create['req'], text)
        self.assertIsNone(re.search(r'(?i)\bselect\b.*\bfrom\b', text))
        tool = shutil.which('promtool')
        if tool is not None:
            result = subprocess.run(
                [tool, 'check', 'metrics'],
                input=text,
                capture_output=True,
                text=True,
                timeout=60,
            )
            self.assertEqual(
                0, result.returncode, result.stdout + result.stderr
            )
