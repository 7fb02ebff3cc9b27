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
 * instrument._native._scan: pass 1's hash of each line's request id
 * (instrument.analysis.ingest.clockpass.request_hashes, its pure-Python
 * twin) in one C call.
 *
 * For each line (bytes): a line that does not start with '{' is read
 * from its log marker ('{"v":') on, none: NO_REQ; then the first
 * '"req":"' and the value after it, up to the next '"' within 256
 * bytes, else its first 40 bytes (fewer at the line's end); the value's
 * CRC-32 (zlib's, reflected polynomial 0xEDB88320).  The result is the
 * native-endian uint32 of each line, as ``array('I').tobytes()``.
 * An item that is not exactly bytes raises TypeError (the twin runs).
 */

#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NO_REQ 0xFFFFFFFFu

static uint32_t CRC_TABLE[256];

static void
crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        CRC_TABLE[n] = c;
    }
}

static uint32_t
crc32_of(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) {
        c = CRC_TABLE[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

/* Index of the first ``needle`` (``m`` bytes, m >= 1) in s[from:n], or
 * -1. */
static Py_ssize_t
find(const unsigned char *s, Py_ssize_t from, Py_ssize_t n,
     const char *needle, Py_ssize_t m)
{
    if (from > n - m) {
        return -1;
    }
    const unsigned char *hit =
        memmem(s + from, (size_t)(n - from), needle, (size_t)m);
    return hit == NULL ? -1 : (Py_ssize_t)(hit - s);
}

static uint32_t
line_hash(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t start = 0;
    if (n == 0 || s[0] != '{') {
        start = find(s, 0, n, "{\"v\":", 5);
        if (start < 0) {
            return NO_REQ;
        }
    }
    Py_ssize_t i = find(s, start, n, "\"req\":\"", 7);
    if (i < 0) {
        return NO_REQ;
    }
    i += 7;
    Py_ssize_t stop = i + 256 < n ? i + 256 : n;
    const unsigned char *q = memchr(s + i, '"', (size_t)(stop - i));
    Py_ssize_t j;
    if (q != NULL) {
        j = q - s;
    }
    else {
        j = i + 40 < n ? i + 40 : n;
    }
    return crc32_of(s + i, j - i);
}

static PyObject *
request_hashes(PyObject *Py_UNUSED(self), PyObject *lines)
{
    PyObject *seq = PySequence_Fast(lines, "request_hashes: a list");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    uint32_t *dst = (uint32_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *raw = items[k];
        if (!PyBytes_CheckExact(raw)) {
            Py_DECREF(seq);
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "request_hashes: bytes lines");
            return NULL;
        }
        uint32_t h = line_hash((const unsigned char *)PyBytes_AS_STRING(raw),
                               PyBytes_GET_SIZE(raw));
        memcpy(dst + k, &h, 4);
    }
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"request_hashes", (PyCFunction)request_hashes, METH_O,
     "request_hashes(lines) -> bytes\n\n"
     "The native uint32 crc32 of each line's request id (NO_REQ where\n"
     "none is found), as clockpass.request_hashes finds it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "instrument._native._scan",
    "Pass 1's request id hashes in one C call (see scan.c).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    crc_init();
    return PyModule_Create(&module);
}
