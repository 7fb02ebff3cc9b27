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
dispatch: a call, a cast, a fan-out, a compute's call to another
compute in a move) says the child started after the parent started
(a ``send`` bound)::

    c_start + o[C] >= p_start + o[P]   =>   o[P] - o[C] <= c_start - p_start

and, when the parent waits for the child's reply (``schema.SYNC_EVENTS``)
and got it (``reply_received``: the call ended ``ok`` or raised the
remote side's exception; a call that timed out may end before its
dispatch does), that the child ended before the parent ended (a
``reply`` bound)::

    c_end + o[C] <= p_end + o[P]       =>   o[C] - o[P] <= p_end - c_end

This is a system of difference constraints.  Per directed host pair only
the tightest bounds matter, so ``PairCollector`` keeps the ``keep``
tightest (with where they came from and their kind): memory is bounded
by the number of host pairs, not by the input.  ``solve``:

1. finds the all-pairs shortest paths ``D`` of the tightest bound of
   each host pair (``closure``; the looser ones are implied).  When
   they close a negative cycle (no offsets satisfy them all), it adds
   the bounds one by one instead (``_consistent``), the ones closest
   to their host pair's median first, rejecting a bound that would
   close a negative cycle with the bounds already accepted: such pairs
   are dropped and reported with their origin.  Ordering by distance
   from the pair's median rather than by raw value makes the outliers
   (too tight for their pair, in either direction) the ones dropped;
2. per connected group of hosts, takes the host with the most pairs as
   reference (offset 0) and reports each host's *feasible interval*:
   the offsets the accepted bounds allow it, whatever the others are,
   ``[-D[h, ref], D[ref, h]]`` (the shortest paths to and from the
   reference: every offset in it is that of some solution, none
   outside is).  It holds the true offset whenever the bounds are
   true.  With it, the hops that make each end (``low_by``,
   ``high_by``: the shortest path's bounds, each with its kind, hosts
   and origin) and its width;
3. chooses the offsets (``place``): each host at the centre of its
   feasible interval (rounded down), the narrowest interval first; a
   host whose centre the hosts already placed do not allow (the
   offsets must satisfy every bound together, or the corrected clocks
   would break causality) gets the nearest offset they allow.  A host
   bounded on one side only gets its one end (as if its fastest hop
   had taken no time; status ``one-sided``: a clock off in the other
   direction is not seen).  The centre is the choice whose worst error
   is least when nothing is known of the latencies but their sign: the
   same spans could have been written by clocks anywhere in the
   interval, with other latencies.  A well-determined host is placed
   before the loosely bound ones and is never moved for them; a host
   tied closely to one already placed stays beside it.  The raw clock
   is not preferred: the offsets depend on the differences of
   timestamps only, so a clock shifted by any amount is corrected by
   exactly that amount (a skew smaller than the interval is not left
   unseen), and every figure of the report is the same as without
   the shift.  ``error_us`` is how far the chosen offset can be from
   the truth: its distance to the farther end of the interval;
4. hosts without pairs are reported as uncorrected (offset 0).
"""

import bisect
import typing

import numpy

INF = float('inf')
# the kinds of bound (``PairCollector.add_hop``)
SEND = 'send'  # a dispatch starts after its send starts
REPLY = 'reply'  # a call's dispatch ends before the call ends
# What a caller's error class ends with when it is the remote side's
# exception, brought back by the reply (oslo.messaging rebuilds it as a
# class ``<name>_Remote`` in a module ``<module>_Remote``).
REMOTE_SUFFIX = '_Remote'


def reply_received(st: typing.Any, err_cls: typing.Any) -> bool:
    """Whether a call span that ended with status ``st`` and error class
    ``err_cls`` got its reply: ``ok``, or the remote side's exception.
    A call that timed out (``MessagingTimeout``) or failed on its own
    side may end before its dispatch does: no reply bound from it."""
    if st == 'ok':
        return True
    return err_cls.__class__ is str and err_cls.endswith(REMOTE_SUFFIX)


class PairCollector:
    """The tightest bounds ``o[a] - o[b] <= w`` per directed host pair."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        # (a, b): sorted list of (w, origin, kind)
        self.bounds = {}
        self.pairs = 0
        self.per_host = {}

    def add(
        self,
        a: str,
        b: str,
        w: int,
        origin: typing.Any,
        kind: typing.Optional[str] = None,
    ) -> None:
        lst = self.bounds.get((a, b))
        if lst is None:
            self.bounds[(a, b)] = [(w, origin, kind)]
            return
        if len(lst) >= self.keep:
            if w >= lst[-1][0]:
                return
            lst.pop()
        bisect.insort(lst, (w, origin, kind), key=lambda item: item[0])

    def add_hop(
        self,
        p_host: str,
        p_start: int,
        p_end: typing.Optional[int],
        c_host: str,
        c_start: int,
        c_end: typing.Optional[int],
        sync: bool,
        origin: typing.Any,
    ) -> None:
        """One parent/child pair on two hosts (ends may be ``None``; a
        call without its reply has no end here)."""
        if p_host == c_host:
            return
        self.pairs += 1
        for host in (p_host, c_host):
            self.per_host[host] = self.per_host.get(host, 0) + 1
        self.add(p_host, c_host, c_start - p_start, origin, SEND)
        if sync and p_end is not None and c_end is not None:
            self.add(c_host, p_host, p_end - c_end, origin, REPLY)

    def merge(self, other: 'PairCollector') -> None:
        self.pairs += other.pairs
        for host, n in other.per_host.items():
            self.per_host[host] = self.per_host.get(host, 0) + n
        for (a, b), lst in other.bounds.items():
            for w, origin, kind in lst:
                self.add(a, b, w, origin, kind)


