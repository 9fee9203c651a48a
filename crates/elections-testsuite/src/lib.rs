//! # elections-testsuite
//!
//! The one suite every `ttl-storage` driver runs: storage conformance (the
//! contract of [`ttl_storage::TtlStorage`], including 16-way races) and the
//! whole election suite (renewal, takeover, faults, killer deadlines,
//! fencing, task hygiene) over that driver. A new driver reuses it with one
//! line, in the style of `object_store`'s and OpenDAL's behaviour tests.
//!
//! ```ignore
//! // crates/my-driver/tests/suite.rs  (needs `tokio` as a dev-dependency)
//! use ttl_storage::DynTtlStorage;
//!
//! async fn make_storage() -> DynTtlStorage {
//!     std::sync::Arc::new(my_driver::MyStorage::connect_for_tests().await)
//! }
//!
//! // `paused` for drivers timed by tokio's clock, `real_time` otherwise:
//! elections_testsuite::testsuite!(real_time, make_storage);
//! // A suite that needs a server plain `cargo test` lacks is reported as ignored:
//! // elections_testsuite::testsuite!(real_time, make_storage, ignore = "needs a server");
//! // A driver that supports `TtlStorage::watch` declares it, so that the watch
//! // cases fail if it ever answers "unsupported":
//! // elections_testsuite::testsuite!(real_time, make_storage, watch = required);
//! ```
//!
//! The watch cases (`storage_watch_*`) run for every driver: one without the
//! capability must answer `WatchUnsupported` consistently, and the cases
//! then print `capability absent` and check nothing more.
//!
//! Each case becomes its own `#[tokio::test]` in a module `elections_suite`,
//! so `cargo test` lists them by name. `make_storage` is called once per
//! case, in that case's runtime. Keys carry a random per-case prefix, so
//! cases run in parallel against one server and re-runs never collide.
//!
//! In `real_time` mode, leases are 5 s and storage TTLs 2 s, and the
//! contract's one second of expiry granularity is allowed for; run with
//! `--test-threads 16` to finish in well under a minute.
//!
//! The [`FaultyStorage`] wrapper is public: use it in your own tests.

// Test-support code: panicking with a clear message is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod cases;
mod ctx;
mod faults;
pub mod network;
pub mod proxy;
mod time_left;

pub use ctx::{Ctx, MARGIN_VAR, Mode, sleep};
pub use faults::{Fault, FaultyStorage, Op};
pub use time_left::{
    assert_engine_expiry_follows_ttl, assert_entry_time_left, assert_time_left,
    assert_time_left_round_trip,
};

