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
"""``pip install openstack-instrument`` without extras (issue 14, item
1): the hint names the extras setup.cfg declares (the install itself,
in a real virtual environment: ``tests/system/cmd/test_install.py``).
"""

import configparser
import os
import re

import testtools

from instrument.cmd import report

ROOT = os.path.dirname(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
)


class ExtraListTest(testtools.TestCase):
    def test_the_hint_names_the_report_extra(self):
        cfg = configparser.ConfigParser()
        cfg.read(os.path.join(ROOT, 'setup.cfg'))
        extra = {
            re.split(r'[\s<>=]', line.strip())[0]
            for line in cfg['extras']['report'].splitlines()
            if line.strip()
        }
        self.assertEqual(extra, set(report.EXTRA_MODULES))
        self.assertIn("'openstack-instrument[report]'", report.INSTALL_HINT)
