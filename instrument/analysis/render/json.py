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
"""The JSON report: the report dict as written, and read back.

The file holds everything the other writers show plus every request
(id, state, instances, times per component, critical path), so each
number can be traced to the requests behind it; ``compare`` accepts it
in place of the span files of a run.
"""

import json

import numpy


def _default(value):
    if isinstance(value, numpy.integer):
        return int(value)
    if isinstance(value, numpy.floating):
        return float(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError('not JSON serialisable: %r' % type(value))


def dumps(report: dict) -> str:
    return json.dumps(
        report, default=_default, separators=(',', ':'), ensure_ascii=False
    )


def write(report: dict, path: str) -> None:
    with open(path, 'w', encoding='utf-8') as out:
        out.write(dumps(report))
        out.write('\n')


def read(path: str) -> dict:
    """A report written by ``write``; ValueError when it is not one."""
    with open(path, encoding='utf-8') as src:
        try:
            data = json.load(src)
        except ValueError as exc:
            raise ValueError(
                '%s: not a JSON report (%s)' % (path, exc)
            ) from None
    if not isinstance(data, dict) or 'report_version' not in data:
        raise ValueError('%s: not an instrument-report JSON report' % path)
    return data


def is_report(path: str) -> bool:
    """Does ``path`` look like a JSON report (not a span file)?"""
    try:
        with open(path, 'rb') as src:
            head = src.read(64)
    except OSError:
        return False
    return head.startswith(b'{"report_version"')
