//! The metrics the coordinator records, through the `metrics` facade (the
//! program installs a recorder and an exporter).
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `coordinator_requests_total` | counter | `route`, `outcome` | calls answered by [`crate::http::Coordinator::router`]: `route` is `proxy`, `bind`, `register`, `deregister`, `lock`, `cancel` or `none` (no route matched); `outcome` is `ok` (status below 400), `client_error` (4xx) or `server_error` (5xx) |
//! | `coordinator_route_lookups_total` | counter | `result` | destination routes: `hit` (local cache), `miss` (this call read Valkey), `coalesced` (missed the cache and shared another call's Valkey lookup) |
//! | `coordinator_forward_seconds` | histogram | `outcome` | time until a pod's response headers (or the failure): `ok`, `connect_error`, `timeout`, `error` |
//! | `coordinator_valkey_errors_total` | counter | `component`, `kind` | store errors: `component` `coordinator` (a call failed on them) or `member` (a heartbeat failed); `kind` `valkey` (unreachable or an error reply) or `protocol` (an unexpected reply) or `other` |
//! | `coordinator_valkey_round_trips_total` | counter | | Valkey round trips made by registries (also in [`crate::RegistryMetrics`]) |
//! | `coordinator_stale_owner_total` | counter | `result` | forwarded destination calls a pod refused as a stale owner (421 `stale_owner`, ownership fencing): `rerouted` (the cache entry was dropped, the destination re-resolved and the call forwarded again) or `passed` (refused again, or not resendable: the refusal went to the caller) |
//! | `coordinator_fleet_members` | gauge | | live members at the last [`crate::Registry::fleet_load`] |
//! | `coordinator_fleet_load_total` | gauge | | the sum of their reported loads |
//! | `coordinator_fleet_load_max` | gauge | | the largest reported load |

use std::time::Duration;

use crate::error::Error;

/// Metric names, for programs and tests that look them up.
pub mod names {
    /// Counter: calls by route and outcome.
    pub const REQUESTS_TOTAL: &str = "coordinator_requests_total";
    /// Counter: route lookups by result.
    pub const ROUTE_LOOKUPS_TOTAL: &str = "coordinator_route_lookups_total";
    /// Histogram: forwarding latency, in seconds.
    pub const FORWARD_SECONDS: &str = "coordinator_forward_seconds";
    /// Counter: store errors.
    pub const VALKEY_ERRORS_TOTAL: &str = "coordinator_valkey_errors_total";
    /// Counter: Valkey round trips.
    pub const VALKEY_ROUND_TRIPS_TOTAL: &str = "coordinator_valkey_round_trips_total";
    /// Counter: calls refused by a pod as a stale owner.
    pub const STALE_OWNER_TOTAL: &str = "coordinator_stale_owner_total";
    /// Gauge: live members.
    pub const FLEET_MEMBERS: &str = "coordinator_fleet_members";
    /// Gauge: the sum of the live members' loads.
    pub const FLEET_LOAD_TOTAL: &str = "coordinator_fleet_load_total";
    /// Gauge: the largest live member's load.
    pub const FLEET_LOAD_MAX: &str = "coordinator_fleet_load_max";
}

/// The fleet's load was read.
pub(crate) fn fleet(fleet: &crate::FleetLoad) {
    metrics::gauge!(names::FLEET_MEMBERS).set(fleet.members as f64);
    metrics::gauge!(names::FLEET_LOAD_TOTAL).set(fleet.total as f64);
    metrics::gauge!(names::FLEET_LOAD_MAX).set(fleet.max as f64);
}

/// A call of `route` was answered with `status`.
pub(crate) fn request(route: &'static str, status: http::StatusCode) {
    let outcome = if status.is_server_error() {
        "server_error"
    } else if status.is_client_error() {
        "client_error"
    } else {
        "ok"
    };
    metrics::counter!(names::REQUESTS_TOTAL, "route" => route, "outcome" => outcome).increment(1);
}

/// A route lookup ended with `result` (`hit`, `miss`, `coalesced`).
pub(crate) fn route_lookup(result: &'static str) {
    metrics::counter!(names::ROUTE_LOOKUPS_TOTAL, "result" => result).increment(1);
}

/// A forward took `elapsed` and ended with `outcome`.
pub(crate) fn forwarded(outcome: &'static str, elapsed: Duration) {
    metrics::histogram!(names::FORWARD_SECONDS, "outcome" => outcome).record(elapsed.as_secs_f64());
}

/// `component` met a store error.
pub(crate) fn store_error(component: &'static str, err: &Error) {
    let kind = match err {
        Error::Valkey(_) => "valkey",
        Error::Protocol(_) => "protocol",
        _ => "other",
    };
    metrics::counter!(names::VALKEY_ERRORS_TOTAL, "component" => component, "kind" => kind)
        .increment(1);
}

/// A pod refused a call as a stale owner; `result` is `rerouted` or `passed`.
pub(crate) fn stale_owner(result: &'static str) {
    metrics::counter!(names::STALE_OWNER_TOTAL, "result" => result).increment(1);
}

/// `n` Valkey round trips were made.
pub(crate) fn round_trips(n: u64) {
    metrics::counter!(names::VALKEY_ROUND_TRIPS_TOTAL).increment(n);
}
