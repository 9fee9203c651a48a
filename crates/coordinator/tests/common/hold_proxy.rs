//! A TCP proxy in front of the test Valkey for one client, which can hold
//! the next reply Valkey sends that client: the command has run in Valkey,
//! and the client acts on its answer only when the test says so. This
//! widens, deterministically, the window between a coordinator's read of a
//! destination and the script it runs on what it read; the code under test
//! is unchanged.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use coordinator::ValkeyClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// What the proxy does with the next reply.
struct Hold {
    held: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// The proxy; it stops with the test's runtime.
pub struct HoldProxy {
    local: SocketAddr,
    next: Arc<Mutex<Option<Hold>>>,
}

/// A hold armed with [`HoldProxy::hold_next_reply`].
pub struct Armed {
    held: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
}

impl Armed {
    /// Waits until a reply is being held (its command ran in Valkey).
    pub async fn held(&mut self) {
        (&mut self.held).await.expect("the proxy dropped the hold");
    }

    /// Lets the held reply go on to the client.
    pub fn release(self) {
        let _ = self.release.send(());
    }
}

/// `host:port` of `VALKEY_URL`.
fn upstream() -> (String, String) {
    let url = std::env::var("VALKEY_URL").expect("VALKEY_URL is not set");
    let (scheme, rest) = url.split_once("://").expect("VALKEY_URL has a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    assert!(
        !authority.contains('@'),
        "the hold proxy takes no credentials"
    );
    (format!("{scheme}://"), authority.to_owned())
}

impl HoldProxy {
    /// Listens on a loopback port, forwarding to `VALKEY_URL`.
    pub async fn start() -> HoldProxy {
        let (_, authority) = upstream();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let next: Arc<Mutex<Option<Hold>>> = Arc::default();
        let hold = next.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(authority.as_str()).await.unwrap();
                tokio::spawn(pipe(client, server, hold.clone()));
            }
        });
        HoldProxy { local, next }
    }

    /// A client of Valkey through this proxy.
    pub async fn client(&self) -> ValkeyClient {
        let (scheme, _) = upstream();
        coordinator::connect(
            &format!("{scheme}{}", self.local),
            std::time::Duration::from_secs(10),
        )
        .await
        .expect("cannot connect through the hold proxy")
    }

    /// Holds the next reply from Valkey (to any of this proxy's clients)
    /// until [`Armed::release`].
    pub fn hold_next_reply(&self) -> Armed {
        let (held_tx, held_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        *self.next.lock().unwrap() = Some(Hold {
            held: held_tx,
            release: release_rx,
        });
        Armed {
            held: held_rx,
            release: release_tx,
        }
    }
}

/// Client to server as is; server to client through the hold.
async fn pipe(client: TcpStream, server: TcpStream, next: Arc<Mutex<Option<Hold>>>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let hold = next.lock().unwrap().take();
        if let Some(hold) = hold {
            let _ = hold.held.send(());
            let _ = hold.release.await;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    up.abort();
}
