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
"""End to end against a synthetic cloud with known truth.

Seeded multi-host logs with clock skews of seconds, failures, retries,
reschedules, hung builds and bad lines; the analyser must recover the
offsets (within 1 ms), every final state, cause and failure row, the
component times (within 1 %) and every injected bad line.
"""

import collections
import gzip
import json
import os
import shutil
import tempfile

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import spanfiles
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from instrument.analysis.sections import summary as summary_section
from tests import synthetic
from tests.unit.analysis import test_fidelity as fidelity


class TruthTest(testtools.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix='instrument-truth-')
        cls.truth = synthetic.generate(
            cls.dir, seed=21, requests=350, skew_us=4_000_000, bad_input=True
        )
        cls.report = pipeline.analyse([cls.dir], pipeline.Options(jobs=1))
        cls.rows = {r['req']: r for r in cls.report['requests']}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def test_offsets_within_1ms(self):
        hosts = self.report['clocks']['hosts']
        self.assertEqual(set(self.truth.offsets), set(hosts))
        ref = [h for h, i in hosts.items() if i['status'] == 'reference']
        self.assertEqual(1, len(ref))
        ref = ref[0]
        skews = [abs(o) for o in self.truth.offsets.values()]
        self.assertGreater(max(skews), 1_000_000)
        for host, info in hosts.items():
            got = info['offset_us'] - hosts[ref]['offset_us']
            want = self.truth.offsets[host] - self.truth.offsets[ref]
            self.assertLess(abs(got - want), 1000, host)
            if host != ref:
                # the truth lies in the reported feasible interval, and
                # the offset within its error of the truth
                self.assertLessEqual(info['low_us'], want)
                self.assertGreaterEqual(info['high_us'], want)
                self.assertLessEqual(abs(got - want), info['error_us'])
        self.assertEqual([], self.report['clocks']['dropped'])
        self.assertEqual(0, self.report['causality']['violations'])

    def test_every_final_state_and_cause(self):
        self.assertEqual(len(self.truth.requests), len(self.rows))
        for req, rt in self.truth.requests.items():
            row = self.rows[req]
            if rt.kind == 'other':
                self.assertEqual('other', row['kind'], req)
                continue
            states = {i['inst']: i['state'] for i in row['instances']}
            self.assertEqual(rt.states, states, req)
            causes = {
                i['inst']: (i['cause'] or {}).get('cls')
                for i in row['instances']
            }
            self.assertEqual(rt.causes, causes, req)
            for inst in row['instances']:
                if inst['state'] == 'incomplete':
                    self.assertEqual(
                        rt.stopped[inst['inst']],
                        (inst['stopped']['ev'], inst['stopped']['host']),
                    )
        counts = self.truth.states()
        del counts['other']
        self.assertEqual(dict(counts), self.report['summary']['states'])
        for state in (
            'success',
            'rescheduled_success',
            'compute_failure',
            'scheduling_failure',
            'api_failure',
            'incomplete',
        ):
            self.assertIn(state, counts)

    def test_failure_table(self):
        got = collections.Counter(
            {
                (f['component'], f['ev'], f['cls'], f['message']): f['count']
                for f in self.report['failures']
            }
        )
        self.assertEqual(self.truth.failures, got)
        for f in self.report['failures']:
            for req in f['requests']:
                self.assertIn(req, self.rows)
        # which ended an instance, which were recovered (and how)
        final = collections.Counter(
            {
                (f['component'], f['ev'], f['cls'], f['message']): f['final']
                for f in self.report['failures']
            }
        )
        recovered = collections.Counter(
            {
                ((f['component'], f['ev'], f['cls'], f['message']), how): n
                for f in self.report['failures']
                for how, n in f['recovered_by'].items()
            }
        )
        self.assertEqual(+self.truth.final, +final)
        self.assertEqual(+self.truth.recovered, +recovered)
        self.assertEqual(
            {'db_retry', 'rescheduled'}, {how for _key, how in recovered}
        )

    def _totals(self, field, truth_field):
        got = collections.Counter()
        want = collections.Counter()
        for req, rt in self.truth.requests.items():
            row = self.rows[req]
            if row['state'] == 'incomplete':
                continue
            got.update(row[field])
            want.update(getattr(rt, truth_field))
        return got, want

    def test_component_times_within_1pct(self):
        got, want = self._totals('components_us', 'comp')
        for name in (
            'api',
            'conductor',
            'scheduler',
            'scheduler.db',
            'scheduler.placement',
            'compute',
            'compute.claim',
            'compute.network',
            'compute.spawn',
            'rpc',
        ):
            self.assertGreater(want[name], 0, name)
            self.assertLess(
                abs(got[name] - want[name]), want[name] * 0.01, name
            )
        self.assertEqual(set(want) - {'rpc.queue'}, set(got) - {'rpc.queue'})
        # Queue waits are differences of two hosts' corrected clocks, so
        # the offsets' residual error (~0.1 ms against waits of a few ms
        # in this cloud) shows in them: a looser bound.
        self.assertLess(
            abs(got['rpc.queue'] - want['rpc.queue']), want['rpc.queue'] * 0.05
        )
        got, want = self._totals('sql_in_us', 'sql_in')
        self.assertEqual(want, got)

    def test_multi_instance_boots_named_beside_the_components(self):
        # the truth's boots of several instances: their builds run side
        # by side, so their instances' exclusive times add up
        good = [
            r
            for r in self.report['requests']
            if r['kind'] == 'boot'
            and not r['lost_ends']
            and not r.get('loss')
            and r['state'] in ('success', 'rescheduled_success')
        ]
        multi = [
            r for r in good if len(self.truth.requests[r['req']].states) > 1
        ]
        self.assertGreater(len(multi), 0)
        summary = self.report['summary']
        self.assertEqual(len(multi), summary['multi_instance_boots'])
        # what the note explains: components above end to end
        self.assertTrue(
            any(
                sum(r['components_us'].values()) > r['latency_us']
                for r in multi
            )
        )
        text = report_text.render(self.report)
        self.assertIn(
            '%d of the %d boots built several instances at '
            'once' % (len(multi), len(good)),
            text,
        )
        self.assertIn(
            '%d of the %d boots' % (len(multi), len(good)),
            report_html.render(self.report),
        )
        self.assertEqual(
            '',
            summary_section.multi_instance_note(
                dict(summary, multi_instance_boots=0)
            ),
        )

    def test_latency_end_to_end(self):
        for req, rt in self.truth.requests.items():
            row = self.rows[req]
            if row['state'] == 'incomplete':
                continue
            self.assertLess(abs(row['latency_us'] - rt.latency), 1000, req)

    def test_sql_digest(self):
        sql = self.report['sql']
        got = {
            r['id']: (r['calls'], r['total_us'], r['errors'])
            for r in sql['rows']
        }
        want = {fp: tuple(v) for fp, v in self.truth.sql.items()}
        self.assertEqual(want, got)
        for row in sql['rows']:
            self.assertEqual(
                synthetic.fingerprint_id(row['fingerprint']), row['id']
            )
        agg = [r for r in sql['rows'] if r['aggregated']]
        self.assertEqual(1, len(agg))

    def test_bad_lines_reported_with_file_and_line(self):
        load = self.report['load']
        reported = {
            (f, n, kind)
            for kind, lst in load['samples'].items()
            for f, n, _why in lst
        }
        for bad in self.truth.bad_lines:
            self.assertIn(bad, reported)
        kinds = collections.Counter(k for _f, _n, k in self.truth.bad_lines)
        for kind, n in kinds.items():
            self.assertEqual(n, load['counts'][kind], kind)
        loss = {r['file']: r for r in load['loss']}
        for fname, n in self.truth.seq_missing.items():
            self.assertEqual(n, loss[fname]['missing'])
        for fname, n in self.truth.drops.items():
            self.assertEqual(n, loss[fname]['dropped'])
        self.assertGreater(load['other_lines'], 0)

    def test_reference_decoder_agrees(self):
        # msgspec's decoder (the default) and the reference decoder
        # (json + schema.validate) make the same report, bad lines too
        ref = pipeline.analyse(
            [self.dir], pipeline.Options(jobs=1, fast_decode=False)
        )
        for rep in (ref, self.report):
            self.assertGreater(rep['load']['counts']['invalid'], 0)
        self.assertEqual(
            {k: v for k, v in self.report.items() if k != 'run'},
            {k: v for k, v in ref.items() if k != 'run'},
        )

    def test_partitioned_workers_agree(self):
        two = pipeline.analyse([self.dir], pipeline.Options(jobs=2))
        strip = ('lifecycle',)

        def rows(rep):
            return sorted(
                (
                    {k: v for k, v in r.items() if k not in strip}
                    for r in rep['requests']
                ),
                key=lambda r: r['req'],
            )

        self.assertEqual(rows(self.report), rows(two))

        def failures(rep):
            return sorted(
                (f['component'], f['ev'], f['cls'], f['message'], f['count'])
                for f in rep['failures']
            )

        self.assertEqual(failures(self.report), failures(two))
        self.assertEqual(self.report['load']['counts'], two['load']['counts'])
        self.assertEqual(self.report['load']['loss'], two['load']['loss'])
        self.assertEqual(self.report['sql']['rows'], two['sql']['rows'])

    def test_throughput_and_rates(self):
        s = self.report['summary']
        boots = sum(
            1 for r in self.truth.requests.values() if r.kind == 'boot'
        )
        self.assertEqual(boots, s['boots'])
        self.assertAlmostEqual(boots / s['duration_s'], s['throughput_rps'])
        states = self.truth.states()
        good = states['success'] + states['rescheduled_success']
        self.assertAlmostEqual(good / s['instances'], s['success_rate'])
        self.assertGreater(s['concurrency']['max'], 1)
        self.assertTrue(os.path.isdir(self.dir))


