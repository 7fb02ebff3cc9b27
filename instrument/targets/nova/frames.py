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
"""The current span carried into the threads nova starts: a function
run inside a span's frame, whatever the frame switch does."""

import functools

from instrument.runtime import faults
from instrument.runtime import recorder as recorder_mod

# Faults of the frame switch in a spawned thread (no point state there).
FAULTS = faults.Faults(
    'the span carried into a thread', what='the thread runs unaffected'
)


def enter(frame):
    try:
        return recorder_mod.set_frame(frame)
    except Exception as exc:
        FAULTS(exc)
        return None


def leave(token) -> None:
    try:
        recorder_mod.reset_frame(token)
    except Exception as exc:
        FAULTS(exc)


def run_in_frame(frame, func):
    """``func`` run inside ``frame``: called once whatever the frame
    switch does, its result and exception passed through."""

    @functools.wraps(func)
    def run(*args, **kwargs):
        token = enter(frame)
        try:
            return func(*args, **kwargs)
        finally:
            if token is not None:
                leave(token)

    return run