class ClockResult:
    """Offsets per host and what could not be used."""

    def __init__(self) -> None:
        # host: {offset_us, low_us, high_us, width_us, error_us,
        # low_by, high_by, group, status, pairs}
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
        # host: the earliest start of an RPC span or an api.request on
        # its clock (clockpass.HopMatcher.first_of_host)
        self.first_of_host: dict = {}
        # {file index: array of the crc32 of each line's request id}
        # when asked (clockpass.request_hashes; pass 2's partitions)
        self.line_hashes: dict = {}

    def offsets(self) -> dict:
        return {h: info['offset_us'] for h, info in self.hosts.items()}

    def first_us(self) -> typing.Optional[int]:
        """The earliest start of a request or an RPC span on the
        corrected clock (None: none read)."""
        offsets = self.offsets()
        return min(
            (ts + offsets.get(h, 0) for h, ts in self.first_of_host.items()),
            default=None,
        )

    def to_dict(self) -> dict:
        return {
            'hosts': self.hosts,
            'dropped': self.dropped,
            'groups': self.groups,
            'pairs': self.pairs,
        }


def _relax(dist: numpy.ndarray, u: int, v: int, w: float) -> None:
    """Add edge ``u -> v`` (``o[v] - o[u] <= w``) to the closed matrix."""
    if dist[u, v] <= w:
        return
    numpy.minimum(
        dist, dist[:, u][:, None] + w + dist[v, :][None, :], out=dist
    )


def centre(low: float, high: float) -> int:
    """The offset chosen in the feasible interval ``[low, high]``: its
    centre, rounded down (so that a clock shifted by ``d`` moves it by
    exactly ``d``); bounded on one side only, that end; unbounded (not
    reached by ``place``), 0."""
    if low > -INF and high < INF:
        return (int(low) + int(high)) // 2
    if low > -INF:
        return int(low)
    if high < INF:
        return int(high)
    return 0


def place(
    dist: numpy.ndarray, members: typing.Sequence[int], ref: int
) -> dict:
    """``{host index: offset}`` of one group's hosts, the narrowest
    interval first, each at the centre of its own feasible interval or
    as near to it as the hosts already placed allow (see the module's
    docstring, step 3).

    ``dist`` is the closed matrix (unchanged).  Once hosts are placed,
    a host's interval given their offsets is the least, over
    the placed hosts ``f`` (the reference at 0 among them), of
    ``o[f] + dist[f, h]`` above and ``o[f] - dist[h, f]`` below: a
    shortest path from the reference through equalities leaves them at
    the last placed host it visits.  So each placement costs one row
    and one column, not a new closure."""
    free = numpy.array(sorted(set(members) - {ref}), dtype=numpy.int64)
    high = dist[ref, :].copy()
    neg_low = dist[:, ref].copy()
    out = {ref: 0}
    while len(free):
        hi = high[free]
        lo = -neg_low[free]
        open_ends = numpy.isinf(hi).astype(numpy.int64) + numpy.isinf(
            lo
        ).astype(numpy.int64)
        with numpy.errstate(invalid='ignore'):
            width = numpy.where(open_ends > 0, INF, hi - lo)
        k = int(numpy.lexsort((free, width, open_ends))[0])
        i = int(free[k])
        # its own centre, or the nearest offset the hosts placed allow
        # (a host bounded on neither side alone: the centre of what
        # they leave it, which has an end)
        own = (float(-dist[i, ref]), float(dist[ref, i]))
        if own == (-INF, INF):
            own = (float(lo[k]), float(hi[k]))
        value = centre(*own)
        if value < lo[k]:
            value = int(lo[k])
        elif value > hi[k]:
            value = int(hi[k])
        out[i] = value
        free = numpy.delete(free, k)
        numpy.minimum(high, value + dist[i, :], out=high)
        numpy.minimum(neg_low, dist[:, i] - value, out=neg_low)
    return out


