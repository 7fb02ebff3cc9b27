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
"""The three ways to expose forked workers' metrics, measured on one
workload: cost and correctness.

``--workers`` forked processes (4) each fold the same synthetic stream
of writer-side records (spans of 100 events, SQL statements of 500
query classes, waits on 50 locks: 650 label sets, as a busy nova
service has; ``--records`` per phase), flushing every
``--flush-every`` records.  Phase 1: every worker records and flushes,
then a scrape.  Then one worker exits (a last flush, as at a normal
exit), one is killed with SIGKILL part-way through a stretch of records
(what it folded since its last flush is not on disk), both are replaced
by new forks, a scrape.  Phase 2: every live worker records, a scrape;
every worker exits, a last scrape.  The designs:

``multiproc``
    prometheus_client's multiprocess mode fed by the writer: each
    record becomes ``observe()``/``inc()`` on the metric's child (looked
    up once per label set, then cached), written at once into the
    process's mmap files under ``PROMETHEUS_MULTIPROC_DIR`` (set before
    prometheus_client is imported); ``mark_process_dead`` for each
    worker that ends (as gunicorn's ``child_exit`` hook would); the
    scrape is ``MultiProcessCollector`` and ``generate_latest``.
``statefile`` (this library's choice)
    ``instrument.runtime.metrics.Metrics`` folds the records, the flush
    writes the process's JSON state file (``StateFile``), the scrape is
    ``instrument-metrics``' ``exposition()`` (sum per program).
``textfile``
    the same aggregates, each flush renders the process's own
    ``.prom`` file for node_exporter's textfile collector, the scrape
    emulates the collector (``collector/textfile.go``: every ``*.prom``
    of the directory in name order, each parsed, every metric passed
    on; node_exporter's registry (client_golang's ``Gather``) refuses a
    metric whose name and label values were already collected --
    "was collected before with the same name and label values" -- and
    its handler (``promhttp.ContinueOnError``) serves the rest: the
    first file's series stays, the others' are dropped and logged).
``textfile+pid``
    the same with a ``pid`` label, so that no series is a duplicate:
    the sums are left to the queries (``sum without (pid)``), as here.

Printed per design: the worker's CPU per record folded and per flush
(thread CPU time), the scrape's time and bytes (the mean of
``--scrapes`` scrapes of the final directory; the textfile emulation is
Python's, node_exporter's Go parser is faster: its time is not
comparable, its bytes are), the label sets of the exposition and the
duplicates the collector met, and correctness at each scrape: the
scraped counts (span and lock-wait histograms' ``_count``, SQL
statements) against the truth, what the workers folded ("recorded")
and what their last flushes held ("flushed"), label set by label set:
equal, lost, or double-counted; and whether a counter went down
between two scrapes.  Ratios are to ``statefile``, in the same run.
``--json`` prints the results as one JSON document (the smoke test).
Run with ``python bench/bench_exposition.py`` (``tox -e bench``).
"""

import argparse
import glob
import json
import os
import random
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time

# prometheus_client picks its value class (mmap files or memory) when
# it is imported: the directory must be set first, in every process.
_PROM_DIR = tempfile.mkdtemp(prefix='instrument-bench-multiproc-')
os.environ['PROMETHEUS_MULTIPROC_DIR'] = _PROM_DIR

from prometheus_client import parser as prom_parser  # noqa: E402

from instrument import schema  # noqa: E402
from instrument.runtime import metrics  # noqa: E402
from instrument.runtime import record  # noqa: E402
from instrument.sinks import metrics as metrics_sink  # noqa: E402

