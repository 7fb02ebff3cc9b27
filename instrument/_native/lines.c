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
 * instrument._native._lines: the writer's JSON lines in one C call.
 *
 * lines(batch, seq, pid, version, encode, unset) returns the bytes that
 * instrument.runtime.record._lines_fast returns for the same arguments
 * (its pure-Python twin: a msgspec Line struct per record, one
 * encode_lines call), or raises; the caller then takes the Python
 * paths, so a raise is always safe and is the answer to anything odd.
 *
 * Written here: str (escaped as msgspec escapes it), int within 64 bits,
 * None, True/False, and dicts (str keys), lists and tuples of those, a
 * few levels deep.  Any other value (a float, a big int, a subclass, an
 * object) is handed to ``encode`` (msgspec.json.Encoder(enc_hook=str)
 * .encode) and its bytes are appended: a JSON value's text does not
 * depend on where it sits, so the line is the same.  ``unset``
 * (msgspec.UNSET), which a struct field leaves out, makes this raise.
 *
 * Every record's fifteen fields are taken (and referenced) before any is
 * written, as rec[:15] does: a span's list may be completed in place by
 * its thread while encode runs Python code.  Memory: one bytes object,
 * grown as the lines are written (the batch is bounded by the caller).
 *
 * running(batch, begin) is the writer's other per-record step before the
 * lines: the index of the first span still running in the batch (see
 * below), the same answer as its pure-Python twin in
 * instrument.runtime.buffer.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#define NFIELDS 15
/* Containers nested deeper than this go to msgspec whole. */
#define MAX_DEPTH 8

typedef struct {
    PyObject *bytes;
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    PyObject *encode;
} Out;

