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
 * instrument._native._breakdown: the span loops of a finished request's
 * summary (instrument.analysis.model.breakdown) in C.
 *
 * times(...) is breakdown._times, critical_path(...) is
 * breakdown._critical_path, tree(spans) is spans.links, outcomes(...)
 * is classify._outcomes: the same values, in dicts and lists filled in
 * the same order, by the same steps (their pure-Python twins are the
 * reference; tests/unit/analysis/test_native_breakdown.py compares
 * them).  Each raises on anything it does not take: a span entry that
 * is not a list of eleven; for times and critical_path also a time or
 * duration that is not an int within (-2**62, 2**62), a sum beyond 64
 * bits.  The caller then runs the twin, so a raise is always safe: the
 * twin gives the answer (or the error) Python gives.
 *
 * None changes its arguments but the dict it is given to fill
 * (critical_path's ``gaps``: the caller gives it a copy);
 * service_component (a Python function) is the only code they call.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* Positions of a span entry (instrument.analysis.model.spans.S_*). */
#define S_EV 0
#define S_HOST 1
#define S_SVC 2
#define S_PID 3
#define S_START 4
#define S_DUR 5
#define S_PARENT 6
#define S_ST 7
#define S_ERR 8
#define S_ATTRS 9
#define S_INST 10
#define NFIELDS 11

/* Times and durations are taken within (-2**62, 2**62), so that the
 * difference of any two is within 64 bits; sums are checked. */
#define LIMIT (1LL << 62)

static PyObject *str_error; /* 'error' */

static int
as_i64(PyObject *o, long long *out)
{
    int overflow;
    long long v;

    if (!PyLong_CheckExact(o)) {
        PyErr_SetString(PyExc_TypeError, "not an int");
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || v >= LIMIT || v <= -LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "beyond 62 bits");
        return -1;
    }
    *out = v;
    return 0;
}

static int
overflowed(void)
{
    PyErr_SetString(PyExc_OverflowError, "beyond 64 bits");
    return -1;
}

/* The entry of span ``sid`` (borrowed), a list of NFIELDS. */
static PyObject **
entry_of(PyObject *spans, PyObject *sid)
{
    PyObject *s = PyDict_GetItemWithError(spans, sid);

    if (s == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetObject(PyExc_KeyError, sid);
        }
        return NULL;
    }
    if (!PyList_CheckExact(s) || PyList_GET_SIZE(s) < NFIELDS) {
        PyErr_SetString(PyExc_TypeError, "not a span entry");
        return NULL;
    }
    return ((PyListObject *)s)->ob_item;
}

/* d[key] = d.get(key, 0) + v */
static int
add_to(PyObject *d, PyObject *key, long long v)
{
    long long base = 0;
    PyObject *cur = PyDict_GetItemWithError(d, key);
    PyObject *n;
    int rc;

    if (cur != NULL) {
        if (as_i64(cur, &base) < 0) {
            return -1;
        }
    }
    else if (PyErr_Occurred()) {
        return -1;
    }
    if (__builtin_add_overflow(base, v, &base)) {
        return overflowed();
    }
    n = PyLong_FromLongLong(base);
    if (n == NULL) {
        return -1;
    }
    rc = PyDict_SetItem(d, key, n);
    Py_DECREF(n);
    return rc;
}

/* d[key] = v */
static int
set_i64(PyObject *d, PyObject *key, long long v)
{
    PyObject *n = PyLong_FromLongLong(v);
    int rc;

    if (n == NULL) {
        return -1;
    }
    rc = PyDict_SetItem(d, key, n);
    Py_DECREF(n);
    return rc;
}

static int
get_i64(PyObject *d, PyObject *key, long long *out)
{
    PyObject *v = PyDict_GetItemWithError(d, key);

    if (v == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetObject(PyExc_KeyError, key);
        }
        return -1;
    }
    return as_i64(v, out);
}

static int
cmp_interval(const void *a, const void *b)
{
    const long long *x = a, *y = b;

    if (x[0] != y[0]) {
        return x[0] < y[0] ? -1 : 1;
    }
    if (x[1] != y[1]) {
        return x[1] < y[1] ? -1 : 1;
    }
    return 0;
}

