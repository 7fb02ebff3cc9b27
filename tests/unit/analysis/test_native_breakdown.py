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
"""The span loops of a request's summary in C
(instrument._native._breakdown) against their pure-Python twins
(``breakdown._times``, ``breakdown._critical_path``,
``spans.links``, ``classify._outcomes``): the same values,
in dicts filled in the same order, over random requests (open spans,
SQL, asynchronous sends, spans in other processes, lost parents,
equal ends); the same answer from ``summarise`` and ``critical_path``
when C refuses what it is given (a time beyond 62 bits, an entry that
is not a list); and INSTRUMENT_PURE_PYTHON=1 choosing the twins.

Skipped when the extension is not built, except under CI=true, where
the machine has a compiler and a missing build is a failure."""

import os
import random
import subprocess
import sys

import fixtures
import testtools

from instrument.analysis.model import breakdown
from instrument.analysis.model import classify
from instrument.analysis.model import spans as spans_mod
from tests import native

EVENTS = (
    'api.request',
    'rpc.call',
    'rpc.cast',
    'rpc.dispatch',
    'conductor.schedule',
    'scheduler.select',
    'compute.build',
    'compute.spawn',
    'ksa.request',
    'no.such.event',
    classify.EV_BUILD,
    classify.EV_BURY,
    classify.EV_RESCHEDULE_FAILED,
) + tuple(sorted(classify.SCHEDULE_EVENTS))


def _request(rng: random.Random) -> spans_mod.OpenRequest:
    """A random request: a forest of spans, some open, some with SQL."""
    r = spans_mod.OpenRequest('req-%d' % rng.randrange(1 << 30))
    sids: list = []
    for i in range(rng.randrange(0, 40)):
        sid = rng.choice(('s%d' % i, i))
        parent = None
        if sids and rng.random() < 0.85:
            parent = rng.choice(sids)
        elif rng.random() < 0.3:
            parent = 'lost-%d' % i  # a parent never read
        start = rng.randrange(0, 2000)
        if rng.random() < 0.1:
            dur = None
        else:
            dur = rng.choice((0, rng.randrange(0, 1500), 100))
        if rng.random() < 0.05:
            start, dur = -5, 5  # (an end of 0: ``end or start``)
        ev = rng.choice(EVENTS)
        attrs = (
            {'service_type': rng.choice(('placement', 'volumev3', 1))}
            if rng.random() < 0.5
            else None
        )
        r.spans[sid] = [
            ev,
            rng.choice(('h1', 'h2')),
            rng.choice(('nova-api', 'nova-compute', 'other')),
            rng.choice((1, 2, 3)),
            start,
            dur,
            parent,
            None if dur is None else rng.choice(('ok', 'error')),
            rng.choice((None, {'cls': 'E'})),
            attrs,
            rng.choice((None, [], ['i1'], ['i1', 'i2'])),
        ]
        sids.append(sid)
        if rng.random() < 0.3:
            r.sql[sid] = [rng.randrange(0, 300), 2, 'nova-api', 'h1', 1]
    if rng.random() < 0.3:
        r.sql['nowhere'] = [rng.randrange(0, 300), 1, 'nova-api', 'h1', 1]
    r.last = rng.randrange(0, 3000)
    return r


def _same(test, a, b):
    """Equal values, of the same types; dicts in the same order."""
    test.assertEqual(type(a), type(b))
    test.assertEqual(a, b)
    if isinstance(a, dict):
        test.assertEqual(list(a.items()), list(b.items()))
    if isinstance(a, (tuple, list)):
        for x, y in zip(a, b, strict=True):
            _same(test, x, y)


