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
"""``instrument.loaders.start``'s log lines in the service log: a real
oslo.log in a child process, set up in nova's start-up order, and a
forked child (the rest: ``tests/unit/loaders/test_start.py``)."""

import datetime
import os
import re

from tests.unit import base

# nova's start-up order (nova/cmd/compute.py): the configuration is
# parsed and the notifiers built (the driver starts the runtime) before
# oslo.log is set up.  argv: nova.conf, program, order (nova: set-up
# after the start; first: before it; never: no set-up at all).
SERVICE = '''
import sys
import time
conf_path, prog, order = sys.argv[1:4]
sys.argv[0] = '/usr/bin/' + prog
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging
CONF = cfg.ConfigOpts()
logging.register_options(CONF)
CONF(['--config-file', conf_path], project='nova', prog=prog)
if order == 'first':
    logging.setup(CONF, 'nova')
transport = messaging.get_notification_transport(CONF, url='fake:/')
messaging.Notifier(transport, publisher_id='compute.cmp1')
messaging.Notifier(transport, publisher_id='compute.cmp1')
if order == 'nova':
    time.sleep(1.2)
    logging.setup(CONF, 'nova')
logging.getLogger('nova.service').info('service running')
from instrument.runtime import lifecycle
print('ACTIVE' if lifecycle.active() else 'NOT ACTIVE')
'''

NOVA_CONF = '''[DEFAULT]
log_file = {log}

[oslo_messaging_notifications]
driver = instrument

[instrument]
enabled = true
host = cmp1
output_dir = {spans}
sql_timing = false
{extra}
'''

# oslo.log's default line: time, pid, level, logger, [-], message.
LINE = re.compile(
    r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \d+ '
    r'(\w+) ([\w.]+) \[-\] (.*)$'
)


