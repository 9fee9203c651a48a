//! What the unit tests of the crate's TCP proxies share.

use std::net::SocketAddr;

use tokio::net::TcpListener;

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
