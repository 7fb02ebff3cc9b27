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
"""Tests of the shipped Prometheus rules
(``etc/prometheus/instrument-rules.yml``) and Grafana dashboard
(``etc/grafana/instrument-dashboard.json``): every metric their queries
name is one ``instrument-metrics`` really emits (a real exposition of a
known set of records), the rule file passes ``promtool check rules``
and its unit tests (``promtool test rules``), every dashboard query
parses (as a rule, through ``promtool check rules``), and the dashboard
is the output of ``tools/grafana_dashboard.py``; and a real Prometheus
scraping ``instrument-metrics serve`` answers every dashboard query and
every rule's expression with series.  Without promtool or prometheus
(Debian's ``prometheus`` package) those tests skip, and fail under
CI=true."""

import http.client
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse

from prometheus_client import parser
import yaml

from instrument import schema
from instrument.analysis import follow
from instrument.cmd import metrics as metrics_cmd
from instrument.runtime import metrics
from instrument.runtime import record
from instrument.sinks import metrics as metrics_sink
from tests.unit import base
from tests.unit import test_metrics as agg
from tests.unit.sinks import test_metrics as sink_tests

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
RULES = os.path.join(ROOT, 'etc', 'prometheus', 'instrument-rules.yml')
RULES_TEST = os.path.join(
    ROOT, 'etc', 'prometheus', 'instrument-rules.test.yml'
)
DASHBOARD = os.path.join(ROOT, 'etc', 'grafana', 'instrument-dashboard.json')
GENERATOR = os.path.join(ROOT, 'tools', 'grafana_dashboard.py')
RENDERER = os.path.join(ROOT, 'tools', 'render_dashboard.py')

# A metric name that is not part of a recorded rule's name
# (level:metric:operations) nor a label value.
_METRIC = re.compile(r'(?<![\w:"])(instrument_\w+)(?![\w:])')
_RECORDED = re.compile(r'(?<![\w:"])(\w+:instrument_\w+:\w+)')
# Grafana's variables, replaced by something PromQL parses.
_VARS = {
    '$__rate_interval': '5m',
    '$service': '.*',
    '$instance': '.*',
    '$operation': '.*',
}
# A finished run that ``instrument-report follow --once`` reads: what
# the dashboard's per-operation row queries
FOLLOWED = os.path.join(
    ROOT, 'tests', 'data', 'fidelity', 'demo-threads.jsonl.gz'
)
# ... and a run with a finding (the demo's --inject db-pool): what the
# findings row and the InstrumentFinding alert query
FOUND = os.path.join(
    ROOT, 'tests', 'data', 'findings', 'demo-inject-db-pool.jsonl.gz'
)


def metric_names(expr: str) -> set:
    return set(_METRIC.findall(expr))


def recorded_names(expr: str) -> set:
    return set(_RECORDED.findall(expr))


def _ksa(status, failure=None):
    rec = list(agg.span(schema.EV_KSA_REQUEST, 3000, svc='compute'))
    rec[record.I_ATTRS] = {
        schema.ATTR_SERVICE_TYPE: 'placement',
        schema.ATTR_METHOD: 'GET',
        schema.ATTR_ROUTE: '/resource_providers/{id}',
        schema.ATTR_STATUS: status,
        schema.ATTR_FAILURE: failure,
    }
    return tuple(rec)


def _periodic():
    rec = list(agg.span(schema.EV_PERIODIC_TASK, 4000000, svc='compute'))
    rec[record.I_ATTRS] = {
        schema.ATTR_TASK: 'ComputeManager.update_available_resource'
    }
    return tuple(rec)


