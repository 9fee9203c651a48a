//! The coordinator thread per core: a current-thread runtime per core,
//! each serving its own `SO_REUSEPORT` listener on one address.

use std::sync::Arc;
use std::time::Duration;

use coordinator::http::{Coordinator, CoordinatorConfig, ForwardConfig, Forwarder, ServeConfig};
use coordinator::strategy::RoundRobin;
use coordinator::{CacheConfig, Registry, RegistryConfig};

use crate::COORD_PER_CORE;

/// Thread per core: `n` threads, each a current-thread runtime serving its
/// own `SO_REUSEPORT` listener on one address (the kernel spreads the
/// connections); one coordinator (registry, forwarder) shared by all.
pub(crate) fn start(n: usize, url: &str, prefix: &str) -> (String, Registry) {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawn = |app: Option<(axum::Router, std::net::SocketAddr)>,
                 tx: Option<
        std::sync::mpsc::Sender<(axum::Router, Registry, std::net::SocketAddr)>,
    >,
                 url: String,
                 prefix: String| {
        std::thread::Builder::new()
            .name(COORD_PER_CORE.to_owned())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let bind = app.as_ref().map_or("127.0.0.1:0".parse().unwrap(), |a| a.1);
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    socket.set_reuseport(true).unwrap();
                    socket.bind(bind).unwrap();
                    let listener = socket.listen(1024).unwrap();
                    let app = match app {
                        Some((app, _)) => app,
                        None => {
                            let client = coordinator::connect(&url, Duration::from_secs(2))
                                .await
                                .unwrap();
                            let config = RegistryConfig {
                                prefix,
                                cache: Some(CacheConfig::default()),
                                ..RegistryConfig::default()
                            };
                            let registry =
                                Registry::new(client, config, Arc::new(RoundRobin::new())).unwrap();
                            let c = Coordinator::new(
                                registry.clone(),
                                Forwarder::new(ForwardConfig::default()).unwrap(),
                                CoordinatorConfig::default(),
                            );
                            let app = c.router();
                            let addr = listener.local_addr().unwrap();
                            if let Some(tx) = tx {
                                tx.send((app.clone(), registry, addr)).unwrap();
                            }
                            app
                        }
                    };
                    coordinator::http::serve(
                        listener,
                        app,
                        ServeConfig::default(),
                        std::future::pending(),
                    )
                    .await
                    .unwrap();
                });
            })
            .unwrap();
    };
    spawn(None, Some(tx), url.to_owned(), prefix.to_owned());
    let (app, registry, addr) = rx.recv().unwrap();
    for _ in 1..n {
        spawn(
            Some((app.clone(), addr)),
            None,
            String::new(),
            String::new(),
        );
    }
    (format!("http://{addr}"), registry)
}
