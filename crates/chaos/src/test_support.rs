//! What the crate's unit tests share: an echo server for the TCP proxies,
//! history events for the checks.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use crate::event::{Event, WriteOutcome};

/// A TCP server on 127.0.0.1 that echoes every connection's bytes back.
pub(crate) async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A write with `token` started at `start_ms`, accepted as entry `seq`.
pub(crate) fn accepted_write(start_ms: u64, token: u64, seq: u64) -> Event {
    Event::Write {
        start_ms,
        token,
        outcome: WriteOutcome::Accepted { seq },
    }
}

/// A successful renewal at `t` ms that arms the killer for 3.2 s.
pub(crate) fn renewed(t: u64) -> Event {
    Event::Armed {
        basis_ms: t,
        deadline_ms: Some(t + 3_200),
        success: true,
    }
}
