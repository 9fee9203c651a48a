//! # coordinator
//!
//! Valkey-backed routing of calls to the stateful pods that own them: the
//! *Coordinator Pattern*. Resource pods (which own connection pools, agent
//! processes, sandboxes...) self-register in Valkey with a heartbeat and a
//! load metric; coordinators, co-located with callers, resolve each call's
//! *destination* to a live pod through Valkey and forward it over HTTP.
//!
//! - Pod side: [`Member`] — register / heartbeat / deregister, a background
//!   [`HeartbeatTask`], destination membership, lock records with a TTL
//!   refreshed while held, a per-destination concurrency cap whose
//!   saturation fans the destination out to a peer picked by
//!   [`MemberConfig::fan_out_strategy`] (the least-loaded by default;
//!   [`Member::acquire`]), and a [`CancelRegistry`] of in-flight calls.
//! - Coordinator side: [`Registry`] — destination resolution with
//!   first-touch claim and orphan reassignment, lock resolution, live member
//!   listing (pruning dead ids), allocation [`strategy`], a local LRU + TTL
//!   cache of each destination's pod set, and round-trip counters.
//! - Every decision about which member serves a destination (first touch,
//!   failover, spreading over a fanned-out set, the retry after a refused
//!   connection, the pod's fan-out peer) is made by the registry module;
//!   only it runs a [`strategy`]. The HTTP handlers ask it and forward.
//! - HTTP: [`http::Coordinator`] — axum handlers for *lookup and proxy*,
//!   *pick and register*, *lookup and deregister* and *lookup lock and
//!   proxy* over a pooled hyper client; [`http::pod`] — the pod's cancel
//!   endpoint and cancellation middleware.
//!
//! ## Metrics
//!
//! Calls by outcome, route lookups (cache hit, miss, coalesced), forwarding
//! latency and Valkey errors are recorded through the `metrics` facade: see
//! [`telemetry`].
//!
//! ## Key layout (shared with the Node `@platformatic/coordinator`)
//!
//! With prefix `P` (default `coordinator`): `P:members` (set of member ids),
//! `P:member:<id>` (hash `address`, `load`; TTL refreshed by heartbeat),
//! `P:destination:<id>` (set of member ids, no TTL), `P:lock:<lockId>`
//! (hash `podId`, `destinationId`, metadata; TTL refreshed while held).
//! See [`keys`].
//!
//! ## Guarantees
//!
//! - Calls are forwarded only to addresses read from live member records,
//!   and only `http(s)://host[:port]` addresses without user info
//!   ([`MemberAddress`]) inside the registry's [`AddressPolicy`]: member
//!   records are untrusted input (see the crate README's trust boundary).
//! - `rediss://` Valkey URLs always use TLS ([`connect_with`]), never
//!   plaintext.
//! - Ids are validated ([`ids`]) before any Valkey access; the handlers
//!   answer 400 for malformed ids and for `.`/`..` path segments, with JSON
//!   error bodies ([`http::ApiError`]); [`http::serve`] bounds header time,
//!   idle time and connection count.
//! - Concurrent cache misses of one destination share one Valkey lookup.
//! - A heartbeat is one `MULTI`: it re-creates an expired member record
//!   (address, load, TTL, membership) and the pod's lock records.
//! - Lock ids minted by [`LockId::generate`] carry 128 random bits; lock
//!   records of a dead pod expire within the lock TTL.
//! - Destination resolution reads the set and its members' records in one
//!   atomic script (one round trip) and drops dead members from the set in
//!   the same step; a warm cache answers with zero round trips.
//! - A forward that fails to connect (the pod never saw the call) evicts the
//!   cache entry, re-resolves once and retries with the same, unbuffered body.
//! - A call whose client disconnects or times out gets a cancel message to
//!   the pod ([`http::pod::CANCEL_ROUTE`]).
//!
//! ## Assumptions
//!
//! - One Valkey/Redis primary (or a cluster with a hash-tag prefix such as
//!   `{coordinator}`, so every key lives in one slot); Lua scripting on.
//! - Of concurrent first-touch claims or reassignments of a destination
//!   (two coordinators, or two calls of one), one adds its member; the
//!   others read the set again and route to that member. Only a fan-out
//!   (or an explicit bind) gives a destination several pods.
//! - Pods speak HTTP/1.1 (or h2c with
//!   [`http::ForwardConfig::http2_prior_knowledge`]), or HTTPS.
//!
//! ## Example
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use coordinator::{
//!     Member, MemberAddress, MemberConfig, MemberId, Registry, RegistryConfig,
//!     http::{Coordinator, CoordinatorConfig, ForwardConfig, Forwarder},
//!     strategy::RoundRobin,
//! };
//!
//! # async fn demo() -> Result<(), coordinator::Error> {
//! let valkey = coordinator::connect("redis://127.0.0.1:6379", Duration::from_secs(2)).await?;
//!
//! // on a resource pod
//! let config = MemberConfig::new(
//!     MemberId::new("pod-0")?,
//!     MemberAddress::parse("http://10.0.0.7:3000")?,
//! );
//! let member = Member::new(valkey.clone(), config)?;
//! let heartbeat = member.start_heartbeat();
//!
//! // on a caller pod
//! let registry = Registry::new(valkey, RegistryConfig::default(), Arc::new(RoundRobin::new()))?;
//! let coordinator = Coordinator::new(
//!     registry,
//!     Forwarder::new(ForwardConfig::default())?,
//!     CoordinatorConfig::default(),
//! );
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await.map_err(|e| {
//!     coordinator::Error::InvalidConfig(e.to_string())
//! })?;
//! let app = coordinator.router();
//! let _server = tokio::spawn(coordinator::http::serve(
//!     listener,
//!     app,
//!     coordinator::http::ServeConfig::default(),
//!     std::future::pending(),
//! ));
//!
//! // shutting the pod down
//! heartbeat.stop().await;
//! member.deregister().await?;
//! # Ok(()) }
//! ```

mod address;
mod address_policy;
mod cache;
pub mod client;
mod error;
pub mod http;
pub mod ids;
pub mod keys;
mod member;
mod record;
mod registry;
pub mod strategy;
pub mod telemetry;
mod tls;
mod valkey;

pub use address::MemberAddress;
pub use address_policy::{AddressPolicy, IpNet};
pub use cache::CacheConfig;
pub use error::{Error, Result};
pub use ids::{DestinationId, LockId, MemberId, RequestId};
pub use member::cancel::{CancelRegistry, Cancelled, InFlight};
pub use member::{
    DestinationPermit, HeartbeatTask, LEASE_FRACTION, LoadSource, Member, MemberConfig,
    OwnershipRefusal, SaturationConfig,
};
pub use record::{LockRecord, MemberRecord};
pub use registry::{
    Deregistration, FleetLoad, Registry, RegistryConfig, RegistryMetrics, Resolution,
    ResolveOptions, Route, RouteSource,
};
pub use valkey::{ValkeyOptions, connect, connect_with};

/// The fred client type both sides take.
pub use fred::clients::Client as ValkeyClient;
