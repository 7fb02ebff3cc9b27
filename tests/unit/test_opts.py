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
"""Tests of the [instrument] option group."""

import io
import os

from oslo_config import cfg
from oslo_config import generator

from instrument import opts
from tests.unit import base


class OptionsTest(base.TestCase):
    def _conf_from_file(self, text: str) -> cfg.ConfigOpts:
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write(text)
        conf = cfg.ConfigOpts()
        opts.register_opts(conf)
        conf(['--config-file', path], project='nova')
        return conf

    def test_defaults(self):
        conf = self._conf_from_file('[DEFAULT]\n')
        group = conf.instrument
        self.assertFalse(group.enabled)
        self.assertEqual(
            ['api', 'conductor', 'scheduler', 'compute'], group.services
        )
        self.assertEqual(['file'], group.sinks)
        self.assertEqual('/var/log/nova/instrument', group.output_dir)
        self.assertEqual(50000, group.buffer_size)
        self.assertEqual(0.5, group.flush_interval)
        self.assertTrue(group.sql_timing)
        self.assertEqual(0.0, group.slow_query_threshold)
        self.assertEqual(1.0, group.detail_sample_rate)
        opts.validate(conf)

    def test_register_twice_is_harmless(self):
        conf = cfg.ConfigOpts()
        opts.register_opts(conf)
        opts.register_opts(conf)
        conf([], project='nova')
        self.assertFalse(conf.instrument.enabled)

    def test_values_from_file(self):
        conf = self._conf_from_file(
            '[instrument]\nenabled = true\nservices = compute\n'
            'sinks = file,log\nbuffer_size = 128\n'
        )
        opts.validate(conf)
        self.assertTrue(conf.instrument.enabled)
        self.assertEqual(['compute'], conf.instrument.services)
        self.assertEqual(['file', 'log'], conf.instrument.sinks)
        self.assertEqual(128, conf.instrument.buffer_size)

    def _assert_invalid(self, text: str, option: str):
        conf = self._conf_from_file(text)
        exc = self.assertRaises(opts.InvalidOption, opts.validate, conf)
        self.assertEqual(option, exc.option)
        self.assertIn('[instrument] %s' % option, str(exc))

    def test_bad_integer_names_the_option(self):
        self._assert_invalid(
            '[instrument]\nbuffer_size = lots\n', 'buffer_size'
        )

    def test_out_of_range_names_the_option(self):
        self._assert_invalid('[instrument]\nbuffer_size = 2\n', 'buffer_size')
        self._assert_invalid(
            '[instrument]\ndetail_sample_rate = 1.5\n', 'detail_sample_rate'
        )

    def test_unknown_choice_names_the_option(self):
        self._assert_invalid('[instrument]\nsinks = file,kafka\n', 'sinks')
        self._assert_invalid('[instrument]\nservices = cinder\n', 'services')

    def test_file_sink_needs_a_directory(self):
        self._assert_invalid('[instrument]\noutput_dir =\n', 'output_dir')

    def test_no_sink_is_an_error(self):
        self._assert_invalid('[instrument]\nsinks =\n', 'sinks')

    def test_unknown_keys_are_warned_with_the_nearest_option(self):
        conf = self._conf_from_file(
            '[instrument]\nenable = true\nbuffersize = 100\n'
            'output_dir = /tmp/x\n[DEFAULT]\nbuffersize = 1\n'
        )
        path = os.path.join(self.tmp, 'nova.conf')
        opts.validate(conf)
        self.assertFalse(conf.instrument.enabled)  # the typo is ignored
        warnings = [
            line
            for line in self.logger.output.splitlines()
            if 'unknown option' in line
        ]
        self.assertEqual(
            [
                'WARNING instrument.opts instrument: unknown options in '
                '[instrument], ignored: enable (in %s; did you mean '
                'enabled?), buffersize (in %s; did you mean buffer_size?)'
                % (path, path)
            ],
            warnings,
        )
        # Once per process: set-up runs validate at every notifier.
        opts.validate(conf)
        self.assertEqual(1, self.logger.output.count('unknown option'))

    def test_unknown_keys_of_a_config_dir(self):
        conf_d = os.path.join(self.tmp, 'nova.conf.d')
        os.mkdir(conf_d)
        with open(os.path.join(conf_d, '50-instrument.conf'), 'w') as f:
            f.write('[Instrument]\nenabled = true\nsink = log\n')
        conf = cfg.ConfigOpts()
        opts.register_opts(conf)
        conf(['--config-dir', conf_d], project='nova')
        opts.validate(conf)
        self.assertIn(
            'unknown option in [instrument], ignored: sink (in '
            '%s/50-instrument.conf; did you mean sinks?)' % conf_d,
            self.logger.output,
        )
        self.assertNotIn('enabled (in', self.logger.output)

    def test_key_check_never_fails_the_start(self):
        conf = self._conf_from_file('[instrument]\nbuffersize = 100\n')
        # The file is gone when the check reads it again.
        os.remove(os.path.join(self.tmp, 'nova.conf'))
        opts.validate(conf)
        self.assertNotIn('unknown option', self.logger.output)
        conf = cfg.ConfigOpts()  # never called: no config_file option
        opts.register_opts(conf)
        opts.warn_unknown_keys(conf)

    def test_a_sink_named_twice_is_used_once(self):
        conf = self._conf_from_file('[instrument]\nsinks = file,log,file\n')
        opts.validate(conf)
        self.assertEqual(['file', 'log'], conf.instrument.sinks)
        opts.validate(conf)
        self.assertEqual(
            1,
            self.logger.output.count(
                'sinks names a sink more than once (file, log, file); each '
                'is used once: file, log'
            ),
        )

    def test_choices_are_described(self):
        [(group, options)] = opts.list_opts()
        for option in options:
            for choice in getattr(option.type, 'choices', None) or {}:
                self.assertTrue(option.type.choices[choice], choice)

    def test_list_opts_has_every_option_with_help(self):
        [(group, options)] = opts.list_opts()
        self.assertEqual('instrument', group.name)
        names = {o.name for o in options}
        for name in (
            'enabled',
            'services',
            'sinks',
            'output_dir',
            'buffer_size',
            'flush_interval',
            'sql_timing',
            'slow_query_threshold',
            'detail_sample_rate',
        ):
            self.assertIn(name, names)
        for option in options:
            self.assertGreater(len(option.help or ''), 20, option.name)

    def test_generator_sees_the_group_through_the_entry_point(self):
        conf = cfg.ConfigOpts()
        generator.register_cli_opts(conf)
        conf(['--namespace', 'instrument'])
        out = io.StringIO()
        generator.generate(conf, output_file=out)
        text = out.getvalue()
        self.assertIn('[instrument]', text)
        self.assertIn('#buffer_size = 50000', text)
        self.assertIn('#enabled = false', text)

    def test_committed_sample_is_current(self):
        root = os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        )
        sample = os.path.join(
            root, 'etc', 'instrument', 'instrument.conf.sample'
        )
        conf = cfg.ConfigOpts()
        generator.register_cli_opts(conf)
        conf(
            [
                '--config-file',
                os.path.join(
                    root, 'etc', 'oslo-config-generator', 'instrument.conf'
                ),
            ]
        )
        out = io.StringIO()
        generator.generate(conf, output_file=out)
        with open(sample) as f:
            self.assertEqual(
                out.getvalue(),
                f.read(),
                'run "tox -e genconfig" and commit the sample',
            )