# Records that feed every family of instrument.runtime.metrics.
RECORDS = sink_tests.SAMPLE + [
    agg.sql_agg('c' * 32, 10, 5000, rows=7, rows_known=4),
    record.complete(
        agg.TS,
        40000,
        'h1',
        'conductor',
        schema.EV_DB_POOL_WAIT,
        None,
        1,
        None,
        None,
        None,
        'error',
        ('sqlalchemy.exc.TimeoutError', 'x'),
        {schema.ATTR_DB: 'nova'},
    ),
    record.instant(
        agg.TS,
        'h1',
        'conductor',
        None,
        schema.EV_DB_RETRY,
        1,
        None,
        None,
        None,
        {
            schema.ATTR_CLS: 'oslo_db.exception.DBDeadlock',
            schema.ATTR_EXHAUSTED: True,
            schema.ATTR_FP: 'b' * 32,
            schema.ATTR_DB: 'nova',
        },
    ),
    record.counter(
        schema.EV_SINK_DROPS, 'h1', 'conductor', agg.TS, {'buffer_full': 3}
    ),
    record.counter(
        schema.EV_PROCESS_SAMPLE,
        'h1',
        'conductor',
        agg.TS,
        {schema.ATTR_BUF_FILL: 17},
    ),
    _ksa(200),
    _ksa(None, 'read_timeout'),
    _periodic(),
    # what InstrumentPointsMissing counts
    record.meta(
        schema.EV_PROCESS_START,
        'h1',
        'conductor',
        agg.TS,
        {
            schema.ATTR_POINTS: {
                'patched': ['m:A.a', 'm:A.b'],
                'pending': [],
                'missing': ['m:A.c'],
                'failed': [],
            }
        },
    ),
    # what InstrumentRPCErrors matches
    agg.span(
        'rpc.call',
        30000000,
        svc='api',
        err='oslo_messaging.exceptions.MessagingTimeout',
    ),
]


def rule_exprs() -> list:
    with open(RULES, encoding='utf-8') as f:
        doc = yaml.safe_load(f)
    return [rule for group in doc['groups'] for rule in group['rules']]


def dashboard_exprs() -> list:
    """Every query of the dashboard: panels' targets and the
    variables' ``label_values`` queries."""
    with open(DASHBOARD, encoding='utf-8') as f:
        doc = json.load(f)
    out = []
    for panel in doc['panels']:
        out.extend(t['expr'] for t in panel.get('targets', ()))
    for var in doc['templating']['list']:
        if var['type'] == 'query':
            out.append(var['query']['query'])
    return out


