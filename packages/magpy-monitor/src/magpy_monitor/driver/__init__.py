"""The drivers: the tracer, segments, the planner and the entry point."""