class ClockGridTest(testtools.TestCase):
    """A synthetic cloud with moves between computes (calls from one
    compute to another) whose clocks are shifted by 0.3 ms to 3 h, one
    host, several or all (test_fidelity's grid): every interval holds
    the truth, every offset moves with its clock, and every host bound
    on both sides (by round trips: calls and their replies) is within
    1 ms of the truth."""

    def test_grid(self):
        directory = self.useFixture(fixtures.TempDir()).path
        synthetic.generate(
            os.path.join(directory, 'in'),
            seed=32,
            requests=120,
            skew_us=0,
            p_ops=0.3,
        )
        lines = {}
        for path in spanfiles.discover([os.path.join(directory, 'in')])[0]:
            opener = gzip.open if path.endswith('.gz') else open
            with opener(path, 'rb') as f:
                for raw in f:
                    rec = clockpass.decode_prefixed(raw)
                    if rec is None or not (
                        rec['ev'].startswith('rpc.')
                        or rec['ev'] == 'process.start'
                    ):
                        continue
                    raw = json.dumps(rec, separators=(',', ':')).encode()
                    lines.setdefault(rec['host'], []).append(
                        (rec, raw + b'\n')
                    )
        hosts = sorted(lines)
        self.assertEqual(9, len(hosts))
        whole = os.path.join(directory, 'f.jsonl')
        with open(whole, 'wb') as f:
            for recs in lines.values():
                f.writelines(raw for _rec, raw in recs)
        clean = clockpass.clock_pass([whole], 600_000_000)[0].hosts
        # compute-to-compute calls (the moves) are among the hops
        sends = {
            rec['span']: host
            for host, recs in lines.items()
            for rec, _raw in recs
            if rec['ev'] == 'rpc.call'
        }
        self.assertTrue(
            any(
                rec.get('parent') in sends
                and host.startswith('cmp')
                and sends[rec['parent']].startswith('cmp')
                and sends[rec['parent']] != host
                for host, recs in lines.items()
                for rec, _raw in recs
            )
        )
        got = fidelity.clock_grid(lines, hosts, clean, whole)
        self.assertEqual(9 * 12 * len(fidelity.SHIFTS), got['cases'])
        self.assertEqual(got['cases'], got['held'], got['missed'][:5])
        self.assertEqual([], got['not_moved'])
        self.assertEqual([], got['beyond_error'])
        # every host is bound within 2 ms on both sides by round trips,
        # hence its offset within 1 ms of the truth
        two_sided = [h for h, i in clean.items() if i['status'] == 'corrected']
        self.assertEqual(len(hosts) - 1, len(two_sided))
        self.assertEqual(got['cases'], got['narrow'])
        self.assertLessEqual(got['max_error_narrow_us'], 1000)


