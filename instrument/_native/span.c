/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may
 * not use this file except in compliance with the License. You may obtain
 * a copy of the License at
 *
 *      http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 * WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 * License for the specific language governing permissions and limitations
 * under the License.
 */

/*
 * instrument._native._span: the common case of a span point's wrapper
 * (instrument.runtime.wrappers.span_wrapper's ``patched``) in C.
 *
 * A ``SpanCall`` holds the configuration the Python closure closes over
 * and does, per call, what the closure does for a point whose start and
 * end are the recorder's own (``begin``/``end`` carrying their steps;
 * the end of a call that ended well done inline, for a point with an
 * ``on_exit`` or ``result_instances`` those hooks called first and
 * their attributes and instances set as ``end`` sets them, as the
 * closure does), whose context is an argument
 * (maybe converted), whose instances an argument (the uuid attribute
 * read inline), whose host an attribute of self, with no remote parent,
 * no ``service_from``, no ``when``, not a detail point and recording
 * oslo.context's request outside spans.  span_wrapper picks it only
 * for such points; every other one keeps the Python closure.
 *
 * Every step is a call of the same Python object the closure calls
 * (the ``SpanSteps`` parts: clock, get_ident, the frame ContextVar's
 * get/set/reset, oslo.context's request, the deque's append, the
 * buffer's start/drop; the point's hooks; the recorder's end, abandon,
 * release and the state's fault on the error paths), in the same
 * order, so a fault put in a part is reached, and the record written is
 * the same, byte for byte (tests/unit/test_wrapper_end.py).  The module
 * globals the closure reads per call (recorder.span_prefix,
 * span_counter, wall_offset_ns) are read per call from the recorder
 * module's dict.  nova's callable is called exactly once, with the
 * arguments it was given, outside any guarded step; its result or
 * exception goes back unchanged.
 *
 * The span's record (a list) and its frame (a tuple) are untracked by
 * the cyclic garbage collector: neither ever refers back to itself
 * (a record holds ints, strings, the frame's token, an attrs dict, a
 * list of uuid strings), and the collector no longer walks the records
 * waiting in the buffer's queue at every collection.
 *
 * ``_trace(True)`` (the fault tests only) makes each call of a part
 * note, for its OS thread, what called it (``_traced()``: the SpanCall,
 * whether nova's callable has returned, the Python frame that called
 * the wrapper), the C path's equivalent of the closure's frame, which
 * the fault tests' scopes look for.  Off (the default), it costs a test
 * of an int.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

/* The record's layout (instrument.runtime.record: I_PH ... I_TOKEN). */
#define R_PH 0
#define R_TS 1
#define R_DUR 2
#define R_HOST 3
#define R_SVC 4
#define R_TID 5
#define R_EV 6
#define R_SPAN 7
#define R_PARENT 8
#define R_REQ 9
#define R_GREQ 10
#define R_INST 11
#define R_ST 12
#define R_ERR 13
#define R_ATTRS 14
#define R_T0 15
#define R_TOKEN 16
#define R_LEN 17

/* The frame's layout (instrument.runtime.recorder: F_SPAN ... F_EV). */
#define F_SPAN 0
#define F_REQ 1
#define F_GREQ 2
#define F_INST 3
#define F_SVC 4
#define F_HOST 5
#define F_LEN 7

static PyObject *s_request_id, *s_global_request_id, *s_writer, *s_start,
    *s_drop, *s_span_prefix, *s_span_counter, *s_wall_offset_ns, *s_active;
static PyObject *k_mask32, *k_1000;

/* _trace(): on while the fault tests run (what called a part: in the
 * thread state's dict, under s_traced). */
static int tracing = 0;
static PyObject *s_traced;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *weakreflist;
    /* configuration (see span_wrapper) */
    PyObject *original;
    PyObject *state;
    PyObject *ev;
    PyObject *svc;
    PyObject *c_name;
    PyObject *c_fn;
    PyObject *i_name;
    PyObject *i_fn;
    PyObject *i_attr;
    PyObject *h_name;
    PyObject *h_fn;
    PyObject *on_enter;
    PyObject *on_error;
    PyObject *on_abandon;
    PyObject *on_exit;
    PyObject *result_instances;
    /* the SpanSteps parts */
    PyObject *start_clock;
    PyObject *get_ident;
    PyObject *get_frame;
    PyObject *set_frame;
    PyObject *oslo_request;
    PyObject *emit;
    PyObject *append;
    PyObject *queue;
    PyObject *buf;
    PyObject *process_svc;
    PyObject *process_host;
    /* the end, and the error paths */
    PyObject *clock;
    PyObject *reset_span;
    PyObject *end;
    PyObject *error_of;
    PyObject *fault;
    PyObject *abandon;
    PyObject *release;
    PyObject *abandon_hook;
    /* the recorder module's dict (span_prefix, span_counter, ...) */
    PyObject *globals;
    PyObject *ph_b;
    PyObject *ph_x;
    PyObject *st_ok;
    PyObject *st_error;
    /* the last span_prefix and wall_offset_ns read, and their values
     * (ints: converted again only when the module's changes) */
    PyObject *prefix_obj;
    unsigned long long prefix_val;
    PyObject *offset_obj;
    long long offset_val;
    /* not objects */
    int is_method;
    int hooked_end; /* an on_exit or a result_instances */
    int c_kind;
    int i_kind;
    int h_kind;
    Py_ssize_t c_pos;
    Py_ssize_t i_pos;
    Py_ssize_t limit;
} SpanCall;

