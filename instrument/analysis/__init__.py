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

Data flows one way through these packages and modules:

``ingest/``    reading span files: discovery (``spanfiles``), decoding,
               validation and repair (``codec``), what was lost and
               when (``losses``), the files read in step by time
               (``stream``), the time window (``window``), the request
               ids of one API request (``aliases``), pass 1
               (``clockpass``: the RPC hops that date the clocks) and
               pass 2 (``reader``: the one reader and validator of
               records)
``model/``     what the records mean: clock offsets, the span layout
               (``spans``), the request model (``requests``), each
               request's operation and final states, time per
               component and critical path (``breakdown``), the SQL
               digest's classes (``sqldigest``), the requests a loss
               may have touched (``damage``)
``sections/``  the report, one module per key: ``report[key]`` is
               computed in ``sections/<key>.py``, with its text and
               HTML parts (``base.Section``)
``registry``   every section once; what the reader, the merge, the
               report, the writers and ``compare`` iterate
``routes``     how pass 2 hands each record to what reads it
``render/``    formatting (``fmt``: the leaf; ``views``, ``charts``)
               and the writers (``text``, ``html``, ``json``)
``export/``    the records and the analysis as Parquet (DuckDB)
``pipeline``   the two passes, their workers, the merge, the report
``compare``    two runs side by side, with significance tests
``follow``     span files read as they grow, the same reader and
               request model, finished requests folded into
               ``exposition``'s per-operation Prometheus families

Where to start reading: ``pipeline.analyse(inputs, pipeline.Options())``
returns the report dict (JSON-ready) that every writer renders;
``instrument.cmd.report`` is the command around it;
``doc/source/architecture.rst`` follows one record from a nova call to
a figure of the report.  Its libraries (NumPy, SciPy, orjson, msgspec,
DuckDB) are the ``report`` extra.  The runtime half of the package
never imports this one (``tests/unit/test_layers``).
"""
