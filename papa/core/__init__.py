"""The model side of PAPA: architectures, head patching, constant matrices, the input layout, head sets.
Nothing here knows about tasks, probes or grids; everything else builds on it."""