/* breakdown._union over n (lo, hi) pairs, sorted here. */
static int
union_of(long long *iv, Py_ssize_t n, long long *out)
{
    long long total = 0, lo, hi;
    Py_ssize_t i;

    if (n == 0) {
        *out = 0;
        return 0;
    }
    qsort(iv, (size_t)n, 2 * sizeof(long long), cmp_interval);
    lo = iv[0];
    hi = iv[1];
    for (i = 1; i < n; i++) {
        long long a = iv[2 * i], b = iv[2 * i + 1];
        if (a > hi) {
            if (__builtin_add_overflow(total, hi - lo, &total)) {
                return overflowed();
            }
            lo = a;
            hi = b;
        }
        else if (b > hi) {
            hi = b;
        }
    }
    if (__builtin_add_overflow(total, hi - lo, &total)) {
        return overflowed();
    }
    *out = total;
    return 0;
}

/* Does the covering span (pid, host) cover a child (``sync``: it waits
 * for every child)?  -1 on error. */
static int
covers(int sync, PyObject **c, PyObject *pid, PyObject *host,
       PyObject *dispatch)
{
    int r;

    if (sync) {
        return 1;
    }
    r = PyObject_RichCompareBool(c[S_PID], pid, Py_EQ);
    if (r <= 0) {
        return r;
    }
    r = PyObject_RichCompareBool(c[S_HOST], host, Py_EQ);
    if (r <= 0) {
        return r;
    }
    return PyObject_RichCompareBool(c[S_EV], dispatch, Py_NE);
}

typedef struct {
    long long lo, hi, loose;
} Where;

/*
 * times(spans, sql, children, events, service, service_component, sync,
 *       dispatch, queue, req_last)
 * -> (req_start, req_end, ends, names, open_ids, hosts, errors, where,
 *     comp, sql_in)
 */
