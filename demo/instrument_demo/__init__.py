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
"""The one-command demo: an instrumented in-process nova 34 cloud.

A distribution of its own (``openstack-instrument-demo``, in ``demo/``
of the repository), installed by ``tox -e demo`` and by the functional
tests, never by ``pip install openstack-instrument``: it is built on
nova's functional test fixtures, which a nova host does not have.

``cloud`` builds the cloud on nova's own functional fixtures, ``faults``
is the fake virt driver that injects spawn failures and reschedules,
``boots`` drives concurrent boots through the API, ``cmd`` is the
``instrument-demo`` command (also ``python -m instrument_demo``).
Importing ``cloud`` imports nova's test package, which monkey-patches
with eventlet unless ``OS_NOVA_DISABLE_EVENTLET_PATCHING=1`` was set
first.
"""