#define FIRST_OBJ offsetof(SpanCall, original)
#define END_OBJ (offsetof(SpanCall, st_error) + sizeof(PyObject *))
#define N_OBJ ((END_OBJ - FIRST_OBJ) / sizeof(PyObject *))
#define OBJ_AT(self, n) \
    (((PyObject **)((char *)(self) + FIRST_OBJ))[(n)])

/* The constructor's keywords, in the order of the struct's objects. */
static const char *const obj_names[] = {
    "original", "state", "ev", "svc", "c_name", "c_fn", "i_name", "i_fn",
    "i_attr", "h_name", "h_fn", "on_enter", "on_error", "on_abandon",
    "on_exit", "result_instances",
    "start_clock", "get_ident", "get_frame", "set_frame", "oslo_request",
    "emit", "append", "queue", "buf", "process_svc", "process_host",
    "clock", "reset_span", "end", "error_of", "fault", "abandon",
    "release", "abandon_hook", "globals", "ph_b", "ph_x", "st_ok",
    "st_error", NULL,
};

/* -- calls ---------------------------------------------------------------- */

static PyObject *
call_traced(SpanCall *self, int after, PyObject *fn, PyObject *const *args,
            size_t nargs)
{
    /* per OS thread: another may run while this one is in a part */
    PyObject *tdict = PyThreadState_GetDict();
    if (tdict == NULL)
        return PyObject_Vectorcall(fn, args, nargs, NULL);
    PyFrameObject *frame = PyEval_GetFrame();
    PyObject *info = PyTuple_Pack(
        3, (PyObject *)self, after ? Py_True : Py_False,
        frame ? (PyObject *)frame : Py_None);
    if (info == NULL)
        return NULL;
    PyObject *old = PyDict_GetItemWithError(tdict, s_traced);
    if (old == NULL && PyErr_Occurred()) {
        Py_DECREF(info);
        return NULL;
    }
    Py_XINCREF(old);
    if (PyDict_SetItem(tdict, s_traced, info) < 0) {
        Py_DECREF(info);
        Py_XDECREF(old);
        return NULL;
    }
    Py_DECREF(info);
    PyObject *res = PyObject_Vectorcall(fn, args, nargs, NULL);
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    if (PyDict_SetItem(tdict, s_traced, old ? old : Py_None) < 0)
        PyErr_Clear();
    PyErr_Restore(exc_type, exc_value, exc_tb);
    Py_XDECREF(old);
    return res;
}

/* fn(*args): a part or a hook, noted when tracing. */
static inline PyObject *
call(SpanCall *self, int after, PyObject *fn, PyObject *const *args,
     size_t nargs)
{
    if (tracing)
        return call_traced(self, after, fn, args, nargs);
    return PyObject_Vectorcall(fn, args, nargs, NULL);
}

static inline PyObject *
call0(SpanCall *self, int after, PyObject *fn)
{
    return call(self, after, fn, NULL, 0);
}

static inline PyObject *
call1(SpanCall *self, int after, PyObject *fn, PyObject *arg)
{
    PyObject *args[1] = {arg};
    return call(self, after, fn, args, 1);
}

/* getattr(obj, name, None): a new reference, or NULL on an error that
 * is not an AttributeError. */
static PyObject *
getattr_opt(PyObject *obj, PyObject *name)
{
    PyObject *res;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyObject_GetOptionalAttr(obj, name, &res) < 0)
        return NULL;
#else
    if (_PyObject_LookupAttr(obj, name, &res) < 0)
        return NULL;
#endif
    return res ? res : Py_NewRef(Py_None);
}

/* seq[i], a new reference (a frame is a tuple of 7: the fast case). */
static inline PyObject *
item(PyObject *seq, Py_ssize_t i)
{
    if (PyTuple_CheckExact(seq) && i < PyTuple_GET_SIZE(seq))
        return Py_NewRef(PyTuple_GET_ITEM(seq, i));
    return PySequence_GetItem(seq, i);
}

/* The argument ``name`` (by keyword) or at ``pos``; borrowed, NULL when
 * the call passed neither. */
static PyObject *
find_arg(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
         PyObject *name, Py_ssize_t pos)
{
    if (kwnames != NULL) {
        Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < n; k++) {
            if (PyTuple_GET_ITEM(kwnames, k) == name)
                return args[nargs + k];
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, k);
            if (PyUnicode_Check(key) && PyUnicode_Compare(key, name) == 0)
                return args[nargs + k];
        }
    }
    if (-1 < pos && pos < nargs)
        return args[pos];
    return NULL;
}

/* (a + b) // d and (a - b) // d for ints, as Python computes them. */
static PyObject *
combine_floordiv(PyObject *a, PyObject *b, int subtract)
{
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int oa, ob;
        long long x = PyLong_AsLongLongAndOverflow(a, &oa);
        long long y = PyLong_AsLongLongAndOverflow(b, &ob);
        long long s;
        if (!oa && !ob && !PyErr_Occurred()
            && !(subtract ? __builtin_sub_overflow(x, y, &s)
                          : __builtin_add_overflow(x, y, &s))) {
            long long q = s / 1000;
            if (s % 1000 != 0 && s < 0)
                q -= 1;
            return PyLong_FromLongLong(q);
        }
        if (PyErr_Occurred())
            return NULL;
    }
    PyObject *s = subtract ? PyNumber_Subtract(a, b) : PyNumber_Add(a, b);
    if (s == NULL)
        return NULL;
    PyObject *q = PyNumber_FloorDivide(s, k_1000);
    Py_DECREF(s);
    return q;
}