static PyObject *
times(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *spans, *sql, *children, *events, *service, *component;
    PyObject *sync, *dispatch, *queue;
    PyObject *ends = NULL, *names = NULL, *open_ids = NULL, *hosts = NULL;
    PyObject *where = NULL, *where_ix = NULL, *procs = NULL;
    PyObject *comp = NULL, *sql_in = NULL, *result = NULL;
    PyObject *sid, *s;
    long long req_start = 0, req_end, *start_c = NULL, *end_c = NULL;
    long long *iv = NULL;
    Py_ssize_t *open_w = NULL, n, pos, i, nprocs = 0;
    Py_ssize_t nopen = 0, errors = 0;
    Where *w = NULL;
    PyObject **name_c = NULL;
    int have_start = 0;

    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "times takes 10 arguments");
        return NULL;
    }
    spans = args[0];
    sql = args[1];
    children = args[2];
    events = args[3];
    service = args[4];
    component = args[5];
    sync = args[6];
    dispatch = args[7];
    queue = args[8];
    if (!PyDict_CheckExact(spans) || !PyDict_CheckExact(sql) ||
        !PyDict_CheckExact(children) || !PyDict_CheckExact(events)) {
        PyErr_SetString(PyExc_TypeError, "not dicts");
        return NULL;
    }
    if (as_i64(args[9], &req_end) < 0) {
        return NULL;
    }
    n = PyDict_GET_SIZE(spans);
    start_c = PyMem_Malloc(sizeof(long long) * (size_t)(n + 1));
    end_c = PyMem_Malloc(sizeof(long long) * (size_t)(n + 1));
    open_w = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    w = PyMem_Malloc(sizeof(Where) * (size_t)(n + 1));
    name_c = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + 1));
    ends = PyDict_New();
    names = PyDict_New();
    open_ids = PyList_New(0);
    hosts = PySet_New(NULL);
    where = PyDict_New();
    where_ix = PyDict_New();
    procs = PyList_New(0);
    comp = PyDict_New();
    sql_in = PyDict_New();
    if (!start_c || !end_c || !open_w || !w || !name_c || !ends ||
        !names || !open_ids || !hosts || !where || !where_ix || !procs ||
        !comp || !sql_in) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        goto done;
    }
    /* the first loop of summarise: ends, names, where, hosts, errors */
    pos = 0;
    i = 0;
    while (PyDict_Next(spans, &pos, &sid, &s)) {
        PyObject **f, *proc, *ix, *d, *name, *parent;
        long long start, e;
        Py_ssize_t k;
        int r, loose;

        if (!PyList_CheckExact(s) || PyList_GET_SIZE(s) < NFIELDS) {
            PyErr_SetString(PyExc_TypeError, "not a span entry");
            goto done;
        }
        f = ((PyListObject *)s)->ob_item;
        if (as_i64(f[S_START], &start) < 0) {
            goto done;
        }
        if (!have_start || start < req_start) {
            req_start = start;
            have_start = 1;
        }
        d = f[S_DUR];
        proc = PyTuple_Pack(2, f[S_HOST], f[S_PID]);
        if (proc == NULL) {
            goto done;
        }
        ix = PyDict_GetItemWithError(where_ix, proc);
        if (ix == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(proc);
                goto done;
            }
            k = nprocs++;
            w[k].lo = w[k].hi = start;
            w[k].loose = -1;
            ix = PyLong_FromSsize_t(k);
            if (ix == NULL || PyDict_SetItem(where_ix, proc, ix) < 0 ||
                PyList_Append(procs, proc) < 0) {
                Py_XDECREF(ix);
                Py_DECREF(proc);
                goto done;
            }
            Py_DECREF(ix);
        }
        else {
            k = PyLong_AsSsize_t(ix);
            if (start < w[k].lo) {
                w[k].lo = start;
            }
        }
        Py_DECREF(proc);
        start_c[i] = start;
        if (d != Py_None) {
            long long dur;
            if (as_i64(d, &dur) < 0) {
                goto done;
            }
            if (__builtin_add_overflow(start, dur, &e) || e >= LIMIT ||
                e <= -LIMIT) {
                overflowed();
                goto done;
            }
            end_c[i] = e;
            if (set_i64(ends, sid, e) < 0) {
                goto done;
            }
            if (e > req_end) {
                req_end = e;
            }
            if (e > w[k].hi) {
                w[k].hi = e;
            }
            loose = 0;
        }
        else {
            if (PyList_Append(open_ids, sid) < 0) {
                goto done;
            }
            open_w[nopen++] = k;
            end_c[i] = 0; /* (req_end, set below) */
            if (start > req_end) {
                req_end = start;
            }
            loose = 1;
        }
        parent = f[S_PARENT];
        if (!loose && parent != Py_None) {
            r = PyDict_Contains(spans, parent);
            if (r < 0) {
                goto done;
            }
            loose = !r;
        }
        if (loose && (w[k].loose < 0 || start < w[k].loose)) {
            w[k].loose = start;
        }
        name = PyDict_GetItemWithError(events, f[S_EV]);
        if (name == NULL && PyErr_Occurred()) {
            goto done;
        }
        if (name != NULL) {
            r = PyObject_IsTrue(name);
            if (r < 0) {
                goto done;
            }
            if (!r) {
                name = NULL;
            }
        }
        if (name == NULL) {
            name = f[S_SVC];
        }
        r = PyObject_RichCompareBool(name, service, Py_NE);
        if (r < 0) {
            goto done;
        }
        if (r) {
            if (PyDict_SetItem(names, sid, name) < 0) {
                goto done;
            }
        }
        else {
            PyObject *named = PyObject_CallOneArg(component, f[S_ATTRS]);
            if (named == NULL) {
                goto done;
            }
            r = PyDict_SetItem(names, sid, named);
            Py_DECREF(named);
            if (r < 0) {
                goto done;
            }
        }
        /* (borrowed: the names dict holds it) */
        name_c[i] = PyDict_GetItemWithError(names, sid);
        if (name_c[i] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, sid);
            }
            goto done;
        }
        if (PySet_Add(hosts, f[S_HOST]) < 0) {
            goto done;
        }
        r = PyObject_RichCompareBool(f[S_ST], str_error, Py_EQ);
        if (r < 0) {
            goto done;
        }
        errors += r;
        i++;
    }
    if (i != n) {
        PyErr_SetString(PyExc_RuntimeError, "spans changed");
        goto done;
    }
    if (!have_start) {
        req_start = req_end;
    }
    /* the open spans end with the request */
    for (i = 0; i < nopen; i++) {
        if (set_i64(ends, PyList_GET_ITEM(open_ids, i), req_end) < 0) {
            goto done;
        }
        w[open_w[i]].hi = req_end;
    }
    /* the second loop: each span's own time, per component */
    pos = 0;
    i = 0;
    while (PyDict_Next(spans, &pos, &sid, &s)) {
        PyObject **f = ((PyListObject *)s)->ob_item;
        PyObject *kids, *entry, *name = name_c[i];
        long long start = start_c[i], end, covered = 0, sql_us = 0, own;

        end = f[S_DUR] == Py_None ? req_end : end_c[i];
        kids = PyDict_GetItemWithError(children, sid);
        if (kids == NULL && PyErr_Occurred()) {
            goto done;
        }
        if (kids != NULL && !PyList_CheckExact(kids)) {
            PyErr_SetString(PyExc_TypeError, "children not a list");
            goto done;
        }
        if (kids != NULL && PyList_GET_SIZE(kids) > 0) {
            Py_ssize_t nk = PyList_GET_SIZE(kids), j, niv = 0;
            PyObject *pid = f[S_PID], *host = f[S_HOST];
            int sy = PySequence_Contains(sync, f[S_EV]);

            if (sy < 0) {
                goto done;
            }
            PyMem_Free(iv);
            iv = PyMem_Malloc(sizeof(long long) * 2 * (size_t)nk);
            if (iv == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            for (j = 0; j < nk; j++) {
                PyObject *kid = PyList_GET_ITEM(kids, j);
                PyObject **c = entry_of(spans, kid);
                long long cs, ce, lo, hi;
                int r;

                if (c == NULL || as_i64(c[S_START], &cs) < 0) {
                    goto done;
                }
                r = covers(sy, c, pid, host, dispatch);
                if (r < 0) {
                    goto done;
                }
                if (r) {
                    if (get_i64(ends, kid, &ce) < 0) {
                        goto done;
                    }
                    lo = cs > start ? cs : start;
                    hi = ce < end ? ce : end;
                    if (hi > lo) {
                        iv[2 * niv] = lo;
                        iv[2 * niv + 1] = hi;
                        niv++;
                    }
                }
                else if (cs > end) {
                    if (add_to(comp, queue, cs - end) < 0) {
                        goto done;
                    }
                }
            }
            if (nk == 1) {
                covered = niv ? iv[1] - iv[0] : 0;
            }
            else if (union_of(iv, niv, &covered) < 0) {
                goto done;
            }
        }
        entry = PyDict_GetItemWithError(sql, sid);
        if (entry == NULL && PyErr_Occurred()) {
            goto done;
        }
        if (entry != NULL) {
            PyObject *us = PySequence_GetItem(entry, 0);
            int r;
            if (us == NULL) {
                goto done;
            }
            r = as_i64(us, &sql_us);
            Py_DECREF(us);
            if (r < 0 || add_to(sql_in, name, sql_us) < 0) {
                goto done;
            }
        }
        if (__builtin_sub_overflow(end, start, &own) ||
            __builtin_sub_overflow(own, covered, &own) ||
            __builtin_sub_overflow(own, sql_us, &own)) {
            overflowed();
            goto done;
        }
        if (own > 0 && add_to(comp, name, own) < 0) {
            goto done;
        }
        i++;
    }
    /* where: (host, pid) -> [from, to, loose] in the order first seen */
    for (i = 0; i < nprocs; i++) {
        PyObject *v = Py_BuildValue("[LLL]", w[i].lo, w[i].hi, w[i].loose);
        int r;
        if (v == NULL) {
            goto done;
        }
        r = PyDict_SetItem(where, PyList_GET_ITEM(procs, i), v);
        Py_DECREF(v);
        if (r < 0) {
            goto done;
        }
    }
    result = Py_BuildValue("LLOOOOnOOO", req_start, req_end, ends, names,
                           open_ids, hosts, errors, where, comp, sql_in);
done:
    PyMem_Free(start_c);
    PyMem_Free(end_c);
    PyMem_Free(open_w);
    PyMem_Free(w);
    PyMem_Free(name_c);
    PyMem_Free(iv);
    Py_XDECREF(ends);
    Py_XDECREF(names);
    Py_XDECREF(open_ids);
    Py_XDECREF(hosts);
    Py_XDECREF(where);
    Py_XDECREF(where_ix);
    Py_XDECREF(procs);
    Py_XDECREF(comp);
    Py_XDECREF(sql_in);
    return result;
}

