//! Overload: when renewals fall behind, new acquisitions are shed first.
//!
//! Every renewal round measures its lag: how long after its scheduled
//! start (`d/4` after the start of the write that renewed it last) the
//! round finished. A round is normally done a store round trip after its
//! schedule; it finishes later when the runtime is saturated (its timer
//! fires late, its task waits for a thread), when the store answers
//! slowly, or after failed attempts (each retry waits `d/20`). Once a
//! round's lag passes `d/10`, this [`Elections`](crate::Elections) starts
//! no new leadership for the next `d/4`: each acquisition attempt fails at
//! once with [`ElectionsError::Overloaded`] (no store call, no task, no
//! timer), and `elections_acquisitions_shed_total` counts it. Held
//! leaderships are not touched: the killer deadline is `0.8 d` after the
//! start of the last successful write and the next round is due `d/4`
//! after it, so a lag of `d/10` still leaves `0.45 d` before any
//! deadline — shedding starts well before a held leadership is in danger.
//!
//! Shedding stops what adds work, never what is already held. If the held
//! leaderships alone need more than the process (or the store) can give,
//! their rounds keep lagging and deadlines can still pass: that is a
//! capacity limit, to be sized with `cargo xtask bench scale` (the figures
//! are in `docs/scale.md`).

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use tokio::time::Instant;

use crate::{ElectionsError, telemetry, timing::Timing};

/// Lag buckets: bucket `i` counts lags below `2^i` ms (the last, the rest).
const BUCKETS: usize = 20;

/// The lag of the renewal rounds of one [`Elections`](crate::Elections)
/// since it was made ([`Elections::renewal_lag`](crate::Elections::renewal_lag)):
/// how long after its schedule each round finished. Percentiles are the
/// upper bounds of power-of-two millisecond buckets (a report, not a
/// measurement to the microsecond).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewalLag {
    /// Renewal rounds finished (successful or not).
    pub rounds: u64,
    /// Half of the rounds finished within this.
    pub p50: Duration,
    /// 99 % of the rounds finished within this.
    pub p99: Duration,
    /// The latest a round finished (within its bucket's bound).
    pub max: Duration,
    /// Acquisition attempts refused because renewals were behind.
    pub shed: u64,
}

/// Sets of lag counters: a thread counts in set `its index % STRIPES`.
const STRIPES: usize = 8;

/// One set of lag counters, alone in its cache lines.
#[repr(align(128))]
struct Stripe([AtomicU64; BUCKETS]);

impl Default for Stripe {
    fn default() -> Self {
        Stripe(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// This thread's stripe: threads are numbered as they first count.
fn stripe() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static STRIPE: usize = (NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES as u64) as usize;
    }
    STRIPE.with(|stripe| *stripe)
}

/// The load of one elections instance, shared by its renewal tasks.
pub(crate) struct Load {
    /// What the nanosecond fields count from.
    base: Instant,
    /// Acquisitions are refused until this instant (ns since `base`).
    shed_until: AtomicU64,
    /// The lag of the round that set `shed_until` (ns).
    lag: AtomicU64,
    /// Rounds by lag ([`BUCKETS`]), one set per [`STRIPES`]: each thread
    /// counts in its own cache line, not in one all of them fight over.
    stripes: [Stripe; STRIPES],
    /// Attempts shed.
    shed: AtomicU64,
}

impl Load {
    pub(crate) fn new() -> Self {
        Load {
            base: Instant::now(),
            shed_until: AtomicU64::new(0),
            lag: AtomicU64::new(0),
            stripes: std::array::from_fn(|_| Stripe::default()),
            shed: AtomicU64::new(0),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A renewal round scheduled for `scheduled` has finished (whatever
    /// its outcome) at `now`.
    pub(crate) fn round_finished(&self, scheduled: Instant, now: Instant, timing: &Timing) {
        let lag = now.saturating_duration_since(scheduled);
        let ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX);
        let bucket = (u64::BITS - ms.leading_zeros()) as usize;
        let counts = self.stripes.get(stripe()).map(|stripe| &stripe.0);
        if let Some(count) = counts.and_then(|counts| counts.get(bucket.min(BUCKETS - 1))) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if lag <= timing.overload_lag() {
            return;
        }
        let until = self.nanos(now + timing.renew_interval());
        let before = self.shed_until.fetch_max(until, Ordering::Relaxed);
        self.lag.store(
            u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if before < self.nanos(now) {
            tracing::warn!(
                lag_ms = lag.as_millis(),
                shed_for_ms = timing.renew_interval().as_millis(),
                "renewals are falling behind; new acquisitions are refused for a while"
            );
        }
    }

    /// `Err(Overloaded)` while acquisitions are shed.
    pub(crate) fn admit(&self) -> Result<(), ElectionsError> {
        let now = self.nanos(Instant::now());
        let until = self.shed_until.load(Ordering::Relaxed);
        if now < until {
            telemetry::shed();
            self.shed.fetch_add(1, Ordering::Relaxed);
            return Err(ElectionsError::Overloaded {
                lag: Duration::from_nanos(self.lag.load(Ordering::Relaxed)),
                retry_after: Duration::from_nanos(until - now),
            });
        }
        Ok(())
    }
}

impl Load {
    /// The lag report so far.
    pub(crate) fn report(&self) -> RenewalLag {
        let counts: Vec<u64> = (0..BUCKETS)
            .map(|bucket| {
                self.stripes
                    .iter()
                    .filter_map(|stripe| stripe.0.get(bucket))
                    .map(|count| count.load(Ordering::Relaxed))
                    .sum()
            })
            .collect();
        let rounds: u64 = counts.iter().sum();
        let bound = |i: usize| Duration::from_millis(1_u64 << i.min(62));
        let within = |share: f64| {
            let mut seen = 0;
            for (i, count) in counts.iter().enumerate() {
                seen += count;
                if rounds > 0 && seen as f64 >= share * rounds as f64 {
                    return bound(i);
                }
            }
            Duration::ZERO
        };
        RenewalLag {
            rounds,
            p50: within(0.5),
            p99: within(0.99),
            max: counts
                .iter()
                .rposition(|c| *c > 0)
                .map_or(Duration::ZERO, bound),
            shed: self.shed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_late_round_sheds_acquisitions_for_a_renewal_interval() {
        let load = Load::new();
        let timing = Timing::new(Duration::from_secs(20)).unwrap();
        let start = Instant::now();
        // 2 s (d/10) late: still admitted.
        load.round_finished(start, start + Duration::from_secs(2), &timing);
        assert!(load.admit().is_ok());
        // Later than that: shed for d/4 from the round's end.
        tokio::time::advance(Duration::from_secs(3)).await;
        load.round_finished(start, Instant::now(), &timing);
        match load.admit() {
            Err(ElectionsError::Overloaded { lag, retry_after }) => {
                assert_eq!(lag, Duration::from_secs(3));
                assert_eq!(retry_after, Duration::from_secs(5));
            }
            other => panic!("expected Overloaded, got {other:?}"),
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(load.admit().is_ok());
        let report = load.report();
        assert_eq!(report.rounds, 2);
        assert_eq!(report.shed, 1);
        // 2 000 ms lies in the bucket below 2^11 = 2 048 ms, 3 000 ms in
        // the one below 4 096 ms.
        assert_eq!(report.p50, Duration::from_millis(2048));
        assert_eq!(report.max, Duration::from_millis(4096));
    }
}