DESIGNS = ('multiproc', 'statefile', 'textfile', 'textfile+pid')
CHOSEN = 'statefile'
SERVICE = 'nova-api'
EVENTS = 100
QUERIES = 500
LOCKS = 50
BATCH = 100
# [instrument] flush_interval's default, and record rates of a worker
FLUSH_INTERVAL_S = 0.5
RATES = (100, 1000, 10000, 50000)
# lock names without digits (metrics.lock_label replaces numbers)
LOCK_NAMES = tuple(
    'lock-%s%s' % (chr(97 + n // 26), chr(97 + n % 26)) for n in range(LOCKS)
)
# the counts compared with the truth, by sample name
COUNTED = (
    'instrument_span_duration_seconds_count',
    'instrument_sql_statements_total',
    'instrument_lock_wait_seconds_count',
)


class Identity:
    service = SERVICE
    svc = 'api'
    host = 'bench'


# -- the workload --


def _complete(n: int, dur: int, ev: str, attrs: dict) -> tuple:
    """A complete (``X``) record of nova-api, as the writer gets it."""
    span, parent = (n, None) if not attrs else (None, n)
    return record.complete(
        n,
        dur,
        'h',
        'api',
        ev,
        span,
        parent,
        None,
        None,
        None,
        'ok',
        None,
        attrs,
    )


def stream(records: int, seed: int = 7) -> list:
    """``records`` writer-side record tuples: 40 % spans, 50 % SQL
    statements, 10 % lock waits, over 650 label sets."""
    rng = random.Random(seed)
    out = []
    for n in range(records):
        draw = rng.random()
        dur = int(rng.lognormvariate(7, 2)) + 1
        if draw < 0.4:
            ev = 'nova.event_%03d' % rng.randrange(EVENTS)
            out.append(_complete(n, dur, ev, {}))
        elif draw < 0.9:
            attrs = {
                schema.ATTR_FP: '%032x' % rng.randrange(QUERIES),
                schema.ATTR_DB: 'nova',
                schema.ATTR_KIND: 'SELECT',
                schema.ATTR_ROWS: rng.randrange(10),
            }
            out.append(_complete(n, dur, schema.EV_SQL_QUERY, attrs))
        else:
            attrs = {
                schema.ATTR_LOCK: LOCK_NAMES[rng.randrange(LOCKS)],
                schema.ATTR_HELD_US: dur // 2,
            }
            out.append(_complete(n, dur, schema.EV_LOCK_WAIT, attrs))
    return out


def truth_of(records) -> dict:
    """``{(sample name, label values): count}`` of ``records``."""
    out: dict = {}
    for rec in records:
        ev = rec[record.I_EV]
        attrs = rec[record.I_ATTRS]
        if ev == schema.EV_SQL_QUERY:
            key = (
                COUNTED[1],
                (
                    attrs[schema.ATTR_DB],
                    attrs[schema.ATTR_KIND],
                    attrs[schema.ATTR_FP],
                ),
            )
        elif ev == schema.EV_LOCK_WAIT:
            key = (COUNTED[2], (attrs[schema.ATTR_LOCK],))
        else:
            key = (COUNTED[0], (rec[record.I_SVC], ev))
        out[key] = out.get(key, 0) + 1
    return out


def add_into(total: dict, part: dict) -> None:
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


# -- the recording side (in the forked worker) --


class StateFileRecorder:
    """This library's: Metrics folds, the flush writes the JSON state."""

    def __init__(self, directory: str) -> None:
        self.metrics = metrics.Metrics(
            metrics_sink.StateFile(directory, Identity()), 0.0
        )

    def fold(self, batch) -> None:
        self.metrics.observe(batch)

    def flush(self, final: bool = False) -> None:
        self.metrics.tick(time.monotonic(), final)


class TextfileRecorder(StateFileRecorder):
    """The same aggregates; the flush renders the process's own .prom
    file (``pid``: with a pid label)."""

    def __init__(self, directory: str, pid_label: bool) -> None:
        self.metrics = metrics.Metrics(None, 0.0)
        self.directory = directory
        self.pid_label = pid_label

    def flush(self, final: bool = False) -> None:
        pid = os.getpid()
        merged = metrics_sink.merge(
            [{'service': SERVICE, 'families': self.metrics.state()}]
        )
        lead: tuple = ('service',)
        if self.pid_label:
            merged = {
                name: {
                    labels[:1] + (str(pid),) + labels[1:]: value
                    for labels, value in series.items()
                }
                for name, series in merged.items()
            }
            lead = ('service', 'pid')
        text = metrics_sink.render(merged, lead=lead)
        path = os.path.join(self.directory, '%s_%d.prom' % (SERVICE, pid))
        tmp = path + '.tmp'
        with open(tmp, 'w', encoding='utf-8') as out:
            out.write(text)
        os.replace(tmp, path)


class MultiprocRecorder:
    """prometheus_client's multiprocess mode, fed record by record."""

    def __init__(self, directory: str) -> None:
        import prometheus_client

        bounds = metrics.LATENCY_BOUNDS_S
        self.span = prometheus_client.Histogram(
            'instrument_span_duration_seconds',
            metrics.FAMILIES[metrics.SPAN][1],
            ['service', 'component', 'event'],
            buckets=bounds,
            registry=None,
        )
        sql_labels = ['service', 'db', 'kind', 'query']
        self.statements = prometheus_client.Counter(
            'instrument_sql_statements',
            metrics.FAMILIES[metrics.SQL_STATEMENTS][1],
            sql_labels,
            registry=None,
        )
        self.sql_seconds = prometheus_client.Counter(
            'instrument_sql_duration_seconds',
            metrics.FAMILIES[metrics.SQL_SECONDS][1],
            sql_labels,
            registry=None,
        )
        self.rows = prometheus_client.Counter(
            'instrument_sql_rows',
            metrics.FAMILIES[metrics.SQL_ROWS][1],
            sql_labels,
            registry=None,
        )
        self.lock_wait = prometheus_client.Histogram(
            'instrument_lock_wait_seconds',
            metrics.FAMILIES[metrics.LOCK_WAIT][1],
            ['service', 'lock'],
            buckets=bounds,
            registry=None,
        )
        self.lock_held = prometheus_client.Counter(
            'instrument_lock_held_seconds',
            metrics.FAMILIES[metrics.LOCK_HELD][1],
            ['service', 'lock'],
            registry=None,
        )
        self.children: dict = {}

    def fold(self, batch) -> None:
        children = self.children
        for rec in batch:
            ev = rec[6]
            dur = rec[2] / 1e6
            if ev == schema.EV_SQL_QUERY:
                attrs = rec[14]
                key = (
                    attrs[schema.ATTR_DB],
                    attrs[schema.ATTR_KIND],
                    attrs[schema.ATTR_FP],
                )
                c = children.get(key)
                if c is None:
                    labels = (SERVICE,) + key
                    c = children[key] = (
                        self.statements.labels(*labels),
                        self.sql_seconds.labels(*labels),
                        self.rows.labels(*labels),
                    )
                c[0].inc()
                c[1].inc(dur)
                rows = attrs.get(schema.ATTR_ROWS)
                if rows:
                    c[2].inc(rows)
            elif ev == schema.EV_LOCK_WAIT:
                attrs = rec[14]
                lock = metrics.lock_label(attrs.get(schema.ATTR_LOCK))
                c = children.get(lock)
                if c is None:
                    c = children[lock] = (
                        self.lock_wait.labels(SERVICE, lock),
                        self.lock_held.labels(SERVICE, lock),
                    )
                c[0].observe(dur)
                held = attrs.get(schema.ATTR_HELD_US)
                if held:
                    c[1].inc(held / 1e6)
            else:
                key = (rec[4], ev)
                c = children.get(key)
                if c is None:
                    c = children[key] = self.span.labels(SERVICE, *key)
                c.observe(dur)

    def flush(self, final: bool = False) -> None:
        """Nothing: every value is in the mmap file already."""


def recorder(design: str, directory: str):
    if design == 'multiproc':
        return MultiprocRecorder(directory)
    if design == 'statefile':
        return StateFileRecorder(directory)
    return TextfileRecorder(directory, design == 'textfile+pid')


def worker(design: str, directory: str, records: list, conn) -> None:
    """The forked worker: obeys one JSON command per line on ``conn``."""
    rec = recorder(design, directory)
    clock = time.thread_time_ns
    src = conn.makefile('r')
    for line in src:
        cmd = json.loads(line)
        if cmd['op'] == 'exit':
            start = clock()
            rec.flush(True)
            conn.sendall(
                (json.dumps({'flush_ns': clock() - start}) + '\n').encode()
            )
            os._exit(0)
        # run: fold records[start:start+count], flushing every `every`;
        # a final flush unless told to die first
        part = records[cmd['start'] : cmd['start'] + cmd['count']]
        every = cmd['every']
        fold_ns = flush_ns = flushes = flushed = 0
        for n in range(0, len(part), BATCH):
            batch = part[n : n + BATCH]
            start = clock()
            rec.fold(batch)
            fold_ns += clock() - start
            done = n + len(batch)
            if done % every == 0 and (done < len(part) or not cmd['kill']):
                start = clock()
                rec.flush()
                flush_ns += clock() - start
                flushes += 1
                flushed = done
        if design == 'multiproc':
            flushed = len(part)  # each value is in the mmap file at once
        elif not cmd['kill'] and flushed != len(part):
            start = clock()
            rec.flush()
            flush_ns += clock() - start
            flushes += 1
            flushed = len(part)
        conn.sendall(
            (
                json.dumps(
                    {
                        'fold_ns': fold_ns,
                        'flush_ns': flush_ns,
                        'flushes': flushes,
                        'folded': len(part),
                        'flushed': flushed,
                    }
                )
                + '\n'
            ).encode()
        )
        if cmd['kill']:
            os.kill(os.getpid(), signal.SIGKILL)


class Worker:
    """The parent's handle on one forked worker."""

    def __init__(self, design: str, directory: str, records: list) -> None:
        parent, child = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            parent.close()
            try:
                worker(design, directory, records, child)
            finally:
                os._exit(1)
        child.close()
        self.pid = pid
        self.conn = parent
        self.src = parent.makefile('r')

    def ask(self, **cmd) -> dict:
        self.conn.sendall((json.dumps(cmd) + '\n').encode())
        return json.loads(self.src.readline())

    def wait(self) -> int:
        return os.waitpid(self.pid, 0)[1]


# -- the scrape side --


def scrape_multiproc(directory: str) -> str:
    from prometheus_client import CollectorRegistry
    from prometheus_client import exposition
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)
    return exposition.generate_latest(registry).decode('utf-8')


def scrape_statefile(directory: str) -> str:
    from instrument.cmd import metrics as metrics_cmd

    return metrics_cmd.exposition([directory])


class TextfileCollector:
    """node_exporter's textfile collector and registry, emulated: the
    ``*.prom`` files in name order, each parsed; a metric (name and
    label values; a histogram is one metric) already collected from
    an earlier file is dropped (client_golang's Gather refuses it,
    promhttp.ContinueOnError serves the rest)."""

    def __init__(self) -> None:
        self.duplicates = 0

    def __call__(self, directory: str) -> str:
        seen: set = set()
        kept: dict = {}  # family -> [(type, help), [lines]]
        self.duplicates = 0
        for path in sorted(glob.glob(os.path.join(directory, '*.prom'))):
            with open(path, encoding='utf-8') as src:
                text = src.read()
            for family in prom_parser.text_string_to_metric_families(text):
                groups: dict = {}
                for s in family.samples:
                    labels = tuple(
                        sorted(
                            (k, v) for k, v in s.labels.items() if k != 'le'
                        )
                    )
                    groups.setdefault(labels, []).append(s)
                for labels, samples in groups.items():
                    key = (family.name, labels)
                    if key in seen:
                        self.duplicates += 1
                        continue
                    seen.add(key)
                    out = kept.setdefault(
                        family.name,
                        [(family.type, family.documentation), []],
                    )
                    for s in samples:
                        out[1].append(
                            '%s{%s} %s'
                            % (
                                s.name,
                                ','.join(
                                    '%s="%s"'
                                    % (k, metrics_sink.escape_label(v))
                                    for k, v in s.labels.items()
                                ),
                                metrics_sink.number(s.value),
                            )
                        )
        lines = []
        for name, ((kind, doc), samples) in kept.items():
            lines.append(
                '# HELP %s %s' % (name, metrics_sink.escape_help(doc))
            )
            lines.append('# TYPE %s %s' % (name, kind))
            lines.extend(samples)
        return '\n'.join(lines) + '\n'


def counts_of(text: str) -> tuple:
    """``({(sample name, label values): count}`` summed over the
    service and pid labels, label sets, repeated series)`` of an
    exposition."""
    counts: dict = {}
    label_sets: set = set()
    lines: set = set()
    repeated = 0
    for family in prom_parser.text_string_to_metric_families(text):
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k != 'le'}
            label_sets.add((family.name, tuple(sorted(labels.items()))))
            line = (s.name, tuple(sorted(s.labels.items())))
            if line in lines:
                repeated += 1
            lines.add(line)
            if s.name not in COUNTED:
                continue
            values = tuple(
                v
                for k, v in sorted(labels.items())
                if k not in ('service', 'pid')
            )
            # by label name: the truth's order (component, event; db,
            # kind, query; lock)
            key = (s.name, values)
            counts[key] = counts.get(key, 0) + int(s.value)
    return counts, len(label_sets), repeated