/* -- the critical path ------------------------------------------------- */

typedef struct {
    PyObject *spans, *children, *ends, *names, *eff, *gaps, *cp;
    PyObject *sync, *dispatch, *queue, *gap;
} Walk;

/* Charge ``us`` between the end of ``before`` (NULL: the request's
 * start) and the start of ``nxt`` (NULL: its end):
 * breakdown.critical_path's unrecorded. */
static int
unrecorded(Walk *wk, PyObject *before, PyObject *nxt, long long us)
{
    PyObject **b = NULL, **x = NULL, *key;
    int r;

    if (nxt != NULL && before != NULL) {
        x = entry_of(wk->spans, nxt);
        if (x == NULL) {
            return -1;
        }
        r = PyObject_RichCompareBool(x[S_PARENT], before, Py_EQ);
        if (r < 0) {
            return -1;
        }
        if (r) {
            b = entry_of(wk->spans, before);
            if (b == NULL) {
                return -1;
            }
            /* _queued(spans[before], spans[nxt]) */
            r = PySequence_Contains(wk->sync, b[S_EV]);
            if (r < 0) {
                return -1;
            }
            if (!r) {
                r = PyObject_RichCompareBool(x[S_EV], wk->dispatch, Py_EQ);
                if (r == 0) {
                    r = PyObject_RichCompareBool(x[S_PID], b[S_PID], Py_NE);
                }
                if (r == 0) {
                    r = PyObject_RichCompareBool(x[S_HOST], b[S_HOST],
                                                 Py_NE);
                }
                if (r < 0) {
                    return -1;
                }
                if (r) {
                    return add_to(wk->cp, wk->queue, us);
                }
            }
        }
    }
    if (add_to(wk->cp, wk->gap, us) < 0) {
        return -1;
    }
    if (wk->gaps == Py_None) {
        return 0;
    }
    if (before != NULL && b == NULL) {
        b = entry_of(wk->spans, before);
        if (b == NULL) {
            return -1;
        }
    }
    if (nxt != NULL && x == NULL) {
        x = entry_of(wk->spans, nxt);
        if (x == NULL) {
            return -1;
        }
    }
    key = PyTuple_Pack(2, before != NULL ? b[S_EV] : Py_None,
                       nxt != NULL ? x[S_EV] : Py_None);
    if (key == NULL) {
        return -1;
    }
    r = add_to(wk->gaps, key, us);
    Py_DECREF(key);
    return r;
}