static int
out_grow(Out *o, Py_ssize_t need)
{
    Py_ssize_t cap = o->cap;
    while (cap - o->len < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    if (_PyBytes_Resize(&o->bytes, cap) < 0) {
        return -1;
    }
    o->buf = PyBytes_AS_STRING(o->bytes);
    o->cap = cap;
    return 0;
}

static inline int
out_reserve(Out *o, Py_ssize_t need)
{
    if (o->cap - o->len >= need) {
        return 0;
    }
    return out_grow(o, need);
}

static inline int
out_write(Out *o, const char *s, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0) {
        return -1;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return 0;
}

#define WRITE_LIT(o, s) out_write((o), (s), (Py_ssize_t)(sizeof(s) - 1))

/* msgspec's escapes: the two-character ones, \u00XX for the other
 * control characters, '"' and '\\'; everything else (DEL, non-ASCII
 * UTF-8) is copied. */
static const char ESCAPE[256] = {
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    'b', 't', 'n', 'u', 'f', 'r', 'u', 'u',
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    0, 0, '"', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '\\', 0, 0, 0,
    /* 0x60 to 0xff: none */
};

static const char HEX[] = "0123456789abcdef";

/* 2**64, made once at import: the bound of a span id. */
static PyObject *TWO64;


/* Whether any of the 8 bytes in x needs an escape: one below 0x20, a
 * '"' or a '\\' (the classic "has a byte less than / equal to" tests,
 * exact as a yes or no). */
static inline int
needs_escape8(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ULL;
    const uint64_t high = 0x8080808080808080ULL;
    uint64_t quote = x ^ (ones * '"');
    uint64_t slash = x ^ (ones * '\\');

    uint64_t found = ((x - ones * 0x20) & ~x)
                     | ((quote - ones) & ~quote)
                     | ((slash - ones) & ~slash);

    return (found & high) != 0;
}

/* memcpy, without a call into libc for the short strings of a line. */
static inline void
copy_small(char *dst, const unsigned char *src, Py_ssize_t n)
{
    if (n > 16) {
        memcpy(dst, src, n);
    }
    else if (n >= 8) {
        memcpy(dst, src, 8);
        memcpy(dst + n - 8, src + n - 8, 8);
    }
    else if (n >= 4) {
        memcpy(dst, src, 4);
        memcpy(dst + n - 4, src + n - 4, 4);
    }
    else {
        while (n-- > 0) {
            *dst++ = (char)*src++;
        }
    }
}

static int
write_str(Out *o, PyObject *s)
{
    Py_ssize_t n, i, first, extra = 0;
    const unsigned char *src;
    char *p;

    if (PyUnicode_IS_COMPACT_ASCII(s)) {
        src = (const unsigned char *)PyUnicode_DATA(s);
        n = PyUnicode_GET_LENGTH(s);
    }
    else {
        src = (const unsigned char *)PyUnicode_AsUTF8AndSize(s, &n);
        if (src == NULL) {
            return -1; /* a lone surrogate: UnicodeEncodeError */
        }
    }
    /* The first byte to escape, 8 bytes at a time, then one by one. */
    for (first = 0; first + 8 <= n; first += 8) {
        uint64_t word;
        memcpy(&word, src + first, 8);
        if (needs_escape8(word)) {
            break;
        }
    }
    if (first < n && first + 8 > n) {
        /* Fewer than 8 bytes left, none of them seen: the last 8 bytes
         * (seen or not), or those left padded with 'A's. */
        uint64_t word = 0x4141414141414141ULL;
        if (n >= 8) {
            memcpy(&word, src + n - 8, 8);
        }
        else {
            copy_small((char *)&word, src, n);
        }
        if (!needs_escape8(word)) {
            first = n;
        }
    }
    while (first < n && !ESCAPE[src[first]]) {
        first++;
    }
    for (i = first; i < n; i++) {
        char e = ESCAPE[src[i]];
        if (e) {
            extra += e == 'u' ? 5 : 1;
        }
    }
    if (out_reserve(o, n + extra + 2) < 0) {
        return -1;
    }
    p = o->buf + o->len;
    *p++ = '"';
    copy_small(p, src, first);
    p += first;
    for (i = first; i < n; i++) {
        unsigned char c = src[i];
        char e = ESCAPE[c];
        if (!e) {
            *p++ = (char)c;
        }
        else if (e == 'u') {
            memcpy(p, "\\u00", 4);
            p[4] = HEX[c >> 4];
            p[5] = HEX[c & 0xf];
            p += 6;
        }
        else {
            p[0] = '\\';
            p[1] = e;
            p += 2;
        }
    }
    *p++ = '"';
    o->len = p - o->buf;
    return 0;
}

static const char DIGITS2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233"
    "34353637383940414243444546474849505152535455565758596061626364656667"
    "68697071727374757677787980818283848586878889909192939495969798"
    "99";

static int
write_i64(Out *o, long long v)
{
    unsigned long long u, t;
    char *p;
    int digits = 1;

    if (out_reserve(o, 21) < 0) {
        return -1;
    }
    p = o->buf + o->len;
    if (v < 0) {
        *p++ = '-';
        u = 0ULL - (unsigned long long)v;
    }
    else {
        u = (unsigned long long)v;
    }
    for (t = u; t >= 10000; t /= 10000) {
        digits += 4;
    }
    if (t >= 100) {
        digits += 2;
        t /= 100;
    }
    if (t >= 10) {
        digits++;
    }
    p += digits;
    o->len = p - o->buf;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        p -= 2;
        memcpy(p, DIGITS2 + 2 * r, 2);
    }
    if (u >= 10) {
        memcpy(p - 2, DIGITS2 + 2 * u, 2);
    }
    else {
        p[-1] = (char)('0' + u);
    }
    return 0;
}

