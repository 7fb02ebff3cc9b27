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
"""nova's server actions other than create, with their faults and truth.

Each follows nova 34's path with the event names of ``schema.EVENTS``:

* resize: api (``api.compute.get``, ``api.compute.resize``) -> cast ->
  conductor ``migrate_server`` -> call -> scheduler (``NoValidHost``:
  scheduling failure) -> cast -> destination ``prep_resize`` -> cast ->
  source ``resize_instance`` (a ``ResizeError``: failed on source) ->
  cast -> destination ``finish_resize``;
* live migration: api -> cast -> conductor ``live_migrate`` (its
  ``checks`` call the destination's ``check_can_live_migrate_destination``:
  ``MigrationPreCheckError`` is a pre-check failure) -> cast -> source
  ``live_migration``: call destination ``pre_live_migration`` (a
  failure there is rolled back: ``rollback_live_migration`` and
  ``..._at_destination``), the move, ``post_live_migration`` -> call
  ``post_live_migration_at_destination``; a move that never ends
  leaves the request incomplete at ``compute.live_migration``;
* delete: api ``api.compute.delete`` -> cast -> compute
  ``terminate_instance`` (a failure there: compute failure);
* list: api ``api.compute.get_all`` -> ``api.cells.scatter_gather`` ->
  one ``api.cells.query`` per cell, all at once (``parallel``) or one
  after another (``serial``); ``cell1`` is the slow one; a cell that
  times out makes the list ``partial``.

Each outcome is written into the request's truth as it is decided
(``RequestTruth.kind`` is the operation).
"""

from tests.synthetic import nova
from tests.synthetic import procs
from tests.synthetic import spans
from tests.synthetic import truth

OPERATIONS = ('resize', 'live_migrate', 'delete', 'list')
CELLS = ('cell0', 'cell1', 'cell2')


