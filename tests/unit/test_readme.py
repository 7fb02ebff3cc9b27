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
"""What README.rst says a nova host needs is what requirements.txt
declares (issue 14, item 10: the Design section left out orjson), and
its nova.conf lines keep the notification drivers a host has."""

import os
import re
import tempfile
import textwrap

from oslo_config import cfg
from oslo_messaging import opts as messaging_opts
import testtools

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)


def _requirements() -> list:
    names = []
    with open(os.path.join(ROOT, 'requirements.txt')) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line and not line.startswith('-'):
                names.append(re.split(r'[\s<>=!~;\[]', line)[0])
    return names


def _section(title: str) -> str:
    with open(os.path.join(ROOT, 'README.rst'), encoding='utf-8') as f:
        text = f.read()
    match = re.search(
        r'^%s\n=+\n(.*?)(?=^\S[^\n]*\n=+\n)' % re.escape(title),
        text,
        re.M | re.S,
    )
    assert match, title
    return ' '.join(match.group(1).split())


class ReadmeTest(testtools.TestCase):
    def test_install_and_design_name_every_runtime_requirement(self):
        names = _requirements()
        self.assertIn('orjson', names)
        for title in ('Install', 'Design'):
            text = _section(title).lower()
            missing = [n for n in names if n.lower() not in text]
            self.assertEqual([], missing, title)

    def test_the_readme_commands_of_a_new_user_are_unchanged(self):
        # .ci/run greps the test command; the main job is the demo
        with open(os.path.join(ROOT, 'README.rst'), encoding='utf-8') as f:
            lines = f.read().splitlines()
        for command in (
            '    python3 -m venv .tox-venv && .tox-venv/bin/pip '
            'install tox && .tox-venv/bin/tox -e demo',
            '    python3 -m venv .tox-venv && .tox-venv/bin/pip '
            'install tox && .tox-venv/bin/tox -e py3,pep8',
        ):
            self.assertIn(command, lines)

    def test_the_driver_lines_keep_the_other_notification_drivers(self):
        # [oslo_messaging_notifications] driver is a MultiStrOpt: one
        # line per driver.  "driver = a,b" is one driver named "a,b"
        # that stevedore cannot load, which switched off the existing
        # notifications and the instrumentation with them.
        text = _section('Enabling it in nova')
        self.assertIn('driver = messagingv2,instrument', text)  # warned of
        with open(os.path.join(ROOT, 'README.rst'), encoding='utf-8') as f:
            readme = f.read()
        start = readme.index('    [oslo_messaging_notifications]\n')
        block = readme[start : readme.index('\n\n', start)]
        with tempfile.NamedTemporaryFile('w', suffix='.conf') as conf_file:
            conf_file.write(textwrap.dedent(block) + '\n')
            conf_file.flush()
            conf = cfg.ConfigOpts()
            for group, group_opts in messaging_opts.list_opts():
                if group == 'oslo_messaging_notifications':
                    conf.register_opts(group_opts, group=group)
            conf(['--config-file', conf_file.name], project='nova')
            drivers = conf.oslo_messaging_notifications.driver
        self.assertEqual(['messagingv2', 'instrument'], drivers)

    def test_install_says_how_to_install_before_publication(self):
        # no package index has the package yet (issue 32, item 9)
        text = _section('Install')
        self.assertIn('not on a package index yet', text)
        self.assertIn('pip install /path/to/openstack-instrument', text)
        self.assertIn(
            'pip wheel --no-deps -w dist/ /path/to/openstack-instrument', text
        )
        self.assertIn('pip install openstack_instrument-*.whl', text)
