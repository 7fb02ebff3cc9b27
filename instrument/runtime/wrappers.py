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
"""What replaces a patched callable: the span and hook wrappers.

``replacement(point, state, recorder, owner, original)`` builds it once,
when the point is applied: a plain closure for functions, static and
class methods, wrapt's proxy for any other callable.  A SPAN wrapper
picks the point's values out of the call (specs compiled against the
signature, see ``instrument.patching.points``) and records through the
``Recorder``'s ``begin`` and ``end``, bound once; given the recorder's
own ``begin`` (it carries its ``SpanSteps``) it does ``begin``'s steps
itself, the buffer's enqueue included, and ``end``'s for a call that
ended well (the attributes of an ``on_exit`` merged and the instances
of a ``result_instances`` set as ``end`` does): no Python call on the
span's path but nova's and the point's hooks (issue 31;
``tests/unit/test_wrapper_end.py`` checks the records are the same).
A ``begin`` or ``end`` without steps is called.  The common case of
that (context and instances from arguments, host from ``self``, no
``when``, remote parent, ``service_from`` or detail sampling) is done
in C when
``instrument._native._span`` is built (``SpanCall``: the same steps,
calling the same parts, the same bytes); the closure does every other
point, and every point with ``INSTRUMENT_PURE_PYTHON=1``.  A HOOK
wrapper lets ``on_enter`` change the arguments and ``on_exit`` see the
result.

Faults are isolated: the wrapped callable is called exactly once,
outside any guarded block, and its result or exception is handed back
as the same object.  An exception raised by instrumentation code (never
one of nova's) is counted by the point's state (``instrument.runtime.faults``);
a state that is not ``active`` (point removed, or disabled after too
many faults) passes calls straight through.
"""

import functools
import inspect

import wrapt

from instrument import _native
from instrument.patching import points as points_mod
from instrument.runtime import recorder as recorder_mod
from instrument.runtime import tracer as tracing

ST_OK = recorder_mod.ST_OK
ST_ERROR = recorder_mod.ST_ERROR
PH_B = recorder_mod.PH_B
PH_X = recorder_mod.PH_X
I_PH = recorder_mod.I_PH
I_DUR = recorder_mod.I_DUR
I_ST = recorder_mod.I_ST
I_T0 = recorder_mod.I_T0
I_TOKEN = recorder_mod.I_TOKEN
I_INST = recorder_mod.I_INST
I_ATTRS = recorder_mod.I_ATTRS
F_SPAN = recorder_mod.F_SPAN
F_REQ = recorder_mod.F_REQ
F_GREQ = recorder_mod.F_GREQ
F_INST = recorder_mod.F_INST
F_SVC = recorder_mod.F_SVC
F_HOST = recorder_mod.F_HOST

# The span wrapper's common case in C (instrument/_native/span.c), or
# None: not built, INSTRUMENT_PURE_PYTHON=1, or built for another
# record layout than this one.
native_span = _native.load('_span')
if native_span is not None and native_span.LAYOUT != (
    I_PH,
    I_DUR,
    I_ST,
    I_T0,
    I_TOKEN,
    I_INST,
    I_ATTRS,
):  # pragma: no cover - a stale build
    native_span = None


def replacement(point, state, recorder, owner, original):
    """What replaces ``original``: a plain closure where possible.

    wrapt's ``FunctionWrapper`` costs about 1 us per call on a 2-core
    VM (8-10 times a plain closure; see bench/), half of the per-call
    budget, so plain functions, static and class methods get a
    closure with ``functools.update_wrapper`` (``__wrapped__`` keeps
    introspection working).  Other callables keep wrapt's proxy,
    which handles any descriptor correctly.
    """
    make = hook_wrapper if point.kind == points_mod.HOOK else span_wrapper
    in_class = inspect.isclass(owner)
    if isinstance(original, staticmethod):
        return staticmethod(
            make(point, state, recorder, original.__func__, False)
        )
    if isinstance(original, classmethod):
        return classmethod(
            make(point, state, recorder, original.__func__, True)
        )
    if inspect.isfunction(original):
        return make(point, state, recorder, original, in_class)
    patched = make(point, state, recorder, None, False, original)
    return wrapt.FunctionWrapper(
        original,
        lambda wrapped, instance, args, kwargs: patched(
            *args,
            _instrument_call=wrapped,
            _instrument_self=instance,
            **kwargs,
        ),
    )


