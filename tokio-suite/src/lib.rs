//! Nothing to build: this crate holds tokio's own time tests, run against
//! `tickwheel_percpu::time` (see `port.sh` for how they are made and `run.sh` for how they run).
