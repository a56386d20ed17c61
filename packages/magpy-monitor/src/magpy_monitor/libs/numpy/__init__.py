"""numpy arrays made during the run."""
