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
"""Exclusive time, SQL inside components, queue waits, critical path."""

import array
import pickle

import testtools

from instrument.analysis import breakdown
from instrument.analysis import classify
from instrument.analysis import requests


def span(ev, start, dur, parent=None, svc='conductor', host='ctl', pid=1):
    return [ev, host, svc, pid, start, dur, parent, 'ok', None, None, None]


def summarise(spans, sql=None):
    r = requests.OpenRequest('req-x')
    r.spans = spans
    r.sql = sql or {}
    r.last = max(s[4] + (s[5] or 0) for s in spans.values())
    return breakdown.summarise(r, classify.Tree(spans, r.sql_errors))


class ExclusiveTimeTest(testtools.TestCase):

    def test_nesting_not_double_counted(self):
        spans = {
            'p': span('conductor.schedule', 0, 100),
            # two overlapping children (threads): union is 10..60
            'a': span('scheduler.filter', 10, 40, 'p', svc='scheduler'),
            'b': span('scheduler.weigh', 30, 30, 'p', svc='scheduler'),
        }
        s = summarise(spans, {'p': [15, 2, 'conductor', 'ctl', 1]})
        self.assertEqual(100 - 50 - 15, s.comp['conductor'])
        self.assertEqual(70, s.comp['scheduler'])
        self.assertEqual({'conductor': 15}, s.sql_in)
        self.assertEqual(100, s.latency)

    def test_sync_call_and_async_cast(self):
        spans = {
            'c': span('rpc.call', 0, 100, host='a', pid=1),
            'd': span('rpc.dispatch', 20, 60, 'c', host='b', pid=2),
            'k': span('rpc.cast', 100, 5, host='a', pid=1),
            'e': span('rpc.dispatch', 130, 10, 'k', host='b', pid=2),
        }
        s = summarise(spans)
        # call: 100 - 60 nested; dispatches 60 + 10; cast 5
        self.assertEqual(40 + 60 + 10 + 5, s.comp['rpc'])
        self.assertEqual(25, s.comp['rpc.queue'])
        self.assertEqual(s.latency, sum(s.cp.values()))
        self.assertEqual(25, s.cp['rpc.queue'])

    def test_critical_path_follows_latest_branch(self):
        spans = {
            'r': span('api.request', 0, 10, svc='api'),
            'x': span('compute.build', 5, 100, 'r', svc='compute',
                      host='c1', pid=2),
            'y': span('compute.build', 5, 50, 'r', svc='compute',
                      host='c2', pid=3),
            'z': span('compute.spawn', 20, 80, 'x', svc='compute',
                      host='c1', pid=2),
        }
        s = summarise(spans)
        self.assertEqual(105, s.latency)
        self.assertEqual(105, sum(s.cp.values()))
        self.assertEqual(80, s.cp['compute.spawn'])
        self.assertIn('x', s.critical)
        self.assertNotIn('y', s.critical)

    def test_lifecycle_made_later_is_the_same(self):
        spans = {
            'r': span('api.request', 0, 10, svc='api'),
            'x': span('compute.build', 5, 100, 'r', svc='compute',
                      host='c1', pid=2),
            'y': span('compute.build', 5, None, 'r', svc='compute',
                      host='c2', pid=3),
            'z': span('compute.spawn', 20, 80, 'x', svc='compute',
                      host='c1', pid=2),
        }
        spans['y'][classify.S_ST] = None  # started, never ended
        r = requests.OpenRequest('req-x')
        r.spans = spans
        r.sql = {'z': [7, 1, 'compute', 'c1', 2]}
        r.last = 120
        tree = classify.Tree(spans)
        now = breakdown.summarise(r, tree)
        later = breakdown.summarise(r, tree, keep_lifecycle=False)
        self.assertIsNone(later.lifecycle)
        breakdown.add_lifecycle(later, r)
        self.assertEqual(now.lifecycle, later.lifecycle)
        self.assertEqual(4, len(later.lifecycle))
        # the open span runs to the request's end and is on the path
        self.assertEqual((5, None, 'c2', 'compute', 'compute.build',
                          'open', 0, None, True), later.lifecycle[2])

    def test_compact_times_read_back(self):
        spans = {
            'p': span('conductor.schedule', 0, 100),
            'a': span('scheduler.filter', 10, 40, 'p', svc='scheduler'),
        }
        s = summarise(spans, {'p': [15, 2, 'conductor', 'ctl', 1]})
        self.assertEqual({'conductor': 45, 'scheduler': 40}, s.comp)
        self.assertIsInstance(s._comp[1], array.array)
        again = pickle.loads(pickle.dumps(s))  # noqa: S301 - our own data
        self.assertIsNot(s._comp[0], again._comp[0])
        again.intern()
        self.assertIs(s._comp[0], again._comp[0])
        self.assertEqual(s.to_dict(), again.to_dict())
        # values that are not 64-bit integers are kept as they are
        s.cp = {'x': 1 << 70, 'y': 0.5}
        self.assertEqual({'x': 1 << 70, 'y': 0.5}, s.cp)

    def test_stats_and_levels(self):
        st = breakdown.stats(range(1, 101))
        self.assertEqual(1, st['min'])
        self.assertEqual(100, st['max'])
        self.assertAlmostEqual(50.5, st['median'])
        self.assertEqual({'count': 0}, breakdown.stats([]))
        self.assertEqual('1', breakdown.level_label(1))
        self.assertEqual('4-7', breakdown.level_label(5))
        conc = breakdown.concurrency([0, 10, 20], [30, 40, 50])
        self.assertEqual([1, 2, 3], list(conc['at_start']))
        self.assertEqual(3, conc['max'])
