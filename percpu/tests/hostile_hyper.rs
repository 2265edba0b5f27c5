//! hyper's `Timer` on the fallback, side by side with hyper-util's `TokioTimer`: a foreign sleep
//! handed to `reset` is replaced, resets to the past complete, and on the paused test clock the
//! deadlines hyper computes (`Timer::now() + limit`) follow the clock the sleeps run on (each
//! runtime's own; the tests take turns all the same, as they were written to).
#![cfg(feature = "hyper")]

use std::sync::Mutex;
use std::time::Duration;

use hyper::rt::Timer;
use tickwheel_percpu::time::HyperTimer;

static SERIAL: Mutex<()> = Mutex::new(());

const LATE: Duration = Duration::from_millis(500);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn foreign_and_past_resets() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        // Deadlines come from the timer's own clock, as hyper takes them (on a runtime whose clock
        // was paused and resumed, that clock runs ahead of std's).
        let timer = HyperTimer::new();
        // A sleep made by another Timer: reset must replace it, not ignore it.
        let mut s = hyper_util::rt::TokioTimer::new().sleep(Duration::from_secs(3600));
        let deadline = timer.now() + Duration::from_millis(5);
        timer.reset(&mut s, deadline);
        tokio::time::timeout(LATE * 2, s)
            .await
            .expect("foreign sleep not replaced");
        assert!(timer.now() >= deadline);
        // Reset to the past, before and after a poll.
        let mut s = timer.sleep(Duration::from_secs(3600));
        assert!(
            tokio::time::timeout(Duration::from_millis(2), &mut s)
                .await
                .is_err()
        );
        timer.reset(&mut s, timer.now() - Duration::from_secs(1));
        tokio::time::timeout(LATE, &mut s)
            .await
            .expect("reset to the past did not complete");
        timer.reset(&mut s, timer.now() - Duration::from_secs(1));
        tokio::time::timeout(LATE, s)
            .await
            .expect("reset to the past after completion");
        // sleep_until in the past.
        let s = timer.sleep_until(timer.now() - Duration::from_secs(5));
        tokio::time::timeout(LATE, s).await.unwrap();
    });
}

#[cfg(feature = "test-util")]
#[test]
fn hyper_deadlines_follow_the_test_clock() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    rt().block_on(async {
        use tickwheel_percpu::time;
        time::pause();
        time::advance(Duration::from_secs(3600)).await;
        let timer = HyperTimer::new();
        // As hyper arms its header-read timeout: `timer.now() + limit`.
        let s = timer.sleep_until(timer.now() + Duration::from_secs(10));
        let early = tokio::time::timeout(Duration::from_millis(50), s)
            .await
            .is_ok();
        time::resume();
        assert!(
            !early,
            "a 10 s hyper deadline ended at once on the advanced clock"
        );
    });
}
