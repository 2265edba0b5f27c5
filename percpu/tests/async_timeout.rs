//! `timeout`: the inner result when it wins, `Elapsed` (never early) when the limit does.
#![cfg(feature = "tokio")]

mod common;

use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, Timers};

#[test]
fn inner_result_when_it_wins() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            // Ready at once: no timer filed at all.
            assert_eq!(
                time::timeout(Duration::from_secs(5), async { 1 }).await,
                Ok(1)
            );
            assert_eq!(timers.occupancy(0), Some((0, 0)));
            // Ready after waiting on a shorter sleep: the inner value, the timer cancelled.
            let inner = async {
                time::sleep(Duration::from_millis(3)).await;
                "inner"
            };
            assert_eq!(
                time::timeout(Duration::from_secs(5), inner).await,
                Ok("inner")
            );
            assert_eq!(timers.occupancy(0), Some((0, 0)));
        })
        .unwrap();
}

#[test]
fn elapsed_when_the_limit_wins_never_early() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            for ms in [1u64, 3, 7] {
                let start = Instant::now();
                let limit = Duration::from_millis(ms);
                let out = time::timeout(limit, std::future::pending::<()>()).await;
                assert!(out.is_err());
                assert!(start.elapsed() >= limit, "early: {:?}", start.elapsed());
                let deadline = Instant::now() + limit;
                let out = time::timeout_at(deadline, std::future::pending::<()>()).await;
                assert_eq!(out.unwrap_err().to_string(), "deadline has elapsed");
                assert!(Instant::now() >= deadline);
            }
        })
        .unwrap();
}

#[test]
fn elapsed_converts_into_a_timed_out_io_error() {
    async fn limited() -> std::io::Result<()> {
        time::timeout(Duration::from_millis(2), std::future::pending::<()>()).await?;
        Ok(())
    }
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    let err = timers.block_on(0, &rt, limited()).unwrap().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
}