/* span_prefix | (next(span_counter) & 0xFFFFFFFF), globals read now. */
static PyObject *
new_span_id(SpanCall *self)
{
    PyObject *prefix = PyDict_GetItemWithError(self->globals, s_span_prefix);
    if (prefix == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_AttributeError, s_span_prefix);
        return NULL;
    }
    Py_INCREF(prefix);
    PyObject *counter =
        PyDict_GetItemWithError(self->globals, s_span_counter);
    if (counter == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_AttributeError, s_span_counter);
        Py_DECREF(prefix);
        return NULL;
    }
    if (!PyIter_Check(counter)) {
        PyErr_Format(PyExc_TypeError, "'%.200s' object is not an iterator",
                     Py_TYPE(counter)->tp_name);
        Py_DECREF(prefix);
        return NULL;
    }
    Py_INCREF(counter);
    PyObject *n = PyIter_Next(counter);
    Py_DECREF(counter);
    if (n == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetNone(PyExc_StopIteration);
        Py_DECREF(prefix);
        return NULL;
    }
    PyObject *span = NULL;
    if (PyLong_CheckExact(n) && PyLong_CheckExact(prefix)) {
        unsigned long long low = PyLong_AsUnsignedLongLongMask(n);
        unsigned long long high;
        if (prefix == self->prefix_obj)
            high = self->prefix_val;
        else {
            high = PyLong_AsUnsignedLongLong(prefix);
            if (!PyErr_Occurred()) {
                Py_XSETREF(self->prefix_obj, Py_NewRef(prefix));
                self->prefix_val = high;
            }
        }
        if (!PyErr_Occurred()) {
            span = PyLong_FromUnsignedLongLong(high | (low & 0xFFFFFFFFULL));
            Py_DECREF(n);
            Py_DECREF(prefix);
            return span;
        }
        PyErr_Clear(); /* out of range: as Python computes it */
    }
    PyObject *low = PyNumber_And(n, k_mask32);
    if (low != NULL) {
        span = PyNumber_Or(prefix, low);
        Py_DECREF(low);
    }
    Py_DECREF(n);
    Py_DECREF(prefix);
    return span;
}

/* The hooks' (args[offset:], kwargs), made once per call when needed. */
typedef struct {
    PyObject *rest;
    PyObject *kwargs;
} HookArgs;

static int
hook_args(SpanCall *self, HookArgs *h, PyObject *const *args,
          Py_ssize_t nargs, PyObject *kwnames)
{
    if (h->rest != NULL)
        return 0;
    Py_ssize_t off = self->is_method;
    h->rest = PyTuple_New(nargs - off);
    if (h->rest == NULL)
        return -1;
    for (Py_ssize_t k = off; k < nargs; k++)
        PyTuple_SET_ITEM(h->rest, k - off, Py_NewRef(args[k]));
    h->kwargs = PyDict_New();
    if (h->kwargs == NULL)
        return -1;
    if (kwnames != NULL) {
        Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < n; k++) {
            if (PyDict_SetItem(h->kwargs, PyTuple_GET_ITEM(kwnames, k),
                               args[nargs + k]) < 0)
                return -1;
        }
    }
    return 0;
}

/* _abandon_hook(on_abandon, fault, instance, args, kwargs): 0, or -1
 * with an exception set. */
static int
run_abandon_hook(SpanCall *self, HookArgs *h, PyObject *instance,
                 PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (hook_args(self, h, args, nargs, kwnames) < 0)
        return -1;
    PyObject *a[5] = {self->on_abandon, self->fault, instance, h->rest,
                      h->kwargs};
    PyObject *r = call(self, 1, self->abandon_hook, a, 5);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* nova's call, with the arguments it was given (the hooks' kwargs when
 * they were made: what on_enter saw). */
static inline PyObject *
call_nova(SpanCall *self, HookArgs *h, PyObject *const *args,
          size_t nargsf, PyObject *kwnames)
{
    if (h->kwargs != NULL)
        return PyObject_VectorcallDict(self->original, args,
                                       PyVectorcall_NARGS(nargsf), h->kwargs);
    return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
}

/* -- the call -------------------------------------------------------------- */

/* Start the span: its record, queued; NULL with an exception set when
 * something failed (nothing queued, the frame released). */
