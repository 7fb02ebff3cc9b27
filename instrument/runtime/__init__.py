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
"""The runtime core: what runs inside a nova process.

lifecycle sets up and tears down the instrumentation of a process
(sinks, buffer, recorder, tracer, the targets' lifecycle, the banner);
record encodes one span event; tracer and wrappers time a
call; threads, waits and resources measure what a call waited
for and what the process used; buffer and recorder hold events
off the calling thread until the sinks (instrument.sinks) write them;
process, startlog, settings and faults describe the
process, its start, its settings and the faults isolated in it;
errors describes an exception as a record holds it.

Nothing here imports instrument.analysis; importing this package
imports none of its modules.
"""
