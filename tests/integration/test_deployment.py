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
"""A deployment-realistic boot load, checked through the analyser.

``setUpClass`` runs the whole scenario once: it starts the cloud
(``cloud.Cloud``: nova-api, conductor, scheduler, four computes on
skewed clocks, placement, MariaDB, RabbitMQ), boots servers through the
HTTP API at a fixed concurrency, waits until the API says every server
is ACTIVE or ERROR, reads what the API says about each (status, fault,
the hosts of its build attempts), stops every service (their span
buffers flush at exit), tears the back ends down and runs the analyser
on the span files.  The tests compare the analyser's answers with the
injected clock offsets and with the API.

The load mixes plain boots (four computes: two plain fake drivers, one
``FakeRescheduleDriver`` whose first spawn of each instance fails into a
reschedule, one ``FakeBuildAbortDriver`` whose spawns abort the build),
boots of a flavor no host can hold (NoValidHost) and boots of an image
glance does not have (HTTP 400 from nova-api).

Knobs (environment): ``INSTRUMENT_IT_SERVERS`` (30),
``INSTRUMENT_IT_CONCURRENCY`` (10), ``INSTRUMENT_IT_LOG_DIR`` (where the
work directory ``integration/`` goes: logs, configuration, span files,
report; tox sets it to the env's log dir),
``INSTRUMENT_IT_OFFSET_TOLERANCE_US`` (1000).  Under ``CI=true`` a missing
MariaDB, RabbitMQ or libfaketime fails the run instead of skipping it.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest

import testtools

from instrument import schema
from instrument.analysis import pipeline
from instrument.analysis.render import json as report_json
from instrument.analysis.render import text as report_text
from tests import releases
from tests.integration import backends
from tests.integration import cloud
from tests.integration import load
from tests.integration import moves as moves_mod

COMPUTES = [
    cloud.Compute('compute-1', 'fake.FakeDriver', 0.350),
    cloud.Compute('compute-2', 'fake.FakeDriver', -0.800),
    cloud.Compute('compute-3', 'fake.FakeRescheduleDriver', 1.500),
    cloud.Compute('compute-4', 'fake.FakeBuildAbortDriver', -2.250),
]
# The offset the analyser must find is the opposite of the injected skew
# (it is added to a host's timestamps); this close, in microseconds:
# computes reach the database through the conductor, as in production,
# so every compute has RPC replies and two-sided bounds (issue 20 asks
# for 1 ms; runs here found 88..486 us).  INSTRUMENT_IT_OFFSET_TOLERANCE_US
# widens it for a release whose RPC replies carry no timing (tox.ini,
# integration-nova33).
OFFSET_TOLERANCE_US = int(
    os.environ.get('INSTRUMENT_IT_OFFSET_TOLERANCE_US', '1000')
)
SERVERS = int(os.environ.get('INSTRUMENT_IT_SERVERS', '30'))
CONCURRENCY = int(os.environ.get('INSTRUMENT_IT_CONCURRENCY', '10'))
SETTLE_TIMEOUT_S = 240
MISSING_IMAGE = '0c8a2c1e-0000-4000-8000-00000000dead'

GOOD = ('success', 'rescheduled_success')
# The mode each nova service runs in by default, per nova major release
# (doc/source/releases.rst, "Modes"): the tier starts every service
# without a mode switch, so this is what the services must report.
DEFAULT_MODES = {
    '34': dict.fromkeys(
        ('api', 'conductor', 'scheduler', 'compute'), 'threads'
    ),
    '33': {
        'api': 'threads',
        'scheduler': 'threads',
        'conductor': 'eventlet',
        'compute': 'eventlet',
    },
}
# the plain computes, between which a server is live migrated and
# another cold migrated after the boots
MOVE_HOSTS = ('compute-1', 'compute-2')


def _in_ci() -> bool:
    return os.environ.get('CI', '').lower() in ('1', 'true', 'yes')


def work_dir() -> str:
    base = os.environ.get('INSTRUMENT_IT_LOG_DIR')
    if not base:
        return tempfile.mkdtemp(prefix='instrument-it-work-')
    path = os.path.join(base, 'integration')
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def plan(image: str, tiny: str, huge: str) -> list:
    """The boots, in order: one in ten of a flavor no host can hold, one
    in fifteen of an image glance does not have, the rest plain."""
    boots = []
    for n in range(SERVERS):
        if n % 10 == 4:
            boots.append(load.Boot('it-huge-%02d' % n, huge, image))
        elif n % 15 == 7:
            boots.append(load.Boot('it-noimage-%02d' % n, tiny, MISSING_IMAGE))
        else:
            boots.append(load.Boot('it-%02d' % n, tiny, image))
    return boots


def api_state(boot: load.Boot) -> str:
    """The final state the API's answers imply, in the analyser's words
    (doc/source/events.rst, "Final states of a boot")."""
    if boot.server_id is None:
        return 'api_failure'
    if boot.status == 'ACTIVE':
        return (
            'success' if len(boot.build_hosts) == 1 else 'rescheduled_success'
        )
    message = (boot.fault or {}).get('message', '')
    if 'No valid host' in message or 'Exceeded maximum number' in message:
        return 'scheduling_failure'
    return 'compute_failure'


class Scenario:
    """What one run produced, for the tests to read."""

    def __init__(self) -> None:
        self.boots = []
        self.report = None
        self.timings = {}
        self.work_dir = None
        # what stopping the cloud could not undo
        self.problems = []
        # requests the glance/neutron stand-ins did not know
        self.unknown = []
        # what the back ends still held of the run after teardown
        self.leftovers = []
        # the moves after the boots (moves.Move), or why they failed
        self.moves = []
        self.move_error = None
        self.span_dir = None


def run_scenario() -> Scenario:
    out = Scenario()
    out.work_dir = work_dir()
    started = time.monotonic()
    the_cloud = cloud.Cloud(COMPUTES, out.work_dir)
    the_cloud.start()
    try:
        api = load.Api(the_cloud.api_url)
        tiny = api.create_flavor('it.tiny', 1, 64, 1)
        # More disk than any fake compute has (600000 GB): NoValidHost.
        huge = api.create_flavor('it.huge', 1, 64, 1000000)
        out.boots = plan(cloud.standins.IMAGE_ID, tiny, huge)
        out.timings['post_s'] = round(api.boot_all(out.boots, CONCURRENCY), 1)
        out.timings['settle_s'] = round(
            api.settle(out.boots, SETTLE_TIMEOUT_S), 1
        )
        for boot in out.boots:
            if boot.server_id:
                boot.build_hosts = api.build_hosts(boot)
        t = time.monotonic()
        try:
            out.moves = moves_mod.run(api, out.boots, MOVE_HOSTS)
        except load.ApiError as exc:
            out.move_error = str(exc)
        out.timings['moves_s'] = round(time.monotonic() - t, 1)
        for standin in the_cloud.standins:
            out.unknown.extend(
                '%s: %s' % (standin.name, u) for u in standin.unknown
            )
    finally:
        t = time.monotonic()
        out.problems.extend(the_cloud.stop())
        out.timings['stop_s'] = round(time.monotonic() - t, 1)
    out.leftovers = the_cloud.leftovers()
    out.span_dir = the_cloud.span_dir
    out.timings.update(the_cloud.timings)
    t = time.monotonic()
    out.report = pipeline.analyse(
        [the_cloud.span_dir], pipeline.Options(jobs=1, all_lifecycles=True)
    )
    out.timings['analyse_s'] = round(time.monotonic() - t, 1)
    out.timings['total_s'] = round(time.monotonic() - started, 1)
    report_json.write(out.report, os.path.join(out.work_dir, 'report.json'))
    with open(os.path.join(out.work_dir, 'report.txt'), 'w') as f:
        f.write(report_text.render(out.report))
    with open(os.path.join(out.work_dir, 'summary.txt'), 'w') as f:
        f.write(summary(out))
    return out


def relative_offsets(report: dict) -> dict:
    """host: (offset_us, low_us, high_us) against the controller's
    clock (the analyser may pick any host as its reference)."""
    hosts = report['clocks']['hosts']
    base = hosts[cloud.CONTROLLER]['offset_us']
    out = {}
    for host, info in hosts.items():
        low, high = info['low_us'], info['high_us']
        if hosts[cloud.CONTROLLER]['status'] != 'reference':
            low = high = None
        out[host] = (info['offset_us'] - base, low, high)
    return out


def banner_points(path: str) -> dict:
    """The missing and failed points of one span file's process."""
    out = {'missing': [], 'failed': []}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec['ev'] == 'process.start':
                points = rec['attrs'].get('points') or {}
            elif rec['ev'] == 'process.points':
                points = rec['attrs']
            else:
                continue
            for key, names in out.items():
                names.extend(points.get(key) or ())
    return out


