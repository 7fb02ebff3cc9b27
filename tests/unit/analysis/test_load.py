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
"""Input discovery, the fast validator, bad lines and service logs."""

import gzip
import json
import os

import fixtures
import testtools

from instrument import schema
from instrument.analysis import pipeline
from instrument.analysis.ingest import codec
from instrument.analysis.ingest import spanfiles


def rec(**kw):
    out = {
        'v': 1,
        'ph': 'X',
        'seq': 1,
        'ts': 1_700_000_000_000_000,
        'dur_us': 10,
        'host': 'h1',
        'svc': 'api',
        'pid': 7,
        'tid': 3,
        'ev': 'api.request',
        'span': '00000000000000a1',
        'req': 'req-1',
        'st': 'ok',
        'attrs': {'status': 200},
    }
    out.update(kw)
    return out


class DiscoverTest(testtools.TestCase):
    def test_dirs_globs_gz_and_problems(self):
        d = self.useFixture(fixtures.TempDir()).path
        os.makedirs(os.path.join(d, 'sub'))
        for name in (
            'a.jsonl',
            'sub/b.jsonl.gz',
            'sub/c.log',
            'notes.md',
            '.hidden.jsonl',
        ):
            with open(os.path.join(d, name), 'wb') as f:
                f.write(b'')
        files, problems = spanfiles.discover([d])
        names = sorted(os.path.relpath(f, d) for f in files)
        self.assertEqual(['a.jsonl', 'sub/b.jsonl.gz', 'sub/c.log'], names)
        self.assertEqual(1, len(problems))
        self.assertIn('not named like span files', problems[0])
        self.assertIn('notes.md', problems[0])
        files, problems = spanfiles.discover(
            [
                os.path.join(d, '*.jsonl'),
                os.path.join(d, 'nope'),
                os.path.join(d, 'x*.log'),
            ]
        )
        self.assertEqual(['a.jsonl'], [os.path.basename(f) for f in files])
        self.assertEqual(2, len(problems))
        self.assertIn('no such file', problems[0])
        self.assertIn('no file matches', problems[1])

    def test_the_skip_message_states_the_naming_rule(self):
        # a name ending in .gz is not enough: what is before the .gz
        # must be a span file's suffix
        d = self.useFixture(fixtures.TempDir()).path
        for name in ('a.jsonl', 'fakegz.gz', 'b.log.gz'):
            with open(os.path.join(d, name), 'wb') as f:
                f.write(b'')
        files, problems = spanfiles.discover([d])
        self.assertEqual(
            ['a.jsonl', 'b.log.gz'], sorted(os.path.basename(f) for f in files)
        )
        self.assertEqual(1, len(problems))
        self.assertIn('fakegz.gz', problems[0])
        self.assertNotIn(' or .gz', problems[0])
        self.assertIn(
            '*.jsonl, *.json, *.log or *.txt, optionally followed by .gz',
            problems[0],
        )

    def test_the_demo_output_directory(self):
        # Issue 14, item 3: the demo writes its report next to the span
        # files; only the span files are read, the rest is named.
        d = self.useFixture(fixtures.TempDir()).path
        os.makedirs(os.path.join(d, 'spans'))
        with open(os.path.join(d, 'spans', 'h_api_7_1.jsonl'), 'w') as f:
            f.write(json.dumps(rec()) + '\n')
        with open(os.path.join(d, 'report.json'), 'w') as f:
            f.write('{"report_version":1,"inputs":{}}\n')
        with open(os.path.join(d, 'servers.json'), 'w') as f:
            f.write('{\n "counts": {"ACTIVE": 1}}\n')
        with open(os.path.join(d, 'report.txt'), 'w') as f:
            f.write('# instrument-report: 1 files\n')
        with open(os.path.join(d, 'report.html'), 'w') as f:
            f.write('<html></html>\n')
        files, problems = spanfiles.discover([d])
        self.assertEqual([os.path.join(d, 'spans', 'h_api_7_1.jsonl')], files)
        text = '\n'.join(problems)
        self.assertIn('report.json: a JSON report', text)
        self.assertIn('instrument-report compare', text)
        self.assertIn('report.txt', text)
        self.assertIn('servers.json', text)
        self.assertIn('report.html', text)
        report = pipeline.analyse([d])
        self.assertEqual(
            0, sum(report['load']['counts'].values()), report['load']
        )
        self.assertEqual(1, report['inputs']['records'])
        self.assertEqual(problems, report['load']['problems'])

    def test_a_report_named_on_the_command_line_is_left_out(self):
        d = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(d, 'run1.json')
        with open(path, 'w') as f:
            f.write('{"report_version":1}\n')
        files, problems = spanfiles.discover([path])
        self.assertEqual([], files)
        self.assertIn('compare', problems[0])
        exc = self.assertRaises(spanfiles.InputError, pipeline.analyse, [path])
        self.assertIn('instrument-report compare', str(exc))

    def test_files_named_on_the_command_line_are_read(self):
        # whatever their name or first bytes (a bad file is then
        # reported line by line, and no records at all is the
        # command's error)
        d = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(d, 'capture.bin')
        with open(path, 'wb') as f:
            f.write(b'\x00\x01binary\n')
        self.assertEqual(([path], []), spanfiles.discover([path]))
        self.assertEqual('other', spanfiles.sniff(path))

    def test_service_logs_are_searched_to_the_end(self):
        # the log sink's records may start late in a service log
        d = self.useFixture(fixtures.TempDir()).path
        noise = b'2024-01-01 00:00:00.000 7 INFO nova.api [-] GET /\n'
        late = os.path.join(d, 'nova-api.log')
        with open(late, 'wb') as f:
            f.write(noise * (3 * spanfiles.SNIFF_BYTES // len(noise)))
            f.write(
                b'2024-01-01 00:00:00.000 7 INFO instrument.spans [-] '
                + json.dumps(rec()).encode()
                + b'\n'
            )
        none = os.path.join(d, 'nova-compute.log.gz')
        with gzip.open(none, 'wb') as f:
            f.write(noise * 5000)
        jsonl = os.path.join(d, 'other-tool.jsonl')
        with open(jsonl, 'w') as f:
            f.write('{"tool": "x"}\n' * (spanfiles.SNIFF_BYTES // 10))
            f.write(json.dumps(rec()) + '\n')
        self.assertEqual('spans', spanfiles.sniff(late))
        self.assertEqual('other', spanfiles.sniff(none))
        # other names: the first SNIFF_BYTES decide
        self.assertEqual('other', spanfiles.sniff(jsonl))
        files, problems = spanfiles.discover([d])
        self.assertEqual([late], files)
        self.assertIn('2 files holding no span record', problems[0])

    def test_gzip_span_files_and_empty_files(self):
        d = self.useFixture(fixtures.TempDir()).path
        spans = os.path.join(d, 'a.jsonl.gz')
        with gzip.open(spans, 'wb') as f:
            f.write(json.dumps(rec()).encode() + b'\n')
        empty = os.path.join(d, 'b.jsonl')
        with open(empty, 'w') as f:
            f.write('\n')
        self.assertEqual('spans', spanfiles.sniff(spans))
        self.assertEqual('empty', spanfiles.sniff(empty))
        self.assertEqual(([spans, empty], []), spanfiles.discover([d]))

    def test_linked_directories_are_read_once(self):
        d = self.useFixture(fixtures.TempDir()).path
        os.makedirs(os.path.join(d, 'collected'))
        with open(os.path.join(d, 'collected', 'a.jsonl'), 'w') as f:
            f.write(json.dumps(rec()) + '\n')
        os.symlink(os.path.join(d, 'collected'), os.path.join(d, 'link'))
        os.symlink(d, os.path.join(d, 'collected', 'loop'))
        files, problems = spanfiles.discover([os.path.join(d, 'link')])
        self.assertEqual([os.path.join(d, 'link', 'a.jsonl')], files)
        self.assertEqual([], problems)

    def test_no_input_is_a_clear_error(self):
        d = self.useFixture(fixtures.TempDir()).path
        exc = self.assertRaises(spanfiles.InputError, pipeline.analyse, [d])
        self.assertIn('no span files', str(exc))


class ValidatorTest(testtools.TestCase):
    CASES = [
        rec(),
        rec(ph='B', dur_us=None, st=None),
        rec(v=2),
        rec(ts='1'),
        rec(dur_us=-1),
        rec(st='weird'),
        rec(span=''),
        rec(pid=True),
        rec(err={'msg': 'no class'}),
        rec(err={'cls': 'x.Y', 'msg': 'm'}),
        rec(extra=1),
        rec(ph='Q'),
        rec(inst='not-a-list'),
        rec(attrs=None),
        {k: v for k, v in rec().items() if k != 'host'},
        [1, 2],
        'x',
    ]

    def test_agrees_with_schema_validate_twice(self):
        v = codec.Validator()
        for _round in range(2):  # the second round uses the shape cache
            for case in self.CASES:
                try:
                    schema.validate(case)
                    want = True
                except (schema.SchemaError, AttributeError, TypeError):
                    want = False
                self.assertEqual(want, v.ok(case), case)

    def test_error_kinds(self):
        self.assertEqual('unknown_version', codec.check_error(rec(v=3))[0])
        self.assertEqual('invalid', codec.check_error(rec(ts='x'))[0])
        self.assertEqual('malformed', codec.check_error([1])[0])
        self.assertEqual('truncated', codec.decode_error(b'{"v":1,', True)[0])
        self.assertEqual(
            'malformed', codec.decode_error(b'{"v":1,\n', False)[0]
        )


class ReadTest(testtools.TestCase):
    def test_service_log_and_cut_gzip(self):
        d = self.useFixture(fixtures.TempDir()).path
        lines = [
            json.dumps(rec(seq=i, span='%016x' % i, req='req-%d' % i))
            for i in range(1, 30)
        ]
        with open(os.path.join(d, 'nova-api.log'), 'w') as f:
            for line in lines:
                f.write('2024-01-01 00:00:00.000 7 INFO nova.api [-] GET\n')
                f.write(
                    '2024-01-01 00:00:00.000 7 INFO instrument.spans '
                    '[-] %s\n' % line
                )
        data = gzip.compress(('\n'.join(lines) + '\n').encode())
        with open(os.path.join(d, 'cut.jsonl.gz'), 'wb') as f:
            f.write(data[: len(data) // 2])
        report = pipeline.analyse([d])
        self.assertEqual(29, report['load']['other_lines'])
        self.assertEqual(29, report['summary']['other_requests'])
        self.assertTrue(
            any('cut.jsonl.gz' in p for p in report['load']['problems'])
        )


class RecordDecoderTest(testtools.TestCase):
    """msgspec's path accepts and rejects what the reference path does."""

    def setUp(self):
        super().setUp()
        if codec.msgspec is None:
            self.skipTest('msgspec is not installed')

    def lines(self):
        good = json.dumps(rec())
        out = [
            json.dumps(case).encode() + b'\n' for case in ValidatorTest.CASES
        ]
        out += [
            good.encode() + b'\n',
            good.encode(),  # no newline
            json.dumps(rec(ph='B', st=None, dur_us=None)).encode(),
            json.dumps(rec(ph='I', span=None, dur_us=-5)).encode(),
            json.dumps(rec(ph='M', attrs={'fp': 'x'})).encode(),
            json.dumps(rec(ph='C', err=None, inst=None)).encode(),
            json.dumps(rec(st=None)).encode(),
            json.dumps(rec(dur_us=None)).encode(),
            json.dumps(rec(ts=None)).encode(),
            json.dumps(rec(v=True)).encode(),
            json.dumps(rec(seq=1.0)).encode(),
            json.dumps(rec(tid=False)).encode(),
            json.dumps(rec(inst=['a', 1])).encode(),
            json.dumps(rec(err={'cls': 1})).encode(),
            json.dumps(rec(err='boom')).encode(),
            # beyond 64 bits: the reference decoder gives a float
            good.replace('"seq": 1', '"seq": %d' % (1 << 70)).encode(),
            good.replace('"seq": 1', '"seq": %d' % ((1 << 64) - 1)).encode(),
            good.replace('"seq": 1', '"seq": %d' % -(1 << 63)).encode(),
            good.replace('"seq": 1', '"seq": 1, "seq": 2').encode(),
            good[:40].encode(),
            good[:40].encode() + b'\n',
            b'{"v":1,' + b'[' * 5000 + b'\n',
            b'[]\n',
            b'null\n',
            good.replace('{"status": 200}', '[' * 3000 + ']' * 3000).encode(),
            b'{"v":1,"ph":"X"} trailing\n',
            b'{"v": NaN}\n',
            good.replace('"api"', '"a\\ud800"').encode(),
            good.replace('"api"', '"\xff"').encode('latin-1'),
        ]
        return out

    def test_fast_and_reference_paths_agree(self):
        fast = codec.RecordDecoder()
        ref = codec.RecordDecoder(fast=False)
        accepted = 0
        for _round in range(2):
            for raw in self.lines():
                a = fast.decode(raw)
                b = ref.decode(raw)
                if b is None:
                    self.assertIsNone(a, raw)
                    self.assertEqual(ref.error, fast.error, raw)
                    continue
                accepted += 1
                self.assertIsNotNone(a, (raw, fast.error))
                for name in schema.FIELDS:
                    self.assertEqual(
                        getattr(b, name), getattr(a, name), (name, raw)
                    )
                    self.assertIs(
                        type(getattr(b, name)),
                        type(getattr(a, name)),
                        (name, raw),
                    )
        self.assertGreater(accepted, 10)

    def test_fast_path_is_used(self):
        line = json.dumps(rec()).encode()
        self.assertIsInstance(codec.RecordDecoder().decode(line), codec.Record)
        self.assertIsInstance(
            codec.RecordDecoder(fast=False).decode(line), codec.SlowRecord
        )
