//! tickwheel: hierarchical timing wheel (work in progress).
#![forbid(unsafe_code)]
