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
"""Ways a service switches the instrumentation on without code changes."""

from oslo_log import log as logging

from instrument import faults
from instrument import opts
from instrument import runtime

LOG = logging.getLogger(__name__)


def service_conf(conf):
    """The ConfigOpts behind oslo.messaging's per-transport proxy."""
    return getattr(conf, '_conf', conf)


# Faults of starting the instrumentation (see instrument.faults).
FAULTS = faults.Faults('the start of the instrumentation',
                       what='nova runs uninstrumented')


def start(conf) -> None:
    """``instrument.setup`` for the service that owns ``conf``.

    Never raises: a bad option is logged as an error naming it, any
    other fault is counted and logged once; nova then runs uninstrumented.
    """
    try:
        real = service_conf(conf)
        try:
            prog = real.prog
        except Exception:
            prog = None
        runtime.setup(real, prog)
    except opts.InvalidOption as exc:
        LOG.error('instrument: not started, fix nova.conf: %s', exc)
    except Exception as exc:
        FAULTS(exc)
