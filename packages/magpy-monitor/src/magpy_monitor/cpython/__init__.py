"""Everything specific to CPython 3.11: the version check, the interpreter-frame layout read
through ctypes, instruction decoding.
"""