/* Any value through msgspec (its bytes appended). */
static int
write_encoded(Out *o, PyObject *v)
{
    PyObject *b = PyObject_CallOneArg(o->encode, v);
    int rc;

    if (b == NULL) {
        return -1;
    }
    if (!PyBytes_CheckExact(b)) {
        Py_DECREF(b);
        PyErr_SetString(PyExc_TypeError, "encode did not return bytes");
        return -1;
    }
    rc = out_write(o, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
    Py_DECREF(b);
    return rc;
}

static int write_value(Out *o, PyObject *v, int depth);

static int
write_items(Out *o, PyObject *seq, int depth)
{
    /* A list may change while an item goes through encode (Python
     * code): the size and the item are read again each time, and the
     * item is referenced while it is written. */
    Py_ssize_t i;
    int is_list = PyList_CheckExact(seq);

    if (WRITE_LIT(o, "[") < 0) {
        return -1;
    }
    for (i = 0;; i++) {
        PyObject *item;
        int rc;

        if (is_list) {
            if (i >= PyList_GET_SIZE(seq)) {
                break;
            }
            item = PyList_GET_ITEM(seq, i);
        }
        else {
            if (i >= PyTuple_GET_SIZE(seq)) {
                break;
            }
            item = PyTuple_GET_ITEM(seq, i);
        }
        if (i && WRITE_LIT(o, ",") < 0) {
            return -1;
        }
        Py_INCREF(item);
        rc = write_value(o, item, depth + 1);
        Py_DECREF(item);
        if (rc < 0) {
            return -1;
        }
    }
    return WRITE_LIT(o, "]");
}

static int
write_dict(Out *o, PyObject *d, int depth)
{
    Py_ssize_t pos = 0, start = o->len;
    PyObject *key, *val;
    int first = 1;

    if (WRITE_LIT(o, "{") < 0) {
        return -1;
    }
    while (PyDict_Next(d, &pos, &key, &val)) {
        int rc;

        if (!PyUnicode_CheckExact(key)) {
            /* msgspec's own rules for other keys: the whole dict. */
            o->len = start;
            return write_encoded(o, d);
        }
        if (!first && WRITE_LIT(o, ",") < 0) {
            return -1;
        }
        first = 0;
        Py_INCREF(key);
        Py_INCREF(val);
        rc = write_str(o, key);
        if (rc == 0) {
            rc = WRITE_LIT(o, ":");
        }
        if (rc == 0) {
            rc = write_value(o, val, depth + 1);
        }
        Py_DECREF(key);
        Py_DECREF(val);
        if (rc < 0) {
            return -1;
        }
    }
    return WRITE_LIT(o, "}");
}

static int
write_value(Out *o, PyObject *v, int depth)
{
    PyTypeObject *t = Py_TYPE(v);

    if (t == &PyUnicode_Type) {
        return write_str(o, v);
    }
    if (v == Py_None) {
        return WRITE_LIT(o, "null");
    }
    if (t == &PyLong_Type) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) {
            return write_encoded(o, v);
        }
        if (x == -1 && PyErr_Occurred()) {
            return -1;
        }
        return write_i64(o, x);
    }
    if (v == Py_True) {
        return WRITE_LIT(o, "true");
    }
    if (v == Py_False) {
        return WRITE_LIT(o, "false");
    }
    if (depth < MAX_DEPTH) {
        if (t == &PyDict_Type) {
            return write_dict(o, v, depth);
        }
        if (t == &PyList_Type || t == &PyTuple_Type) {
            return write_items(o, v, depth);
        }
    }
    return write_encoded(o, v);
}

/* A struct field's value: UNSET would be left out by the struct. */
static int
write_field(Out *o, PyObject *v, PyObject *unset)
{
    if (v == unset) {
        PyErr_SetString(PyExc_ValueError, "UNSET in a record");
        return -1;
    }
    return write_value(o, v, 0);
}

/* ,"name": then the value; left out when None (an optional field). */
static int
write_optional(Out *o, const char *key, Py_ssize_t keylen, PyObject *v,
               PyObject *unset)
{
    if (v == Py_None) {
        return 0;
    }
    if (out_write(o, key, keylen) < 0) {
        return -1;
    }
    return write_field(o, v, unset);
}

#define OPTIONAL(o, lit, v, unset) \
    write_optional((o), (lit), (Py_ssize_t)(sizeof(lit) - 1), (v), (unset))

/* A span id: an int as 16 lowercase hex digits (an int outside 0 ..
 * 2**64-1 raises, as int.to_bytes(8, 'big') does), anything else as
 * it is. */