class OperationRequests(nova.NovaRequests):
    """Writes server actions into a ``Cloud``'s processes (the span
    primitives and ``work`` as for the boots)."""

    def __init__(
        self,
        cloud,
        primitives: spans.Spans,
        p_fail: float = 0.15,
        parallel_cells: bool = True,
    ) -> None:
        super().__init__(cloud, primitives)
        self.p_fail = p_fail
        self.parallel_cells = parallel_cells

    def any(self, t0: int) -> None:
        """One operation, drawn evenly."""
        getattr(self, self.rng.choice(OPERATIONS))(t0)

    def _start(self, kind: str, t0: int, with_inst: bool = True):
        rng = self.rng
        req = 'req-' + procs.new_uuid(rng)
        inst = procs.new_uuid(rng) if with_inst else None
        rt = truth.RequestTruth(req=req, kind=kind, start=t0)
        self.truth.requests[req] = rt
        ctx = procs.Ctx(req, [inst] if inst else [], rt)
        return rt, ctx, inst

    def _fails(self) -> bool:
        return self.rng.random() < self.p_fail

    @staticmethod
    def _raise(cls: str, msg: str, norm: str = None):
        def fail(*_args):
            raise spans.Failure(cls, msg, norm or msg)

        return fail

    def _guard(self, item, rt, inst, state: str):
        """Run ``item``; a failure leaving it is handled by nova (one
        failure-table row) and decides the request's state."""

        def run(t, sid, proc, comp, pinst, tid):
            try:
                return item(t, sid, proc, comp, pinst, tid)
            except spans.Failure as exc:
                self.caught(exc)
                rt.states[inst] = state
                rt.causes[inst] = exc.cls
                return exc.at

        return run

    def _api(self, ctx, t0, method, route, status, body, inst):
        api = self.rng.choice(self.cloud.apis)
        self.span(
            api,
            ctx,
            'api.request',
            t0,
            body,
            None,
            inst=[inst] if inst else [],
            attrs={'method': method, 'route': route},
            xattrs={'status': status},
        )

    def _get(self, ctx):
        return self.sub(
            ctx,
            'api.compute.get',
            [self.work(200), self.sql(ctx, 'instance_get')],
        )

    def _two_computes(self):
        return self.rng.sample(self.cloud.computes, 2)

    # -- resize ------------------------------------------------------------

    def resize(self, t0: int) -> None:
        rt, ctx, inst = self._start('resize', t0)
        src, dst = self._two_computes()
        novalid = self._fails()
        source_fails = not novalid and self._fails()
        rt.states = {inst: 'success'}
        rt.causes = {inst: None}

        def finish(t, csid):
            self.dispatch(
                ctx,
                dst,
                t,
                csid,
                'finish_resize',
                'compute',
                [
                    self.sub(
                        ctx,
                        'compute.finish_resize',
                        [self.work(900_000), self.sql(ctx, 'instance_update')],
                        attrs={'role': 'dest'},
                    )
                ],
            )

        ri_body = [self.work(2_000_000)]
        if source_fails:
            ri_body = [
                self.work(500_000),
                self._raise(
                    'nova.exception.ResizeError',
                    'Resize error: not able to execute ssh command: %d'
                    % self.rng.randint(1, 255),
                    'Resize error: not able to execute ssh command: <n>',
                ),
            ]
        else:
            ri_body += [
                self.cast(ctx, dst, 'finish_resize', 'compute', finish)
            ]

        def resize_instance(t, csid):
            self.dispatch(
                ctx,
                src,
                t,
                csid,
                'resize_instance',
                'compute',
                [
                    self._guard(
                        self.sub(
                            ctx,
                            'compute.resize_instance',
                            ri_body,
                            attrs={'role': 'source'},
                        ),
                        rt,
                        inst,
                        'failed_on_source',
                    )
                ],
            )

        def prep(t, csid):
            self.dispatch(
                ctx,
                dst,
                t,
                csid,
                'prep_resize',
                'compute',
                [
                    self.sub(
                        ctx,
                        'compute.prep_resize',
                        [
                            self.work(3000),
                            self.sql(ctx, 'instance_update'),
                            self.cast(
                                ctx,
                                src,
                                'resize_instance',
                                'compute',
                                resize_instance,
                            ),
                        ],
                        attrs={'role': 'dest'},
                    )
                ],
            )

        def choose(*_args):
            if novalid:
                raise spans.Failure(
                    'nova.exception.NoValidHost',
                    'No valid host was found. No valid host found for resize',
                    'No valid host was found. No valid host found for resize',
                )
            return _args[0]

        select = self.call(
            ctx,
            self.cloud.scheduler,
            'select_destinations',
            'scheduler',
            [
                self.sub(
                    ctx,
                    'scheduler.select_destinations',
                    [self.work(5000), choose, self.work(2000)],
                )
            ],
        )
        cond_body = [
            self.work(500),
            self.sql(ctx, 'instance_get'),
            select,
            self.cast(ctx, dst, 'prep_resize', 'compute', prep),
            self.work(100),
        ]

        def conductor(t, csid):
            self.dispatch(
                ctx,
                self.cloud.conductor,
                t,
                csid,
                'migrate_server',
                'conductor',
                [
                    self._guard(
                        self.sub(ctx, 'conductor.migrate_server', cond_body),
                        rt,
                        inst,
                        'scheduling_failure',
                    )
                ],
            )

        body = [
            self.work(300),
            self.sub(
                ctx,
                'api.compute.resize',
                [
                    self.work(500),
                    self._get(ctx),
                    self.cast(
                        ctx,
                        self.cloud.conductor,
                        'migrate_server',
                        'conductor',
                        conductor,
                    ),
                ],
                attrs={'flavor_id': '2'},
            ),
            self.work(100),
        ]
        self._api(
            ctx, t0, 'POST', '/v2.1/servers/{id}/action', 202, body, inst
        )

    # -- live migration ----------------------------------------------------

    def live_migrate(self, t0: int) -> None:
        rt, ctx, inst = self._start('live_migrate', t0)
        src, dst = self._two_computes()
        r = self.rng.random()
        precheck = r < self.p_fail
        pre_fails = self.p_fail <= r < 2 * self.p_fail
        hang = 2 * self.p_fail <= r < 2 * self.p_fail + 0.05
        rt.states = {inst: 'success'}
        rt.causes = {inst: None}

        check_body = [self.work(40_000)]
        if precheck:
            check_body = [
                self.work(10_000),
                self._raise(
                    'nova.exception.MigrationPreCheckError',
                    'Migration pre-check error: Unable to migrate %s: CPU '
                    'doesn\'t have compatibility.' % inst,
                    'Migration pre-check error: Unable to migrate <uuid>: CPU '
                    'doesn\'t have compatibility.',
                ),
            ]
        checks = self.sub(
            ctx,
            'conductor.live_migrate.checks',
            [
                self.work(300),
                self.call(
                    ctx,
                    dst,
                    'check_can_live_migrate_destination',
                    'compute',
                    [
                        self.sub(
                            ctx,
                            'compute.check_can_live_migrate_destination',
                            check_body,
                            attrs={'role': 'dest'},
                        )
                    ],
                ),
            ],
        )

        pre_body = [self.work(300_000)]
        if pre_fails:
            pre_body = [
                self.work(100_000),
                self._raise(
                    'nova.exception.VirtualInterfacePlugException',
                    'Virtual interface plugin failed',
                    'Virtual interface plugin failed',
                ),
            ]
        pre = self.call(
            ctx,
            dst,
            'pre_live_migration',
            'compute',
            [
                self.sub(
                    ctx,
                    'compute.pre_live_migration',
                    pre_body,
                    attrs={'role': 'dest'},
                )
            ],
        )

        def pre_or_rollback(t, sid, proc, comp, pinst, tid):
            try:
                return pre(t, sid, proc, comp, pinst, tid)
            except spans.Failure as exc:
                self.caught(exc)
                rt.states[inst] = 'rolled_back'
                rt.causes[inst] = exc.cls
                end = self.span(
                    proc,
                    ctx,
                    'compute.rollback_live_migration',
                    exc.at,
                    [
                        self.work(20_000),
                        self.call(
                            ctx,
                            dst,
                            'rollback_live_migration_at_destination',
                            'compute',
                            [
                                self.sub(
                                    ctx,
                                    'compute.'
                                    'rollback_live_'
                                    'migration_at_'
                                    'destination',
                                    [self.work(30_000)],
                                    attrs={'role': 'dest'},
                                )
                            ],
                        ),
                    ],
                    sid,
                    attrs={'role': 'source'},
                    tid=tid,
                )
                exc.at = end
                raise

        def move(t, sid, proc, comp, pinst, tid):
            if hang:
                # the move never ends: no X record for the spans open
                rt.states[inst] = 'incomplete'
                rt.causes[inst] = None
                rt.stopped[inst] = ('compute.live_migration', proc.host)
                raise spans.Hang()
            took = self.work(3_000_000)
            ctx.rt.comp[comp] += took
            return t + took

        post = self.sub(
            ctx,
            'compute.post_live_migration',
            [
                self.work(50_000),
                self.call(
                    ctx,
                    dst,
                    'post_live_migration_at_destination',
                    'compute',
                    [
                        self.sub(
                            ctx,
                            'compute.post_live_migration_at_destination',
                            [
                                self.work(200_000),
                                self.sql(ctx, 'instance_update'),
                            ],
                            attrs={'role': 'dest'},
                        )
                    ],
                ),
            ],
            attrs={'role': 'source'},
        )

        def migration(t, csid):
            try:
                self.dispatch(
                    ctx,
                    src,
                    t,
                    csid,
                    'live_migration',
                    'compute',
                    [
                        self.sub(
                            ctx,
                            'compute.live_migration',
                            [self.work(2000), pre_or_rollback, move, post],
                            attrs={'role': 'source'},
                        )
                    ],
                )
            except spans.Failure:
                pass  # rolled back, re-raised into the cast: nobody waits

        cond_body = [
            self.work(400),
            self.sql(ctx, 'instance_get'),
            self._guard(checks, rt, inst, 'precheck_failure'),
        ]
        if not precheck:
            cond_body.append(
                self.cast(ctx, src, 'live_migration', 'compute', migration)
            )

        def conductor(t, csid):
            self.dispatch(
                ctx,
                self.cloud.conductor,
                t,
                csid,
                'live_migrate_instance',
                'conductor',
                [self.sub(ctx, 'conductor.live_migrate', cond_body)],
            )

        body = [
            self.work(300),
            self.sub(
                ctx,
                'api.compute.live_migrate',
                [
                    self.work(500),
                    self._get(ctx),
                    self.cast(
                        ctx,
                        self.cloud.conductor,
                        'live_migrate_instance',
                        'conductor',
                        conductor,
                    ),
                ],
            ),
            self.work(100),
        ]
        self._api(
            ctx, t0, 'POST', '/v2.1/servers/{id}/action', 202, body, inst
        )

    # -- delete ------------------------------------------------------------

    def delete(self, t0: int) -> None:
        rt, ctx, inst = self._start('delete', t0)
        host = self.rng.choice(self.cloud.computes)
        rt.states = {inst: 'success'}
        rt.causes = {inst: None}
        body = [self.work(400_000), self.sql(ctx, 'instance_update')]
        if self._fails():
            body = [
                self.work(100_000),
                self._raise(
                    'libvirt.libvirtError',
                    'Failed to terminate process %d with SIGKILL: Device or '
                    'resource busy' % self.rng.randint(1000, 99999),
                    'Failed to terminate process <n> with SIGKILL: Device or '
                    'resource busy',
                ),
            ]

        def terminate(t, csid):
            self.dispatch(
                ctx,
                host,
                t,
                csid,
                'terminate_instance',
                'compute',
                [
                    self._guard(
                        self.sub(ctx, 'compute.terminate_instance', body),
                        rt,
                        inst,
                        'compute_failure',
                    )
                ],
            )

        api_body = [
            self.work(300),
            self.sub(
                ctx,
                'api.compute.delete',
                [
                    self.work(400),
                    self._get(ctx),
                    self.sql(ctx, 'instance_update'),
                    self.cast(
                        ctx, host, 'terminate_instance', 'compute', terminate
                    ),
                ],
            ),
            self.work(100),
        ]
        self._api(ctx, t0, 'DELETE', '/v2.1/servers/{id}', 204, api_body, inst)

    # -- list across cells -------------------------------------------------

    def list(self, t0: int) -> None:
        rt, ctx, _inst = self._start('list', t0, with_inst=False)
        rt.states = {None: 'success'}
        rt.causes = {None: None}
        timeout = self._fails()
        rt.cells_mode = 'parallel' if self.parallel_cells else 'serial'

        def query(cell, fail):
            body = [
                self.work(3000 if cell != 'cell1' else 12000),
                self.sql(ctx, 'instance_get'),
            ]
            if fail:
                body = [
                    self.work(1000),
                    self._raise(
                        'nova.exception.CellTimeout',
                        'Timeout waiting for response from cell',
                        'Timeout waiting for response from cell',
                    ),
                ]
            q = self.sub(
                ctx,
                'api.cells.query',
                body,
                attrs={'cell': cell, 'db': 'nova_' + cell},
                inst=[],
            )
            if not fail:
                return q
            return self._guard(q, rt, None, 'partial')

        queries = [query(c, timeout and c == 'cell2') for c in CELLS]

        def together(t, sid, proc, comp, pinst, tid):
            # every cell at once, each in a thread of its own
            ends = [
                q(t, sid, proc, comp, pinst, proc.new_tid()) for q in queries
            ]
            return max(ends)

        sg_body = [self.work(200)]
        sg_body += [together] if self.parallel_cells else queries
        sg_body.append(self.work(300))
        body = [
            self.work(300),
            self.sub(
                ctx,
                'api.compute.get_all',
                [
                    self.work(800),
                    self.sub(
                        ctx, 'api.cells.scatter_gather', sg_body, inst=[]
                    ),
                    self.work(500),
                ],
                inst=[],
            ),
            self.work(200),
        ]
        self._api(ctx, t0, 'GET', '/v2.1/servers/detail', 200, body, None)
