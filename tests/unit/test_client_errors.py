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
"""Span errors of exceptions that quote a URL or a response body: a
service client's keeps its HTTP status only, any URL in a message is
reduced to its path."""

from keystoneauth1 import exceptions as ksa_exc
import requests
import testtools

from instrument.runtime import tracer

# a value that must not be written
SECRET = 'tok-5e1f0c2b9a7d4e63'  # noqa: S105


class ClientErrorTest(testtools.TestCase):
    def test_keystoneauth_http_error_keeps_its_status(self):
        exc = ksa_exc.http.Conflict(
            message='{"conflict": "%s"}' % SECRET,
            http_status=409,
            url='http://placement:8778/allocations/x?token=' + SECRET,
        )
        self.assertEqual(
            ('keystoneauth1.exceptions.http.Conflict', 'HTTP 409'),
            tracer.error_of(exc),
        )

    def test_keystoneauth_time_out_keeps_nothing(self):
        exc = ksa_exc.ConnectTimeout(
            'Request to http://neutron:9696/v2.0/ports?device_id=%s timed '
            'out' % SECRET
        )
        self.assertEqual(
            ('keystoneauth1.exceptions.connection.ConnectTimeout', ''),
            tracer.error_of(exc),
        )

    def test_requests_error(self):
        exc = requests.exceptions.ReadTimeout(
            'HTTPConnectionPool(host=x, port=1): Read timed out. '
            '(read timeout=%s)' % SECRET
        )
        self.assertNotIn(SECRET, tracer.error_of(exc)[1])

    def test_url_in_another_message_is_its_path(self):
        exc = RuntimeError(
            'image https://user:%s@glance:9292/v2/images/'
            'abc?x=%s#f not found' % (SECRET, SECRET)
        )
        cls, msg = tracer.error_of(exc)
        self.assertEqual('image /v2/images/abc not found', msg)
