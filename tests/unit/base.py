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
"""Shared fixtures of the unit tests: config, fake modules, memory sink."""

import json
import os
import subprocess
import sys
import textwrap

import fixtures
from oslo_config import cfg
import testtools

from instrument import opts
from instrument import schema
from instrument import sinks as sink
from instrument.runtime import faults
from instrument.runtime import record
from instrument.runtime import threads


class MemorySink(sink.Sink):
    """A sink that keeps the encoded lines in memory."""

    name = 'memory'

    def __init__(self, conf=None, identity=None) -> None:
        super().__init__(conf, identity)
        self.records = []

    def write(self, batch, first_seq, pid):
        for offset, rec in enumerate(batch):
            self.records.append(record.to_dict(rec, first_seq + offset, pid))


class ListBuffer:
    """Stands in for EventBuffer: keeps event tuples, writes nothing."""

    max_records = 10**9
    writer = 'no writer thread'

    def __init__(self) -> None:
        self.events = self.queue = []
        self.emit = self.events.append

    def dicts(self) -> list:
        return [
            schema.validate(record.to_dict(rec, n + 1, os.getpid()))
            for n, rec in enumerate(self.events)
        ]


def list_recorder(host: str = 'cmp-1', service: str = 'nova-compute') -> tuple:
    """``(ListBuffer, Recorder)``: a recorder of ``service`` on ``host``
    whose events stay in the buffer."""
    from instrument.runtime import process
    from instrument.runtime import recorder

    buffer = ListBuffer()
    return buffer, recorder.Recorder(
        buffer, process.ProcessIdentity.create(service, host)
    )


def read_span_files(directory: str) -> dict:
    """{file name: [decoded, validated records]} of a span directory."""
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding='utf-8') as f:
            out[name] = [schema.validate(json.loads(line)) for line in f]
    return out


class TestCase(testtools.TestCase):
    """Base class: temp dir, isolated config, fake module importer."""

    def setUp(self) -> None:
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.logger = self.useFixture(
            fixtures.FakeLogger(
                level='DEBUG', format='%(levelname)s %(name)s %(message)s'
            )
        )
        # What this test handed over to be logged is logged in its log.
        self.addCleanup(threads.wait_deferred)
        self.modules_dir = os.path.join(self.tmp, 'modules')
        os.mkdir(self.modules_dir)
        sys.path.insert(0, self.modules_dir)
        self.addCleanup(sys.path.remove, self.modules_dir)
        self._made = []
        self.addCleanup(self._forget_modules)
        # Warnings given once per process are given once per test.
        self.useFixture(
            fixtures.MonkeyPatch('instrument.targets.base._REPORTED', set())
        )
        # Fault counters of the process (module-level ones too) count
        # this test's faults only.
        faults.reset()
        self.addCleanup(faults.reset)

    def logged(self) -> str:
        """The test's log, once what was handed over to be logged from
        another thread (``threads.defer``: a fault's line) is logged."""
        threads.wait_deferred()
        return self.logger.output

    def _forget_modules(self) -> None:
        for name in self._made:
            sys.modules.pop(name, None)

    def make_module(self, source: str) -> str:
        """Write a fresh importable module; returns its (unique) name."""
        name = 'fake_nova_%s_%d' % (
            self.id().rsplit('.', 1)[-1],
            len(self._made),
        )
        path = os.path.join(self.modules_dir, name + '.py')
        with open(path, 'w') as f:
            f.write(textwrap.dedent(source))
        self._made.append(name)
        return name

    def run_script(
        self, script: str, *args, modules=None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run ``script`` in a fresh interpreter (fork, eventlet and exit
        tests must not run in the test runner), with ``modules``
        ({name: source}) importable."""
        for name, source in (modules or {}).items():
            with open(os.path.join(self.modules_dir, name + '.py'), 'w') as f:
                f.write(source)
        path = os.path.join(self.tmp, 'script.py')
        with open(path, 'w') as f:
            f.write(textwrap.dedent(script))
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([self.modules_dir] + sys.path),
        )
        return subprocess.run(
            [sys.executable, path] + list(args),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )

    def make_conf(self, **overrides) -> cfg.ConfigOpts:
        conf = cfg.ConfigOpts()
        conf([], project='instrument-test')
        opts.register_opts(conf)
        overrides.setdefault('enabled', True)
        overrides.setdefault('output_dir', os.path.join(self.tmp, 'spans'))
        for key, value in overrides.items():
            conf.set_override(key, value, opts.GROUP)
        return conf
