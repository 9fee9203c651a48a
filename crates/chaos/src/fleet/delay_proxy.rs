//! A TCP proxy between one coordinator and Valkey that, while switched on,
//! delays each reply Valkey sends by a random time: the coordinator's
//! commands run in Valkey when they arrive, and it acts on their answers
//! late. Its read of a destination (`RESOLVE`, the live members) and the
//! script it runs on that read (`CLAIM`) are then seconds apart, with the
//! pods' heartbeats, record expiries and other coordinators' claims in
//! between. Replies keep their order; each is due at its arrival plus its
//! own delay, so delays do not pile up behind one another.

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use rand::Rng;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
    time::Instant,
};

/// The range each reply is delayed by, or `None` (forwarded at once).
type Delay = Option<(Duration, Duration)>;

/// A running proxy; stops (and drops every connection) when dropped.
#[derive(Debug)]
pub(crate) struct DelayProxy {
    local: SocketAddr,
    delay: Arc<watch::Sender<Delay>>,
    accept: JoinHandle<()>,
}

impl DelayProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`, not delaying.
    pub(crate) async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let local = listener.local_addr()?;
        let (delay, _) = watch::channel(None);
        let delay = Arc::new(delay);
        let accept = tokio::spawn(accept_loop(listener, upstream, delay.clone()));
        Ok(Self {
            local,
            delay,
            accept,
        })
    }

    /// The address clients connect to.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Delays every reply by a random time in `min..=max` from now on
    /// (`None`: replies go through at once again).
    pub(crate) fn delay_replies(&self, range: Delay) {
        self.delay.send_replace(range);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    delay: Arc<watch::Sender<Delay>>,
) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                tokio::spawn(forward(client, upstream, delay.subscribe()));
            }
            Err(err) => tracing::warn!(%err, "delay proxy accept failed"),
        }
    }
}

/// Client to server as is; server to client with the current delay.
async fn forward(client: TcpStream, upstream: SocketAddr, delay: watch::Receiver<Delay>) {
    let server = match TcpStream::connect(upstream).await {
        Ok(server) => server,
        Err(err) => {
            tracing::warn!(%err, %upstream, "delay proxy could not reach upstream");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    // each reply is due at its arrival plus its own delay (never before
    // the reply ahead of it): delays do not add up behind one another
    let (due_tx, mut due_rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let down = tokio::spawn(async move {
        let mut last = Instant::now();
        while let Some((due, bytes)) = due_rx.recv().await {
            last = last.max(due);
            tokio::time::sleep_until(last).await;
            if client_write.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let range = *delay.borrow();
        let wait = range.map_or(Duration::ZERO, |(min, max)| {
            rand::rng().random_range(min..=max)
        });
        if due_tx
            .send((Instant::now() + wait, buf[..n].to_vec()))
            .is_err()
        {
            break;
        }
    }
    drop(due_tx);
    let _ = down.await;
    up.abort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::echo_server;

    async fn round_trip(stream: &mut TcpStream) -> Duration {
        let started = Instant::now();
        stream.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        started.elapsed()
    }

    #[tokio::test]
    async fn replies_are_delayed_only_while_switched_on() {
        let proxy = DelayProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert!(round_trip(&mut stream).await < Duration::from_millis(150));
        let ms = Duration::from_millis;
        proxy.delay_replies(Some((ms(200), ms(250))));
        let delayed = round_trip(&mut stream).await;
        assert!(delayed >= ms(200), "{delayed:?}");
        proxy.delay_replies(None);
        assert!(round_trip(&mut stream).await < Duration::from_millis(150));
    }
}
