/* Columnar arrays from the JSON text of Appendix B steps: contacts, vectors, per-body vectors.

   scoring.json_fast decodes a JSON record with msgspec, keeping each step's numeric
   fields as raw JSON text (msgspec has already checked that it is well-formed JSON).
   Building ~40,000 Python objects per episode from that text and reading them back
   into arrays costs most of the line's decode time; this walks the text once and
   writes the arrays (scoring/json_accel.py wraps it).

   contacts(raws, names) -> (step, a, b, force, peak) | None
     raws    list of buffers, one JSON array of {"a": .., "b": .., "force_n": ..} per step,
             optionally with "force_peak_n": .. last (records with substep peaks)
     names   tuple of bytes, the body names in body_roles order
     step, a, b   bytearrays of native int32, one entry per contact
     force        bytearray of native float64: each force_n correctly rounded, as
                  orjson and msgspec read it (to_double in _json_number.h).
     peak         the same for force_peak_n, or None when no contact has one (a record
                  with it at some contacts only is declined).

   vectors(raws) -> (values, width) | None
     raws    list of buffers, one JSON array of numbers per step (eef_pos_m, joint_torque_nm, action)
     values  bytearray of native float64, steps x width, every step the same width

   named_vectors(raws, names, width) -> (order, values) | None
     raws    list of buffers, one JSON object {name: [width numbers]} per step (body_pos_m, body_quat_wxyz)
     order   bytearray of native int32: index in `names` of each body, in the first step's order
     values  bytearray of native float64, steps x bodies x width

   They return None, never a guess, for anything but the common layout: contact keys
   other than a, b, force_n (, force_peak_n) in that order, a name that is not byte-for-byte one of
   `names` (an escaped name included), a value that is not a bare number, ragged rows,
   bodies in another order than the first step's, or a repeated body. The caller then
   takes the general path, which gives the same record or the reference error message. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_json_number.h"

typedef struct {
    const char *p;
    const char *end;
} Cursor;

typedef struct {
    Py_ssize_t count;
    const char **text;
    Py_ssize_t *length;
} Names;

static inline void skip_ws(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static inline int take(Cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static inline int take_key(Cursor *c, const char *key, Py_ssize_t n) {
    skip_ws(c);
    if (c->end - c->p >= n && memcmp(c->p, key, n) == 0) {
        c->p += n;
        return take(c, ':');
    }
    return 0;
}

/* Index of the quoted name at the cursor, or -1. A JSON escape cannot match: no body
   name passed in holds a backslash or quote (json_accel.encoded_names checks that). */
static inline int32_t take_name(Cursor *c, const Names *names, int32_t hint) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"') return -1;
    const char *s = c->p + 1;
    const char *q = memchr(s, '"', c->end - s);
    if (q == NULL) return -1;
    Py_ssize_t len = q - s;
    /* consecutive contacts often repeat a body: try the previous match first */
    if (hint >= 0 && names->length[hint] == len && memcmp(names->text[hint], s, len) == 0) {
        c->p = q + 1;
        return hint;
    }
    for (Py_ssize_t i = 0; i < names->count; i++) {
        if (names->length[i] == len && memcmp(names->text[i], s, len) == 0) {
            c->p = q + 1;
            return (int32_t)i;
        }
    }
    return -1;
}

/* the characters of a JSON number */
static const unsigned char NUMBER_CHAR[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['-'] = 1, ['+'] = 1, ['.'] = 1, ['e'] = 1, ['E'] = 1,
};

/* Exactly `lit` at the cursor (json.dumps's own spacing): one memcmp instead of a
   token-by-token walk. */
