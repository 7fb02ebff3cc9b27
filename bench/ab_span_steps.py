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
"""The span wrapper's inline start and end against ``begin``/``end``
called, in one process (issue 31).

The no-op method of ``ab_wrapper.py`` patched twice from the same point,
each copy with its own ``Recorder`` on one buffer: ``A`` a recorder
whose ``begin`` and ``end`` carry no ``steps`` (the wrapper calls them),
``B`` a stock one (the wrapper does their steps itself); then ``A``
and ``B`` both stock (the noise floor).  Rounds of ``--calls`` calls
alternate the order of the two, the buffer drained
between, thread CPU, the garbage collector disabled while a round is
timed (``--gc`` leaves it on: its full collections move single rounds
by about 1 us); printed: the thread CPU each adds over the unpatched
method (medians) and ``B - A`` of the same round (median and mean).
Threads, then eventlet in a child process that monkey-patches first.
"""

import ab_wrapper  # noqa: E402 - this directory is on sys.path


def _recorder(rt, called: bool):
    from instrument.runtime import recorder as recorder_mod

    rec = recorder_mod.Recorder(rt.buffer, rt.identity)
    if called:
        # begin and end without their steps: the wrapper calls them
        del rec.begin.steps
        del rec.end.steps
    return rec


def measure(a_called: bool, rounds: int, calls: int, keep_gc: bool) -> dict:
    from instrument.runtime import wrappers

    rt = ab_wrapper.runtime(2 * calls + 1000)
    # both sides the Python closure (the C span wrapper, where it is
    # built, is ab_native_span.py's)
    native, wrappers.native_span = wrappers.native_span, None
    try:
        patches = [
            ab_wrapper.patch(cls, _recorder(rt, called))
            for cls, called in (
                (ab_wrapper.ManagerA, a_called),
                (ab_wrapper.ManagerB, False),
            )
        ]
    finally:
        wrappers.native_span = native
    return ab_wrapper.rounds(rt, patches, rounds, calls, keep_gc)


def _both(rounds: int, calls: int, keep_gc: bool) -> dict:
    return {
        'steps': measure(True, rounds, calls, keep_gc),
        'floor': measure(False, rounds, calls, keep_gc),
    }


def _report(mode: str, r: dict) -> None:
    s, f = r['steps'], r['floor']
    print(
        '%-9s begin/end called %6.0f ns added, inline %6.0f: B - A median '
        '%+5.0f mean %+5.0f ns a call; noise floor (inline both sides) '
        'median %+5.0f mean %+5.0f'
        % (
            mode,
            s['a_ns'],
            s['b_ns'],
            s['median_ns'],
            s['mean_ns'],
            f['median_ns'],
            f['mean_ns'],
        )
    )


def main() -> None:
    args = ab_wrapper.parser(__doc__).parse_args()
    ab_wrapper.main(
        args,
        __file__,
        'Span wrapper, begin/end called (A) vs inline (B)',
        _both,
        _report,
    )


if __name__ == '__main__':
    main()