static PyObject *
start(SpanCall *self, HookArgs *h, PyObject *instance, PyObject *const *args,
      Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *ctx = NULL, *inst = NULL, *host = NULL, *attrs = NULL;
    PyObject *frame = NULL, *req = NULL, *greq = NULL, *span_svc = NULL;
    PyObject *parent = NULL, *span = NULL, *t0 = NULL, *ts = NULL;
    PyObject *tid = NULL, *fr = NULL, *token = NULL, *rec = NULL;
    PyObject *v;

    /* the context */
    ctx = Py_NewRef(Py_None);
    if (self->c_kind) {
        v = find_arg(args, nargs, kwnames, self->c_name, self->c_pos);
        if (v != NULL && v != Py_None) {
            Py_SETREF(ctx, Py_NewRef(v));
            if (self->c_kind == 4) {
                v = call1(self, 0, self->c_fn, ctx);
                if (v == NULL)
                    goto fail;
                Py_SETREF(ctx, v);
            }
        }
    }
    /* the instances */
    inst = Py_NewRef(Py_None);
    if (self->i_kind) {
        v = find_arg(args, nargs, kwnames, self->i_name, self->i_pos);
        if (v != NULL && v != Py_None) {
            Py_SETREF(inst, Py_NewRef(v));
            if (self->i_fn != Py_None) {
                PyObject *uuid = Py_NewRef(Py_None);
                if (self->i_attr != Py_None) {
                    Py_SETREF(uuid, getattr_opt(inst, self->i_attr));
                    if (uuid == NULL)
                        goto fail;
                }
                if (PyUnicode_CheckExact(uuid)) {
                    v = PyList_New(1);
                    if (v == NULL) {
                        Py_DECREF(uuid);
                        goto fail;
                    }
                    PyList_SET_ITEM(v, 0, uuid);
                    PyObject_GC_UnTrack(v); /* a string only */
                }
                else {
                    Py_DECREF(uuid);
                    v = call1(self, 0, self->i_fn, inst);
                    if (v == NULL)
                        goto fail;
                }
                Py_SETREF(inst, v);
            }
        }
    }
    /* the host */
    if (self->h_kind == 2) {
        host = getattr_opt(instance, self->h_name);
        if (host == NULL)
            goto fail;
        if (self->h_fn != Py_None && host != Py_None) {
            v = call1(self, 0, self->h_fn, host);
            if (v == NULL)
                goto fail;
            Py_SETREF(host, v);
        }
    }
    else
        host = Py_NewRef(Py_None);
    span_svc = Py_NewRef(self->svc);
    /* on_enter's attrs */
    if (self->on_enter != Py_None) {
        if (hook_args(self, h, args, nargs, kwnames) < 0)
            goto fail;
        PyObject *a[3] = {instance, h->rest, h->kwargs};
        attrs = call(self, 0, self->on_enter, a, 3);
        if (attrs == NULL)
            goto fail;
    }
    else
        attrs = Py_NewRef(Py_None);

    /* Recorder.begin's steps, in its order */
    frame = call0(self, 0, self->get_frame);
    if (frame == NULL)
        goto fail;
    req = Py_NewRef(Py_None);
    greq = Py_NewRef(Py_None);
    if (ctx != Py_None) {
        if (PyDict_CheckExact(ctx)) { /* serialised (RPC) */
            v = PyDict_GetItemWithError(ctx, s_request_id);
            if (v == NULL && PyErr_Occurred())
                goto fail;
            Py_SETREF(req, Py_NewRef(v ? v : Py_None));
            v = PyDict_GetItemWithError(ctx, s_global_request_id);
            if (v == NULL && PyErr_Occurred())
                goto fail;
            Py_SETREF(greq, Py_NewRef(v ? v : Py_None));
        }
        else {
            Py_SETREF(req, getattr_opt(ctx, s_request_id));
            if (req == NULL)
                goto fail;
            Py_SETREF(greq, getattr_opt(ctx, s_global_request_id));
            if (greq == NULL)
                goto fail;
        }
    }
    if (frame != Py_None) {
        if (req == Py_None) {
            Py_SETREF(req, item(frame, F_REQ));
            if (req == NULL)
                goto fail;
            Py_SETREF(greq, item(frame, F_GREQ));
            if (greq == NULL)
                goto fail;
        }
        if (inst == Py_None) {
            Py_SETREF(inst, item(frame, F_INST));
            if (inst == NULL)
                goto fail;
        }
        if (span_svc == Py_None) {
            Py_SETREF(span_svc, item(frame, F_SVC));
            if (span_svc == NULL)
                goto fail;
        }
        if (host == Py_None) {
            Py_SETREF(host, item(frame, F_HOST));
            if (host == NULL)
                goto fail;
        }
        parent = item(frame, F_SPAN);
        if (parent == NULL)
            goto fail;
    }
    else {
        parent = Py_NewRef(Py_None);
        if (req == Py_None) {
            PyObject *pair = call0(self, 0, self->oslo_request);
            if (pair == NULL)
                goto fail;
            PyObject *seq = PySequence_Tuple(pair);
            Py_DECREF(pair);
            if (seq == NULL)
                goto fail;
            if (PyTuple_GET_SIZE(seq) != 2) {
                PyErr_Format(PyExc_ValueError,
                             PyTuple_GET_SIZE(seq) > 2
                                 ? "too many values to unpack (expected 2)"
                                 : "not enough values to unpack "
                                   "(expected 2, got %zd)",
                             PyTuple_GET_SIZE(seq));
                Py_DECREF(seq);
                goto fail;
            }
            Py_SETREF(req, Py_NewRef(PyTuple_GET_ITEM(seq, 0)));
            Py_SETREF(greq, Py_NewRef(PyTuple_GET_ITEM(seq, 1)));
            Py_DECREF(seq);
        }
    }
    if (span_svc == Py_None)
        Py_SETREF(span_svc, Py_NewRef(self->process_svc));
    if (host == Py_None)
        Py_SETREF(host, Py_NewRef(self->process_host));
    span = new_span_id(self);
    if (span == NULL)
        goto fail;
    t0 = call0(self, 0, self->start_clock);
    if (t0 == NULL)
        goto fail;
    v = PyDict_GetItemWithError(self->globals, s_wall_offset_ns);
    if (v == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_AttributeError, s_wall_offset_ns);
        goto fail;
    }
    if (v == self->offset_obj && PyLong_CheckExact(t0)) {
        /* the anchor of the last call: its value known */
        int over;
        long long x = PyLong_AsLongLongAndOverflow(t0, &over), sum;
        if (x == -1 && PyErr_Occurred())
            goto fail;
        if (!over && !__builtin_add_overflow(x, self->offset_val, &sum)) {
            long long q = sum / 1000;
            if (sum % 1000 != 0 && sum < 0)
                q -= 1;
            ts = PyLong_FromLongLong(q);
            if (ts == NULL)
                goto fail;
        }
    }
    if (ts == NULL) {
        Py_INCREF(v);
        if (PyLong_CheckExact(v)) {
            int over;
            long long y = PyLong_AsLongLongAndOverflow(v, &over);
            if (y == -1 && PyErr_Occurred()) {
                Py_DECREF(v);
                goto fail;
            }
            if (!over) {
                Py_XSETREF(self->offset_obj, Py_NewRef(v));
                self->offset_val = y;
            }
        }
        ts = combine_floordiv(t0, v, 0);
        Py_DECREF(v);
    }
    if (ts == NULL)
        goto fail;
    tid = call0(self, 0, self->get_ident);
    if (tid == NULL)
        goto fail;
    fr = PyTuple_Pack(F_LEN, span, req, greq, inst, span_svc, host, self->ev);
    if (fr == NULL)
        goto fail;
    PyObject_GC_UnTrack(fr); /* never refers back */
    token = call1(self, 0, self->set_frame, fr);
    if (token == NULL)
        goto fail;
    rec = PyList_New(R_LEN);
    if (rec == NULL)
        goto fail;
