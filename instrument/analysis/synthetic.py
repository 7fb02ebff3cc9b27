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
"""Seeded synthetic span logs of a nova cloud, and the truth behind them.

Used by the unit tests (known answers) and by ``bench/bench_report.py``
(a large log).  A ``Cloud`` has api, controller (conductor + scheduler,
two processes sharing one clock) and compute hosts, each with its own
clock skew.  Boots follow nova's path (api -> cast -> conductor -> call
-> scheduler -> cast -> compute, reschedules back through the
conductor), with injected failures (quota, NoValidHost, port binding,
spawn errors and reschedules, exhausted retries, DB deadlocks retried),
hung builds and non-boot API requests.  Records are the runtime's own
encoding (``instrument.record``), written one file per process in write
order with ``seq`` numbers; one api process writes through the ``log``
sink format into a service log.

``Truth`` holds what the analyser must find: per-host clock corrections,
per-request final states, causes and exclusive component times, SQL
class counts and totals, the failure table (with the expected
normalised messages), and the bad lines that were injected.
"""

import collections
import dataclasses
import gzip
import hashlib
import heapq
import json
import os
import random
import uuid

from instrument import record
from instrument import schema
from instrument.sink import file as file_sink

B = schema.PH_BEGIN
X = schema.PH_COMPLETE

# name: (fingerprint, kind, db, median duration in us)
SQL_CLASSES = {
    'quota_usages': ('select * from quota_usages where project_id = ? '
                     'and deleted = ?', 'SELECT', 'nova_api', 450),
    'instance_insert': ('insert into instances (uuid, host, vm_state, '
                        'project_id) values(?+)', 'INSERT', 'nova', 900),
    'bdm_insert': ('insert into block_device_mapping (instance_uuid, '
                   'source_type) values(?+)', 'INSERT', 'nova', 600),
    'build_request': ('select * from build_requests where '
                      'instance_uuid = ?', 'SELECT', 'nova_api', 350),
    'instance_mapping': ('update instance_mappings set cell_id = ? '
                         'where instance_uuid = ?', 'UPDATE', 'nova_api',
                         700),
    'quota_reserve': ('update quota_usages set in_use = ? where id = ?',
                      'UPDATE', 'nova_api', 1200),
    'compute_nodes': ('select * from compute_nodes where deleted = ?',
                      'SELECT', 'nova', 14000),
    'services': ('select * from services where binary = ? and '
                 'deleted = ?', 'SELECT', 'nova', 2500),
    'aggregates': ('select * from aggregates join aggregate_hosts on '
                   'aggregates.id = aggregate_hosts.aggregate_id',
                   'SELECT', 'nova_api', 1800),
    'instance_update': ('update instances set vm_state = ?, task_state '
                        '= ? where uuid = ?', 'UPDATE', 'nova', 1100),
    'instance_get': ('select * from instances where uuid = ?', 'SELECT',
                     'nova', 500),
    'cell0_insert': ('insert into instances (uuid, vm_state) values(?+)',
                     'INSERT', 'nova_cell0', 900),
    'compute_node_update': ('update compute_nodes set free_ram_mb = ? '
                            'where id = ?', 'UPDATE', 'nova', 300),
}

AGG_HIST_EDGES = (1, 10, 100, 1000, 10000, 100000, 1000000, 10000000)


def fingerprint_id(text: str) -> str:
    """The query id of a fingerprint: its MD5, 32 hex digits."""
    return hashlib.md5(text.encode('utf-8'),
                       usedforsecurity=False).hexdigest()


def hist_bucket(us: int) -> int:
    """Index of ``us`` in the decade buckets of ``sql.agg`` records."""
    for i, edge in enumerate(AGG_HIST_EDGES):
        if us < edge:
            return i
    return len(AGG_HIST_EDGES)


class Failure(Exception):
    """An exception raised inside a generated span."""

    def __init__(self, cls: str, msg: str, norm: str):
        super().__init__(cls, msg)
        self.cls = cls
        self.msg = msg
        self.norm = norm
        # (svc, ev) of the span it left first; the time it left the
        # innermost span that has ended so far
        self.origin = None
        self.at = None


class Hang(Exception):
    """The span never ends (no ``X`` record)."""


@dataclasses.dataclass
class RequestTruth:
    req: str
    kind: str
    start: int
    end: int = 0
    states: dict = dataclasses.field(default_factory=dict)
    causes: dict = dataclasses.field(default_factory=dict)
    stopped: dict = dataclasses.field(default_factory=dict)
    attempts: dict = dataclasses.field(default_factory=dict)
    comp: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)
    sql_in: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)

    @property
    def latency(self) -> int:
        return self.end - self.start


