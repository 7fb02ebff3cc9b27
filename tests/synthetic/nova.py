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
"""nova's requests in the synthetic cloud, with their injected faults.

A boot follows nova's path: api (``api.request``, ``api.compute.create``)
-> cast -> conductor (``schedule_and_build_instances``) -> call ->
scheduler (``select_destinations``) -> cast -> compute
(``build_and_run_instance``, the build in a thread of its own), and a
reschedule goes back through the conductor (``build_instances``).  The
faults are drawn with the cloud's probabilities: quota exceeded at the
API, NoValidHost, port binding and spawn failures, reschedules (up to
``max_attempts``, then MaxRetriesExceeded), hung spawns, DB deadlocks
that oslo.db retries.  Each outcome is written into the truth as it is
decided.  Other API requests (a GET, a console action) and the
computes' periodic ``sql.agg`` records complete the load.
"""

from instrument import schema
from instrument.runtime import record
from tests.synthetic import procs
from tests.synthetic import spans
from tests.synthetic import statements
from tests.synthetic import truth

B = schema.PH_BEGIN
X = schema.PH_COMPLETE


class NovaRequests:
    """Writes nova's requests into a ``Cloud``'s processes."""

    def __init__(self, cloud, primitives: spans.Spans) -> None:
        self.cloud = cloud
        self.rng = cloud.rng
        self.p = cloud.p
        self.truth = cloud.truth
        # the span primitives, by their short names
        self.span = primitives.span
        self.sub = primitives.sub
        self.sql = primitives.sql
        self.call = primitives.call
        self.cast = primitives.cast
        self.dispatch = primitives.dispatch
        self.caught = primitives.caught

    def work(self, median: float, sigma: float = 0.25) -> int:
        """Work of a service, slower as the load rises (``Cloud.work``)."""
        return self.cloud.work(median, sigma)

    # -- the boot path -----------------------------------------------------

    def boot(self, t0: int) -> None:
        rng = self.rng
        req = 'req-' + procs.new_uuid(rng)
        count = 2 if rng.random() < self.p['multi'] else 1
        insts = [procs.new_uuid(rng) for _ in range(count)]
        rt = truth.RequestTruth(req=req, kind='boot', start=t0)
        self.truth.requests[req] = rt
        ctx = procs.Ctx(req, insts, rt)
        api = rng.choice(self.cloud.apis)
        if self.cloud.killed is not None and rng.random() < 0.05:
            api = self.cloud.killed
        quota = rng.random() < self.p['quota']
        status = {'status': 202}
        body = [
            self.work(600),
            self.sql(ctx, 'quota_usages'),
            self.sql(ctx, 'quota_usages'),
        ]
        if quota:
            used = rng.randint(10, 40)

            def fail(*_args):
                raise spans.Failure(
                    'nova.exception.QuotaError',
                    'Quota exceeded for instances: Requested %d, but '
                    'already used %d of %d instances' % (count, used, used),
                    'Quota exceeded for instances: Requested <n>, but '
                    'already used <n> of <n> instances',
                )

            body += [self.work(100), fail]
            ctx.insts = []
            rt.states = {None: 'api_failure'}
            rt.causes = {None: 'nova.exception.QuotaError'}
        else:
            body += [
                self.sql(ctx, 'instance_insert'),
                self.sql(ctx, 'bdm_insert'),
                self.work(300),
                self.cast(
                    ctx,
                    self.cloud.conductor,
                    'schedule_and_build_instances',
                    'conductor',
                    lambda t, sid: self.conductor_build(
                        ctx, t, sid, 1, insts, set()
                    ),
                ),
                self.work(150),
            ]

        def create(t, sid, proc, comp, inst, tid):
            try:
                return self.span(
                    proc,
                    ctx,
                    'api.compute.create',
                    t,
                    body,
                    sid,
                    xattrs={'count': count},
                    tid=tid,
                )
            except spans.Failure as exc:
                status['status'] = 403
                self.caught(exc)
                return exc.at

        self.span(
            api,
            ctx,
            'api.request',
            t0,
            [self.work(300), create, self.work(200)],
            None,
            inst=[],
            attrs={'method': 'POST', 'route': '/servers'},
            xattrs=status,
        )

    def conductor_build(
        self,
        ctx: procs.Ctx,
        t: int,
        parent: int,
        attempt: int,
        insts: list,
        tried: set,
    ) -> None:
        rng = self.rng
        rt = ctx.rt
        novalid = attempt == 1 and rng.random() < self.p['novalidhost']
        exhausted = attempt > self.cloud.max_attempts
        selected = []
        failed = []

        def select(t2, sid, proc, comp, inst, tid):
            if exhausted:
                raise spans.Failure(
                    'nova.exception.MaxRetriesExceeded',
                    'Exceeded maximum number of retries. Exhausted all '
                    'hosts available for retrying build failures for '
                    'instance %s.' % insts[0],
                    'Exceeded maximum number of retries. Exhausted all '
                    'hosts available for retrying build failures for '
                    'instance <uuid>.',
                )
            return self.call(
                ctx,
                self.cloud.scheduler,
                'select_destinations',
                'scheduler',
                self.scheduler_body(
                    ctx, insts, novalid, selected, tried, attempt
                ),
            )(t2, sid, proc, comp, inst, tid)

        schedule = self.sub(
            ctx,
            'conductor.schedule',
            [self.work(150), select],
            xattrs={'selected': selected},
        )

        def schedule_guarded(t2, sid, proc, comp, inst, tid):
            try:
                return schedule(t2, sid, proc, comp, inst, tid)
            except spans.Failure as exc:
                failed.append(exc)
                for i in insts:
                    rt.states[i] = 'scheduling_failure'
                    rt.causes[i] = exc.cls
                self.caught(exc)
                rt.comp[comp] += 50
                return self.span(
                    proc,
                    ctx,
                    'conductor.bury_in_cell0',
                    exc.at + 50,
                    [self.work(200), self.sql(ctx, 'cell0_insert')],
                    sid,
                    inst=insts,
                    attrs={'reason': exc.cls},
                    tid=tid,
                )

        def builds(t2, sid, proc, comp, inst, tid):
            cur = t2
            if failed:
                return cur
            for i, host in zip(insts, selected, strict=True):
                dst = next(c for c in self.cloud.computes if c.host == host)
                cur = self.sql(ctx, 'instance_mapping')(
                    cur, sid, proc, comp, [i], tid
                )
                cur = self.cast(
                    ctx,
                    dst,
                    'build_and_run_instance',
                    'compute',
                    lambda t3, csid, i=i, dst=dst: self.compute_build(
                        ctx, dst, t3, csid, i, attempt, tried
                    ),
                )(cur, sid, proc, comp, [i], tid)
            return cur

        deadlock = rng.random() < self.p['deadlock']
        if attempt == 1:
            body = [
                self.work(400),
                self.sql(ctx, 'build_request'),
                self.sql(ctx, 'quota_reserve', deadlock=deadlock),
                schedule_guarded,
                builds,
                self.work(100),
            ]
            ev = 'conductor.schedule_and_build_instances'
            attrs = {'count': len(insts)}
            method = 'schedule_and_build_instances'
        else:
            body = [
                self.work(300),
                self.sql(ctx, 'instance_get'),
                schedule_guarded,
                builds,
                self.work(100),
            ]
            ev = 'conductor.build_instances'
            attrs = {'attempt': attempt}
            method = 'build_instances'
        self.dispatch(
            ctx,
            self.cloud.conductor,
            t,
            parent,
            method,
            'conductor',
            [self.sub(ctx, ev, body, attrs=attrs)],
            inst=insts,
        )

    def scheduler_body(
        self,
        ctx: procs.Ctx,
        insts: list,
        novalid: bool,
        selected: list,
        tried: set,
        attempt: int,
    ) -> list:
        rng = self.rng
        n_hosts = len(self.cloud.computes)

        def choose(t, sid, proc, comp, inst, tid):
            if novalid:
                raise spans.Failure(
                    'nova.exception.NoValidHost',
                    'No valid host was found. There are not enough hosts '
                    'available.',
                    'No valid host was found. There are not enough hosts '
                    'available.',
                )
            free = [c.host for c in self.cloud.computes if c.host not in tried]
            if len(free) < len(insts):
                free = [c.host for c in self.cloud.computes]
            selected[:] = rng.sample(free, len(insts))
            return self.span(
                proc,
                ctx,
                'scheduler.claim',
                t,
                [self.work(6000)],
                sid,
                inst=insts,
                attrs={'host': selected[0]},
                tid=tid,
            )

        select = [
            self.work(300),
            self.sub(
                ctx,
                'scheduler.host_states',
                [
                    self.work(2500),
                    self.sql(ctx, 'compute_nodes'),
                    self.sql(ctx, 'services'),
                    self.sql(ctx, 'aggregates'),
                ],
                xattrs={'count': n_hosts},
            ),
            self.sub(
                ctx,
                'scheduler.placement.candidates',
                [self.work(15000)],
                xattrs={'count': n_hosts},
            ),
            self.sub(
                ctx,
                'scheduler.filter',
                [self.work(3000)],
                xattrs={'count': n_hosts},
            ),
            self.sub(ctx, 'scheduler.weigh', [self.work(1000)]),
            choose,
            self.work(200),
        ]
        return [
            self.sub(
                ctx,
                'scheduler.select_destinations',
                select,
                attrs={'attempt': attempt},
                xattrs={'selected': selected},
            )
        ]

    def compute_build(
        self,
        ctx: procs.Ctx,
        dst: procs.Proc,
        t: int,
        parent: int,
        inst: str,
        attempt: int,
        tried: set,
    ) -> None:
        rng = self.rng
        rt = ctx.rt
        tried = set(tried) | {dst.host}
        rt.attempts[inst] = attempt
        holder = {}

        def bari(t2, sid, proc, comp, inst_, tid):
            # build_and_run_instance hands the build to a thread and
            # returns at once; the build's parent is this span.
            holder['sid'] = proc.new_span()
            proc.put(
                t2,
                (
                    B,
                    proc.raw(t2),
                    None,
                    proc.host,
                    proc.svc,
                    tid,
                    'compute.build_and_run_instance',
                    holder['sid'],
                    sid,
                    ctx.req,
                    ctx.greq,
                    [inst],
                    None,
                    None,
                    None,
                ),
            )
            dur = self.work(400)
            rt.comp['compute'] += dur
            proc.put(
                t2 + dur,
                (
                    X,
                    proc.raw(t2),
                    dur,
                    proc.host,
                    proc.svc,
                    tid,
                    'compute.build_and_run_instance',
                    holder['sid'],
                    sid,
                    ctx.req,
                    ctx.greq,
                    [inst],
                    'ok',
                    None,
                    None,
                ),
            )
            return t2 + dur

        end = self.dispatch(
            ctx,
            dst,
            t,
            parent,
            'build_and_run_instance',
            'compute',
            [bari],
            inst=[inst],
        )
        hang = rng.random() < self.p['hang']
        port = not hang and rng.random() < self.p['port']
        resched = (
            not hang
            and not port
            and rng.random() < self.p['resched'] * (4 if attempt > 1 else 1)
        )
        outcome = {'outcome': 'active'}

        def spawn(t2, sid, proc, comp, inst_, tid):
            if hang:
                proc.put(
                    t2,
                    (
                        B,
                        proc.raw(t2),
                        None,
                        proc.host,
                        proc.svc,
                        tid,
                        'compute.spawn',
                        proc.new_span(),
                        sid,
                        ctx.req,
                        ctx.greq,
                        [inst],
                        None,
                        None,
                        None,
                    ),
                )
                ctx.reach(t2)
                rt.stopped[inst] = ('compute.spawn', proc.host)
                raise spans.Hang()
            body = [self.work(8_000_000, 0.2)]
            if resched:
                body = [self.work(2_000_000), self.fail_spawn()]
            return self.span(
                proc, ctx, 'compute.spawn', t2, body, sid, inst=[inst], tid=tid
            )

        net_body = [self.work(2_500_000, 0.3)]
        if port:
            port_id = procs.new_uuid(rng)

            def fail(*_args):
                raise spans.Failure(
                    'nova.exception.PortBindingFailed',
                    'Binding failed for port %s, please check neutron '
                    'logs for more information.' % port_id,
                    'Binding failed for port <uuid>, please check '
                    'neutron logs for more information.',
                )

            net_body = [self.work(1_500_000), fail]

        save = self.call(
            ctx,
            self.cloud.conductor,
            'object_action',
            'conductor',
            [
                self.sub(
                    ctx,
                    'conductor.object_action',
                    [self.work(200), self.sql(ctx, 'instance_update')],
                )
            ],
        )
        bar_body = [
            self.work(500),
            self.sub(
                ctx,
                'compute.claim',
                [
                    self.work(1500),
                    self.sql(ctx, 'instance_get'),
                    self.sql(ctx, 'instance_update'),
                ],
            ),
            save,
            self.sub(ctx, 'compute.network', net_body),
            self.sub(ctx, 'compute.block_device', [self.work(150_000)]),
            spawn,
            save,
            self.work(300),
        ]

        def bar(t2, sid, proc, comp, inst_, tid):
            try:
                return self.span(
                    proc,
                    ctx,
                    'compute.build_and_run',
                    t2,
                    bar_body,
                    sid,
                    inst=[inst],
                    tid=tid,
                )
            except spans.Failure as exc:
                if exc.cls == 'libvirt.libvirtError':
                    self.caught(exc, recovered='rescheduled')
                    outcome['outcome'] = 'rescheduled'
                else:
                    self.caught(exc)
                    outcome['outcome'] = 'failed'
                    rt.states[inst] = 'compute_failure'
                    rt.causes[inst] = exc.cls
                return exc.at

        def after(t2, sid, proc, comp, inst_, tid):
            if outcome['outcome'] != 'rescheduled':
                return t2
            return self.cast(
                ctx,
                self.cloud.conductor,
                'build_instances',
                'conductor',
                lambda t3, csid: self.conductor_build(
                    ctx, t3, csid, attempt + 1, [inst], tried
                ),
            )(t2, sid, proc, comp, [inst], tid)

        try:
            self.span(
                dst,
                ctx,
                'compute.build',
                end + 100,
                [self.work(300), bar, after],
                holder['sid'],
                inst=[inst],
                xattrs=outcome,
                tid=dst.new_tid(),
            )
        except spans.Hang:
            rt.states[inst] = 'incomplete'
            rt.causes[inst] = None
            return
        if outcome['outcome'] == 'active':
            rt.states[inst] = (
                'success' if attempt == 1 else 'rescheduled_success'
            )
            rt.causes[inst] = None

    def fail_spawn(self):
        def fail(*_args):
            code = self.rng.randint(100, 999)
            raise spans.Failure(
                'libvirt.libvirtError',
                'internal error: qemu unexpectedly closed the monitor: '
                'cannot set up guest memory: Cannot allocate memory '
                '(%d)' % code,
                'internal error: qemu unexpectedly closed the monitor: '
                'cannot set up guest memory: Cannot allocate memory '
                '(<n>)',
            )

        return fail

    # -- other API requests ------------------------------------------------

    def other(self, t0: int) -> None:
        rng = self.rng
        req = 'req-' + procs.new_uuid(rng)
        inst = procs.new_uuid(rng)
        rt = truth.RequestTruth(req=req, kind='other', start=t0)
        rt.states = {None: 'other'}
        rt.causes = {None: None}
        self.truth.requests[req] = rt
        ctx = procs.Ctx(req, [inst], rt)
        api = rng.choice(self.cloud.apis)
        dst = rng.choice(self.cloud.computes)
        if rng.random() < 0.5:
            body = [
                self.work(300),
                self.sql(ctx, 'instance_get'),
                self.work(200),
            ]
            attrs = {'method': 'GET', 'route': '/servers/{id}'}
        else:
            body = [
                self.work(300),
                self.sql(ctx, 'instance_get'),
                self.call(
                    ctx, dst, 'get_vnc_console', 'compute', [self.work(3000)]
                ),
                self.work(200),
            ]
            attrs = {'method': 'POST', 'route': '/servers/{id}/action'}
        self.span(
            api,
            ctx,
            'api.request',
            t0,
            body,
            None,
            inst=[inst],
            attrs=attrs,
            xattrs={'status': 200},
        )

    # -- periodic work without a request ------------------------------------

    def periodic_agg(self, proc: procs.Proc, t: int, interval_s: int) -> None:
        text, kind, db, median = statements.SQL_CLASSES['compute_node_update']
        fp = statements.fingerprint_id(text)
        proc.fingerprint(t, 'compute_node_update')
        n = self.rng.randint(3, 12)
        durs = [self.cloud.draw(median, 0.3) for _ in range(n)]
        hist = statements.histogram(durs)
        proc.put(
            t + interval_s * 1_000_000,
            record.counter(
                'sql.agg',
                proc.host,
                proc.svc,
                proc.raw(t),
                {
                    'fp': fp,
                    'db': db,
                    'kind': kind,
                    'call': 'compute.update_available_resource',
                    'count': n,
                    'errors': 0,
                    'sum_us': sum(durs),
                    'min_us': min(durs),
                    'max_us': max(durs),
                    'sumsq_us': sum(d * d for d in durs),
                    'rows': n,
                    'hist': hist,
                    'interval_s': interval_s,
                },
            ),
        )
        stats = self.truth.sql.setdefault(fp, [0, 0, 0])
        stats[0] += n
        stats[1] += sum(durs)
