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
"""Pass 2's partitioning of requests between workers, and the report's
sections made by a forked process."""

import json
import os
import zlib

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.analysis import registry
from instrument.analysis.ingest import clockpass
from instrument.analysis.ingest import reader
from instrument.analysis.sections import base


def _line(**kw):
    rec = {
        'v': 1,
        'ph': 'X',
        'seq': 1,
        'ts': 1_700_000_000_000_000,
        'dur_us': 10,
        'host': 'h1',
        'svc': 'api',
        'pid': 7,
        'ev': 'api.request',
        'span': '00000000000000a1',
        'st': 'ok',
    }
    rec.update(kw)
    return json.dumps(rec, separators=(',', ':')) + '\n'


class PartitionTest(testtools.TestCase):
    def test_short_request_ids_stay_in_one_worker(self):
        # The B and X records of a span differ after the request id;
        # the partition key must be the id alone.
        d = self.useFixture(fixtures.TempDir()).path
        seq = 0
        with open(os.path.join(d, 'api.jsonl'), 'w') as f:
            for n in range(60):
                req = 'req-%d' % n
                sid = '%016x' % (n + 1)
                seq += 1
                f.write(
                    _line(
                        ph='B',
                        seq=seq,
                        ts=1_700_000_000_000_000 + n * 1000,
                        span=sid,
                        req=req,
                        dur_us=None,
                        st=None,
                        attrs={'method': 'GET'},
                    )
                )
                seq += 1
                f.write(
                    _line(
                        seq=seq,
                        ts=1_700_000_000_000_000 + n * 1000,
                        span=sid,
                        req=req,
                        dur_us=500,
                        attrs={'status': 200},
                    )
                )
        one = pipeline.analyse([d], pipeline.Options(jobs=1))
        two = pipeline.analyse([d], pipeline.Options(jobs=2))
        self.assertEqual(60, len(one['requests']))
        self.assertEqual(0, one['load']['duplicate_spans'])

        def rows(rep):
            return sorted(
                (r['req'], r['latency_us'], r['state'])
                for r in rep['requests']
            )

        self.assertEqual(rows(one), rows(two))
        self.assertEqual([500] * 60, [r[1] for r in rows(two)])


class LinePartsTest(testtools.TestCase):
    """Pass 1 notes each line's partition; pass 2's workers skip the
    others' lines by it."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'api.jsonl')
        seq = 0
        with open(self.path, 'w') as f:
            f.write(
                _line(
                    ph='M',
                    ev='process.start',
                    seq=0,
                    span=None,
                    dur_us=None,
                    st=None,
                )
            )
            f.write('not a record\n')
            for n in range(40):
                sid = '%016x' % (n + 1)
                seq += 1
                f.write(
                    _line(
                        seq=seq,
                        ts=1_700_000_000_000_000 + n * 1000,
                        span=sid,
                        req='req-%d' % n,
                        dur_us=500,
                        attrs={'status': 200},
                    )
                )

    def test_hashes_are_the_readers(self):
        with open(self.path, 'rb') as f:
            lines = f.readlines()
        got = list(clockpass.request_hashes(lines))
        self.assertEqual([clockpass.NO_REQ] * 2, got[:2])
        self.assertEqual(
            [zlib.crc32(b'req-%d' % n) for n in range(40)], got[2:]
        )
        parts = pipeline.line_parts(
            {0: clockpass.request_hashes(lines)}, 2, {'req-3': 'req-4'}
        )[0]
        self.assertEqual(reader.UNDECIDED, parts[0])
        # an id read under another: the reader looks at it
        self.assertEqual(reader.UNDECIDED, parts[5])
        self.assertEqual(zlib.crc32(b'req-7') % 2, parts[9])

    def _reqs(self, part, parts_of_lines):
        opts = pipeline.Options()
        out = pipeline.run_part(
            [self.path], {}, {}, part, 2, opts, parts_of_lines=parts_of_lines
        )
        return sorted(s.req for s in out.summaries)

    def test_workers_read_their_lines_by_pass_1s_partitions(self):
        clock = pipeline.clock_pass([self.path], pipeline.Options(), jobs=2)[0]
        parts = pipeline.line_parts(clock.line_hashes, 2, {})
        self.assertEqual(42, len(parts[0]))
        for part in (0, 1):
            self.assertEqual(self._reqs(part, {}), self._reqs(part, parts))
        # every line put in partition 1: worker 0 skips them unread
        ones = {0: bytes([reader.UNDECIDED] * 2 + [1] * 40)}
        self.assertEqual([], self._reqs(0, ones))
        self.assertEqual(
            ['req-%d' % n for n in range(40)],
            sorted(self._reqs(1, ones), key=lambda r: int(r[4:])),
        )


class _Made:
    """A section whose value says which process made it, and what it
    read of another's (``reads``); ``fails_forked``: its report raises
    in any other process than ``parent``."""

    def __init__(self, key, parent, reads=None, fails_forked=False):
        self.key = key
        self.parent = parent
        self.reads = reads
        self.fails_forked = fails_forked

    def report(self, view):
        if self.fails_forked and os.getpid() != self.parent:
            raise RuntimeError('only in the parent')
        out = {'key': self.key, 'pid': os.getpid()}
        if self.reads is not None:
            out['read'] = view[self.reads]
        return out


def _view(parts):
    return base.View.of_parts(parts, summaries=[])


class ReportElsewhereTest(testtools.TestCase):
    """With -j > 1 some sections of the report are made by a forked
    process while the parent makes the others."""

    def _parts(self, **special):
        me = os.getpid()
        return {
            key: special.get(key) or _Made(key, me) for key in registry.keys()
        }

    def test_sections_made_by_a_forked_process(self):
        me = os.getpid()
        parts = self._parts(
            # a parent's section reading one made elsewhere waits for it
            inputs=_Made('inputs', me, reads='summary'),
        )
        report = pipeline.build_report(_view(parts), ('summary', 'operations'))
        keys = [k for k in report if k in parts]
        self.assertEqual(registry.keys(), keys)
        for key in keys:
            self.assertEqual(key, report[key]['key'])
        other = report['summary']['pid']
        self.assertNotEqual(me, other)
        self.assertEqual(other, report['operations']['pid'])
        self.assertEqual(me, report['findings']['pid'])
        self.assertEqual(me, report['inputs']['pid'])
        self.assertEqual(report['summary'], report['inputs']['read'])

    def test_made_here_when_the_forked_process_fails(self):
        me = os.getpid()
        parts = self._parts(summary=_Made('summary', me, fails_forked=True))
        report = pipeline.build_report(_view(parts), ('summary',))
        self.assertEqual(me, report['summary']['pid'])

    def test_one_process_makes_every_section(self):
        me = os.getpid()
        report = pipeline.build_report(_view(self._parts()))
        self.assertEqual({me}, {report[k]['pid'] for k in registry.keys()})
