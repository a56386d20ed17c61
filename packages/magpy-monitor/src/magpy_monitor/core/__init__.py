"""The core of the monitor: shadow values, the capture state, the frame monitor, the fx recorder,
shapes, speculation and the registry of handler and protocol tables the layers above fill.
"""