def load_tool(path: str):
    """A script of tools/ as a module."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def promql(expr: str) -> str:
    for var, value in _VARS.items():
        expr = expr.replace(var, value)
    return expr


class MonitoringFilesTestBase(base.TestCase):
    def setUp(self):
        super().setUp()
        out = os.path.join(self.tmp, 'm')
        sink_tests.write_state(out, 'nova-conductor', 101, RECORDS)
        self.exposition = metrics_sink.exposition(out)
        self.follower = follow.once([FOLLOWED])
        self.finder = follow.once([FOUND])
        self.emitted = {
            s.name
            for text in (
                self.exposition,
                self.follower.exposition(),
                self.finder.exposition(),
            )
            for f in parser.text_string_to_metric_families(text)
            for s in f.samples
        }

    def promtool(self, *args, cwd=None):
        tool = sink_tests.promtool()
        if tool is None:
            self.skipTest('promtool is not installed')
        return subprocess.run(
            [tool] + list(args),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
        )


class ExtractionTest(base.TestCase):
    def test_metric_and_recorded_names(self):
        expr = (
            'sum by (db) (rate(instrument_sql_deadlocks_total{'
            'event=~"instrument_x"}[5m])) / '
            'db:instrument_sql_statements:rate5m'
        )
        self.assertEqual(
            {'instrument_sql_deadlocks_total'}, metric_names(expr)
        )
        self.assertEqual(
            {'db:instrument_sql_statements:rate5m'}, recorded_names(expr)
        )


class RulesTest(MonitoringFilesTestBase):
    def test_the_records_feed_every_family(self):
        # else a name missing from the exposition could be this test's
        # sample, not the exporter
        for name, (kind, _, _) in metrics.FAMILIES.items():
            suffix = '_count' if kind == 'histogram' else ''
            self.assertIn(name + suffix, self.emitted)

    def test_rules_name_only_emitted_metrics(self):
        rules = rule_exprs()
        recorded = {r['record'] for r in rules if 'record' in r}
        self.assertGreater(len(recorded), 5)
        self.assertGreater(len(rules) - len(recorded), 3)
        for rule in rules:
            names = metric_names(rule['expr'])
            self.assertTrue(names, rule)
            self.assertEqual(set(), names - self.emitted, rule)
            self.assertEqual(
                set(), recorded_names(rule['expr']) - recorded, rule
            )
            if 'alert' in rule:
                self.assertEqual(
                    {'summary', 'description'}, set(rule['annotations']), rule
                )

    def test_promtool_check_rules(self):
        result = self.promtool('check', 'rules', RULES)
        self.assertEqual(0, result.returncode, result.stdout + result.stderr)
        self.assertIn(
            'SUCCESS: %d rules found' % len(rule_exprs()), result.stdout
        )

    def test_promtool_test_rules(self):
        result = self.promtool('test', 'rules', RULES_TEST)
        self.assertEqual(0, result.returncode, result.stdout + result.stderr)
        self.assertIn('SUCCESS', result.stdout)

    def test_promtool_test_rules_catches_a_changed_threshold(self):
        # the unit tests really evaluate the alerts: with a threshold
        # the input series never reach, they fail
        with open(RULES, encoding='utf-8') as f:
            text = f.read()
        self.assertIn('* 60 > 1\n', text)
        work = os.path.join(self.tmp, 'rules')
        os.makedirs(work)
        with open(
            os.path.join(work, 'instrument-rules.yml'), 'w', encoding='utf-8'
        ) as f:
            f.write(text.replace('* 60 > 1\n', '* 60 > 100\n'))
        with open(RULES_TEST, encoding='utf-8') as f:
            tests = f.read()
        with open(os.path.join(work, 'test.yml'), 'w', encoding='utf-8') as f:
            f.write(tests)
        result = self.promtool('test', 'rules', 'test.yml', cwd=work)
        self.assertNotEqual(0, result.returncode, result.stdout)
        self.assertIn('InstrumentSQLDeadlocks', result.stdout + result.stderr)


class DashboardTest(MonitoringFilesTestBase):
    def test_is_the_generator_output(self):
        gen = load_tool(GENERATOR)
        with open(DASHBOARD, encoding='utf-8') as f:
            self.assertEqual(
                gen.render(),
                f.read(),
                'run python tools/grafana_dashboard.py > '
                'etc/grafana/instrument-dashboard.json',
            )

    def test_panels(self):
        with open(DASHBOARD, encoding='utf-8') as f:
            doc = json.load(f)
        titles = ' '.join(p['title'] for p in doc['panels']).lower()
        for word in (
            'latency',
            'errors',
            'sql time',
            'deadlocks',
            'lock wait',
            'pool',
            'service calls',
            'dropped',
        ):
            self.assertIn(word, titles)
        ids = [p['id'] for p in doc['panels']]
        self.assertEqual(len(ids), len(set(ids)))

    def test_queries_name_only_emitted_metrics(self):
        exprs = dashboard_exprs()
        self.assertGreater(len(exprs), 15)
        used = set()
        for expr in exprs:
            names = metric_names(expr)
            self.assertTrue(names, expr)
            self.assertEqual(set(), names - self.emitted, expr)
            self.assertEqual(set(), recorded_names(expr), expr)
            used |= names
        # every family is on the dashboard
        for name in metrics.FAMILIES:
            self.assertTrue(any(u.startswith(name) for u in used), name)

    def test_promtool_parses_every_query(self):
        exprs = [
            e for e in dashboard_exprs() if not e.startswith('label_values(')
        ]
        doc = {
            'groups': [
                {
                    'name': 'dashboard',
                    'rules': [
                        {
                            'record': 'dashboard:query_%d:test' % n,
                            'expr': promql(e),
                        }
                        for n, e in enumerate(exprs)
                    ],
                }
            ]
        }
        path = os.path.join(self.tmp, 'dashboard-rules.yml')
        with open(path, 'w', encoding='utf-8') as f:
            yaml.safe_dump(doc, f)
        result = self.promtool('check', 'rules', path)
        self.assertEqual(0, result.returncode, result.stdout + result.stderr)
        self.assertIn('SUCCESS: %d rules found' % len(exprs), result.stdout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class LivePrometheusTest(MonitoringFilesTestBase):
    """A real Prometheus scrapes ``instrument-metrics serve`` every
    second; every query of the dashboard and every rule's expression
    returns series."""

    SCRAPES = 3

    def setUp(self):
        super().setUp()
        tool = shutil.which('prometheus')
        if tool is None:
            if os.environ.get('CI') == 'true':
                raise AssertionError(
                    'prometheus is missing: apt-get install prometheus'
                )
            self.skipTest('prometheus is not installed')
        server = metrics_cmd.make_server(
            [os.path.join(self.tmp, 'm')], '127.0.0.1', 0
        )
        self.addCleanup(server.server_close)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.shutdown)
        target = '127.0.0.1:%d' % server.server_address[1]
        # and instrument-report follow's, for the per-operation row
        followed = metrics_cmd.text_server(
            self.follower.exposition, '127.0.0.1', 0
        )
        self.addCleanup(followed.server_close)
        threading.Thread(target=followed.serve_forever, daemon=True).start()
        self.addCleanup(followed.shutdown)
        found = metrics_cmd.text_server(self.finder.exposition, '127.0.0.1', 0)
        self.addCleanup(found.server_close)
        threading.Thread(target=found.serve_forever, daemon=True).start()
        self.addCleanup(found.shutdown)
        config = os.path.join(self.tmp, 'prometheus.yml')
        with open(config, 'w', encoding='utf-8') as f:
            yaml.safe_dump(
                {
                    'global': {
                        'scrape_interval': '1s',
                        'evaluation_interval': '1s',
                    },
                    'scrape_configs': [
                        {
                            'job_name': 'instrument',
                            'static_configs': [{'targets': [target]}],
                        },
                        {
                            'job_name': 'instrument-follow',
                            'static_configs': [
                                {
                                    'targets': [
                                        '127.0.0.1:%d'
                                        % followed.server_address[1]
                                    ]
                                }
                            ],
                        },
                        {
                            'job_name': 'instrument-findings',
                            'static_configs': [
                                {
                                    'targets': [
                                        '127.0.0.1:%d'
                                        % found.server_address[1]
                                    ]
                                }
                            ],
                        },
                    ],
                },
                f,
            )
        self.port = _free_port()
        # the span the panels are rendered over
        self.begin = time.time()
        log = open(os.path.join(self.tmp, 'prometheus.log'), 'w')
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [
                tool,
                '--config.file',
                config,
                '--storage.tsdb.path',
                os.path.join(self.tmp, 'tsdb'),
                '--web.listen-address',
                '127.0.0.1:%d' % self.port,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.addCleanup(proc.wait, 30)
        self.addCleanup(proc.terminate)
        # a few scrapes: rate() needs two samples in its range
        deadline = time.monotonic() + 60
        while True:
            self.assertIsNone(proc.poll(), 'prometheus exited')
            try:
                got = self.query(
                    'count_over_time(up{job=~"instrument|'
                    'instrument-follow|instrument-findings"}[1m])'
                )
            except (OSError, ValueError):
                # not listening yet, or not ready: an empty answer
                # (seen at a load average of 12) is no JSON
                got = []
            if len(got) == 3 and all(
                float(g['value'][1]) >= self.SCRAPES for g in got
            ):
                break
            self.assertLess(
                time.monotonic(),
                deadline,
                'prometheus did not scrape instrument-metrics',
            )
            time.sleep(0.5)

    def query(self, expr: str) -> list:
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=30)
        try:
            conn.request(
                'GET',
                '/api/v1/query?%s' % urllib.parse.urlencode({'query': expr}),
            )
            doc = json.load(conn.getresponse())
        finally:
            conn.close()
        self.assertEqual('success', doc['status'], (expr, doc))
        return doc['data']['result']

    def test_every_dashboard_query_returns_series(self):
        for expr in dashboard_exprs():
            if expr.startswith('label_values('):
                # Grafana's: the series it lists the label's values of
                metric, label = expr[len('label_values(') : -1].split(', ')
                result = self.query(metric)
                self.assertTrue(result, expr)
                self.assertTrue(
                    all(r['metric'].get(label) for r in result), expr
                )
                continue
            query = promql(expr).replace('[5m]', '[30s]')
            self.assertTrue(self.query(query), (expr, query))

    def test_every_rule_expression_returns_series(self):
        # the alerts' thresholds are not reached by constant counters:
        # their expressions without the comparison
        for rule in rule_exprs():
            expr = (
                rule['expr']
                .replace('[5m]', '[30s]')
                .replace('[10m]', '[30s]')
                .replace('[15m]', '[30s]')
            )
            expr = re.split(r'\s[<>]\s', expr)[0]
            if 'alert' in rule:
                # rate(...) > 0 keeps nothing of constant counters
                expr = re.sub(r'\s*\*\s*60\s*$', '', expr.strip())
            self.assertTrue(self.query(expr), (rule, expr))

    def render(self, dashboard: str, *args) -> tuple:
        """tools/render_dashboard.py over the scrapes so far: its exit
        status, its summary and the image's path."""
        render = load_tool(RENDERER)
        image = os.path.join(self.tmp, 'dashboard.png')
        summary = os.path.join(self.tmp, 'summary.json')
        status = render.main(
            [
                '--prometheus',
                'http://127.0.0.1:%d' % self.port,
                '--dashboard',
                dashboard,
                '--start',
                str(self.begin),
                '--end',
                str(time.time()),
                '--step',
                '1',
                '--rate-interval',
                '30s',
                '--summary',
                summary,
                '-o',
                image,
            ]
            + list(args)
        )
        with open(summary, encoding='utf-8') as f:
            return status, json.load(f), image

    def assertPNG(self, path):
        with open(path, 'rb') as f:
            data = f.read()
        self.assertEqual(b'\x89PNG\r\n\x1a\n', data[:8])
        self.assertGreater(len(data), 20000)

    def test_every_panel_rendered_with_series(self):
        status, summary, image = self.render(DASHBOARD, '--require-series')
        self.assertEqual(0, status, summary)
        with open(DASHBOARD, encoding='utf-8') as f:
            panels = [
                p['title']
                for p in json.load(f)['panels']
                if p['type'] != 'row'
            ]
        self.assertEqual(panels, [row['title'] for row in summary])
        for row in summary:
            self.assertGreater(row['series'], 0, row)
        # counters that moved: their rates are numbers (quantiles of
        # unchanged histograms are NaN, as in Grafana)
        points = {row['title']: row['points'] for row in summary}
        self.assertGreater(points['SQL statements per kind'], 0)
        self.assertPNG(image)

    def test_a_panel_without_series_is_reported(self):
        with open(DASHBOARD, encoding='utf-8') as f:
            doc = json.load(f)
        panel = next(p for p in doc['panels'] if p['type'] != 'row')
        panel['targets'][0]['expr'] = 'instrument_no_such_metric_total'
        path = os.path.join(self.tmp, 'broken.json')
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(doc, f)
        status, summary, image = self.render(path, '--require-series')
        self.assertEqual(1, status)
        empty = [row['title'] for row in summary if not row['series']]
        self.assertEqual([panel['title']], empty)
        # drawn all the same, the panel saying "No data"
        self.assertPNG(image)
        status, _, _ = self.render(path)
        self.assertEqual(0, status)


