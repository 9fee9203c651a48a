//! A coordinator for coordinator chaos ([`chaos::fleet`]): the crate's
//! `Registry` and `Coordinator` routes with their defaults (first touch,
//! failover, a 5 s route cache, round-robin), reaching the pods directly
//! and Valkey at the URL it is given (directly, or through the fleet's
//! delay proxy); `--allow-port` gives it an address policy that rejects
//! some pods. Prints `listening <address>` on stdout once it accepts calls.

use std::{sync::Arc, time::Duration};

use chaos::fleet::SharedValkey;
use clap::Parser;
use coordinator::{
    AddressPolicy, CacheConfig, Registry, RegistryConfig,
    http::{Coordinator, CoordinatorConfig, ForwardConfig, Forwarder, ServeConfig},
    strategy::RoundRobin,
};

/// A chaos coordinator.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    valkey: SharedValkey,
    /// How long a resolved route is cached, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    cache_ms: u64,
    /// Forward only to members on these ports (repeatable; default: any):
    /// an address policy that rejects some live pods.
    #[arg(long = "allow-port")]
    allow_ports: Vec<u16>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = chaos::process::start("info");
    let valkey = args.valkey.connect(Duration::from_secs(1)).await?;
    let member_addresses = args
        .allow_ports
        .iter()
        .fold(AddressPolicy::default(), |policy, &port| {
            policy.allow_ports(port..=port)
        });
    let config = RegistryConfig {
        prefix: args.valkey.prefix,
        cache: Some(CacheConfig {
            ttl: Duration::from_millis(args.cache_ms),
            ..CacheConfig::default()
        }),
        member_addresses,
    };
    let registry = Registry::new(valkey, config, Arc::new(RoundRobin::new()))?;
    // a paused pod must not hold a call for the default 30 s
    let forwarder = Forwarder::new(ForwardConfig {
        connect_timeout: Duration::from_millis(500),
        response_timeout: Duration::from_secs(2),
        ..ForwardConfig::default()
    })?;
    let app = Coordinator::new(registry, forwarder, CoordinatorConfig::default()).router();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("listening {}", listener.local_addr()?);
    coordinator::http::serve(
        listener,
        app,
        ServeConfig::default(),
        std::future::pending(),
    )
    .await?;
    Ok(())
}
