"""Benchmarks: each module is a script whose docstring shows how it is run and what it prints."""
