//! A TCP proxy in front of Valkey for one pod: `cut` drops its live
//! connections and holds new ones unanswered (a partition, not a refusal);
//! `restore` forwards again and closes the held ones.

use std::net::SocketAddr;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct CutProxy {
    pub local: SocketAddr,
    cut: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl CutProxy {
    pub async fn start(upstream: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let local = listener.local_addr().unwrap();
        let (cut, rx) = watch::channel(false);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    if *rx.borrow_and_update() {
                        // held until restored, then closed
                        let _ = rx.wait_for(|cut| !*cut).await;
                        drop(client);
                        return;
                    }
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = rx.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        CutProxy { local, cut, accept }
    }

    /// `redis://127.0.0.1:<port>` through the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.local)
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
