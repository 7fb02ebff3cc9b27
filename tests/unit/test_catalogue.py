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
"""The operation catalogue (``instrument.catalogue``) is what both
halves use: the nova target's points and the analyser's operation
rules are made from it, and what it says holds together."""

import ast
import sys

import fixtures
import testtools

from instrument import catalogue
from instrument import events
from instrument import schema
from instrument.analysis.model import classify
from instrument.analysis.model import operations
from instrument.analysis.model import spans as spans_mod
from instrument.patching import points as points_mod
from instrument.targets import nova
from instrument.targets.nova import steps
from tests.unit.analysis import test_architecture


def _spans(*entries):
    """A request's spans: ``(sid, ev, svc, start, dur, parent, st,
    attrs, inst)`` in the layout of ``model.spans``."""
    out = {}
    for sid, ev, svc, start, dur, parent, st, attrs, inst in entries:
        entry: list = [None] * (spans_mod.S_INST + 1)
        entry[spans_mod.S_EV] = ev
        entry[spans_mod.S_HOST] = 'h'
        entry[spans_mod.S_SVC] = svc
        entry[spans_mod.S_START] = start
        entry[spans_mod.S_DUR] = dur
        entry[spans_mod.S_PARENT] = parent
        entry[spans_mod.S_ST] = st
        entry[spans_mod.S_ATTRS] = attrs
        entry[spans_mod.S_INST] = inst
        out[sid] = entry
    return out


class RuntimeTest(testtools.TestCase):
    """The nova target's span points are the catalogue's steps."""

    def test_each_step_is_one_span_point_at_its_place(self):
        spans = [p for p in nova.points() if p.kind == points_mod.SPAN]
        by_event: dict = {}
        for point in spans:
            by_event.setdefault(point.event, []).append(point)
        for step in catalogue.STEPS:
            [point] = by_event.pop(step.event)
            self.assertEqual(
                (step.module, step.target, step.service),
                (point.module, point.target, point.service),
                step.event,
            )
        # the others: the API's cells (not a step of one operation)
        self.assertEqual(
            {nova.EV_SCATTER_GATHER, nova.EV_CELL_QUERY}, set(by_event)
        )

    def test_readers_are_of_steps(self):
        self.assertEqual(
            [], sorted(set(steps.reads_of()) - set(catalogue.STEP_OF))
        )

    def test_steps_of_a_service_read_the_instance_and_host(self):
        point = steps.point(catalogue.STEP_OF['compute.stop_instance'])
        self.assertEqual('instance', point.instances.name)
        self.assertIsInstance(point.host, points_mod.SelfAttr)
        api = steps.point(catalogue.STEP_OF['api.compute.stop'])
        self.assertEqual('instance', api.instances.name)
        self.assertIsNone(api.host)
        # a step of no service of its own: neither
        weigh = steps.point(catalogue.STEP_OF['scheduler.weigh'])
        self.assertIsNone(weigh.instances)
        self.assertIsNone(weigh.host)


class CatalogueTest(testtools.TestCase):
    def test_every_event_an_operation_names_is_a_step(self):
        for op in catalogue.OPERATIONS:
            self.assertEqual(
                [], sorted(op.events() - set(catalogue.STEP_OF)), op.name
            )

    def test_every_failure_is_a_state_of_its_operation(self):
        for op in catalogue.OPERATIONS:
            for ev, state in op.fail.items():
                self.assertIn(state, op.states, (op.name, ev))
            self.assertIn(catalogue.SUCCESS, op.states, op.name)

    def test_routes_and_actions_name_one_operation(self):
        seen: dict = {}
        for op in catalogue.OPERATIONS:
            for key in op.routes + op.actions:
                self.assertNotIn(key, seen, (op.name, seen.get(key)))
                seen[key] = op.name

    def test_schema_operations_are_the_catalogue(self):
        self.assertEqual(schema.OPERATIONS, catalogue.NAMES)
        self.assertEqual(schema.OP_BOOT, catalogue.OPERATIONS[0].name)
        self.assertEqual('other', schema.OPERATIONS[-1])

    def test_boot_reschedule_reads_the_outcome_the_runtime_writes(self):
        boot = catalogue.OPERATION_OF[schema.OP_BOOT]
        self.assertEqual(schema.ATTR_OUTCOME, boot.reschedule.outcome_attr)
        self.assertIn(boot.reschedule.build, boot.attempts)
        self.assertIn(boot.reschedule.given_up, boot.fail)