class NativeBreakdownTest(testtools.TestCase):
    def setUp(self):
        super().setUp()
        self.ext = native.extension(self, '_breakdown')

    def _times(self, r, tree):
        return self.ext.times(
            r.spans,
            r.sql,
            tree.children,
            breakdown.EVENTS,
            breakdown.SERVICE,
            breakdown.service_component,
            breakdown.SYNC,
            breakdown.DISPATCH,
            breakdown.QUEUE,
            r.last,
        )

    def _path(self, tree, t, gaps):
        return self.ext.critical_path(
            tree.spans,
            tree.children,
            tree.roots,
            t[2],
            t[3],
            t[0],
            t[1],
            gaps,
            breakdown.SYNC,
            breakdown.DISPATCH,
            breakdown.QUEUE,
            breakdown.GAP,
        )

    def test_random_requests(self):
        rng = random.Random(31)
        for _ in range(3000):
            r = _request(rng)
            tree = spans_mod.Tree(r.spans, r.sql_errors)
            _same(self, spans_mod.links(r.spans), self.ext.tree(r.spans))
            _same(self, spans_mod.links(r.spans), (tree.children, tree.roots))
            for inst in (None, 'i1', 'i2'):
                _same(
                    self,
                    classify._outcomes(r.spans, inst),
                    self.ext.outcomes(
                        r.spans,
                        inst,
                        classify.EV_BUILD,
                        classify.SCHEDULE_EVENTS,
                        classify.EV_BURY,
                        classify.EV_RESCHEDULE_FAILED,
                    ),
                )
            want = breakdown._times(r.spans, r.sql, tree.children, r.last)
            got = self._times(r, tree)
            _same(self, want, got)
            if not r.spans:
                continue
            gaps_py: dict = {}
            gaps_c: dict = {}
            _same(
                self,
                breakdown._critical_path(
                    tree, want[2], want[0], want[1], want[3], gaps_py
                ),
                self._path(tree, want, gaps_c),
            )
            _same(self, gaps_py, gaps_c)
            self.assertEqual(
                self._path(tree, want, None)[0],
                breakdown._critical_path(
                    tree, want[2], want[0], want[1], want[3], None
                )[0],
            )

    def test_refuses_what_it_does_not_take(self):
        big = 1 << 62
        for spans in (
            {'a': ['rpc.call', 'h', 's', 1, big, 5, None, 'ok', None, None]},
            {'a': ['rpc.call', 'h', 's', 1, 0, big, None, 'ok', None, None]},
            {'a': ('rpc.call', 'h', 's', 1, 0, 5, None, 'ok', None, None)},
            {'a': ['rpc.call', 'h', 's', 1, 0.5, 5, None, 'ok', None, None]},
            {'a': ['rpc.call', 'h', 's', 1, True, 5, None, 'ok', None, None]},
        ):
            spans['a'] = type(spans['a'])(list(spans['a']) + [None])
            r = spans_mod.OpenRequest('req')
            r.spans = spans
            tree = spans_mod.Tree(spans)
            self.assertRaises((TypeError, OverflowError), self._times, r, tree)
        # a span entry of another shape: Tree's links from the twin
        spans = {'a': ('ev', 'h', 's', 1, 0, 5, None), 'b': ('ev',) * 7}
        spans['b'] = ('ev', 'h', 's', 1, 0, 5, 'a')
        self.assertRaises(TypeError, self.ext.tree, spans)
        tree = spans_mod.Tree(spans)
        self.assertEqual(({'a': ['b']}, ['a']), (tree.children, tree.roots))

    def test_refused_requests_get_the_twins_answer(self):
        # a time beyond 62 bits: C refuses, summarise answers as Python
        start = (1 << 62) + 5
        spans = {
            'a': ['api.request', 'h', 'api', 1, start, 10, None, 'ok']
            + [None, None, None],
            'b': ['rpc.call', 'h', 'api', 1, start + 2, 5, 'a', 'ok']
            + [None, None, None],
        }

        def summary():
            r = spans_mod.OpenRequest('req')
            r.spans = {k: list(v) for k, v in spans.items()}
            r.last = start + 10
            out = breakdown.summarise(r, spans_mod.Tree(r.spans))
            return (out.start, out.end, out.comp, out.cp, out.critical)

        got = summary()
        for name in ('_native_times', '_native_critical_path'):
            self.useFixture(
                fixtures.MonkeyPatch(
                    'instrument.analysis.model.breakdown.' + name, None
                )
            )
        _same(self, summary(), got)
        self.assertEqual(start + 10, got[1])

    def test_pure_python_switch(self):
        code = (
            'from instrument.analysis.model import breakdown; '
            'from instrument.analysis.model import spans, classify; '
            'print(breakdown._native_times is None, '
            'breakdown._native_critical_path is None, '
            'spans._native_links is None, '
            'classify._native_outcomes is None)'
        )
        for value, want in (
            ('1', 'True True True True'),
            ('0', 'False False False False'),
        ):
            out = subprocess.run(
                [sys.executable, '-c', code],
                capture_output=True,
                text=True,
                check=True,
                env=dict(os.environ, INSTRUMENT_PURE_PYTHON=value),
            ).stdout.strip()
            self.assertEqual(want, out)