def analysed_boots(report: dict) -> dict:
    """request id: (request row, instance rows) of every boot."""
    return {r['req']: r for r in report['requests']}


def build_hosts_of(row: dict) -> list:
    return [
        e['host']
        for e in sorted(row.get('lifecycle') or (), key=lambda e: e['t_us'])
        if e['ev'] == 'compute.build'
    ]


def summary(out: Scenario) -> str:
    lines = [
        'integration run: %d boots at concurrency %d; work dir %s'
        % (len(out.boots), CONCURRENCY, out.work_dir),
        'timings (s): '
        + ', '.join('%s=%s' % kv for kv in sorted(out.timings.items())),
        '',
        '%-10s %12s %12s %10s %10s %8s'
        % ('host', 'injected_us', 'found_us', 'error_us', 'interval', 'pairs'),
    ]
    offsets = relative_offsets(out.report)
    hosts = out.report['clocks']['hosts']
    for c in COMPUTES:
        found, low, high = offsets.get(c.host, (None, None, None))
        truth = -round(c.offset_s * 1e6)
        lines.append(
            '%-10s %12d %12s %10s %10s %8s'
            % (
                c.host,
                truth,
                found,
                None if found is None else found - truth,
                None if low is None or high is None else high - low,
                hosts.get(c.host, {}).get('pairs'),
            )
        )
    lines += [
        '',
        '%-14s %-41s %-8s %-20s %-20s %s'
        % ('server', 'request', 'api', 'api_state', 'analyser', 'builds'),
    ]
    rows = analysed_boots(out.report)
    for boot in out.boots:
        row = rows.get(boot.request_id) or {}
        states = [i['state'] for i in row.get('instances') or ()]
        lines.append(
            '%-14s %-41s %-8s %-20s %-20s %s / %s'
            % (
                boot.name,
                boot.request_id,
                boot.status or boot.status_code,
                api_state(boot),
                ','.join(states) or '-',
                boot.build_hosts,
                build_hosts_of(row),
            )
        )
    for title, items in (
        ('teardown problems', out.problems),
        ('left behind', out.leftovers),
        ('unknown stand-in requests', out.unknown),
    ):
        if items:
            lines += ['', title + ':'] + items
    return '\n'.join(lines) + '\n'


