/* The guard memo's snapshot check (magpy_codegen/_memo.py, Memo.valid) in C.
 *
 * holds(state, absent) -> bool: the same answer as the Python check in _memo.py, one pass
 * over flat lists with no Python call per element. CPython 3.11 only (ma_version_tag, the
 * dict's version tag, is read from PyDictObject); _cbuild.py compiles it on first use and
 * falls back to the Python check where that is not possible.
 *
 * disjoint(outs, inputs) -> bool: no object of the sequence outs is one of inputs (by identity):
 * the mock's test whether a graph gave back an input (see _mock.fresh_outputs_of).
 *
 * state: (fn, item_dicts, item_keys, item_values, version_dicts, versions, type_objs, types,
 *         owner_objs, owner_dicts, mro_classes, mros, slot_objs, slot_names, slot_values,
 *         None, cells, cell_values, empties, values)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* holds() reads 3.11's layouts (PyDictObject's version tag, the dict pointer): _cbuild.py
 * defines MAGPY_SNAPCHECK_HOLDS where INTERP.c_snapshot_check says they are this Python's.
 * disjoint() uses the stable API only and is built on every supported version. */
#if defined(MAGPY_SNAPCHECK_HOLDS) && (PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000)
#error "holds() reads CPython 3.11's layouts"
#endif

static int same_len(PyObject *a, PyObject *b) {
    return PyList_Check(a) && PyList_Check(b) && PyList_GET_SIZE(a) == PyList_GET_SIZE(b);
}

#ifdef MAGPY_SNAPCHECK_HOLDS
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
        if (((PyDictObject *)dict)->ma_version_tag != want) Py_RETURN_FALSE;
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
#endif

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
#ifdef MAGPY_SNAPCHECK_HOLDS
    {"holds", holds, METH_VARARGS, "Whether a guard memo's snapshot holds."},
#endif
    {"disjoint", disjoint, METH_VARARGS, "Whether no output is one of the inputs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_magpy_snapcheck", NULL, -1, methods};

PyMODINIT_FUNC PyInit__magpy_snapcheck(void) { return PyModule_Create(&module); }