@dataclasses.dataclass
class Truth:
    # correction to add to each host's raw clock (minus its skew)
    offsets: dict = dataclasses.field(default_factory=dict)
    requests: dict = dataclasses.field(default_factory=dict)
    # fp: [count, sum_us, errors]
    sql: dict = dataclasses.field(default_factory=dict)
    # (svc, ev, cls, normalised message): count
    failures: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)
    # (file name, line number, kind)
    bad_lines: list = dataclasses.field(default_factory=list)
    # file name: events reported lost in sink.drops
    drops: dict = dataclasses.field(default_factory=dict)
    # file name: records missing from the seq numbering
    seq_missing: dict = dataclasses.field(default_factory=dict)
    files: list = dataclasses.field(default_factory=list)
    events: int = 0

    def states(self) -> collections.Counter:
        out = collections.Counter()
        for rt in self.requests.values():
            for state in rt.states.values():
                out[state] += 1
        return out


class Proc:
    """One recording process: its host, clock and pending records."""

    def __init__(self, cloud, host: str, svc: str, service: str, pid: int,
                 fmt: str = 'file', gz: bool = False) -> None:
        self.cloud = cloud
        self.host = host
        self.svc = svc
        self.service = service
        self.pid = pid
        self.fmt = fmt
        self.gz = gz
        self.skew = cloud.skews[host]
        self.prefix = (cloud.rng.getrandbits(31) | 1) << 32
        self.ids = 0
        self.tids = 0
        self.tid = self.new_tid()
        self.pending = []
        self.count = 0
        self.seq = 1
        self.fps = set()
        self.fh = None
        self.path = None
        self.lines = 0
        self.extra_seq_gap = 0

    def new_span(self) -> int:
        self.ids += 1
        return self.prefix | self.ids

    def new_tid(self) -> int:
        self.tids += 1
        return 139000000000000 + self.pid * 1000 + self.tids

    def raw(self, t: int) -> int:
        return t + self.skew

    def put(self, when: int, rec: tuple) -> None:
        self.count += 1
        heapq.heappush(self.pending, (when, self.count, rec))

    def fingerprint(self, when: int, name: str) -> None:
        if name in self.fps:
            return
        self.fps.add(name)
        text, kind, _db, _med = SQL_CLASSES[name]
        self.put(when, record.meta(
            'sql.fingerprint', self.host, self.svc, self.raw(when),
            {'fp': fingerprint_id(text), 'text': text, 'kind': kind}))


class Ctx:
    """The request being generated."""

    def __init__(self, req: str, insts: list, rt: RequestTruth) -> None:
        self.req = req
        self.greq = None
        self.insts = insts
        self.rt = rt

    def reach(self, t: int) -> None:
        if t > self.rt.end:
            self.rt.end = t


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


