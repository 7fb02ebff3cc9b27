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
"""Per-host clock offsets from causal pairs.

Every clock of one ``host`` is shared by all its processes; the offset
``o[h]`` is added to host ``h``'s raw timestamps.  A hop from a parent
span on host P to a child span on host C (an RPC send and its
dispatch) says the child started after the parent started::

    c_start + o[C] >= p_start + o[P]   =>   o[P] - o[C] <= c_start - p_start

and, when the parent waits for the child (``schema.SYNC_EVENTS``), that
the child ended before the parent ended::

    c_end + o[C] <= p_end + o[P]       =>   o[C] - o[P] <= p_end - c_end

This is a system of difference constraints.  Per directed host pair only
the tightest bounds matter, so ``PairCollector`` keeps the ``keep``
tightest (with where they came from): memory is bounded by the number of
host pairs, not by the input.  ``solve``:

1. adds the bounds to an all-pairs shortest-path matrix (NumPy), the
   ones closest to their host pair's median first, rejecting a bound
   that would close a negative cycle (no offsets satisfy it together
   with the bounds already accepted): such pairs are dropped and
   reported with their origin.  Ordering by distance from the pair's
   median rather than by raw value makes the outliers (too tight for
   their pair, in either direction) the ones dropped;
2. per connected group of hosts, takes the host with the most pairs as
   reference (offset 0) and fixes the other hosts one by one, the most
   constrained first (``point_estimate``: its raw clock, offset 0, when
   that is feasible, else the centre of its feasible interval, or its
   one finite end, status ``one-sided``); each choice is added as an
   equality so the rest stays feasible;
3. reports per host the offset, the feasible interval it was chosen
   from (its remaining uncertainty), its group and number of pairs.
   Hosts without pairs are reported as uncorrected (offset 0).
"""

import bisect
import typing

import numpy

INF = float('inf')


