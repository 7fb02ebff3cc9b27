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
"""The span primitives the synthetic nova requests are written with.

``Spans.span`` writes one span (its ``B`` record, then its ``X`` record
when its body is done) whose body is a list of items run in order: an
int is the span's own work in microseconds, a callable is a child (a
sub-span, a statement, an RPC hop) that returns the time it finished.
``sub``, ``sql``, ``call``, ``cast`` and ``dispatch`` make such
callables.  Each piece of work is charged to its component in the
request's truth as it is written, so the truth needs no second pass.

A ``Failure`` raised in a body ends every span it leaves with
``st: error``; a ``Hang`` leaves them without their ``X`` record.
"""

from instrument import schema
from tests.synthetic import procs
from tests.synthetic import statements

B = schema.PH_BEGIN
X = schema.PH_COMPLETE


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


class Spans:
    """Span, statement and RPC primitives over a ``Cloud``'s processes.

    Durations come from ``cloud.draw`` (looked up at each call: a test
    may slow a cloud down by replacing it).
    """

    def __init__(self, cloud) -> None:
        self.cloud = cloud
        self.rng = cloud.rng
        self.truth = cloud.truth
        # span id: event name, for the "call" attribute of statements
        self._call_names = {}

    def draw(self, median: float, sigma: float = 0.25) -> int:
        """A duration around ``median`` microseconds (``Cloud.draw``)."""
        return self.cloud.draw(median, sigma)

    def span(
        self,
        proc: procs.Proc,
        ctx: procs.Ctx,
        ev: str,
        t: int,
        body: list,
        parent,
        inst=None,
        attrs=None,
        xattrs=None,
        tid=None,
    ) -> int:
        """Write one span whose body runs ``body`` items in order: an int
        is self time, a callable ``f(t, sid, proc, comp, inst, tid)``
        returns the time it finished.  Returns the span's end time."""
        sid = proc.new_span()
        tid = tid or proc.tid
        comp = schema.EVENTS.get(ev) or proc.svc
        inst = inst if inst is not None else ctx.insts
        proc.put(
            t,
            (
                B,
                proc.raw(t),
                None,
                proc.host,
                proc.svc,
                tid,
                ev,
                sid,
                parent,
                ctx.req,
                ctx.greq,
                inst,
                None,
                None,
                attrs,
            ),
        )
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
            proc.put(
                cur,
                self._x(
                    proc,
                    ctx,
                    ev,
                    t,
                    cur,
                    sid,
                    parent,
                    inst,
                    tid,
                    'error',
                    (exc.cls, exc.msg),
                    attrs,
                    xattrs,
                ),
            )
            ctx.reach(cur)
            raise
        finally:
            del self._call_names[sid]
        proc.put(
            cur,
            self._x(
                proc,
                ctx,
                ev,
                t,
                cur,
                sid,
                parent,
                inst,
                tid,
                'ok',
                None,
                attrs,
                xattrs,
            ),
        )
        ctx.reach(cur)
        return cur

    @staticmethod
    def _x(
        proc, ctx, ev, t, end, sid, parent, inst, tid, st, err, attrs, xattrs
    ):
        if xattrs:
            attrs = dict(attrs or {})
            attrs.update(xattrs)
        return (
            X,
            proc.raw(t),
            end - t,
            proc.host,
            proc.svc,
            tid,
            ev,
            sid,
            parent,
            ctx.req,
            ctx.greq,
            inst,
            st,
            err,
            attrs,
        )

    def sub(
        self,
        ctx: procs.Ctx,
        ev: str,
        body: list,
        attrs=None,
        xattrs=None,
        inst=None,
    ):
        """A child span of the same process and thread."""

        def run(t, sid, proc, comp, pinst, tid):
            return self.span(
                proc,
                ctx,
                ev,
                t,
                body,
                sid,
                inst=inst if inst is not None else pinst,
                attrs=attrs,
                xattrs=xattrs,
                tid=tid,
            )

        return run

    def caught(self, exc: Failure, recovered: str = None) -> None:
        """A failure handled by nova: one row of the failure table.
        It is the final cause of what its handler decides, unless it
        was ``recovered`` (how: ``rescheduled``)."""
        svc, ev = exc.origin
        key = (svc, ev, exc.cls, exc.norm)
        self.truth.failures[key] += 1
        if recovered:
            self.truth.recovered[(key, recovered)] += 1
        else:
            self.truth.final[key] += 1

    def sql(self, ctx: procs.Ctx, name: str, deadlock: bool = False):
        """One statement (``deadlock``: first fails, is retried)."""

        def run(t, sid, proc, comp, inst, tid):
            cur = t
            if deadlock:
                cur = self._sql_record(
                    ctx, proc, name, cur, sid, comp, inst, tid, error=True
                )
                key = (
                    proc.svc,
                    'sql.query',
                    statements.DEADLOCK_CLS,
                    statements.DEADLOCK_NORM,
                )
                self.truth.failures[key] += 1
                self.truth.recovered[(key, 'db_retry')] += 1
                proc.put(
                    cur,
                    (
                        schema.PH_INSTANT,
                        proc.raw(cur),
                        None,
                        proc.host,
                        proc.svc,
                        tid,
                        'db.retry',
                        None,
                        sid,
                        ctx.req,
                        ctx.greq,
                        inst,
                        None,
                        None,
                        {
                            'attempt': 1,
                            'func': 'quota_reserve',
                            'cls': statements.DEADLOCK_CLS,
                            'exhausted': False,
                        },
                    ),
                )
                gap = self.draw(500)
                ctx.rt.comp[comp] += gap
                cur += gap
            return self._sql_record(ctx, proc, name, cur, sid, comp, inst, tid)

        return run

    def _sql_record(
        self, ctx, proc, name, t, parent, comp, inst, tid, error=False
    ) -> int:
        text, kind, db, median = statements.SQL_CLASSES[name]
        fp = statements.fingerprint_id(text)
        proc.fingerprint(t, name)
        dur = self.draw(median * self.cloud.load, 0.5)
        err = None
        st = 'ok'
        if error:
            st = 'error'
            err = (statements.DEADLOCK_CLS, statements.DEADLOCK_MSG)
        attrs = {
            'fp': fp,
            'db': db,
            'kind': kind,
            'call': self._call_names.get(parent),
        }
        if kind == 'SELECT':
            attrs['rows'] = 1
        proc.put(
            t + dur,
            (
                X,
                proc.raw(t),
                dur,
                proc.host,
                proc.svc,
                tid,
                'sql.query',
                proc.new_span(),
                parent,
                ctx.req,
                ctx.greq,
                inst,
                st,
                err,
                attrs,
            ),
        )
        ctx.rt.sql_in[comp] += dur
        stats = self.truth.sql.setdefault(fp, [0, 0, 0])
        stats[0] += 1
        stats[1] += dur
        stats[2] += error
        ctx.reach(t + dur)
        return t + dur

    def call(
        self,
        ctx: procs.Ctx,
        dst: procs.Proc,
        method: str,
        topic: str,
        remote_body: list,
    ):
        """An ``rpc.call``: the caller waits for the remote dispatch."""

        def run(t, sid, proc, comp, inst, tid):
            net1 = self.rng.randint(80, 300)
            net2 = self.rng.randint(80, 300)

            def remote(t2, call_sid, proc2, comp2, inst2, tid2):
                ctx.rt.comp['rpc'] += net1 + net2
                try:
                    end = self.dispatch(
                        ctx,
                        dst,
                        t2 + net1,
                        call_sid,
                        method,
                        topic,
                        remote_body,
                        inst=inst2,
                    )
                except Failure as exc:
                    exc.at += net2
                    raise
                return end + net2

            return self.span(
                proc,
                ctx,
                'rpc.call',
                t,
                [self.draw(150), remote],
                sid,
                inst=inst,
                tid=tid,
                attrs={'method': method, 'topic': topic, 'server': dst.host},
            )

        return run

    def cast(
        self, ctx: procs.Ctx, dst: procs.Proc, method: str, topic: str, remote
    ):
        """An ``rpc.cast``: ``remote(t, cast_sid)`` runs on ``dst``."""

        def run(t, sid, proc, comp, inst, tid):
            send = self.draw(200)
            net = self.rng.randint(80, 300)
            queue = int(self.rng.expovariate(1.0 / (1500 * self.cloud.load)))
            holder = []

            def send_item(t2, cast_sid, proc2, comp2, inst2, tid2):
                holder.append(cast_sid)
                ctx.rt.comp['rpc'] += send
                return t2 + send

            end = self.span(
                proc,
                ctx,
                'rpc.cast',
                t,
                [send_item],
                sid,
                inst=inst,
                tid=tid,
                attrs={'method': method, 'topic': topic},
            )
            ctx.rt.comp['rpc.queue'] += net + queue
            try:
                remote(end + net + queue, holder[0])
            except (Failure, Hang):
                pass
            return end

        return run

    def dispatch(
        self,
        ctx: procs.Ctx,
        dst: procs.Proc,
        t: int,
        parent: int,
        method: str,
        topic: str,
        body: list,
        inst=None,
    ) -> int:
        return self.span(
            dst,
            ctx,
            'rpc.dispatch',
            t,
            [self.draw(80)] + body,
            parent,
            inst=inst,
            tid=dst.new_tid(),
            attrs={'method': method, 'topic': topic},
        )