static inline int take_exact(Cursor *c, const char *lit, Py_ssize_t n) {
    if (c->end - c->p >= n && memcmp(c->p, lit, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static inline int at_end(Cursor *c) {
    skip_ws(c);
    return c->p == c->end;
}

/* One JSON number at the cursor into *out: 1, or 0 when there is none or it is not a
   finite double. msgspec checked the text is valid JSON, so a run of number characters
   in value position is exactly one JSON number. */
static inline int take_number(Cursor *c, double *out) {
    skip_ws(c);
    const char *s = c->p;
    while (c->p < c->end && NUMBER_CHAR[(unsigned char)*c->p]) c->p++;
    return c->p != s && to_double(s, c->p, out) == 0;
}

typedef struct {
    int32_t *step, *a, *b; /* cap entries each */
    double *force, *peak;
    Py_ssize_t cap, n;
    int32_t hint_a, hint_b; /* the previous contact's bodies */
    int with_peak;          /* -1 until the first contact says; then 0 or 1 for every contact */
} Out;

/* One step's array. Returns 0 on success, -1 when the layout is not the common one. */
static int parse_step(Cursor *c, const Names *names, int32_t step_index, Out *o) {
    if (!take(c, '[')) return -1;
    if (take(c, ']')) goto done;
    for (;;) {
        if (o->n >= o->cap) return -1;
        /* json.dumps's spacing matches in one memcmp; any other spacing takes the walk */
        if (!take_exact(c, "{\"a\": ", 6) && !(take(c, '{') && take_key(c, "\"a\"", 3))) return -1;
        int32_t ia = take_name(c, names, o->hint_a);
        if (ia < 0 || (!take_exact(c, ", \"b\": ", 7) && !(take(c, ',') && take_key(c, "\"b\"", 3)))) return -1;
        int32_t ib = take_name(c, names, o->hint_b);
        if (ib < 0 || (!take_exact(c, ", \"force_n\": ", 13) && !(take(c, ',') && take_key(c, "\"force_n\"", 9))))
            return -1;
        if (!take_number(c, &o->force[o->n])) return -1;
        int peak = take_exact(c, ", \"force_peak_n\": ", 18) || (take(c, ',') && take_key(c, "\"force_peak_n\"", 14));
        if (peak && !take_number(c, &o->peak[o->n])) return -1;
        if (o->with_peak < 0) o->with_peak = peak;
        if (peak != o->with_peak || !take(c, '}')) return -1;
        o->step[o->n] = step_index;
        o->a[o->n] = o->hint_a = ia;
        o->b[o->n] = o->hint_b = ib;
        o->n++;
        if (take(c, ',')) continue;
        if (take(c, ']')) break;
        return -1;
    }
done:
    return at_end(c) ? 0 : -1;
}

/* [number, ...] at the cursor into out (at most cap): the count, or -1 */
static Py_ssize_t take_numbers(Cursor *c, double *out, Py_ssize_t cap) {
    if (!take(c, '[')) return -1;
    if (take(c, ']')) return 0;
    for (Py_ssize_t k = 0;; ) {
        if (k >= cap || !take_number(c, &out[k])) return -1;
        k++;
        if (take(c, ',')) continue;
        if (take(c, ']')) return k;
        return -1;
    }
}

/* The buffers of a list of objects, released by release_views. */
static Py_buffer *acquire_views(PyObject *list, Py_ssize_t *total) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    Py_buffer *views = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(list, i), &views[i], PyBUF_SIMPLE) < 0) {
            while (i--) PyBuffer_Release(&views[i]);
            PyMem_Free(views);
            return NULL;
        }
        *total += views[i].len;
    }
    return views;
}

static void release_views(Py_buffer *views, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
}

/* names (a tuple of bytes) as a Names borrowing the tuple's storage, or -1 */
static int borrow_names(PyObject *tuple, Names *names) {
    names->count = PyTuple_GET_SIZE(tuple);
    names->text = PyMem_Calloc(names->count ? names->count : 1, sizeof(char *));
    names->length = PyMem_Calloc(names->count ? names->count : 1, sizeof(Py_ssize_t));
    if (names->text == NULL || names->length == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < names->count; i++) {
        PyObject *name = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "names must be bytes");
            return -1;
        }
        names->text[i] = PyBytes_AS_STRING(name);
        names->length[i] = PyBytes_GET_SIZE(name);
    }
    return 0;
}