#define PUT(i, o) PyList_SET_ITEM(rec, (i), (o))
    PUT(R_PH, Py_NewRef(self->ph_b));
    PUT(R_TS, ts);
    ts = NULL;
    PUT(R_DUR, Py_NewRef(Py_None));
    PUT(R_HOST, host);
    host = NULL;
    PUT(R_SVC, span_svc);
    span_svc = NULL;
    PUT(R_TID, tid);
    tid = NULL;
    PUT(R_EV, Py_NewRef(self->ev));
    PUT(R_SPAN, span);
    span = NULL;
    PUT(R_PARENT, parent);
    parent = NULL;
    PUT(R_REQ, req);
    req = NULL;
    PUT(R_GREQ, greq);
    greq = NULL;
    PUT(R_INST, inst);
    inst = NULL;
    PUT(R_ST, Py_NewRef(Py_None));
    PUT(R_ERR, Py_NewRef(Py_None));
    PUT(R_ATTRS, attrs);
    attrs = NULL;
    PUT(R_T0, t0);
    t0 = NULL;
    PUT(R_TOKEN, token);
    token = NULL;
#undef PUT
    /* Records never form cycles (see the top): the collector need not
     * walk the ones waiting in the queue. */
    PyObject_GC_UnTrack(rec);

    /* EventBuffer.emit's steps (see there) */
    if (self->append == Py_None) {
        v = call1(self, 0, self->emit, rec);
        if (v == NULL)
            goto not_queued;
        Py_DECREF(v);
    }
    else {
        Py_ssize_t n = PyObject_Size(self->queue);
        if (n < 0)
            goto not_queued;
        if (n < self->limit) {
            PyObject *writer = PyObject_GetAttr(self->buf, s_writer);
            if (writer == NULL)
                goto not_queued;
            int none = writer == Py_None;
            Py_DECREF(writer);
            if (none) {
                PyObject *m = PyObject_GetAttr(self->buf, s_start);
                if (m == NULL)
                    goto not_queued;
                v = call0(self, 0, m);
                Py_DECREF(m);
                if (v == NULL)
                    goto not_queued;
                Py_DECREF(v);
            }
            v = call1(self, 0, self->append, rec);
            if (v == NULL)
                goto not_queued;
            Py_DECREF(v);
        }
        else {
            PyObject *m = PyObject_GetAttr(self->buf, s_drop);
            if (m == NULL)
                goto not_queued;
            v = call0(self, 0, m);
            Py_DECREF(m);
            if (v == NULL)
                goto not_queued;
            Py_DECREF(v);
        }
    }
    Py_DECREF(ctx);
    Py_DECREF(frame);
    Py_DECREF(fr);
    return rec;

not_queued: {
    /* release(rec), the exception kept */
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    v = call1(self, 0, self->release, rec);
    if (v == NULL) {
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
    }
    else {
        Py_DECREF(v);
        PyErr_Restore(exc_type, exc_value, exc_tb);
    }
}
fail:
    Py_XDECREF(ctx);
    Py_XDECREF(inst);
    Py_XDECREF(host);
    Py_XDECREF(attrs);
    Py_XDECREF(frame);
    Py_XDECREF(req);
    Py_XDECREF(greq);
    Py_XDECREF(span_svc);
    Py_XDECREF(parent);
    Py_XDECREF(span);
    Py_XDECREF(t0);
    Py_XDECREF(ts);
    Py_XDECREF(tid);
    Py_XDECREF(fr);
    Py_XDECREF(token);
    Py_XDECREF(rec);
    return NULL;
}

/* A fault of the instrumentation (an Exception: counted, the call goes
 * on): 0; anything else (or a fault that fault() itself raised): -1,
 * the exception set. */
static int
counted(SpanCall *self)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyErr_NormalizeException(&exc_type, &exc_value, &exc_tb);
    if (exc_tb != NULL && exc_value != NULL)
        PyException_SetTraceback(exc_value, exc_tb);
    PyObject *r = PyObject_CallOneArg(self->fault, exc_value);
    Py_XDECREF(exc_type);
    Py_XDECREF(exc_value);
    Py_XDECREF(exc_tb);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The end's fault path: abandon(rec, st, t1), fault(exc), on_abandon.
 * 0, or -1 with an exception set (one that is not an Exception, or one
 * of these). */
