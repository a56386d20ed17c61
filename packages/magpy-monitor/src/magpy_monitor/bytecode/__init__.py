"""Opcode semantics: what each CPython instruction does to the shadow stack and the capture."""