def _tree(
    dist: numpy.ndarray,
    direct: numpy.ndarray,
    members: list,
    ref: int,
    toward: bool,
) -> dict:
    """The fewest-hop shortest paths between ``ref`` and each member,
    as ``{host: next host}``: towards ``ref`` (``toward``: the paths
    ``h -> ref`` that make each lower end) or from it (``h``'s
    predecessor on ``ref -> h``, the upper ends).  An edge is on a
    shortest path when its bound and the rest of the path add up to
    the shortest distance (integers, exact in floats)."""
    m = numpy.array(members, dtype=numpy.int64)
    sub = direct[numpy.ix_(m, m)]
    if toward:
        d = dist[m, ref]
        with numpy.errstate(invalid='ignore'):
            tight = (sub + d[None, :] == d[:, None]) & numpy.isfinite(sub)
        # from the reference backwards: u joins when u -> v is tight
        # and v is reached
        tight = tight.T
    else:
        d = dist[ref, m]
        with numpy.errstate(invalid='ignore'):
            tight = (d[:, None] + sub == d[None, :]) & numpy.isfinite(sub)
    pos = {int(h): j for j, h in enumerate(m)}
    out = {}
    frontier = [pos[ref]]
    seen = {pos[ref]}
    while frontier:
        nxt: list[int] = []
        for j in frontier:
            for k in numpy.flatnonzero(tight[j]).tolist():
                if k not in seen:
                    seen.add(k)
                    out[int(m[k])] = int(m[j])
                    nxt.append(k)
        frontier = nxt
    return out


def _path(tree: dict, host: int, ref: int, toward: bool) -> list:
    """The edges ``(u, v)`` of ``host``'s path in ``tree``, from the
    reference's end to the host's."""
    edges = []
    h = host
    while h != ref and h in tree and len(edges) <= len(tree):
        nxt = tree[h]
        edges.append((h, nxt) if toward else (nxt, h))
        h = nxt
    edges.reverse()
    return edges


def _describe(
    edges: list, direct: numpy.ndarray, why: dict, names: list
) -> list:
    """Each bound of a path as ``{kind, parent, child, bound_us,
    origin}``: the hop that made it."""
    out = []
    for u, v in edges:
        origin, kind = why[(u, v)]
        # edge u -> v is the bound o[v] - o[u] <= w, added as
        # add(v, u): a send bound is add(parent, child), a reply
        # bound add(child, parent)
        parent, child = (v, u) if kind == SEND else (u, v)
        out.append(
            {
                'kind': kind,
                'parent': names[parent],
                'child': names[child],
                'bound_us': int(direct[u, v]),
                'origin': origin,
            }
        )
    return out


# hosts up to which ``closure`` runs Floyd-Warshall in numpy (n steps
# of an n x n minimum: under a millisecond for 100 hosts); above, scipy's
# Johnson, imported then (importing it costs a quarter of a CPU second,
# more than the solve)
DENSE_HOSTS = 256


def closure(direct: numpy.ndarray) -> typing.Optional[numpy.ndarray]:
    """The all-pairs shortest paths of the edges ``direct`` (INF: none;
    the diagonal is 0), or None when they close a negative cycle.  The
    bounds are integers (microseconds), so every sum is exact and both
    algorithms give the same distances."""
    n = len(direct)
    if n > DENSE_HOSTS:
        return _johnson(direct)
    dist = numpy.array(direct, dtype=numpy.float64)
    if (dist.diagonal() < 0).any():
        return None
    numpy.fill_diagonal(dist, 0.0)
    for k in range(n):
        numpy.minimum(dist, dist[:, k, None] + dist[None, k, :], out=dist)
    if (dist.diagonal() < 0).any():
        return None
    return dist


def _johnson(direct: numpy.ndarray) -> typing.Optional[numpy.ndarray]:
    """``closure`` by Johnson's algorithm (scipy: the graph is
    sparse)."""
    from scipy.sparse import csgraph

    graph = csgraph.csgraph_from_dense(direct, null_value=INF)
    try:
        return csgraph.shortest_path(graph, method='J')
    except csgraph.NegativeCycleError:
        return None


