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
"""The demo's mixed workload after the boots: server actions and lists.

``plan`` picks, among the servers that became ACTIVE, the ones to
resize (then confirm), live-migrate and delete (each server at most
one of them, chosen by the seed), and which resizes and live
migrations fail on purpose (``faults``: the source's disk migration
raises, so the resize errors out on the source; the destination's
``pre_live_migration`` raises, so nova rolls the migration back).
``run_all`` runs them and the server lists ``concurrency`` at a time
and records what the API answered: the truth the report is checked
against (``OpResult.expected`` is the final state the report must
give, from the API's answer, not from the plan).  The last list waits
until nova finished its asynchronous work on the servers (``settle``),
so that its answer ends the run for the demo as for the report.
"""

import concurrent.futures
import random
import threading
import time

from instrument_demo import boots

POLL_S = 0.2
TIMEOUT_S = 120.0

# API answer -> the report's final state
RESIZE_FAILED = 'failed_on_source'
LIVE_ROLLED_BACK = 'rolled_back'


class OpResult:
    """One operation as the API saw it."""

    __slots__ = (
        'op',
        'name',
        'id',
        'status',
        'host_before',
        'host',
        'migration',
        'expected',
        'started',
        'finished',
        'error',
    )

    def __init__(
        self,
        op: str,
        name: str = None,
        server_id: str = None,
        host: str = None,
    ) -> None:
        self.op = op
        self.name = name
        self.id = server_id
        self.status = None
        self.host_before = host
        self.host = host
        self.migration = None
        self.expected = None
        self.started = time.time()
        self.finished = None
        self.error = None

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