static int
end_fault(SpanCall *self, HookArgs *h, PyObject *rec, PyObject *st,
          PyObject *t1, PyObject *instance, PyObject *const *args,
          Py_ssize_t nargs, PyObject *kwnames)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *a[3] = {rec, st, t1 ? t1 : Py_None};
    PyObject *r = PyObject_Vectorcall(self->abandon, a, 3, NULL);
    if (r == NULL) {
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
        return -1;
    }
    Py_DECREF(r);
    PyErr_Restore(exc_type, exc_value, exc_tb);
    if (counted(self) < 0)
        return -1;
    if (self->on_abandon != Py_None)
        return run_abandon_hook(self, h, instance, args, nargs, kwnames);
    return 0;
}

/* The hooks of a point with an ``on_exit`` or ``result_instances``,
 * called as the closure calls them once nova's call has returned:
 * ``*attrs`` and ``*found`` new references (or NULL: no hook); 0, or
 * -1 with an exception set. */
static int
exit_hooks(SpanCall *self, HookArgs *h, PyObject *result,
           PyObject *instance, PyObject *const *args, Py_ssize_t nargs,
           PyObject *kwnames, PyObject **attrs, PyObject **found)
{
    if (self->on_exit != Py_None) {
        if (hook_args(self, h, args, nargs, kwnames) < 0)
            return -1;
        PyObject *a[4] = {instance, h->rest, h->kwargs, result};
        *attrs = call(self, 1, self->on_exit, a, 4);
        if (*attrs == NULL)
            return -1;
    }
    if (self->result_instances != Py_None) {
        *found = call1(self, 1, self->result_instances, result);
        if (*found == NULL)
            return -1;
    }
    return 0;
}

/* Recorder.end's merge of ``attrs`` into the start's: rec[I_ATTRS] set
 * to attrs, or to dict(start's) updated with them; 0, or -1. */
static int
merge_attrs(PyObject *rec, PyObject *attrs)
{
    int set = PyObject_IsTrue(attrs);
    if (set <= 0)
        return set;
    PyObject *battrs = PyList_GET_ITEM(rec, R_ATTRS);
    int had = PyObject_IsTrue(battrs);
    if (had < 0)
        return -1;
    if (!had)
        return PyList_SetItem(rec, R_ATTRS, Py_NewRef(attrs));
    PyObject *merged =
        PyObject_CallOneArg((PyObject *)&PyDict_Type, battrs);
    if (merged == NULL)
        return -1;
    PyObject *r = PyObject_CallMethod(merged, "update", "O", attrs);
    if (r == NULL) {
        Py_DECREF(merged);
        return -1;
    }
    Py_DECREF(r);
    return PyList_SetItem(rec, R_ATTRS, merged);
}

/* End the span of a call that ended well (for a point with an
 * ``on_exit`` or ``result_instances``, those called first, their
 * attributes and instances set as Recorder.end sets them); 0, or -1
 * with an exception set (a fault of the end: handled by the caller). */
static int
finish(SpanCall *self, HookArgs *h, PyObject *rec, PyObject **t1,
       PyObject *result, PyObject *instance, PyObject *const *args,
       Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *attrs = NULL, *found = NULL;
    int res = -1;
    *t1 = call0(self, 1, self->clock);
    if (*t1 == NULL)
        return -1;
    if (self->hooked_end
        && exit_hooks(self, h, result, instance, args, nargs, kwnames,
                      &attrs, &found)
               < 0)
        goto done;
    PyObject *token = PyList_GET_ITEM(rec, R_TOKEN);
    if (token != Py_None) {
        Py_INCREF(token);
        PyObject *r = call1(self, 1, self->reset_span, token);
        Py_DECREF(token);
        if (r == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError))
                goto done;
            PyErr_Clear(); /* ended in another context (see end) */
        }
        else
            Py_DECREF(r);
        if (PyList_SetItem(rec, R_TOKEN, Py_NewRef(Py_None)) < 0)
            goto done;
    }
    if (attrs != NULL && merge_attrs(rec, attrs) < 0)
        goto done;
    if (found != NULL && found != Py_None
        && PyList_SetItem(rec, R_INST, Py_NewRef(found)) < 0)
        goto done;
    PyObject *t0 = PyList_GET_ITEM(rec, R_T0);
    Py_INCREF(t0);
    PyObject *dur = combine_floordiv(*t1, t0, 1);
    Py_DECREF(t0);
    if (dur == NULL)
        goto done;
    if (PyList_SetItem(rec, R_DUR, dur) < 0)
        goto done;
    if (PyList_SetItem(rec, R_ST, Py_NewRef(self->st_ok)) < 0)
        goto done;
    /* last: the writer may read the record any time */
    res = PyList_SetItem(rec, R_PH, Py_NewRef(self->ph_x));
done:
    Py_XDECREF(attrs);
    Py_XDECREF(found);
    return res;
}

/* End the span of a call that raised ``exc``: the recorder's end with
 * the error (a fault of it handled here); 0, or -1 with an exception
 * set that replaces nova's (one that is not an Exception). */
