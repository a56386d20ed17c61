/* The guard memo's snapshot check (magpy_codegen/_memo.py, Memo.valid) in C.
 *
 * holds(state, absent) -> bool: the same answer as the Python check in _snapshot.py, one pass
 * over flat lists with no Python call per element. _cbuild.py compiles it on first use and
 * falls back to the Python check where that is not possible.
 *
 * version(dict) -> int: the dict's version, the number a snapshot records for a dict whose
 * whole content a check depends on; it changes with every mutation of the dict and is never
 * reused. How it is kept is the one interpreter-specific part of this file:
 *   - CPython 3.11: the dict's own version tag (ma_version_tag), which every mutation renews
 *     from a global counter;
 *   - CPython 3.12+: PEP 699 deprecated that tag (3.14 removes it), so versions come from a
 *     dict watcher (PyDict_AddWatcher): version() watches the dict, and the watcher's callback
 *     gives it a new number from our own counter on every event (added, modified, deleted,
 *     cloned, cleared) and forgets it when the dict is freed. The numbers live in a small
 *     open-addressing table keyed by the dict's address. If the table cannot grow, every
 *     version check fails from then on (the memo re-walks the guard: slower, never wrong).
 *   Which of the two is compiled is chosen by the preprocessor; the Python side only asks
 *   magpy_monitor.INTERP whether this file supports the running interpreter.
 *
 * values_state(dict) -> bytes (3.13 only): what a check of the dict's *values* compares: 3.13
 *   stores an attribute of an object whose values live inline (``self.flag = False``) into
 *   those values, shared with the materialised __dict__, without renewing its tag or telling a
 *   watcher (3.13.0), so the version alone cannot vouch for an instance dict there. The state
 *   is the dict's ma_values pointer, then (when not NULL) the values' header (capacity, size,
 *   embedded, valid: CPython 3.13's struct _dictvalues, mirrored below), every value pointer
 *   and the insertion order bytes after them; holds() compares it in place.
 *
 * disjoint(outs, inputs) -> bool: no object of the sequence outs is one of inputs (by identity):
 * the mock's test whether a graph gave back an input (see _mock.fresh_outputs_of).
 *
 * state: (fn, item_dicts, item_keys, item_values, version_dicts, versions, type_objs, types,
 *         owner_objs, owner_dicts, mro_classes, mros, slot_objs, slot_names, slot_values,
 *         (values_dicts, values_states) or None, cells, cell_values, empties, values)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "CPython 3.11 to 3.13"
#endif

static int same_len(PyObject *a, PyObject *b) {
    return PyList_Check(a) && PyList_Check(b) && PyList_GET_SIZE(a) == PyList_GET_SIZE(b);
}

#if PY_VERSION_HEX >= 0x030C0000
/* ---- dict versions from a watcher (3.12+) ---- */

typedef struct {
    PyObject *dict; /* NULL: empty; TOMBSTONE: freed */
    uint64_t version;
} entry_t;

#define TOMBSTONE ((PyObject *)1)
static entry_t *table = NULL;
static size_t capacity = 0, filled = 0; /* filled counts tombstones too */
static uint64_t next_version = 1;
static int watcher = -1;
static int lost = 0; /* the table could not grow: no version can be vouched for */

static size_t slot_of(PyObject *dict) {
    uint64_t x = (uint64_t)(uintptr_t)dict;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (capacity - 1);
}

static entry_t *find(PyObject *dict) {
    if (capacity == 0) return NULL;
    for (size_t i = slot_of(dict);; i = (i + 1) & (capacity - 1)) {
        if (table[i].dict == dict) return &table[i];
        if (table[i].dict == NULL) return NULL;
    }
}

static int grow(void) {
    size_t old = capacity, n = capacity ? capacity * 2 : 1024;
    entry_t *was = table, *now = calloc(n, sizeof(entry_t));
    if (now == NULL) return -1;
    table = now, capacity = n, filled = 0;
    for (size_t i = 0; i < old; i++) {
        PyObject *d = was[i].dict;
        if (d == NULL || d == TOMBSTONE) continue;
        size_t j = slot_of(d);
        while (table[j].dict != NULL) j = (j + 1) & (capacity - 1);
        table[j] = was[i];
        filled++;
    }
    free(was);
    return 0;
}

static void renew(PyObject *dict) {
    entry_t *e = find(dict);
    if (e == NULL) {
        if ((filled + 1) * 2 > capacity && grow() < 0) {
            lost = 1;
            return;
        }
        size_t i = slot_of(dict);
        while (table[i].dict != NULL && table[i].dict != TOMBSTONE) i = (i + 1) & (capacity - 1);
        if (table[i].dict == NULL) filled++;
        e = &table[i];
        e->dict = dict;
    }
    e->version = next_version++;
}