typedef struct {
    PyObject *k;
    long long eff;
    Py_ssize_t at;
} ByEnd;

static int
cmp_by_end(const void *a, const void *b)
{
    const ByEnd *x = a, *y = b;

    /* the latest end first; equal ends in their order (a stable sort,
     * reversed, as sorted(..., reverse=True) keeps them) */
    if (x->eff != y->eff) {
        return x->eff > y->eff ? -1 : 1;
    }
    return x->at < y->at ? -1 : (x->at > y->at);
}

/* breakdown._by_end: a new array of the ids of list ``kids``. */
static PyObject **
by_end(Walk *wk, PyObject *kids, Py_ssize_t *n_out)
{
    Py_ssize_t n = PyList_GET_SIZE(kids), j;
    PyObject **out = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + 1));
    ByEnd *tmp;

    *n_out = n;
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (n < 2) {
        for (j = 0; j < n; j++) {
            out[j] = PyList_GET_ITEM(kids, j);
        }
        return out;
    }
    tmp = PyMem_Malloc(sizeof(ByEnd) * (size_t)n);
    if (tmp == NULL) {
        PyMem_Free(out);
        PyErr_NoMemory();
        return NULL;
    }
    for (j = 0; j < n; j++) {
        tmp[j].k = PyList_GET_ITEM(kids, j);
        tmp[j].at = j;
        if (get_i64(wk->eff, tmp[j].k, &tmp[j].eff) < 0) {
            PyMem_Free(tmp);
            PyMem_Free(out);
            return NULL;
        }
    }
    qsort(tmp, (size_t)n, sizeof(ByEnd), cmp_by_end);
    for (j = 0; j < n; j++) {
        out[j] = tmp[j].k;
    }
    PyMem_Free(tmp);
    return out;
}

typedef struct {
    PyObject *sid; /* NULL: the request */
    PyObject **kids;
    Py_ssize_t n, i;
    long long start, t;
    PyObject *nxt;
} Frame;

/* a list of children, or NULL (none, or an empty list); -1 on error */
static int
kids_of(PyObject *children, PyObject *sid, PyObject **out)
{
    PyObject *kids = PyDict_GetItemWithError(children, sid);

    *out = NULL;
    if (kids == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyList_CheckExact(kids)) {
        PyErr_SetString(PyExc_TypeError, "children not a list");
        return -1;
    }
    if (PyList_GET_SIZE(kids) > 0) {
        *out = kids;
    }
    return 0;
}

/*
 * critical_path(spans, children, roots, ends, names, req_start, req_end,
 *               gaps, sync, dispatch, queue, gap) -> (cp, on_path)
 */
