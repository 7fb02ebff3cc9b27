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
"""The records pass 2 accepted, written down for the Parquet export.

Pass 2 is the one reader and validator: the export writes what it
accepted, never reads the files again.  When asked
(``pipeline.Options.accepted_dir``), each worker of pass 2 writes every
record it accepted (valid, not a duplicate, of its partition) as one
line of newline-delimited JSON in ``part-<n>.jsonl``: where it was read
and what pass 2 found out about it, then the record's own fields as
read::

    {"file_name":"cmp-1.jsonl","line":12,"process_start":1700000000000000,
     "offset_us":-1520,"v":1,"ph":"X","seq":11,...}

``process_start``: the ``ts`` of the ``process.start`` of the process
that wrote it (null when none was read), ``offset_us``: its host's
clock correction.  The record's text is copied as it was read (the
fields of the schema, never another name), so nothing is decoded
twice.
"""

import json
import os
import typing

FILE_NAME = 'part-%d.jsonl'


class AcceptedWriter:
    """The NDJSON file of one worker of pass 2."""

    def __init__(self, directory: str, part: int) -> None:
        self.path = os.path.join(directory, FILE_NAME % part)
        self._out: typing.BinaryIO = open(self.path, 'wb')
        self._prefixes: dict = {}
        self.records = 0

    def prefix(self, fname: str) -> bytes:
        """The start of each line of a record read in ``fname``."""
        found = self._prefixes.get(fname)
        if found is None:
            found = self._prefixes[fname] = (
                b'{"file_name":' + json.dumps(fname).encode() + b',"line":'
            )
        return found

    def write(
        self,
        prefix: bytes,
        lineno: int,
        raw: bytes,
        start: typing.Optional[int],
        offset: int,
    ) -> None:
        """One accepted record: ``raw`` is its line from ``{``."""
        self.records += 1
        self._out.write(
            b'%s%d,"process_start":%s,"offset_us":%d,%s\n'
            % (
                prefix,
                lineno,
                b'null' if start is None else b'%d' % start,
                offset,
                raw[1:].rstrip(),
            )
        )

    def close(self) -> None:
        self._out.close()
