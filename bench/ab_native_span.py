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
"""The span wrapper in C (``instrument._native._span``) against the
Python closure, in one process (issue 31).

The no-op method of ``ab_wrapper.py`` patched twice from the same point
with the same recorder: ``A`` with the
closure (the C extension hidden while it is patched), ``B`` with the C
``SpanCall``; then ``A`` and ``B`` both in C (the noise floor).  Rounds
of ``--calls`` calls alternate the order of the two, the buffer drained
between, thread CPU, the garbage collector disabled while a round is
timed unless ``--gc`` (the C path's records are untracked by the
collector: ``--gc`` shows what that saves, with the collections the
calls trigger).  Printed: the thread CPU each adds over the unpatched
method (medians), ``B - A`` of the same round (median and mean) and
``B / A``.  Threads, then eventlet in a child process that
monkey-patches first.

``--one python|c|plain --calls N`` makes ``N`` calls of one variant
(``plain``: the method unpatched) and exits, for ``valgrind
--tool=callgrind --separate-threads=yes``: the calling thread's
instructions in two runs of different ``N``, their difference over
the difference of ``N``, is what a call costs there, the collections
it sets off included.

``--on-exit``: the point has an ``on_exit`` (a hook that returns one
attribute, as nova's ``extract`` hooks do), which the C path calls
before ``Recorder.end`` as the closure does.
"""

import os

import ab_wrapper  # noqa: E402 - this directory is on sys.path

# The point's extra fields (--on-exit: main sets it in the environment,
# which the eventlet child inherits).
HOOKS: dict = {}
_ON_EXIT_ENV = 'AB_NATIVE_SPAN_ON_EXIT'


def _on_exit(instance, args, kwargs, result):
    """An on_exit as nova's: one attribute of the result."""
    return {'n': 0 if result is None else 1}


def measure(a_python: bool, rounds: int, calls: int, keep_gc: bool) -> dict:
    from instrument.runtime import wrappers

    native = wrappers.native_span
    if native is None:
        raise SystemExit(
            'instrument._native._span is not built (or '
            'INSTRUMENT_PURE_PYTHON is set): nothing to compare'
        )
    rt = ab_wrapper.runtime(2 * calls + 1000)
    patches = []
    for cls, python in (
        (ab_wrapper.ManagerA, a_python),
        (ab_wrapper.ManagerB, False),
    ):
        wrappers.native_span = None if python else native
        patches.append(ab_wrapper.patch(cls, rt.recorder, **HOOKS))
        made = isinstance(cls.__dict__['noop'], native.SpanCall)
        assert made != python, (cls, python)
    wrappers.native_span = native
    return ab_wrapper.rounds(rt, patches, rounds, calls, keep_gc)


def one(variant: str, calls: int) -> None:
    """``calls`` calls of one variant, the collector on (callgrind)."""
    from instrument.runtime import wrappers

    if variant == 'python':
        wrappers.native_span = None
    elif wrappers.native_span is None:
        raise SystemExit('instrument._native._span is not built')
    rt = ab_wrapper.runtime(calls + 2000)
    ab_wrapper.patch(ab_wrapper.ManagerB, rt.recorder, **HOOKS)
    fn = (
        ab_wrapper.Plain().noop
        if variant == 'plain'
        else ab_wrapper.ManagerB().noop
    )
    args = (ab_wrapper.Context(), ab_wrapper.Instance())
    for _ in range(1000):  # warm-up: the writer started, caches filled
        fn(*args)
    for _ in range(calls):
        fn(*args)
    os._exit(0)  # no teardown: the writer would encode the records


def _both(rounds: int, calls: int, keep_gc: bool) -> dict:
    return {
        'native': measure(True, rounds, calls, keep_gc),
        'floor': measure(False, rounds, calls, keep_gc),
    }


def _report(mode: str, r: dict) -> None:
    s, f = r['native'], r['floor']
    print(
        '%-9s Python %5.0f ns added, C %5.0f: B - A median %+5.0f mean '
        '%+5.0f ns a call, B/A %.2f; noise floor (C both sides) median '
        '%+4.0f mean %+4.0f, B/A %.2f'
        % (
            mode,
            s['a_ns'],
            s['b_ns'],
            s['median_ns'],
            s['mean_ns'],
            s['ratio'],
            f['median_ns'],
            f['mean_ns'],
            f['ratio'],
        )
    )


def main() -> None:
    parser = ab_wrapper.parser(__doc__)
    parser.add_argument('--one', choices=['python', 'c', 'plain'])
    parser.add_argument(
        '--on-exit',
        action='store_true',
        help='the point has an on_exit hook',
    )
    args = parser.parse_args()
    if args.on_exit:
        os.environ[_ON_EXIT_ENV] = '1'
    if os.environ.get(_ON_EXIT_ENV) == '1':
        HOOKS['on_exit'] = _on_exit
    if args.one:
        one(args.one, args.calls)
        return
    ab_wrapper.main(
        args,
        __file__,
        'Span wrapper, Python closure (A) vs C (B)',
        _both,
        _report,
    )


if __name__ == '__main__':
    main()