static PyObject *
critical_path(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Walk wk;
    PyObject *roots, *order = NULL, *on_path = NULL, *result = NULL;
    PyObject *kids;
    long long req_start, req_end;
    Frame *stack = NULL;
    Py_ssize_t depth = 0, cap = 0, j;

    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "critical_path takes 12 arguments");
        return NULL;
    }
    wk.spans = args[0];
    wk.children = args[1];
    roots = args[2];
    wk.ends = args[3];
    wk.names = args[4];
    wk.gaps = args[7];
    wk.sync = args[8];
    wk.dispatch = args[9];
    wk.queue = args[10];
    wk.gap = args[11];
    if (!PyDict_CheckExact(wk.spans) || !PyDict_CheckExact(wk.children) ||
        !PyList_CheckExact(roots) || !PyDict_CheckExact(wk.ends) ||
        !PyDict_CheckExact(wk.names) ||
        (wk.gaps != Py_None && !PyDict_CheckExact(wk.gaps))) {
        PyErr_SetString(PyExc_TypeError, "unexpected argument types");
        return NULL;
    }
    if (as_i64(args[5], &req_start) < 0 || as_i64(args[6], &req_end) < 0) {
        return NULL;
    }
    wk.cp = PyDict_New();
    wk.eff = PyDict_New();
    on_path = PySet_New(NULL);
    order = PyList_GetSlice(roots, 0, PyList_GET_SIZE(roots));
    if (wk.cp == NULL || wk.eff == NULL || on_path == NULL || order == NULL) {
        goto done;
    }
    /* each span's effective end: its own or a descendant's, the latest */
    for (j = 0; j < PyList_GET_SIZE(order); j++) {
        if (kids_of(wk.children, PyList_GET_ITEM(order, j), &kids) < 0) {
            goto done;
        }
        if (kids != NULL) {
            Py_ssize_t m;
            for (m = 0; m < PyList_GET_SIZE(kids); m++) {
                if (PyList_Append(order, PyList_GET_ITEM(kids, m)) < 0) {
                    goto done;
                }
            }
        }
    }
    for (j = PyList_GET_SIZE(order) - 1; j >= 0; j--) {
        PyObject *sid = PyList_GET_ITEM(order, j);
        long long e, ke;
        if (get_i64(wk.ends, sid, &e) < 0 ||
            kids_of(wk.children, sid, &kids) < 0) {
            goto done;
        }
        if (kids != NULL) {
            Py_ssize_t m;
            for (m = 0; m < PyList_GET_SIZE(kids); m++) {
                if (get_i64(wk.eff, PyList_GET_ITEM(kids, m), &ke) < 0) {
                    goto done;
                }
                if (ke > e) {
                    e = ke;
                }
            }
        }
        if (set_i64(wk.eff, sid, e) < 0) {
            goto done;
        }
    }
    /* the walk back from the end (breakdown._critical_path) */
    cap = 16;
    stack = PyMem_Malloc(sizeof(Frame) * (size_t)cap);
    if (stack == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    stack[0].sid = NULL;
    stack[0].kids = by_end(&wk, roots, &stack[0].n);
    if (stack[0].kids == NULL) {
        goto done;
    }
    stack[0].i = 0;
    stack[0].start = req_start;
    stack[0].t = req_end;
    stack[0].nxt = NULL;
    depth = 1;
    while (depth > 0) {
        Frame fr = stack[--depth];
        PyObject *sid = fr.sid, **kidv = fr.kids, *nxt = fr.nxt;
        PyObject *name = NULL;
        Py_ssize_t n = fr.n, i = fr.i;
        long long start = fr.start, t = fr.t, end = 0, ks = 0;
        int keep = 0; /* the frame's kids array pushed again */

        if (sid != NULL) {
            if (get_i64(wk.ends, sid, &end) < 0) {
                goto frame_error;
            }
            name = PyDict_GetItemWithError(wk.names, sid);
            if (name == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_SetObject(PyExc_KeyError, sid);
                }
                goto frame_error;
            }
        }
        for (;;) {
            PyObject *k = NULL, *grand;
            long long a, ka, t2;

            while (i < n && t > start) {
                PyObject **c;
                k = kidv[i++];
                c = entry_of(wk.spans, k);
                if (c == NULL || as_i64(c[S_START], &ks) < 0) {
                    goto frame_error;
                }
                if (ks < t) {
                    break;
                }
                k = NULL;
            }
            if (k == NULL) {
                a = start;
            }
            else {
                if (get_i64(wk.eff, k, &ka) < 0) {
                    goto frame_error;
                }
                a = ka < t ? ka : t;
            }
            if (t > a) {
                if (sid == NULL) {
                    if (unrecorded(&wk, k, nxt, t - a) < 0) {
                        goto frame_error;
                    }
                }
                else {
                    if (a < end &&
                        add_to(wk.cp, name, (t < end ? t : end) - a) < 0) {
                        goto frame_error;
                    }
                    if (t > end &&
                        unrecorded(&wk, k != NULL && a > end ? k : sid, nxt,
                                   t - (a > end ? a : end)) < 0) {
                        goto frame_error;
                    }
                }
            }
            if (k == NULL) {
                break;
            }
            if (PySet_Add(on_path, k) < 0 ||
                kids_of(wk.children, k, &grand) < 0) {
                goto frame_error;
            }
            t2 = ks > start ? ks : start;
            if (grand != NULL) {
                Frame *top;
                if (depth + 2 > cap) {
                    Frame *more;
                    cap *= 2;
                    more = PyMem_Realloc(stack, sizeof(Frame) * (size_t)cap);
                    if (more == NULL) {
                        PyErr_NoMemory();
                        goto frame_error;
                    }
                    stack = more;
                }
                top = &stack[depth++];
                top->sid = sid;
                top->kids = kidv;
                top->n = n;
                top->i = i;
                top->start = start;
                top->t = t2;
                top->nxt = k;
                keep = 1;
                top = &stack[depth];
                top->kids = by_end(&wk, grand, &top->n);
                if (top->kids == NULL) {
                    goto frame_error;
                }
                depth++;
                top->sid = k;
                top->i = 0;
                top->start = ks;
                top->t = a;
                top->nxt = a == t ? nxt : NULL;
                break;
            }
            /* a leaf: all of [ks, a) is its own */
            if (a > ks) {
                long long kend;
                PyObject *kname;
                if (get_i64(wk.ends, k, &kend) < 0) {
                    goto frame_error;
                }
                kname = PyDict_GetItemWithError(wk.names, k);
                if (kname == NULL) {
                    if (!PyErr_Occurred()) {
                        PyErr_SetObject(PyExc_KeyError, k);
                    }
                    goto frame_error;
                }
                if (ks < kend &&
                    add_to(wk.cp, kname, (a < kend ? a : kend) - ks) < 0) {
                    goto frame_error;
                }
                if (a > kend &&
                    unrecorded(&wk, k, a == t ? nxt : NULL,
                               a - (ks > kend ? ks : kend)) < 0) {
                    goto frame_error;
                }
            }
            t = t2;
            nxt = k;
        }
        if (!keep) {
            PyMem_Free(kidv);
        }
        continue;
    frame_error:
        if (!keep) {
            PyMem_Free(kidv);
        }
        goto done;
    }
    result = PyTuple_Pack(2, wk.cp, on_path);
