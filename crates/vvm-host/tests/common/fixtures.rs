//! Real faults for the escape tests: a job that records its work in a file
//! (so a test sees when it stops), a loop-mounted ext4 that can be frozen,
//! the guard process found from outside, the cgroup tree, and the
//! processes of a job found by a mark in their environment.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::{
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// A shell loop that appends the wall clock (ns) to `file` every 100 ms:
/// the job's "work", whose last line says when it stopped.
pub fn work_loop(file: &Path) -> String {
    format!(
        "while :; do date +%s%N >> '{}'; sleep 0.1; done",
        file.display()
    )
}

/// The last time `work_loop` wrote to `file`.
pub fn last_work(file: &Path) -> Option<SystemTime> {
    let text = std::fs::read_to_string(file).ok()?;
    let nanos: u64 = text
        .lines()
        .rev()
        .find_map(|line| line.trim().parse().ok())?;
    Some(UNIX_EPOCH + Duration::from_nanos(nanos))
}

/// Waits until `file` holds at least `lines` lines of work.
pub fn wait_for_work(file: &Path, lines: usize) {
    let started = std::time::Instant::now();
    loop {
        let count = std::fs::read_to_string(file)
            .map(|text| text.lines().count())
            .unwrap_or(0);
        if count >= lines {
            return;
        }
        assert!(
            started.elapsed() < super::LIMIT,
            "the job never worked ({file:?})"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits past `lease_end` (plus a margin for the last line to land), then
/// asserts the work stopped before it.
pub fn assert_work_stopped_before(file: &Path, lease_end: SystemTime, what: &str) {
    let margin = Duration::from_millis(1500);
    while SystemTime::now() < lease_end + margin {
        thread::sleep(Duration::from_millis(50));
    }
    let last = last_work(file).expect("no work recorded");
    assert!(
        last < lease_end,
        "{what}: the job still worked {:?} after the lease could expire",
        last.duration_since(lease_end).unwrap_or_default()
    );
}

/// True when running as root (cgroups, loop devices, fsfreeze, ns_last_pid).
pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Every process directory of `/proc`, with its pid.
fn proc_entries() -> impl Iterator<Item = (i32, std::fs::DirEntry)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            Some((pid, entry))
        })
}

/// The pids whose parent is `parent` (from `/proc`).
pub fn children_of(parent: u32) -> Vec<i32> {
    let mut found = Vec::new();
    for (pid, entry) in proc_entries() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(&parent.to_string()) {
            found.push(pid);
        }
    }
    found
}

/// The guard of the vvm-host process `host` (its child named
/// `vvm-host-guard`, or in an older build any child).
pub fn guard_of(host: u32) -> i32 {
    let started = std::time::Instant::now();
    loop {
        if let Some(&pid) = children_of(host).first() {
            return pid;
        }
        assert!(
            started.elapsed() < super::LIMIT,
            "vvm-host started no guard"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn run(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .status()
        .map(|status| status.success())
        .unwrap_or(false)
}

/// A loop-mounted ext4 file system that a test can freeze; thawed and
/// unmounted when dropped, even when the test fails.
pub struct FreezableFs {
    dir: tempfile::TempDir,
    pub mount: PathBuf,
    frozen: bool,
}

impl FreezableFs {
    /// Makes and mounts one (needs root).
    pub fn new() -> FreezableFs {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let image_s = image.to_str().unwrap();
        assert!(run("truncate", &["-s", "32M", image_s]), "truncate");
        assert!(run("mkfs.ext4", &["-q", "-F", image_s]), "mkfs.ext4");
        assert!(
            run("mount", &["-o", "loop", image_s, mount.to_str().unwrap()]),
            "mount -o loop"
        );
        FreezableFs {
            dir,
            mount,
            frozen: false,
        }
    }

    /// `fsfreeze -f`: every write to it now sleeps uninterruptibly.
    pub fn freeze(&mut self) {
        assert!(
            run("fsfreeze", &["-f", self.mount.to_str().unwrap()]),
            "fsfreeze -f"
        );
        self.frozen = true;
    }

    /// `fsfreeze -u`.
    pub fn thaw(&mut self) {
        if self.frozen {
            run("fsfreeze", &["-u", self.mount.to_str().unwrap()]);
            self.frozen = false;
        }
    }

    /// The directory the fixture lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for FreezableFs {
    fn drop(&mut self) {
        self.thaw();
        let mount = self.mount.to_str().unwrap_or_default().to_owned();
        // Writers released by the thaw need a moment to finish.
        for _ in 0..100 {
            if run("umount", &[&mount]) {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        run("umount", &["-l", &mount]);
    }
}

/// The state letter of `pid` (`D`: uninterruptible sleep).
pub fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The cgroup2 mount point (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
/// on a hybrid host).
pub fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mounts
        .lines()
        .find(|line| line.contains(" - cgroup2 "))
        .and_then(|line| line.split_whitespace().nth(4))
        .expect("no cgroup2 mount");
    PathBuf::from(mount)
}

/// This process's own cgroup v2 directory (vvm-host's, for the hosts the
/// tests spawn: they make their jobs' cgroups below it).
pub fn own_cgroup() -> PathBuf {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = text
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .expect("in no cgroup v2");
    cgroup2_mount().join(own.trim_start_matches('/'))
}

/// Shell words that move the shell into `cgroup` (a directory of the cgroup2
/// file system), failing loudly if it cannot.
pub fn move_into(cgroup: &Path) -> String {
    format!(
        "echo 0 > '{}/cgroup.procs' || {{ echo cannot-move; exit 99; }}",
        cgroup.display()
    )
}

/// Shell words that set `$cg` to the shell's own cgroup directory.
pub fn own_cgroup_in_shell() -> String {
    format!(
        "cg='{}'$(sed -n 's/^0:://p' /proc/self/cgroup)",
        cgroup2_mount().display()
    )
}

/// The pids of the processes whose environment holds `VAR=value` (zombies
/// have none).
pub fn processes_with(var: &str, value: &str) -> Vec<i32> {
    let needle = format!("{var}={value}");
    let mut found = Vec::new();
    for (pid, entry) in proc_entries() {
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|item| item == needle.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}
