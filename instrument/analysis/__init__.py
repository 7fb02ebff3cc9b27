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
"""The offline analyser of span files (``instrument-report``).

Data flows one way through these modules:

``load``       find, open and decode span files (plain, ``.gz``, service
               logs), validate every line, count what is lost
``stream``     read many files in step by time, in bounded memory
``clocks``     per-host clock offsets from causal pairs
``clockpass``  pass 1: the RPC hops, read by files in parallel
``requests``   assemble each request's spans, finalise it when done
``classify``   final states of boots, failure causes, normalised messages
``operations`` each request's operation, the other operations' states
``breakdown``  exclusive time per component, critical path, statistics
``opstats``    run-wide figures per operation (states, rates, cells)
``sqldigest``  pt-query-digest style SQL profile
``window``     ``--since``/``--until``: what a limited report counts
``pipeline``   the two passes (clocks, then everything else), workers
``compare``    two runs side by side with significance tests
``report_*``   text, JSON and self-contained HTML writers

Where to start reading: ``pipeline.analyse(inputs, pipeline.Options())``
returns the report dict (JSON-ready) that every writer renders;
``instrument.cmd.report`` is the command around it.  Its libraries
(NumPy, SciPy, orjson, msgspec) are the ``report`` extra.  The runtime
half of the package never imports this one (``tests/unit/test_layers``).
"""