/// Expands to one `#[tokio::test]` per suite case, in a module `elections_suite`.
///
/// `testsuite!(paused, make)` runs under paused tokio time,
/// `testsuite!(real_time, make)` in real time, and
/// `testsuite!(real_time, make, ignore = "reason")` marks every case ignored
/// (run them with `cargo test -- --ignored`). `make` is the name of an
/// `async fn() -> ttl_storage::DynTtlStorage` in scope.
#[macro_export]
macro_rules! testsuite {
    (paused, $make:ident) => {
        $crate::__suite_module!({ #[tokio::test(start_paused = true)] } $crate::Mode::Paused, $make, false);
    };
    (paused, $make:ident, watch = required) => {
        $crate::__suite_module!({ #[tokio::test(start_paused = true)] } $crate::Mode::Paused, $make, true);
    };
    (real_time, $make:ident) => {
        $crate::__suite_module!(
            { #[tokio::test(flavor = "multi_thread", worker_threads = 2)] }
            $crate::Mode::RealTime,
            $make,
            false
        );
    };
    (real_time, $make:ident, watch = required) => {
        $crate::__suite_module!(
            { #[tokio::test(flavor = "multi_thread", worker_threads = 2)] }
            $crate::Mode::RealTime,
            $make,
            true
        );
    };
    (real_time, $make:ident, ignore = $reason:literal) => {
        $crate::__suite_module!(
            { #[tokio::test(flavor = "multi_thread", worker_threads = 2)] #[ignore = $reason] }
            $crate::Mode::RealTime,
            $make,
            false
        );
    };
    (real_time, $make:ident, watch = required, ignore = $reason:literal) => {
        $crate::__suite_module!(
            { #[tokio::test(flavor = "multi_thread", worker_threads = 2)] #[ignore = $reason] }
            $crate::Mode::RealTime,
            $make,
            true
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __suite_module {
    ($attrs:tt $mode:expr, $make:ident, $watch:literal) => {
        /// The shared `elections-testsuite` cases.
        mod elections_suite {
            $crate::__suite_cases!(@each $attrs $mode, $make, $watch;
                storage_insert_when_absent,
                storage_insert_when_present,
                storage_insert_when_expired,
                storage_record_lives_its_ttl,
                storage_cas_match,
                storage_cas_mismatch,
                storage_cas_absent,
                storage_cas_expired,
                storage_cas_refreshes_ttl,
                storage_cad_match,
                storage_cad_mismatch,
                storage_cad_absent,
                storage_cad_expired,
                storage_value_empty,
                storage_value_binary,
                storage_value_64k,
                storage_value_too_large_rejected,
                storage_never_expiring_record,
                storage_get_entry_matches_get,
                storage_cas_changes_expiry,
                storage_independent_keys,
                storage_race_insert,
                storage_race_cas,
                storage_watch_support_is_reported,
                storage_watch_wakes_on_delete,
                storage_watch_wakes_on_expiry,
                storage_write_counted_is_all_or_nothing,
                storage_changes_report_every_value_and_delete,
                elections_basic_usage,
                elections_acquire_when_already_held,
                elections_handle_fires_when_key_changed,
                elections_handle_fires_when_key_deleted,
                elections_release_without_acquire_is_noop,
                elections_acquire_fails_after_cleanup,
                elections_cleanup_during_renewal_no_deadlock,
                elections_leadership_survives_many_durations,
                elections_takeover_only_after_ttl,
                elections_transient_errors_retried,
                elections_released_after_three_failed_attempts,
                elections_outcome_unknown_renewal_applied,
                elections_outcome_unknown_renewal_not_applied,
                elections_outcome_unknown_acquire,
                elections_killer_deadlines,
                elections_killer_fires_when_storage_hangs,
                elections_release_after_loss_disarms_killer,
                elections_unreleased_loss_is_killed,
                elections_fencing_tokens_increase_across_holders,
                elections_fencing_tokens_survive_restart,
                elections_counted_acquire_outcome_unknown,
                elections_concurrent_contenders_one_leader,
                elections_invalid_input_rejected,
                elections_no_task_survives_cleanup,
                elections_late_delete_spares_next_leadership,
                elections_lead_returns_the_output_then_releases,
                elections_lead_waits_for_the_key,
                elections_lead_stops_the_work_before_disarming,
                elections_lead_work_that_ignores_the_loss_is_killed,
                elections_release_waits_for_tracked_work,
                elections_observe_reports_every_change_once,
                elections_observe_sees_a_new_leadership_with_the_same_value,
                elections_observe_reports_store_trouble_once_and_never_writes,
                elections_waiting_candidates_are_listed,
                elections_hand_over_without_candidate_is_refused,
                elections_hand_over_to_the_named_candidate,
                elections_hand_over_waits_for_tracked_work,
                elections_hand_over_marker_expires_when_the_candidate_is_gone,
            );
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __suite_cases {
    (@each $attrs:tt $mode:expr, $make:ident, $watch:literal; $case:ident, $($rest:ident,)*) => {
        $crate::__suite_cases!(@one $attrs $mode, $make, $watch, $case);
        $crate::__suite_cases!(@each $attrs $mode, $make, $watch; $($rest,)*);
    };
    (@each $attrs:tt $mode:expr, $make:ident, $watch:literal;) => {};
    (@one { $($attr:tt)* } $mode:expr, $make:ident, $watch:literal, $case:ident) => {
        $($attr)*
        async fn $case() {
            let storage = super::$make().await;
            let ctx = $crate::Ctx::new($mode, storage, stringify!($case)).require_watch($watch);
            $crate::cases::$case(ctx).await;
        }
    };
}
