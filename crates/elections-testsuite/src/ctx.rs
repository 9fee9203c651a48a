//! The context every case receives.

use std::{sync::Arc, time::Duration};

use elections::{Elections, RecordingKiller};
use ttl_storage::{DynTtlStorage, Key, Ttl};

use crate::FaultyStorage;

/// The variable that sets [`Ctx::margin`] in real time, in milliseconds
/// (`cargo xtask test-drivers` sets it for engines that need more than the
/// default 1 s, with the reason next to the engine).
pub const MARGIN_VAR: &str = "ELECTIONS_SUITE_MARGIN_MS";

/// How time passes in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Tokio's clock is paused and auto-advances (in-memory drivers timed by tokio).
    Paused,
    /// Real time against a real store: leases are a few seconds long.
    RealTime,
}

/// What a case gets: the storage under test, the mode, and unique keys.
pub struct Ctx {
    /// Paused or real time.
    pub mode: Mode,
    /// The storage under test.
    pub storage: DynTtlStorage,
    prefix: String,
    watch_required: bool,
}

impl Ctx {
    /// A context for one case; keys get a random prefix so cases and
    /// repeated runs against one server never collide.
    pub fn new(mode: Mode, storage: DynTtlStorage, case: &str) -> Self {
        let random: u64 = rand::random();
        Ctx {
            mode,
            storage,
            prefix: format!("suite/{case}/{random:016x}"),
            watch_required: false,
        }
    }

    /// Declares that the storage supports [`ttl_storage::TtlStorage::watch`]:
    /// the watch cases then fail if it answers `WatchUnsupported`, instead of
    /// reporting the capability as absent.
    pub fn require_watch(mut self, required: bool) -> Self {
        self.watch_required = required;
        self
    }

    /// Whether the watch capability is required (see [`Ctx::require_watch`]).
    pub fn watch_required(&self) -> bool {
        self.watch_required
    }

    /// A unique key for this case.
    pub fn key(&self, name: &str) -> Key {
        Key::new(format!("{}/{name}", self.prefix)).expect("suite keys are valid")
    }

    /// The short TTL of storage cases.
    pub fn ttl(&self) -> Ttl {
        Ttl::from_secs(2).expect("valid")
    }

    /// The short TTL as a duration.
    pub fn ttl_duration(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// How long after its TTL a record may still be visible (the contract
    /// allows drivers up to one second of granularity), plus scheduling margin.
    pub fn slack(&self) -> Duration {
        match self.mode {
            Mode::Paused => Duration::from_millis(10),
            Mode::RealTime => Duration::from_millis(1300),
        }
    }

    /// Extra margin for real-time assertions on when something happened:
    /// 1 s in real time, or [`MARGIN_VAR`] milliseconds when set (an
    /// engine's documented margin, e.g. a replicated cluster's).
    pub fn margin(&self) -> Duration {
        match self.mode {
            Mode::Paused => Duration::ZERO,
            // Generous: CI machines and loaded laptops stall for hundreds of ms.
            Mode::RealTime => std::env::var(MARGIN_VAR)
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map_or(Duration::from_millis(1000), Duration::from_millis),
        }
    }

    /// The leadership duration `d` of election cases: the design's 20 s under
    /// paused time, 5 s in real time (each storage call then gets `d/4` =
    /// 1.25 s before its outcome counts as unknown).
    pub fn lease(&self) -> Duration {
        match self.mode {
            Mode::Paused => Duration::from_secs(20),
            Mode::RealTime => Duration::from_secs(5),
        }
    }

    /// Elections over `storage` with a fresh recording killer.
    pub fn elections_on(&self, storage: DynTtlStorage) -> (Elections, Arc<RecordingKiller>) {
        let killer = RecordingKiller::new();
        (Elections::with_killer(storage, killer.clone()), killer)
    }

    /// Elections over the storage under test.
    pub fn elections(&self) -> (Elections, Arc<RecordingKiller>) {
        self.elections_on(self.storage.clone())
    }

    /// Elections over a fault injector wrapping the storage under test.
    pub fn faulty_elections(&self) -> (Elections, Arc<RecordingKiller>, Arc<FaultyStorage>) {
        let faulty = FaultyStorage::new(self.storage.clone());
        let (elections, killer) = self.elections_on(faulty.clone());
        (elections, killer, faulty)
    }
}

/// Sleeps on tokio's clock (auto-advanced in paused mode).
pub async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
}