def compare(scraped: dict, truth: dict) -> dict:
    """Label set by label set: equal, lost (scraped < truth), double
    counted (scraped > truth); and the totals."""
    keys = set(scraped) | set(truth)
    out = {'equal': 0, 'lost': 0, 'over': 0}
    for key in keys:
        have, want = scraped.get(key, 0), truth.get(key, 0)
        out[
            'equal' if have == want else 'lost' if have < want else 'over'
        ] += 1
    out['scraped'] = sum(scraped.values())
    out['true'] = sum(truth.values())
    return out


# -- one design's run --


def run_design(design: str, args, records: list) -> dict:
    directory = (
        _PROM_DIR
        if design == 'multiproc'
        else tempfile.mkdtemp(prefix='instrument-bench-expo-')
    )
    for path in glob.glob(os.path.join(directory, '*')):
        os.unlink(path)
    collector = TextfileCollector()
    scrape = {
        'multiproc': scrape_multiproc,
        'statefile': scrape_statefile,
    }.get(design, collector)
    recorded: dict = {}
    flushed: dict = {}
    fold_ns = flush_ns = folds = flushes = 0
    scrapes = []
    n, every = args.records, args.flush_every

    def account(reply: dict, start: int) -> None:
        nonlocal fold_ns, flush_ns, folds, flushes
        fold_ns += reply['fold_ns']
        flush_ns += reply['flush_ns']
        folds += reply['folded']
        flushes += reply['flushes']
        add_into(recorded, truth_of(records[start : start + reply['folded']]))
        add_into(flushed, truth_of(records[start : start + reply['flushed']]))

    def snapshot(when: str) -> None:
        text = scrape(directory)
        counts, label_sets, repeated = counts_of(text)
        scrapes.append(
            {
                'when': when,
                'counts': counts,
                'recorded': compare(counts, recorded),
                'flushed': compare(counts, flushed),
                'label_sets': label_sets,
                'repeated': repeated,
                'duplicates_dropped': collector.duplicates,
            }
        )

    def ended(worker: Worker) -> None:
        worker.wait()
        if design == 'multiproc':
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(worker.pid, directory)

    workers = [Worker(design, directory, records) for _ in range(args.workers)]
    processes = len(workers)
    # phase 1: every worker folds the first half of the records
    for w in workers:
        account(w.ask(op='run', start=0, count=n, every=every, kill=False), 0)
    snapshot('phase 1')
    # one worker exits (a last flush), one is killed part-way through
    # a stretch (its records since the last flush are not on disk)
    leaving, killed = workers[0], workers[1 % len(workers)]
    reply = leaving.ask(op='exit')
    flush_ns += reply['flush_ns']
    flushes += 1
    ended(leaving)
    lost_on_kill = 0
    if killed is not leaving:
        part = every + every // 2
        reply = killed.ask(
            op='run', start=n, count=part, every=every, kill=True
        )
        account(reply, n)
        lost_on_kill = reply['folded'] - reply['flushed']
        ended(killed)
    replaced = [w for w in workers if w not in (leaving, killed)]
    workers = replaced + [
        Worker(design, directory, records)
        for _ in range(len(workers) - len(replaced))
    ]
    processes += len(workers) - len(replaced)
    snapshot('exit, kill, respawn')
    # phase 2: every live worker folds the second half
    for w in workers:
        account(w.ask(op='run', start=n, count=n, every=every, kill=False), n)
    snapshot('phase 2')
    for w in workers:
        reply = w.ask(op='exit')
        flush_ns += reply['flush_ns']
        flushes += 1
        ended(w)
    snapshot('all exited')
    # the scrape's cost: the final directory, --scrapes times
    times, cpu = [], []
    text = ''
    for _ in range(args.scrapes):
        t0, c0 = time.perf_counter(), time.process_time()
        text = scrape(directory)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    files = glob.glob(os.path.join(directory, '*'))
    result = {
        'design': design,
        'processes': processes,
        'files': len(files),
        'file_bytes': sum(os.path.getsize(p) for p in files),
        'fold_ns_per_record': fold_ns / max(folds, 1),
        'flush_us': flush_ns / 1000 / max(flushes, 1),
        'flushes': flushes,
        'scrape_ms': statistics.mean(times) * 1000,
        'scrape_cpu_ms': statistics.mean(cpu) * 1000,
        'scrape_bytes': len(text.encode('utf-8')),
        'lost_on_kill': lost_on_kill,
        'scrapes': scrapes,
        'went_down': went_down(scrapes),
    }
    if directory != _PROM_DIR:
        shutil.rmtree(directory, ignore_errors=True)
    return result