def default_counts(servers: int) -> dict:
    """Mostly boots: about one server in ten of each kind (at least
    one), lists as many."""
    n = max(1, servers // 10)
    return {'resize': n, 'live_migrate': n, 'delete': n, 'list': n}


def plan(
    active: list, counts: dict, fail: float, seed: int = 0, computes: int = 2
) -> dict:
    """``{'resize': [(name, fate)], 'live_migrate': [...], 'delete':
    [names], 'list': n}`` for the ACTIVE servers ``active`` (names);
    ``fate`` is ``ok`` or ``fail``: exactly ``round(n * fail)`` of each
    kind fail.  Moves need two computes: without, none are planned."""
    names = sorted(active)
    random.Random(seed).shuffle(names)
    out = {
        'resize': [],
        'live_migrate': [],
        'delete': [],
        'list': counts.get('list', 0),
    }
    kinds = ['resize', 'live_migrate'] if computes >= 2 else []
    for kind in kinds + ['delete']:
        want = min(counts.get(kind, 0), len(names))
        chosen, names = names[:want], names[want:]
        if kind == 'delete':
            out[kind] = chosen
            continue
        failing = int(round(len(chosen) * fail))
        out[kind] = [
            (name, 'fail' if i < failing else 'ok')
            for i, name in enumerate(chosen)
        ]
    return out


def _wait(api, server_id: str, done, deadline: float) -> dict:
    while True:
        server = api.get_server(server_id)
        if done(server) or time.monotonic() > deadline:
            return server
        time.sleep(POLL_S)


def _migration(api, server_id: str, kind: str) -> dict:
    migrations = api.api_get('/os-migrations').body['migrations']
    mine = [
        m
        for m in migrations
        if m['instance_uuid'] == server_id and m.get('migration_type') == kind
    ]
    return max(mine, key=lambda m: m['id']) if mine else {}


def resize(api, result: OpResult, flavor_id: str) -> None:
    """Resize, then confirm when it reached VERIFY_RESIZE (the confirm
    is a result of its own, returned)."""
    api.post_server_action(result.id, {'resize': {'flavorRef': flavor_id}})
    deadline = time.monotonic() + TIMEOUT_S
    server = _wait(
        api,
        result.id,
        lambda s: (
            s['status'] in ('VERIFY_RESIZE', 'ERROR')
            and not s.get('OS-EXT-STS:task_state')
        ),
        deadline,
    )
    result.status = server['status']
    result.host = server.get('OS-EXT-SRV-ATTR:host')
    result.migration = _migration(api, result.id, 'resize').get('status')
    result.expected = {'VERIFY_RESIZE': 'success', 'ERROR': RESIZE_FAILED}.get(
        result.status, 'incomplete'
    )


def confirm(api, result: OpResult) -> None:
    api.post_server_action(result.id, {'confirmResize': None})
    server = _wait(
        api,
        result.id,
        lambda s: s['status'] in ('ACTIVE', 'ERROR'),
        time.monotonic() + TIMEOUT_S,
    )
    result.status = server['status']
    result.host = server.get('OS-EXT-SRV-ATTR:host')
    result.expected = (
        'success' if result.status == 'ACTIVE' else 'failed_on_source'
    )


def live_migrate(api, result: OpResult) -> None:
    api.post_server_action(
        result.id,
        {'os-migrateLive': {'host': None, 'block_migration': 'auto'}},
    )
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        mig = _migration(api, result.id, 'live-migration')
        if (
            mig.get('status') in ('completed', 'error', 'failed')
            or time.monotonic() > deadline
        ):
            break
        time.sleep(POLL_S)
    server = _wait(
        api, result.id, lambda s: not s.get('OS-EXT-STS:task_state'), deadline
    )
    result.migration = mig.get('status')
    result.status = server['status']
    result.host = server.get('OS-EXT-SRV-ATTR:host')
    if result.migration == 'completed' and result.host != result.host_before:
        result.expected = 'success'
    elif (
        result.migration in ('error', 'failed')
        and result.host == result.host_before
    ):
        result.expected = LIVE_ROLLED_BACK
    else:
        result.expected = 'incomplete'


def delete(api, result: OpResult) -> None:
    api.delete_server(result.id)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            server = api.get_server(result.id)
        except Exception as exc:  # 404: gone
            if (
                getattr(exc, 'response', None) is not None
                and getattr(exc.response, 'status_code', None) == 404
                or 'NotFound' in exc.__class__.__name__
            ):
                result.status = 'DELETED'
                result.expected = 'success'
                return
            raise
        if server['status'] == 'ERROR':
            result.status = 'ERROR'
            result.expected = 'compute_failure'
            return
        time.sleep(POLL_S)
    result.status = 'TIMEOUT'
    result.expected = 'incomplete'


def server_list(api, result: OpResult) -> None:
    servers = api.get_servers(detail=True)
    result.status = 'LISTED %d' % len(servers)
    result.expected = 'success'


def _run(fn, result: OpResult, *args) -> OpResult:
    try:
        fn(*args)
    except Exception as exc:  # the API said no: a result too
        result.status = 'API_ERROR'
        result.error = '%s: %s' % (exc.__class__.__name__, exc)
        result.expected = 'api_failure'
    result.finished = time.time()
    return result


def planned(work: dict) -> int:
    """How many operations ``work`` holds (confirms not counted)."""
    return (
        len(work['resize'])
        + len(work['live_migrate'])
        + len(work['delete'])
        + work['list']
    )


def _busy(api, server_id: str) -> bool:
    """Has an instance action of the server an event not finished
    (nova's compute still working on it after the API's answer)?"""
    base = '/servers/%s/os-instance-actions' % server_id
    for action in api.api_get(base).body['instanceActions']:
        if action['action'] == 'create':
            # the boot ended before (a rescheduled build's first event
            # is never finished)
            continue
        detail = api.api_get('%s/%s' % (base, action['request_id'])).body
        for event in detail['instanceAction'].get('events') or ():
            if not event.get('finish_time'):
                return True
    return False


def settle(api, server_ids: list, timeout: float = TIMEOUT_S) -> bool:
    """Wait until nova finished its work on the servers (every event
    of their instance actions finished, twice in a row: a cast may not
    have started its event yet); False on time-out.  The run then ends
    with an answer the report sees last (its definition of the run's
    time: to the last request's end, asynchronous work included)."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline:
        try:
            busy = any(_busy(api, sid) for sid in server_ids)
        except Exception:  # an API that cannot say: do not wait
            return False
        quiet = 0 if busy else quiet + 1
        if quiet >= 2:
            return True
        time.sleep(POLL_S * 2)
    return False


def run_all(
    api,
    work: dict,
    boot_results: list,
    flavor_id: str,
    concurrency: int,
    stop: threading.Event = None,
    progress: boots.Progress = None,
) -> list:
    """Run the planned operations (``plan``) on the booted servers;
    returns an ``OpResult`` per API operation (a confirmed resize gives
    two: the resize and its confirm)."""
    stop = stop or threading.Event()
    by_name = {r.name: r for r in boot_results}
    tasks = []
    for name, _fate in work['resize']:
        b = by_name[name]
        tasks.append(('resize', OpResult('resize', name, b.id, b.host)))
    for name, _fate in work['live_migrate']:
        b = by_name[name]
        tasks.append(
            ('live_migrate', OpResult('live_migrate', name, b.id, b.host))
        )
    for name in work['delete']:
        b = by_name[name]
        tasks.append(('delete', OpResult('delete', name, b.id, b.host)))
    moved = [r.id for _kind, r in tasks]
    # lists spread among the actions; the last one after nova settled
    spread = max(work['list'] - 1, 0) if tasks else work['list']
    for i in range(spread):
        at = (i + 1) * len(tasks) // (spread + 1)
        tasks.insert(at + i, ('list', OpResult('list')))
    last_list = work['list'] > spread
    out = []
    lock = threading.Lock()

    def one(kind: str, result: OpResult) -> list:
        if kind == 'resize':
            _run(resize, result, api, result, flavor_id)
            done = [result]
            if result.status == 'VERIFY_RESIZE':
                c = OpResult(
                    'confirm_resize', result.name, result.id, result.host
                )
                done.append(_run(confirm, c, api, c))
            return done
        fn = {
            'live_migrate': live_migrate,
            'delete': delete,
            'list': server_list,
        }[kind]
        return [_run(fn, result, api, result)]

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        futures = []
        for kind, result in tasks:
            if stop.is_set():
                break
            futures.append(pool.submit(one, kind, result))
        for future in concurrent.futures.as_completed(futures):
            results = future.result()
            with lock:
                out.extend(results)
            if progress:
                progress.add(results[0])  # (not the confirms)
    if moved and not stop.is_set():
        settle(api, moved)
    if last_list:
        final = OpResult('list')
        out.append(_run(server_list, final, api, final))
        if progress:
            progress.add(final)
    return out
