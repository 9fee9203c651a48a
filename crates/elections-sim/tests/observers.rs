//! The observers follow the store's writes (issue 37), so they report
//! every leadership, the blinks included (one in five, released within
//! d/40); the missed-leadership check catches observers that poll instead
//! (`SimConfig::observers_poll`, the code before the fix), and the seed it
//! fails passes with following observers.
#![allow(clippy::unwrap_used, clippy::panic)]

use elections_sim::{SimConfig, run_seed};

#[test]
fn polling_observers_miss_leaderships_and_the_check_says_so() {
    let polling = SimConfig {
        observers_poll: true,
        ..SimConfig::default()
    };
    for seed in 0..100 {
        let report = run_seed(seed, &polling, false).unwrap();
        if report.ops.observe_missed > 0 {
            assert!(!report.passed(), "seed {seed}: a miss must fail the run");
            let following = run_seed(seed, &SimConfig::default(), false).unwrap();
            assert_eq!(following.ops.observe_missed, 0, "seed {seed}");
            assert!(
                following.passed(),
                "seed {seed} fails with following observers"
            );
            return;
        }
    }
    panic!("polling observers missed no leadership in seeds 0..100");
}