static int on_event(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *value) {
    (void)key, (void)value;
    if (event == PyDict_EVENT_DEALLOCATED) {
        entry_t *e = find(dict);
        if (e != NULL) e->dict = TOMBSTONE;
    } else {
        renew(dict);
    }
    return 0;
}

static int watch(PyObject *dict, uint64_t *out) {
    if (find(dict) == NULL) {
        if (PyDict_Watch(watcher, dict) < 0) return -1;
        renew(dict);
    }
    entry_t *e = find(dict);
    if (e == NULL || lost) {
        PyErr_SetString(PyExc_MemoryError, "the dict version table could not grow");
        return -1;
    }
    *out = e->version;
    return 0;
}

/* whether dict still has version want (a dict never watched has none) */
static int same_version(PyObject *dict, uint64_t want) {
    entry_t *e = find(dict);
    return !lost && e != NULL && e->version == want;
}

static int setup(void) {
    watcher = PyDict_AddWatcher(on_event);
    return watcher < 0 ? -1 : 0;
}

#else
/* ---- dict versions are the dict's own tag (3.11) ---- */

static int watch(PyObject *dict, uint64_t *out) {
    *out = ((PyDictObject *)dict)->ma_version_tag;
    return 0;
}

static int same_version(PyObject *dict, uint64_t want) {
    return ((PyDictObject *)dict)->ma_version_tag == want;
}

static int setup(void) { return 0; }
#endif

#if PY_VERSION_HEX >= 0x030D0000
/* ---- an instance dict's values (3.13) ---- */

typedef struct {
    uint8_t capacity, size, embedded, valid;
    PyObject *values[1];
} values313_t; /* CPython 3.13's struct _dictvalues (Include/internal/pycore_dict.h) */

static values313_t *values_of(PyObject *dict) {
    return (values313_t *)((PyDictObject *)dict)->ma_values;
}

/* the values' bytes a state holds: the header, the value pointers and the insertion order
 * (one byte per value, after the pointers: the order of obj.__dict__'s keys) */
static size_t values_bytes(values313_t *vals) {
    return offsetof(values313_t, values) + vals->capacity * sizeof(PyObject *) + vals->size;
}

static Py_ssize_t values_size(values313_t *vals) {
    return (Py_ssize_t)(vals == NULL ? sizeof(void *) : sizeof(void *) + values_bytes(vals));
}

static PyObject *values_state(PyObject *self, PyObject *dict) {
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "values_state(dict)");
        return NULL;
    }
    values313_t *vals = values_of(dict);
    PyObject *out = PyBytes_FromStringAndSize(NULL, values_size(vals));
    if (out == NULL) return NULL;
    memcpy(PyBytes_AS_STRING(out), &vals, sizeof(void *));
    if (vals != NULL) memcpy(PyBytes_AS_STRING(out) + sizeof(void *), vals, values_bytes(vals));
    return out;
}

/* whether dict's values are still those of state (a values_state result) */
static int same_values(PyObject *dict, PyObject *state) {
    values313_t *vals = values_of(dict);
    const char *want = PyBytes_AS_STRING(state);
    if (PyBytes_GET_SIZE(state) != values_size(vals) || memcmp(want, &vals, sizeof(void *)))
        return 0;
    return vals == NULL || memcmp(want + sizeof(void *), vals, values_bytes(vals)) == 0;
}
#define HAS_VALUES_STATE 1
#else
#define HAS_VALUES_STATE 0
#endif

/* field 15: None, or ([dict], [values_state(dict)]) (3.13); -1: not a memo state */
static int values_hold(PyObject *f) {
    if (f == Py_None) return 1;
    if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 2) return -1;
    PyObject *d = PyTuple_GET_ITEM(f, 0), *v = PyTuple_GET_ITEM(f, 1);
    if (!same_len(d, v)) return -1;
#if HAS_VALUES_STATE
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject *dict = PyList_GET_ITEM(d, i), *state = PyList_GET_ITEM(v, i);
        if (!PyDict_Check(dict) || !PyBytes_Check(state)) return -1;
        if (!same_values(dict, state)) return 0;
    }
    return 1;
#else
    return PyList_GET_SIZE(d) == 0 ? 1 : -1;
#endif
}

static PyObject *version(PyObject *self, PyObject *dict) {
    uint64_t v;
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "version(dict)");
        return NULL;
    }
    if (watch(dict, &v) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *holds(PyObject *self, PyObject *args) {
    PyObject *s, *absent;
    if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &s, &absent)) return NULL;
    if (PyTuple_GET_SIZE(s) != 20) {
        PyErr_SetString(PyExc_ValueError, "a memo state has 20 fields");
        return NULL;
    }
