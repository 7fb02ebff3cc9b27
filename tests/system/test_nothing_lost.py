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
"""Nothing is lost silently: every cause of loss, in a real process.

The causes, as the runtime counts them (``EventBuffer.drop_counts``):

* ``buffer_full``: the event buffer was full (``sink.drops`` records);
* ``open_untracked``: more spans ran at once than the buffer follows,
  the ends of the oldest are lost (``sink.drops``);
* ``file``: the file sink could not write (a full disk, a directory
  that cannot be written, a record that cannot be encoded), per sink
  (``sink.drops``; the OTLP and log sinks count under their names);
* ``sql_queue``: SQL statements dropped because their queue was full
  (``sql.dropped``);
* what was never written at exit because the writer was stuck in a
  write that did not return (a hung disk): only the service log can
  say it.

Each case runs in a fresh interpreter (threads, and eventlet
monkey-patched), ends through one of the exit paths (``teardown()``,
interpreter exit, ``os._exit``, a forked worker's ``os._exit``), and the
exact count the case made is checked against the span file (the last
counter record of the process) and against the service log's line at
close.  ``lossy_run`` returns the run's files and the expected counts,
for the report's half of the check (``instrument-report``).
"""

import collections
import json
import os
import re
import subprocess
import sys
import textwrap

from instrument import schema
from tests.unit import base

# argv: mode (threads, eventlet), cause, ending (teardown, atexit,
# os_exit, fork_child), span directory.  Prints {"worker": pid}; the
# service log is standard error.
LOSSY_PROCESS = r'''
import sys

mode, cause, ending, out = sys.argv[1:5]
if mode == 'eventlet':
    import eventlet
    eventlet.monkey_patch()

import errno
import json
import logging
import os
import time

logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format='%(levelname)s %(name)s %(message)s')

from oslo_config import cfg
import sqlalchemy

import instrument
from instrument.runtime import buffer
from instrument import opts
from instrument.sinks import file as file_sink
from instrument.runtime import threads

EVENTS = 300
STATEMENTS = 5000
options = {'enabled': True, 'output_dir': out, 'flush_interval': 60.0,
           'sql_timing': False, 'resource_sample_interval': 0}
if cause == 'buffer_full':
    options['buffer_size'] = 100
elif cause == 'open_untracked':
    options['buffer_size'] = 16
elif cause == 'sql_queue':
    options.update(sql_timing=True, buffer_size=1000,
                   slow_query_threshold=0.0)
elif cause == 'stuck':
    options['flush_interval'] = 0.05
elif cause in ('log', 'log_file'):
    options.update(flush_interval=0.05, sinks=(
        ['log'] if cause == 'log' else ['file', 'log']))
# A stuck writer is waited for 0.5 s at exit, not 2 (the test's time).
buffer.flush_before_exit.__defaults__ = (0.5,)

conf = cfg.ConfigOpts()
conf([], project='t')
opts.register_opts(conf)
for key, value in options.items():
    conf.set_override(key, value, 'instrument')
rt = instrument.setup(conf, 'nova-conductor', points=[])
recorder = rt.recorder


def events(first, count):
    for n in range(first, first + count):
        recorder.counter('test.event', {'n': n})


def disk_full(budget):
    """The span file's disk holds ``budget`` more bytes (the last write
    cut short, as the kernel does), then ENOSPC."""
    real_write = os.write

    def write(fd, data):
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real_write(fd, bytes(data[:budget[0]]))
        budget[0] -= written
        return written

    file_sink.FileSink._os_write = staticmethod(write)


def work():
    if cause in ('disk_full_freed', 'disk_full_until_exit'):
        budget = [3000]
        disk_full(budget)
        for n in range(3):
            events(n * 100, 100)
            rt.buffer.drain()
        if cause == 'disk_full_freed':
            budget[0] = 1 << 40
        events(300, 10)
    elif cause == 'buffer_full':
        events(0, EVENTS)
    elif cause == 'open_untracked':
        spans = []
        for n in range(2):
            for _ in range(10):
                spans.append(recorder.begin('test.span', None, None, None,
                                            None, None, None))
            rt.buffer.drain()
        for rec in reversed(spans):
            recorder.end(rec, recorder.clock())
    elif cause == 'sql_queue':
        engine = sqlalchemy.create_engine('sqlite://')
        with engine.connect() as conn:
            for n in range(STATEMENTS):
                conn.execute(sqlalchemy.text('SELECT %d AS probe' % n))
    elif cause == 'stuck':
        entered = threads.os_event()
        never = threads.os_event()
        real_write = os.write

        def hung(fd, data):
            entered.set()
            never.wait()
            return real_write(fd, data)

        file_sink.FileSink._os_write = staticmethod(hung)
        events(0, 50)
        assert entered.wait(30), 'the writer did not start'
        events(50, 50)
    elif cause in ('log', 'log_file'):
        # The service log's handler fails for one event in three (a log
        # server gone away), the others reach the service log.
        class Failing(logging.Handler):
            def emit(self, rec):
                line = json.loads(rec.getMessage())
                if line.get('ev') == 'test.event' and \
                        line['attrs']['n'] % 3 == 0:
                    raise OSError(errno.EIO, 'the log server went away')

        logging.getLogger('instrument.spans').addHandler(Failing())
        for n in range(3):
            if n:
                # the writer hands them over, the hub (or the writer)
                # logs them; the last ones are written at exit
                time.sleep(0.3)
            events(n * 100, 100)


def report(pid):
    print(json.dumps({'worker': pid}), flush=True)


if ending == 'fork_child':
    pid = os.fork()
    if pid == 0:
        work()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    report(pid)
else:
    report(os.getpid())
    work()
    if ending == 'teardown':
        instrument.teardown()
    elif ending == 'os_exit':
        os._exit(0)
'''