static void free_names(Names *names) {
    PyMem_Free(names->text);
    PyMem_Free(names->length);
}

static PyObject *contacts(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *raws, *name_tuple;
    if (!PyArg_ParseTuple(args, "O!O!:contacts", &PyList_Type, &raws, &PyTuple_Type, &name_tuple)) return NULL;
    Names names = {0, NULL, NULL};
    Py_ssize_t n_steps = PyList_GET_SIZE(raws), total;
    PyObject *result = NULL, *step_out = NULL, *a_out = NULL, *b_out = NULL, *force_out = NULL, *peak_out = NULL;
    Py_buffer *views = acquire_views(raws, &total);
    if (views == NULL) return NULL;
    if (borrow_names(name_tuple, &names) < 0) goto cleanup;
    /* the shortest contact, {"a":"x","b":"y","force_n":0}, is 29 bytes */
    Py_ssize_t cap = total / 29 + 1;
    step_out = PyByteArray_FromStringAndSize(NULL, cap * 4);
    a_out = PyByteArray_FromStringAndSize(NULL, cap * 4);
    b_out = PyByteArray_FromStringAndSize(NULL, cap * 4);
    force_out = PyByteArray_FromStringAndSize(NULL, cap * 8);
    peak_out = PyByteArray_FromStringAndSize(NULL, cap * 8);
    if (step_out == NULL || a_out == NULL || b_out == NULL || force_out == NULL || peak_out == NULL) goto cleanup;
    Out o = {(int32_t *)PyByteArray_AS_STRING(step_out), (int32_t *)PyByteArray_AS_STRING(a_out),
             (int32_t *)PyByteArray_AS_STRING(b_out), (double *)PyByteArray_AS_STRING(force_out),
             (double *)PyByteArray_AS_STRING(peak_out), cap, 0, -1, -1, -1};
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        Cursor c = {views[i].buf, (const char *)views[i].buf + views[i].len};
        if (parse_step(&c, &names, (int32_t)i, &o) < 0) {
            result = Py_NewRef(Py_None);
            goto cleanup;
        }
    }
    if (PyByteArray_Resize(step_out, o.n * 4) < 0 || PyByteArray_Resize(a_out, o.n * 4) < 0 ||
        PyByteArray_Resize(b_out, o.n * 4) < 0 || PyByteArray_Resize(force_out, o.n * 8) < 0 ||
        PyByteArray_Resize(peak_out, o.n * 8) < 0)
        goto cleanup;
    result = PyTuple_Pack(5, step_out, a_out, b_out, force_out, o.with_peak == 1 ? peak_out : Py_None);

cleanup:
    release_views(views, n_steps);
    free_names(&names);
    Py_XDECREF(step_out);
    Py_XDECREF(a_out);
    Py_XDECREF(b_out);
    Py_XDECREF(force_out);
    Py_XDECREF(peak_out);
    return result;
}

static PyObject *vectors(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *raws;
    if (!PyArg_ParseTuple(args, "O!:vectors", &PyList_Type, &raws)) return NULL;
    Py_ssize_t n_steps = PyList_GET_SIZE(raws), total;
    Py_buffer *views = acquire_views(raws, &total);
    if (views == NULL) return NULL;
    Py_ssize_t cap = total / 2 + 1; /* a number and its separator take two bytes at least */
    PyObject *result = NULL, *values = PyByteArray_FromStringAndSize(NULL, cap * 8);
    if (values == NULL) goto cleanup;
    double *out = (double *)PyByteArray_AS_STRING(values);
    Py_ssize_t width = -1, filled = 0;
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        Cursor c = {views[i].buf, (const char *)views[i].buf + views[i].len};
        Py_ssize_t k = take_numbers(&c, out + filled, cap - filled);
        if (k < 0 || !at_end(&c) || (width >= 0 && k != width)) {
            result = Py_NewRef(Py_None);
            goto cleanup;
        }
        width = k;
        filled += k;
    }
    if (PyByteArray_Resize(values, filled * 8) < 0) goto cleanup;
    result = Py_BuildValue("(On)", values, width < 0 ? 0 : width);

