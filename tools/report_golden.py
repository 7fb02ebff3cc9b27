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
"""Golden reports: the same inputs reported before and after a change.

A refactoring of the analyser must not change a report.  This tool
writes a fixed set of inputs once, then the JSON, text and HTML report
of each case (and a comparison, and the Parquet export's tables as
sorted rows), so that two checkouts can be compared byte for byte::

    python tools/report_golden.py inputs /tmp/golden/inputs
    python tools/report_golden.py reports /tmp/golden/inputs /tmp/golden/a
    (change the code)
    python tools/report_golden.py reports /tmp/golden/inputs /tmp/golden/b
    diff -r /tmp/golden/a /tmp/golden/b

Only the analysis's own timings (``run.seconds``,
``run.clock_pass_seconds``: the text report's "analysed in" line) are
set to 0 before writing.  The inputs:

``fidelity``  the checked-in demo run (``tests/data/fidelity``)
``synthetic`` a seeded synthetic cloud with bad lines, seq gaps and
              the buffer's drops (lossy), skewed clocks
``ops``       a synthetic cloud of server actions other than boot
``cut``       the synthetic cloud with a gzip file cut short
``rich``      hand-made: lock, DB pool and worker pool waits,
              periodic tasks holding a lock requests wait for, calls
              to other services (one failing), resource samples, DB
              connections, DB retries, SQL aggregates, a restarted
              process, a copied file, a list of cells

Not shipped, not a test: a developer's check (issue 28).
"""

import argparse
import contextlib
import importlib
import io
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIDELITY = os.path.join(
    ROOT, 'tests', 'data', 'fidelity', 'demo-threads.jsonl.gz'
)
T0 = 1_700_000_000_000_000
MS = 1000
S = 1_000_000


class Writer:
    """One recording process's span file."""

    def __init__(
        self,
        path: str,
        host: str,
        svc: str,
        pid: int,
        start: int = T0 - 20 * S,
        seq: int = 0,
    ) -> None:
        self.path = path
        self.lines: list = []
        self.base = {'v': 1, 'host': host, 'svc': svc, 'pid': pid}
        self.seq = seq
        self.spans = 0
        self.rec(
            ph='M',
            ts=start,
            ev='process.start',
            attrs={
                'service': 'nova-' + svc,
                'version': '1.0',
                'mode': 'threads',
                'releases': {'nova': '31.0.0'},
                'points': {'patched': ['a', 'b'], 'pending': []},
            },
        )

    def rec(self, **kw) -> dict:
        self.seq += 1
        rec = dict(self.base, seq=self.seq)
        rec.update({k: v for k, v in kw.items() if v is not None})
        self.lines.append(json.dumps(rec, separators=(',', ':')))
        return rec

    def span(
        self,
        ev,
        start,
        dur,
        parent=None,
        req=None,
        st='ok',
        err=None,
        attrs=None,
        inst=None,
        ph='X',
    ) -> str:
        self.spans += 1
        sid = '%08x%08x' % (self.base['pid'], self.spans)
        self.rec(
            ph=ph,
            ts=T0 + start,
            dur_us=dur if ph == 'X' else None,
            ev=ev,
            span=sid,
            parent=parent,
            req=req,
            st=st if ph == 'X' else None,
            err=err,
            attrs=attrs,
            inst=inst,
        )
        return sid

    def sql(
        self,
        start,
        dur,
        req,
        parent,
        fp='f1',
        st='ok',
        rows=1,
        call='compute.claim',
        err=None,
    ) -> None:
        self.spans += 1
        self.rec(
            ph='X',
            ts=T0 + start,
            dur_us=dur,
            ev='sql.query',
            span='%08x%08x' % (self.base['pid'], self.spans),
            parent=parent,
            req=req,
            st=st,
            err=err,
            attrs={
                'fp': fp,
                'db': 'nova_cell1',
                'kind': 'SELECT',
                'call': call,
                'rows': rows,
            },
        )

    def sample(self, at, user, system, rss_kb, in_use=0) -> None:
        self.rec(
            ph='C',
            ts=T0 + at,
            ev='process.sample',
            attrs={
                'cpu_user_s': user,
                'cpu_sys_s': system,
                'rss_kb': rss_kb,
                'threads': 7 + in_use,
                'green': None,
                'fds': 20 + in_use,
                'pools': {'nova_cell1': [in_use, 0, 5]},
                'buf_fill': 3,
                'buf_size': 50000,
                'buf_drops': 0,
            },
        )

    def write(self, name: str = None) -> None:
        with open(name or self.path, 'w') as f:
            f.write('\n'.join(self.lines) + '\n')