class ServiceLogTest(base.TestCase):
    """A real oslo.log in a child process, set up as nova does."""

    def run_service(self, order, extra='', prog='nova-compute'):
        self.log = os.path.join(self.tmp, 'svc.log')
        self.spans = os.path.join(self.tmp, 'spans')
        conf = os.path.join(self.tmp, 'nova.conf')
        with open(conf, 'w') as f:
            f.write(
                NOVA_CONF.format(log=self.log, spans=self.spans, extra=extra)
            )
        proc = self.run_script(SERVICE, conf, prog, order)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.stderr = proc.stderr
        lines = []
        if os.path.exists(self.log):
            with open(self.log) as f:
                lines = f.read().splitlines()
        return proc.stdout.strip().splitlines()[-1], lines

    def parsed(self, lines, text):
        """(time, level, logger, message) of the lines containing
        ``text``."""
        out = []
        for line in lines:
            if text in line:
                match = LINE.match(line)
                self.assertIsNotNone(match, line)
                when = datetime.datetime.strptime(
                    match.group(1), '%Y-%m-%d %H:%M:%S.%f'
                )
                out.append((when,) + match.groups()[1:])
        return out

    def test_banner_before_the_set_up_of_logging_lands_in_the_log(self):
        state, lines = self.run_service('nova')
        self.assertEqual('ACTIVE', state)
        [banner] = self.parsed(lines, 'instrument: recording')
        self.assertEqual(
            (
                'INFO',
                'instrument.runtime.lifecycle',
                'instrument: recording nova-compute on cmp1 to file',
            ),
            banner[1:],
        )
        [totals] = self.parsed(lines, 'points patched')
        self.assertEqual('instrument.patching.patcher', totals[2])
        [running] = self.parsed(lines, 'service running')
        # Each held line keeps its own time: before the set-up's 1.2 s.
        self.assertGreater((running[0] - banner[0]).total_seconds(), 1.0)
        self.assertLess(
            lines.index(
                next(line for line in lines if 'instrument: recording' in line)
            ),
            lines.index(
                next(line for line in lines if 'service running' in line)
            ),
        )
        self.assertNotIn('instrument', self.stderr)

    def test_invalid_option_before_the_set_up_is_one_short_error(self):
        state, lines = self.run_service('nova', 'buffer_size = lots')
        self.assertEqual('NOT ACTIVE', state)
        errors = [line for line in lines if 'instrument' in line]
        self.assertEqual(1, len(errors), errors)
        [(_when, level, name, message)] = self.parsed(errors, 'instrument')
        self.assertEqual(('ERROR', 'instrument.loaders'), (level, name))
        self.assertEqual(
            'instrument: not started, fix %s: [instrument] buffer_size = '
            'lots: must be an integer from 16 to 10000000'
            % os.path.join(self.tmp, 'nova.conf'),
            message,
        )
        self.assertNotIn('instrument', self.stderr)
        self.assertFalse(os.path.exists(self.spans))

    def test_logging_set_up_first_logs_directly(self):
        state, lines = self.run_service('first')
        self.assertEqual('ACTIVE', state)
        [banner] = self.parsed(lines, 'instrument: recording')
        self.assertEqual('INFO', banner[1])
        self.assertNotIn('instrument', self.stderr)

    def test_never_set_up_prints_the_errors_at_exit(self):
        state, lines = self.run_service('never', 'buffer_size = lots')
        self.assertEqual('NOT ACTIVE', state)
        self.assertEqual([], [line for line in lines if 'instrument' in line])
        [error] = [
            line for line in self.stderr.splitlines() if 'instrument' in line
        ]
        self.assertRegex(
            error,
            r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \d+ '
            r'ERROR instrument.loaders instrument: not started, '
            r'fix .*nova.conf: \[instrument\] buffer_size = '
            r'lots: must be an integer',
        )

    def test_never_set_up_keeps_info_lines_off_stderr(self):
        state, _lines = self.run_service('never')
        self.assertEqual('ACTIVE', state)
        self.assertNotIn('instrument', self.stderr)

    def test_other_program_is_skipped_with_one_line(self):
        state, lines = self.run_service('nova', prog='nova-manage')
        self.assertEqual('NOT ACTIVE', state)
        said = [line for line in lines if 'instrument' in line]
        self.assertEqual(1, len(said), said)
        [(_when, level, _name, message)] = self.parsed(said, 'instrument')
        self.assertEqual('INFO', level)
        self.assertIn(
            'loaded by nova-manage, which is not one of [instrument] programs',
            message,
        )
        self.assertFalse(os.path.exists(self.spans))

    def test_disabled_says_so_once(self):
        _state, lines = self.run_service('nova', 'enabled = false')
        said = [line for line in lines if 'instrument' in line]
        self.assertEqual(1, len(said), said)
        self.assertTrue(
            said[0].endswith(
                'INFO instrument.loaders [-] instrument: loaded by '
                'nova-compute '
                'but [instrument] enabled is false; not recording'
            ),
            said[0],
        )


class ForkTest(base.TestCase):
    def test_a_child_does_not_replay_its_parents_lines(self):
        proc = self.run_script('''
            import os, sys
            from oslo_config import cfg
            from oslo_log import log as logging
            from instrument.runtime import startlog
            conf = cfg.ConfigOpts()
            logging.register_options(conf)
            conf([], project='t')
            startlog.hold()
            logging.getLogger('instrument.x').warning('held by %d',
                                                      os.getpid())
            pid = os.fork()
            if pid == 0:
                logging.getLogger('instrument.x').warning('child own')
                logging.setup(conf, 't')
                sys.stdout.flush()
                os._exit(0)
            os.waitpid(pid, 0)
            logging.setup(conf, 't')
        ''')
        self.assertEqual(0, proc.returncode, proc.stderr)
        lines = [
            line for line in proc.stdout.splitlines() if 'instrument.x' in line
        ]
        self.assertEqual(2, len(lines), lines)
        self.assertIn('child own', lines[0])
        self.assertIn('held by', lines[1])