static int
write_span(Out *o, const char *key, Py_ssize_t keylen, PyObject *v,
           PyObject *unset)
{
    unsigned long long x;
    char hex[18];
    int i;

    long long fast;
    int overflow;

    if (Py_TYPE(v) != &PyLong_Type) {
        return write_optional(o, key, keylen, v, unset);
    }
    fast = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (!overflow && fast >= 0) {
        x = (unsigned long long)fast;
    }
    else if (overflow > 0 && TWO64 != NULL
             && PyObject_RichCompareBool(v, TWO64, Py_LT) == 1) {
        /* 2**63 to 2**64-1: half the ids of a random base. */
        x = PyLong_AsUnsignedLongLongMask(v);
    }
    else {
        /* 2**63 and up, or negative (OverflowError). */
        if (fast == -1 && PyErr_Occurred()) {
            return -1;
        }
        x = PyLong_AsUnsignedLongLong(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
    }
    hex[0] = '"';
    for (i = 16; i >= 1; i--) {
        hex[i] = HEX[x & 0xf];
        x >>= 4;
    }
    hex[17] = '"';
    if (out_write(o, key, keylen) < 0) {
        return -1;
    }
    return out_write(o, hex, sizeof(hex));
}

#define SPAN(o, lit, v, unset) \
    write_span((o), (lit), (Py_ssize_t)(sizeof(lit) - 1), (v), (unset))

/* inst: a non-empty list or tuple as it is, any other truthy value
 * through list(); left out when empty or falsy. */
static int
write_inst(Out *o, PyObject *v)
{
    PyObject *items;
    int rc, truth;

    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        if (Py_SIZE(v) == 0) {
            return 0;
        }
        if (WRITE_LIT(o, ",\"inst\":") < 0) {
            return -1;
        }
        return write_items(o, v, 0);
    }
    if (v == Py_None) {
        return 0;
    }
    truth = PyObject_IsTrue(v);
    if (truth <= 0) {
        return truth;
    }
    items = PySequence_List(v);
    if (items == NULL) {
        return -1;
    }
    rc = 0;
    if (PyList_GET_SIZE(items)) {
        rc = WRITE_LIT(o, ",\"inst\":");
        if (rc == 0) {
            rc = write_items(o, items, 0);
        }
    }
    Py_DECREF(items);
    return rc;
}