class NoSkewTest(testtools.TestCase):
    """Several host names on one real clock: every interval holds 0,
    and the offsets are within 1 ms of it (the raw clock is not
    preferred: an offset is the centre of what the causal pairs allow,
    within its ``error_us`` of the truth)."""

    def test_offsets_near_zero(self):
        directory = self.useFixture(fixtures.TempDir()).path
        synthetic.generate(directory, seed=4, requests=80, skew_us=0)
        report = pipeline.analyse([directory])
        hosts = report['clocks']['hosts']
        # every host that wrote records is in the table (an empty table
        # would pass the loop below vacuously)
        self.assertEqual(set(hosts), {p['host'] for p in report['processes']})
        self.assertGreater(len(hosts), 2)
        for host, info in hosts.items():
            # (api-1 only casts: bounded on one side)
            if info['low_us'] is not None:
                self.assertLessEqual(info['low_us'], 0, host)
            if info['high_us'] is not None:
                self.assertGreaterEqual(info['high_us'], 0, host)
            self.assertLessEqual(abs(info['offset_us']), 1000, host)
            if info['error_us'] is not None:
                self.assertLessEqual(
                    abs(info['offset_us']), info['error_us'], host
                )


class OneOfTwoRescheduledTest(testtools.TestCase):
    """Boots of two instances where one is rescheduled until nova gives
    up (MaxRetriesExceeded) while its sibling fails on its compute host:
    the reschedule (compute -> conductor ``build_instances``) covers
    only the instance that failed, so the sibling keeps its own state
    and cause."""

    def test_sibling_keeps_its_own_state(self):
        directory = self.useFixture(fixtures.TempDir()).path
        truth = synthetic.generate(
            directory,
            seed=1,
            requests=30,
            p_multi=0.6,
            p_resched=0.3,
            p_port=0.3,
            max_attempts=2,
            p_other=0.0,
        )
        report = pipeline.analyse([directory], pipeline.Options(jobs=1))
        rows = {r['req']: r for r in report['requests']}
        retries = 'nova.exception.MaxRetriesExceeded'
        # the case at stake is in the cloud: one instance rescheduled
        # and given up, its sibling ended by a failure of its own
        split = [
            rt
            for rt in truth.requests.values()
            if len(rt.states) == 2
            and retries in rt.causes.values()
            and set(rt.causes.values()) != {retries}
            and max(rt.attempts.values()) > 1
        ]
        self.assertGreater(len(split), 0)
        for req, rt in truth.requests.items():
            row = rows[req]
            states = {i['inst']: i['state'] for i in row['instances']}
            causes = {
                i['inst']: (i['cause'] or {}).get('cls')
                for i in row['instances']
            }
            self.assertEqual(rt.states, states, req)
            self.assertEqual(rt.causes, causes, req)
        # MaxRetriesExceeded ended as many instances as it was raised
        raised = sum(
            n for key, n in truth.failures.items() if key[2] == retries
        )
        self.assertGreater(raised, 0)
        ended = sum(
            1
            for rt in truth.requests.values()
            for cause in rt.causes.values()
            if cause == retries
        )
        self.assertEqual(raised, ended)
        got = {
            (f['component'], f['ev'], f['cls'], f['message']): (
                f['count'],
                f['final'],
            )
            for f in report['failures']
            if f['cls'] == retries
        }
        want = {
            key: (n, truth.final[key])
            for key, n in truth.failures.items()
            if key[2] == retries
        }
        self.assertEqual(want, got)
        # and the report's final causes count those instances
        causes = {
            c['cls']: c['count']
            for c in report['summary']['causes']
            if c['state'] == 'scheduling_failure'
        }
        self.assertEqual(raised, causes[retries])
