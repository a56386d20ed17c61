"""What the monitor knows about torch beyond its operators: module calls and hooks, modules built
in forward, tensor constructors and attributes, global state, checkpoint.
"""