class PairCollector:
    """The tightest bounds ``o[a] - o[b] <= w`` per directed host pair."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        # (a, b): sorted list of (w, origin)
        self.bounds = {}
        self.pairs = 0
        self.per_host = {}

    def add(self, a: str, b: str, w: int, origin: typing.Any) -> None:
        lst = self.bounds.get((a, b))
        if lst is None:
            self.bounds[(a, b)] = [(w, origin)]
            return
        if len(lst) >= self.keep:
            if w >= lst[-1][0]:
                return
            lst.pop()
        bisect.insort(lst, (w, origin), key=lambda item: item[0])

    def add_hop(self, p_host: str, p_start: int,
                p_end: typing.Optional[int], c_host: str, c_start: int,
                c_end: typing.Optional[int], sync: bool,
                origin: typing.Any) -> None:
        """One parent/child pair on two hosts (ends may be ``None``)."""
        if p_host == c_host:
            return
        self.pairs += 1
        for host in (p_host, c_host):
            self.per_host[host] = self.per_host.get(host, 0) + 1
        self.add(p_host, c_host, c_start - p_start, origin)
        if sync and p_end is not None and c_end is not None:
            self.add(c_host, p_host, p_end - c_end, origin)

    def merge(self, other: 'PairCollector') -> None:
        self.pairs += other.pairs
        for host, n in other.per_host.items():
            self.per_host[host] = self.per_host.get(host, 0) + n
        for (a, b), lst in other.bounds.items():
            for w, origin in lst:
                self.add(a, b, w, origin)


class ClockResult:
    """Offsets per host and what could not be used."""

    def __init__(self) -> None:
        # host: {offset_us, low_us, high_us, group, status, pairs}
        self.hosts = {}
        # {a, b, bound_us, origin, reason}
        self.dropped = []
        self.groups = 0
        self.pairs = 0
        # (host, pid, ts) of the process.start records pass 1 read
        self.starts: set = set()
        # request ids rejoined: {id an api.request began with: the id
        # it ended with} (clockpass.HopMatcher._api)
        self.aliases: dict = {}
        # the dispatches of periodic runs' sends: {span id: run's
        # request id}, and {request id they carried: a run's}
        # (clockpass.HopMatcher._periodic)
        self.periodic_hops: dict = {}
        self.periodic_contexts: dict = {}

    def offsets(self) -> dict:
        return {h: info['offset_us'] for h, info in self.hosts.items()}

    def to_dict(self) -> dict:
        return {'hosts': self.hosts, 'dropped': self.dropped,
                'groups': self.groups, 'pairs': self.pairs}


def _relax(dist, u: int, v: int, w: float) -> None:
    """Add edge ``u -> v`` (``o[v] - o[u] <= w``) to the closed matrix."""
    if dist[u, v] <= w:
        return
    numpy.minimum(dist, dist[:, u][:, None] + w + dist[v, :][None, :],
                  out=dist)


def _nearest(todo: set, dist, ref: int) -> int:
    """The host of ``todo`` with the tightest bounds against ``ref``."""
    return min(todo, key=lambda j: (dist[ref, j] + dist[j, ref], j))


def point_estimate(low: float, high: float) -> int:
    """The offset chosen in the feasible interval ``[low, high]``.

    The host's raw clock (0) when causality allows it (a clock no pair
    contradicts is kept: NTP is usually right to a millisecond);
    otherwise, bounded on both sides, the centre (off by at most half
    the interval's width, the least that can be promised without
    knowing the latencies); bounded on one side only, that end (as if
    the fastest hop had taken no time).  A host bounded on one side
    only is reported ``one-sided``, not ``corrected``: a clock ahead in
    the direction without a bound stays undetected.
    """
    if low <= 0 <= high:
        value = 0.0
    elif low > -INF and high < INF:
        value = (low + high) / 2.0
    elif low > 0:
        value = low
    else:
        value = high
    value = int(round(value))
    if low <= high:  # rounding stays inside the interval
        if high < INF:
            value = min(value, int(high))
        if low > -INF:
            value = max(value, int(low))
    return value


def solve(collector: PairCollector,
          hosts: typing.Iterable[str] = ()) -> ClockResult:
    """Offsets for every host in ``hosts`` and in the collected pairs."""
    result = ClockResult()
    result.pairs = collector.pairs
    names = sorted(set(hosts) | {h for pair in collector.bounds
                                 for h in pair})
    index = {h: i for i, h in enumerate(names)}
    n = len(names)
    dist = numpy.full((n, n), INF)
    numpy.fill_diagonal(dist, 0.0)
    edges = []
    for (a, b), lst in collector.bounds.items():
        # How much tighter than its pair's typical bound each one is:
        # a bad pair (a clock step, a stalled read) stands out from the
        # bounds of its host pair, whatever the direction or the size of
        # the offset, so ranking by it makes the outliers the ones left
        # out when bounds contradict each other.
        typical = lst[len(lst) // 2][0]
        for w, origin in lst:
            # o[a] - o[b] <= w  is the edge b -> a of weight w
            edges.append((typical - w, w, index[b], index[a], origin))
    edges.sort(key=lambda e: (e[0], -e[1]))
    linked = [set() for _ in range(n)]
    for _tightness, w, u, v, origin in edges:
        if dist[v, u] + w < 0:
            result.dropped.append({
                'a': names[v], 'b': names[u], 'bound_us': w,
                'origin': origin,
                'reason': 'needs %s - %s <= %d us, other pairs need at '
                          'least %d us' % (names[v], names[u], w,
                                           -dist[v, u])})
            continue
        _relax(dist, u, v, w)
        linked[u].add(v)
        linked[v].add(u)
    group_of = [-1] * n
    groups = []
    for start in range(n):
        if group_of[start] >= 0 or not linked[start]:
            continue
        members = []
        stack = [start]
        group_of[start] = len(groups)
        while stack:
            i = stack.pop()
            members.append(i)
            for j in linked[i]:
                if group_of[j] < 0:
                    group_of[j] = len(groups)
                    stack.append(j)
        groups.append(members)
    result.groups = len(groups)
    per_host = collector.per_host
    for g, members in enumerate(groups):
        ref = max(members, key=lambda i: (per_host.get(names[i], 0),
                                          -i))
        result.hosts[names[ref]] = {
            'offset_us': 0, 'low_us': 0, 'high_us': 0, 'group': g,
            'status': 'reference', 'pairs': per_host.get(names[ref], 0)}
        todo = set(members) - {ref}
        while todo:
            i = _nearest(todo, dist, ref)
            todo.discard(i)
            low = -dist[i, ref]
            high = dist[ref, i]
            value = point_estimate(low, high)
            _relax(dist, ref, i, value)
            _relax(dist, i, ref, -value)
            two_sided = low > -INF and high < INF
            result.hosts[names[i]] = {
                'offset_us': value,
                'low_us': None if low == -INF else int(low),
                'high_us': None if high == INF else int(high),
                'group': g,
                'status': 'corrected' if two_sided else 'one-sided',
                'pairs': per_host.get(names[i], 0)}
    for name in names:
        if name not in result.hosts:
            result.hosts[name] = {
                'offset_us': 0, 'low_us': None, 'high_us': None,
                'group': None, 'status': 'uncorrected', 'pairs': 0}
    return result
