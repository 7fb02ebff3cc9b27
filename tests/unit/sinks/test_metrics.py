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
"""Tests of the metrics exposition (``instrument.sinks.metrics``) and of
``instrument-metrics``: the text parsed back by prometheus_client's
parser and checked by ``promtool check metrics``; per-process files
summed per program; files of dead processes pruned; ``[instrument]
metrics_dir`` through ``instrument.setup``."""

import http.client
import json
import os
import shutil
import subprocess
import time

from prometheus_client import parser

from instrument.cmd import metrics as metrics_cmd
from instrument.runtime import lifecycle
from instrument.runtime import metrics
from instrument.runtime import process
from instrument.sinks import metrics as metrics_sink
from tests.unit import base
from tests.unit import test_metrics as agg
from tests.unit.sinks import test_file

PROMTOOL = 'promtool'


def promtool():
    """The path of promtool; under CI its absence is a failure (.ci/run
    installs Debian's prometheus), elsewhere the test is skipped."""
    path = shutil.which(PROMTOOL)
    if path is None and os.environ.get('CI') == 'true':
        raise AssertionError(
            'promtool is missing: apt-get install '
            'prometheus (.ci/run need_tool)'
        )
    return path


def write_state(directory, service, pid, records, max_series=200):
    """The state file a process ``pid`` of ``service`` writes after
    ``records``."""
    ident = process.ProcessIdentity.create(service, 'h1')
    m = metrics.Metrics(max_series=max_series)
    m.observe(records)
    scratch = os.path.join(directory, '.scratch')
    state = metrics_sink.StateFile(scratch, ident)
    state(m.state())
    with open(state.path(), encoding='utf-8') as f:
        doc = json.load(f)
    shutil.rmtree(scratch)
    doc['pid'] = pid
    dst = metrics_sink.StateFile(directory, ident).path(pid)
    with open(dst, 'w', encoding='utf-8') as f:
        json.dump(doc, f)
    return dst


def scrape(port):
    """(Content-Type, body) of ``GET /metrics`` on ``port``."""
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    try:
        conn.request('GET', '/metrics')
        resp = conn.getresponse()
        return resp.getheader('Content-Type'), resp.read().decode('utf-8')
    finally:
        conn.close()


def families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def value(family, name, **labels):
    found = [
        s.value
        for s in family.samples
        if s.name == name
        and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, family.samples)
    return found[0]


SAMPLE = [
    agg.span('conductor.build_instances', 500),
    agg.span(
        'conductor.build_instances', 2000, err='nova.exception.NoValidHost'
    ),
    agg.sql('a' * 32, 1500, rows=3),
    agg.sql('b' * 32, 2000, kind='UPDATE', err='oslo_db.exception.DBDeadlock'),
    agg.lock('compute_resources', 2000, 30000),
]


