//! Coordinators that stopped answering, and a load-balancing policy that
//! sends requests elsewhere while they are suspected.
//!
//! A node can accept CQL connections and still leave every lightweight
//! transaction it coordinates unanswered: cut off from its peers on the
//! storage port (one way or both), or with its messaging stuck. Gossip does
//! not convict it while its own messages still arrive, so the driver keeps
//! choosing it for one request in three (RF 3). Worse, the Paxos rounds it
//! starts still reach the other replicas and take their promises, so the
//! rounds of healthy coordinators on the same key are pre-empted too:
//! measured on a 3-node Cassandra 5.0 cluster with one node cut off one
//! way, LWTs on fresh keys through the healthy nodes answered in ~15 ms,
//! through the cut node in 5 s (its write timeout), and three contenders
//! for one key failed every acquisition for the whole 10 s cut.
//!
//! So every request records which node its attempt went to
//! ([`AttemptTracker`]). An attempt still unanswered after
//! [`SLOW_ATTEMPT`] when the request ends (the driver's request timeout)
//! or is dropped (the caller's own budget, e.g. the election's `d/4`)
//! makes that node a suspect for [`SUSPECT_FOR`]; [`AvoidSuspects`] puts
//! suspects at the end of every plan (they are still tried when nothing
//! else is left), and any answer from a node clears it.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use scylla::{
    cluster::{ClusterState, NodeRef},
    errors::{RequestAttemptError, RequestError},
    observability::history::{AttemptId, HistoryListener, RequestId, SpeculativeId},
    policies::{
        load_balancing::{FallbackPlan, LoadBalancingPolicy, RoutingInfo},
        retry::RetryDecision,
    },
    routing::Shard,
};

/// How long a node that left an attempt unanswered is avoided.
pub(crate) const SUSPECT_FOR: Duration = Duration::from_secs(10);

/// An attempt open this long when its request ends unanswered makes its
/// node a suspect; a request cancelled sooner (say, at shutdown) does not.
pub(crate) const SLOW_ATTEMPT: Duration = Duration::from_millis(500);

/// The nodes currently suspected, shared by a session's policy and the
/// storage's requests.
#[derive(Debug, Default)]
pub(crate) struct Suspects {
    until: Mutex<HashMap<SocketAddr, Instant>>,
}

impl Suspects {
    /// Suspects `node` until `now + SUSPECT_FOR`.
    pub(crate) fn suspect(&self, node: SocketAddr, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.retain(|_, end| *end > now);
        until.insert(node, now + SUSPECT_FOR);
        tracing::warn!(
            %node,
            avoid_for = ?SUSPECT_FOR,
            "coordinator left a request unanswered; sending requests to other nodes first"
        );
    }

    /// Forgets `node`: it answered.
    pub(crate) fn clear(&self, node: SocketAddr) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        if until.remove(&node).is_some() {
            tracing::info!(%node, "suspected coordinator answered again");
        }
    }

    /// Whether `node` is suspected at `now`.
    pub(crate) fn is_suspect(&self, node: SocketAddr, now: Instant) -> bool {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.get(&node).is_some_and(|end| *end > now)
    }

    /// Whether no node is suspected (the common case: no reordering).
    fn none(&self, now: Instant) -> bool {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.values().all(|end| *end <= now)
    }
}

/// A node's address as the history listener reports it.
fn address(node: NodeRef<'_>) -> SocketAddr {
    SocketAddr::new(node.address.ip(), node.address.port())
}

/// Wraps a policy (the driver's default) and moves suspected nodes to the
/// end of its plans, keeping the order of the rest.
#[derive(Debug)]
pub(crate) struct AvoidSuspects {
    inner: Arc<dyn LoadBalancingPolicy>,
    suspects: Arc<Suspects>,
}

impl AvoidSuspects {
    pub(crate) fn new(inner: Arc<dyn LoadBalancingPolicy>, suspects: Arc<Suspects>) -> Self {
        AvoidSuspects { inner, suspects }
    }
}

impl LoadBalancingPolicy for AvoidSuspects {
    fn pick<'a>(
        &'a self,
        request: &'a RoutingInfo,
        cluster: &'a ClusterState,
    ) -> Option<(NodeRef<'a>, Option<Shard>)> {
        let now = Instant::now();
        let first = self.inner.pick(request, cluster);
        match first {
            Some((node, _)) if self.suspects.is_suspect(address(node), now) => self
                .inner
                .fallback(request, cluster)
                .find(|(node, _)| !self.suspects.is_suspect(address(node), now))
                .or(first),
            _ => first,
        }
    }

    fn fallback<'a>(
        &'a self,
        request: &'a RoutingInfo,
        cluster: &'a ClusterState,
    ) -> FallbackPlan<'a> {
        let now = Instant::now();
        let plan = self.inner.fallback(request, cluster);
        if self.suspects.none(now) {
            return plan;
        }
        let suspects = &self.suspects;
        Box::new(suspects_last(plan, |(node, _)| {
            suspects.is_suspect(address(node), now)
        }))
    }

    fn on_request_success(&self, request: &RoutingInfo, latency: Duration, node: NodeRef<'_>) {
        self.suspects.clear(address(node));
        self.inner.on_request_success(request, latency, node);
    }

    fn on_request_failure(
        &self,
        request: &RoutingInfo,
        latency: Duration,
        node: NodeRef<'_>,
        error: &RequestAttemptError,
    ) {
        // A database error is an answer: the node is reachable.
        if matches!(error, RequestAttemptError::DbError(..)) {
            self.suspects.clear(address(node));
        }
        self.inner.on_request_failure(request, latency, node, error);
    }

    fn name(&self) -> String {
        format!("AvoidSuspects({})", self.inner.name())
    }
}

