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
"""The compiled helpers (``instrument._native``) for the tests that
compare them with their pure-Python twins."""

import importlib
import os


def extension(test, name: str):
    """``instrument._native.<name>``, loaded whatever
    INSTRUMENT_PURE_PYTHON says; when it is not built, ``test`` fails
    in CI (``CI=true``: the helpers must be built there) and is skipped
    elsewhere (a host without a C compiler)."""
    module = 'instrument._native.' + name
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get('CI') == 'true':
            test.fail('%s is not built' % module)
        test.skipTest('%s is not built' % module)
