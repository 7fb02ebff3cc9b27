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
 * instrument._native._assemble: the request model's ingest of a span's
 * start, a span's end and an SQL statement in C
 * (instrument.analysis.model.requests.Assembler's begin, complete, sql).
 *
 * Each is called as begin(open, fallback, rec, ts[, cursor]): ``open``
 * the Assembler's dict of open requests, ``fallback`` its Python method
 * (the reference).  The common case, a record of a request already
 * open whose span (or statement) is as expected, is done here, with the
 * same steps on the same objects; any other record (no request id, a
 * request not open, a span read before, a failed statement, anything
 * of another type) is handed to ``fallback`` whole before anything is
 * changed, so the Python method decides as it always did.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NFIELDS 11
#define S_DUR 5
#define S_ST 7
#define S_ERR 8
#define S_ATTRS 9

static PyObject *s_req, *s_span, *s_dur_us, *s_ev, *s_host, *s_svc, *s_pid;
static PyObject *s_parent, *s_st, *s_err, *s_attrs, *s_inst, *s_events;
static PyObject *s_spans, *s_open, *s_last, *s_begun, *s_sql, *s_error;
static PyObject *one;

static PyObject *
fall_back(PyObject *const *args, Py_ssize_t nargs)
{
    return PyObject_Vectorcall(args[1], args + 2, (size_t)(nargs - 2), NULL);
}

/* r.<name> += delta (an int, as Python adds) */
static int
bump(PyObject *r, PyObject *name, PyObject *delta, int subtract)
{
    PyObject *v = PyObject_GetAttr(r, name), *n;
    int rc;

    if (v == NULL) {
        return -1;
    }
    n = subtract ? PyNumber_Subtract(v, delta) : PyNumber_Add(v, delta);
    Py_DECREF(v);
    if (n == NULL) {
        return -1;
    }
    rc = PyObject_SetAttr(r, name, n);
    Py_DECREF(n);
    return rc;
}

/* if t > r.last: r.last = t */
static int
later(PyObject *r, PyObject *t)
{
    PyObject *last = PyObject_GetAttr(r, s_last);
    int gt;

    if (last == NULL) {
        return -1;
    }
    gt = PyObject_RichCompareBool(t, last, Py_GT);
    Py_DECREF(last);
    if (gt <= 0) {
        return gt;
    }
    return PyObject_SetAttr(r, s_last, t);
}

/* a new span entry: the record's fields in the order of spans.S_* */
static PyObject *
entry(PyObject *rec, PyObject *ts, int ended)
{
    static PyObject **names[NFIELDS] = {
        &s_ev, &s_host, &s_svc, &s_pid, NULL, &s_dur_us,
        &s_parent, &s_st, &s_err, &s_attrs, &s_inst,
    };
    PyObject *out = PyList_New(NFIELDS);
    int i;

    if (out == NULL) {
        return NULL;
    }
    for (i = 0; i < NFIELDS; i++) {
        PyObject *v;
        if (i == 4) {
            v = Py_NewRef(ts);
        }
        else if (!ended && (i == S_DUR || i == S_ST || i == S_ERR)) {
            v = Py_NewRef(Py_None);
        }
        else {
            v = PyObject_GetAttr(rec, *names[i]);
            if (v == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

/* The open request of ``rec`` (a new reference), NULL with no error
 * when it has none (no request id, not open): the fallback's. */
static PyObject *
open_request(PyObject *open, PyObject *rec)
{
    PyObject *req = PyObject_GetAttr(rec, s_req), *r;

    if (req == NULL) {
        return NULL;
    }
    if (req == Py_None) {
        Py_DECREF(req);
        return NULL;
    }
    r = PyDict_GetItemWithError(open, req);
    Py_DECREF(req);
    return Py_XNewRef(r);
}

static int
check(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "takes 4 or 5 arguments");
        return -1;
    }
    if (!PyDict_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "open is not a dict");
        return -1;
    }
    return 0;
}

/* Assembler.begin: a span started. */
static PyObject *
begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *rec, *ts, *r, *sid = NULL, *spans = NULL, *s, *e = NULL;
    PyObject *result = NULL;

    if (check(args, nargs) < 0) {
        return NULL;
    }
    rec = args[2];
    ts = args[3];
    r = open_request(args[0], rec);
    if (r == NULL) {
        return PyErr_Occurred() ? NULL : fall_back(args, nargs);
    }
    sid = PyObject_GetAttr(rec, s_span);
    spans = sid == NULL ? NULL : PyObject_GetAttr(r, s_spans);
    if (spans == NULL) {
        goto done;
    }
    if (!PyDict_CheckExact(spans)) {
        result = fall_back(args, nargs);
        goto done;
    }
    s = PyDict_GetItemWithError(spans, sid);
    if (s != NULL || PyErr_Occurred()) {
        /* its end read first, or a duplicate: Python's */
        if (s != NULL) {
            result = fall_back(args, nargs);
        }
        goto done;
    }
    if (bump(r, s_events, one, 0) < 0) {
        goto done;
    }
    e = entry(rec, ts, 0);
    if (e == NULL || PyDict_SetItem(spans, sid, e) < 0 ||
        bump(r, s_open, one, 0) < 0 || later(r, ts) < 0) {
        goto done;
    }
    result = Py_NewRef(Py_True);
done:
    Py_DECREF(r);
    Py_XDECREF(sid);
    Py_XDECREF(spans);
    Py_XDECREF(e);
    return result;
}

/* Assembler.complete: a span's X record. */
static PyObject *
complete(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *rec, *ts, *r, *sid = NULL, *spans = NULL, *s, *e = NULL;
    PyObject *dur = NULL, *end = NULL, *result = NULL;

    if (check(args, nargs) < 0) {
        return NULL;
    }
    rec = args[2];
    ts = args[3];
    r = open_request(args[0], rec);
    if (r == NULL) {
        return PyErr_Occurred() ? NULL : fall_back(args, nargs);
    }
    sid = PyObject_GetAttr(rec, s_span);
    spans = sid == NULL ? NULL : PyObject_GetAttr(r, s_spans);
    if (spans == NULL) {
        goto done;
    }
    if (!PyDict_CheckExact(spans)) {
        result = fall_back(args, nargs);
        goto done;
    }
    s = PyDict_GetItemWithError(spans, sid);
    if (s == NULL && PyErr_Occurred()) {
        goto done;
    }
    if (s != NULL &&
        (!PyList_CheckExact(s) || PyList_GET_SIZE(s) < NFIELDS ||
         PyList_GET_ITEM(s, S_DUR) != Py_None)) {
        /* a duplicate (or an entry of another shape): Python's */
        result = fall_back(args, nargs);
        goto done;
    }
    Py_XINCREF(s);
    dur = PyObject_GetAttr(rec, s_dur_us);
    if (dur == NULL || bump(r, s_events, one, 0) < 0) {
        goto done_s;
    }
    if (s == NULL) {
        e = entry(rec, ts, 1);
        if (e == NULL || PyDict_SetItem(spans, sid, e) < 0) {
            goto done_s;
        }
    }
    else {
        PyObject *st, *err, *attrs, *begun;
        int truth, rc;

        st = PyObject_GetAttr(rec, s_st);
        if (st == NULL) {
            goto done_s;
        }
        err = PyObject_GetAttr(rec, s_err);
        if (err == NULL) {
            Py_DECREF(st);
            goto done_s;
        }
        attrs = PyObject_GetAttr(rec, s_attrs);
        if (attrs == NULL) {
            Py_DECREF(st);
            Py_DECREF(err);
            goto done_s;
        }
        /* (s is a list of NFIELDS: checked above) */
        PyList_SetItem(s, S_DUR, Py_NewRef(dur));
        PyList_SetItem(s, S_ST, st);
        PyList_SetItem(s, S_ERR, err);
        truth = PyObject_IsTrue(attrs);
        if (truth < 0) {
            Py_DECREF(attrs);
            goto done_s;
        }
        if (truth) {
            PyList_SetItem(s, S_ATTRS, attrs);
        }
        else {
            /* rec.attrs or s[S_ATTRS]: the same object again */
            Py_DECREF(attrs);
        }
        if (bump(r, s_open, one, 1) < 0) {
            goto done_s;
        }
        begun = PyObject_GetAttr(r, s_begun);
        if (begun == NULL) {
            goto done_s;
        }
        if (begun == Py_None) {
            Py_DECREF(begun);
            begun = PySet_New(NULL);
            if (begun == NULL) {
                goto done_s;
            }
            if (PyObject_SetAttr(r, s_begun, begun) < 0) {
                Py_DECREF(begun);
                goto done_s;
            }
        }
        if (PySet_Check(begun)) {
            rc = PySet_Add(begun, sid);
        }
        else {
            PyObject *x = PyObject_CallMethod(begun, "add", "O", sid);
            rc = x == NULL ? -1 : 0;
            Py_XDECREF(x);
        }
        Py_DECREF(begun);
        if (rc < 0) {
            goto done_s;
        }
    }
    end = PyNumber_Add(ts, dur);
    if (end == NULL || later(r, end) < 0) {
        goto done_s;
    }
    result = Py_NewRef(Py_True);
done_s:
    Py_XDECREF(s);
done:
    Py_DECREF(r);
    Py_XDECREF(sid);
    Py_XDECREF(spans);
    Py_XDECREF(e);
    Py_XDECREF(dur);
    Py_XDECREF(end);
    return result;
}

/* Assembler.sql: an sql.query record of a request. */
static PyObject *
sql(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *rec, *ts, *r, *st = NULL, *parent = NULL, *dur = NULL;
    PyObject *stmts = NULL, *end = NULL, *result = NULL, *cur;
    int failed;

    if (check(args, nargs) < 0) {
        return NULL;
    }
    rec = args[2];
    ts = args[3];
    r = open_request(args[0], rec);
    if (r == NULL) {
        return PyErr_Occurred() ? NULL : fall_back(args, nargs);
    }
    st = PyObject_GetAttr(rec, s_st);
    if (st == NULL) {
        goto done;
    }
    failed = PyObject_RichCompareBool(st, s_error, Py_EQ);
    if (failed < 0) {
        goto done;
    }
    parent = PyObject_GetAttr(rec, s_parent);
    dur = parent == NULL ? NULL : PyObject_GetAttr(rec, s_dur_us);
    stmts = dur == NULL ? NULL : PyObject_GetAttr(r, s_sql);
    if (stmts == NULL) {
        goto done;
    }
    cur = PyDict_CheckExact(stmts)
              ? PyDict_GetItemWithError(stmts, parent)
              : NULL;
    if (cur == NULL && PyErr_Occurred()) {
        goto done;
    }
    if (failed || !PyDict_CheckExact(stmts) ||
        (cur != NULL &&
         (!PyList_CheckExact(cur) || PyList_GET_SIZE(cur) < 2))) {
        /* a failed statement (its error kept), or another shape */
        result = fall_back(args, nargs);
        goto done;
    }
    if (bump(r, s_events, one, 0) < 0) {
        goto done;
    }
    if (cur == NULL) {
        PyObject *svc, *host, *pid, *e;
        int rc;
        svc = PyObject_GetAttr(rec, s_svc);
        host = svc == NULL ? NULL : PyObject_GetAttr(rec, s_host);
        pid = host == NULL ? NULL : PyObject_GetAttr(rec, s_pid);
        e = pid == NULL ? NULL
                        : Py_BuildValue("[OOOOO]", dur, one, svc, host, pid);
        Py_XDECREF(svc);
        Py_XDECREF(host);
        Py_XDECREF(pid);
        if (e == NULL) {
            goto done;
        }
        rc = PyDict_SetItem(stmts, parent, e);
        Py_DECREF(e);
        if (rc < 0) {
            goto done;
        }
    }
    else {
        PyObject *us, *n;
        Py_INCREF(cur);
        us = PyNumber_InPlaceAdd(PyList_GET_ITEM(cur, 0), dur);
        if (us == NULL) {
            Py_DECREF(cur);
            goto done;
        }
        PyList_SetItem(cur, 0, us);
        n = PyNumber_InPlaceAdd(PyList_GET_ITEM(cur, 1), one);
        if (n == NULL) {
            Py_DECREF(cur);
            goto done;
        }
        PyList_SetItem(cur, 1, n);
        Py_DECREF(cur);
    }
    end = PyNumber_Add(ts, dur);
    if (end == NULL || later(r, end) < 0) {
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_DECREF(r);
    Py_XDECREF(st);
    Py_XDECREF(parent);
    Py_XDECREF(dur);
    Py_XDECREF(stmts);
    Py_XDECREF(end);
    return result;
}

static PyMethodDef methods[] = {
    {"begin", (PyCFunction)(void (*)(void))begin, METH_FASTCALL,
     "Assembler.begin in C: begin(open, fallback, rec, ts[, cursor])."},
    {"complete", (PyCFunction)(void (*)(void))complete, METH_FASTCALL,
     "Assembler.complete in C: complete(open, fallback, rec, ts[, "
     "cursor])."},
    {"sql", (PyCFunction)(void (*)(void))sql, METH_FASTCALL,
     "Assembler.sql in C: sql(open, fallback, rec, ts[, cursor])."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "instrument._native._assemble",
    "The request model's ingest in C (see assemble.c).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

#define INTERN(var, text)                                                  \
    do {                                                                   \
        var = PyUnicode_InternFromString(text);                            \
        if (var == NULL) {                                                 \
            return NULL;                                                   \
        }                                                                  \
    } while (0)

PyMODINIT_FUNC
PyInit__assemble(void)
{
    INTERN(s_req, "req");
    INTERN(s_span, "span");
    INTERN(s_dur_us, "dur_us");
    INTERN(s_ev, "ev");
    INTERN(s_host, "host");
    INTERN(s_svc, "svc");
    INTERN(s_pid, "pid");
    INTERN(s_parent, "parent");
    INTERN(s_st, "st");
    INTERN(s_err, "err");
    INTERN(s_attrs, "attrs");
    INTERN(s_inst, "inst");
    INTERN(s_events, "events");
    INTERN(s_spans, "spans");
    INTERN(s_open, "open");
    INTERN(s_last, "last");
    INTERN(s_begun, "begun");
    INTERN(s_sql, "sql");
    INTERN(s_error, "error");
    one = PyLong_FromLong(1);
    if (one == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