static int
failed(SpanCall *self, HookArgs *h, PyObject *rec, PyObject *exc,
       PyObject *instance, PyObject *const *args, Py_ssize_t nargs,
       PyObject *kwnames)
{
    PyObject *t1 = NULL, *attrs = NULL, *err = NULL, *r;
    t1 = call0(self, 1, self->clock);
    if (t1 == NULL)
        goto fault;
    if (self->on_error != Py_None) {
        if (hook_args(self, h, args, nargs, kwnames) < 0)
            goto fault;
        PyObject *a[4] = {instance, h->rest, h->kwargs, exc};
        attrs = call(self, 1, self->on_error, a, 4);
        if (attrs == NULL)
            goto fault;
    }
    err = call1(self, 1, self->error_of, exc);
    if (err == NULL)
        goto fault;
    {
        PyObject *a[5] = {rec, t1, self->st_error, err,
                          attrs ? attrs : Py_None};
        r = call(self, 1, self->end, a, 5);
    }
    if (r == NULL)
        goto fault;
    Py_DECREF(r);
    Py_DECREF(t1);
    Py_XDECREF(attrs);
    Py_DECREF(err);
    return 0;
fault: {
    int res = end_fault(self, h, rec, self->st_error, t1, instance, args,
                        nargs, kwnames);
    Py_XDECREF(t1);
    Py_XDECREF(attrs);
    Py_XDECREF(err);
    return res;
}
}

static PyObject *
span_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                PyObject *kwnames)
{
    SpanCall *self = (SpanCall *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *instance = Py_None;
    HookArgs h = {NULL, NULL};
    PyObject *rec, *result = NULL;

    if (self->is_method) {
        if (nargs < 1) {
            PyErr_SetString(PyExc_IndexError, "tuple index out of range");
            return NULL;
        }
        instance = args[0];
    }
    PyObject *active = PyObject_GetAttr(self->state, s_active);
    if (active == NULL)
        return NULL;
    int on = PyObject_IsTrue(active);
    Py_DECREF(active);
    if (on < 0)
        return NULL;
    if (!on)
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);

    /* Starting the span is guarded; nova's call never is. */
    rec = start(self, &h, instance, args, nargs, kwnames);
    if (rec == NULL) {
        if (counted(self) < 0)
            goto out;
        result = call_nova(self, &h, args, nargsf, kwnames);
        if (self->on_abandon != Py_None) {
            /* on_enter may have run: undone once nova's call is over */
            PyObject *exc_type, *exc_value, *exc_tb;
            PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
            if (run_abandon_hook(self, &h, instance, args, nargs, kwnames)
                < 0) {
                Py_CLEAR(result);
                Py_XDECREF(exc_type);
                Py_XDECREF(exc_value);
                Py_XDECREF(exc_tb);
            }
            else
                PyErr_Restore(exc_type, exc_value, exc_tb);
        }
        goto out;
    }
    result = call_nova(self, &h, args, nargsf, kwnames);
    if (result == NULL) {
        /* nova raised: the span ends in error, the exception goes on */
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        PyErr_NormalizeException(&exc_type, &exc_value, &exc_tb);
        if (exc_tb != NULL)
            PyException_SetTraceback(exc_value, exc_tb);
        PyObject *handled = PyErr_GetHandledException();
        PyErr_SetHandledException(exc_value);
        int res = failed(self, &h, rec, exc_value, instance, args, nargs,
                         kwnames);
        PyErr_SetHandledException(handled);
        Py_XDECREF(handled);
        if (res < 0) {
            Py_XDECREF(exc_type);
            Py_XDECREF(exc_value);
            Py_XDECREF(exc_tb);
        }
        else
            PyErr_Restore(exc_type, exc_value, exc_tb);
        goto out;
    }
    PyObject *t1 = NULL;
    if (finish(self, &h, rec, &t1, result, instance, args, nargs, kwnames)
        < 0) {
        if (end_fault(self, &h, rec, self->st_ok, t1, instance, args, nargs,
                      kwnames)
            < 0)
            Py_CLEAR(result);
    }
    Py_XDECREF(t1);
out:
    Py_XDECREF(rec);
    Py_XDECREF(h.rest);
    Py_XDECREF(h.kwargs);
    return result;
}

/* -- the type -------------------------------------------------------------- */

static PyObject *
span_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL) {
        PyErr_SetString(PyExc_TypeError, "SpanCall takes keywords only");
        return NULL;
    }
    SpanCall *self = (SpanCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = span_vectorcall;
    Py_ssize_t used = 0;
    for (Py_ssize_t n = 0; obj_names[n] != NULL; n++) {
        PyObject *v = PyDict_GetItemString(kwargs, obj_names[n]);
        if (v == NULL) {
            PyErr_Format(PyExc_TypeError, "SpanCall: %s missing",
                         obj_names[n]);
            goto fail;
        }
        OBJ_AT(self, n) = Py_NewRef(v);
        used++;
    }
    if ((size_t)used != N_OBJ) {
        PyErr_SetString(PyExc_SystemError, "SpanCall: fields");
        goto fail;
    }
    if (!PyDict_Check(self->globals)) {
        PyErr_SetString(PyExc_TypeError, "SpanCall: globals is a dict");
        goto fail;
    }
    static const char *const int_names[] = {"is_method", "c_kind", "i_kind",
                                            "h_kind", "c_pos", "i_pos",
                                            "limit", NULL};
    Py_ssize_t ints[7];
    for (Py_ssize_t n = 0; int_names[n] != NULL; n++) {
        PyObject *v = PyDict_GetItemString(kwargs, int_names[n]);
        if (v == NULL) {
            PyErr_Format(PyExc_TypeError, "SpanCall: %s missing",
                         int_names[n]);
            goto fail;
        }
        ints[n] = v == Py_None ? -1 : PyLong_AsSsize_t(v);
        if (ints[n] == -1 && PyErr_Occurred())
            goto fail;
        used++;
    }
    if (PyDict_GET_SIZE(kwargs) != used) {
        PyErr_SetString(PyExc_TypeError, "SpanCall: unknown keywords");
        goto fail;
    }
    self->is_method = ints[0] != 0;
    self->c_kind = (int)ints[1];
    self->i_kind = (int)ints[2];
    self->h_kind = (int)ints[3];
    self->c_pos = ints[4];
    self->i_pos = ints[5];
    self->limit = ints[6];
    self->hooked_end = self->on_exit != Py_None
                       || self->result_instances != Py_None;
    if ((self->c_kind != 0 && self->c_kind != 1 && self->c_kind != 4)
        || (self->i_kind != 0 && self->i_kind != 1)
        || (self->h_kind != 0 && self->h_kind != 2)) {
        PyErr_SetString(PyExc_ValueError,
                        "SpanCall: a configuration the C path does not do");
        goto fail;
    }
    if (self->c_kind)
        PyUnicode_InternInPlace(&self->c_name);
    if (self->i_kind)
        PyUnicode_InternInPlace(&self->i_name);
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int
span_traverse(SpanCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->dict);
    for (size_t n = 0; n < N_OBJ; n++)
        Py_VISIT(OBJ_AT(self, n));
    return 0;
}

