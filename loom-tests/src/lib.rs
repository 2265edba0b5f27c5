//! loom models of the tickwheel-percpu cross-core protocols (see `tests/`).