done:
    if (stack != NULL) {
        /* the frames left (on an error) own their arrays */
        for (j = 0; j < depth; j++) {
            PyMem_Free(stack[j].kids);
        }
        PyMem_Free(stack);
    }
    Py_XDECREF(order);
    Py_XDECREF(wk.cp);
    Py_XDECREF(wk.eff);
    Py_XDECREF(on_path);
    return result;
}

/*
 * tree(spans) -> (children, roots): spans.Tree's links, parent to
 * children, in the order of ``spans``.
 */
static PyObject *
tree(PyObject *self, PyObject *spans)
{
    PyObject *children, *roots, *sid, *s, *result = NULL;
    Py_ssize_t pos = 0;

    if (!PyDict_CheckExact(spans)) {
        PyErr_SetString(PyExc_TypeError, "not a dict");
        return NULL;
    }
    children = PyDict_New();
    roots = PyList_New(0);
    if (children == NULL || roots == NULL) {
        goto done;
    }
    while (PyDict_Next(spans, &pos, &sid, &s)) {
        PyObject *parent, *kids;
        int r;

        if (!PyList_CheckExact(s) || PyList_GET_SIZE(s) < NFIELDS) {
            PyErr_SetString(PyExc_TypeError, "not a span entry");
            goto done;
        }
        parent = PyList_GET_ITEM(s, S_PARENT);
        r = PyDict_Contains(spans, parent);
        if (r < 0) {
            goto done;
        }
        if (!r) {
            if (PyList_Append(roots, sid) < 0) {
                goto done;
            }
            continue;
        }
        kids = PyDict_GetItemWithError(children, parent);
        if (kids == NULL) {
            if (PyErr_Occurred()) {
                goto done;
            }
            kids = PyList_New(1);
            if (kids == NULL) {
                goto done;
            }
            Py_INCREF(sid);
            PyList_SET_ITEM(kids, 0, sid);
            r = PyDict_SetItem(children, parent, kids);
            Py_DECREF(kids);
            if (r < 0) {
                goto done;
            }
        }
        else if (PyList_Append(kids, sid) < 0) {
            goto done;
        }
    }
    result = PyTuple_Pack(2, children, roots);
done:
    Py_XDECREF(children);
    Py_XDECREF(roots);
    return result;
}

/*
 * outcomes(spans, inst, build, schedule_events, bury, given_up)
 * -> (outcomes, builds): classify._outcomes, the spans that decide an
 * instance's state.  Generic Python operations throughout (the times
 * are added and tested as Python does): nothing is refused.
 */
