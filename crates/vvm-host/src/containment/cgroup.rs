//! A cgroup v2 per job: created by vvm-host under its own cgroup, joined
//! by the job's launcher before the command runs (the namespace's init,
//! [`crate::guard::init`], or the trampoline, [`crate::guard::exec`]),
//! ended with `cgroup.kill` (which reaches every cgroup below it too),
//! empty when `cgroup.events` says `populated 0` (which counts the cgroups
//! below it too), removed afterwards with every cgroup the job made in it.

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use nix::sys::signal::Signal;

use super::pidfd;

/// The cgroup under which this vvm-host creates its jobs' cgroups.
#[derive(Debug)]
pub(crate) struct Parent {
    path: PathBuf,
}

/// Jobs started by this process so far (names each job's cgroup).
static JOBS: AtomicU32 = AtomicU32::new(0);

impl Parent {
    /// vvm-host's own cgroup v2 directory, if a job cgroup can be created
    /// there (probed by creating and removing one). The reason otherwise.
    pub(crate) fn find() -> Result<Parent, String> {
        let mounts = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|err| format!("cannot read /proc/self/mountinfo: {err}"))?;
        let (root, mount_point) = cgroup2_mount(&mounts).ok_or("no cgroup2 file system mounted")?;
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|err| format!("cannot read /proc/self/cgroup: {err}"))?;
        let own = unified_path(&own).ok_or("this process is in no cgroup v2")?;
        let relative = own
            .strip_prefix(&root)
            .ok_or_else(|| format!("own cgroup {own} is outside the mount's root {root}"))?;
        let mut path = PathBuf::from(mount_point);
        path.extend(relative.split('/').filter(|part| !part.is_empty()));
        let parent = Parent { path };
        let probe = parent
            .create_named(&format!("vvm-host-{}-probe", std::process::id()))
            .map_err(|err| {
                format!(
                    "cannot create a cgroup under {}: {err}",
                    parent.path.display()
                )
            })?;
        let has_kill = probe.path.join("cgroup.kill").exists();
        probe.remove();
        if !has_kill {
            return Err("the kernel has no cgroup.kill (Linux 5.14)".to_owned());
        }
        parent.remove_stale();
        Ok(parent)
    }

    /// Removes the empty job cgroups left here by vvm-hosts that no longer
    /// run (one SIGKILLed together with its guard leaves its job's cgroup
    /// behind, empty: the job died with its namespace, but nobody was left
    /// to remove the directory). A cgroup whose vvm-host may still run, or
    /// that holds a process, is left alone.
    fn remove_stale(&self) {
        let Ok(entries) = fs::read_dir(&self.path) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some(owner) = name.to_str().and_then(stale_owner) else {
                continue;
            };
            let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(owner), None)
                == Err(nix::errno::Errno::ESRCH);
            if gone {
                JobCgroup::at(entry.path()).remove();
            }
        }
    }

    /// Where job cgroups are created.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A new, empty cgroup for one job.
    pub(crate) fn create_job(&self) -> io::Result<JobCgroup> {
        let n = JOBS.fetch_add(1, Ordering::Relaxed);
        self.create_named(&format!("vvm-host-{}-job-{n}", std::process::id()))
    }

    fn create_named(&self, name: &str) -> io::Result<JobCgroup> {
        let path = self.path.join(name);
        fs::create_dir(&path)?;
        Ok(JobCgroup { path })
    }
}

/// The vvm-host pid in a job (or probe) cgroup's name,
/// `vvm-host-<pid>-job-<n>` or `vvm-host-<pid>-probe`.
fn stale_owner(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("vvm-host-")?;
    let (pid, kind) = rest.split_once('-')?;
    let ours = kind == "probe"
        || kind
            .strip_prefix("job-")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if !ours {
        return None;
    }
    pid.parse().ok().filter(|&pid: &i32| pid > 0)
}

/// The mount of the cgroup2 file system: (its root in the hierarchy, its
/// mount point), from `/proc/self/mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        // "id parent major:minor root mount-point options ... - fstype source super-options"
        let (before, after) = line.split_once(" - ")?;
        if after.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut fields = before.split_whitespace();
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        Some((unescape(root), unescape(mount_point)))
    })
}

/// mountinfo escapes spaces, tabs, newlines and backslashes as `\ooo`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The cgroup v2 path (`0::/path`) in a `/proc/<pid>/cgroup` file.
pub(crate) fn unified_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_owned)
}

/// One job's cgroup.
#[derive(Debug)]
pub(crate) struct JobCgroup {
    path: PathBuf,
}

impl JobCgroup {
    /// The job cgroup at `path` (made by vvm-host; the guard only uses it).
    pub(crate) fn at(path: PathBuf) -> JobCgroup {
        JobCgroup { path }
    }

