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
"""Progress: reported by the pipeline, drawn by the command."""

import functools
import io
import os

import fixtures
import testtools

from instrument.analysis import pipeline
from instrument.cmd import progress
from instrument.cmd import report
from tests import synthetic


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class PipelineProgressTest(testtools.TestCase):
    """The analysis reports through its callback only."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        synthetic.generate(
            self.dir, seed=6, requests=60, gzip_computes=False, log_sink=False
        )
        self.total = sum(
            os.path.getsize(os.path.join(self.dir, n))
            for n in os.listdir(self.dir)
        )

    def test_stages_in_order_then_done_once(self):
        calls = []
        pipeline.analyse(
            [self.dir],
            pipeline.Options(
                jobs=1, progress=lambda *call: calls.append(call)
            ),
        )
        stages = [stage for stage, _done, _total in calls]
        self.assertEqual(('done', self.total, self.total), calls[-1])
        self.assertEqual(1, stages.count('done'))
        first_spans = stages.index('spans')
        self.assertEqual({'clocks'}, set(stages[:first_spans]))
        self.assertEqual({'spans'}, set(stages[first_spans:-1]))
        self.assertEqual({self.total}, {t for _s, _d, t in calls})
        for stage in ('clocks', 'spans'):
            done = [d for s, d, _t in calls if s == stage]
            self.assertEqual(sorted(done), done)
            self.assertEqual(self.total, done[-1])

    def test_workers_report_done_once(self):
        calls = []
        pipeline.analyse(
            [self.dir],
            pipeline.Options(
                jobs=2, progress=lambda *call: calls.append(call)
            ),
        )
        self.assertEqual(('done', self.total, self.total), calls[-1])

    def test_nothing_is_written_without_a_callback(self):
        terminal = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', FakeTerminal())
        ).new_value
        pipeline.analyse([self.dir], pipeline.Options(jobs=1))
        self.assertEqual('', terminal.getvalue())


class ProgressLineTest(testtools.TestCase):
    def test_one_line_rewritten_then_erased(self):
        out = FakeTerminal()
        line = progress.ProgressLine(out, min_bytes=100, interval=0)
        line('clocks', 25, 400)
        line('spans', 200, 400)
        line('done', 400, 400)
        text = out.getvalue()
        self.assertEqual(3, text.count('\r') - 1)  # the erase has two
        self.assertIn('\rclocks    6.2%', text)
        self.assertIn('\rspans    50.0%', text)
        self.assertTrue(text.endswith('\r' + ' ' * 60 + '\r'), text)

    def test_at_most_one_line_per_interval(self):
        out = FakeTerminal()
        line = progress.ProgressLine(out, min_bytes=0, interval=3600)
        for done in range(10):
            line('spans', done, 10)
        self.assertEqual(1, out.getvalue().count('\r'))

    def test_nothing_off_a_terminal_or_for_small_input(self):
        out = io.StringIO()
        line = progress.ProgressLine(out, min_bytes=0, interval=0)
        line('spans', 5, 10)
        line('done', 10, 10)
        self.assertEqual('', out.getvalue())
        out = FakeTerminal()
        line = progress.ProgressLine(out, min_bytes=100, interval=0)
        line('spans', 5, 99)
        line('done', 99, 99)
        self.assertEqual('', out.getvalue())


class CommandProgressTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        # (a run without losses: no warning on standard error)
        synthetic.generate(self.dir, seed=7, requests=40, buffer_drops=0)
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', FakeTerminal())
        ).new_value
        # any input is large enough, every call draws
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.cmd.progress.ProgressLine',
                functools.partial(
                    progress.ProgressLine, min_bytes=0, interval=0
                ),
            )
        )

    def test_progress_line_on_standard_error(self):
        self.assertEqual(0, report.main([self.dir, '-q', '-j1']))
        text = self.stderr.getvalue()
        self.assertIn('\rclocks ', text)
        self.assertIn('\rspans  ', text)
        self.assertTrue(text.endswith('\r' + ' ' * 60 + '\r'), text)

    def test_no_progress(self):
        self.assertEqual(0, report.main([self.dir, '-q', '--no-progress']))
        self.assertEqual('', self.stderr.getvalue())
