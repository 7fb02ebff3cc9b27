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
"""Moves between the computes, after the boots: a live migration and a
cold migration (resize without a new flavor) confirmed, through the HTTP
API, and what the API says of them (hosts, migration status)."""

import json
import os
import time

from instrument import schema
from tests.integration import load

# nova's instance action event of the source's confirm_resize
CONFIRM_EVENT = 'compute_confirm_resize'


class Move:
    """One server action and what the API said of it."""

    def __init__(
        self, kind: str, server_id: str, source: str, dest: str
    ) -> None:
        self.kind = kind  # live-migration / migration
        self.server_id = server_id
        self.source = source
        self.dest = dest
        self.request_id = None
        self.confirm_request_id = None
        # from the API once it ended
        self.host = None  # the server's host afterwards
        self.migration_status = None


def _action(api: load.Api, server_id: str, body: dict) -> str:
    resp = api.call('POST', '/servers/%s/action' % server_id, body)
    return resp.headers.get('X-OpenStack-Request-ID')


def _server(api: load.Api, server_id: str) -> dict:
    return api.call('GET', '/servers/%s' % server_id).json()['server']


def _migration(api: load.Api, server_id: str, kind: str):
    found = [
        m
        for m in api.call(
            'GET', '/os-migrations?instance_uuid=%s' % server_id
        ).json()['migrations']
        if m['migration_type'] == kind
    ]
    return sorted(found, key=lambda m: m['id'])[-1] if found else None


def _wait(what, timeout: float, describe: str):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise load.ApiError('timed out waiting for ' + describe)
        time.sleep(1.0)


def run(
    api: load.Api, boots: list, hosts: tuple, timeout: float = 180.0
) -> list:
    """A live migration and a confirmed cold migration between the two
    ``hosts`` (plain fake drivers), of servers the boots left ACTIVE
    there."""
    active = [b for b in boots if b.status == 'ACTIVE' and b.host in hosts]
    if len(active) < 2:
        raise load.ApiError('fewer than two servers on %s' % (hosts,))
    return [
        _move(api, boot, kind, hosts, timeout)
        for boot, kind in zip(
            active[:2], ('live-migration', 'migration'), strict=True
        )
    ]


def _move(
    api: load.Api, boot, kind: str, hosts: tuple, timeout: float
) -> Move:
    server_id = boot.server_id
    dest = hosts[1] if boot.host == hosts[0] else hosts[0]
    move = Move(kind, server_id, boot.host, dest)
    if kind == 'live-migration':
        move.request_id = _action(
            api,
            server_id,
            {'os-migrateLive': {'host': dest, 'block_migration': 'auto'}},
        )
    else:
        move.request_id = _action(api, server_id, {'migrate': {'host': dest}})
        _wait(
            lambda: _server(api, server_id)['status'] == 'VERIFY_RESIZE',
            timeout,
            'VERIFY_RESIZE of %s' % server_id,
        )
        move.confirm_request_id = _action(
            api, server_id, {'confirmResize': None}
        )

    def ended():
        migration = _migration(api, server_id, kind)
        status = migration and migration['status']
        return (
            status
            if status in ('completed', 'confirmed', 'error', 'failed')
            else None
        )

    def active_host():
        server = _server(api, server_id)
        return server['status'] == 'ACTIVE' and server['OS-EXT-SRV-ATTR:host']

    move.migration_status = _wait(
        ended, timeout, '%s of %s' % (kind, server_id)
    )
    move.host = _wait(active_host, timeout, 'ACTIVE after %s' % kind)
    if move.confirm_request_id:
        # The server is ACTIVE before the source's confirm_resize has
        # returned (it still deletes the source allocation in placement,
        # and nova 33's RPC replies come in 0.5 s polls): wait for the
        # instance action's event to finish, or the cloud may stop under
        # it and its span never ends.
        _wait(
            lambda: _event_finished(
                api, server_id, move.confirm_request_id, CONFIRM_EVENT
            ),
            timeout,
            '%s of %s' % (CONFIRM_EVENT, server_id),
        )
    return move


def _event_finished(
    api: load.Api, server_id: str, request_id: str, event: str
) -> bool:
    action = api.call(
        'GET', '/servers/%s/os-instance-actions/%s' % (server_id, request_id)
    ).json()['instanceAction']
    return any(
        e['event'] == event and e.get('finish_time')
        for e in action.get('events') or ()
    )


def read_spans(span_dir: str) -> list:
    """Every ended span (``X``) of the span files."""
    spans = []
    for name in sorted(os.listdir(span_dir)):
        with open(os.path.join(span_dir, name)) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get('ph') == 'X':
                    # (an sql.txn's round trips: their sql.query records)
                    spans.extend(schema.unfold(rec))
    return spans


# The compute steps of each move: event -> (side, its role attr).
STEPS = {
    'live-migration': (
        ('compute.check_can_live_migrate_destination', 'dest'),
        ('compute.check_can_live_migrate_source', 'source'),
        ('compute.pre_live_migration', 'dest'),
        ('compute.live_migration', 'source'),
        ('compute.post_live_migration', 'source'),
        ('compute.post_live_migration_at_destination', 'dest'),
    ),
    'migration': (
        ('compute.prep_resize', 'dest'),
        ('compute.resize_instance', 'source'),
        ('compute.finish_resize', 'dest'),
    ),
}
ROLES = {'dest': 'destination', 'source': 'source'}


def mismatches(move: Move, spans: list) -> list:
    """How the span files disagree with what the API said of ``move``."""
    out = []
    mine = [
        s
        for s in spans
        if s.get('req') == move.request_id
        and move.server_id in (s.get('inst') or ())
    ]
    api_ev = (
        'api.compute.live_migrate'
        if move.kind == 'live-migration'
        else 'api.compute.resize'
    )
    if not [s for s in mine if s['ev'] == api_ev and s['svc'] == 'api']:
        out.append('%s %s: no %s' % (move.kind, move.server_id, api_ev))
    if move.host != move.dest:
        out.append(
            '%s %s: API host %s, asked for %s'
            % (move.kind, move.server_id, move.host, move.dest)
        )
    for ev, side in STEPS[move.kind]:
        found = [s for s in mine if s['ev'] == ev]
        host = move.dest if side == 'dest' else move.source
        if len(found) != 1:
            out.append(
                '%s %s: %d %s' % (move.kind, move.server_id, len(found), ev)
            )
            continue
        [rec] = found
        attrs = rec.get('attrs') or {}
        if (rec['host'], attrs.get('role'), rec['st']) != (
            host,
            ROLES[side],
            'ok',
        ):
            out.append(
                '%s %s: %s on %s as %s (%s), API: %s'
                % (
                    move.kind,
                    move.server_id,
                    ev,
                    rec['host'],
                    attrs.get('role'),
                    rec['st'],
                    host,
                )
            )
    if move.confirm_request_id:
        confirm = [
            s
            for s in spans
            if s.get('req') == move.confirm_request_id
            and s['ev'] == 'compute.confirm_resize'
        ]
        if [(s['host'], s['st']) for s in confirm] != [(move.source, 'ok')]:
            out.append(
                '%s %s: confirm %s, API source %s'
                % (
                    move.kind,
                    move.server_id,
                    [(s['host'], s['st']) for s in confirm],
                    move.source,
                )
            )
    return out
