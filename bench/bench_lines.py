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
"""The writer's lines: ``record.encode_lines`` in C and in Python.

One batch of the spans that ``bench_call_overhead.py`` records (5,000
instrumented no-op calls by default: one span each, file sink) is
encoded by ``encode_lines`` with the compiled ``instrument._native.
_lines`` and with its pure-Python twin (``record._lines_fast``) in
alternate rounds of one process; thread CPU ns per record, medians,
and their ratio.  ``--attrs`` gives every span a small attrs dict (a
str list, an int, a float: the float goes through msgspec from C).

``--callgrind`` runs this script under ``valgrind --tool=callgrind``
for each path with ``--encodes 0`` and ``--encodes N`` and prints the
instructions per record (the difference over N batches): counts that
do not depend on the machine's load.

``--drain`` times the writer's whole drain instead (``EventBuffer.
drain`` of the batch queued again each round, file sink: the records
taken from the deque, the running spans looked for, the lines, the
write), with the compiled helpers and with their pure-Python twins
(``record._lines_fast``, ``buffer._first_running_py``).  Under
``--callgrind`` only user-space instructions count (the write's
kernel time does not).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_call_overhead  # noqa: E402


def spans(calls: int, attrs: bool) -> list:
    """The records of ``calls`` instrumented no-op calls."""
    import instrument

    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    rt = bench_call_overhead._setup(out_dir, calls, 1, 60.0)
    manager = bench_call_overhead.Manager()
    args = (bench_call_overhead.Context(), bench_call_overhead.Instance())
    for _ in range(calls):
        manager.noop(*args)
    batch = list(rt.buffer.queue)
    rt.buffer.queue.clear()
    instrument.teardown()
    if attrs:
        from instrument.runtime import record

        for n, rec in enumerate(batch):
            rec[record.I_ATTRS] = {
                'selected': ['compute-001'],
                'n': n,
                'weight': 0.25,
            }
    return batch


def _drainers(calls: int, attrs: bool, rounds: int):
    """The batch of ``spans`` queued and drained by a live buffer (file
    sink), with the compiled helpers and with their twins."""
    import instrument
    from instrument.runtime import buffer
    from instrument.runtime import record

    native = record._lines_c
    # (a tree from before ``_lines.running`` has the lines alone in C)
    running = getattr(buffer, '_first_running', None)
    twin = getattr(buffer, '_first_running_py', None)
    if native is None or (running is not None and running is twin):
        sys.exit('instrument._native._lines is not built (or switched off)')
    batch = spans(calls, attrs)
    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    rt = bench_call_overhead._setup(out_dir, calls, rounds + 2, 60.0)
    buf = rt.buffer
    # No drain of the writer thread in between (a run under valgrind
    # outlasts the flush interval: a new generation makes the thread
    # end when it wakes), and no periodic callbacks (the resource
    # samples: once a drain, timed by the clock, they would make the
    # instruction counts vary).
    buf._periodic.clear()
    buf.drain()  # the header, and starts the writer thread
    buf._generation += 1

    def drain_with(lines, first_running):
        def drain(batch):
            record._lines_c = lines
            if running is not None:
                buffer._first_running = first_running
            try:
                buf.queue.extend(batch)
                buf.drain()
            finally:
                record._lines_c = native
                if running is not None:
                    buffer._first_running = running

        return drain

    drainers = {
        'c': drain_with(native, running),
        'python': drain_with(None, twin),
    }
    return batch, drainers, instrument.teardown


def measure_drain(calls: int, attrs: bool, rounds: int) -> dict:
    batch, drainers, done = _drainers(calls, attrs, 2 * rounds)
    clock = time.thread_time_ns
    times: dict = {name: [] for name in drainers}
    for _ in range(rounds):
        for name, drain in drainers.items():
            start = clock()
            drain(batch)
            times[name].append((clock() - start) / len(batch))
    done()
    return {name: statistics.median(t) for name, t in times.items()}


def _encoders():
    from instrument.runtime import record

    native = record._lines_c
    if native is None:
        sys.exit('instrument._native._lines is not built (or switched off)')

    def with_c(batch):
        record._lines_c = native
        return record.encode_lines(batch, 1, 4242)

    def with_python(batch):
        record._lines_c = None
        try:
            return record.encode_lines(batch, 1, 4242)
        finally:
            record._lines_c = native

    return {'c': with_c, 'python': with_python}


def measure(batch: list, rounds: int) -> dict:
    encoders = _encoders()
    want = encoders['python'](batch)
    if encoders['c'](batch) != want or want[1]:
        sys.exit('the two paths do not give the same lines')
    clock = time.thread_time_ns
    times: dict = {name: [] for name in encoders}
    for _ in range(rounds):
        for name, encode in encoders.items():
            start = clock()
            encode(batch)
            times[name].append((clock() - start) / len(batch))
    return {name: statistics.median(t) for name, t in times.items()}


def _instructions(path: str, encodes: int, args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'callgrind.out')
        subprocess.run(
            [
                'valgrind',
                '--tool=callgrind',
                '--callgrind-out-file=' + out,
                sys.executable,
                os.path.abspath(__file__),
                '--only',
                path,
                '--encodes',
                str(encodes),
                '--calls',
                str(args.calls),
            ]
            + (['--attrs'] if args.attrs else [])
            + (['--drain'] if args.drain else []),
            env=dict(os.environ, PYTHONHASHSEED='0'),
            check=True,
            capture_output=True,
        )
        with open(out) as f:
            for line in f:
                found = re.match(r'(?:summary|totals): (\d+)', line)
                if found:
                    return int(found.group(1))
    raise RuntimeError('no instruction count from callgrind')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--calls', type=int, default=5000)
    parser.add_argument('--rounds', type=int, default=21)
    parser.add_argument('--attrs', action='store_true')
    parser.add_argument('--callgrind', type=int, metavar='N', default=0)
    parser.add_argument('--only', choices=['c', 'python'])
    parser.add_argument('--encodes', type=int, default=0)
    parser.add_argument(
        '--drain',
        action='store_true',
        help='the whole drain, not encode_lines alone',
    )
    args = parser.parse_args()
    what = 'with attrs' if args.attrs else 'no attrs'
    step = 'the whole drain' if args.drain else 'encode_lines'
    if args.drain and args.only:
        batch, drainers, done = _drainers(args.calls, args.attrs, args.encodes)
        for _ in range(args.encodes):
            drainers[args.only](batch)
        done()
        return
    if args.drain and not args.callgrind:
        ns = measure_drain(args.calls, args.attrs, args.rounds)
        print(
            '%s, %d spans (%s), thread CPU ns a record, median of %d '
            'alternate rounds: C %.0f, Python %.0f, C/Python %.3f; load '
            'average %.2f'
            % (
                step,
                args.calls,
                what,
                args.rounds,
                ns['c'],
                ns['python'],
                ns['c'] / ns['python'],
                os.getloadavg()[0],
            )
        )
        return
    batch = spans(args.calls, args.attrs)
    if args.only:
        encode = _encoders()[args.only]
        for _ in range(args.encodes):
            encode(batch)
        return
    if args.callgrind:
        per = {}
        for path in ('c', 'python'):
            base = _instructions(path, 0, args)
            more = _instructions(path, args.callgrind, args)
            per[path] = (more - base) / (args.callgrind * len(batch))
        print(
            '%s, %d spans (%s), callgrind instructions a record '
            '(%d batches less none): C %.0f, Python %.0f, C/Python %.3f'
            % (
                step,
                len(batch),
                what,
                args.callgrind,
                per['c'],
                per['python'],
                per['c'] / per['python'],
            )
        )
        return
    ns = measure(batch, args.rounds)
    print(
        'encode_lines, %d spans (%s), thread CPU ns a record, median of %d '
        'alternate rounds: C %.0f, Python %.0f, C/Python %.3f; load '
        'average %.2f'
        % (
            len(batch),
            what,
            args.rounds,
            ns['c'],
            ns['python'],
            ns['c'] / ns['python'],
            os.getloadavg()[0],
        )
    )


if __name__ == '__main__':
    main()
