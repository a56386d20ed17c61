"""Knowledge of libraries: torch, numpy and the standard library."""
