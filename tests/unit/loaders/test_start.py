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
"""Tests of ``instrument.loaders.start``: the programs it records in,
the line of an invalid option, its held lines (its log lines in a real
service log, child processes: ``tests/system/loaders/test_start.py``)."""

import logging
import os
import sys
import types

from oslo_config import cfg
from oslo_log import log as oslo_logging

from instrument import loaders as loader
from instrument import opts
from instrument.runtime import lifecycle
from instrument.runtime import startlog
from tests.unit import base


class ProgramsTest(base.TestCase):
    """Which programs record (logging configured: lines direct)."""

    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
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
        active = lifecycle.active()
        return active.identity.service if active is not None else None

    def test_nova_services_record(self):
        for prog in (
            'nova-compute',
            'nova-conductor',
            'nova-scheduler',
            'nova-api',
            'nova-api-os-compute',
            'nova-api-metadata',
        ):
            self.assertEqual(prog, self.started(prog))
            lifecycle.teardown()

    def test_nova_tools_are_skipped_once_at_info(self):
        for prog in (
            'nova-manage',
            'nova-status',
            'nova-policy',
            'nova-novncproxy',
        ):
            self.assertIsNone(self.started(prog))
            self.assertIsNone(self.started(prog))
            self.assertEqual(
                1,
                self.logger.output.count(
                    (
                        'INFO instrument.loaders instrument: loaded by %s, '
                        'which is '
                        'not one of [instrument] programs'
                    )
                    % prog
                ),
            )
        self.assertFalse(os.path.exists(self.spans))
        self.assertNotIn('points patched', self.logger.output)

    def test_the_list_is_the_operators(self):
        self.assertEqual(
            'nova-manage',
            self.started('nova-manage', programs=['nova-manage']),
        )
        lifecycle.teardown()
        self.assertEqual('anything', self.started('anything', programs=['*']))
        lifecycle.teardown()
        self.assertIsNone(
            self.started('nova-compute', programs=['nova-conductor'])
        )

    def test_the_paste_filter_records_as_nova_api(self):
        self.assertEqual('nova-api', self.started('uwsgi', 'nova-api'))
        lifecycle.teardown()
        # a listed program keeps its own name
        self.assertEqual(
            'nova-api-os-compute',
            self.started('nova-api-os-compute', 'nova-api'),
        )

    def test_the_wsgi_application_of_nova_api_records_as_nova_api(self):
        self.assertIsNone(self.started('uwsgi'))
        sys.modules[loader.NOVA_WSGI_APP] = types.ModuleType('wsgi_app')
        self.addCleanup(sys.modules.pop, loader.NOVA_WSGI_APP)
        self.assertEqual('nova-api', self.started('uwsgi'))

    def test_disabled_is_said_once(self):
        for _ in range(3):
            self.assertIsNone(self.started('nova-compute', enabled=False))
        self.assertEqual(
            1,
            self.logger.output.count(
                'instrument: loaded by nova-compute but [instrument] enabled '
                'is false; not recording'
            ),
        )


class InvalidOptionTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
        self.addCleanup(loader._SAID.clear)

    def error(self, text):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write('[instrument]\nenabled = true\n' + text)
        conf = cfg.ConfigOpts()
        conf(['--config-file', path], project='nova', prog='nova-compute')
        loader.start(conf)
        loader.start(conf)
        self.assertIsNone(lifecycle.active())
        lines = [
            line
            for line in self.logger.output.splitlines()
            if line.startswith('ERROR')
        ]
        self.assertEqual(1, len(lines), lines)
        prefix = 'ERROR instrument.loaders instrument: not started, '
        self.assertTrue(lines[0].startswith(prefix), lines[0])
        return lines[0][len(prefix) :].replace(path, 'PATH')

    def test_integer(self):
        self.assertEqual(
            'fix PATH: [instrument] buffer_size = lots: must '
            'be an integer from 16 to 10000000',
            self.error('buffer_size = lots\n'),
        )

    def test_range(self):
        self.assertEqual(
            'fix PATH: [instrument] detail_sample_rate = 1.5: '
            'must be a number from 0.0 to 1.0',
            self.error('detail_sample_rate = 1.5\n'),
        )

    def test_list_of_choices(self):
        self.assertEqual(
            'fix PATH: [instrument] services = api, foo: must '
            'be a comma-separated list of api, conductor, '
            'scheduler, compute',
            self.error('services = api, foo\n'),
        )

    def test_boolean(self):
        self.assertEqual(
            'fix PATH: [instrument] sql_timing = maybe: must be true or false',
            self.error('sql_timing = maybe\n'),
        )

    def test_rule_of_the_runtime(self):
        self.assertEqual(
            'fix nova.conf: [instrument] output_dir: must be '
            'set when the "file" sink is used',
            self.error('output_dir =\n'),
        )


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
        self.assertEqual(
            [
                'INFO instrument.somewhere line %d' % n
                for n in range(startlog.LIMIT)
            ],
            lines[: startlog.LIMIT],
        )
        self.assertEqual(
            'WARNING instrument.runtime.startlog instrument: 5 more start-up '
            'log lines were dropped (at most %d are kept until logging is set '
            'up)' % startlog.LIMIT,
            lines[startlog.LIMIT],
        )
        self.assertEqual(startlog.LIMIT + 1, len(lines))
        # back to normal
        self.assertFalse(startlog.holding())
        self.assertEqual(logging.NOTSET, logging.getLogger('instrument').level)
        self.assertTrue(logging.getLogger('instrument').propagate)
        log.info('after')
        self.assertIn('INFO instrument.somewhere after', self.logger.output)

    def test_the_wrapped_setup_is_a_place_of_the_banner_and_removed(self):
        # issue 28: one status per patched place in the banner and the
        # start record, one remove()
        # whatever an earlier test of this process left
        startlog.remove()
        self.addCleanup(
            setattr, startlog._STATE, 'set_up', startlog._STATE.set_up
        )
        startlog._STATE.set_up = False
        setup = oslo_logging.setup
        self.addCleanup(setattr, oslo_logging, 'setup', setup)
        self.addCleanup(lifecycle.teardown)
        startlog.hold()
        self.assertIsNot(setup, oslo_logging.setup)  # wrapped
        self.assertEqual('patched', startlog.place_status())
        rt = lifecycle.setup(
            self.make_conf(sql_timing=False), 'nova-compute', targets=[]
        )
        self.assertEqual(
            ['patched'],
            [
                status
                for status, names in rt.banner().items()
                if startlog.PLACE in names
            ],
        )
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        self.assertEqual('process.start', records[0]['ev'])
        self.assertIn(startlog.PLACE, records[0]['attrs']['points']['patched'])
        self.assertIs(setup, oslo_logging.setup)  # unwrapped
        self.assertIsNone(startlog.place_status())
        self.assertFalse(startlog.holding())  # what was held went out

    def test_configured_logging_is_not_held(self):
        logging.getLogger().handlers = self.root_handlers
        self.assertTrue(startlog.configured())
        startlog.hold()
        self.assertFalse(startlog.holding())
        oslo_logging.getLogger('instrument.x').warning('direct')
        self.assertIn('WARNING instrument.x direct', self.logger.output)
