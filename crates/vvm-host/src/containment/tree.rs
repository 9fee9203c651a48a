//! The process tree under a process, read from `/proc`: the subreaper
//! mode's way to find every descendant, wherever its process group.

use std::{collections::HashMap, fs};

use nix::sys::signal::Signal;

use super::pidfd;

/// `(pid, parent pid)` of every process, from `/proc/<pid>/stat`.
fn parents() -> HashMap<i32, i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            Some((pid, parent_of(pid)?))
        })
        .collect()
}

/// The parent pid of `pid`, if it exists.
pub(crate) fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every descendant of `root` (children first), read now.
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    let parents = parents();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (&pid, &ppid) in &parents {
            if ppid == parent && pid != root && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// True if `root` is an ancestor of `pid` now.
pub(crate) fn is_descendant(pid: i32, root: i32) -> bool {
    let mut current = pid;
    for _ in 0..4096 {
        match parent_of(current) {
            Some(parent) if parent == root => return true,
            Some(parent) if parent > 1 => current = parent,
            _ => return false,
        }
    }
    false
}

/// `signal` to every descendant of `root` (this process), each through a
/// pidfd and only if it is still a descendant once the pidfd names it.
pub(crate) fn signal_descendants(root: i32, signal: Signal) -> usize {
    descendants(root)
        .into_iter()
        .filter(|&pid| pidfd::signal_verified(pid, signal, || is_descendant(pid, root)))
        .count()
}

/// The state letter and kernel wait channel of `pid` (`D` and the function
/// it sleeps in, for a process stuck in uninterruptible sleep).
pub(crate) fn state_and_wchan(pid: i32) -> Option<(char, String)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .next()?
        .chars()
        .next()?;
    let wchan = fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    Some((
        state,
        if wchan.is_empty() {
            "-".to_owned()
        } else {
            wchan
        },
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn finds_grandchildren_that_left_the_process_group() {
        let me = i32::try_from(std::process::id()).unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let found = descendants(me);
        assert!(found.contains(&grandchild), "{found:?}");
        assert!(is_descendant(grandchild, me));
        assert!(state_and_wchan(grandchild).is_some());
        // Only the grandchild: the test harness has other children.
        assert!(pidfd::signal_verified(grandchild, Signal::SIGKILL, || {
            is_descendant(grandchild, me)
        }));
        let _ = child.wait();
    }
}
