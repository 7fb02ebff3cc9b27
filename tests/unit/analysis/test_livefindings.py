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
"""The advisor's findings as live metrics (``analysis.livefindings``,
``instrument-report follow``).

The contract: on a finished run, ``follow --once`` exports as
``instrument_finding`` exactly the findings the batch report prints
(rule, setting, host and service), with the same share: on the demo's
runs with an injected cause (``tests/data/findings``, real nova), on
its fidelity runs (none), and on every span file of the rules' own
tests (``test_findings``: each rule firing and silent), run again here
with the follow mode beside the batch report.  Then the window: a
finding goes away once the watermark moved past its cause; memory and
label sets stay bounded under many hosts.
"""

import glob
import json
import os
import subprocess
import types

import fixtures
import testtools

from instrument.analysis import exposition
from instrument.analysis import follow
from instrument.analysis import livefindings
from instrument.analysis import pipeline
from tests.unit.analysis import test_findings
from tests.unit.analysis import test_findings_services
from tests.unit.analysis import test_follow
from tests.unit.analysis import test_waits

MS = test_waits.MS
DATA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, 'data')
INJECTED = sorted(glob.glob(os.path.join(DATA, 'findings', '*.jsonl.gz')))


def printed(report: dict) -> dict:
    """``{(rule, section, option, host, service): share}`` of the
    findings a batch report prints: each setting of each finding, per
    service it names the value of (none: empty host and service)."""
    out: dict = {}
    for f in report['findings']['findings']:
        share = f['sure']['share'] or 0.0
        for s in f['settings']:
            for v in s['values'] or [{'host': '', 'svc': ''}]:
                key = (
                    f['rule'],
                    s['section'],
                    s['option'],
                    v['host'] or '',
                    v['svc'] or '',
                )
                out[key] = max(out.get(key, 0.0), share)
    return out


def exported(follower: follow.Follower) -> dict:
    """The same, from what ``follow`` exports (the exposition parsed
    back by prometheus_client's parser)."""
    families = test_follow.parse(follower.exposition())
    held = families.get(exposition.FINDING)
    shares = families.get(exposition.FINDING_SHARE)
    names = exposition.FINDING_LABELS

    def key(sample):
        return tuple(sample.labels.get(n, '') for n in names)

    out = {}
    for sample in held.samples if held else ():
        assert sample.value == 1, sample
        out[key(sample)] = None
    for sample in shares.samples if shares else ():
        out[key(sample)] = sample.value
    return out


class Contract:
    """Each run the batch report analyses is followed (``--once``) too:
    the same findings, the same shares."""

    def assertSameFindings(self, paths: list, report: dict) -> None:
        follower = follow.once(paths)
        self.assertEqual(printed(report), exported(follower))
        series = follower.series()
        self.assertEqual({(): 1}, series[exposition.FINDINGS_EVALUATIONS])
        self.assertEqual(
            len(report['requests']),
            series[exposition.FINDINGS_REQUESTS][()],
        )


class RuleContract(Contract):
    def analyse(self, *logs):
        path = self.useFixture(fixtures.TempDir()).path
        for i, log in enumerate(logs):
            log.write(os.path.join(path, 'h%d.jsonl' % i))
        report = pipeline.analyse([path])
        self.assertSameFindings([path], report)
        return report


class PeriodicContract(Contract):
    def analyse(self, path=None, jobs=1):
        report = super().analyse(path, jobs)
        self.assertSameFindings([path or self.dir], report)
        return report


# every test of every rule, with the follow mode checked beside it
class DbPoolLive(RuleContract, test_findings.DbPoolRuleTest):
    pass


class BuildQueueLive(RuleContract, test_findings.BuildQueueRuleTest):
    pass


class AuditLive(PeriodicContract, test_findings.AuditRuleTest):
    pass


class RpcTimeoutLive(RuleContract, test_findings.RpcTimeoutRuleTest):
    pass


class CollisionLive(RuleContract, test_findings.CollisionRuleTest):
    pass


class DeadlockLive(RuleContract, test_findings.DeadlockRuleTest):
    pass


class SaturationLive(RuleContract, test_findings.SaturationRuleTest):
    pass


class CellDominanceLive(RuleContract, test_findings.CellDominanceRuleTest):
    pass