class Cloud:
    """Generates the span files of a synthetic nova cloud."""

    def __init__(self, seed: int = 1, computes: int = 6, skew_us: int =
                 3_000_000, api_hosts: int = 2, p_quota: float = 0.03,
                 p_novalidhost: float = 0.03, p_port: float = 0.03,
                 p_resched: float = 0.06, p_hang: float = 0.01,
                 p_deadlock: float = 0.04, p_multi: float = 0.05,
                 p_other: float = 0.1, max_attempts: int = 3,
                 bad_input: bool = False, gzip_computes: bool = True,
                 log_sink: bool = True) -> None:
        self.rng = random.Random(seed)
        self.p = dict(quota=p_quota, novalidhost=p_novalidhost,
                      port=p_port, resched=p_resched, hang=p_hang,
                      deadlock=p_deadlock, multi=p_multi, other=p_other)
        self.max_attempts = max_attempts
        self.bad_input = bad_input
        self.truth = Truth()
        self.skews = {}
        hosts = (['api-%d' % i for i in range(api_hosts)] + ['ctl-0'] +
                 ['cmp-%03d' % i for i in range(computes)])
        for host in hosts:
            skew = (self.rng.randint(-skew_us, skew_us) if skew_us else 0)
            self.skews[host] = skew
            self.truth.offsets[host] = -skew
        pid = iter(range(2000, 100000, 7))
        self.apis = []
        for i in range(api_hosts):
            fmt = 'log' if (log_sink and i == 1) else 'file'
            self.apis.append(Proc(self, 'api-%d' % i, 'api', 'nova-api',
                                  next(pid), fmt=fmt))
        self.conductor = Proc(self, 'ctl-0', 'conductor', 'nova-conductor',
                              next(pid))
        self.scheduler = Proc(self, 'ctl-0', 'scheduler', 'nova-scheduler',
                              next(pid))
        self.computes = [Proc(self, 'cmp-%03d' % i, 'compute',
                              'nova-compute', next(pid),
                              gz=gzip_computes and i % 2 == 1)
                         for i in range(computes)]
        self.procs = self.apis + [self.conductor, self.scheduler]
        self.procs += self.computes
        self.killed = None
        if bad_input:
            # A second api worker that is killed mid-write.
            self.killed = Proc(self, 'api-0', 'api', 'nova-api', next(pid))
            self.procs.append(self.killed)
        self.load = 1.0
        self._call_names = {}

    # -- building blocks ---------------------------------------------------

    def draw(self, median: float, sigma: float = 0.25) -> int:
        return max(1, int(self.rng.lognormvariate(0.0, sigma) * median))

    def work(self, median: float, sigma: float = 0.25) -> int:
        return self.draw(median * self.load, sigma)

    def span(self, proc: Proc, ctx: Ctx, ev: str, t: int, body: list,
             parent, inst=None, attrs=None, xattrs=None, tid=None) -> int:
        """Write one span whose body runs ``body`` items in order: an int
        is self time, a callable ``f(t, sid, proc, comp, inst, tid)``
        returns the time it finished.  Returns the span's end time."""
        sid = proc.new_span()
        tid = tid or proc.tid
        comp = schema.EVENTS.get(ev) or proc.svc
        inst = inst if inst is not None else ctx.insts
        proc.put(t, (B, proc.raw(t), None, proc.host, proc.svc, tid, ev, sid,
                     parent, ctx.req, ctx.greq, inst, None, None, attrs))
        ctx.reach(t)
        self._call_names[sid] = ev
        cur = t
        try:
            for item in body:
                if item.__class__ is int:
                    ctx.rt.comp[comp] += item
                    cur += item
                else:
                    cur = item(cur, sid, proc, comp, inst, tid)
        except Failure as exc:
            cur = max(cur, exc.at or cur)
            if exc.origin is None:
                exc.origin = (proc.svc, ev)
            exc.at = cur
            proc.put(cur, self._x(proc, ctx, ev, t, cur, sid, parent, inst,
                                  tid, 'error', (exc.cls, exc.msg), attrs,
                                  xattrs))
            ctx.reach(cur)
            raise
        finally:
            del self._call_names[sid]
        proc.put(cur, self._x(proc, ctx, ev, t, cur, sid, parent, inst, tid,
                              'ok', None, attrs, xattrs))
        ctx.reach(cur)
        return cur

    @staticmethod
    def _x(proc, ctx, ev, t, end, sid, parent, inst, tid, st, err, attrs,
           xattrs):
        if xattrs:
            attrs = dict(attrs or {})
            attrs.update(xattrs)
        return (X, proc.raw(t), end - t, proc.host, proc.svc, tid, ev, sid,
                parent, ctx.req, ctx.greq, inst, st, err, attrs)

    def sub(self, ctx: Ctx, ev: str, body: list, attrs=None, xattrs=None,
            inst=None):
        """A child span of the same process and thread."""
        def run(t, sid, proc, comp, pinst, tid):
            return self.span(proc, ctx, ev, t, body, sid,
                             inst=inst if inst is not None else pinst,
                             attrs=attrs, xattrs=xattrs, tid=tid)
        return run

    def caught(self, exc: Failure) -> None:
        """A failure handled by nova: one row of the failure table."""
        svc, ev = exc.origin
        self.truth.failures[(svc, ev, exc.cls, exc.norm)] += 1

    def sql(self, ctx: Ctx, name: str, deadlock: bool = False):
        """One statement (``deadlock``: first fails, is retried)."""
        def run(t, sid, proc, comp, inst, tid):
            cur = t
            if deadlock:
                cur = self._sql_record(ctx, proc, name, cur, sid, comp,
                                       inst, tid, error=True)
                self.truth.failures[(proc.svc, 'sql.query',
                                     'oslo_db.exception.DBDeadlock',
                                     DEADLOCK_NORM)] += 1
                proc.put(cur, (schema.PH_INSTANT, proc.raw(cur), None,
                               proc.host, proc.svc, tid, 'db.retry', None,
                               sid, ctx.req, ctx.greq, inst, None, None,
                               {'attempt': 1, 'func': 'quota_reserve',
                                'cls': 'oslo_db.exception.DBDeadlock',
                                'exhausted': False}))
                gap = self.draw(500)
                ctx.rt.comp[comp] += gap
                cur += gap
            return self._sql_record(ctx, proc, name, cur, sid, comp, inst,
                                    tid)
        return run

    def _sql_record(self, ctx, proc, name, t, parent, comp, inst, tid,
                    error=False) -> int:
        text, kind, db, median = SQL_CLASSES[name]
        fp = fingerprint_id(text)
        proc.fingerprint(t, name)
        dur = self.draw(median * self.load, 0.5)
        err = None
        st = 'ok'
        if error:
            st = 'error'
            err = ('oslo_db.exception.DBDeadlock',
                   "(pymysql.err.OperationalError) (1213, 'Deadlock found "
                   "when trying to get lock; try restarting transaction')")
        attrs = {'fp': fp, 'db': db, 'kind': kind,
                 'call': self._call_names.get(parent)}
        if kind == 'SELECT':
            attrs['rows'] = 1
        proc.put(t + dur, (X, proc.raw(t), dur, proc.host, proc.svc, tid,
                           'sql.query', proc.new_span(), parent, ctx.req,
                           ctx.greq, inst, st, err, attrs))
        ctx.rt.sql_in[comp] += dur
        stats = self.truth.sql.setdefault(fp, [0, 0, 0])
        stats[0] += 1
        stats[1] += dur
        stats[2] += error
        ctx.reach(t + dur)
        return t + dur

    def call(self, ctx: Ctx, dst: Proc, method: str, topic: str,
             remote_body: list):
        """An ``rpc.call``: the caller waits for the remote dispatch."""
        def run(t, sid, proc, comp, inst, tid):
            net1 = self.rng.randint(80, 300)
            net2 = self.rng.randint(80, 300)

            def remote(t2, call_sid, proc2, comp2, inst2, tid2):
                ctx.rt.comp['rpc'] += net1 + net2
                try:
                    end = self.dispatch(ctx, dst, t2 + net1, call_sid,
                                        method, topic, remote_body,
                                        inst=inst2)
                except Failure as exc:
                    exc.at += net2
                    raise
                return end + net2
            return self.span(proc, ctx, 'rpc.call', t,
                             [self.draw(150), remote], sid, inst=inst,
                             tid=tid, attrs={'method': method,
                                             'topic': topic,
                                             'server': dst.host})
        return run

    def cast(self, ctx: Ctx, dst: Proc, method: str, topic: str, remote):
        """An ``rpc.cast``: ``remote(t, cast_sid)`` runs on ``dst``."""
        def run(t, sid, proc, comp, inst, tid):
            send = self.draw(200)
            net = self.rng.randint(80, 300)
            queue = int(self.rng.expovariate(1.0 / (1500 * self.load)))
            holder = []

            def send_item(t2, cast_sid, proc2, comp2, inst2, tid2):
                holder.append(cast_sid)
                ctx.rt.comp['rpc'] += send
                return t2 + send
            end = self.span(proc, ctx, 'rpc.cast', t, [send_item], sid,
                            inst=inst, tid=tid,
                            attrs={'method': method, 'topic': topic})
            ctx.rt.comp['rpc.queue'] += net + queue
            try:
                remote(end + net + queue, holder[0])
            except (Failure, Hang):
                pass
            return end
        return run

    def dispatch(self, ctx: Ctx, dst: Proc, t: int, parent: int, method: str,
                 topic: str, body: list, inst=None) -> int:
        return self.span(dst, ctx, 'rpc.dispatch', t, [self.draw(80)] + body,
                         parent, inst=inst, tid=dst.new_tid(),
                         attrs={'method': method, 'topic': topic})

    # -- the boot path -----------------------------------------------------

    def boot(self, t0: int) -> None:
        rng = self.rng
        req = 'req-' + _uuid(rng)
        count = 2 if rng.random() < self.p['multi'] else 1
        insts = [_uuid(rng) for _ in range(count)]
        rt = RequestTruth(req=req, kind='boot', start=t0)
        self.truth.requests[req] = rt
        ctx = Ctx(req, insts, rt)
        api = rng.choice(self.apis)
        if self.killed is not None and rng.random() < 0.05:
            api = self.killed
        quota = rng.random() < self.p['quota']
        status = {'status': 202}
        body = [self.work(600), self.sql(ctx, 'quota_usages'),
                self.sql(ctx, 'quota_usages')]
        if quota:
            used = rng.randint(10, 40)

            def fail(*_args):
                raise Failure(
                    'nova.exception.QuotaError',
                    'Quota exceeded for instances: Requested %d, but '
                    'already used %d of %d instances' % (count, used, used),
                    'Quota exceeded for instances: Requested <n>, but '
                    'already used <n> of <n> instances')
            body += [self.work(100), fail]
            ctx.insts = []
            rt.states = {None: 'api_failure'}
            rt.causes = {None: 'nova.exception.QuotaError'}
        else:
            body += [self.sql(ctx, 'instance_insert'),
                     self.sql(ctx, 'bdm_insert'), self.work(300),
                     self.cast(ctx, self.conductor,
                               'schedule_and_build_instances', 'conductor',
                               lambda t, sid: self.conductor_build(
                                   ctx, t, sid, 1, insts, set())),
                     self.work(150)]

        def create(t, sid, proc, comp, inst, tid):
            try:
                return self.span(proc, ctx, 'api.compute.create', t, body,
                                 sid, xattrs={'count': count}, tid=tid)
            except Failure as exc:
                status['status'] = 403
                self.caught(exc)
                return exc.at

        self.span(api, ctx, 'api.request', t0,
                  [self.work(300), create, self.work(200)], None,
                  inst=[], attrs={'method': 'POST', 'route': '/servers'},
                  xattrs=status)

    def conductor_build(self, ctx: Ctx, t: int, parent: int, attempt: int,
                        insts: list, tried: set) -> None:
        rng = self.rng
        rt = ctx.rt
        novalid = attempt == 1 and rng.random() < self.p['novalidhost']
        exhausted = attempt > self.max_attempts
        selected = []
        failed = []

        def select(t2, sid, proc, comp, inst, tid):
            if exhausted:
                raise Failure(
                    'nova.exception.MaxRetriesExceeded',
                    'Exceeded maximum number of retries. Exhausted all '
                    'hosts available for retrying build failures for '
                    'instance %s.' % insts[0],
                    'Exceeded maximum number of retries. Exhausted all '
                    'hosts available for retrying build failures for '
                    'instance <uuid>.')
            return self.call(ctx, self.scheduler, 'select_destinations',
                             'scheduler', self.scheduler_body(
                                 ctx, insts, novalid, selected, tried,
                                 attempt))(t2, sid, proc, comp, inst, tid)

        schedule = self.sub(ctx, 'conductor.schedule',
                            [self.work(150), select],
                            xattrs={'selected': selected})

        def schedule_guarded(t2, sid, proc, comp, inst, tid):
            try:
                return schedule(t2, sid, proc, comp, inst, tid)
            except Failure as exc:
                failed.append(exc)
                for i in insts:
                    rt.states[i] = 'scheduling_failure'
                    rt.causes[i] = exc.cls
                self.caught(exc)
                rt.comp[comp] += 50
                return self.span(
                    proc, ctx, 'conductor.bury_in_cell0', exc.at + 50,
                    [self.work(200), self.sql(ctx, 'cell0_insert')], sid,
                    attrs={'reason': exc.cls}, tid=tid)

        def builds(t2, sid, proc, comp, inst, tid):
            cur = t2
            if failed:
                return cur
            for i, host in zip(insts, selected, strict=True):
                dst = next(c for c in self.computes if c.host == host)
                cur = self.sql(ctx, 'instance_mapping')(cur, sid, proc,
                                                        comp, [i], tid)
                cur = self.cast(ctx, dst, 'build_and_run_instance',
                                'compute', lambda t3, csid, i=i, dst=dst:
                                self.compute_build(ctx, dst, t3, csid, i,
                                                   attempt, tried))(
                    cur, sid, proc, comp, [i], tid)
            return cur

        deadlock = rng.random() < self.p['deadlock']
        if attempt == 1:
            body = [self.work(400), self.sql(ctx, 'build_request'),
                    self.sql(ctx, 'quota_reserve', deadlock=deadlock),
                    schedule_guarded, builds, self.work(100)]
            ev = 'conductor.schedule_and_build_instances'
            attrs = {'count': len(insts)}
            method = 'schedule_and_build_instances'
        else:
            body = [self.work(300), self.sql(ctx, 'instance_get'),
                    schedule_guarded, builds, self.work(100)]
            ev = 'conductor.build_instances'
            attrs = {'attempt': attempt}
            method = 'build_instances'
        self.dispatch(ctx, self.conductor, t, parent, method, 'conductor',
                      [self.sub(ctx, ev, body, attrs=attrs)], inst=insts)

    def scheduler_body(self, ctx: Ctx, insts: list, novalid: bool,
                       selected: list, tried: set, attempt: int) -> list:
        rng = self.rng
        n_hosts = len(self.computes)

        def choose(t, sid, proc, comp, inst, tid):
            if novalid:
                raise Failure(
                    'nova.exception.NoValidHost',
                    'No valid host was found. There are not enough hosts '
                    'available.',
                    'No valid host was found. There are not enough hosts '
                    'available.')
            free = [c.host for c in self.computes if c.host not in tried]
            if len(free) < len(insts):
                free = [c.host for c in self.computes]
            selected[:] = rng.sample(free, len(insts))
            return self.span(proc, ctx, 'scheduler.claim', t,
                             [self.work(6000)], sid,
                             attrs={'host': selected[0]}, tid=tid)

        select = [self.work(300),
                  self.sub(ctx, 'scheduler.host_states',
                           [self.work(2500), self.sql(ctx, 'compute_nodes'),
                            self.sql(ctx, 'services'),
                            self.sql(ctx, 'aggregates')],
                           xattrs={'count': n_hosts}),
                  self.sub(ctx, 'scheduler.placement.candidates',
                           [self.work(15000)], xattrs={'count': n_hosts}),
                  self.sub(ctx, 'scheduler.filter', [self.work(3000)],
                           xattrs={'count': n_hosts}),
                  self.sub(ctx, 'scheduler.weigh', [self.work(1000)]),
                  choose, self.work(200)]
        return [self.sub(ctx, 'scheduler.select_destinations', select,
                         attrs={'attempt': attempt},
                         xattrs={'selected': selected})]

    def compute_build(self, ctx: Ctx, dst: Proc, t: int, parent: int,
                      inst: str, attempt: int, tried: set) -> None:
        rng = self.rng
        rt = ctx.rt
        tried = set(tried) | {dst.host}
        rt.attempts[inst] = attempt
        holder = {}

        def bari(t2, sid, proc, comp, inst_, tid):
            # build_and_run_instance hands the build to a thread and
            # returns at once; the build's parent is this span.
            holder['sid'] = proc.new_span()
            proc.put(t2, (B, proc.raw(t2), None, proc.host, proc.svc, tid,
                          'compute.build_and_run_instance', holder['sid'],
                          sid, ctx.req, ctx.greq, [inst], None, None, None))
            dur = self.work(400)
            rt.comp['compute'] += dur
            proc.put(t2 + dur, (X, proc.raw(t2), dur, proc.host, proc.svc,
                                tid, 'compute.build_and_run_instance',
                                holder['sid'], sid, ctx.req, ctx.greq,
                                [inst], 'ok', None, None))
            return t2 + dur
        end = self.dispatch(ctx, dst, t, parent, 'build_and_run_instance',
                            'compute', [bari], inst=[inst])
        hang = rng.random() < self.p['hang']
        port = not hang and rng.random() < self.p['port']
        resched = (not hang and not port and
                   rng.random() < self.p['resched'] *
                   (4 if attempt > 1 else 1))
        outcome = {'outcome': 'active'}

        def spawn(t2, sid, proc, comp, inst_, tid):
            if hang:
                proc.put(t2, (B, proc.raw(t2), None, proc.host, proc.svc,
                              tid, 'compute.spawn', proc.new_span(), sid,
                              ctx.req, ctx.greq, [inst], None, None, None))
                ctx.reach(t2)
                rt.stopped[inst] = ('compute.spawn', proc.host)
                raise Hang()
            body = [self.work(8_000_000, 0.2)]
            if resched:
                body = [self.work(2_000_000), self._fail_spawn()]
            return self.span(proc, ctx, 'compute.spawn', t2, body, sid,
                             inst=[inst], tid=tid)

        net_body = [self.work(2_500_000, 0.3)]
        if port:
            port_id = _uuid(rng)

            def fail(*_args):
                raise Failure(
                    'nova.exception.PortBindingFailed',
                    'Binding failed for port %s, please check neutron '
                    'logs for more information.' % port_id,
                    'Binding failed for port <uuid>, please check '
                    'neutron logs for more information.')
            net_body = [self.work(1_500_000), fail]

        save = self.call(ctx, self.conductor, 'object_action', 'conductor',
                         [self.sub(ctx, 'conductor.object_action',
                                   [self.work(200),
                                    self.sql(ctx, 'instance_update')])])
        bar_body = [self.work(500),
                    self.sub(ctx, 'compute.claim',
                             [self.work(1500), self.sql(ctx, 'instance_get'),
                              self.sql(ctx, 'instance_update')]),
                    save, self.sub(ctx, 'compute.network', net_body),
                    self.sub(ctx, 'compute.block_device',
                             [self.work(150_000)]),
                    spawn, save, self.work(300)]

        def bar(t2, sid, proc, comp, inst_, tid):
            try:
                return self.span(proc, ctx, 'compute.build_and_run', t2,
                                 bar_body, sid, inst=[inst], tid=tid)
            except Failure as exc:
                self.caught(exc)
                if exc.cls == 'libvirt.libvirtError':
                    outcome['outcome'] = 'rescheduled'
                else:
                    outcome['outcome'] = 'failed'
                    rt.states[inst] = 'compute_failure'
                    rt.causes[inst] = exc.cls
                return exc.at

        def after(t2, sid, proc, comp, inst_, tid):
            if outcome['outcome'] != 'rescheduled':
                return t2
            return self.cast(
                ctx, self.conductor, 'build_instances', 'conductor',
                lambda t3, csid: self.conductor_build(
                    ctx, t3, csid, attempt + 1, [inst], tried))(
                t2, sid, proc, comp, [inst], tid)

        try:
            self.span(dst, ctx, 'compute.build', end + 100,
                      [self.work(300), bar, after], holder['sid'],
                      inst=[inst], xattrs=outcome, tid=dst.new_tid())
        except Hang:
            rt.states[inst] = 'incomplete'
            rt.causes[inst] = None
            return
        if outcome['outcome'] == 'active':
            rt.states[inst] = ('success' if attempt == 1
                               else 'rescheduled_success')
            rt.causes[inst] = None

    def _fail_spawn(self):
        def fail(*_args):
            code = self.rng.randint(100, 999)
            raise Failure(
                'libvirt.libvirtError',
                'internal error: qemu unexpectedly closed the monitor: '
                'cannot set up guest memory: Cannot allocate memory '
                '(%d)' % code,
                'internal error: qemu unexpectedly closed the monitor: '
                'cannot set up guest memory: Cannot allocate memory '
                '(<n>)')
        return fail

    # -- other API requests ------------------------------------------------

    def other(self, t0: int) -> None:
        rng = self.rng
        req = 'req-' + _uuid(rng)
        inst = _uuid(rng)
        rt = RequestTruth(req=req, kind='other', start=t0)
        rt.states = {None: 'other'}
        rt.causes = {None: None}
        self.truth.requests[req] = rt
        ctx = Ctx(req, [inst], rt)
        api = rng.choice(self.apis)
        dst = rng.choice(self.computes)
        if rng.random() < 0.5:
            body = [self.work(300), self.sql(ctx, 'instance_get'),
                    self.work(200)]
            attrs = {'method': 'GET', 'route': '/servers/{id}'}
        else:
            body = [self.work(300), self.sql(ctx, 'instance_get'),
                    self.call(ctx, dst, 'get_vnc_console', 'compute',
                              [self.work(3000)]),
                    self.work(200)]
            attrs = {'method': 'POST', 'route': '/servers/{id}/action'}
        self.span(api, ctx, 'api.request', t0, body, None, inst=[inst],
                  attrs=attrs, xattrs={'status': 200})

    # -- periodic work without a request ------------------------------------

    def periodic_agg(self, proc: Proc, t: int, interval_s: int) -> None:
        text, kind, db, median = SQL_CLASSES['compute_node_update']
        fp = fingerprint_id(text)
        proc.fingerprint(t, 'compute_node_update')
        n = self.rng.randint(3, 12)
        durs = [self.draw(median, 0.3) for _ in range(n)]
        hist = [0] * (len(AGG_HIST_EDGES) + 1)
        for d in durs:
            hist[hist_bucket(d)] += 1
        proc.put(t + interval_s * 1_000_000, record.counter(
            'sql.agg', proc.host, proc.svc, proc.raw(t), {
                'fp': fp, 'db': db, 'kind': kind,
                'call': 'compute.update_available_resource', 'count': n,
                'errors': 0, 'sum_us': sum(durs), 'min_us': min(durs),
                'max_us': max(durs), 'sumsq_us': sum(d * d for d in durs),
                'rows': n, 'hist': hist, 'interval_s': interval_s}))
        stats = self.truth.sql.setdefault(fp, [0, 0, 0])
        stats[0] += n
        stats[1] += sum(durs)

    # -- driving and writing -----------------------------------------------

    def generate(self, directory: str, requests: int = 200,
                 rate: float = 4.0, phases: int = 4,
                 start_us: int = 1_700_000_000_000_000) -> Truth:
        """Write the span files of ``requests`` requests into
        ``directory``; arrivals are Poisson, ``rate`` per second in the
        first phase, doubling each phase (rising concurrency)."""
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        t = start_us
        for proc in self.procs:
            self._open(proc, start_us - 1_000_000)
        per_phase = max(1, requests // phases)
        next_agg = start_us
        done = 0
        for n in range(requests):
            phase = min(phases - 1, n // per_phase)
            self.load = 1.0 + 0.25 * phase
            t += int(self.rng.expovariate(rate * (2 ** phase)) * 1e6) + 1
            while next_agg <= t:
                for proc in self.computes:
                    self.periodic_agg(proc, next_agg, 60)
                next_agg += 60_000_000
            if self.rng.random() < self.p['other']:
                self.other(t)
            else:
                self.boot(t)
            done += 1
            if done % 200 == 0:
                self._flush(t - 600_000_000)
        self._finish(t)
        return self.truth

    def _open(self, proc: Proc, t: int) -> None:
        started = (t + proc.skew) / 1e6
        name = file_sink.file_name(proc.host, proc.service, proc.pid,
                                   started)
        if proc.fmt == 'log':
            name = '%s_%s_%d.log' % (proc.host, proc.service, proc.pid)
        if proc.gz:
            name += '.gz'
        proc.path = os.path.join(self.directory, name)
        proc.fh = (gzip.open(proc.path, 'wt', encoding='utf-8')
                   if proc.gz else open(proc.path, 'w', encoding='utf-8'))
        self.truth.files.append(name)
        proc.put(t, record.meta('process.start', proc.host, proc.svc,
                                proc.raw(t), {
                                    'service': proc.service,
                                    'version': 'synthetic',
                                    'mode': 'threads', 'points': {
                                        'patched': [], 'pending': [],
                                        'missing': [], 'failed': []}}))

    _dumps = json.JSONEncoder(separators=(',', ':'), ensure_ascii=False,
                              default=str).encode

    def _write_line(self, proc: Proc, text: str, kind=None) -> None:
        if proc.fmt == 'log':
            if proc.lines % 3 == 0:
                proc.fh.write('2023-11-14 22:13:20.000 %d INFO '
                              'nova.api.openstack.requestlog [-] GET '
                              '/v2.1/servers status: 200\n' % proc.pid)
                proc.lines += 1
            text = ('2023-11-14 22:13:20.000 %d INFO instrument.spans [-] '
                    '%s' % (proc.pid, text))
        proc.fh.write(text + '\n')
        proc.lines += 1
        if kind:
            self.truth.bad_lines.append((os.path.basename(proc.path),
                                         proc.lines, kind))

    def _flush(self, until: int) -> None:
        for proc in self.procs:
            pending = proc.pending
            while pending and pending[0][0] <= until:
                _when, _n, rec = heapq.heappop(pending)
                self._emit(proc, rec)

    def _emit(self, proc: Proc, rec: tuple) -> None:
        data = record.to_dict(rec, proc.seq, proc.pid)
        proc.seq += 1
        text = self._dumps(data)
        self.truth.events += 1
        self._write_line(proc, text)
        if not self.bad_input or proc is not self.conductor:
            return
        # Bad input, injected around known records of the conductor.
        if data['seq'] == 40:
            self._write_line(proc, text, 'duplicate')
        elif data['seq'] == 60:
            self._write_line(proc, '{"v":1,"ph":"X","seq":', 'malformed')
        elif data['seq'] == 80:
            bad = dict(data, v=2)
            self._write_line(proc, self._dumps(bad), 'unknown_version')
        elif data['seq'] == 100:
            bad = dict(data)
            del bad['host']
            self._write_line(proc, self._dumps(bad), 'invalid')
        elif data['seq'] == 120:
            proc.seq += 5
            self.truth.seq_missing[os.path.basename(proc.path)] = 5

    def _finish(self, t: int) -> None:
        # sink.drops from one compute: events lost in its buffer
        proc = self.computes[0]
        proc.put(t + 3_600_000_000, record.counter(
            'sink.drops', proc.host, proc.svc, proc.raw(t + 3_600_000_000),
            {'buffer_full': 7, 'file': 0}))
        self.truth.drops[os.path.basename(proc.path)] = 7
        self._flush(1 << 62)
        for proc in self.procs:
            if proc is self.killed:
                # killed mid-write: the last line is cut short
                text = self._dumps(record.to_dict(record.meta(
                    'process.points', proc.host, proc.svc, proc.raw(t),
                    {'patched': ['x'], 'missing': []}), proc.seq, proc.pid))
                proc.fh.write(text[:len(text) // 2])
                proc.lines += 1
                self.truth.bad_lines.append((os.path.basename(proc.path),
                                             proc.lines, 'truncated'))
            proc.fh.close()


DEADLOCK_NORM = ("(pymysql.err.OperationalError) (<n>, 'Deadlock found "
                 "when trying to get lock; try restarting transaction')")


def generate(directory: str, seed: int = 1, requests: int = 200,
             rate: float = 4.0, **kwargs) -> Truth:
    """Write a synthetic cloud's span files; return the truth."""
    return Cloud(seed=seed, **kwargs).generate(directory, requests=requests,
                                               rate=rate)