def went_down(scrapes: list) -> int:
    """Label sets whose count fell between two successive scrapes."""
    down = 0
    for before, after in zip(scrapes, scrapes[1:], strict=False):
        for key, value in before['counts'].items():
            if after['counts'].get(key, 0) < value:
                down += 1
    return down


# -- output --


def writer_share(r: dict, rate: int) -> float:
    """The writer's CPU share of a core at ``rate`` records per second:
    each record folded, and a flush each ``FLUSH_INTERVAL_S``."""
    flushes = 1 / FLUSH_INTERVAL_S if r['design'] != 'multiproc' else 0
    return rate * r['fold_ns_per_record'] / 1e9 + flushes * r['flush_us'] / 1e6


def _ratio(value: float, base: float) -> str:
    return '%.2fx' % (value / base) if base else '-'


def report(results: list, args) -> None:
    base = next(r for r in results if r['design'] == CHOSEN)
    print(
        'exposition designs: %d workers, %d records per worker and phase, '
        'a flush every %d records, 650 label sets; ratios to %s'
        % (args.workers, args.records, args.flush_every, CHOSEN)
    )
    print(
        '%-13s %16s %16s %17s %16s %7s'
        % (
            'design',
            'fold ns/record',
            'flush us',
            'scrape ms',
            'scrape kB',
            'series',
        )
    )
    for r in results:
        final = r['scrapes'][-1]
        print(
            '%-13s %8.0f %7s %8.0f %7s %8.1f %8s %7.0f %8s %7d'
            % (
                r['design'],
                r['fold_ns_per_record'],
                _ratio(r['fold_ns_per_record'], base['fold_ns_per_record']),
                r['flush_us'],
                _ratio(r['flush_us'], base['flush_us']),
                r['scrape_ms'],
                _ratio(r['scrape_ms'], base['scrape_ms']),
                r['scrape_bytes'] / 1000,
                _ratio(r['scrape_bytes'], base['scrape_bytes']),
                final['label_sets'],
            )
        )
    print(
        'the writer\'s CPU, share of a core, at a flush every %.1f s '
        '(when something changed): records per second' % FLUSH_INTERVAL_S
    )
    print('%-13s' % 'design' + ''.join('%10d' % rate for rate in RATES))
    for r in results:
        print(
            '%-13s' % r['design']
            + ''.join(
                '%9.2f%%' % (100 * writer_share(r, rate)) for rate in RATES
            )
        )
    print(
        'correctness (counts of spans, statements, lock waits per label '
        'set, scraped vs the truth):'
    )
    for r in results:
        print(
            '  %-13s processes %d, duplicates dropped by the collector '
            '%d, counters that went down %d, records the killed worker '
            'folded after its last flush %d'
            % (
                r['design'],
                r['processes'],
                max(s['duplicates_dropped'] for s in r['scrapes']),
                r['went_down'],
                r['lost_on_kill'],
            )
        )
        for s in r['scrapes']:
            rec, fl = s['recorded'], s['flushed']
            print(
                '    %-20s scraped %7d of %7d recorded (%d label sets '
                'equal, %d lost, %d over), of %7d flushed (%d equal, '
                '%d lost, %d over)'
                % (
                    s['when'],
                    rec['scraped'],
                    rec['true'],
                    rec['equal'],
                    rec['lost'],
                    rec['over'],
                    fl['true'],
                    fl['equal'],
                    fl['lost'],
                    fl['over'],
                )
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', type=int, default=4)
    parser.add_argument(
        '--records',
        type=int,
        default=20000,
        help='records per worker and phase (a multiple of 100)',
    )
    parser.add_argument(
        '--flush-every',
        type=int,
        default=2000,
        help='records between two flushes (a multiple of 100)',
    )
    parser.add_argument('--scrapes', type=int, default=5)
    parser.add_argument('--json', action='store_true')
    args = parser.parse_args(argv)
    if args.workers < 2:
        parser.error('--workers: at least 2 (one exits, one is killed)')
    for value in (args.records, args.flush_every):
        if value % BATCH:
            parser.error('--records, --flush-every: multiples of %d' % BATCH)
    records = stream(2 * args.records)
    try:
        results = [run_design(d, args, records) for d in DESIGNS]
    finally:
        shutil.rmtree(_PROM_DIR, ignore_errors=True)
    if args.json:
        for r in results:
            for s in r['scrapes']:
                s.pop('counts')
        json.dump(results, sys.stdout, indent=1)
        sys.stdout.write('\n')
    else:
        report(results, args)
    return 0


if __name__ == '__main__':
    sys.exit(main())