class ExpositionTest(base.TestCase):
    def test_parsed_back_by_prometheus_client(self):
        out = os.path.join(self.tmp, 'm')
        write_state(out, 'nova-conductor', 101, SAMPLE)
        write_state(out, 'nova-conductor', 102, SAMPLE[:1])
        write_state(out, 'nova-scheduler', 103, SAMPLE[:1])
        fams = families(metrics_sink.exposition(out))
        span = fams['instrument_span_duration_seconds']
        self.assertEqual('histogram', span.type)
        self.assertTrue(span.documentation)
        cond = dict(
            service='nova-conductor',
            component='conductor',
            event='conductor.build_instances',
        )
        # two workers' samples summed: 3 calls, 2 of them <= 1 ms
        self.assertEqual(
            3, value(span, 'instrument_span_duration_seconds_count', **cond)
        )
        self.assertEqual(
            2,
            value(
                span,
                'instrument_span_duration_seconds_bucket',
                le='0.001',
                **cond,
            ),
        )
        self.assertEqual(
            3,
            value(
                span,
                'instrument_span_duration_seconds_bucket',
                le='+Inf',
                **cond,
            ),
        )
        self.assertAlmostEqual(
            0.003, value(span, 'instrument_span_duration_seconds_sum', **cond)
        )
        self.assertEqual(
            1,
            value(
                span,
                'instrument_span_duration_seconds_count',
                service='nova-scheduler',
            ),
        )
        # counters: the parser names the family without _total
        errors = fams['instrument_span_errors']
        self.assertEqual('counter', errors.type)
        self.assertEqual(
            1,
            value(
                errors,
                'instrument_span_errors_total',
                error='nova.exception.NoValidHost',
            ),
        )
        self.assertEqual(
            1,
            value(
                fams['instrument_sql_deadlocks'],
                'instrument_sql_deadlocks_total',
                db='nova',
                query='b' * 32,
            ),
        )
        self.assertAlmostEqual(
            0.0015,
            value(
                fams['instrument_sql_duration_seconds'],
                'instrument_sql_duration_seconds_total',
                query='a' * 32,
            ),
        )
        self.assertEqual(
            0.03,
            value(
                fams['instrument_lock_held_seconds'],
                'instrument_lock_held_seconds_total',
                lock='compute_resources',
            ),
        )

    def test_label_values_are_escaped(self):
        out = os.path.join(self.tmp, 'm')
        odd = 'a "quoted"\\ lock\nwith a newline'
        write_state(out, 'nova-compute', 101, [agg.lock(odd, 10, 10)])
        text = metrics_sink.exposition(out)
        fams = families(text)
        self.assertEqual(
            1,
            value(
                fams['instrument_lock_wait_seconds'],
                'instrument_lock_wait_seconds_count',
                lock=odd,
            ),
        )

    def test_promtool_check_metrics(self):
        tool = promtool()
        if tool is None:
            self.skipTest('promtool is not installed')
        out = os.path.join(self.tmp, 'm')
        ksa = list(agg.span('ksa.request', 3000, svc='compute'))
        ksa[-1] = {
            'service_type': 'placement',
            'method': 'GET',
            'route': '/resource_providers/{id}',
            'status': 200,
        }
        write_state(
            out,
            'nova-conductor',
            101,
            SAMPLE + [agg.lock('odd "name"\\', 10, 10), tuple(ksa)],
        )
        text = metrics_sink.exposition(out)
        result = subprocess.run(
            [tool, 'check', 'metrics'],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(0, result.returncode, result.stdout + result.stderr)
        self.assertEqual('', result.stdout + result.stderr)

    def test_empty_directory_is_an_empty_exposition(self):
        self.assertEqual('', metrics_sink.exposition(self.tmp))

    def test_a_foreign_or_broken_file_is_skipped(self):
        out = os.path.join(self.tmp, 'm')
        write_state(out, 'nova-api', 101, SAMPLE[:1])
        with open(os.path.join(out, 'x.json'), 'w') as f:
            f.write('{"half": ')
        with open(os.path.join(out, 'y.json'), 'w') as f:
            f.write('[1, 2]')
        self.assertEqual(1, len(metrics_sink.read_states(out)))


class PruneTest(base.TestCase):
    def test_only_old_files_of_dead_processes_are_removed(self):
        out = os.path.join(self.tmp, 'm')
        dead = subprocess.Popen(['true'])
        dead.wait()
        alive = write_state(out, 'nova-api', os.getpid(), SAMPLE[:1])
        gone = write_state(out, 'nova-api', dead.pid, SAMPLE[:1])
        now = time.time()
        # recent: kept, its counts still in the sums
        self.assertEqual([], metrics_sink.prune(out, 60, now))
        old = now - 120
        os.utime(alive, (old, old))
        os.utime(gone, (old, old))
        self.assertEqual([gone], metrics_sink.prune(out, 60, now))
        self.assertEqual(
            [alive], [d['path'] for d in metrics_sink.read_states(out)]
        )


class CommandTest(base.TestCase):
    def test_dump_writes_atomically(self):
        out = os.path.join(self.tmp, 'm')
        write_state(out, 'nova-api', 101, SAMPLE)
        target = os.path.join(self.tmp, 'instrument.prom')
        self.assertEqual(0, metrics_cmd.main(['dump', out, '-o', target]))
        with open(target, encoding='utf-8') as f:
            text = f.read()
        self.assertEqual(metrics_sink.exposition(out), text)
        self.assertIn(
            '# TYPE instrument_span_duration_seconds histogram', text
        )
        self.assertEqual(
            ['instrument.prom', 'm', 'modules'], sorted(os.listdir(self.tmp))
        )

    def test_serve_answers_a_scrape(self):
        out = os.path.join(self.tmp, 'm')
        write_state(out, 'nova-api', 101, SAMPLE)
        server = metrics_cmd.make_server([out], '127.0.0.1', 0)
        self.addCleanup(server.server_close)
        import threading

        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.shutdown)
        port = server.server_address[1]
        content_type, text = scrape(port)
        self.assertEqual(metrics_cmd.CONTENT_TYPE, content_type)
        # read afresh at each scrape
        write_state(out, 'nova-api', 102, SAMPLE)
        again = scrape(port)[1]
        cond = dict(service='nova-api', event='conductor.build_instances')
        span = 'instrument_span_duration_seconds'
        self.assertEqual(
            2, value(families(text)[span], span + '_count', **cond)
        )
        self.assertEqual(
            4, value(families(again)[span], span + '_count', **cond)
        )


class SetupTest(test_file.SetupTestBase):
    def test_metrics_dir_off_by_default(self):
        rt = self.setup_runtime()
        self.assertEqual([], rt.buffer._observers)

    def test_metrics_dir_gets_the_process_file(self):
        out = os.path.join(self.tmp, 'metrics')
        self.setup_runtime(metrics_dir=out)
        mod = __import__(self.mod_name)
        for _ in range(3):
            mod.quick(mod.Ctx())
        lifecycle.teardown()
        [doc] = metrics_sink.read_states(out)
        self.assertEqual(os.getpid(), doc['pid'])
        self.assertTrue(doc['final'])
        fams = families(metrics_sink.exposition(out))
        self.assertEqual(
            3,
            value(
                fams['instrument_span_duration_seconds'],
                'instrument_span_duration_seconds_count',
                service='nova-compute',
                event='compute.quick',
            ),
        )
