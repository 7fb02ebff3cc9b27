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
"""The patch engine: points as data and the patcher that applies them.

points declares what to time (a Point: a dotted target, a kind,
arguments resolved by name); hooks is the process's one registry of
post-import hooks; patcher applies points (on those hooks when their
module is not imported yet), reports one status per place in the banner
and the start record, and removes them.  Targets (instrument.targets)
hand their points to it.
"""