/* err: {"cls": err[0], "msg": err[1]}; left out when None. */
static int
write_err(Out *o, PyObject *v)
{
    PyObject *cls = NULL, *msg = NULL;
    int rc = -1;

    if (v == Py_None) {
        return 0;
    }
    if (PyTuple_CheckExact(v) && PyTuple_GET_SIZE(v) >= 2) {
        cls = PyTuple_GET_ITEM(v, 0);
        msg = PyTuple_GET_ITEM(v, 1);
        Py_INCREF(cls);
        Py_INCREF(msg);
    }
    else {
        PyObject *index = PyLong_FromLong(0);
        if (index == NULL) {
            return -1;
        }
        cls = PyObject_GetItem(v, index);
        Py_DECREF(index);
        if (cls == NULL) {
            return -1;
        }
        index = PyLong_FromLong(1);
        if (index == NULL) {
            goto done;
        }
        msg = PyObject_GetItem(v, index);
        Py_DECREF(index);
        if (msg == NULL) {
            goto done;
        }
    }
    /* Values of a dict: UNSET there is msgspec's to encode. */
    if (WRITE_LIT(o, ",\"err\":{\"cls\":") < 0
        || write_value(o, cls, 1) < 0
        || WRITE_LIT(o, ",\"msg\":") < 0
        || write_value(o, msg, 1) < 0
        || WRITE_LIT(o, "}") < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(cls);
    Py_XDECREF(msg);
    return rc;
}

/* attrs: left out when empty or falsy. */
static int
write_attrs(Out *o, PyObject *v, PyObject *unset)
{
    int truth;

    if (v == Py_None) {
        return 0;
    }
    if (PyDict_CheckExact(v)) {
        if (PyDict_GET_SIZE(v) == 0) {
            return 0;
        }
    }
    else {
        truth = PyObject_IsTrue(v);
        if (truth <= 0) {
            return truth;
        }
    }
    if (WRITE_LIT(o, ",\"attrs\":") < 0) {
        return -1;
    }
    return write_field(o, v, unset);
}

/* Bytes a line, as the last batch wrote them (a first guess before
 * any): the next batch's output is made that size, a sixteenth more, in
 * one allocation that is seldom grown. */
static Py_ssize_t line_guess = 320;

/* The text of a field's value already written in this batch: most
 * records of a batch repeat their host, service, event name and phase
 * (the same str objects), and every one the version and pid.  A value
 * that is the same object as the last one written in its field is
 * copied from where it was written, not written again.  Only exact str
 * and int are kept (immutable: the same object, the same text), each
 * referenced until the batch is done, so that its address can never be
 * another object's. */
typedef struct {
    PyObject *obj;
    Py_ssize_t at;
    Py_ssize_t len;
} Seen;

enum {
    SEEN_VERSION,
    SEEN_PH,
    SEEN_HOST,
    SEEN_SVC,
    SEEN_PID,
    SEEN_TID,
    SEEN_EV,
    SEEN_REQ,
    SEEN_GREQ,
    SEEN_ST,
    NSEEN
};

static void
seen_clear(Seen *seen)
{
    int k;

    for (k = 0; k < NSEEN; k++) {
        Py_CLEAR(seen[k].obj);
    }
}

/* write_field through the field's Seen. */
static int
write_seen(Out *o, Seen *seen, PyObject *v, PyObject *unset)
{
    Py_ssize_t at;

    if (v == seen->obj) {
        if (out_reserve(o, seen->len) < 0) {
            return -1;
        }
        /* the earlier text is before o->len: no overlap */
        copy_small(o->buf + o->len, (const unsigned char *)o->buf + seen->at,
                   seen->len);
        o->len += seen->len;
        return 0;
    }
    at = o->len;
    if (write_field(o, v, unset) < 0) {
        return -1;
    }
    if (PyUnicode_CheckExact(v) || PyLong_CheckExact(v)) {
        Py_INCREF(v);
        Py_XSETREF(seen->obj, v);
        seen->at = at;
        seen->len = o->len - at;
    }
    return 0;
}

/* write_optional through the field's Seen. */
static int
optional_seen(Out *o, const char *key, Py_ssize_t keylen, Seen *seen,
              PyObject *v, PyObject *unset)
{
    if (v == Py_None) {
        return 0;
    }
    if (out_write(o, key, keylen) < 0) {
        return -1;
    }
    return write_seen(o, seen, v, unset);
}

#define OPTIONAL_SEEN(o, lit, seen, v, unset) \
    optional_seen((o), (lit), (Py_ssize_t)(sizeof(lit) - 1), (seen), (v), \
                  (unset))

static int
write_record(Out *o, PyObject **f, PyObject *version, long long seq,
             PyObject *pid, PyObject *unset, Seen *seen)
{
    if (WRITE_LIT(o, "{\"v\":") < 0
        || write_seen(o, &seen[SEEN_VERSION], version, unset) < 0
        || WRITE_LIT(o, ",\"ph\":") < 0
        || write_seen(o, &seen[SEEN_PH], f[0], unset) < 0
        || WRITE_LIT(o, ",\"seq\":") < 0
        || write_i64(o, seq) < 0
        || WRITE_LIT(o, ",\"ts\":") < 0
        || write_field(o, f[1], unset) < 0
        || OPTIONAL(o, ",\"dur_us\":", f[2], unset) < 0
        || WRITE_LIT(o, ",\"host\":") < 0
        || write_seen(o, &seen[SEEN_HOST], f[3], unset) < 0
        || WRITE_LIT(o, ",\"svc\":") < 0
        || write_seen(o, &seen[SEEN_SVC], f[4], unset) < 0
        || WRITE_LIT(o, ",\"pid\":") < 0
        || write_seen(o, &seen[SEEN_PID], pid, unset) < 0
        || OPTIONAL_SEEN(o, ",\"tid\":", &seen[SEEN_TID], f[5], unset) < 0
        || WRITE_LIT(o, ",\"ev\":") < 0
        || write_seen(o, &seen[SEEN_EV], f[6], unset) < 0
        || SPAN(o, ",\"span\":", f[7], unset) < 0
        || SPAN(o, ",\"parent\":", f[8], unset) < 0
        || OPTIONAL_SEEN(o, ",\"req\":", &seen[SEEN_REQ], f[9], unset) < 0
        || OPTIONAL_SEEN(o, ",\"greq\":", &seen[SEEN_GREQ], f[10], unset)
               < 0
        || write_inst(o, f[11]) < 0
        || OPTIONAL_SEEN(o, ",\"st\":", &seen[SEEN_ST], f[12], unset) < 0
        || write_err(o, f[13]) < 0
        || write_attrs(o, f[14], unset) < 0) {
        return -1;
    }
    return WRITE_LIT(o, "}\n");
}

static PyObject *
lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *batch, *pid, *version, *unset;
    Py_ssize_t i, n;
    long long seq;
    int overflow;
    Out o;
    Seen seen[NSEEN];

    (void)module;
    memset(seen, 0, sizeof(seen));
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "lines(batch, seq, pid, version, encode, unset)");
        return NULL;
    }
    batch = args[0];
    pid = args[2];
    version = args[3];
    unset = args[5];
    if (!PyList_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "batch must be a list");
        return NULL;
    }
    if (Py_TYPE(args[1]) != &PyLong_Type) {
        PyErr_SetString(PyExc_TypeError, "seq must be an int");
        return NULL;
    }
    seq = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (seq == -1 && PyErr_Occurred()) {
        return NULL;
    }
    /* Room for every record's number in 63 bits. */
    if (overflow || seq < 0 || seq > LLONG_MAX - PyList_GET_SIZE(batch)) {
        PyErr_SetString(PyExc_OverflowError, "seq out of range");
        return NULL;
    }
    n = PyList_GET_SIZE(batch);
    if (n > PY_SSIZE_T_MAX / 2 / (line_guess + line_guess / 16)) {
        return PyErr_NoMemory();
    }
    o.cap = (line_guess + line_guess / 16) * (n ? n : 1);
    o.len = 0;
    o.encode = args[4];
    o.bytes = PyBytes_FromStringAndSize(NULL, o.cap);
    if (o.bytes == NULL) {
        return NULL;
    }
    o.buf = PyBytes_AS_STRING(o.bytes);
    for (i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *rec = PyList_GET_ITEM(batch, i);
        PyObject *f[NFIELDS];
        Py_ssize_t size, j;
        int rc;

        if (PyTuple_CheckExact(rec)) {
            size = PyTuple_GET_SIZE(rec);
            if (size < NFIELDS) {
                goto short_record;
            }
            for (j = 0; j < NFIELDS; j++) {
                f[j] = PyTuple_GET_ITEM(rec, j);
            }
        }
        else if (PyList_CheckExact(rec)) {
            size = PyList_GET_SIZE(rec);
            if (size < NFIELDS) {
                goto short_record;
            }
            for (j = 0; j < NFIELDS; j++) {
                f[j] = PyList_GET_ITEM(rec, j);
            }
        }
        else {
            PyErr_SetString(PyExc_TypeError,
                            "a record must be a tuple or a list");
            goto error;
        }
        for (j = 0; j < NFIELDS; j++) {
            Py_INCREF(f[j]);
        }
        rc = write_record(&o, f, version, seq, pid, unset, seen);
        for (j = 0; j < NFIELDS; j++) {
            Py_DECREF(f[j]);
        }
        if (rc < 0) {
            goto error;
        }
        if (seq == LLONG_MAX) { /* a batch that grew while written */
            PyErr_SetString(PyExc_OverflowError, "seq out of range");
            goto error;
        }
        seq++;
    }
    seen_clear(seen);
    if (n && o.len / n + 1 > 64) {
        line_guess = o.len / n + 1;
    }
    if (o.cap - o.len <= o.cap / 4) {
        /* The block is kept as it was made (its end unused): the
         * allocator gets back a block of the size it will be asked for
         * next, and gives it again, its pages still mapped (a block
         * shrunk by realloc is smaller than the next batch asks for:
         * a new mapping, whose every page faults as it is written). */
        Py_SET_SIZE(o.bytes, o.len);
        o.buf[o.len] = '\0';
    }
    else if (_PyBytes_Resize(&o.bytes, o.len) < 0) {
        return NULL;
    }
    return o.bytes;

