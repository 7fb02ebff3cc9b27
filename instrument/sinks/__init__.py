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
"""Sinks: where batches of events go, loaded by name (stevedore).

A sink is called only from the writer thread of ``instrument.runtime.buffer``,
never from an instrumented call.  Third parties can add sinks through the
``instrument.sinks`` entry point group; the ones shipped are ``file``,
``log`` and ``otlp``.
"""

from oslo_log import log as logging
from stevedore import driver

LOG = logging.getLogger(__name__)

NAMESPACE = 'instrument.sinks'


class Sink:
    """Base class.  ``dropped`` counts events this sink lost;
    ``last_error`` says why, the latest cause (the buffer's drop warning
    names it)."""

    name = 'base'
    #: The longest ``close()`` may take, in seconds (the buffer's exit
    #: waits that much longer for it).
    close_timeout = 0.0

    def __init__(self, conf, identity) -> None:
        self.conf = conf
        self.identity = identity
        self.dropped = 0
        self.last_error: str | None = None

    def write(self, batch: list, first_seq: int, pid: int) -> None:
        """Deliver event tuples; ``first_seq`` numbers the first one."""
        raise NotImplementedError

    def settle(self) -> None:
        """Fold into ``dropped`` what was lost in another thread since
        the last call (a sink that delivers later, elsewhere: the log
        sink under eventlet).  The buffer calls it before it reads
        ``dropped`` for its reports, never during a ``write``."""

    def flush(self) -> None:
        """Before the last drop report (the buffer is closing): wait,
        briefly, until what was handed to another thread is delivered
        or counted as lost, so that the report has the final count."""

    def after_fork(self) -> None:
        """Called in a forked child before its first write."""

    def close(self) -> None:
        """Flush and release resources."""


def _raise(manager, entrypoint, exc):
    # Let a sink's own error (e.g. a missing optional extra) reach the
    # caller instead of stevedore's "No driver found".
    raise exc


def load(names, conf, identity) -> list:
    """Instantiate the sinks named in ``[instrument] sinks``."""
    sinks = []
    for name in names:
        mgr = driver.DriverManager(
            NAMESPACE,
            name,
            invoke_on_load=True,
            invoke_args=(conf, identity),
            on_load_failure_callback=_raise,
        )
        sinks.append(mgr.driver)
    return sinks