static int
span_clear(SpanCall *self)
{
    Py_CLEAR(self->dict);
    for (size_t n = 0; n < N_OBJ; n++)
        Py_CLEAR(OBJ_AT(self, n));
    Py_CLEAR(self->prefix_obj);
    Py_CLEAR(self->offset_obj);
    return 0;
}

static void
span_dealloc(SpanCall *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    span_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Bound like a function: a method of the class it is put in. */
static PyObject *
span_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
span_detail(PyObject *self, void *closure)
{
    Py_RETURN_FALSE; /* detail points keep the Python closure */
}

static PyGetSetDef span_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL,
     NULL},
    {"detail", span_detail, NULL, "False: the C path is no detail point",
     NULL},
    {NULL},
};

static PyMemberDef span_members[] = {
    {"ev", T_OBJECT, offsetof(SpanCall, ev), READONLY,
     "the event the span records"},
    {NULL},
};

static PyTypeObject SpanCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "instrument._native._span.SpanCall",
    .tp_basicsize = sizeof(SpanCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
                | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A span point's wrapper, its common case in C "
              "(instrument.runtime.wrappers.span_wrapper).",
    .tp_new = span_new,
    .tp_dealloc = (destructor)span_dealloc,
    .tp_traverse = (traverseproc)span_traverse,
    .tp_clear = (inquiry)span_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SpanCall, vectorcall),
    .tp_dictoffset = offsetof(SpanCall, dict),
    .tp_weaklistoffset = offsetof(SpanCall, weakreflist),
    .tp_descr_get = span_descr_get,
    .tp_getset = span_getset,
    .tp_members = span_members,
};

/* -- the module ------------------------------------------------------------ */

static PyObject *
mod_trace(PyObject *mod, PyObject *on)
{
    int flag = PyObject_IsTrue(on);
    if (flag < 0)
        return NULL;
    PyObject *was = tracing ? Py_True : Py_False;
    tracing = flag;
    return Py_NewRef(was);
}

static PyObject *
mod_traced(PyObject *mod, PyObject *unused)
{
    PyObject *tdict = PyThreadState_GetDict();
    PyObject *info = NULL;
    if (tdict != NULL) {
        info = PyDict_GetItemWithError(tdict, s_traced);
        if (info == NULL && PyErr_Occurred())
            return NULL;
    }
    return Py_NewRef(info ? info : Py_None);
}

static PyMethodDef mod_methods[] = {
    {"_trace", mod_trace, METH_O,
     "_trace(on): note what called each part (the fault tests); returns "
     "the previous setting."},
    {"_traced", mod_traced, METH_NOARGS,
     "(SpanCall, after nova's call, the calling Python frame) of the part "
     "being called, or None (while _trace is on)."},
    {NULL},
};

static struct PyModuleDef span_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "instrument._native._span",
    .m_doc = "A span point's wrapper, its common case in C.",
    .m_size = -1,
    .m_methods = mod_methods,
};

#define INTERN(var, text)                          \
    do {                                           \
        var = PyUnicode_InternFromString(text);    \
        if (var == NULL)                           \
            return NULL;                           \
    } while (0)

PyMODINIT_FUNC
PyInit__span(void)
{
    INTERN(s_request_id, "request_id");
    INTERN(s_global_request_id, "global_request_id");
    INTERN(s_writer, "writer");
    INTERN(s_start, "start");
    INTERN(s_drop, "drop");
    INTERN(s_span_prefix, "span_prefix");
    INTERN(s_span_counter, "span_counter");
    INTERN(s_wall_offset_ns, "wall_offset_ns");
    INTERN(s_active, "active");
    INTERN(s_traced, "instrument._native._span.traced");
    k_mask32 = PyLong_FromUnsignedLong(0xFFFFFFFFUL);
    k_1000 = PyLong_FromLong(1000);
    if (k_mask32 == NULL || k_1000 == NULL)
        return NULL;
    if (PyType_Ready(&SpanCallType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&span_module);
    if (mod == NULL)
        return NULL;
    PyObject *layout = Py_BuildValue("(iiiiiii)", R_PH, R_DUR, R_ST, R_T0,
                                     R_TOKEN, R_INST, R_ATTRS);
    if (layout == NULL || PyModule_AddObject(mod, "LAYOUT", layout) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(mod);
        return NULL;
    }
    Py_INCREF(&SpanCallType);
    if (PyModule_AddObject(mod, "SpanCall", (PyObject *)&SpanCallType) < 0) {
        Py_DECREF(&SpanCallType);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
