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
"""Tests against real nova 34 (tox -e functional / functional-threads).

nova's functional package must be imported before anything imports
eventlet (oslo.messaging does): it monkey-patches, or with
OS_NOVA_DISABLE_EVENTLET_PATCHING=1 refuses an early eventlet.
"""

import nova.tests.functional  # noqa: F401  (first, see above)
