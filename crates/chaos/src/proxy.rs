//! A TCP fault proxy: forwards a local port to an upstream address until it
//! is cut. A cut drops every live connection and blackholes new ones (they
//! are accepted and held, never forwarded) until the path is restored.
//!
//! [`FaultProxy::cut`] returns only once no connection forwards any more: a
//! reply that was in flight when the cut was asked for cannot reach its
//! client after `cut` returns (a test that checks "nothing passes the cut"
//! would otherwise race the forwarding tasks).

use std::{io, net::SocketAddr};

use tokio::{
    io::copy_bidirectional,
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// A running proxy. Stops (and drops every connection) when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    local: SocketAddr,
    cut: watch::Sender<bool>,
    /// How many connections are forwarding (or about to).
    live: watch::Sender<usize>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`.
    ///
    /// # Errors
    ///
    /// When the local port cannot be bound.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let local = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        let (live, _) = watch::channel(0usize);
        let accept = tokio::spawn(accept_loop(listener, upstream, cut_rx, live.clone()));
        Ok(FaultProxy {
            local,
            cut,
            live,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Cuts the path: live connections are dropped, new ones blackholed.
    /// Returns once no connection forwards any more.
    pub async fn cut(&self) {
        self.cut.send_replace(true);
        let mut live = self.live.subscribe();
        // The sender lives in `self`: the wait ends only at zero.
        let _ = live.wait_for(|n| *n == 0).await;
    }

    /// Restores the path: new connections are forwarded again (blackholed
    /// ones are closed, so their clients reconnect).
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }

    /// True while cut.
    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Every connection task watches this flag and ends when it is set or
        // the sender is gone.
        self.cut.send_replace(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    cut: watch::Receiver<bool>,
    live: watch::Sender<usize>,
) {
    loop {
        let (client, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(%err, "proxy accept failed");
                continue;
            }
        };
        let cut = cut.clone();
        // Counted before the flag is read: a `cut` that sees zero live
        // connections was asked for before any later connection looks.
        let counted = Live::count(&live);
        if *cut.borrow() {
            drop(counted);
            tokio::spawn(blackhole(client, cut));
        } else {
            tokio::spawn(forward(client, upstream, cut, counted));
        }
    }
}

/// One forwarding connection in the proxy's count, until dropped.
struct Live(watch::Sender<usize>);

impl Live {
    fn count(live: &watch::Sender<usize>) -> Live {
        live.send_modify(|n| *n += 1);
        Live(live.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Holds `client` without answering until the path is restored (or the proxy goes).
async fn blackhole(client: TcpStream, mut cut: watch::Receiver<bool>) {
    let _ = cut.wait_for(|is_cut| !is_cut).await;
    drop(client);
}

/// Forwards until either side closes or the path is cut.
async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut cut: watch::Receiver<bool>,
    counted: Live,
) {
    let connected = tokio::select! {
        connected = TcpStream::connect(upstream) => connected,
        _ = cut.wait_for(|is_cut| *is_cut) => return,
    };
    let mut server = match connected {
        Ok(server) => server,
        Err(err) => {
            tracing::warn!(%err, %upstream, "proxy could not reach upstream");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = copy_bidirectional(&mut client, &mut server) => {}
        _ = cut.wait_for(|is_cut| *is_cut) => {}
    }
    // Both streams close before the count drops.
    drop((client, server));
    drop(counted);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::test_support::echo_server;

    async fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(msg).await?;
        let mut buf = vec![0; msg.len()];
        stream.read_exact(&mut buf).await?;
        Ok(buf)
    }

    const WAIT: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn forwards_cuts_and_restores() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut live = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(round_trip(&mut live, b"ping").await.unwrap(), b"ping");

        proxy.cut().await;
        assert!(proxy.is_cut());
        // The live connection is dropped: reading sees EOF or an error.
        let mut buf = [0u8; 4];
        let read = tokio::time::timeout(WAIT * 10, live.read(&mut buf))
            .await
            .expect("a cut connection must be closed, not left hanging");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

        // A new connection is accepted but blackholed: no echo comes back.
        let mut held = TcpStream::connect(proxy.local_addr()).await.unwrap();
        held.write_all(b"lost").await.unwrap();
        let mut buf = [0u8; 4];
        assert!(
            tokio::time::timeout(WAIT, held.read(&mut buf))
                .await
                .is_err(),
            "a blackholed connection must not answer"
        );

        proxy.restore();
        assert!(!proxy.is_cut());
        // The blackholed connection is closed on restore...
        let read = tokio::time::timeout(WAIT * 10, held.read(&mut buf))
            .await
            .expect("a blackholed connection is closed on restore");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        // ...and new connections are forwarded again.
        let mut again = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(round_trip(&mut again, b"pong").await.unwrap(), b"pong");
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_connections() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut live = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(round_trip(&mut live, b"ping").await.unwrap(), b"ping");
        drop(proxy);
        let mut buf = [0u8; 4];
        let read = tokio::time::timeout(WAIT * 10, live.read(&mut buf))
            .await
            .expect("connections end with the proxy");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