def _ksa(stype, method, route, status=200, **more) -> dict:
    attrs = {
        'service_type': stype,
        'method': method,
        'route': route,
        'status': status,
        'attempts': 1,
    }
    attrs.update(more)
    return attrs


def _lock(held, call, name='compute_resources') -> dict:
    return {'lock': name, 'held_us': held, 'call': call, 'fair': True}


def rich(directory: str) -> None:
    """The hand-made set (see the module's doc)."""
    from instrument import schema

    os.makedirs(directory)
    api = Writer(os.path.join(directory, 'api.jsonl'), 'ctl', 'api', 11)
    cmp1 = Writer(os.path.join(directory, 'cmp1.jsonl'), 'cmp1', 'compute', 22)
    cmp2 = Writer(os.path.join(directory, 'cmp2.jsonl'), 'cmp2', 'compute', 33)
    api.rec(
        ph='M',
        ts=T0 - 19 * S,
        ev='sql.fingerprint',
        attrs={
            'fp': 'f1',
            'text': 'SELECT * FROM instances WHERE uuid = ?',
            'kind': 'SELECT',
        },
    )
    api.rec(
        ph='M',
        ts=T0 - 19 * S,
        ev='sql.fingerprint',
        attrs={
            'fp': 'f2',
            'text': 'UPDATE quota_usages SET in_use = ?',
            'kind': 'UPDATE',
        },
    )
    uar = 'ComputeManager.update_available_resource'
    heal = 'ComputeManager._heal_instance_info_cache'
    # periodic runs on cmp1: the audit holds compute_resources
    for k in range(4):
        at = k * 900 * MS
        req = schema.periodic_req(uar, '%032x' % (k + 1))
        sid = cmp1.span(
            'periodic.task',
            at + 50 * MS,
            300 * MS,
            req=req,
            attrs={'task': uar},
            st='error' if k == 3 else 'ok',
        )
        cmp1.span(
            'lock.wait',
            at + 60 * MS,
            15,
            parent=sid,
            req=req,
            attrs=_lock(200 * MS, 'periodic.task'),
        )
        cmp1.sql(at + 70 * MS, 4 * MS, req, sid, call='periodic.task')
        cmp1.span(
            'ksa.request',
            at + 90 * MS,
            12 * MS,
            parent=sid,
            req=req,
            attrs=_ksa(
                'placement', 'GET', '/resource_providers/{id}/inventories'
            ),
        )
    cmp1.span(
        'periodic.task',
        3700 * MS,
        None,
        ph='B',
        req=schema.periodic_req(heal, 'ff' * 16),
        attrs={'task': heal},
    )
    cmp2.span(
        'periodic.task',
        400 * MS,
        8 * MS,
        req=schema.periodic_req(heal, 'ee' * 16),
        attrs={'task': heal},
    )
    # boots and deletes through the API, each on cmp1 or cmp2
    for n in range(8):
        req = 'req-%d' % n
        inst = ['%08d-0000-4000-8000-%012d' % (n, n)]
        at = n * 450 * MS + 30 * MS
        delete = n in (5, 7)
        root = api.span(
            'api.request',
            at,
            400 * MS,
            req=req,
            attrs={
                'method': 'DELETE' if delete else 'POST',
                'route': '/servers/{id}' if delete else '/servers',
                'status': 204 if delete else 202,
            },
        )
        api.span('api.auth_token', at + 1 * MS, 2 * MS, parent=root, req=req)
        api.sql(at + 4 * MS, 3 * MS, req, root, fp='f2', call='api.request')
        host = cmp1 if n % 2 == 0 else cmp2
        if delete:
            call = api.span(
                'api.compute.delete',
                at + 5 * MS,
                30 * MS,
                parent=root,
                req=req,
                inst=inst,
            )
            cast = api.span(
                'rpc.cast',
                at + 10 * MS,
                2 * MS,
                parent=call,
                req=req,
                attrs={'method': 'terminate_instance', 'topic': 'compute'},
            )
            disp = host.span(
                'rpc.dispatch',
                at + 20 * MS,
                100 * MS,
                parent=cast,
                req=req,
                attrs={'method': 'terminate_instance'},
            )
            host.span(
                'compute.terminate_instance',
                at + 21 * MS,
                90 * MS,
                parent=disp,
                req=req,
                inst=inst,
            )
            continue
        create = api.span(
            'api.compute.create',
            at + 5 * MS,
            90 * MS,
            parent=root,
            req=req,
            inst=inst,
        )
        api.span(
            'ksa.request',
            at + 10 * MS,
            20 * MS,
            parent=create,
            req=req,
            attrs=_ksa('placement', 'GET', '/allocation_candidates'),
        )
        api.span(
            'db.pool.wait',
            at + 31 * MS,
            2 * MS + n * 100,
            parent=create,
            req=req,
            attrs={'db': 'nova_api', 'size': 5},
        )
        cast = api.span(
            'rpc.cast',
            at + 40 * MS,
            2 * MS,
            parent=create,
            req=req,
            attrs={'method': 'build_and_run_instance', 'topic': 'compute'},
        )
        disp = host.span(
            'rpc.dispatch',
            at + 50 * MS,
            300 * MS,
            parent=cast,
            req=req,
            attrs={'method': 'build_and_run_instance'},
        )
        build = host.span(
            'compute.build_and_run_instance',
            at + 51 * MS,
            290 * MS,
            parent=disp,
            req=req,
            inst=inst,
        )
        wait = 5 * MS if host is cmp2 else 120 * MS
        claim = host.span(
            'compute.claim',
            at + 52 * MS,
            wait + 5 * MS,
            parent=build,
            req=req,
            inst=inst,
        )
        host.span(
            'lock.wait',
            at + 52 * MS,
            wait,
            parent=claim,
            req=req,
            attrs=_lock(3 * MS, 'compute.claim'),
        )
        host.sql(
            at + 53 * MS + wait,
            2 * MS,
            req,
            claim,
            st='error' if n == 2 else 'ok',
            err={
                'cls': 'oslo_db.exception.DBDeadlock',
                'msg': 'Deadlock found',
            }
            if n == 2
            else None,
        )
        if n == 2:
            host.rec(
                ph='I',
                ts=T0 + at + 56 * MS + wait,
                ev='db.retry',
                req=req,
                attrs={'func': 'instance_update', 'cls': 'DBDeadlock'},
            )
        host.span(
            'pool.wait',
            at + 60 * MS + wait,
            1 * MS,
            parent=build,
            req=req,
            attrs={'pool': 'default', 'size': 10},
        )
        if n == 3:
            net = host.span(
                'compute.network',
                at + 80 * MS + wait,
                60 * MS,
                parent=build,
                req=req,
                inst=inst,
                st='error',
                err={
                    'cls': 'neutronclient.common.exceptions.'
                    'InternalServerError',
                    'msg': 'port create failed',
                },
            )
            host.span(
                'ksa.request',
                at + 81 * MS + wait,
                40 * MS,
                parent=net,
                req=req,
                attrs=_ksa('network', 'POST', '/v2.0/ports', status=500),
            )
            host.span(
                'compute.build',
                at + 70 * MS + wait,
                100 * MS,
                parent=build,
                req=req,
                inst=inst,
                st='error',
                err={
                    'cls': 'nova.exception.BuildAbortException',
                    'msg': 'port create failed',
                },
                attrs={'outcome': 'failed', 'attempt': 1},
            )
        else:
            if n == 1:
                host.span(
                    'ksa.request',
                    at + 81 * MS + wait,
                    50 * MS,
                    parent=build,
                    req=req,
                    st='error',
                    err={
                        'cls': 'keystoneauth1.exceptions.'
                        'connection.ConnectTimeout',
                        'msg': 'network POST /v2.0/ports: read timeout',
                    },
                    attrs=_ksa(
                        'network',
                        'POST',
                        '/v2.0/ports',
                        status=None,
                        attempts=3,
                        failure='read_timeout',
                    ),
                )
            host.span(
                'compute.build',
                at + 70 * MS + wait,
                100 * MS,
                parent=build,
                req=req,
                inst=inst,
                attrs={'outcome': 'active', 'attempt': 1},
            )
    # a list of servers over two cells, queried in parallel
    root = api.span(
        'api.request',
        3800 * MS,
        80 * MS,
        req='req-list',
        attrs={'method': 'GET', 'route': '/servers/detail', 'status': 200},
    )
    get_all = api.span(
        'api.compute.get_all', 3801 * MS, 70 * MS, parent=root, req='req-list'
    )
    sg = api.span(
        'api.cells.scatter_gather',
        3802 * MS,
        60 * MS,
        parent=get_all,
        req='req-list',
    )
    for c, (start, dur) in enumerate(((3803, 40), (3804, 55))):
        api.span(
            'api.cells.query',
            start * MS,
            dur * MS,
            parent=sg,
            req='req-list',
            attrs={'cell': 'cell%d' % c, 'db': 'nova_cell%d' % c},
        )
    # outside any request: a placement call, DB connections
    cmp2.span(
        'ksa.request',
        160 * MS,
        10 * MS,
        attrs=_ksa('placement', 'GET', '/resource_providers/{id}/traits'),
    )
    for ev, n in (
        ('db.pool.connect', 3),
        ('db.pool.close', 2),
        ('db.pool.invalidate', 1),
    ):
        for k in range(n):
            api.rec(ph='I', ts=T0 + k * MS, ev=ev, attrs={'db': 'nova_api'})
    cmp1.span(
        'lock.wait', 1700 * MS, 40 * MS, attrs=_lock(5 * MS, 'compute.update')
    )
    # resources: samples every 300 ms
    for k in range(16):
        at = -1 * S + k * 300 * MS
        for w, base in ((api, 1.0), (cmp1, 2.0), (cmp2, 3.0)):
            w.sample(
                at,
                base + 0.05 * k * k,
                0.01 * k,
                (100 + 3 * k) * 1024,
                in_use=k % 3,
            )
    # SQL aggregates, drops of the sinks and of the SQL listeners
    cmp1.rec(
        ph='C',
        ts=T0 + 1000 * MS,
        ev='sql.agg',
        attrs={
            'fp': 'f1',
            'db': 'nova_cell1',
            'call': 'periodic.task',
            'kind': 'SELECT',
            'count': 40,
            'sum_us': 8000,
            'min_us': 50,
            'max_us': 900,
            'sumsq_us': 2_500_000,
            'rows': 0,
            'errors': 0,
            'hist': [0, 0, 30, 10, 0, 0, 0, 0, 0],
            'interval_s': 60,
        },
    )
    cmp2.rec(
        ph='C',
        ts=T0 + 3000 * MS,
        ev='sink.drops',
        attrs={'file': 2, 'buffer_full': 3},
    )
    cmp2.seq += 2  # the two records the file sink dropped
    cmp2.rec(ph='C', ts=T0 + 3100 * MS, ev='sql.dropped', attrs={'count': 5})
    for w in (api, cmp1, cmp2):
        w.rec(ph='M', ts=T0 + 4000 * MS, ev='process.end')
    api.write()
    cmp2.write()
    # cmp1 restarts (same pid) and records a little more
    again = Writer(cmp1.path, 'cmp1', 'compute', 22, start=T0 + 4100 * MS)
    again.span(
        'periodic.task',
        4200 * MS,
        20 * MS,
        req=schema.periodic_req(uar, 'dd' * 16),
        attrs={'task': uar},
    )
    cmp1.lines += again.lines
    cmp1.write()
    # a copy of part of cmp2's file (records read twice)
    with open(os.path.join(directory, 'cmp2-copy.jsonl'), 'w') as f:
        f.write('\n'.join(cmp2.lines[:40]) + '\n')
    # a bad line and a line of another version
    with open(os.path.join(directory, 'api.jsonl'), 'a') as f:
        f.write('{"v":1,"ph":"X","seq":999,"ts":1}\n')
        f.write('{"v":7,"ph":"M"}\n')