def span_wrapper(
    point, state, recorder, original, is_method: bool, signature=None
):
    """A closure that records ``point``'s span around ``original``
    (None: the callable comes with each call, behind wrapt's proxy,
    and ``signature`` is the callable whose signature names its
    arguments)."""
    if signature is None:
        signature = original
    ev = point.event
    svc = point.service
    # Argument lookups are resolved against the signature now, and
    # done inline below: a call per lookup would double the cost.
    offset = 1 if is_method else 0
    compile_spec = points_mod.compile_spec
    pick = points_mod.pick
    c_kind, c_name, c_pos, c_fn = compile_spec(
        point.context, signature, offset
    )
    if c_kind == 1 and c_fn is not None:
        c_kind = 4  # an argument, then a function of it (inline too)
    i_kind, i_name, i_pos, i_fn = compile_spec(
        point.instances, signature, offset
    )
    h_spec = compile_spec(point.host, signature, offset)
    h_kind, h_name, _h_pos, h_fn = h_spec
    r_spec = compile_spec(point.remote_parent, signature, offset)
    r_kind = r_spec[0]
    s_spec = compile_spec(point.service_from, signature, offset)
    s_kind = s_spec[0]
    result_instances = point.result_instances
    # Hooks that read arguments by name, bound to the signature now.
    bind = points_mod.bind
    on_enter = bind(point.on_enter, signature)
    on_exit = bind(point.on_exit, signature)
    on_error = bind(point.on_error, signature)
    on_abandon = bind(point.on_abandon, signature)
    detail = point.detail
    when = bind(point.when, signature)
    # An instances converter that reads one attribute (uuids()): its
    # common case, an object with that attribute, is done inline.
    i_attr = getattr(i_fn, 'attr', None)
    # The recorder, bound once: the hot path is begin, the call, end
    # (their steps done here when they carry them, below).
    begin = recorder.begin
    end = recorder.end
    wants = recorder.wants
    clock = recorder.clock
    abandon = recorder_mod.abandon
    error_of = point.error or tracing.error_of
    fault = state.fault
    # A call outside any span records no request rather than oslo.
    # context's current one (stale in periodic tasks and at start-up):
    # an empty frame is current while it runs.
    unowned = not point.request_outside_spans
    get_frame = recorder_mod.current_frame
    set_frame = recorder_mod.set_frame
    reset_frame = recorder_mod.reset_frame
    no_frame = recorder_mod.NO_FRAME
    release = recorder_mod.release
    # Recorder.begin's steps, done here with its parts (issue 31: no
    # call of seven arguments per span) when ``begin`` is the
    # recorder's own: it carries them (``SpanSteps``).  Any other
    # ``begin`` (a test's, a fault site's) is called.
    steps = getattr(begin, 'steps', None)
    inline_start = steps is not None
    (
        start_clock,
        get_ident,
        get_span_frame,
        set_span_frame,
        _reset,
        oslo_request,
        emit,
        append,
        queue,
        limit,
        buf,
        process_svc,
        process_host,
    ) = steps or recorder_mod.NO_STEPS
    # The same for the end of a call that ended well: what
    # ``Recorder.end`` does with no req, the attrs of the point's
    # on_exit and the instances of its result_instances (neither in
    # the common case, ``plain_end``).
    end_steps = getattr(end, 'steps', None)
    inline_end = end_steps is not None
    plain_end = inline_end and on_exit is None and result_instances is None
    reset_span = (end_steps or recorder_mod.NO_STEPS).reset_frame
    native = native_span
    if (
        native is not None
        and original is not None
        and inline_start
        and inline_end
        and c_kind in (0, 1, 4)
        and i_kind in (0, 1)
        and h_kind in (0, 2)
        and not r_kind
        and not s_kind
        and not detail
        and when is None
        and not unowned
        and (append is None or limit.__class__ is int)
    ):
        # The common case, in C: the same steps, the same parts called
        # (see instrument/_native/span.c); every other point, and every
        # point when it is not built, takes the closure below.
        in_c = native.SpanCall(
            original=original,
            state=state,
            is_method=is_method,
            ev=ev,
            svc=svc,
            c_kind=c_kind,
            c_name=c_name,
            c_pos=c_pos,
            c_fn=c_fn,
            i_kind=i_kind,
            i_name=i_name,
            i_pos=i_pos,
            i_fn=i_fn,
            i_attr=i_attr,
            h_kind=h_kind,
            h_name=h_name,
            h_fn=h_fn,
            on_enter=on_enter,
            on_error=on_error,
            on_abandon=on_abandon,
            on_exit=on_exit,
            result_instances=result_instances,
            start_clock=start_clock,
            get_ident=get_ident,
            get_frame=get_span_frame,
            set_frame=set_span_frame,
            oslo_request=oslo_request,
            emit=emit,
            append=append,
            queue=queue,
            limit=limit if append is not None else None,
            buf=buf,
            process_svc=process_svc,
            process_host=process_host,
            clock=clock,
            reset_span=reset_span,
            end=end,
            error_of=error_of,
            fault=fault,
            abandon=abandon,
            release=release,
            abandon_hook=_abandon_hook,
            globals=vars(recorder_mod),
            ph_b=PH_B,
            ph_x=PH_X,
            st_ok=ST_OK,
            st_error=ST_ERROR,
        )
        return _finish(in_c, point, original)

    def patched(*args, **kwargs):
        call = original
        if call is None:  # behind wrapt's proxy (see replacement)
            call = kwargs.pop('_instrument_call')
            instance = kwargs.pop('_instrument_self')
        elif is_method:
            instance = args[0]
        else:
            instance = None
        if not state.active:
            return call(*args, **kwargs)
        # Starting the span is guarded; nova's call never is: it runs
        # exactly once, below, whatever happened here, and its result
        # or exception goes back as it came.
        rec = None
        outer = None
        try:
            ctx = None
            if c_kind == 1:
                if c_name in kwargs:
                    ctx = kwargs[c_name]
                elif -1 < c_pos < len(args):
                    ctx = args[c_pos]
            elif c_kind == 4:
                if c_name in kwargs:
                    ctx = kwargs[c_name]
                elif -1 < c_pos < len(args):
                    ctx = args[c_pos]
                if ctx is not None:
                    ctx = c_fn(ctx)
            elif c_kind:
                ctx = c_fn(instance, args[offset:], kwargs)
            if (not detail or wants(ctx)) and (
                when is None or when(instance, args[offset:], kwargs)
            ):
                inst = None
                if i_kind == 1:
                    if i_name in kwargs:
                        inst = kwargs[i_name]
                    elif -1 < i_pos < len(args):
                        inst = args[i_pos]
                    if inst is not None and i_fn is not None:
                        uuid = getattr(inst, i_attr, None) if i_attr else None
                        inst = [uuid] if uuid.__class__ is str else i_fn(inst)
                elif i_kind:
                    inst = i_fn(instance, args[offset:], kwargs)
                if h_kind == 2:  # self.host, the usual case: inline
                    host = getattr(instance, h_name, None)
                    if h_fn is not None and host is not None:
                        host = h_fn(host)
                elif h_kind:
                    host = pick(h_spec, instance, args, kwargs, offset)
                else:
                    host = None
                remote = (
                    pick(r_spec, instance, args, kwargs, offset)
                    if r_kind
                    else None
                )
                span_svc = (
                    (pick(s_spec, instance, args, kwargs, offset) or svc)
                    if s_kind
                    else svc
                )
                if unowned and ctx is None and get_frame() is None:
                    outer = set_frame(no_frame)
                attrs = (
                    on_enter(instance, args[offset:], kwargs)
                    if on_enter
                    else None
                )
                if not inline_start:
                    rec = begin(ev, span_svc, host, ctx, inst, remote, attrs)
                else:
                    # Recorder.begin's steps, in its order (see there).
                    frame = get_span_frame()
                    req = greq = None
                    if ctx is not None:
                        if ctx.__class__ is dict:  # serialised (RPC)
                            req = ctx.get('request_id')
                            greq = ctx.get('global_request_id')
                        else:
                            req = getattr(ctx, 'request_id', None)
                            greq = getattr(ctx, 'global_request_id', None)
                    if frame is not None:
                        if req is None:
                            req = frame[F_REQ]
                            greq = frame[F_GREQ]
                        if inst is None:
                            inst = frame[F_INST]
                        if span_svc is None:
                            span_svc = frame[F_SVC]
                        if host is None:
                            host = frame[F_HOST]
                        parent = frame[F_SPAN] if remote is None else remote
                    else:
                        parent = remote
                        if req is None:
                            req, greq = oslo_request()
                    if span_svc is None:
                        span_svc = process_svc
                    if host is None:
                        host = process_host
                    # Read per call: a fork renews the prefix and the
                    # counter, the writer re-anchors the wall clock.
                    span = recorder_mod.span_prefix | (
                        next(recorder_mod.span_counter) & 0xFFFFFFFF
                    )
                    t0 = start_clock()
                    rec = [
                        PH_B,
                        (t0 + recorder_mod.wall_offset_ns) // 1000,
                        None,
                        host,
                        span_svc,
                        get_ident(),
                        ev,
                        span,
                        parent,
                        req,
                        greq,
                        inst,
                        None,
                        None,
                        attrs,
                        t0,
                        set_span_frame(
                            (span, req, greq, inst, span_svc, host, ev)
                        ),
                    ]
                    try:
                        if append is None:
                            emit(rec)
                        # EventBuffer.emit's steps (see there)
                        elif len(queue) < limit:
                            if buf.writer is None:
                                buf.start()
                            append(rec)
                        else:
                            buf.drop()
                    except BaseException:
                        release(rec)  # not queued
                        raise
        except Exception as exc:
            # Not queued (begin gives up what it could not queue).
            rec = False
            fault(exc)
        if not rec:  # None: a detail point's unsampled request; a fault
            if outer is not None:
                reset_frame(outer)
            if rec is None or on_abandon is None:
                return call(*args, **kwargs)
            # on_enter may have run: undone once nova's call is over
            try:
                return call(*args, **kwargs)
            finally:
                _abandon_hook(
                    on_abandon, fault, instance, args[offset:], kwargs
                )
        # Ending it is guarded too, the clock read included: a fault
        # there never replaces nova's result or exception.
        try:
            result = call(*args, **kwargs)
        except BaseException as exc:
            t1 = None
            try:
                t1 = clock()
                attrs = (
                    on_error(instance, args[offset:], kwargs, exc)
                    if on_error is not None
                    else None
                )
                end(rec, t1, ST_ERROR, error_of(exc), attrs)
            except Exception as exc_fault:
                abandon(rec, ST_ERROR, t1)
                fault(exc_fault)
                if on_abandon is not None:
                    _abandon_hook(
                        on_abandon, fault, instance, args[offset:], kwargs
                    )
            if outer is not None:
                reset_frame(outer)
            raise
        t1 = None
        try:
            t1 = clock()
            if plain_end:
                # Recorder.end's steps, in its order (its error stays
                # the None that the start wrote): the frame, then
                # duration and status, the phase last (the writer may
                # read the record any time).
                token = rec[I_TOKEN]
                if token is not None:
                    try:
                        reset_span(token)
                    except ValueError:
                        pass  # ended in another context (see end)
                    rec[I_TOKEN] = None
                rec[I_DUR] = (t1 - rec[I_T0]) // 1000
                rec[I_ST] = ST_OK
                rec[I_PH] = PH_X
            else:
                attrs = (
                    on_exit(instance, args[offset:], kwargs, result)
                    if on_exit is not None
                    else None
                )
                found = (
                    result_instances(result)
                    if result_instances is not None
                    else None
                )
                if not inline_end:
                    end(rec, t1, ST_OK, None, attrs, None, found)
                else:
                    # The same, the hooks' attributes merged and their
                    # instances set as Recorder.end does, after the
                    # frame.
                    token = rec[I_TOKEN]
                    if token is not None:
                        try:
                            reset_span(token)
                        except ValueError:
                            pass  # ended in another context (see end)
                        rec[I_TOKEN] = None
                    if attrs:
                        battrs = rec[I_ATTRS]
                        if battrs:
                            battrs = dict(battrs)
                            battrs.update(attrs)
                            attrs = battrs
                        rec[I_ATTRS] = attrs
                    if found is not None:
                        rec[I_INST] = found
                    rec[I_DUR] = (t1 - rec[I_T0]) // 1000
                    rec[I_ST] = ST_OK
                    rec[I_PH] = PH_X
        except Exception as exc_fault:
            abandon(rec, ST_OK, t1)
            fault(exc_fault)
            if on_abandon is not None:
                _abandon_hook(
                    on_abandon, fault, instance, args[offset:], kwargs
                )
        if outer is not None:
            reset_frame(outer)
        return result

    return _finish(patched, point, original)


