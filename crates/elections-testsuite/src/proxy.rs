//! A TCP proxy in front of a real server that can swallow answers or cut
//! every connection: driver tests use it to check, on real traffic, that a
//! lost answer is reported as an unknown outcome and a dead connection as
//! a transient error.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use elections_testsuite::proxy::Proxy;
//!
//! let proxy = Proxy::start("127.0.0.1:6379".parse().unwrap()).await?;
//! // Point the driver at `proxy.addr`, then:
//! proxy.swallow_answers(true); // requests arrive, answers are lost
//! proxy.shut_down(); // every connection is cut, new ones refused
//! # Ok(()) }
//! ```

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// The proxy; dropping it closes the listener and every connection.
#[derive(Debug)]
pub struct Proxy {
    /// Where clients connect (a loopback address).
    pub addr: SocketAddr,
    swallow: Arc<AtomicBool>,
    cut: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let swallow = Arc::new(AtomicBool::new(false));
        let (cut, cut_rx) = watch::channel(false);
        let swallow2 = swallow.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, swallow2.clone(), cut_rx.clone()));
            }
        });
        Ok(Proxy {
            addr,
            swallow,
            cut,
            accept,
        })
    }

    /// From now on, requests still reach the server but answers are dropped.
    pub fn swallow_answers(&self, on: bool) {
        self.swallow.store(on, Ordering::SeqCst);
    }

    /// Closes the listener and every connection: later connects are refused.
    pub fn shut_down(&self) {
        self.accept.abort();
        let _ = self.cut.send(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shut_down();
    }
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    swallow: Arc<AtomicBool>,
    mut cut: watch::Receiver<bool>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if swallow.load(Ordering::SeqCst) {
                continue;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}
