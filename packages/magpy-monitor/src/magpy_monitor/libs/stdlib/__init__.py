"""The standard library: warnings, context variables and the like."""
