//! The VVM seeds cover issue 34's dimensions: locks whose names share a
//! prefix, mixed cluster sizes within a lock, and hand-over requests (with
//! `--to` and withdrawals) under faults, all of them passing.

use elections_sim::{ContenderKind, RequestCounts, SimConfig, run_seed};

#[test]
fn vvm_seeds_mix_locks_sizes_and_requests() {
    let config = SimConfig::default();
    let (mut two_locks, mut mixed) = (0, 0);
    let mut requests = RequestCounts::default();
    for seed in 0..80 {
        let report = run_seed(seed, &config, false).unwrap();
        assert!(report.passed(), "seed {seed} failed: {report:#?}");
        if report.kind == ContenderKind::Vvm {
            two_locks += usize::from(report.locks == 2);
            mixed += usize::from(report.mixed_sizes);
            requests.add(&report.requests);
        }
    }
    assert!(
        two_locks > 0 && mixed > 0,
        "{two_locks} two-lock, {mixed} mixed seeds"
    );
    assert!(requests.posted > 20, "{requests:?}");
    assert!(
        requests.handed_over > 0 && requests.withdrawn > 0 && requests.no_candidate > 0,
        "{requests:?}"
    );
    assert!(requests.accepts > 0 && requests.markers > 0, "{requests:?}");
}
