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
"""Per-call CPU of an instrumented method (threads and eventlet).

Times a no-op method unpatched and patched (file sink writing to a temp
directory) in one run, on CPU clocks (a shared machine's load does not
count as cost), and prints ns/op, medians of the rounds: added on the
calling thread alone, the writer thread's share per call (encoding and
writing, off the calling thread by design) with the batch encoder and
with the record-by-record encoder it replaced (issue 31; both measured
in the same run; where the lines are written in C, ``instrument.
_native._lines``, also with their pure-Python twin), their sum, and
the process's CPU (every thread) per
call with the writer running beside the calls.  Target: <= 2 us of CPU
added per instrumented call, calling thread and writer together.  Run
with ``tox -e bench`` or ``python bench/bench_call_overhead.py``.  The
eventlet figures come from a child process that monkey-patches first.

``--metrics`` (issue 30) times the same calls with ``[instrument]
metrics_dir`` off and on, in alternate rounds of one run: the calling
thread's CPU per call both ways and their ratio (the aggregation runs in
the writer: the ratio is 1 within noise), and the writer's per call
both ways (what the aggregation and its state file add there).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_NS = 2000


class Context:
    request_id = 'req-5d1f6c43-7b7e-4c84-9a51-9a8c6f6a0f11'
    global_request_id = None


class Instance:
    uuid = '0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77'


class Manager:
    host = 'compute-001'

    def noop(self, context, instance):
        return None


def _time_calls(
    fn, args, calls: int, repeat: int, clock=time.thread_time_ns
) -> float:
    """Median CPU ns per call of ``repeat`` rounds (``clock``: this
    thread's CPU, or the process's: every thread)."""
    rounds = []
    for _ in range(repeat):
        start = clock()
        for _ in range(calls):
            fn(*args)
        rounds.append((clock() - start) / calls)
    return statistics.median(rounds)


def _setup(out_dir: str, calls: int, repeat: int, flush: float):
    from oslo_config import cfg

    import instrument
    from instrument import opts
    from instrument.patching import patcher

    conf = cfg.ConfigOpts()
    conf([], project='bench')
    opts.register_opts(conf)
    conf.set_override('enabled', True, 'instrument')
    conf.set_override('output_dir', out_dir, 'instrument')
    conf.set_override('sql_timing', False, 'instrument')
    conf.set_override('flush_interval', flush, 'instrument')
    # Room for every record of the run: a drop would be cheaper than a
    # write and flatter the figures.
    conf.set_override('buffer_size', calls * repeat + 1000, 'instrument')
    point = patcher.PatchPoint(
        __name__,
        'Manager.noop',
        'compute.noop',
        'compute',
        instances=patcher.uuids('instance'),
        host=patcher.self_attr('host'),
    )
    return instrument.setup(conf, 'nova-compute', points=[point])


def _lines(out_dir: str) -> int:
    lines = 0
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name), 'rb') as f:
            lines += sum(1 for _ in f)
    return lines


def measure(calls: int, repeat: int) -> dict:
    import instrument
    from instrument.runtime import record

    manager = Manager()
    args = (Context(), Instance())
    base_ns = _time_calls(manager.noop, args, calls, repeat)
    base_proc_ns = _time_calls(
        manager.noop, args, calls, repeat, time.process_time_ns
    )

    # 1. The calling thread alone: the writer waits while the calls run,
    #    then the drain is timed on its own (its cost per call), in
    #    turns with the batch encoder and with the record-by-record one
    #    (the encoder before issue 31, measured in the same run).
    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    #    Where the lines are written in C (instrument._native._lines),
    #    a third turn writes them with its pure-Python twin.
    native = record._lines_c
    encoders = (
        ('batch', 'each') if native is None else ('batch', 'python', 'each')
    )
    rt = _setup(out_dir, calls, len(encoders) * repeat, 60.0)
    clock = time.thread_time_ns
    fast = record._encode_structs
    caller = []
    writer: dict = {encoder: [] for encoder in encoders}
    for _ in range(repeat):
        for encoder in encoders:
            start = clock()
            for _ in range(calls):
                manager.noop(*args)
            caller.append((clock() - start) / calls)
            record._encode_structs = None if encoder == 'each' else fast
            record._lines_c = native if encoder == 'batch' else None
            start = clock()
            rt.buffer.drain()
            writer[encoder].append((clock() - start) / calls)
    record._encode_structs = fast
    record._lines_c = native
    dropped = dict(rt.buffer.counts())
    instrument.teardown()
    lines = _lines(out_dir)

    # 2. As in a service: the writer runs beside the calls (default
    #    flush interval); the process's CPU (both threads) per call.
    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    _setup(out_dir, calls, repeat, 0.5)
    together_ns = _time_calls(
        manager.noop, args, calls, repeat, time.process_time_ns
    )
    instrument.teardown()
    return {
        'base_ns': base_ns,
        'caller_ns': statistics.median(caller),
        'writer_ns': statistics.median(writer['batch']),
        'writer_each_ns': statistics.median(writer['each']),
        'writer_python_ns': (
            statistics.median(writer['python']) if 'python' in writer else None
        ),
        'base_proc_ns': base_proc_ns,
        'together_ns': together_ns,
        'lines': lines + _lines(out_dir),
        'dropped': dropped,
        'expected': calls * repeat * (len(encoders) + 1),
        'fast': fast is not None,
        'native': record._lines_c is not None,
    }


def breakdown(calls: int, repeat: int) -> list:
    """Where the writer's time per record goes: one drain's records
    (``calls`` spans) through each step, with the record-by-record
    encoder of before issue 31 and the batch encoder of now; thread CPU
    ns per record, median of ``repeat`` rounds."""
    import instrument
    from instrument import schema
    from instrument.runtime import record

    clock = time.thread_time_ns

    def med(fn) -> float:
        rounds = []
        for _ in range(repeat):
            start = clock()
            fn()
            rounds.append((clock() - start) / calls)
        return statistics.median(rounds)

    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    rt = _setup(out_dir, calls, 3 * repeat + 2, 60.0)
    buf = rt.buffer
    manager = Manager()
    args = (Context(), Instance())
    for _ in range(calls):
        manager.noop(*args)
    batch = list(buf.queue)
    buf.drain()
    pid = os.getpid()
    fast = record._encode_structs
    steps = []
    steps.append(
        (
            'is the span still running (B or X)',
            'both',
            med(lambda: buf._split_running(batch)),
        )
    )
    steps.append(
        (
            'build the schema dict (to_dict)',
            'before',
            med(lambda: [record.to_dict(rec, 1, pid) for rec in batch]),
        )
    )
    dicts = [record.to_dict(rec, 1, pid) for rec in batch]
    steps.append(
        (
            'one encoder call per record',
            'before',
            med(lambda: [record._encode(d) for d in dicts]),
        )
    )
    lines = [record._encode(d) for d in dicts]
    steps.append(('join the lines', 'before', med(lambda: b'\n'.join(lines))))
    if fast is not None:
        record._encode_structs = list
        steps.append(
            (
                'build a Line struct from the tuple',
                'now',
                med(lambda: record._lines_fast(batch, 1, pid)),
            )
        )
        structs = record._lines_fast(batch, 1, pid)
        record._encode_structs = fast
        steps.append(
            (
                'one msgspec encode_lines per batch',
                'now',
                med(lambda: fast(structs)),
            )
        )
    native = record._lines_c
    if native is not None:
        steps.append(
            (
                'the lines in C (instrument._native._lines)',
                'now',
                med(
                    lambda: native(
                        batch,
                        1,
                        pid,
                        schema.SCHEMA_VERSION,
                        record._encode_value,
                        record._UNSET,
                    )
                ),
            )
        )
    data = record.encode_lines(batch, 1, pid)[0]
    fd = os.open(
        os.path.join(out_dir, 'breakdown'),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o600,
    )
    size = len(data) * 5000 // calls

    def write() -> None:
        for at in range(0, len(data), size):
            os.write(fd, data[at : at + size])

    steps.append(('os.write, 5000 records a call', 'both', med(write)))
    os.close(fd)

    def drain() -> None:
        buf.queue.extend(batch)
        buf.drain()

    steps.append(('the whole drain, batch encoder', 'now', med(drain)))
    record._encode_structs = None
    steps.append(('the whole drain, record by record', 'before', med(drain)))
    record._encode_structs = fast
    instrument.teardown()
    steps.append(('bytes a line', '', len(data) / calls))
    return steps


def measure_metrics(calls: int, repeat: int) -> dict:
    """Thread CPU ns per call, medians: the calling thread and the
    writer's drain, with the metrics observer off and on in alternate
    rounds (one runtime; the observer is what ``metrics_dir`` adds)."""
    import instrument
    from instrument.runtime import metrics
    from instrument.sinks import metrics as metrics_sink

    manager = Manager()
    args = (Context(), Instance())
    out_dir = tempfile.mkdtemp(prefix='instrument-bench-')
    rt = _setup(out_dir, calls, 2 * repeat, 60.0)
    state_dir = tempfile.mkdtemp(prefix='instrument-bench-metrics-')
    observer = metrics.Metrics(
        metrics_sink.StateFile(state_dir, rt.identity), 0.0
    )
    clock = time.thread_time_ns
    caller = {'off': [], 'on': []}
    writer = {'off': [], 'on': []}
    for _ in range(repeat):
        for mode in ('off', 'on'):
            if mode == 'on':
                rt.buffer.add_observer(observer)
            start = clock()
            for _ in range(calls):
                manager.noop(*args)
            caller[mode].append((clock() - start) / calls)
            start = clock()
            rt.buffer.drain()
            writer[mode].append((clock() - start) / calls)
            if mode == 'on':
                rt.buffer._observers.remove(observer)
    instrument.teardown()
    counted = sum(
        sum(v[:-1]) for v in observer.families[metrics.SPAN].values()
    )
    return {
        mode + '_' + what: statistics.median(d[mode])
        for what, d in (('caller', caller), ('writer', writer))
        for mode in ('off', 'on')
    } | {'counted': counted, 'expected': calls * repeat}


def _report_metrics(mode: str, r: dict) -> None:
    print(
        '%-9s calling thread, metrics off %6.0f ns/op, on %6.0f ns/op '
        '(on/off %.3f)\n'
        '          writer per call, metrics off %6.0f ns/op, on %6.0f '
        'ns/op (+%.0f ns, on/off %.2f)\n'
        '          spans counted by the metrics %d of %d'
        % (
            mode,
            r['off_caller'],
            r['on_caller'],
            r['on_caller'] / r['off_caller'],
            r['off_writer'],
            r['on_writer'],
            r['on_writer'] - r['off_writer'],
            r['on_writer'] / r['off_writer'],
            r['counted'],
            r['expected'],
        )
    )


def _report(mode: str, r: dict) -> None:
    caller = r['caller_ns'] - r['base_ns']
    together = r['together_ns'] - r['base_proc_ns']
    total = caller + r['writer_ns']
    before = caller + r['writer_each_ns']
    print(
        '%-9s unpatched %6.0f ns/op (thread CPU)\n'
        '          added on the calling thread        %6.0f ns/op  '
        '(%.2fx of the %d ns target)\n'
        '          writer, per call, batch encoder    %6.0f ns/op%s\n'
        '%s'
        '          writer, per call, record by record %6.0f ns/op  '
        '(the encoder before; batch = %.2fx of it)\n'
        '          calling thread + writer            %6.0f ns/op  '
        '(%.2fx of the target; %.2fx of record by record)\n'
        '          process CPU, writer running beside %6.0f ns/op  '
        '(%.2fx of the target)\n'
        '          lines written %d for %d calls, dropped %s'
        % (
            mode,
            r['base_ns'],
            caller,
            caller / TARGET_NS,
            TARGET_NS,
            r['writer_ns'],
            (
                '  (msgspec missing: record by record)'
                if not r['fast']
                else '  (lines in C)'
                if r.get('native')
                else '  (lines in Python)'
            ),
            (
                '          writer, per call, lines in Python  %6.0f ns/op  '
                '(C = %.2fx of it, same run)\n'
                % (
                    r['writer_python_ns'],
                    r['writer_ns'] / r['writer_python_ns'],
                )
                if r.get('writer_python_ns')
                else ''
            ),
            r['writer_each_ns'],
            r['writer_ns'] / r['writer_each_ns'],
            total,
            total / TARGET_NS,
            total / before,
            together,
            together / TARGET_NS,
            r['lines'],
            r['expected'],
            r['dropped'],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--calls', type=int, default=100000)
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument(
        '--breakdown',
        action='store_true',
        help='where the writer\'s time per record goes, '
        'step by step (threads mode only)',
    )
    parser.add_argument(
        '--metrics',
        action='store_true',
        help='the calling thread and the writer with '
        '[instrument] metrics_dir off and on (issue 30)',
    )
    parser.add_argument(
        '--child', choices=['eventlet'], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.breakdown:
        print(
            'The writer per record, step by step: thread CPU ns, median '
            'of %d rounds of %d records; load average %.2f'
            % (args.repeat, args.calls, os.getloadavg()[0])
        )
        for step, when, ns in breakdown(args.calls, args.repeat):
            print('  %-40s %-7s %7.0f' % (step, when, ns))
        return
    if args.child == 'eventlet':
        import eventlet

        eventlet.monkey_patch()
        run = measure_metrics if args.metrics else measure
        print(json.dumps(run(args.calls, args.repeat)))
        return
    if args.metrics:
        print(
            'Metrics off and on in alternate rounds: thread CPU per '
            'call of one instrumented no-op method, median of %d x %d '
            'calls; load average %.2f'
            % (args.repeat, args.calls, os.getloadavg()[0])
        )
        _report_metrics('threads', measure_metrics(args.calls, args.repeat))
        child = subprocess.run(
            [
                sys.executable,
                os.path.abspath(__file__),
                '--child',
                'eventlet',
                '--metrics',
                '--calls',
                str(args.calls),
                '--repeat',
                str(args.repeat),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        _report_metrics(
            'eventlet', json.loads(child.stdout.strip().splitlines()[-1])
        )
        return
    print(
        'Per-call CPU of one instrumented no-op method (one span, '
        'file sink), median of %d x %d calls; a plain lambda costs '
        '%.0f ns here; load average %.2f'
        % (
            args.repeat,
            args.calls,
            _time_calls(lambda: None, (), args.calls, args.repeat),
            os.getloadavg()[0],
        )
    )
    _report('threads', measure(args.calls, args.repeat))
    child = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            '--child',
            'eventlet',
            '--calls',
            str(args.calls),
            '--repeat',
            str(args.repeat),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    _report('eventlet', json.loads(child.stdout.strip().splitlines()[-1]))


if __name__ == '__main__':
    main()