    /// Its directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the calling process into the cgroup.
    pub(crate) fn join(&self) -> io::Result<()> {
        fs::write(self.path.join("cgroup.procs"), b"0")
    }

    /// SIGKILL to every process in it and in every cgroup below it, at once
    /// (`cgroup.kill`): none can escape by forking meanwhile.
    pub(crate) fn kill(&self) -> io::Result<()> {
        fs::write(self.path.join("cgroup.kill"), b"1")
    }

    /// True while any process is in it or in a cgroup below it. A cgroup
    /// that cannot be read (removed) counts as empty.
    pub(crate) fn populated(&self) -> bool {
        match fs::read_to_string(self.path.join("cgroup.events")) {
            Ok(events) => events.lines().any(|line| line == "populated 1"),
            Err(_) => false,
        }
    }

    /// The cgroup and every cgroup below it (the job may make child
    /// cgroups and move into them), parents before children.
    fn tree(&self) -> Vec<PathBuf> {
        let mut found = vec![self.path.clone()];
        let mut next = 0;
        while let Some(dir) = found.get(next).cloned() {
            next += 1;
            if let Ok(entries) = fs::read_dir(&dir) {
                found.extend(
                    entries
                        .filter_map(Result::ok)
                        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                        .map(|entry| entry.path()),
                );
            }
        }
        found
    }

    /// The pids in it and in every cgroup below it, now.
    pub(crate) fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .tree()
            .iter()
            .filter_map(|dir| fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|procs| {
                procs
                    .lines()
                    .filter_map(|line| line.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// `signal` to every process in it or in a cgroup below it, each
    /// through a pidfd and only if it is still within this cgroup's subtree
    /// once the pidfd names it. The number signalled.
    pub(crate) fn signal_all(&self, signal: Signal) -> usize {
        let Some(name) = self.hierarchy_path() else {
            return 0;
        };
        self.pids()
            .into_iter()
            .filter(|&pid| pidfd::signal_verified(pid, signal, || self.holds(pid, &name)))
            .count()
    }

    /// True if `pid` is in the cgroup named `name` (as `/proc/<pid>/cgroup`
    /// names it) or in one below it.
    fn holds(&self, pid: i32, name: &str) -> bool {
        fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|text| unified_path(&text))
            .is_some_and(|path| within(&path, name))
    }

    /// The cgroup's path as `/proc/<pid>/cgroup` names it, for a process of
    /// the same cgroup namespace: the guard's own path, plus the last part.
    fn hierarchy_path(&self) -> Option<String> {
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let own = unified_path(&own)?;
        let leaf = self.path.file_name()?.to_str()?;
        Some(if own == "/" {
            format!("/{leaf}")
        } else {
            format!("{own}/{leaf}")
        })
    }

    /// Removes the cgroup and every cgroup the job made below it, children
    /// first (each must be empty); best effort. True if it is gone.
    pub(crate) fn remove(&self) -> bool {
        for dir in self.tree().iter().rev() {
            let _ = fs::remove_dir(dir);
        }
        !self.path.exists()
    }
}

/// True if the cgroup `path` is `name` or lies below it.
fn within(path: &str, name: &str) -> bool {
    path == name
        || path
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_of_a_hybrid_host() {
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            cgroup2_mount(mountinfo),
            Some(("/".to_owned(), "/sys/fs/cgroup/unified".to_owned()))
        );
        let spaced = "41 31 0:38 /a\\040b /mnt/c\\134g rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(spaced),
            Some(("/a b".to_owned(), "/mnt/c\\g".to_owned()))
        );
        assert_eq!(cgroup2_mount("31 23 0:28 / /x rw - tmpfs tmpfs rw\n"), None);
    }

    #[test]
    fn only_job_cgroups_name_an_owner() {
        assert_eq!(stale_owner("vvm-host-42-job-7"), Some(42));
        assert_eq!(stale_owner("vvm-host-42-probe"), Some(42));
        assert_eq!(stale_owner("vvm-host-42-job-"), None);
        assert_eq!(stale_owner("vvm-host-x-job-1"), None);
        assert_eq!(stale_owner("other-42-job-1"), None);
        assert_eq!(stale_owner("vvm-host-42-jobs"), None);
    }

    #[test]
    fn a_subtree_holds_its_children_only() {
        assert!(within("/a/job", "/a/job"));
        assert!(within("/a/job/leaf", "/a/job"));
        assert!(!within("/a/job-2", "/a/job"));
        assert!(!within("/a", "/a/job"));
    }

    #[test]
    fn reads_the_unified_line() {
        let text = "4:memory:/x\n1:cpu:/\n0::/user.slice/app\n";
        assert_eq!(unified_path(text).as_deref(), Some("/user.slice/app"));
        assert_eq!(unified_path("4:memory:/x\n"), None);
    }
}
