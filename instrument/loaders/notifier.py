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
"""Switch the instrumentation on from nova.conf alone.

nova builds its oslo.messaging notifiers in ``nova.rpc.init`` in every
service (api, conductor, scheduler, compute; before forking workers), and
the notifier instantiates every driver listed in
``[oslo_messaging_notifications] driver`` with the service's own
configuration.  Listing ``instrument`` there therefore runs
``instrument.setup()`` in each service, with nova's options (``host``)
and the ``[instrument]`` group of the same nova.conf, before the service
handles its first RPC.  The driver drops the notifications it is given:
it exists for its side effect, beside whatever drivers are also listed.

A bad ``[instrument]`` value is logged as an error naming the option and
leaves nova running uninstrumented; any other fault of the start is
counted and logged once (``instrument.loaders.FAULTS``), with the same
result: it never stops a service, and it never fails a notification.
"""

from oslo_log import log as logging
from oslo_messaging.notify import notifier

from instrument import loaders as loader

LOG = logging.getLogger(__name__)


class InstrumentDriver(notifier.Driver):
    """``[oslo_messaging_notifications] driver = instrument``."""

    def __init__(self, conf, topics, transport):
        super().__init__(conf, topics, transport)
        try:
            loader.start(conf)
        except Exception as exc:  # start() never raises; be sure of it
            loader.FAULTS(exc)

    def notify(self, ctxt, msg, priority, retry):
        """Notifications are not recorded; nova's spans are.  Nothing
        here can fail a notification: it does nothing."""
