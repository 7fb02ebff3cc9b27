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
"""Tests of the nova-api paste filter (a plain WSGI app stands in)."""

import importlib
import io
import os
import time

import fixtures

from instrument import loaders as loader
from instrument.loaders import paste
from instrument.patching import points as points_mod
from instrument.runtime import lifecycle
from instrument.runtime import recorder as recorder_mod
from tests.unit import base

NOVA_PIPELINE = '''[composite:openstack_compute_api_v21]
use = call:nova.api.auth:pipeline_factory_v21
keystone = cors compute_req_id faultwrap keystonecontext osapi_compute_app_v21

[pipeline:oscomputeversions]
pipeline = cors faultwrap request_log http_proxy_to_wsgi oscomputeversionapp
'''


class Ctx:
    request_id = 'req-from-context'
    global_request_id = None


def app(status):
    def application(environ, start_response):
        environ['nova.context'] = Ctx()
        start_response(status, [('Content-Type', 'application/json')])
        return [b'{}']

    return application


class PasteFilterTest(base.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
        self.conf = self.make_conf(sql_timing=False)

    def call(self, status, method='POST', path='/servers', **extra):
        middleware = paste.filter_factory({})(app(status))
        middleware.conf = self.conf
        environ = {
            'REQUEST_METHOD': method,
            'SCRIPT_NAME': '/v2.1',
            'PATH_INFO': path,
            'openstack.request_id': 'req-from-header',
            **extra,
        }
        body = middleware(environ, lambda s, h, e=None: None)
        self.assertEqual([b'{}'], list(body))
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        return [r for r in records if r['ev'] == 'api.request']

    def test_records_the_request(self):
        [span] = self.call('202 Accepted')
        self.assertEqual('X', span['ph'])
        self.assertEqual('api', span['svc'])
        self.assertEqual('ok', span['st'])
        # the id the span began with (its B, SQL before nova's context)
        self.assertEqual(
            {
                'method': 'POST',
                'route': '/v2.1/servers',
                'status': 202,
                'req_began': 'req-from-header',
            },
            span['attrs'],
        )
        # The request id nova carries downstream, not the header's.
        self.assertEqual('req-from-context', span['req'])

    def test_the_wait_before_the_filter_from_a_proxy_header(self):
        # issue 29 rule 8: a proxy stamped the arrival 250 ms ago
        arrived = time.time() - 0.25
        [span] = self.call(
            '200 OK', 'GET', HTTP_X_REQUEST_START='t=%d' % (arrived * 1e6)
        )
        self.assertGreaterEqual(span['attrs']['queue_us'], 250_000)
        self.assertLess(span['attrs']['queue_us'], 250_000 + 5_000_000)

    def test_no_arrival_time_no_queue_attribute(self):
        [span] = self.call('200 OK', 'GET')
        self.assertNotIn('queue_us', span['attrs'])

    def test_garbage_header_records_the_request_without_a_queue(self):
        [span] = self.call('200 OK', 'GET', HTTP_X_REQUEST_START='t=soon')
        self.assertEqual('ok', span['st'])
        self.assertNotIn('queue_us', span['attrs'])
        # counted in the process's instrument.faults record
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        [counts] = [
            r['attrs'] for r in records if r['ev'] == 'instrument.faults'
        ]
        self.assertEqual(
            1, counts['the paste filter: unreadable arrival time']
        )

    def test_one_request_id_is_named_once(self):
        # keystone's context takes the environ's id: nothing to rejoin
        self.patch(Ctx, 'request_id', 'req-from-header')
        [span] = self.call('200 OK', 'GET')
        self.assertEqual('req-from-header', span['req'])
        self.assertEqual(
            {'method': 'GET', 'route': '/v2.1/servers', 'status': 200},
            span['attrs'],
        )

    def test_server_errors_are_errors_and_ids_leave_the_route(self):
        [span] = self.call(
            '500 Internal Server Error',
            'GET',
            '/servers/0b6c3a52-3f8f-4bd9-8a53-9d3a8bbf1a77/os-interface/12',
        )
        self.assertEqual('error', span['st'])
        self.assertEqual('HTTP 500', span['err']['cls'])
        self.assertEqual(
            '/v2.1/servers/{id}/os-interface/{id}', span['attrs']['route']
        )

    def test_a_server_action_is_named_as_nova_dispatched_it(self):
        # issue 32 item 10: the nova target's hook on nova's dispatch
        # (Resource.get_method) leaves the action's name in the environ
        # for the filter, even for a request refused before the compute
        # API (a policy's 403)
        from instrument.targets.nova import extract as nova_extract

        class Request:
            def __init__(self, environ):
                self.environ = environ

        def resize(req, id, body):  # nova's @wsgi.action('resize')
            pass

        resize.wsgi_action = 'resize'

        def get_method(self, request, action, content_type, body):
            pass  # nova's Resource.get_method

        # the hook as the wrapper calls it: nova passes by position
        note = points_mod.bind(nova_extract.note_action, get_method)

        def application(environ, start_response):
            environ['nova.context'] = Ctx()
            note(
                None,
                (Request(environ), 'action', 'application/json', b'{}'),
                {},
                resize,
            )
            start_response('403 Forbidden', [])
            return [b'{}']

        middleware = paste.filter_factory({})(application)
        middleware.conf = self.conf
        environ = {
            'REQUEST_METHOD': 'POST',
            'SCRIPT_NAME': '/v2.1',
            'PATH_INFO': '/servers/0b6c3a52-3f8f-4bd9-8a53-'
            '9d3a8bbf1a77/action',
            'openstack.request_id': 'req-from-context',
        }
        list(middleware(environ, lambda s, h, e=None: None))
        lifecycle.teardown()
        [records] = base.read_span_files(
            os.path.join(self.tmp, 'spans')
        ).values()
        [span] = [r for r in records if r['ev'] == 'api.request']
        self.assertEqual(
            {
                'method': 'POST',
                'route': '/v2.1/servers/{id}/action',
                'status': 403,
                'action': 'resize',
            },
            span['attrs'],
        )
        # a method nova dispatched that is no action names none
        environ = {}
        note(None, (), {'request': Request(environ)}, app)
        self.assertEqual({}, environ)

    def test_never_records_tokens_passwords_bodies_or_query_strings(self):
        def application(environ, start_response):
            environ['nova.context'] = Ctx()
            environ['wsgi.input'].read()
            start_response('202 Accepted', [])
            return [b'{"server": {"adminPass": "s3cr3t-answer"}}']

        middleware = paste.InstrumentMiddleware(application, conf=self.conf)
        environ = {
            'REQUEST_METHOD': 'POST',
            'SCRIPT_NAME': '/v2.1',
            'PATH_INFO': '/servers',
            'QUERY_STRING': 'password=s3cr3t-query',
            'HTTP_X_AUTH_TOKEN': 's3cr3t-token',
            'CONTENT_TYPE': 'application/json',
            'wsgi.input': io.BytesIO(
                b'{"server": {"adminPass": "s3cr3t-body"}}'
            ),
        }
        list(middleware(environ, lambda s, h, e=None: None))
        lifecycle.teardown()
        files = os.listdir(os.path.join(self.tmp, 'spans'))
        with open(os.path.join(self.tmp, 'spans', files[0])) as f:
            text = f.read()
        self.assertIn('api.request', text)
        self.assertNotIn('s3cr3t', text)

    def test_disabled_passes_through(self):
        conf = self.make_conf(enabled=False)
        middleware = paste.InstrumentMiddleware(app('200 OK'), conf=conf)
        body = middleware(
            {'REQUEST_METHOD': 'GET', 'PATH_INFO': '/'},
            lambda s, h, e=None: None,
        )
        self.assertEqual([b'{}'], list(body))
        self.assertIsNone(lifecycle.active())

    def test_filter_goes_into_every_compute_pipeline_once(self):
        text = paste.add_to_pipelines(NOVA_PIPELINE)
        self.assertIn('compute_req_id instrument faultwrap', text)
        # No compute_req_id there: left alone.
        self.assertIn('pipeline = cors faultwrap request_log', text)
        self.assertEqual(1, text.count('[filter:instrument]'))
        self.assertEqual(text, paste.add_to_pipelines(text))

    def test_old_filter_path_in_api_paste_ini_still_loads(self):
        # api-paste.ini files written before the package was renamed
        # say instrument.loaders.paste:filter_factory; paste resolves it
        # by importing the module and taking the attribute.
        module_name, _, attr = (
            'instrument.loaders.paste:filter_factory'.partition(':')
        )
        old = getattr(importlib.import_module(module_name), attr)
        self.assertIs(paste.filter_factory, old)
        self.assertIn(
            'instrument.loaders.paste:filter_factory', paste.FILTER_SECTION
        )


def _boom(*args, **kwargs):
    raise KeyError('instrumentation bug')


def _no_thread(*args):
    raise RuntimeError("can't start new thread")


class PasteFaultTest(base.TestCase):
    """Issue 19, item 2: a fault while recording never fails a request."""

    def setUp(self):
        super().setUp()
        self.addCleanup(lifecycle.teardown)
        self.conf = self.make_conf(sql_timing=False)
        self.calls = []
        self.middleware = paste.InstrumentMiddleware(self.app, conf=self.conf)

    def app(self, environ, start_response):
        self.calls.append(environ['PATH_INFO'])
        environ['nova.context'] = Ctx()
        error = environ.get('test.error')
        if error is not None:
            raise error
        start_response('200 OK', [('Content-Type', 'application/json')])
        return environ['test.body']

    def request(self, error=None):
        """(what the middleware returned or raised, start_response
        calls)."""
        body = [b'{"flavors": []}']
        started = []
        environ = {
            'REQUEST_METHOD': 'GET',
            'SCRIPT_NAME': '/v2.1',
            'PATH_INFO': '/flavors',
            'test.body': body,
            'test.error': error,
            'openstack.request_id': 'req-h',
        }
        try:
            out = self.middleware(
                environ, lambda s, h, e=None: started.append((s, h))
            )
        except Exception as exc:
            out = exc
        return out, body, started

    def spans(self):
        lifecycle.teardown()
        files = base.read_span_files(os.path.join(self.tmp, 'spans'))
        return [
            r
            for records in files.values()
            for r in records
            if r['ev'] == 'api.request'
        ]

    def assert_answered(self, n=1):
        out, body, started = self.request()
        self.assertIs(body, out, 'the app result must come back as is')
        self.assertEqual(
            [('200 OK', [('Content-Type', 'application/json')])], started
        )
        self.assertEqual(n, len(self.calls), 'the app runs exactly once')
        self.assertIsNone(recorder_mod.current_frame())

    def test_a_fault_starting_the_span_answers_unrecorded(self):
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.tracer.Tracer.begin', _boom
            )
        )
        self.assert_answered(1)
        self.assert_answered(2)
        self.assertEqual(2, paste.FAULTS.count)
        self.assertEqual(1, self.logged().count('fault in the paste filter'))
        self.assertEqual([], self.spans())

    def test_a_fault_queueing_the_span_answers_unrecorded(self):
        paste.InstrumentMiddleware(lambda e, s: [], conf=self.conf)._tracer()
        # The enqueue cannot start the writer (no thread left).
        buf = lifecycle.active().buffer
        writer, buf.writer = buf.writer, None
        self.useFixture(
            fixtures.MonkeyPatch(
                'instrument.runtime.buffer.EventBuffer.start', _no_thread
            )
        )
        self.assert_answered(1)
        self.assertEqual(1, paste.FAULTS.count)
        buf.writer = writer
        self.assertEqual([], self.spans())

    def test_a_fault_ending_the_span_keeps_the_answer(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.tracer.Tracer.end', _boom)
        )
        self.assert_answered(1)
        self.assertEqual(1, paste.FAULTS.count)
        [span] = self.spans()
        self.assertEqual(('X', 'ok'), (span['ph'], span['st']))

    def test_a_fault_starting_the_instrumentation_answers_unrecorded(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.lifecycle.setup', _boom)
        )
        self.assert_answered(1)
        self.assert_answered(2)
        self.assertIsNone(lifecycle.active())
        self.assertEqual(1, loader.FAULTS.count)
        self.assertEqual(
            1, self.logged().count('fault in the start of the instrumentation')
        )

    def test_app_exceptions_pass_through_uncounted(self):
        error = ValueError('nova failed')
        out, _body, _started = self.request(error)
        self.assertIs(error, out)
        self.assertIsNone(out.__context__)
        self.assertEqual(1, len(self.calls))
        self.assertEqual(0, paste.FAULTS.count)
        [span] = self.spans()
        self.assertEqual(
            ('error', 'ValueError'), (span['st'], span['err']['cls'])
        )

    def test_app_exceptions_pass_through_a_fault_ending_the_span(self):
        self.useFixture(
            fixtures.MonkeyPatch('instrument.runtime.tracer.Tracer.end', _boom)
        )
        error = ValueError('nova failed')
        out, _body, _started = self.request(error)
        self.assertIs(error, out)
        self.assertIsNone(out.__context__)
        self.assertEqual(1, len(self.calls))
        self.assertEqual(1, paste.FAULTS.count)
        self.assertIsNone(recorder_mod.current_frame())