def _abandon_hook(on_abandon, fault, instance, args, kwargs) -> None:
    """A point's ``on_abandon``, guarded (a fault path only)."""
    try:
        on_abandon(instance, args, kwargs)
    except Exception as exc:
        fault(exc)


def hook_wrapper(
    point, state, recorder, original, is_method: bool, signature=None
):
    """A closure that runs ``point``'s hooks around ``original``."""
    if signature is None:
        signature = original
    before = points_mod.bind(point.on_enter, signature)
    after = points_mod.bind(point.on_exit, signature)
    offset = 1 if is_method else 0
    fault = state.fault

    def patched(*args, **kwargs):
        call = original
        if call is None:  # behind wrapt's proxy (see replacement)
            call = kwargs.pop('_instrument_call')
            instance = kwargs.pop('_instrument_self')
        else:
            instance = args[0] if is_method else None
        if not state.active:
            return call(*args, **kwargs)
        if before is not None:
            try:
                changed = before(instance, args[offset:], kwargs)
                if changed is not None:
                    # Both or neither: a half-applied change would call
                    # nova with arguments nobody meant.
                    new_args, new_kwargs = changed
                    new_args = args[:offset] + tuple(new_args)
                    if not isinstance(new_kwargs, dict):
                        raise TypeError(
                            'on_enter of a hook returned '
                            'keywords of type %s' % type(new_kwargs).__name__
                        )
                    args, kwargs = new_args, new_kwargs
            except Exception as exc:
                fault(exc)
        # Outside any guarded block: called once, passed through.
        result = call(*args, **kwargs)
        if after is not None:
            try:
                after(instance, args[offset:], kwargs, result)
            except Exception as exc:
                fault(exc)
        return result

    return _finish(patched, point, original)


def _finish(patched, point, original):
    if original is not None:
        functools.update_wrapper(patched, original)
    patched.__instrument_point__ = point.name
    return patched
