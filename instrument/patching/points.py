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
"""Patch points: what to instrument, described as data.

A ``PatchPoint`` names a callable (module + ``Class.method``), the event
it records, the component that owns it, and small specs that pick the
request context, instance uuid(s), host and attributes out of a call:
``arg('instance')`` (an argument, by keyword or at its position in the
target's signature),
``self_attr('host')`` (an attribute of the patched object), ``uuids()``
(instance uuids from objects, lists or strings) or any
``(instance, args, kwargs)`` callable.  ``kind`` HOOK points record
nothing: they may change the call's arguments or look at its result.
A hook that reads arguments of the call names them: ``reads(fn,
'migration', 'dest')`` calls ``fn(instance, migration, dest)``, each
found by keyword or at its position in the target's signature, never
at a position written down here.

Two more kinds put in place what a library of ours builds itself:
``replace(module, target, factory)`` (REPLACE: ``factory(original,
state, owner)`` makes the callable, or any value, that takes the
original's place; ``per_object``: on the objects handed to
``Patcher.patch_object``, not on the class) and ``listen(module,
target, event, fn)`` (LISTEN: an SQLAlchemy event listener on the
class ``target``, or on the objects handed to ``patch_object``).

``compile_spec`` resolves a spec against the target's signature once,
when the point is applied, into the form the wrappers
(``instrument.runtime.wrappers``) read inline; ``pick`` reads one in a call.
Nothing here patches or records anything
(``instrument.patching.patcher`` does).
"""

import dataclasses
import inspect
import typing

Extractor = typing.Callable[[object, tuple, dict], object] | object


# -- extractors ---------------------------------------------------------------


class Arg:
    """Argument ``name`` of the call, by keyword or by position.

    The position (not counting ``self``) is found from the target's
    signature when the point is applied, so callers that pass it either
    way are both understood; there is no way to write a position down
    (a release that moves the argument would be read wrong, silently).
    ``then`` post-processes a found value (an attribute chain, uuids of
    objects ...).  The wrapper looks the argument up inline; only
    ``then`` costs a call.
    """

    __slots__ = ('name', 'then')

    def __init__(self, name: str, *, then=None):
        self.name = name
        self.then = then

    def position(self, func) -> int | None:
        """Index of the argument in ``func``'s positional parameters,
        ``self``/``cls`` excluded; -1 when it can only be a keyword
        (or is not a parameter); None when the signature cannot be
        read."""
        params = parameters(func)
        if params is None:
            return None
        if params and params[0].name in ('self', 'cls'):
            params = params[1:]
        for n, param in enumerate(params):
            if param.kind in (
                param.VAR_POSITIONAL,
                param.KEYWORD_ONLY,
                param.VAR_KEYWORD,
            ):
                break
            if param.name == self.name:
                return n
        return -1

    def found(self, func) -> bool:
        """Can a call of ``func`` pass this argument?  Its name is a
        parameter, or ``func`` takes ``**kwargs``.  True when the
        signature cannot be read (nothing to check against).
        """
        params = parameters(func)
        if params is None:
            return True
        for param in params:
            if param.name == self.name or param.kind == param.VAR_KEYWORD:
                return True
        return False


def parameters(func) -> list | None:
    """``func``'s parameters, through decorators: those that keep
    ``__wrapped__`` (``functools.wraps``), and those that do not but
    hold the one function they call in their closure (oslo.messaging's
    ``expected_exceptions``, on nova's RPC endpoints); None when they
    cannot be read."""
    for _depth in range(8):
        try:
            params = list(inspect.signature(func).parameters.values())
        except (TypeError, ValueError):
            return None
        if any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in params
        ):
            return params
        try:
            closure = getattr(inspect.unwrap(func), '__closure__', None)
        except ValueError:  # a __wrapped__ cycle
            return params
        inner = [
            cell.cell_contents
            for cell in closure or ()
            if inspect.isfunction(_contents(cell))
        ]
        if len(inner) != 1:
            return params
        func = inner[0]
    return None


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


class SelfAttr:
    """An attribute (chain) of the patched object, e.g. ``self.host``."""

    __slots__ = ('attrs',)

    def __init__(self, attrs) -> None:
        self.attrs = tuple(attrs)


def chain(attrs):
    def follow(value):
        for attr in attrs:
            if value is None:
                return None
            if value.__class__ is dict:
                value = value.get(attr)
            else:
                value = getattr(value, attr, None)
        return value

    return follow


def arg(name: str, *attrs: str) -> Arg:
    """Argument ``name`` (by keyword or at its place in the target's
    signature), then following ``attrs`` (attribute or dict key)."""
    if any(not isinstance(a, str) for a in attrs):
        raise TypeError('arg(%r): attributes are names, not positions' % name)
    return Arg(name, then=chain(attrs) if attrs else None)