short_record:
    PyErr_SetString(PyExc_ValueError, "a record has fewer than 15 fields");
error:
    seen_clear(seen);
    Py_CLEAR(o.bytes);
    return NULL;
}

/* running(batch, begin): the index of the first record of batch that is
 * a list (a span's record, not a subclass) whose phase (item 0) equals
 * begin, or len(batch) when there is none: the writer's "is any span of
 * this batch still running" in one pass with no bytecode per record.
 * Its pure-Python twin is instrument.runtime.buffer._first_running_py. */
static PyObject *
running(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *batch, *begin;
    Py_ssize_t i, blen = 0;
    Py_UCS4 bfirst = 0;
    int begin_str;

    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "running(batch, begin)");
        return NULL;
    }
    batch = args[0];
    begin = args[1];
    if (!PyList_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "batch must be a list");
        return NULL;
    }
    begin_str = PyUnicode_CheckExact(begin);
    if (begin_str) {
        blen = PyUnicode_GET_LENGTH(begin);
        bfirst = blen ? PyUnicode_READ_CHAR(begin, 0) : 0;
    }
    /* The batch is the writer's own list; a record's items may change
     * (a span ends on its thread) while a comparison runs Python code:
     * the phase is referenced while it is compared. */
    for (i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *rec = PyList_GET_ITEM(batch, i);
        PyObject *ph;
        int eq;

        if (!PyList_CheckExact(rec) || PyList_GET_SIZE(rec) == 0) {
            continue;
        }
        ph = PyList_GET_ITEM(rec, 0);
        if (ph == begin) {
            return PyLong_FromSsize_t(i);
        }
        if (begin_str && PyUnicode_CheckExact(ph)) {
            /* Another phase ('X', 'I'...) differs in its length or its
             * first character: no call for those. */
            if (PyUnicode_GET_LENGTH(ph) != blen
                || (blen && PyUnicode_READ_CHAR(ph, 0) != bfirst)) {
                continue;
            }
            if (PyUnicode_Compare(ph, begin) == 0) {
                return PyLong_FromSsize_t(i);
            }
            continue;
        }
        Py_INCREF(ph);
        eq = PyObject_RichCompareBool(ph, begin, Py_EQ);
        Py_DECREF(ph);
        if (eq < 0) {
            return NULL;
        }
        if (eq) {
            return PyLong_FromSsize_t(i);
        }
    }
    return PyLong_FromSsize_t(PyList_GET_SIZE(batch));
}

static PyMethodDef methods[] = {
    {"lines", (PyCFunction)(void (*)(void))lines, METH_FASTCALL,
     "lines(batch, seq, pid, version, encode, unset) -> bytes\n\n"
     "The JSON lines of record._lines_fast in one call; raises on\n"
     "anything it cannot write the same way."},
    {"running", (PyCFunction)(void (*)(void))running, METH_FASTCALL,
     "running(batch, begin) -> int\n\n"
     "The index of the first list record whose phase is begin (a span\n"
     "still running), or len(batch)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "instrument._native._lines",
    "The writer's JSON lines in one C call (see lines.c).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__lines(void)
{
    if (TWO64 == NULL) {
        PyObject *one = PyLong_FromLong(1), *shift = PyLong_FromLong(64);
        if (one != NULL && shift != NULL) {
            TWO64 = PyNumber_Lshift(one, shift);
        }
        Py_XDECREF(one);
        Py_XDECREF(shift);
        if (TWO64 == NULL) {
            return NULL;
        }
    }
    return PyModule_Create(&module);
}
