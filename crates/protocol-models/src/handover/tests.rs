//! The hand-over model as fixed holds; each seeded bug is refuted.

use stateright::Checker;

use super::*;

#[test]
fn the_protocol_holds_and_every_step_is_reachable() {
    let checker = HandOver { bug: None }.checker().spawn_bfs().join();
    for property in (HandOver { bug: None }).properties() {
        let found = checker.discovery(property.name).is_some();
        match property.expectation {
            stateright::Expectation::Always => {
                assert!(!found, "refuted: {}", property.name);
            }
            _ => assert!(found, "never reached: {}", property.name),
        }
    }
}

#[test]
fn every_seeded_bug_is_refuted() {
    for bug in Bug::ALL {
        let outcome = crate::run::check(bug.name(), HandOver { bug: Some(bug) }, 1);
        assert!(
            !outcome.violations.is_empty(),
            "{}: not refuted",
            bug.name()
        );
    }
}