class SaturationMeasuredLive(
    RuleContract, test_findings.SaturationMeasuredTest
):
    pass


class ApiSaturationLive(RuleContract, test_findings.ApiSaturationTest):
    pass


class IdentityLive(RuleContract, test_findings_services.IdentityRuleTest):
    pass


class NetworkLive(RuleContract, test_findings_services.NetworkRuleTest):
    pass


class OnceEqualsBatchTest(Contract, testtools.TestCase):
    def test_the_demos_injected_causes(self):
        # real nova (the demo, nova 34): db-pool, network-fail
        self.assertEqual(2, len(INJECTED))
        for path in INJECTED:
            report = pipeline.analyse([path])
            self.assertTrue(report['findings']['findings'], path)
            self.assertSameFindings([path], report)

    def test_the_fidelity_runs_have_none(self):
        for path in test_follow.FIDELITY:
            report = pipeline.analyse([path])
            self.assertEqual({}, printed(report))
            self.assertSameFindings([path], report)

    def test_the_finding_names_option_host_and_service(self):
        [path] = [p for p in INJECTED if 'db-pool' in p]
        got = exported(follow.once([path]))
        self.assertIn(
            (
                'db_pool_exhaustion',
                'api_database',
                'max_pool_size',
                'fake-mini',
                'conductor',
            ),
            got,
        )
        values = follow.once([path]).series()[exposition.FINDING_VALUE]
        self.assertEqual(
            1,
            values[
                (
                    'db_pool_exhaustion',
                    'api_database',
                    'max_pool_size',
                    'fake-mini',
                    'conductor',
                )
            ],
        )

    def test_a_port_not_bound_read_from_the_failure_rows(self):
        # rule 6 from the failures section's rows (the window's own)
        log = test_waits._Log()
        test_findings.start(
            log, 'ctl-1', 'conductor', {'scheduler': {'max_attempts': 1}}
        )
        for i in range(2):
            req = 'req-%d' % i
            top = log.add(
                'compute.build_and_run_instance', i * 300 * MS, 200 * MS, req
            )
            sid = log.add('compute.network', i * 300 * MS, 50 * MS, req, top)
            rec = json.loads(log.lines[-1])
            rec['st'] = 'error'
            rec['err'] = {
                'cls': 'nova.exception.PortBindingFailed',
                'msg': 'Binding failed for port %s' % sid,
            }
            log.lines[-1] = json.dumps(rec)
        path = self.useFixture(fixtures.TempDir()).path
        log.write(os.path.join(path, 'h.jsonl'))
        report = pipeline.analyse([path])
        self.assertIn(
            (
                'network_failures',
                'scheduler',
                'max_attempts',
                'ctl-1',
                'conductor',
            ),
            printed(report),
        )
        self.assertSameFindings([path], report)

    def test_once_reads_the_whole_run_whatever_the_window(self):
        # --once: the batch report's findings even with a window far
        # shorter than the run (one slice, nothing dropped)
        [path] = [p for p in INJECTED if 'db-pool' in p]
        report = pipeline.analyse([path])
        follower = follow.once([path], follow.Options(findings_window_s=1))
        self.assertEqual(printed(report), exported(follower))
        self.assertFalse(follower.findings.sliding)

    def test_promtool_checks_the_findings(self):
        text = follow.once(INJECTED).exposition()
        self.assertIn(exposition.FINDING + '{', text)
        done = subprocess.run(  # noqa: S603 - a fixed tool
            [test_follow.PROMTOOL, 'check', 'metrics'],
            input=text.encode(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        self.assertEqual(
            (0, b''), (done.returncode, done.stdout + done.stderr)
        )

    def test_off_with_a_window_of_zero(self):
        follower = follow.once(
            INJECTED[:1], follow.Options(findings_window_s=0)
        )
        self.assertFalse(follower.series().get(exposition.FINDING))
        self.assertNotIn(exposition.FINDING + '{', follower.exposition())


def pool_boots(log, first, n, start_ms, wait_us, host='ctl-1'):
    """``n`` boots of 200 ms from ``start_ms``, 300 ms apart, each
    waiting ``wait_us`` for a connection of nova_api (none: no wait)
    on its critical path."""
    for i in range(n):
        req = 'req-%d' % (first + i)
        t = (start_ms + i * 300) * MS
        top = log.add(
            'compute.build_and_run_instance', t, 200 * MS, req, host='cmp-1'
        )
        if wait_us:
            log.add(
                'db.pool.wait',
                t,
                wait_us,
                req,
                top,
                {'db': 'nova_api', 'size': 1},
                svc='conductor',
                host=host,
            )


class WindowTest(test_follow.Base):
    """The finding holds while its cause is in the window, and goes
    away once the watermark moved past it."""

    def test_the_finding_goes_away_with_its_cause(self):
        log = test_waits._Log()
        test_findings.start(
            log,
            'ctl-1',
            'conductor',
            {'api_database': {'max_pool_size': 1, 'max_overflow': 0}},
        )
        # the cause: 6 boots waiting 50 ms for a connection
        pool_boots(log, 0, 6, 0, 50 * MS)
        path = os.path.join(self.tmp, 'ctl-1.jsonl')
        log.write(path)
        # (boots without an outcome: finalised after --hung)
        opts = follow.Options(
            lag_s=1,
            idle_s=1,
            hung_s=2,
            findings_window_s=60,
            findings_every_s=0,
        )
        follower = follow.Follower([self.tmp], opts)
        # later boots, quiet, move the watermark on
        written = len(log.lines)

        def more(start_ms):
            nonlocal written
            pool_boots(log, start_ms, 3, start_ms, 0)
            with open(path, 'a') as out:
                out.write('\n'.join(log.lines[written:]) + '\n')
            written = len(log.lines)
            follower.poll()
            return follower.series()

        follower.poll()
        series = more(10_000)
        held = series[exposition.FINDING]
        self.assertIn(
            (
                'db_pool_exhaustion',
                'api_database',
                'max_pool_size',
                'ctl-1',
                'conductor',
            ),
            held,
        )
        # still in the window 50 s later
        self.assertTrue(more(50_000)[exposition.FINDING])
        # the watermark 60 s past the cause's slice: gone
        series = more(130_000)
        self.assertEqual({}, series[exposition.FINDING])
        self.assertNotIn(exposition.FINDING + '{', follower.exposition())
        self.assertEqual(
            follower.polls, series[exposition.FINDINGS_EVALUATIONS][()]
        )
        # (the window holds none of the cause's requests)
        kept = {k.req for k in follower.findings.requests()}
        self.assertFalse(kept & {'req-%d' % i for i in range(6)})
        # the batch report of the whole run still has it
        report = pipeline.analyse([self.tmp])
        self.assertTrue(printed(report))


class BoundsTest(test_follow.Base):
    def flood(self, hosts: int) -> str:
        """``hosts`` conductors, each with its own span file, settings
        and two boots that waited for the pool (a timed-out one)."""
        directory = os.path.join(self.tmp, 'flood')
        os.makedirs(directory)
        for h in range(hosts):
            log = test_waits._Log()
            host = 'ctl-%04d' % h
            test_findings.start(
                log,
                host,
                'conductor',
                {'api_database': {'max_pool_size': 1, 'max_overflow': 0}},
            )
            pool_boots(log, h * 10, 2, h * 50, 50 * MS, host=host)
            log.write(os.path.join(directory, host + '.jsonl'))
        return directory

    def test_labels_capped_under_many_hosts(self):
        directory = self.flood(300)
        report = pipeline.analyse([directory])
        # the batch report names every conductor (300 x 2 databases
        # options ...)
        self.assertGreater(len(printed(report)), exposition.MAX_SERIES)
        series = follow.once([directory]).series()
        held = series[exposition.FINDING]
        self.assertEqual(exposition.MAX_SERIES + 1, len(held))
        other = (exposition.OTHER,) * len(exposition.FINDING_LABELS)
        self.assertEqual(
            len(printed(report)) - exposition.MAX_SERIES, held[other]
        )
        for family in (exposition.FINDING_SHARE, exposition.FINDING_VALUE):
            self.assertLessEqual(len(series[family]), exposition.MAX_SERIES)
            self.assertLessEqual(set(series[family]), set(held))

    def test_requests_and_process_starts_bounded(self):
        directory = self.flood(120)
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.analysis.livefindings.MAX_PROCESSES', 50
            )
        )
        opts = follow.Options(findings_max_requests=40, findings_every_s=0)
        follower = follow.Follower([directory], opts)
        follower.poll()
        follower.finish()
        window = follower.findings
        self.assertLessEqual(len(window.processes.rows), 50)
        kept = sum(len(p.requests) for p in window.slices.values())
        self.assertLessEqual(kept, 40)
        self.assertEqual(
            240 - kept,
            follower.series()[exposition.FINDINGS_DROPPED][
                ('requests_past_cap',)
            ],
        )

    def test_slices_bounded_over_a_long_run(self):
        # boots every 30 s for 2 h of input time, read in steps: the
        # window keeps its slices (and their requests) only
        log = test_waits._Log()
        path = os.path.join(self.tmp, 'ctl-1.jsonl')
        opts = follow.Options(
            lag_s=1,
            idle_s=1,
            hung_s=2,
            findings_window_s=300,
            findings_every_s=0,
        )
        follower = follow.Follower([self.tmp], opts)
        most = 0
        for step in range(24):
            written = len(log.lines)
            for k in range(10):
                at = (step * 10 + k) * 30_000
                pool_boots(log, step * 10 + k, 1, at, 50 * MS)
            with open(path, 'a') as out:
                out.write('\n'.join(log.lines[written:]) + '\n')
            follower.poll()
            window = follower.findings
            self.assertLessEqual(len(window.slices), livefindings.SLICES + 2)
            most = max(most, len(window.requests()))
        # 300 s of boots 30 s apart, give or take a slice
        self.assertLessEqual(most, 12)
        self.assertGreater(
            follower.series()[exposition.FINDINGS_REQUESTS][()], 0
        )