class DeploymentTest(testtools.TestCase):
    """One scenario (setUpClass), several checks."""

    scenario = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            backends.require()
        except backends.Unavailable as exc:
            if _in_ci():
                raise RuntimeError(
                    'integration back ends missing under CI=true: %s' % exc
                ) from exc
            raise unittest.SkipTest(
                'integration back ends missing: %s' % exc
            ) from exc
        cls.scenario = run_scenario()
        # The figures of the run, also on the console of tox -e
        # integration (and in <work dir>/summary.txt).
        sys.stderr.write(summary(cls.scenario))
        sys.stderr.flush()

    def setUp(self):
        super().setUp()
        self.addDetail(
            'summary', testtools.content.text_content(summary(self.scenario))
        )

    def test_teardown_left_nothing(self):
        self.assertEqual([], self.scenario.problems)
        self.assertEqual([], self.scenario.leftovers)

    def test_stand_ins_knew_every_request(self):
        self.assertEqual([], self.scenario.unknown)

    def test_every_service_was_instrumented(self):
        seen = {
            (p['host'], p['svc']) for p in self.scenario.report['processes']
        }
        expected = {
            (cloud.CONTROLLER, svc)
            for svc in ('api', 'conductor', 'scheduler')
        }
        expected |= {(c.host, 'compute') for c in COMPUTES}
        self.assertEqual(set(), expected - seen, seen)

    def test_services_ran_in_the_default_mode_of_their_release(self):
        wrong = []
        for p in self.scenario.report['processes']:
            if p['svc'] not in ('api', 'conductor', 'scheduler', 'compute'):
                continue
            version = p['releases']['nova']
            modes = DEFAULT_MODES.get(version.split('.', 1)[0])
            if modes is None:
                wrong.append(
                    '%s: nova %s has no default modes here'
                    % (p['file'], version)
                )
            elif p['mode'] != modes[p['svc']]:
                wrong.append(
                    '%s: %s, nova %s runs %s in %s'
                    % (
                        p['file'],
                        p['mode'],
                        version,
                        p['svc'],
                        modes[p['svc']],
                    )
                )
        self.assertEqual([], wrong)

    def test_every_point_patched_as_the_release_says(self):
        # the banner's missing and failed points over the whole run (the
        # process.start record and the process.points of late imports)
        # are those the release's entry of RELEASES names
        wrong = []
        for p in self.scenario.report['processes']:
            release = releases.release_of(p['releases']['nova'])
            if release is None:
                wrong.append(
                    '%s: nova %s is not in RELEASES'
                    % (p['file'], p['releases']['nova'])
                )
                continue
            points = banner_points(
                os.path.join(
                    self.scenario.span_dir, os.path.basename(p['file'])
                )
            )
            if (sorted(points['missing']), points['failed']) != (
                sorted(release.missing),
                [],
            ):
                wrong.append(
                    '%s: missing %s, failed %s'
                    % (p['file'], sorted(points['missing']), points['failed'])
                )
        self.assertEqual([], wrong)

    def test_span_files_are_whole(self):
        loaded = self.scenario.report['load']
        self.assertEqual(
            {},
            {k: v for k, v in loaded['counts'].items() if v},
            loaded['samples'],
        )
        self.assertEqual([], loaded['loss'])
        self.assertEqual([], loaded['problems'])

    def test_clock_offsets_recovered(self):
        clocks = self.scenario.report['clocks']
        self.assertEqual([], clocks['dropped'])
        self.assertEqual(1, clocks['groups'])
        offsets = relative_offsets(self.scenario.report)
        for c in COMPUTES:
            truth = -round(c.offset_s * 1e6)
            found, low, high = offsets[c.host]
            self.assertLessEqual(
                abs(found - truth),
                OFFSET_TOLERANCE_US,
                '%s: found %d us, injected skew %+d us'
                % (c.host, found, -truth),
            )
            if low is not None and high is not None:
                # the uncertainty interval holds the truth
                self.assertTrue(
                    low <= truth <= high,
                    '%s: %d not in [%d, %d]' % (c.host, truth, low, high),
                )

    def test_no_causality_violation_after_correction(self):
        causality = self.scenario.report['causality']
        self.assertGreater(causality['checked'], 0)
        self.assertEqual(0, causality['violations'], causality['examples'])

    def test_final_states_match_the_api(self):
        rows = analysed_boots(self.scenario.report)
        mismatches = []
        for boot in self.scenario.boots:
            row = rows.get(boot.request_id)
            if row is None:
                mismatches.append(
                    '%s %s: no request in the report'
                    % (boot.name, boot.request_id)
                )
                continue
            [inst] = row['instances']
            if inst['inst'] != boot.server_id:
                mismatches.append(
                    '%s: instance %s, API says %s'
                    % (boot.name, inst['inst'], boot.server_id)
                )
            if inst['state'] != api_state(boot):
                mismatches.append(
                    '%s: analyser %s (%s), API %s %s'
                    % (
                        boot.name,
                        inst['state'],
                        inst.get('cause') or inst.get('stopped'),
                        boot.status or boot.status_code,
                        boot.fault or '',
                    )
                )
            if sorted(build_hosts_of(row)) != sorted(boot.build_hosts):
                mismatches.append(
                    '%s: analyser built on %s, API %s'
                    % (boot.name, build_hosts_of(row), boot.build_hosts)
                )
        self.assertEqual([], mismatches)

    def test_load_had_every_outcome(self):
        # The scenario is only a test of the analyser if the failures it
        # stages really happened.
        states = {api_state(b) for b in self.scenario.boots}
        for state in ('success', 'scheduling_failure', 'api_failure'):
            self.assertIn(state, states)
        self.assertTrue(
            {'compute_failure', 'rescheduled_success'} & states, states
        )

    def test_moves_recorded_as_the_api_says(self):
        # a live migration and a confirmed cold migration between the
        # plain computes: every step under the API call's request id, on
        # the host (source or destination) the API reports
        self.assertIsNone(self.scenario.move_error)
        self.assertEqual(
            ['live-migration', 'migration'],
            [m.kind for m in self.scenario.moves],
        )
        self.assertEqual(
            ['completed', 'confirmed'],
            [m.migration_status for m in self.scenario.moves],
        )
        spans = moves_mod.read_spans(self.scenario.span_dir)
        problems = []
        for move in self.scenario.moves:
            problems.extend(moves_mod.mismatches(move, spans))
        self.assertEqual([], problems)

    def test_conductor_work_of_periodic_runs_is_theirs(self):
        # The computes reach the database only through the conductor:
        # the SQL of their periodic runs (update_available_resource
        # every 10 s) is the conductor's, under the id of nova's admin
        # context the runs' calls carry, and is charged to the runs.
        report = self.scenario.report
        spans = moves_mod.read_spans(self.scenario.span_dir)
        contexts = {
            (r.get('attrs') or {}).get(schema.ATTR_CONTEXT_REQ)
            for r in spans
            if r['ev'] in ('rpc.call', 'rpc.cast')
        }
        contexts.discard(None)
        self.assertTrue(contexts)
        tasks = {t['task']: t for t in report['periodic']['tasks']}
        uar = tasks['ComputeManager.update_available_resource']
        self.assertGreater(uar['runs'], 0)
        self.assertGreater(uar['sql_count'], 0)
        # every statement done for a run (the conductor's, and those of
        # the scheduler's own periodic tasks) counts in the section
        statements = [
            r
            for r in spans
            if r['ev'] == 'sql.query'
            and (
                r.get('req') in contexts
                or schema.periodic_task_of(r.get('req'))
            )
        ]
        self.assertEqual(
            len(statements), sum(t['sql_count'] for t in tasks.values())
        )
        # and none of those ids is a request
        self.assertEqual(
            set(), contexts & {r['req'] for r in report['requests']}
        )