# What the line at close calls each cause.
CAUSE_WORDS = {
    'buffer_full': 'lost to a full buffer of',
    'open_untracked': 'span ends lost',
    'file': 'lost by the file sink',
    'sql_queue': 'SQL statements dropped',
    'log': 'lost by the log sink',
}
FINAL_LINE = re.compile(
    r'instrument: at close, (\d+) (%s)'
    % '|'.join(re.escape(words) for words in CAUSE_WORDS.values())
)
UNWRITTEN_LINE = re.compile(
    r'instrument: at close, (\d+) events .*were '
    r'never written'
)
# A record the log sink delivered: a line of the service log.
SPAN_LINE = re.compile(r'^INFO instrument\.spans (\{.*\})$')
# The transaction of the SQL case ends with a ROLLBACK (the connection
# is closed without a commit): a statement of its own.
SQL_ENDS = 1

LossyRun = collections.namedtuple(
    'LossyRun',
    (
        'mode',
        'cause',
        'ending',
        'span_dir',
        'files',
        'worker',
        'log',
        'logged',
        'expected',
        'returncode',
    ),
)
LossyRun.__doc__ = """One lossy process's run.

``files``: ``{file name: [records]}`` of the span directory (lines that
are not JSON, the record a full disk cut short, left out);
``worker``: the pid of the process that lost records; ``log``: its
service log; ``logged``: the records of its lines (the log sink's, of
every process); ``expected``: ``{cause: the count it lost}``, worked out
from what the process did and what its span file holds, never from the
runtime's own counters (``never_written``: the records a stuck writer
never wrote)."""


def _read(span_dir: str) -> dict:
    files = {}
    for name in (
        sorted(os.listdir(span_dir)) if os.path.isdir(span_dir) else ()
    ):
        records = []
        with open(
            os.path.join(span_dir, name), encoding='utf-8', errors='replace'
        ) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass  # the line a full disk cut short
        files[name] = records
    return files


def _logged(log: str) -> list:
    records = []
    for line in log.splitlines():
        found = SPAN_LINE.match(line)
        if found:
            records.append(json.loads(found.group(1)))
    return records


def worker_records(run: LossyRun) -> list:
    """The records of the process that lost records (its span file;
    the service log's lines when the log sink is the only one)."""
    if not run.files:
        return worker_logged(run)
    return [
        r
        for name, records in run.files.items()
        if '_%d_' % run.worker in name
        for r in records
    ]


def worker_logged(run: LossyRun) -> list:
    """The records the log sink of that process delivered."""
    return [r for r in run.logged if r.get('pid') == run.worker]


def _expected(cause: str, records: list, logged: list) -> dict:
    """The count the case lost, from what it did and what was written."""
    if cause in ('log', 'log_file'):
        # 300 events made, those in the service log were delivered
        delivered = {
            r['attrs']['n'] for r in logged if r['ev'] == 'test.event'
        }
        return {'log': 300 - len(delivered)}
    evs = collections.Counter(r['ev'] for r in records)
    events = {r['attrs']['n'] for r in records if r['ev'] == 'test.event'}
    if cause in ('disk_full_freed', 'disk_full_until_exit'):
        # 310 events, the process.start and process.end records (the
        # drop reports are no records until written: a report the
        # full disk refused takes no seq number, is written anew)
        made = 310 + 2
        written = len(events) + evs['process.start'] + evs['process.end']
        return {'file': made - written}
    if cause == 'buffer_full':
        return {'buffer_full': 300 - len(events)}
    if cause == 'open_untracked':
        begun = {
            r['span']
            for r in records
            if r['ev'] == 'test.span' and r['ph'] == 'B'
        }
        ended = {
            r['span']
            for r in records
            if r['ev'] == 'test.span' and r['ph'] == 'X'
        }
        return {'open_untracked': len(begun - ended)}
    if cause == 'sql_queue':
        # (the round trips an sql.txn carries count as the sql.query
        # records they stand for)
        recorded = sum(
            1
            for r in records
            for each in schema.unfold(r)
            if each['ev'] == 'sql.query'
        ) + sum(r['attrs']['count'] for r in records if r['ev'] == 'sql.agg')
        return {'sql_queue': 5000 + SQL_ENDS - recorded}
    if cause == 'stuck':
        # 100 events and the process.start record, none written
        return {'never_written': 100 + 1 - len(records)}
    raise ValueError(cause)


