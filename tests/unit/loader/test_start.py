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
"""Tests of ``instrument.loader.start``: its log lines in the service
log (real oslo.log, nova's start-up order), the programs it records in,
and the line of an invalid option."""

import datetime
import logging
import os
import re
import sys
import types

from oslo_config import cfg
from oslo_log import log as oslo_logging

from instrument import loader
from instrument import opts
from instrument import runtime
from instrument import startlog
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
from instrument import runtime
print('ACTIVE' if runtime.active() else 'NOT ACTIVE')
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
LINE = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \d+ '
                  r'(\w+) ([\w.]+) \[-\] (.*)$')


class ServiceLogTest(base.TestCase):
    """A real oslo.log in a child process, set up as nova does."""

    def run_service(self, order, extra='', prog='nova-compute'):
        self.log = os.path.join(self.tmp, 'svc.log')
        self.spans = os.path.join(self.tmp, 'spans')
        conf = os.path.join(self.tmp, 'nova.conf')
        with open(conf, 'w') as f:
            f.write(NOVA_CONF.format(log=self.log, spans=self.spans,
                                     extra=extra))
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
                when = datetime.datetime.strptime(match.group(1),
                                                  '%Y-%m-%d %H:%M:%S.%f')
                out.append((when,) + match.groups()[1:])
        return out

    def test_banner_before_the_set_up_of_logging_lands_in_the_log(self):
        state, lines = self.run_service('nova')
        self.assertEqual('ACTIVE', state)
        [banner] = self.parsed(lines, 'instrument: recording')
        self.assertEqual(('INFO', 'instrument.runtime',
                          'instrument: recording nova-compute on cmp1 to '
                          'file'), banner[1:])
        [totals] = self.parsed(lines, 'points patched')
        self.assertEqual('instrument.patcher', totals[2])
        [running] = self.parsed(lines, 'service running')
        # Each held line keeps its own time: before the set-up's 1.2 s.
        self.assertGreater((running[0] - banner[0]).total_seconds(), 1.0)
        self.assertLess(lines.index(next(
            line for line in lines if 'instrument: recording' in line)),
            lines.index(next(
                line for line in lines if 'service running' in line)))
        self.assertNotIn('instrument', self.stderr)

    def test_invalid_option_before_the_set_up_is_one_short_error(self):
        state, lines = self.run_service('nova', 'buffer_size = lots')
        self.assertEqual('NOT ACTIVE', state)
        errors = [line for line in lines if 'instrument' in line]
        self.assertEqual(1, len(errors), errors)
        [(_when, level, name, message)] = self.parsed(errors, 'instrument')
        self.assertEqual(('ERROR', 'instrument.loader'), (level, name))
        self.assertEqual(
            'instrument: not started, fix %s: [instrument] buffer_size = '
            'lots: must be an integer from 16 to 10000000'
            % os.path.join(self.tmp, 'nova.conf'), message)
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
        [error] = [line for line in self.stderr.splitlines()
                   if 'instrument' in line]
        self.assertRegex(error, r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \d+ '
                         r'ERROR instrument.loader instrument: not started, '
                         r'fix .*nova.conf: \[instrument\] buffer_size = '
                         r'lots: must be an integer')

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
        self.assertIn('loaded by nova-manage, which is not one of '
                      '[instrument] programs', message)
        self.assertFalse(os.path.exists(self.spans))

    def test_disabled_says_so_once(self):
        _state, lines = self.run_service('nova', 'enabled = false')
        said = [line for line in lines if 'instrument' in line]
        self.assertEqual(1, len(said), said)
        self.assertTrue(said[0].endswith(
            'INFO instrument.loader [-] instrument: loaded by nova-compute '
            'but [instrument] enabled is false; not recording'), said[0])


class ProgramsTest(base.TestCase):
    """Which programs record (logging configured: lines direct)."""

    def setUp(self):
        super().setUp()
        self.addCleanup(runtime.teardown)
        self.addCleanup(loader._SAID.clear)
        self.spans = os.path.join(self.tmp, 'spans')

    def conf(self, prog, **overrides):
        conf = cfg.ConfigOpts()
        conf([], project='nova', prog=prog)
        opts.register_opts(conf)
        overrides.setdefault('enabled', True)
        overrides.setdefault('sql_timing', False)
        overrides.setdefault('output_dir', self.spans)
        for key, value in overrides.items():
            conf.set_override(key, value, opts.GROUP)
        return conf

    def started(self, prog, service=None, **overrides):
        loader.start(self.conf(prog, **overrides), service)
        active = runtime.active()
        return active.identity.service if active is not None else None

    def test_nova_services_record(self):
        for prog in ('nova-compute', 'nova-conductor', 'nova-scheduler',
                     'nova-api', 'nova-api-os-compute', 'nova-api-metadata'):
            self.assertEqual(prog, self.started(prog))
            runtime.teardown()

    def test_nova_tools_are_skipped_once_at_info(self):
        for prog in ('nova-manage', 'nova-status', 'nova-policy',
                     'nova-novncproxy'):
            self.assertIsNone(self.started(prog))
            self.assertIsNone(self.started(prog))
            self.assertEqual(1, self.logger.output.count(
                'INFO instrument.loader instrument: loaded by %s, which is '
                'not one of [instrument] programs' % prog))
        self.assertFalse(os.path.exists(self.spans))
        self.assertNotIn('points patched', self.logger.output)

    def test_the_list_is_the_operators(self):
        self.assertEqual('nova-manage', self.started(
            'nova-manage', programs=['nova-manage']))
        runtime.teardown()
        self.assertEqual('anything', self.started('anything',
                                                  programs=['*']))
        runtime.teardown()
        self.assertIsNone(self.started('nova-compute',
                                       programs=['nova-conductor']))

    def test_the_paste_filter_records_as_nova_api(self):
        self.assertEqual('nova-api', self.started('uwsgi', 'nova-api'))
        runtime.teardown()
        # a listed program keeps its own name
        self.assertEqual('nova-api-os-compute', self.started(
            'nova-api-os-compute', 'nova-api'))

    def test_the_wsgi_application_of_nova_api_records_as_nova_api(self):
        self.assertIsNone(self.started('uwsgi'))
        sys.modules[loader.NOVA_WSGI_APP] = types.ModuleType('wsgi_app')
        self.addCleanup(sys.modules.pop, loader.NOVA_WSGI_APP)
        self.assertEqual('nova-api', self.started('uwsgi'))

    def test_disabled_is_said_once(self):
        for _ in range(3):
            self.assertIsNone(self.started('nova-compute', enabled=False))
        self.assertEqual(1, self.logger.output.count(
            'instrument: loaded by nova-compute but [instrument] enabled '
            'is false; not recording'))


