"""Everything specific to one CPython version: the version gate (``compat``), the interface
(``interp.Interpreter``) with one implementation per version (``py311``, ``py312``,
``py313``; ``INTERP`` in ``frameio`` is the running one), the interpreter-frame layout read
through ctypes (``frameio``), stack depths from the bytecode (``stackdepth``), and decoding
into the neutral instruction vocabulary (``code``).
"""