class AnalyserTest(testtools.TestCase):
    """The analyser's rules are the catalogue's."""

    def test_specs_of_every_operation(self):
        self.assertEqual(
            {op.name for op in catalogue.OPERATIONS}, set(operations.SPECS)
        )
        for op in catalogue.OPERATIONS:
            spec = operations.SPECS[op.name]
            self.assertEqual(
                (
                    frozenset(op.done),
                    dict(op.fail),
                    frozenset(op.attempts),
                    op.states,
                ),
                (spec.done, spec.fail, spec.attempts, spec.states),
                op.name,
            )
            self.assertEqual(op.states, operations.states_of(op.name))

    def test_boot_events_are_the_catalogue_boots(self):
        boot = catalogue.OPERATION_OF[schema.OP_BOOT]
        self.assertEqual(boot.events(), classify.BOOT_EVENTS)
        self.assertEqual(boot.states, operations.states_of(schema.OP_BOOT))
        self.assertEqual(
            {'conductor.schedule', 'scheduler.select_destinations'},
            classify.SCHEDULE_EVENTS,
        )

    def test_each_step_names_its_operation_downstream(self):
        for op in catalogue.OPERATIONS:
            for ev in op.steps:
                spans = _spans(
                    (1, ev, 'compute', 0, 5, None, 'ok', {}, ['i-1'])
                )
                self.assertEqual(op.name, operations.operation_of(spans), ev)

    def test_each_route_and_action_names_its_operation(self):
        for op in catalogue.OPERATIONS:
            for method, route in op.routes:
                self.assertEqual(
                    op.name,
                    operations.route_operation(
                        {
                            schema.ATTR_METHOD: method,
                            schema.ATTR_ROUTE: '/v2.1/servers' + route,
                        }
                    ),
                )
            for action in op.actions:
                self.assertEqual(
                    op.name,
                    operations.route_operation(
                        {
                            schema.ATTR_METHOD: 'POST',
                            schema.ATTR_ROUTE: '/v2.1/servers/{id}/action',
                            schema.ATTR_ACTION: action,
                        }
                    ),
                )

    def test_done_step_ends_the_operation(self):
        # an operation of one host: its done step's success is success
        for op in catalogue.OPERATIONS:
            if (
                op.api_only
                or op.reschedule is not None
                or len(op.done) != 1
                or op.rollback
            ):
                continue
            spans = _spans(
                (1, op.done[0], 'compute', 0, 5, None, 'ok', {}, ['i-1'])
            )
            [row] = operations.final_states(op.name, spans_mod.Tree(spans))
            self.assertEqual(catalogue.SUCCESS, row['state'], op.name)


class AddingAnOperationTest(testtools.TestCase):
    """doc/source/architecture.rst's "Adding an operation", run as
    written: its entries added to the catalogue give the runtime its
    points and the analyser its rules."""

    def setUp(self):
        super().setUp()
        code = test_architecture.blocks()
        names = dict(vars(catalogue))
        self.steps = eval(  # noqa: S307
            '(%s)' % code['operation-steps'],
            names,
        )
        op = eval(  # noqa: S307
            code['operation-entry'].rstrip().rstrip(','),
            names,
        )
        self.op = op
        made = operations.rules(catalogue.OPERATIONS + (op,))
        for name, value in (
            ('SPECS', made.specs),
            ('_API', made.api),
            ('_DOWNSTREAM', made.downstream),
            ('_ROUTES', made.routes),
            ('_ACTIONS', made.actions),
        ):
            self.useFixture(
                fixtures.MonkeyPatch(
                    'instrument.analysis.model.operations.' + name, value
                )
            )

    def test_the_runtime_patches_its_steps(self):
        made = {p.event: p for p in steps.points(catalogue.STEPS + self.steps)}
        api = made['api.compute.suspend']
        self.assertEqual(
            ('nova.compute.api', 'API.suspend', 'api'),
            (api.module, api.target, api.service),
        )
        step = made['compute.suspend_instance']
        self.assertEqual(
            (
                'nova.compute.manager',
                'ComputeManager.suspend_instance',
                'compute',
            ),
            (step.module, step.target, step.service),
        )
        self.assertEqual('instance', step.instances.name)
        self.assertIsInstance(step.host, points_mod.SelfAttr)
        declared = {
            e.name: e for e in events.table(catalogue.STEPS + self.steps)
        }
        self.assertEqual(
            events.NOVA, declared['compute.suspend_instance'].emitter
        )
        self.assertEqual(
            'compute', declared['compute.suspend_instance'].component
        )

    def _request(self, st='ok'):
        return _spans(
            (
                1,
                schema.EV_API_REQUEST,
                'api',
                0,
                50,
                None,
                'ok',
                {
                    schema.ATTR_METHOD: 'POST',
                    schema.ATTR_ROUTE: '/v2.1/servers/{id}/action',
                    schema.ATTR_STATUS: 202,
                },
                None,
            ),
            (2, 'api.compute.suspend', 'api', 1, 20, 1, 'ok', {}, ['i-1']),
            (
                3,
                'compute.suspend_instance',
                'compute',
                30,
                40,
                2,
                st,
                {},
                ['i-1'],
            ),
        )

    def test_the_analyser_names_it_and_gives_its_states(self):
        spans = self._request()
        self.assertEqual('suspend', operations.operation_of(spans))
        [row] = operations.final_states('suspend', spans_mod.Tree(spans))
        self.assertEqual(catalogue.SUCCESS, row['state'])
        spans = self._request('error')
        [row] = operations.final_states('suspend', spans_mod.Tree(spans))
        self.assertEqual(catalogue.COMPUTE_FAILURE, row['state'])
        # refused before API.suspend: the action it asked for
        self.assertEqual(
            'suspend',
            operations.route_operation(
                {
                    schema.ATTR_METHOD: 'POST',
                    schema.ATTR_ROUTE: '/v2.1/servers/{id}/action',
                    schema.ATTR_ACTION: 'suspend',
                }
            ),
        )
        self.assertEqual(self.op.states, operations.states_of('suspend'))


class ContractTest(testtools.TestCase):
    """The contract's modules import nothing but the standard library
    and each other, so that both halves can import them."""

    def test_imports(self):
        allowed = {'instrument.catalogue', 'instrument.events'}
        for module in (catalogue, events, schema):
            with open(module.__file__) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [
                        '%s.%s' % (node.module, a.name) for a in node.names
                    ]
                else:
                    continue
                for name in names:
                    top = name.split('.')[0]
                    self.assertTrue(
                        name in allowed or top in sys.stdlib_module_names,
                        '%s imports %s' % (module.__name__, name),
                    )
