"""Grids of runs: the config, the plan of notebook runs, their keys, and the papermill runner."""
