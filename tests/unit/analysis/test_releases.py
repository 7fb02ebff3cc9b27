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
"""A cloud mid-upgrade (issue 15): controllers on nova 34 under native
threads, half the computes on nova 29 under eventlet (with 29's thread
hook places in their banner), the others on 31; one analysis of all the
span files finds the same requests, clocks and components as when every
process ran one release, and says which hosts ran which release."""

import json
import os
import shutil

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.render import text as report_text
from instrument.analysis.sections import releases
from tests import synthetic

NOVA_34 = {
    'nova': '34.0.0',
    'oslo.messaging': '18.3.1',
    'oslo.db': '18.1.1',
    'SQLAlchemy': '2.0.58',
    'eventlet': '0.41.3',
}
NOVA_29 = {
    'nova': '29.4.0',
    'oslo.messaging': '14.7.2',
    'oslo.db': '15.0.0',
    'SQLAlchemy': '1.4.51',
    'eventlet': '0.35.1',
}
NOVA_31 = {
    'nova': '31.3.1',
    'oslo.messaging': '16.1.1',
    'oslo.db': '17.2.1',
    'SQLAlchemy': '2.0.38',
    'eventlet': '0.39.0',
}


def _release_of(start: dict) -> tuple:
    """(releases, mode, points patched) of a process by its host."""
    host = start['host']
    if not host.startswith('cmp-'):
        return NOVA_34, 'threads', ['nova.thread_pool_factory:spawn_on']
    if int(host[4:]) % 2 == 0:
        return (
            NOVA_29,
            'eventlet',
            ['nova.thread_pool_factory:spawn_on', 'nova.utils:spawn_n'],
        )
    return (
        NOVA_31,
        'eventlet',
        ['nova.thread_pool_factory:spawn_on', 'nova.utils:spawn_n'],
    )


def _upgrade(src: str, dst: str) -> int:
    """Copy the span files of ``src`` to ``dst``, each process.start
    naming its process's release; returns how many were rewritten."""
    os.makedirs(dst)
    rewritten = 0
    for name in sorted(os.listdir(src)):
        with open(os.path.join(src, name), encoding='utf-8') as f:
            lines = f.readlines()
        for n, line in enumerate(lines):
            rec = json.loads(line) if '"process.start"' in line else None
            if rec is None or rec.get('ev') != 'process.start':
                continue
            names, mode, patched = _release_of(rec)
            rec['attrs'].update(releases=names, mode=mode)
            rec['attrs']['points']['patched'] = patched
            lines[n] = json.dumps(rec, separators=(',', ':')) + '\n'
            rewritten += 1
        with open(os.path.join(dst, name), 'w', encoding='utf-8') as f:
            f.writelines(lines)
    return rewritten


def _requests(report: dict) -> list:
    return sorted(
        (r['req'], r['state'], r['latency_us']) for r in report['requests']
    )


class MixedReleasesTest(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = fixtures.TempDir()
        cls.tmp.setUp()
        one = os.path.join(cls.tmp.path, 'one')
        mixed = os.path.join(cls.tmp.path, 'mixed')
        # plain JSON-lines files (the file sink), so that the test can
        # rewrite each process.start
        cls.truth = synthetic.Cloud(
            seed=15, computes=4, gzip_computes=False, log_sink=False
        ).generate(one, requests=120)
        cls.rewritten = _upgrade(one, mixed)
        cls.one = pipeline.analyse([one], pipeline.Options(jobs=1))
        cls.mixed = pipeline.analyse([mixed], pipeline.Options(jobs=1))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanUp()
        shutil.rmtree(cls.tmp.path, ignore_errors=True)
        super().tearDownClass()

    def test_every_file_named_its_release(self):
        self.assertEqual(len(self.mixed['processes']), self.rewritten)
        for proc in self.mixed['processes']:
            expected = _release_of(proc)[0]
            self.assertEqual(expected, proc['releases'], proc['host'])

    def test_same_requests_clocks_and_components(self):
        self.assertEqual(_requests(self.one), _requests(self.mixed))
        self.assertEqual(len(self.truth.requests), len(self.mixed['requests']))
        self.assertEqual(self.one['clocks'], self.mixed['clocks'])
        self.assertEqual(self.one['summary'], self.mixed['summary'])
        self.assertEqual(self.one['failures'], self.mixed['failures'])

    def test_summary_of_releases(self):
        rows = {(r['nova'], r['mode']): r for r in self.mixed['releases']}
        self.assertEqual(
            {
                ('34.0.0', 'threads'),
                ('29.4.0', 'eventlet'),
                ('31.3.1', 'eventlet'),
            },
            set(rows),
        )
        self.assertEqual(
            ['cmp-000', 'cmp-002'], rows['29.4.0', 'eventlet']['hosts']
        )
        self.assertEqual(
            ['cmp-001', 'cmp-003'], rows['31.3.1', 'eventlet']['hosts']
        )
        self.assertEqual(['compute'], rows['29.4.0', 'eventlet']['services'])
        self.assertEqual(
            ['api', 'conductor', 'scheduler'],
            rows['34.0.0', 'threads']['services'],
        )
        text = report_text.render(self.mixed)
        self.assertIn(
            '# nova releases: 34.0.0 threads (api, conductor, '
            'scheduler; 3 hosts); ',
            text,
        )
        self.assertIn('29.4.0 eventlet (compute; 2 hosts)', text)
        # one release: no line
        self.assertNotIn('# nova releases', report_text.render(self.one))


class SummariseTest(testtools.TestCase):
    def test_files_without_releases_are_unknown(self):
        rows = releases.summarise(
            [
                {'host': 'h1', 'svc': 'api', 'mode': 'threads'},
                {
                    'host': 'h2',
                    'svc': 'compute',
                    'mode': 'eventlet',
                    'releases': {'nova': '29.4.0'},
                },
                {
                    'host': 'h3',
                    'svc': 'compute',
                    'mode': 'eventlet',
                    'releases': {'nova': '29.4.0'},
                },
            ]
        )
        self.assertEqual(
            [
                ('29.4.0', 'eventlet', 2, ['h2', 'h3']),
                ('unknown', 'threads', 1, ['h1']),
            ],
            [(r['nova'], r['mode'], r['processes'], r['hosts']) for r in rows],
        )
