//! hyper's `Timer` on the bases: sleeps fire, resets happen in place, and a hyper HTTP/1.1
//! connection closes on its header-read timeout.
#![cfg(feature = "hyper")]

mod common;

use std::time::{Duration, Instant};

use hyper::rt::Timer;
use tickwheel_percpu::time::{HyperTimer, Timers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn sleep_and_reset_in_place() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            let timer = HyperTimer::new();
            let start = Instant::now();
            timer.sleep(Duration::from_millis(2)).await;
            assert!(start.elapsed() >= Duration::from_millis(2));
            let mut s = timer.sleep(Duration::from_secs(60));
            let before: *const () = &*s as *const dyn hyper::rt::Sleep as *const ();
            let deadline = Instant::now() + Duration::from_millis(3);
            timer.reset(&mut s, deadline);
            let after: *const () = &*s as *const dyn hyper::rt::Sleep as *const ();
            assert_eq!(before, after, "reset allocated a new sleep");
            s.await;
            assert!(Instant::now() >= deadline);
        })
        .unwrap();
}

#[test]
fn header_read_timeout_closes_a_silent_connection() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let limit = Duration::from_millis(50);
            tokio::spawn(async move {
                let (tcp, _) = listener.accept().await.unwrap();
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(String::from("ok")))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(HyperTimer::new())
                    .header_read_timeout(limit)
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let start = Instant::now();
            client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap(); // never finished
            let mut buf = Vec::new();
            let _ = client.read_to_end(&mut buf).await;
            let took = start.elapsed();
            assert!(took >= limit, "closed early: {took:?}");
            assert!(took < limit * 20, "closed late: {took:?}");
        })
        .unwrap();
}