#define F(i) PyTuple_GET_ITEM(s, i)
    PyObject *d = F(1), *k = F(2), *v = F(3);
    if (!same_len(d, k) || !same_len(d, v)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject *dict = PyList_GET_ITEM(d, i);
        if (!PyDict_Check(dict)) goto bad;
        PyObject *got = PyDict_GetItemWithError(dict, PyList_GET_ITEM(k, i));
        if (got == NULL) {
            if (PyErr_Occurred()) return NULL;
            got = absent;
        }
        if (got != PyList_GET_ITEM(v, i)) Py_RETURN_FALSE;
    }
    d = F(4), v = F(5);
    if (!same_len(d, v)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject *dict = PyList_GET_ITEM(d, i);
        if (!PyDict_Check(dict)) goto bad;
        unsigned long long want = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(v, i));
        if (want == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        if (!same_version(dict, want)) Py_RETURN_FALSE;
    }
    d = F(6), v = F(7);
    if (!same_len(d, v)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++)
        if ((PyObject *)Py_TYPE(PyList_GET_ITEM(d, i)) != PyList_GET_ITEM(v, i)) Py_RETURN_FALSE;
    d = F(8), v = F(9);
    if (!same_len(d, v)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject **ptr = _PyObject_GetDictPtr(PyList_GET_ITEM(d, i));
        if (ptr == NULL || *ptr != PyList_GET_ITEM(v, i)) Py_RETURN_FALSE;
    }
    d = F(10), v = F(11);
    if (!same_len(d, v)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject *cls = PyList_GET_ITEM(d, i);
        if (!PyType_Check(cls)) goto bad;
        if (((PyTypeObject *)cls)->tp_mro != PyList_GET_ITEM(v, i)) Py_RETURN_FALSE;
    }
    d = F(12), k = F(13), v = F(14);
    if (!same_len(d, k) || !same_len(d, v)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject *got = PyObject_GetAttr(PyList_GET_ITEM(d, i), PyList_GET_ITEM(k, i));
        if (got == NULL) {
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        Py_DECREF(got);  /* (the list keeps the value it is compared with alive) */
        if (got != PyList_GET_ITEM(v, i)) Py_RETURN_FALSE;
    }
    int held = values_hold(F(15));
    if (held < 0) goto bad;
    if (!held) Py_RETURN_FALSE;
    d = F(16), v = F(17);
    if (!same_len(d, v)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject *cell = PyList_GET_ITEM(d, i);
        if (!PyCell_Check(cell)) goto bad;
        if (PyCell_GET(cell) != PyList_GET_ITEM(v, i)) Py_RETURN_FALSE;
    }
    d = F(18);
    if (!PyList_Check(d)) goto bad;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d); i++) {
        PyObject *dict = PyList_GET_ITEM(d, i);
        if (!PyDict_Check(dict)) goto bad;
        if (PyDict_GET_SIZE(dict) != 0) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
bad:
    PyErr_SetString(PyExc_TypeError, "not a memo state");
    return NULL;
#undef F
}

static PyObject *disjoint(PyObject *self, PyObject *args) {
    PyObject *outs, *inputs;
    if (!PyArg_ParseTuple(args, "OO", &outs, &inputs)) return NULL;
    if (!PyTuple_Check(inputs) || !(PyTuple_Check(outs) || PyList_Check(outs))) {
        PyErr_SetString(PyExc_TypeError, "disjoint(tuple or list, tuple)");
        return NULL;
    }
    Py_ssize_t n_out = PySequence_Fast_GET_SIZE(outs), n_in = PyTuple_GET_SIZE(inputs);
    PyObject **out = PySequence_Fast_ITEMS(outs), **in = &PyTuple_GET_ITEM(inputs, 0);
    for (Py_ssize_t i = 0; i < n_out; i++)
        for (Py_ssize_t j = 0; j < n_in; j++)
            if (out[i] == in[j]) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"holds", holds, METH_VARARGS, "Whether a guard memo's snapshot holds."},
    {"version", version, METH_O, "The dict's version (changes with every mutation)."},
    {"disjoint", disjoint, METH_VARARGS, "Whether no output is one of the inputs."},
#if HAS_VALUES_STATE
    {"values_state", values_state, METH_O, "What a check of the dict's values compares."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_magpy_snapcheck", NULL, -1, methods};

PyMODINIT_FUNC PyInit__magpy_snapcheck(void) {
    if (setup() < 0) return NULL;
    return PyModule_Create(&module);
}
