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
"""The instrumented in-process nova cloud, and reading its span files.

The cloud is ``instrument_demo.cloud.InstrumentedCloud`` (the demo's):
nova's ``_IntegratedTestBase`` with asynchronous casts, switched on the
way an operator does it (``[instrument]`` options, the notifier driver,
the paste filter in api-paste.ini).
"""

import collections
import json
import os
import time

from instrument import schema
from instrument.runtime import lifecycle
from instrument_demo import cloud


class Spans:
    """All records of a span directory, with small queries."""

    def __init__(self, directory: str) -> None:
        self.records = []
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    # (an sql.txn's round trips: their sql.query
                    # records, as the analyser reads them)
                    self.records.extend(
                        schema.unfold(schema.validate(json.loads(line)))
                    )
        self.by_span = collections.defaultdict(list)
        for rec in self.records:
            if rec.get('span'):
                self.by_span[rec['span']].append(rec)

    def done(self, ev=None, inst=None, **match) -> list:
        out = []
        for rec in self.records:
            if rec['ph'] != 'X' or (ev and rec['ev'] != ev):
                continue
            if inst and inst not in (rec.get('inst') or ()):
                continue
            if any(rec.get(k) != v for k, v in match.items()):
                continue
            out.append(rec)
        return out

    def still_open(self) -> list:
        """``(ev, inst)`` of the spans begun and not ended: where
        nova's work is when a wait gives up."""
        out = []
        for recs in self.by_span.values():
            phases = {r['ph'] for r in recs}
            if 'B' in phases and 'X' not in phases:
                out.append((recs[0]['ev'], tuple(recs[0].get('inst') or ())))
        return sorted(out)

    def received(self, sender: dict) -> list:
        """Server-side dispatch spans of an rpc.call/rpc.cast span."""
        return [
            r
            for r in self.records
            if r['ph'] == 'X'
            and r['ev'] == 'rpc.dispatch'
            and r.get('parent') == sender['span']
        ]


class InstrumentedCloud(cloud.InstrumentedCloud):
    """The demo's cloud, with span-file reading for assertions."""

    settings = cloud.Settings(flush_interval=0.05)

    def spans(self, until=None, timeout: float = 20.0) -> Spans:
        """Flush what was recorded and read it back; with ``until``, poll
        until ``until(spans)`` is true (work still finishing in nova's
        threads after the API answered)."""
        deadline = time.monotonic() + timeout
        while True:
            lifecycle.active().buffer.drain()
            spans = Spans(self.span_dir)
            if until is None or until(spans):
                return spans
            if time.monotonic() > deadline:
                self.fail(
                    'span files never satisfied %s in %s s; spans still '
                    'open: %s' % (until, timeout, spans.still_open())
                )
            time.sleep(0.1)

    def wait_for_state(
        self, server: dict, state: str, timeout: float = 30.0
    ) -> dict:
        """nova's ``_wait_for_state_change`` with room for a loaded
        machine (nova's own gives up after 5 s: a reschedule's round
        trips through conductor and scheduler can take longer), and a
        failure that says where the server's work is: its spans still
        open, and those that ended in an error."""
        try:
            return self._wait_for_state_change(
                server, state, max_retries=int(timeout / 0.5)
            )
        except AssertionError as e:
            lifecycle.active().buffer.drain()
            spans = Spans(self.span_dir)
            ended = [
                (r['ev'], r.get('err'))
                for r in spans.done(inst=server['id'])
                if r.get('err')
            ]
            raise AssertionError(
                '%s; spans still open: %s; ended in an error: %s'
                % (e, spans.still_open(), ended)
            ) from None

    def boot(self, **kwargs) -> dict:
        kwargs.setdefault('networks', 'none')
        return self._create_server(**kwargs)

    def boot_calls(self, **kwargs) -> tuple:
        """Boot a server and wait for its build to end: ``(uuid, request
        id, spans, the request's ksa.request spans)``."""
        uuid = self.boot(**kwargs)['id']
        spans = self.spans(until=lambda s: s.done('compute.build', inst=uuid))
        [create] = spans.done('api.compute.create', inst=uuid)
        req = create['req']
        return uuid, req, spans, spans.done('ksa.request', req=req)
