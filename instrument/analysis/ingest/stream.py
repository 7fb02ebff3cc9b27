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
"""Reading many span files in step by time, in bounded memory.

Each file is nearly in time order (records are written as spans start
and end).  Files are read in chunks of lines; the next chunk always
comes from the file that has progressed least in (corrected) time, so
all files advance together and the events of one request, spread over
hosts, arrive close to each other.  Only one chunk is in memory at a
time.  The *watermark* is the time every unfinished file has reached;
consumers finalise what is older than the watermark minus a horizon.

Nothing here sorts records: consumers are insensitive to order within
the horizon.
"""

import heapq
import typing

from instrument.analysis.ingest import spanfiles

CHUNK_BYTES = 1 << 18

# progress(bytes read so far), called after each chunk
Progress = typing.Callable[[int], None]


def reads(
    files: list, hint: typing.Optional[int] = None
) -> typing.Iterator[tuple]:
    """Yield ``(span_file, lines, first_lineno, heap)`` for every read,
    in the order ``chunks`` reads: the file that has progressed least
    first.  The last read of each file yields no lines.  ``heap`` holds
    ``(time, index, file)`` of the files still to read.

    Restricted to a subset of the files, the order is the order of the
    whole restricted to that subset (a file's key changes only when it
    is read), so the files can be read by several processes and the
    order rebuilt from the times each reports (``order``).
    """
    hint = hint or CHUNK_BYTES
    heap = [(-1, f.index, f) for f in files]
    heapq.heapify(heap)
    while heap:
        _t, _i, f = heapq.heappop(heap)
        first = f.lineno
        lines = f.read_chunk(hint)
        if lines:
            f.lineno += len(lines)
            if not f.done:
                heapq.heappush(
                    heap, (f.time if f.time is not None else -1, f.index, f)
                )
        yield f, lines, first, heap


def chunks(
    files: list,
    progress: typing.Optional[Progress] = None,
    hint: typing.Optional[int] = None,
) -> typing.Iterator[tuple]:
    """Yield ``(span_file, lines, first_lineno, watermark)``.

    ``first_lineno`` is the number of the line before the chunk's first
    line.  ``progress(bytes_done)`` is called after each chunk.
    """
    done_bytes = 0
    positions = {}
    for f, lines, first, heap in reads(files, hint):
        pos = f.position()
        done_bytes += pos - positions.get(f.index, 0)
        positions[f.index] = pos
        if progress is not None:
            progress(done_bytes)
        watermark = heap[0][0] if heap else None
        if lines:
            yield f, lines, first, watermark


def order(
    indices: typing.Iterable[int], next_read: typing.Callable[[int], tuple]
) -> typing.Iterator[tuple]:
    """Rebuild the order of ``reads`` over files read elsewhere.

    ``next_read(index)`` returns ``(lines read, time)`` of the next read
    of that file (``time`` is the file's time after it).  Yields
    ``(index, watermark)`` per read, as ``chunks`` computes them.
    """
    heap = [(-1, i) for i in indices]
    heapq.heapify(heap)
    while heap:
        _t, i = heapq.heappop(heap)
        nlines, t = next_read(i)
        if nlines:
            heapq.heappush(heap, (t if t is not None else -1, i))
        yield i, (heap[0][0] if heap else None)


def open_files(
    paths: list,
    offsets: typing.Optional[dict] = None,
    host_offsets: typing.Optional[dict] = None,
) -> list:
    """``SpanFile`` readers; ``offsets`` maps file index to the clock
    correction of its (first) host, ``host_offsets`` host name to its
    correction (each line of a file that several hosts wrote is placed
    with its own host's)."""
    offsets = offsets or {}
    return [
        spanfiles.SpanFile(path, i, offsets.get(i, 0), host_offsets)
        for i, path in enumerate(paths)
    ]
