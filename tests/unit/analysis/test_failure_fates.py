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
"""The failure table tells the errors that ended an instance (its final
cause) from those that were recovered (retried by oslo.db, rescheduled
to another host), against a synthetic cloud's truth and hand-made
requests; the text and HTML reports show the split, its units and the
final causes per state."""

import re
import shutil
import tempfile

import testtools

from instrument.analysis import pipeline
from instrument.analysis.render import html as report_html
from instrument.analysis.render import text as report_text
from tests import synthetic
from tests.unit.analysis import test_service_failures
from tests.unit.analysis import test_services

MS = test_services.MS
S = test_services.S
T0 = test_services.T0
DEADLOCK = 'oslo_db.exception.DBDeadlock'
NEUTRON_500 = 'neutronclient.common.exceptions.InternalServerError'


def _key(f: dict) -> tuple:
    return (f['component'], f['ev'], f['cls'], f['message'])


class SyntheticFatesTest(testtools.TestCase):
    """A cloud with many DB deadlocks (retried), reschedules (a spawn's
    libvirtError), and two-instance boots (a NoValidHost raised once
    ends both instances)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix='instrument-fates-')
        cls.truth = synthetic.generate(
            cls.dir,
            seed=7,
            requests=200,
            p_deadlock=0.15,
            p_resched=0.12,
            p_multi=0.1,
        )
        cls.report = pipeline.analyse([cls.dir], pipeline.Options(jobs=1))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def _recovered(self, key) -> dict:
        return {
            how: n for (k, how), n in self.truth.recovered.items() if k == key
        }

    def test_premise(self):
        hows = {how for (_k, how) in self.truth.recovered}
        self.assertEqual({'db_retry', 'rescheduled'}, hows)
        self.assertGreater(sum(self.truth.final.values()), 0)
        # one NoValidHost ended two instances
        raised = {f['cls']: f['count'] for f in self.report['failures']}
        causes = {
            c['cls']: c['count'] for c in self.report['summary']['causes']
        }
        self.assertLess(
            raised['nova.exception.NoValidHost'],
            causes['nova.exception.NoValidHost'],
        )

    def test_final_and_recovered_match_the_truth(self):
        rows = self.report['failures']
        self.assertEqual(set(self.truth.failures), {_key(f) for f in rows})
        for f in rows:
            key = _key(f)
            self.assertEqual(self.truth.failures[key], f['count'], key)
            self.assertEqual(self.truth.final[key], f['final'], key)
            self.assertEqual(self._recovered(key), f['recovered_by'], key)
            self.assertEqual(
                sum(f['recovered_by'].values()), f['recovered'], key
            )
        by_cls = {f['cls']: f for f in rows}
        # the operator's case: the deadlocks were all retried, the
        # libvirtErrors all rescheduled; none ended anything
        self.assertEqual(
            (0, by_cls[DEADLOCK]['count']),
            (
                by_cls[DEADLOCK]['final'],
                by_cls[DEADLOCK]['recovered_by']['db_retry'],
            ),
        )
        lv = by_cls['libvirt.libvirtError']
        self.assertEqual(
            (0, lv['count']), (lv['final'], lv['recovered_by']['rescheduled'])
        )

    def test_final_causes_are_the_states_causes(self):
        # every final state's cause class has a row with errors final
        final = {f['cls'] for f in self.report['failures'] if f['final']}
        causes = {c['cls'] for c in self.report['summary']['causes']}
        self.assertEqual(causes, final)

    def test_partitioned_workers_agree(self):
        two = pipeline.analyse([self.dir], pipeline.Options(jobs=2))

        def split(rep):
            return sorted(
                (
                    _key(f),
                    f['count'],
                    f['final'],
                    f['recovered'],
                    f['recovered_by'],
                )
                for f in rep['failures']
            )

        self.assertEqual(split(self.report), split(two))

    def test_text_report(self):
        text = report_text.render(self.report)
        section = text.split('\nFailures (')[1].split('\nSQL profile')[0]
        lines = section.splitlines()
        header = next(line for line in lines if line.startswith('operation'))
        self.assertEqual(
            [
                'operation',
                'component',
                'event',
                'error',
                'raised',
                'final',
                'recovered',
                'how',
                'message',
            ],
            header.split(),
        )
        rows = {}
        for line in lines[lines.index(header) + 2 :]:
            if not line:
                break
            cells = re.split(r'\s{2,}', line.strip())
            rows[cells[3]] = cells[4:8]
        # raised, final, recovered, how
        for cls, how in (
            ('DBDeadlock', 'db retry'),
            ('libvirtError', 'rescheduled'),
        ):
            raised, final, recovered, shown_how = rows[cls]
            self.assertEqual(
                ('0', raised, how), (final, recovered, shown_how), cls
            )
        raised, final, recovered, shown_how = rows['NoValidHost']
        self.assertEqual((raised, '0', '-'), (final, recovered, shown_how))
        # the final causes per state, in instances
        start = lines.index(
            'final causes of the boot instances that '
            'failed (other operations: their sections):'
        )
        self.assertEqual(
            ['final state', 'cause', 'instances'],
            re.split(r'\s{2,}', lines[start + 1].strip()),
        )
        shown = set()
        for line in lines[start + 3 :]:
            if not line:
                break
            state, cls, n = re.split(r'\s{2,}', line.strip())
            shown.add((state, cls, int(n)))
        want = {
            (c['state'], c['cls'].rsplit('.', 1)[-1], c['count'])
            for c in self.report['summary']['causes']
        }
        self.assertEqual(want, shown)

    def test_html_report(self):
        page = report_html.render(self.report)
        section = page.split('<h2>Failures')[1].split('<h2>')[0]
        for header in (
            'raised',
            'final',
            'recovered',
            'final state',
            'instances',
        ):
            self.assertIn('>%s</th>' % header, section)
        lv = next(
            f
            for f in self.report['failures']
            if f['cls'] == 'libvirt.libvirtError'
        )
        self.assertIn('>%d rescheduled</td>' % lv['count'], section)
        for c in self.report['summary']['causes']:
            self.assertIn('>%s</td>' % c['cls'].rsplit('.', 1)[-1], section)


class HandMadeFatesTest(test_service_failures.ApiComputeCase):
    """Cases the synthetic cloud does not make."""

    def _boot(self, req: str, at: int, st='ok', err=None, status=202):
        root = self.api.span(
            'api.request',
            at,
            20 * MS,
            req=req,
            attrs={'method': 'POST', 'route': '/servers', 'status': status},
        )
        return self.api.span(
            'api.compute.create',
            at + 1 * MS,
            15 * MS,
            parent=root,
            req=req,
            st=st,
            err=err,
        )

    def _deadlock(self, req, parent, at, exhausted):
        self.api.rec(
            ph='X',
            ts=T0 + at,
            dur_us=1 * MS,
            ev='sql.query',
            span='%08x%08x' % (11, 1000 + at),
            parent=parent,
            req=req,
            st='error',
            err={'cls': DEADLOCK, 'msg': 'Deadlock found'},
            attrs={'fp': '0' * 32, 'db': 'nova', 'kind': 'UPDATE'},
        )
        self.api.rec(
            ph='I',
            ts=T0 + at + 1 * MS,
            ev='db.retry',
            parent=parent,
            req=req,
            attrs={
                'attempt': 1,
                'func': 'quota_reserve',
                'cls': DEADLOCK,
                'exhausted': exhausted,
            },
        )

    def test_exhausted_db_retry_is_final(self):
        # oslo.db retried the first deadlock; the second was the last
        # attempt and failed the request
        create = self._boot(
            'req-1',
            0,
            st='error',
            err={'cls': DEADLOCK, 'msg': 'Deadlock found'},
            status=500,
        )
        self._deadlock('req-1', create, 2 * MS, False)
        self._deadlock('req-1', create, 5 * MS, True)
        report = self._report()
        [row] = [f for f in report['failures'] if f['cls'] == DEADLOCK]
        self.assertEqual(
            (2, 1, 1, {'db_retry': 1}),
            (
                row['count'],
                row['final'],
                row['recovered'],
                row['recovered_by'],
            ),
        )
        self.assertEqual(
            [{'state': 'api_failure', 'cls': DEADLOCK, 'count': 1}],
            report['summary']['causes'],
        )

    def test_final_cause_raised_again_counts_on_the_service_row(self):
        # neutron's 500 failed the network allocation (the network
        # row); the spawn waiting for it raised the same exception, the
        # build's deepest error: its final cause
        create = self._boot('req-2', 0)
        err = {'cls': NEUTRON_500, 'msg': 'HTTP 500'}
        build = self.cmp.span(
            'compute.build',
            30 * MS,
            100 * MS,
            parent=create,
            req='req-2',
            st='error',
            err={'cls': 'nova.exception.BuildAbortException', 'msg': 'x'},
            attrs={'outcome': 'failed'},
        )
        net = self.cmp.span(
            'compute.network',
            31 * MS,
            20 * MS,
            parent=build,
            req='req-2',
            st='error',
            err=err,
        )
        self.cmp.span(
            'ksa.request',
            35 * MS,
            5 * MS,
            parent=net,
            req='req-2',
            attrs=test_services._ksa(
                'network', 'POST', '/v2.0/ports', status=500
            ),
        )
        self.cmp.span(
            'compute.spawn',
            60 * MS,
            30 * MS,
            parent=build,
            req='req-2',
            st='error',
            err=err,
        )
        report = self._report()
        [cause] = report['summary']['causes']
        self.assertEqual(
            ('compute_failure', NEUTRON_500), (cause['state'], cause['cls'])
        )
        [row] = report['failures']
        self.assertEqual(
            ('network', 1, 1, 0),
            (row['component'], row['count'], row['final'], row['recovered']),
        )

    def test_error_in_an_instance_that_succeeded_is_recovered(self):
        create = self._boot('req-3', 0)
        build = self.cmp.span(
            'compute.build',
            30 * MS,
            100 * MS,
            parent=create,
            req='req-3',
            attrs={'outcome': 'active'},
        )
        self.cmp.span(
            'compute.network',
            31 * MS,
            20 * MS,
            parent=build,
            req='req-3',
            st='error',
            err={'cls': 'nova.exception.Timeout', 'msg': 't'},
        )
        report = self._report()
        [row] = report['failures']
        self.assertEqual(
            (1, 0, {'succeeded': 1}),
            (row['count'], row['final'], row['recovered_by']),
        )

    def test_failed_instance_without_a_cause_is_listed(self):
        # a build that failed without an error span: its instance has
        # no cause, and the text report says so rather than omit it
        create = self._boot('req-4', 0)
        self.cmp.span(
            'compute.build',
            30 * MS,
            100 * MS,
            parent=create,
            req='req-4',
            attrs={'outcome': 'failed'},
        )
        report = self._report()
        self.assertEqual({'compute_failure': 1}, report['summary']['states'])
        self.assertEqual([], report['summary']['causes'])
        text = report_text.render(report)
        self.assertRegex(text, r'\ncompute_failure +\(none recorded\) +1\n')


class RaisedAgainTest(test_service_failures.ApiComputeCase):
    """An error caught below and raised again above is one error, where
    it was first raised (issue 32, item 7: nova's scatter_gather
    returns a cell's InstanceNotFound, compute.API.get raises it
    again)."""

    NOT_FOUND = 'nova.exception.InstanceNotFound'

    def _show(self, req: str, at: int, msg_get: str, msg_cell: str):
        root = self.api.span(
            'api.request',
            at,
            40 * MS,
            req=req,
            attrs={
                'method': 'GET',
                'route': '/servers/{server_id}',
                'status': 404,
            },
        )
        get = self.api.span(
            'api.compute.get',
            at + 1 * MS,
            35 * MS,
            parent=root,
            req=req,
            st='error',
            err={'cls': self.NOT_FOUND, 'msg': msg_get},
        )
        gather = self.api.span(
            'api.cells.scatter_gather',
            at + 2 * MS,
            30 * MS,
            parent=get,
            req=req,
        )
        self.api.span(
            'api.cells.query',
            at + 3 * MS,
            25 * MS,
            parent=gather,
            req=req,
            st='error',
            err={'cls': self.NOT_FOUND, 'msg': msg_cell},
            attrs={'cell': 'cell1'},
        )

    def test_counted_once_where_first_raised(self):
        for i in range(3):
            msg = 'Instance %s could not be found.' % (
                '%08d-0000-0000-0000-000000000000' % i
            )
            self._show('req-%d' % i, i * 100 * MS, msg, msg)
        rows = [
            f for f in self._report()['failures'] if f['cls'] == self.NOT_FOUND
        ]
        self.assertEqual(1, len(rows), rows)
        [row] = rows
        self.assertEqual(('api.cells.query', 3), (row['ev'], row['count']))
        self.assertEqual(['req-0', 'req-1', 'req-2'], sorted(row['requests']))

    def test_another_message_above_is_another_error(self):
        self._show(
            'req-0', 0, 'Cell cell1 is down.', 'Instance x could not be found.'
        )
        rows = [
            f for f in self._report()['failures'] if f['cls'] == self.NOT_FOUND
        ]
        self.assertEqual(
            ['api.cells.query', 'api.compute.get'],
            sorted(f['ev'] for f in rows),
        )