static PyObject *str_build, *str_sched, *str_bury, *inf;

static PyObject *
outcomes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *spans, *inst, *build, *sched_events, *bury, *given_up;
    PyObject *out, *sid, *s, *result = NULL;
    Py_ssize_t pos = 0, builds = 0;

    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "outcomes takes 6 arguments");
        return NULL;
    }
    spans = args[0];
    inst = args[1];
    build = args[2];
    sched_events = args[3];
    bury = args[4];
    given_up = args[5];
    if (!PyDict_CheckExact(spans)) {
        PyErr_SetString(PyExc_TypeError, "not a dict");
        return NULL;
    }
    out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    while (PyDict_Next(spans, &pos, &sid, &s)) {
        PyObject **f, *si, *ev, *kind = NULL, *end = NULL, *first, *o;
        int r, has;

        if (!PyList_CheckExact(s) || PyList_GET_SIZE(s) < NFIELDS) {
            PyErr_SetString(PyExc_TypeError, "not a span entry");
            goto done;
        }
        f = ((PyListObject *)s)->ob_item;
        si = f[S_INST];
        has = PyObject_IsTrue(si);
        if (has < 0) {
            goto done;
        }
        if (inst != Py_None && has) {
            r = PySequence_Contains(si, inst);
            if (r < 0) {
                goto done;
            }
            if (!r) {
                continue; /* not spans.belongs(s, inst) */
            }
        }
        ev = f[S_EV];
        r = PyObject_RichCompareBool(ev, build, Py_EQ);
        if (r < 0) {
            goto done;
        }
        if (r) {
            if (inst != Py_None && !has) {
                continue;
            }
            builds++;
            kind = str_build;
        }
        else {
            r = PySequence_Contains(sched_events, ev);
            if (r < 0) {
                goto done;
            }
            if (r) {
                r = PyObject_RichCompareBool(f[S_ST], str_error, Py_EQ);
                if (r == 0) {
                    r = PyObject_IsTrue(f[S_ERR]);
                }
                if (r < 0) {
                    goto done;
                }
                if (r) {
                    kind = str_sched;
                }
            }
            else {
                r = PyObject_RichCompareBool(ev, bury, Py_EQ);
                if (r == 0) {
                    r = PyObject_RichCompareBool(ev, given_up, Py_EQ);
                }
                if (r < 0) {
                    goto done;
                }
                if (r) {
                    kind = str_bury;
                }
            }
        }
        if (kind == NULL) {
            continue;
        }
        /* spans.end(s) */
        if (f[S_DUR] != Py_None) {
            end = PyNumber_Add(f[S_START], f[S_DUR]);
            if (end == NULL) {
                goto done;
            }
        }
        if (kind == str_build) {
            first = end != NULL ? end : inf;
        }
        else {
            /* spans.end(s) or s[S_START] */
            r = end == NULL ? 0 : PyObject_IsTrue(end);
            if (r < 0) {
                Py_DECREF(end);
                goto done;
            }
            first = r ? end : f[S_START];
        }
        o = PyTuple_Pack(4, first, f[S_START], kind, sid);
        Py_XDECREF(end);
        if (o == NULL) {
            goto done;
        }
        r = PyList_Append(out, o);
        Py_DECREF(o);
        if (r < 0) {
            goto done;
        }
    }
    result = Py_BuildValue("On", out, builds);
done:
    Py_DECREF(out);
    return result;
}

static PyMethodDef methods[] = {
    {"outcomes", (PyCFunction)(void (*)(void))outcomes, METH_FASTCALL,
     "classify._outcomes in C."},
    {"tree", (PyCFunction)tree, METH_O, "spans.Tree's links in C."},
    {"times", (PyCFunction)(void (*)(void))times, METH_FASTCALL,
     "breakdown._times in C."},
    {"critical_path", (PyCFunction)(void (*)(void))critical_path,
     METH_FASTCALL, "breakdown._critical_path in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "instrument._native._breakdown",
    "The span loops of a request's summary in C (see breakdown.c).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__breakdown(void)
{
    str_error = PyUnicode_InternFromString("error");
    str_build = PyUnicode_InternFromString("build");
    str_sched = PyUnicode_InternFromString("sched");
    str_bury = PyUnicode_InternFromString("bury");
    inf = PyFloat_FromDouble(Py_HUGE_VAL);
    if (str_error == NULL || str_build == NULL || str_sched == NULL ||
        str_bury == NULL || inf == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
