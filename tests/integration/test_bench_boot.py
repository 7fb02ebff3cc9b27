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
"""``bench/bench_boot_overhead.py --services separate`` at a tiny size.

The bench runs (one round of two boots per variant, two clouds: about
two minutes on two cores), prints every service's row, and what it
measures is what it says: the ``none`` cloud wrote no span file (nova
as it ships), the ``instrument`` cloud's services all did, and every
service's CPU over the boots was read (forked workers included).  Its
session CPU reader is checked on a process that forks and reaps a
child.  No timing is asserted.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import unittest

import fixtures
import testtools

from tests.integration import backends
from tests.integration import test_deployment

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
BENCH = os.path.join(ROOT, 'bench', 'bench_boot_overhead.py')


def _bench():
    spec = importlib.util.spec_from_file_location('bench_boot', BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class SessionCpuTest(testtools.TestCase):
    def test_a_session_holds_its_reaped_childrens_cpu(self):
        bench = _bench()
        # a session leader that forks a child which burns ~0.3 s of CPU,
        # reaps it, then waits to be read
        script = textwrap.dedent(
            """
            import os, sys, time
            pid = os.fork()
            if pid == 0:
                end = time.process_time() + 0.3
                while time.process_time() < end:
                    pass
                os._exit(0)
            os.waitpid(pid, 0)
            print('reaped', flush=True)
            sys.stdin.read()
            """
        )
        proc = subprocess.Popen(
            [sys.executable, '-c', script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.addCleanup(proc.wait)
        self.addCleanup(proc.stdin.close)
        self.assertEqual('reaped\n', proc.stdout.readline())
        cpu, processes = bench.proc_cpu()[('sid', proc.pid)]
        self.assertEqual(1, processes)
        self.assertGreaterEqual(cpu, 0.25)
        self.assertEqual('nova-compute', bench.service_of('compute-2'))
        self.assertEqual('nova-api', bench.service_of('nova-api'))

    def test_writer_share_brackets_the_window(self):
        bench = _bench()
        spans = self.useFixture(fixtures.TempDir()).path
        lines = []
        samples = ((10, 1.0, 0.1), (15, 2.0, 0.2), (20, 4.0, 0.5))
        for ts, cpu, writer in samples:
            lines.append(
                {
                    'ev': 'process.sample',
                    'svc': 'api',
                    'pid': 7,
                    'ts': ts * 1000000,
                    'attrs': {
                        'cpu_user_s': cpu,
                        'cpu_sys_s': 0.0,
                        'writer_cpu_s': writer,
                    },
                }
            )
        # the sample at exit carries no writer_cpu_s
        lines.append(
            {
                'ev': 'process.sample',
                'svc': 'api',
                'pid': 7,
                'ts': 21000000,
                'attrs': {'cpu_user_s': 9.0, 'cpu_sys_s': 0.0},
            }
        )
        with open(os.path.join(spans, 'a.jsonl'), 'w') as f:
            f.write(''.join(json.dumps(r) + '\n' for r in lines))
        share = bench.writer_share(spans, 12.0, 16.0)
        [(writer, cpu)] = [share['nova-api']]
        self.assertAlmostEqual(0.4, writer)
        self.assertAlmostEqual(3.0, cpu)


class SeparateBenchTest(testtools.TestCase):
    results = None
    output = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            backends.require()
        except backends.Unavailable as exc:
            if test_deployment._in_ci():
                raise RuntimeError(
                    'integration back ends missing under CI=true: %s' % exc
                ) from exc
            raise unittest.SkipTest(
                'integration back ends missing: %s' % exc
            ) from exc
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join(
            [ROOT] + [p for p in [env.get('PYTHONPATH')] if p]
        )
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                BENCH,
                '--services',
                'separate',
                '--rounds',
                '1',
                '--servers',
                '2',
                '--concurrency',
                '2',
                '--drain',
                '0.5',
                '--keep',
                '--json',
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                'bench failed (%d):\n%s\n%s'
                % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
            )
        cls.output = proc.stdout
        sys.stderr.write(
            'bench_boot_overhead --services separate (%.0f s):\n%s'
            % (time.monotonic() - started, cls.output)
        )
        [line] = [
            line for line in cls.output.splitlines() if line.startswith('{')
        ]
        cls.results = json.loads(line)
        work_root = os.path.dirname(cls.results['none'][0]['work_dir'])
        cls.spans = {
            variant: sorted(
                os.listdir(os.path.join(runs[0]['work_dir'], 'spans'))
            )
            for variant, runs in cls.results.items()
        }
        shutil.rmtree(work_root, ignore_errors=True)

    def test_every_boot_and_service_measured(self):
        bench = _bench()
        for variant in bench.SEPARATE_VARIANTS:
            [run] = self.results[variant]
            self.assertEqual((2, 0), (run['boots'], run['failed']))
            self.assertEqual([], run['problems'])
            self.assertEqual(
                sorted(bench.SERVICES), sorted(run['cpu_per_boot_s'])
            )
            for service, cpu in run['cpu_per_boot_s'].items():
                self.assertGreater(cpu, 0, (variant, service))
            # two computes; conductor and scheduler fork their worker
            self.assertEqual(2, run['processes']['nova-compute'])
            self.assertGreaterEqual(run['processes']['nova-conductor'], 2)

    def test_none_is_nova_as_it_ships(self):
        self.assertEqual([], self.spans['none'])
        self.assertEqual({}, self.results['none'][0]['writer'])

    def test_instrument_writes_from_every_nova_service(self):
        services = {name.split('_')[1] for name in self.spans['instrument']}
        self.assertLessEqual(
            {
                'nova-api-os-compute',
                'nova-conductor',
                'nova-scheduler',
                'nova-compute',
            },
            services,
        )
        # every service's process.sample records were read (two boots
        # may fit between two samples: no amount is asserted)
        writer = self.results['instrument'][0]['writer']
        self.assertEqual(
            {'nova-api', 'nova-conductor', 'nova-scheduler', 'nova-compute'},
            set(writer),
        )
        for service, (writer_s, cpu_s) in writer.items():
            self.assertGreaterEqual(writer_s, 0, service)
            # the samples' figures are rounded to the ms
            self.assertGreaterEqual(cpu_s + 0.002, writer_s, service)

    def test_prints_each_service_against_the_target(self):
        for label in (
            'nova-api',
            'nova-conductor',
            'nova-scheduler',
            'nova-compute',
            'placement-api',
            'nova total',
            'load average at the start',
            'load average at the end',
        ):
            self.assertIn(label, self.output)