class QueueTimeTest(base.TestCase):
    """``paste.queue_us``: the arrival time each front server gives."""

    NOW = 1_700_000_000.5  # time.time() of the filter's call

    def waited(self, **environ):
        return paste.queue_us(environ, self.NOW)

    def test_mod_wsgi_microseconds(self):
        self.assertEqual(
            120_000,
            self.waited(**{'mod_wsgi.request_start': '1700000000380000'}),
        )
        self.assertEqual(
            30_000, self.waited(**{'mod_wsgi.queue_start': '1700000000470000'})
        )

    def test_mod_wsgi_request_start_wins_over_queue_start(self):
        # accepted by Apache first, queued for the daemon after
        self.assertEqual(
            120_000,
            self.waited(
                **{
                    'mod_wsgi.request_start': '1700000000380000',
                    'mod_wsgi.queue_start': '1700000000470000',
                    'HTTP_X_REQUEST_START': 't=1700000000490000',
                }
            ),
        )

    def test_header_forms(self):
        # Apache mod_headers %t: t=<usec>
        self.assertEqual(
            500_000, self.waited(HTTP_X_REQUEST_START='t=1700000000000000')
        )
        # nginx t=${msec}, haproxy: seconds with a fraction
        self.assertEqual(
            250_000, self.waited(HTTP_X_REQUEST_START='t=1700000000.250')
        )
        self.assertEqual(
            250_000, self.waited(HTTP_X_REQUEST_START='1700000000.25')
        )
        # milliseconds (Heroku's router)
        self.assertEqual(
            400_000, self.waited(HTTP_X_REQUEST_START='1700000000100')
        )

    def test_proxy_clock_slightly_ahead_is_no_wait(self):
        self.assertEqual(0, self.waited(HTTP_X_REQUEST_START='t=1700000000.9'))

    def test_garbage_is_ignored_and_counted_never_raised(self):
        before = paste.QUEUE_UNREAD.count
        bad = [
            't=',
            'soon',
            't=abc',
            '',
            't=nan',
            'inf',
            '-5',
            # an hour and more back, minutes ahead: a wrong clock
            't=1699990000.0',
            't=1700000600.0',
            object(),
            b'\xff',
        ]
        for value in bad:
            self.assertIsNone(self.waited(HTTP_X_REQUEST_START=value), value)
        self.assertEqual(before + len(bad), paste.QUEUE_UNREAD.count)

    def test_absent_is_none_and_not_counted(self):
        before = paste.QUEUE_UNREAD.count
        self.assertIsNone(self.waited(REQUEST_METHOD='GET'))
        self.assertEqual(before, paste.QUEUE_UNREAD.count)