/// `plan` with the items `is_suspect` picks moved to the end, each group in
/// its original order.
fn suspects_last<T>(
    plan: impl Iterator<Item = T>,
    is_suspect: impl Fn(&T) -> bool,
) -> std::vec::IntoIter<T> {
    let (mut healthy, suspected): (Vec<T>, Vec<T>) = plan.partition(|item| !is_suspect(item));
    healthy.extend(suspected);
    healthy.into_iter()
}

/// A request's attempts (node and start) that have not ended yet; the
/// history listener the storage sets on each statement it executes.
#[derive(Debug, Default)]
pub(crate) struct AttemptTracker {
    open: Mutex<OpenAttempts>,
}

#[derive(Debug, Default)]
struct OpenAttempts {
    next: usize,
    open: HashMap<usize, (SocketAddr, Instant)>,
}

impl AttemptTracker {
    /// The nodes of attempts open for at least [`SLOW_ATTEMPT`] at `now`.
    pub(crate) fn unanswered(&self, now: Instant) -> Vec<SocketAddr> {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.open
            .values()
            .filter(|(_, start)| now.saturating_duration_since(*start) >= SLOW_ATTEMPT)
            .map(|(node, _)| *node)
            .collect()
    }

    fn end(&self, attempt: AttemptId) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.open.remove(&attempt.0);
    }
}

impl HistoryListener for AttemptTracker {
    fn log_request_start(&self) -> RequestId {
        RequestId(0)
    }

    fn log_request_success(&self, _request_id: RequestId) {}

    fn log_request_error(&self, _request_id: RequestId, _error: &RequestError) {}

    fn log_new_speculative_fiber(&self, _request_id: RequestId) -> SpeculativeId {
        SpeculativeId(0)
    }

    fn log_attempt_start(
        &self,
        _request_id: RequestId,
        _speculative_id: Option<SpeculativeId>,
        node_addr: SocketAddr,
    ) -> AttemptId {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let id = open.next;
        open.next += 1;
        open.open.insert(id, (node_addr, Instant::now()));
        AttemptId(id)
    }

    fn log_attempt_success(&self, attempt_id: AttemptId) {
        self.end(attempt_id);
    }

    fn log_attempt_error(
        &self,
        attempt_id: AttemptId,
        _error: &RequestAttemptError,
        _retry_decision: &RetryDecision,
    ) {
        self.end(attempt_id);
    }
}

/// Held across one request: when dropped (the request ended, or the caller
/// gave up and dropped it), suspects the nodes of its slow open attempts.
pub(crate) struct Unanswered<'a> {
    pub(crate) tracker: Arc<AttemptTracker>,
    pub(crate) suspects: &'a Suspects,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        for node in self.tracker.unanswered(now) {
            self.suspects.suspect(node, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, last], 9042))
    }

    #[test]
    fn a_suspect_expires_and_an_answer_clears_it() {
        let suspects = Suspects::default();
        let now = Instant::now();
        assert!(suspects.none(now));
        suspects.suspect(addr(1), now);
        assert!(suspects.is_suspect(addr(1), now));
        assert!(!suspects.is_suspect(addr(2), now));
        assert!(!suspects.none(now));
        assert!(suspects.is_suspect(addr(1), now + SUSPECT_FOR - Duration::from_millis(1)));
        assert!(!suspects.is_suspect(addr(1), now + SUSPECT_FOR));
        assert!(suspects.none(now + SUSPECT_FOR));
        suspects.suspect(addr(1), now);
        suspects.clear(addr(1));
        assert!(!suspects.is_suspect(addr(1), now));
    }

    #[test]
    fn suspects_go_last_in_their_order() {
        let plan = [1u8, 2, 3, 4, 5].into_iter();
        let reordered: Vec<u8> = suspects_last(plan, |n| *n == 1 || *n == 4).collect();
        assert_eq!(reordered, vec![2, 3, 5, 1, 4]);
        let all: Vec<u8> = suspects_last([1u8, 2].into_iter(), |_| true).collect();
        assert_eq!(all, vec![1, 2]);
    }

    #[test]
    fn only_slow_unanswered_attempts_make_suspects() {
        let tracker = AttemptTracker::default();
        let request = tracker.log_request_start();
        let answered = tracker.log_attempt_start(request, None, addr(1));
        let _open = tracker.log_attempt_start(request, None, addr(2));
        tracker.log_attempt_success(answered);
        let now = Instant::now();
        assert!(tracker.unanswered(now).is_empty(), "not slow yet");
        assert_eq!(tracker.unanswered(now + SLOW_ATTEMPT), vec![addr(2)]);
    }

    #[test]
    fn dropping_an_unanswered_request_suspects_its_node() {
        let suspects = Suspects::default();
        let tracker = Arc::new(AttemptTracker::default());
        let request = tracker.log_request_start();
        tracker.log_attempt_start(request, None, addr(3));
        std::thread::sleep(SLOW_ATTEMPT);
        drop(Unanswered {
            tracker: tracker.clone(),
            suspects: &suspects,
        });
        assert!(suspects.is_suspect(addr(3), Instant::now()));
        assert!(!suspects.is_suspect(addr(1), Instant::now()));
    }
}
