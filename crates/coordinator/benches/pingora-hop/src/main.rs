//! The routing bench's pingora row: the coordinator's routed hop rebuilt on
//! Cloudflare's `pingora-proxy`, as small as it can be.
//!
//! It reads the destination id from `/destinations/{id}/…` the way the
//! coordinator's route does, looks it up in an in-memory map (the
//! coordinator's cache-hit case) to get the pod's address, and proxies the
//! request unchanged to that pod over pingora's upstream keep-alive pool. An
//! unknown destination is answered 404 without touching a pod.
//!
//! ```text
//! pingora-hop --listen 127.0.0.1:8080 --route bench=127.0.0.1:9000 [--threads 1] [--no-steal]
//! ```
//!
//! `--threads` is pingora's `ServerConf::threads` (worker threads of the
//! proxy service; default 1, the bench's one-worker row); `--no-steal`
//! turns off work stealing (one single-threaded runtime per thread, as
//! pingora's `work_stealing: false`). Not part of the workspace: it has its
//! own `[workspace]` and `Cargo.lock`, so `cargo build --workspace` and CI
//! never compile pingora.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use pingora_core::Result;
use pingora_core::server::Server;
use pingora_core::server::configuration::ServerConf;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_proxy::{ProxyHttp, Session};

/// The routing hop: destination id → pod.
struct Hop {
    routes: HashMap<String, HttpPeer>,
}

/// The destination id in `/destinations/{id}/…` (or `/destinations/{id}`).
fn destination(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/destinations/")?;
    let id = rest.split_once('/').map_or(rest, |(id, _)| id);
    (!id.is_empty()).then_some(id)
}

#[async_trait]
impl ProxyHttp for Hop {
    /// The pod the request goes to, found in `request_filter`.
    type CTX = Option<HttpPeer>;

    fn new_ctx(&self) -> Self::CTX {
        None
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let peer = destination(session.req_header().uri.path()).and_then(|d| self.routes.get(d));
        match peer {
            Some(peer) => {
                *ctx = Some(peer.clone());
                Ok(false)
            }
            None => {
                session.respond_error(404).await?;
                // true: the response is written, do not proxy
                Ok(true)
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        match ctx.take() {
            Some(peer) => Ok(Box::new(peer)),
            None => pingora_core::Error::e_explain(
                pingora_core::ErrorType::InternalError,
                "no destination chosen",
            ),
        }
    }
}

struct Args {
    listen: String,
    routes: HashMap<String, HttpPeer>,
    threads: usize,
    work_stealing: bool,
}

fn usage(why: &str) -> ! {
    eprintln!(
        "pingora-hop: {why}\nusage: pingora-hop --listen ADDR --route ID=ADDR [--route …] \
         [--threads N] [--no-steal]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        listen: String::new(),
        routes: HashMap::new(),
        threads: 1,
        work_stealing: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--listen" => args.listen = it.next().unwrap_or_else(|| usage("--listen ADDR")),
            "--route" => {
                let route = it.next().unwrap_or_else(|| usage("--route ID=ADDR"));
                let (id, addr) = route
                    .split_once('=')
                    .unwrap_or_else(|| usage("--route ID=ADDR"));
                let addr: SocketAddr = addr
                    .parse()
                    .unwrap_or_else(|e| usage(&format!("--route {route}: {e}")));
                args.routes
                    .insert(id.to_owned(), HttpPeer::new(addr, false, String::new()));
            }
            "--threads" => {
                args.threads = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| usage("--threads N (N ≥ 1)"));
            }
            "--no-steal" => args.work_stealing = false,
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if args.listen.is_empty() {
        usage("--listen is required");
    }
    args
}

fn main() {
    let args = parse_args();
    let conf = ServerConf {
        threads: args.threads,
        work_stealing: args.work_stealing,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = pingora_proxy::http_proxy_service(
        &Arc::clone(&server.configuration),
        Hop {
            routes: args.routes,
        },
    );
    proxy.add_tcp(&args.listen);
    server.add_service(proxy);
    server.run_forever();
}

#[cfg(test)]
mod tests {
    use super::destination;

    #[test]
    fn destination_is_the_segment_after_destinations() {
        assert_eq!(destination("/destinations/bench/echo"), Some("bench"));
        assert_eq!(destination("/destinations/bench"), Some("bench"));
        assert_eq!(destination("/destinations//echo"), None);
        assert_eq!(destination("/other/bench/echo"), None);
    }
}