class InvalidOptionTest(base.TestCase):

    def setUp(self):
        super().setUp()
        self.addCleanup(runtime.teardown)
        self.addCleanup(loader._SAID.clear)

    def error(self, text):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write('[instrument]\nenabled = true\n' + text)
        conf = cfg.ConfigOpts()
        conf(['--config-file', path], project='nova', prog='nova-compute')
        loader.start(conf)
        loader.start(conf)
        self.assertIsNone(runtime.active())
        lines = [line for line in self.logger.output.splitlines()
                 if line.startswith('ERROR')]
        self.assertEqual(1, len(lines), lines)
        prefix = 'ERROR instrument.loader instrument: not started, '
        self.assertTrue(lines[0].startswith(prefix), lines[0])
        return lines[0][len(prefix):].replace(path, 'PATH')

    def test_integer(self):
        self.assertEqual('fix PATH: [instrument] buffer_size = lots: must '
                         'be an integer from 16 to 10000000',
                         self.error('buffer_size = lots\n'))

    def test_range(self):
        self.assertEqual('fix PATH: [instrument] detail_sample_rate = 1.5: '
                         'must be a number from 0.0 to 1.0',
                         self.error('detail_sample_rate = 1.5\n'))

    def test_list_of_choices(self):
        self.assertEqual('fix PATH: [instrument] services = api, foo: must '
                         'be a comma-separated list of api, conductor, '
                         'scheduler, compute',
                         self.error('services = api, foo\n'))

    def test_boolean(self):
        self.assertEqual('fix PATH: [instrument] sql_timing = maybe: must '
                         'be true or false',
                         self.error('sql_timing = maybe\n'))

    def test_rule_of_the_runtime(self):
        self.assertEqual('fix nova.conf: [instrument] output_dir: must be '
                         'set when the "file" sink is used',
                         self.error('output_dir =\n'))


class HoldTest(base.TestCase):
    """``startlog`` in this process, logging unconfigured for a while."""

    def setUp(self):
        super().setUp()
        root = logging.getLogger()
        handlers = root.handlers[:]
        # oslo.log's placeholder only: logging is not set up.
        root.handlers = [logging.StreamHandler(sys.stderr)]
        self.addCleanup(setattr, root, 'handlers', handlers)
        self.addCleanup(startlog.release)
        self.root_handlers = handlers

    def test_records_are_held_bounded_and_replayed_in_order(self):
        self.assertFalse(startlog.configured())
        startlog.hold()
        log = oslo_logging.getLogger('instrument.somewhere')
        for n in range(startlog.LIMIT + 5):
            log.info('line %d', n)
        log.debug('debug line')
        oslo_logging.getLogger('instrument.spans').info('{"v": 1}')
        self.assertNotIn('line 0', self.logger.output)
        logging.getLogger().handlers = self.root_handlers
        startlog.release()
        lines = self.logger.output.splitlines()
        self.assertEqual(['INFO instrument.somewhere line %d' % n
                          for n in range(startlog.LIMIT)],
                         lines[:startlog.LIMIT])
        self.assertEqual(
            'WARNING instrument.startlog instrument: 5 more start-up log '
            'lines were dropped (at most %d are kept until logging is set '
            'up)' % startlog.LIMIT, lines[startlog.LIMIT])
        self.assertEqual(startlog.LIMIT + 1, len(lines))
        # back to normal
        self.assertFalse(startlog.holding())
        self.assertEqual(logging.NOTSET,
                         logging.getLogger('instrument').level)
        self.assertTrue(logging.getLogger('instrument').propagate)
        log.info('after')
        self.assertIn('INFO instrument.somewhere after', self.logger.output)

    def test_configured_logging_is_not_held(self):
        logging.getLogger().handlers = self.root_handlers
        self.assertTrue(startlog.configured())
        startlog.hold()
        self.assertFalse(startlog.holding())
        oslo_logging.getLogger('instrument.x').warning('direct')
        self.assertIn('WARNING instrument.x direct', self.logger.output)


class ForkTest(base.TestCase):

    def test_a_child_does_not_replay_its_parents_lines(self):
        proc = self.run_script('''
            import os, sys
            from oslo_config import cfg
            from oslo_log import log as logging
            from instrument import startlog
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
        lines = [line for line in proc.stdout.splitlines()
                 if 'instrument.x' in line]
        self.assertEqual(2, len(lines), lines)
        self.assertIn('child own', lines[0])
        self.assertIn('held by', lines[1])