class RendererTest(base.TestCase):
    """tools/render_dashboard.py's Grafana conventions."""

    def setUp(self):
        super().setUp()
        self.render = load_tool(RENDERER)

    def test_variables(self):
        expr = (
            'sum by (le) (rate(x{service=~"$service",'
            'instance=~"${instance}"}[$__rate_interval]))'
        )
        self.assertEqual(
            'sum by (le) (rate(x{service=~".*",instance=~".*"}[30s]))',
            self.render.substitute(expr, '30s', self.render.VARIABLES),
        )

    def test_legend(self):
        labels = {'db': 'nova', 'query': 'abc', 'job': 'instrument'}
        self.assertEqual(
            'p95 nova abc',
            self.render.legend('p95 {{db}} {{ query }}', labels),
        )
        self.assertEqual('x', self.render.legend('x {{missing}}', labels))
        self.assertEqual(
            '{db="nova", query="abc"}', self.render.legend('', labels)
        )

    def test_units(self):
        fmt = self.render.format_value
        self.assertEqual('250 µs', fmt(0.00025, 's'))
        self.assertEqual('12 ms', fmt(0.012, 's'))
        self.assertEqual('2.5 s', fmt(2.5, 's'))
        self.assertEqual('1.5 min', fmt(90, 's'))
        self.assertEqual('1.2K req/s', fmt(1200, 'reqps'))
        self.assertEqual('3 ops/s', fmt(3, 'ops'))
        self.assertEqual('-', fmt(float('nan'), 's'))

    def test_svg_of_panels_in_the_grid(self):
        # without Prometheus: a row and two panels, one without data,
        # drawn into an SVG (.svg by the path's extension)
        r = self.render
        panels = [
            r.Panel(
                'Calls', '', {'x': 0, 'y': 0, 'w': 24, 'h': 1}, 'row', [], []
            ),
            r.Panel(
                'Latency',
                's',
                {'x': 0, 'y': 1, 'w': 12, 'h': 8},
                'timeseries',
                [r.Series('api', [1e9, 1e9 + 10], [0.002, float('nan')])],
                ['q'],
            ),
            r.Panel(
                'Errors',
                'ops',
                {'x': 12, 'y': 1, 'w': 12, 'h': 8},
                'timeseries',
                [],
                ['q'],
            ),
        ]
        path = os.path.join(self.tmp, 'dashboard.svg')
        r.draw(panels, path, 'Title', 1e9, 1e9 + 10, subtitle='sub')
        with open(path, encoding='utf-8') as f:
            svg = f.read()
        self.assertIn('<svg', svg)
        self.assertEqual(['Errors'], r.empty(panels))
        self.assertEqual(
            [('Latency', 1, 1), ('Errors', 0, 0)],
            [
                (s['title'], s['series'], s['points'])
                for s in r.summary(panels)
            ],
        )