def inputs(directory: str) -> None:
    sys.path.insert(0, ROOT)
    from tests import synthetic

    os.makedirs(directory)
    fid = os.path.join(directory, 'fidelity')
    os.makedirs(fid)
    shutil.copy(FIDELITY, fid)
    syn = os.path.join(directory, 'synthetic')
    synthetic.generate(
        syn, seed=21, requests=350, skew_us=4_000_000, bad_input=True
    )
    synthetic.generate(
        os.path.join(directory, 'ops'), seed=5, requests=300, p_ops=0.5
    )
    cut = os.path.join(directory, 'cut')
    shutil.copytree(syn, cut)
    gz = sorted(n for n in os.listdir(cut) if n.endswith('.gz'))[0]
    path = os.path.join(cut, gz)
    size = os.path.getsize(path)
    with open(path, 'r+b') as f:
        f.truncate(size * 2 // 3)
    rich(os.path.join(directory, 'rich'))


# (case, input, options)
CASES = (
    ('fidelity-j1', 'fidelity', {'jobs': 1}),
    ('fidelity-j2', 'fidelity', {'jobs': 2}),
    ('synthetic-j1', 'synthetic', {'jobs': 1}),
    ('synthetic-j2', 'synthetic', {'jobs': 2}),
    (
        'synthetic-window-j1',
        'synthetic',
        {'jobs': 1, 'since': '+20s', 'until': '+60s'},
    ),
    (
        'synthetic-window-j2',
        'synthetic',
        {'jobs': 2, 'since': '+20s', 'until': '+60s'},
    ),
    (
        'synthetic-kind',
        'synthetic',
        {
            'jobs': 1,
            'group_by': 'kind',
            'order_by': 'count',
            'limit': 3,
            'all_lifecycles': True,
        },
    ),
    ('ops-j1', 'ops', {'jobs': 1}),
    ('ops-j2', 'ops', {'jobs': 2}),
    ('cut-j1', 'cut', {'jobs': 1}),
    ('rich-j1', 'rich', {'jobs': 1}),
    ('rich-j2', 'rich', {'jobs': 2}),
    ('rich-window', 'rich', {'jobs': 1, 'since': '+1s', 'until': '+3s'}),
)


def _analyse(pipeline, path: str, options: dict) -> dict:
    report = pipeline.analyse([path], pipeline.Options(**options))
    # the analysis's own timings: not the report's behaviour
    report['run']['seconds'] = 0.0
    report['run']['clock_pass_seconds'] = 0.0
    return report


def _module(*names: str):
    """The first of ``names`` that imports (the modules moved)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(names[-1])


def reports(source: str, out: str) -> None:
    sys.path.insert(0, ROOT)
    pipeline = _module('instrument.analysis.pipeline')
    report_html = _module(
        'instrument.analysis.render.html', 'instrument.analysis.report_html'
    )
    report_json = _module(
        'instrument.analysis.render.json', 'instrument.analysis.report_json'
    )
    report_text = _module(
        'instrument.analysis.render.text', 'instrument.analysis.report_text'
    )
    compare = _module('instrument.analysis.compare')
    os.makedirs(out)
    kept = {}
    for case, name, options in CASES:
        report = _analyse(pipeline, os.path.join(source, name), options)
        kept[case] = report
        for ext, text in (
            ('json', report_json.dumps(report) + '\n'),
            ('txt', report_text.render(report)),
            ('html', report_html.render(report)),
        ):
            with open(
                os.path.join(out, '%s.%s' % (case, ext)), 'w', encoding='utf-8'
            ) as f:
                f.write(text)
        print(case, len(report['requests']), 'requests')
    for a, b in (('synthetic-j1', 'ops-j1'), ('rich-j1', 'cut-j1')):
        result = compare.compare(kept[a], kept[b])
        with open(
            os.path.join(out, 'compare-%s-%s.txt' % (a, b)),
            'w',
            encoding='utf-8',
        ) as f:
            f.write(compare.render(result, a, b))
        with open(
            os.path.join(out, 'compare-%s-%s.json' % (a, b)),
            'w',
            encoding='utf-8',
        ) as f:
            f.write(report_json.dumps(result) + '\n')
    export(source, out)


def export(source: str, out: str) -> None:
    """``instrument-report export --parquet`` of two inputs, each table
    written as its rows, sorted."""
    import duckdb

    from instrument.cmd import report as cmd

    for name in ('synthetic', 'rich'):
        target = os.path.join(out, 'parquet-' + name)
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            code = cmd.main(
                [
                    'export',
                    '--parquet',
                    target,
                    '--no-progress',
                    '-j',
                    '1',
                    os.path.join(source, name),
                ]
            )
        assert code == 0, code
        with open(
            os.path.join(out, 'export-%s.txt' % name), 'w', encoding='utf-8'
        ) as f:
            f.write(said.getvalue().replace(out, 'OUT'))
        con = duckdb.connect()
        for table in sorted(os.listdir(target)):
            rows = con.execute(
                "SELECT * FROM read_parquet(?, hive_partitioning = true, "
                "union_by_name = true)",
                [os.path.join(target, table, '**', '*.parquet')],
            )
            cols = [d[0] for d in rows.description]
            lines = sorted(
                json.dumps(
                    dict(zip(cols, row, strict=True)),
                    default=str,
                    sort_keys=True,
                )
                for row in rows.fetchall()
            )
            with open(
                os.path.join(out, 'export-%s-%s.jsonl' % (name, table)),
                'w',
                encoding='utf-8',
            ) as f:
                f.write(''.join(line + '\n' for line in lines))
        con.close()
        shutil.rmtree(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='what', required=True)
    p = sub.add_parser('inputs', help='write the inputs')
    p.add_argument('directory')
    p = sub.add_parser('reports', help='write the reports of the inputs')
    p.add_argument('inputs')
    p.add_argument('out')
    args = parser.parse_args()
    if args.what == 'inputs':
        inputs(args.directory)
    else:
        reports(args.inputs, args.out)


if __name__ == '__main__':
    main()