cleanup:
    release_views(views, n_steps);
    Py_XDECREF(values);
    return result;
}

static PyObject *named_vectors(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *raws, *name_tuple;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "O!O!n:named_vectors", &PyList_Type, &raws, &PyTuple_Type, &name_tuple, &width))
        return NULL;
    Names names = {0, NULL, NULL};
    Py_ssize_t n_steps = PyList_GET_SIZE(raws), total, n_bodies = 0;
    PyObject *result = NULL, *order_out = NULL, *values = NULL;
    Py_buffer *views = acquire_views(raws, &total);
    if (views == NULL) return NULL;
    if (borrow_names(name_tuple, &names) < 0) goto cleanup;
    Py_ssize_t cap = total / 2 + 1;
    order_out = PyByteArray_FromStringAndSize(NULL, (names.count ? names.count : 1) * 4);
    values = PyByteArray_FromStringAndSize(NULL, cap * 8);
    if (order_out == NULL || values == NULL) goto cleanup;
    int32_t *order = (int32_t *)PyByteArray_AS_STRING(order_out);
    double *out = (double *)PyByteArray_AS_STRING(values);
    Py_ssize_t filled = 0;
    for (Py_ssize_t i = 0; i < n_steps; i++) {
        Cursor c = {views[i].buf, (const char *)views[i].buf + views[i].len};
        Py_ssize_t k = 0;
        if (!take(&c, '{') || take(&c, '}')) goto decline; /* an empty mapping is the general path's */
        for (;; k++) {
            if (i == 0 ? k >= names.count : k >= n_bodies) goto decline;
            int32_t body = take_name(&c, &names, i == 0 ? -1 : order[k]);
            if (body < 0 || (i > 0 && body != order[k]) || !take(&c, ':')) goto decline;
            if (i == 0) {
                for (Py_ssize_t j = 0; j < k; j++)
                    if (order[j] == body) goto decline; /* a repeated key */
                order[k] = body;
            }
            if (take_numbers(&c, out + filled, cap - filled) != width) goto decline;
            filled += width;
            if (take(&c, ',')) continue;
            if (take(&c, '}') && at_end(&c)) break;
            goto decline;
        }
        if (i == 0) n_bodies = k + 1;
        else if (k + 1 != n_bodies) goto decline;
    }
    if (PyByteArray_Resize(order_out, n_bodies * 4) < 0 || PyByteArray_Resize(values, filled * 8) < 0) goto cleanup;
    result = PyTuple_Pack(2, order_out, values);
    goto cleanup;
decline:
    result = Py_NewRef(Py_None);
cleanup:
    release_views(views, n_steps);
    free_names(&names);
    Py_XDECREF(order_out);
    Py_XDECREF(values);
    return result;
}

static PyObject *number(PyObject *self, PyObject *arg) {
    (void)self;
    char *text;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(arg, &text, &n) < 0) return NULL;
    double value;
    if (to_double(text, text + n, &value) < 0) Py_RETURN_NONE;
    return PyFloat_FromDouble(value);
}

static PyMethodDef methods[] = {
    {"contacts", contacts, METH_VARARGS,
     "contacts(raws, names) -> (step, a, b, force, peak | None) | None: columnar contacts from per-step JSON "
     "arrays."},
    {"vectors", vectors, METH_VARARGS,
     "vectors(raws) -> (values, width) | None: one float64 row per step from per-step JSON arrays of numbers."},
    {"named_vectors", named_vectors, METH_VARARGS,
     "named_vectors(raws, names, width) -> (order, values) | None: float64 (steps, bodies, width) from per-step "
     "JSON objects of body name -> numbers."},
    {"number", number, METH_O,
     "number(text: bytes) -> float | None: a JSON number as the parser reads it (None if not a finite double)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
