"""The Python object model: builtins, containers, sets, collections, user objects and classes,
descriptors, higher-order natives, context managers.
"""
