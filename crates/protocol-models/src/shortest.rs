//! The shortest counterexample of a refuted property: stateright's checker
//! keeps the *last* violating path it met (its discoveries are
//! overwritten while other properties are still awaited), which can carry
//! many steps after the violation. A plain breadth-first search from the
//! initial states gives the shortest path to a violating state instead.

use std::{
    collections::{HashMap, VecDeque},
    fmt::Debug,
    hash::Hash,
};

use stateright::{Expectation, Model};

/// How each explored state was first reached: `None` for an initial state.
type Parents<M> = HashMap<<M as Model>::State, Option<(<M as Model>::State, <M as Model>::Action)>>;

/// The shortest action path from an initial state to a state where the
/// `always` property `property` fails; `None` when no reachable state
/// violates it (or it is not an `always` property of `model`).
pub fn shortest_violation<M>(model: &M, property: &str) -> Option<Vec<M::Action>>
where
    M: Model,
    M::State: Clone + Eq + Hash,
    M::Action: Clone + Debug,
{
    let property = model
        .properties()
        .into_iter()
        .find(|p| p.name == property && p.expectation == Expectation::Always)?;
    let mut parent: Parents<M> = HashMap::new();
    let mut queue = VecDeque::new();
    for init in model.init_states() {
        if parent.insert(init.clone(), None).is_none() {
            queue.push_back(init);
        }
    }
    let mut actions = Vec::new();
    while let Some(state) = queue.pop_front() {
        if !(property.condition)(model, &state) {
            let mut path = Vec::new();
            let mut at = state;
            while let Some(Some((before, action))) = parent.get(&at).cloned() {
                path.push(action);
                at = before;
            }
            path.reverse();
            return Some(path);
        }
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&state, action.clone()) else {
                continue;
            };
            if !parent.contains_key(&next) {
                parent.insert(next.clone(), Some((state.clone(), action)));
                queue.push_back(next);
            }
        }
    }
    None
}
