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
"""The file sink rotated by logrotate itself, with README's
configuration (a child process; the rest of the sink:
``tests/unit/sinks/test_file.py``)."""

import grp
import gzip
import json
import os
import pwd
import shutil
import subprocess
import textwrap
import time

from instrument.runtime import process
from instrument.sinks import file as file_sink
from tests.unit.sinks import test_file as unit


def _readme_logrotate() -> str:
    """The logrotate snippet of README.rst ("Log rotation")."""
    readme = os.path.join(
        os.path.dirname(__file__), '..', '..', '..', 'README.rst'
    )
    with open(readme) as f:
        text = f.read()
    start = text.index('    # /etc/logrotate.d/nova-instrument\n')
    block = text[start : text.index('\n\n', start)]
    return textwrap.dedent(block) + '\n'


class LogrotateTest(unit._SinkTestBase):
    """The README's logrotate configuration, run by logrotate itself."""

    def setUp(self):
        super().setUp()
        self.logrotate = shutil.which('logrotate') or next(
            (
                p
                for p in ('/usr/sbin/logrotate', '/sbin/logrotate')
                if os.path.exists(p)
            ),
            None,
        )
        if self.logrotate is None:
            if os.environ.get('CI') == 'true':
                self.fail('logrotate is not installed')
            self.skipTest('logrotate is not installed')
        user = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        conf = (
            _readme_logrotate()
            .replace('/var/log/nova/instrument', self.out)
            .replace(' nova nova', ' %s %s' % (user, group))
        )
        self.conf_path = os.path.join(self.tmp, 'logrotate.conf')
        with open(self.conf_path, 'w') as f:
            f.write(conf)
        os.chmod(self.conf_path, 0o644)

    def rotate(self) -> None:
        proc = subprocess.run(
            [
                self.logrotate,
                '-f',
                '-s',
                os.path.join(self.tmp, 'state'),
                self.conf_path,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)
        time.sleep(1.1)  # the rotated names have a one-second stamp

    def test_readme_configuration_loses_nothing(self):
        self.write(3)
        self.rotate()
        self.write(2)
        self.rotate()
        self.write(1)
        self.assertEqual(0, self.sink.dropped)
        rotated = os.path.join(self.out, 'rotated')
        names = sorted(os.listdir(rotated))
        self.assertEqual(2, len(names), names)
        self.assertTrue(names[0].endswith('.jsonl.gz'), names)
        self.assertTrue(names[1].endswith('.jsonl'), names)
        with gzip.open(os.path.join(rotated, names[0])) as f:
            self.assertEqual(
                [1, 2, 3], [json.loads(line)['attrs']['n'] for line in f]
            )
        self.assertEqual([4, 5], self.numbers(os.path.join(rotated, names[1])))
        self.assertEqual([6], self.numbers(self.sink.path))
        # instrument-report finds all three.
        from instrument.analysis.ingest import spanfiles

        files, problems = spanfiles.discover([self.out])
        self.assertEqual([], problems)
        self.assertEqual(3, len(files))

    def age(self, path: str, days: float) -> None:
        then = time.time() - days * 86400
        os.utime(path, (then, then))

    def test_files_of_exited_processes_are_compressed_then_removed(self):
        # A file name holds its pid: once its process has exited
        # (a restart, a recycled worker) the file is rotated once and
        # never matched again, so rotate/maxage never age it out.
        exited = file_sink.FileSink(
            self.conf, process.ProcessIdentity.create('nova-api', 'h1')
        )
        exited.write(unit._events(1, 2), 1, 4242)
        exited.close()
        self.write(3)
        self.rotate()
        rotated = os.path.join(self.out, 'rotated')

        def of_exited():
            return sorted(n for n in os.listdir(rotated) if '_4242_' in n)

        self.assertEqual(1, len(of_exited()))
        self.assertTrue(of_exited()[0].endswith('.jsonl'))
        # Two days on, delaycompress has not compressed it (its log is
        # never rotated again): the recipe does.
        self.age(os.path.join(rotated, of_exited()[0]), 3)
        self.write(1)
        self.rotate()
        names = of_exited()
        self.assertEqual(1, len(names), names)
        self.assertTrue(names[0].endswith('.jsonl.gz'), names)
        with gzip.open(os.path.join(rotated, names[0])) as f:
            self.assertEqual(
                [1, 2], [json.loads(line)['attrs']['n'] for line in f]
            )
        # Past the retention every rotated file goes, the exited
        # process's included; the running one's newest copy stays.
        for name in os.listdir(rotated):
            self.age(os.path.join(rotated, name), 20)
        self.write(1)
        self.rotate()
        self.assertEqual([], of_exited())
        names = sorted(os.listdir(rotated))
        self.assertEqual(1, len(names), names)
        self.assertEqual([5], self.numbers(os.path.join(rotated, names[0])))
        self.write(1)
        self.assertEqual([6], self.numbers(self.sink.path))
        self.assertEqual(0, self.sink.dropped)