def self_attr(*attrs: str) -> SelfAttr:
    """An attribute (chain) of the patched object, e.g. ``self.host``."""
    return SelfAttr(attrs)


def _uuid_list(attr: str):
    def convert(value):
        if value.__class__ is str:
            return [value]
        if isinstance(value, (list, tuple)):
            out = []
            for item in value:
                if item.__class__ is not str:
                    item = getattr(item, attr, None)
                if item is not None:
                    out.append(item)
            return out or None
        value = getattr(value, attr, None)
        return [value] if value is not None else None

    convert.attr = attr  # type: ignore[attr-defined]
    return convert


def uuids(name: str, *, attr: str = 'uuid') -> Arg:
    """Instance uuid(s) from an argument holding an object, a list of
    objects, a uuid string or a list of uuid strings."""
    return Arg(name, then=_uuid_list(attr))


class _Keywords:
    """The ``KEYWORDS`` spec: the call's keyword dict itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        return 'KEYWORDS'


#: A ``reads`` spec: the call's keywords dict itself (a hook that keeps
#: the call's identity, or reads keywords its target only takes so).
KEYWORDS = _Keywords()


def compile_spec(spec, func, offset: int):
    """(kind, name, absolute position, then-or-callable) for the wrapper:
    kind 0 nothing, 1 argument, 2 attribute of self, 3 plain callable
    ``(instance, args, kwargs)`` (a ``Reads``: bound to ``func``'s
    signature here), 5 the keywords dict (``KEYWORDS``).  ``func``
    None: arguments by keyword only."""
    if spec is None:
        return 0, None, -1, None
    if spec is KEYWORDS:
        return 5, None, -1, None
    if isinstance(spec, Arg):
        pos = spec.position(func) if func is not None else None
        absolute = -1 if pos is None or pos < 0 else pos + offset
        return 1, spec.name, absolute, spec.then
    if isinstance(spec, Reads):
        return 3, None, -1, spec.bind(func)
    if isinstance(spec, SelfAttr):
        if len(spec.attrs) == 1:
            return 2, spec.attrs[0], -1, None
        first, rest = spec.attrs[0], spec.attrs[1:]
        return 2, first, -1, chain(rest)
    return 3, None, -1, spec


def pick(spec, instance, args, kwargs, offset: int):
    """The value a compiled spec names in this call (see
    ``compile_spec``).

    The wrapper inlines the same lookups for the context and instances,
    the values every point wants; the others come through here.
    """
    kind, name, pos, fn = spec
    if kind == 1:
        if name in kwargs:
            value = kwargs[name]
        elif -1 < pos < len(args):
            value = args[pos]
        else:
            return None
        return fn(value) if fn is not None and value is not None else value
    if kind == 2:
        value = getattr(instance, name, None)
        return fn(value) if fn is not None and value is not None else value
    if kind == 5:
        return kwargs
    if kind:
        return fn(instance, args[offset:], kwargs)
    return None


class Reads:
    """A point's callable (``on_enter``, ``on_exit``, ``on_error``,
    ``when``, ``on_abandon``) that reads arguments of the call by name:
    ``fn(instance, value, ..., *rest)``, ``rest`` being what the
    wrapper passes after the arguments (the result, the exception).

    Each name is found by keyword or, from the target's signature, at
    its position (``bind``, when the point is applied): the same hook
    reads a call of two releases whose arguments moved.  A missing
    argument reads as None.
    """

    __slots__ = ('fn', 'specs')

    def __init__(self, fn, *specs) -> None:
        self.fn = fn
        self.specs = tuple(Arg(s) if isinstance(s, str) else s for s in specs)

    def bind(self, func):
        """A plain ``(instance, args, kwargs, *rest)`` callable that
        reads the arguments of a call of ``func`` (None: unknown
        signature, keywords only)."""
        fn = self.fn
        compiled = tuple(compile_spec(spec, func, 0) for spec in self.specs)
        # Up to three plain arguments (or the keywords dict), as most
        # hooks read: looked up inline, in a closure of their own (a
        # call per lookup would cost as much as the hook).
        plain = all(c[0] in (1, 5) and c[3] is None for c in compiled)
        if plain and len(compiled) == 1 and compiled[0][0] == 1:
            name, pos = compiled[0][1], compiled[0][2]

            def read_arg(instance, args, kwargs, *rest):
                if name in kwargs:
                    return fn(instance, kwargs[name], *rest)
                if -1 < pos < len(args):
                    return fn(instance, args[pos], *rest)
                return fn(instance, None, *rest)

            return read_arg
        if plain and len(compiled) in (2, 3):
            padded = compiled + ((0, None, -1, None),) * (3 - len(compiled))
            (k1, n1, p1, _), (k2, n2, p2, _), (k3, n3, p3, _) = padded

            def read_three(instance, args, kwargs, *rest):
                size = len(args)
                first = (
                    kwargs
                    if k1 == 5
                    else kwargs[n1]
                    if n1 in kwargs
                    else args[p1]
                    if -1 < p1 < size
                    else None
                )
                second = (
                    kwargs
                    if k2 == 5
                    else kwargs[n2]
                    if n2 in kwargs
                    else args[p2]
                    if -1 < p2 < size
                    else None
                )
                if not k3:
                    return fn(instance, first, second, *rest)
                third = (
                    kwargs
                    if k3 == 5
                    else kwargs[n3]
                    if n3 in kwargs
                    else args[p3]
                    if -1 < p3 < size
                    else None
                )
                return fn(instance, first, second, third, *rest)

            return read_three
        if len(compiled) == 1:
            one = compiled[0]

            def read_one(instance, args, kwargs, *rest):
                return fn(
                    instance, pick(one, instance, args, kwargs, 0), *rest
                )

            return read_one

        def read(instance, args, kwargs, *rest):
            # the arguments inline (a call per lookup would cost as
            # much as the hook); anything else through pick
            size = len(args)
            values = []
            for spec in compiled:
                kind, name, pos, then = spec
                if kind == 1:
                    if name in kwargs:
                        value = kwargs[name]
                    elif -1 < pos < size:
                        value = args[pos]
                    else:
                        value = None
                    if then is not None and value is not None:
                        value = then(value)
                elif kind == 5:
                    value = kwargs
                else:
                    value = pick(spec, instance, args, kwargs, 0)
                values.append(value)
            return fn(instance, *values, *rest)

        return read

    def __call__(self, instance, args, kwargs, *rest):
        # Unbound (a hook called outside a wrapper): keywords only.
        return self.bind(None)(instance, args, kwargs, *rest)


class Places:
    """A HOOK's ``on_enter`` that passes the call's arguments on,
    changed (nova's thread start: the function to run in the new
    thread, wrapped): ``fn(instance, args, kwargs, place, ..., *rest)``,
    each ``place`` the index in ``args`` of a named argument, from the
    target's signature (``bind``, when the point is applied; -1: it
    can only be a keyword, or is no parameter).  ``fn`` looks in
    ``kwargs`` first, then at the place: never at a position written
    down."""

    __slots__ = ('fn', 'specs')

    def __init__(self, fn, *specs) -> None:
        self.fn = fn
        self.specs = tuple(Arg(s) if isinstance(s, str) else s for s in specs)

    def bind(self, func):
        fn = self.fn
        found = (
            [spec.position(func) for spec in self.specs]
            if func is not None
            else [None] * len(self.specs)
        )
        where = tuple(-1 if p is None else p for p in found)

        def placed(instance, args, kwargs, *rest):
            return fn(instance, args, kwargs, *where, *rest)

        return placed

    def __call__(self, instance, args, kwargs, *rest):
        # Unbound (a hook called outside a wrapper): keywords only.
        return self.bind(None)(instance, args, kwargs, *rest)


def places(fn, *names) -> Places:
    """``fn(instance, args, kwargs, *places, *rest)``, the places in
    ``args`` of the arguments ``names`` of the call."""
    return Places(fn, *names)


def reads(fn, *names) -> Reads:
    """``fn(instance, *values, *rest)``, the values of the arguments
    ``names`` (or ``Arg``/``SelfAttr`` specs) of the call."""
    return Reads(fn, *names)


def bind(hook, func):
    """``hook`` as the wrapper calls it on ``func``: a ``Reads`` or
    ``Places`` bound to ``func``'s signature, any other callable as it
    is."""
    if isinstance(hook, (Reads, Places)):
        return hook.bind(func)
    return hook


CONTEXT = arg('context')


SPAN = 'span'
HOOK = 'hook'
REPLACE = 'replace'
LISTEN = 'listen'


@dataclasses.dataclass(frozen=True)
class PatchPoint:
    """One instrumented callable, described as data.

    ``kind`` SPAN (the default) records a span named ``event``:
    ``context``, ``instances``, ``host``, ``service_from`` and
    ``remote_parent`` pick values out of the call (``Arg``/``SelfAttr``
    specs or ``(instance, args, kwargs)`` callables, ``args`` without
    ``self``); ``on_enter``/``on_exit``/``on_error`` return small attrs
    dicts; ``on_abandon`` (``(instance, args, kwargs)``) undoes what
    ``on_enter`` set aside (a context variable) when a fault of the
    point's own code kept ``on_exit``/``on_error`` from running or from
    finishing, once nova's call is over, and must be harmless when they
    did run; ``result_instances`` takes the instance uuids from the
    result;
    ``when`` (an ``(instance, args, kwargs)`` callable) returning false
    lets a call through unrecorded (a point that matters in one service
    only).
    ``kind`` HOOK records nothing: ``on_enter`` may return ``(args,
    kwargs)`` to call the target with instead, ``on_exit`` sees the
    result.  ``kind`` REPLACE puts ``replace(original, state, owner)``
    in the target's place (the replacement does its own recording and
    reads ``state.active``: false once removed or disabled); ``kind``
    LISTEN attaches ``listen`` (``(event, fn, kwargs)``) to the
    SQLAlchemy class ``target`` with ``sqlalchemy.event.listen``.
    ``per_object``: REPLACE and LISTEN points patched on the objects
    handed to ``Patcher.patch_object``, not on the class.
    ``alternatives`` are other ``(module, target)`` places of the same
    code in other releases.
    """

    module: str
    target: str
    event: str
    service: str | None = None
    context: Extractor | None = CONTEXT
    instances: Extractor | None = None
    host: Extractor | None = None
    on_enter: typing.Callable | None = None
    on_exit: typing.Callable | None = None
    on_error: typing.Callable | None = None
    remote_parent: Extractor | None = None
    service_from: Extractor | None = None
    result_instances: typing.Callable | None = None
    detail: bool = False
    when: typing.Callable | None = None
    alternatives: tuple = ()
    kind: str = SPAN
    #: False: a call outside any span (and without a context of its
    #: own) records no request id, rather than oslo.context's current
    #: one, which is stale in periodic tasks and at start-up.
    request_outside_spans: bool = True
    #: See the class docstring.
    on_abandon: typing.Callable | None = None
    #: ``(exception) -> (class, short message)`` in place of
    #: ``tracer.error_of`` (a point whose library puts URLs or other
    #: values in its messages).
    error: typing.Callable | None = None
    #: REPLACE: ``(original, state, owner) -> replacement``.
    replace: typing.Callable | None = None
    #: LISTEN: ``(SQLAlchemy event name, listener, listen() keywords)``.
    listen: tuple | None = None
    #: REPLACE/LISTEN on objects given to ``Patcher.patch_object``.
    per_object: bool = False
    #: REPLACE: the ``Arg`` specs its replacement reads of a call (by
    #: name, against the signature), checked as a SPAN's are.
    replace_reads: tuple = ()

    @property
    def name(self) -> str:
        if self.listen is not None:
            return '%s:%s@%s' % (self.module, self.target, self.listen[0])
        return '%s:%s' % (self.module, self.target)

    def candidates(self) -> list:
        return [(self.module, self.target)] + list(self.alternatives)

    def arguments(self) -> list:
        """The ``Arg`` specs this point reads of a call (its extractors,
        read by a SPAN only, the arguments its ``reads`` hooks name,
        and a REPLACE's ``replace_reads``)."""
        out = []
        extractors = (
            (
                self.context,
                self.instances,
                self.host,
                self.remote_parent,
                self.service_from,
            )
            if self.kind == SPAN
            else ()
        )
        for spec in extractors:
            if isinstance(spec, Arg):
                out.append(spec)
            elif isinstance(spec, Reads):
                out.extend(s for s in spec.specs if isinstance(s, Arg))
        for hook in (
            self.on_enter,
            self.on_exit,
            self.on_error,
            self.when,
            self.on_abandon,
        ):
            if isinstance(hook, (Reads, Places)):
                out.extend(s for s in hook.specs if isinstance(s, Arg))
        out.extend(s for s in self.replace_reads if isinstance(s, Arg))
        return out

    def unread(self, func) -> list:
        """Names of the arguments this point reads that a call of
        ``func`` cannot pass (``Arg.found``): read as None, always."""
        return [spec.name for spec in self.arguments() if not spec.found(func)]


def replace(
    module: str,
    target: str,
    factory: typing.Callable,
    per_object: bool = False,
    **kw,
) -> PatchPoint:
    """A REPLACE point: ``factory(original, state, owner)`` takes the
    place of ``module:target`` (``per_object``: of that attribute of
    the objects handed to ``Patcher.patch_object``)."""
    return PatchPoint(
        module,
        target,
        '',
        kind=REPLACE,
        context=None,
        replace=factory,
        per_object=per_object,
        **kw,
    )


def listen(
    module: str,
    target: str,
    event: str,
    fn: typing.Callable,
    per_object: bool = False,
    **listen_kw,
) -> PatchPoint:
    """A LISTEN point: ``fn`` listens to SQLAlchemy event ``event`` of
    class ``module:target`` (``per_object``: of the objects handed to
    ``Patcher.patch_object``), with ``listen_kw`` (``insert=True``,
    ``retval=True``)."""
    return PatchPoint(
        module,
        target,
        '',
        kind=LISTEN,
        context=None,
        listen=(event, fn, listen_kw),
        per_object=per_object,
    )