def lossy_run(tmp: str, mode: str, cause: str, ending: str) -> LossyRun:
    """Run the lossy process of ``cause`` in ``mode`` (threads,
    eventlet), ended by ``ending``, with its span files in ``tmp``."""
    span_dir = os.path.join(tmp, 'spans-%s-%s-%s' % (mode, cause, ending))
    script = os.path.join(tmp, 'lossy.py')
    with open(script, 'w') as f:
        f.write(textwrap.dedent(LOSSY_PROCESS))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, script, mode, cause, ending, span_dir],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    worker = (
        json.loads(proc.stdout.splitlines()[-1])['worker']
        if proc.stdout.strip()
        else None
    )
    files = _read(span_dir)
    run = LossyRun(
        mode,
        cause,
        ending,
        span_dir,
        files,
        worker,
        proc.stderr,
        _logged(proc.stderr),
        {},
        proc.returncode,
    )
    return run._replace(
        expected=_expected(cause, worker_records(run), worker_logged(run))
    )


class NothingLostTest(base.TestCase):
    """For every cause, the exact count in the span file and in the
    service log at close, under threads and eventlet."""

    def run_case(self, mode: str, cause: str, ending: str) -> LossyRun:
        run = lossy_run(self.tmp, mode, cause, ending)
        self.assertEqual(0, run.returncode, run.log[-3000:])
        self.assertNotIn('Traceback', run.log)
        return run

    def final_counts(self, run: LossyRun) -> dict:
        """{cause: count} of the lines at close in the service log."""
        words = {w: c for c, w in CAUSE_WORDS.items()}
        out = {}
        for line in run.log.splitlines():
            found = FINAL_LINE.search(line)
            if found:
                cause = words[found.group(2)]
                self.assertNotIn(cause, out, 'logged twice:\n' + run.log)
                out[cause] = int(found.group(1))
        return out

    def last_counts(self, run: LossyRun, records=None) -> dict:
        """{cause: count} of the last counter records of the worker's
        span file (``sink.drops`` per key, ``sql.dropped``), or of
        ``records``."""
        out = {}
        for rec in worker_records(run) if records is None else records:
            if rec['ev'] == 'sink.drops':
                out.update({k: v for k, v in rec['attrs'].items() if v})
            elif rec['ev'] == 'sql.dropped':
                out['sql_queue'] = rec['attrs']['count']
        return out

    def check(self, mode: str, cause: str, ending: str) -> LossyRun:
        run = self.run_case(mode, cause, ending)
        [(key, count)] = run.expected.items()
        self.assertGreater(count, 0, run)
        detail = '%s\n%s' % (run.expected, run.log[-3000:])
        # (b) the service log at close: that cause, its exact count
        self.assertEqual({key: count}, self.final_counts(run), detail)
        # (a) the span file: the last counter record has the total
        self.assertEqual({key: count}, self.last_counts(run), detail)
        self.assertIn('process.end', [r['ev'] for r in worker_records(run)])
        return run

    # -- one case per cause, exit path and mode -----------------------------

    def test_buffer_full_threads_at_interpreter_exit(self):
        self.check('threads', 'buffer_full', 'atexit')

    def test_buffer_full_eventlet_at_os_exit(self):
        self.check('eventlet', 'buffer_full', 'os_exit')

    def test_open_spans_untracked_threads_at_teardown(self):
        self.check('threads', 'open_untracked', 'teardown')

    def test_open_spans_untracked_eventlet_in_a_forked_worker(self):
        self.check('eventlet', 'open_untracked', 'fork_child')

    def test_sql_queue_full_threads_in_a_forked_worker(self):
        run = self.check('threads', 'sql_queue', 'fork_child')
        # the repro: 5,000 statements, a buffer of 1,000
        self.assertEqual({'sql_queue': 4001}, run.expected)

    def test_sql_queue_full_eventlet_at_teardown(self):
        self.check('eventlet', 'sql_queue', 'teardown')

    def test_disk_full_then_freed_every_exit_path(self):
        for mode in ('threads', 'eventlet'):
            for ending in ('teardown', 'atexit', 'os_exit', 'fork_child'):
                self.check(mode, 'disk_full_freed', ending)

    def test_disk_full_until_exit(self):
        # Its total can only be in the service log: the line says so;
        # the span file has a count it could still take, or none.
        for mode, ending in (('threads', 'os_exit'), ('eventlet', 'atexit')):
            run = self.run_case(mode, 'disk_full_until_exit', ending)
            count = run.expected['file']
            self.assertGreater(count, 0)
            self.assertEqual(
                {'file': count}, self.final_counts(run), run.log[-3000:]
            )
            self.assertIn('this line is the only record of the total', run.log)
            self.assertLess(self.last_counts(run).get('file', 0), count)

    def test_stuck_writer_at_exit(self):
        # What a writer stuck in a write that never returns did not
        # write: the service log says how much (the span file cannot).
        for mode, ending in (
            ('threads', 'os_exit'),
            ('eventlet', 'os_exit'),
            ('threads', 'fork_child'),
        ):
            run = self.run_case(mode, 'stuck', ending)
            count = run.expected['never_written']
            self.assertEqual(101, count)
            lines = [
                found
                for found in map(UNWRITTEN_LINE.search, run.log.splitlines())
                if found
            ]
            self.assertEqual(
                [count], [int(m.group(1)) for m in lines], run.log[-3000:]
            )
            self.assertIn(
                'the writer did not finish writing to %s' % run.span_dir,
                run.log,
            )

    def test_log_sink_handler_failing_every_exit_path(self):
        # The service log's handler fails for one event in three: each
        # line the log sink could not deliver is counted, also when the
        # hub logs them (eventlet), never a whole batch for one line.
        for mode in ('threads', 'eventlet'):
            for ending in ('teardown', 'atexit', 'os_exit', 'fork_child'):
                run = self.check(mode, 'log', ending)
                self.assertEqual({'log': 100}, run.expected)

    def test_log_sink_handler_failing_beside_the_file_sink(self):
        # The span file's last counter record has the exact count, and
        # so has the last one the log sink delivered.
        for mode, ending in (
            ('threads', 'os_exit'),
            ('eventlet', 'atexit'),
            ('eventlet', 'fork_child'),
            ('eventlet', 'teardown'),
        ):
            run = self.check(mode, 'log_file', ending)
            self.assertEqual({'log': 100}, run.expected)
            self.assertEqual(
                run.expected,
                self.last_counts(run, worker_logged(run)),
                '%s %s\n%s' % (mode, ending, run.log[-3000:]),
            )

    # -- the report (instrument-report --json) ------------------------------

    def report_quality(self, run: LossyRun) -> dict:
        """``quality`` of ``instrument-report --json`` of ``run``; its
        loss is said on standard error even with ``-q``."""
        out = os.path.join(
            self.tmp,
            'report-%s-%s-%s.json' % (run.mode, run.cause, run.ending),
        )
        proc = subprocess.run(
            [
                sys.executable,
                '-m',
                'instrument.cmd.report',
                run.span_dir,
                '--json',
                out,
                '-q',
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertIn('warning', proc.stderr)
        with open(out) as f:
            return json.load(f)['quality']

    def test_the_report_counts_every_cause_once(self):
        # (c) the report: each cause's exact count, in the process's row
        # and in the run's totals, and lost records counted once (a
        # file sink's drop is also a seq gap: one record, not two).
        # The cases the service log alone can say (a disk full until
        # exit, a stuck writer) are above.
        cases = (
            ('threads', 'buffer_full', 'atexit', 'buffer_dropped'),
            ('eventlet', 'open_untracked', 'fork_child', 'buffer_dropped'),
            ('threads', 'disk_full_freed', 'os_exit', 'sink_dropped'),
            ('eventlet', 'disk_full_freed', 'teardown', 'sink_dropped'),
            ('threads', 'sql_queue', 'fork_child', 'sql_dropped'),
        )
        for mode, cause, ending, field in cases:
            run = self.check(mode, cause, ending)
            [count] = run.expected.values()
            quality = self.report_quality(run)
            [process] = [
                p for p in quality['processes'] if p['pid'] == run.worker
            ]
            detail = '%s %s %s: %s' % (mode, cause, ending, process)
            if field == 'sink_dropped':
                # the line a full disk cut short is a record the sink
                # lost and an invalid line of the file: counted once,
                # as the latter
                self.assertEqual(
                    count, process[field] + process['invalid'], detail
                )
            else:
                self.assertEqual(count, process[field], detail)
                self.assertEqual(
                    count, quality['causes'].get(field, count), detail
                )
            if field == 'sql_dropped':
                self.assertEqual(count, quality['sql_dropped'], detail)
                self.assertEqual(0, process['lost'], detail)
            else:
                self.assertEqual(count, process['lost'], detail)
                self.assertEqual(count, quality['lost_records'], detail)
            self.assertEqual(0, process['unreported_gaps'], detail)
