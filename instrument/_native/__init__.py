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
"""Optional compiled helpers of the hot path, and the switch that turns
them off.

Each ``_<name>`` extension module here is built from ``<name>.c`` by the
package's normal install (``setup.py``'s ``ext_modules``, optional: a
host without a C compiler still installs, and runs the pure-Python
path).  Every one has a pure-Python twin in the module that uses it,
which gives the same bytes; ``load`` returns None, and the twin runs,
when the extension is not built or when the environment sets
``INSTRUMENT_PURE_PYTHON=1`` (read once, when this module is imported).
"""

import importlib
import os

PURE_PYTHON = os.environ.get('INSTRUMENT_PURE_PYTHON', '') not in (
    '',
    '0',
)


def load(name: str):
    """The compiled module ``instrument._native.<name>``, or None when
    it is not built or the pure-Python path is asked for."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module('instrument._native.' + name)
    except ImportError:
        return None