class SliceTest(testtools.TestCase):
    def test_a_record_before_the_window_is_counted_not_kept(self):
        window = livefindings.Window(60_000_000, None)
        window.advance(1_000_000_000)
        self.assertIsNone(window.slice_at(900_000_000))
        self.assertEqual(1, window.before)
        self.assertIsNotNone(window.slice_at(990_000_000))
        self.assertEqual(1, len(window.slices))

    def test_a_request_known_after_its_slice_left_is_kept(self):
        # finalised by --hung long after its end: in the oldest slice
        window = livefindings.Window(60_000_000, None)
        window.advance(1_000_000_000)
        old = types.SimpleNamespace(
            req='req-1',
            kind='boot',
            state='incomplete',
            start=100_000_000,
            end=200_000_000,
            waits=(),
            instances=[],
            _cp=((), ()),
        )
        window.request(old)
        self.assertEqual(['req-1'], [k.req for k in window.requests()])
        self.assertEqual([window.first], list(window.slices))
        self.assertEqual(0, window.before)

    def test_a_time_far_ahead_keeps_the_slices_bounded(self):
        window = livefindings.Window(60_000_000, None)
        for k in range(30):
            window.slice_at(k * 6_000_000)
        window.slice_at(10**15)
        self.assertLessEqual(len(window.slices), livefindings.SLICES + 2)

    def test_the_findings_of_json_shape(self):
        # (the series of a finding without a service named)
        held, share, value = livefindings.finding_series(
            [
                {
                    'rule': 'r',
                    'sure': {'share': 0.5},
                    'settings': [
                        {'section': 's', 'option': 'o', 'values': []},
                        {
                            'section': 's',
                            'option': 'p',
                            'values': [
                                {
                                    'host': 'h',
                                    'svc': 'x',
                                    'value': True,
                                    'recorded': True,
                                },
                                {
                                    'host': 'h',
                                    'svc': 'y',
                                    'value': 'text',
                                    'recorded': True,
                                },
                            ],
                        },
                    ],
                }
            ]
        )
        self.assertEqual(
            {
                ('r', 's', 'o', '', ''): 1,
                ('r', 's', 'p', 'h', 'x'): 1,
                ('r', 's', 'p', 'h', 'y'): 1,
            },
            held,
        )
        self.assertEqual({0.5}, set(share.values()))
        self.assertEqual({('r', 's', 'p', 'h', 'x'): 1.0}, value)
        json.dumps(sorted(held))
