//! A TCP proxy in front of a real server that can swallow answers, hold
//! requests back, or cut every connection: driver tests use it to check,
//! on real traffic, that a lost answer is reported as an unknown outcome,
//! that a request applied late cannot undo a later one, and that a dead
//! connection is a transient error.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use elections_testsuite::proxy::Proxy;
//!
//! let proxy = Proxy::start("127.0.0.1:6379".parse().unwrap()).await?;
//! // Point the driver at `proxy.addr`, then:
//! proxy.swallow_answers(true); // requests arrive, answers are lost
//! proxy.swallow_answers(false);
//! proxy.hold_requests_after(0); // the next request waits in the proxy...
//! proxy.release_requests(); // ...until now, and arrives late
//! proxy.shut_down(); // every connection is cut, new ones refused
//! # Ok(()) }
//! ```

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
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
    hold: Arc<Hold>,
    /// Bumped to close every connection open at the time.
    cut: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

/// Holding requests back: armed by [`Proxy::hold_requests_after`], ended
/// by [`Proxy::release_requests`].
#[derive(Debug, Default)]
struct Hold {
    state: Mutex<HoldState>,
    /// Bumped by every release, so a held chunk knows it may go.
    released: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct HoldState {
    armed: bool,
    /// Answer chunks still to let through before requests are held.
    answers_left: usize,
    /// Request bytes read from clients and not yet forwarded.
    held: usize,
}

impl Hold {
    fn state(&self) -> std::sync::MutexGuard<'_, HoldState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
        let hold = Arc::new(Hold::default());
        let (cut, cut_rx) = watch::channel(0);
        let (swallow2, hold2) = (swallow.clone(), hold.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                tokio::spawn(pipe(
                    client,
                    server,
                    swallow2.clone(),
                    hold2.clone(),
                    cut_rx.clone(),
                ));
            }
        });
        Ok(Proxy {
            addr,
            swallow,
            hold,
            cut,
            accept,
        })
    }

    /// From now on, requests still reach the server but answers are dropped.
    pub fn swallow_answers(&self, on: bool) {
        self.swallow.store(on, Ordering::SeqCst);
    }

    /// Holds requests back: bytes from clients pass until `answers` chunks
    /// of answers have come back (a driver that asks something before its
    /// write, as etcd's lease grant), then every byte any client sends
    /// waits in the proxy, in order, until [`Proxy::release_requests`].
    /// Nothing is lost: the server gets each request late, as a delayed
    /// packet would arrive.
    pub fn hold_requests_after(&self, answers: usize) {
        let mut state = self.hold.state();
        state.armed = true;
        state.answers_left = answers;
    }

    /// Request bytes held back right now.
    pub fn held_bytes(&self) -> usize {
        self.hold.state().held
    }

    /// Sends every held request on (in order) and stops holding.
    pub fn release_requests(&self) {
        self.hold.state().armed = false;
        self.hold.released.send_modify(|n| *n += 1);
    }

    /// Closes the listener and every connection: later connects are refused.
    pub fn shut_down(&self) {
        self.accept.abort();
        self.drop_connections();
    }

    /// Closes every connection open now; new ones are accepted (a network
    /// blip: the client reconnects).
    pub fn drop_connections(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.release_requests();
        self.shut_down();
    }
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    swallow: Arc<AtomicBool>,
    hold: Arc<Hold>,
    mut cut: watch::Receiver<u64>,
) {
    let opened = *cut.borrow_and_update();
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut released = hold.released.subscribe();
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // The release count, read under the lock that says whether to
            // hold: a release after this point changes it.
            let held_since = {
                let mut state = hold.state();
                let held = state.armed && state.answers_left == 0;
                if held {
                    state.held += n;
                }
                held.then(|| *hold.released.borrow())
            };
            if let Some(count) = held_since {
                // Later bytes of this connection stay unread behind this
                // chunk, so the order is kept.
                if released.wait_for(|now| *now != count).await.is_err() {
                    return;
                }
                hold.state().held -= n;
            }
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
            let mut state = hold.state();
            if state.armed {
                state.answers_left = state.answers_left.saturating_sub(1);
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = cut.wait_for(|now| *now != opened) => {}
    }
}