def _consistent(
    collector: PairCollector, names: list, index: dict, result: ClockResult
) -> tuple:
    """``(dist, direct, why)`` of the bounds that do not contradict the
    others (step 1 of the module's docstring), those that do dropped
    into ``result``.  Only when the tightest bounds close a negative
    cycle: each bound costs an update of the whole matrix."""
    n = len(names)
    dist = numpy.full((n, n), INF)
    numpy.fill_diagonal(dist, 0.0)
    direct = numpy.full((n, n), INF)
    why = {}
    edges = []
    for (a, b), lst in collector.bounds.items():
        # How much tighter than its pair's typical bound each one is:
        # a bad pair (a clock step, a stalled read) stands out from the
        # bounds of its host pair, whatever the direction or the size of
        # the offset, so ranking by it makes the outliers the ones left
        # out when bounds contradict each other.
        typical = lst[len(lst) // 2][0]
        for w, origin, kind in lst:
            # o[a] - o[b] <= w  is the edge b -> a of weight w
            edges.append((typical - w, w, index[b], index[a], origin, kind))
    edges.sort(key=lambda e: (e[0], -e[1]))
    for _tightness, w, u, v, origin, kind in edges:
        if dist[v, u] + w < 0:
            result.dropped.append(
                {
                    'a': names[v],
                    'b': names[u],
                    'bound_us': w,
                    'origin': origin,
                    'reason': 'needs %s - %s <= %d us, other pairs need at '
                    'least %d us' % (names[v], names[u], w, -dist[v, u]),
                }
            )
            continue
        _relax(dist, u, v, w)
        if w < direct[u, v]:
            direct[u, v] = w
            why[(u, v)] = (origin, kind)
    return dist, direct, why


def solve(
    collector: PairCollector, hosts: typing.Iterable[str] = ()
) -> ClockResult:
    """Offsets for every host in ``hosts`` and in the collected pairs."""
    result = ClockResult()
    result.pairs = collector.pairs
    names = sorted(set(hosts) | {h for pair in collector.bounds for h in pair})
    index = {h: i for i, h in enumerate(names)}
    n = len(names)
    # the tightest bound of each edge, and where it came from
    direct = numpy.full((n, n), INF)
    why = {}
    for (a, b), lst in collector.bounds.items():
        w, origin, kind = lst[0]
        # o[a] - o[b] <= w  is the edge b -> a of weight w
        direct[index[b], index[a]] = w
        why[(index[b], index[a])] = (origin, kind)
    dist = closure(direct)
    if dist is None:
        dist, direct, why = _consistent(collector, names, index, result)
    linked = [set() for _ in range(n)]
    for u, v in zip(*numpy.nonzero(numpy.isfinite(direct)), strict=True):
        linked[int(u)].add(int(v))
        linked[int(v)].add(int(u))
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
        groups.append(sorted(members))
    result.groups = len(groups)
    per_host = collector.per_host
    for g, members in enumerate(groups):
        ref = max(members, key=lambda i: (per_host.get(names[i], 0), -i))
        offsets = place(dist, members, ref)
        down = _tree(dist, direct, members, ref, True)
        up = _tree(dist, direct, members, ref, False)
        for i in members:
            value = offsets[i]
            if i == ref:
                result.hosts[names[i]] = {
                    'offset_us': 0,
                    'low_us': 0,
                    'high_us': 0,
                    'width_us': 0,
                    'error_us': 0,
                    'low_by': [],
                    'high_by': [],
                    'group': g,
                    'status': 'reference',
                    'pairs': per_host.get(names[i], 0),
                }
                continue
            low = -dist[i, ref]
            high = dist[ref, i]
            two_sided = low > -INF and high < INF
            result.hosts[names[i]] = {
                'offset_us': value,
                'low_us': None if low == -INF else int(low),
                'high_us': None if high == INF else int(high),
                'width_us': int(high - low) if two_sided else None,
                'error_us': int(max(value - low, high - value))
                if two_sided
                else None,
                'low_by': None
                if low == -INF
                else _describe(_path(down, i, ref, True), direct, why, names),
                'high_by': None
                if high == INF
                else _describe(_path(up, i, ref, False), direct, why, names),
                'group': g,
                'status': 'corrected' if two_sided else 'one-sided',
                'pairs': per_host.get(names[i], 0),
            }
    for name in names:
        if name not in result.hosts:
            result.hosts[name] = {
                'offset_us': 0,
                'low_us': None,
                'high_us': None,
                'width_us': None,
                'error_us': None,
                'low_by': None,
                'high_by': None,
                'group': None,
                'status': 'uncorrected',
                'pairs': 0,
            }
    return result
