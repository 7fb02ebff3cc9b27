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
"""An instrumented in-process nova cloud, and reading its span files.

The cloud is nova's own ``_IntegratedTestBase`` (sqlite, fake virt
driver, in-process placement, fake transport) with asynchronous casts.
The instrumentation is switched on the way an operator does it: the
``[instrument]`` group, ``[oslo_messaging_notifications] driver =
instrument`` (so ``rpc.init`` starts it), and an api-paste.ini whose
pipelines carry the ``instrument`` filter.
"""

import collections
import json
import os
import sys
import sysconfig
import time

from nova.tests.functional import integrated_helpers  # noqa: I100
import fixtures
from oslo_config import cfg

from instrument import opts
from instrument import runtime
from instrument import schema
from instrument.loader import paste

CONF = cfg.CONF


def nova_paste_ini() -> str:
    """nova's own api-paste.ini (bridged by tools/nova_paste_bridge.py)."""
    for base in (os.path.join(sysconfig.get_paths()['purelib'], 'etc'),
                 os.path.join(sys.prefix, 'etc')):
        path = os.path.join(base, 'nova', 'api-paste.ini')
        if os.path.exists(path):
            return path
    raise RuntimeError('nova api-paste.ini not found; run '
                       'tools/nova_paste_bridge.py in this venv')


class Spans:
    """All records of a span directory, with small queries."""

    def __init__(self, directory: str) -> None:
        self.records = []
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    self.records.append(schema.validate(json.loads(line)))
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

    def span(self, span_id: str) -> dict:
        [rec] = [r for r in self.by_span[span_id] if r['ph'] == 'X']
        return rec

    def received(self, sender: dict) -> list:
        """Server-side dispatch spans of an rpc.call/rpc.cast span."""
        return [r for r in self.records if r['ph'] == 'X' and
                r['ev'] == 'rpc.dispatch' and
                r.get('parent') == sender['span']]


class InstrumentedCloud(integrated_helpers._IntegratedTestBase):
    """nova's integrated test base, instrumented, asynchronous casts."""

    CAST_AS_CALL = False
    ADMIN_API = True
    microversion = 'latest'

    def setUp(self):
        self.span_dir = self.useFixture(fixtures.TempDir()).path
        ini_dir = self.useFixture(fixtures.TempDir()).path
        opts.register_opts(CONF)
        from oslo_messaging.notify import notifier
        CONF.register_opts(notifier._notifier_opts,
                           group='oslo_messaging_notifications')
        # What an operator writes into nova.conf ...
        self.flags(enabled=True, output_dir=self.span_dir,
                   flush_interval=0.05, group='instrument')
        self.flags(driver=['instrument'],
                   group='oslo_messaging_notifications')
        # ... and into api-paste.ini.
        ini = os.path.join(ini_dir, 'api-paste.ini')
        with open(nova_paste_ini()) as f:
            text = paste.add_to_pipelines(f.read())
        with open(ini, 'w') as f:
            f.write(text)
        self.flags(api_paste_config=ini, group='wsgi')
        # Cleanups run last-in first-out: this one after nova's own.
        self.addCleanup(runtime.teardown)
        super().setUp()
        self.assertIsNotNone(runtime.active(),
                             'rpc.init did not start the instrumentation')

    def spans(self, until=None, timeout: float = 20.0) -> Spans:
        """Flush what was recorded and read it back; with ``until``, poll
        until ``until(spans)`` is true (work still finishing in nova's
        threads after the API answered)."""
        deadline = time.monotonic() + timeout
        while True:
            runtime.active().buffer.drain()
            spans = Spans(self.span_dir)
            if until is None or until(spans):
                return spans
            if time.monotonic() > deadline:
                self.fail('span files never satisfied %s' % until)
            time.sleep(0.1)

    def boot(self, **kwargs) -> dict:
        kwargs.setdefault('networks', 'none')
        return self._create_server(**kwargs)
