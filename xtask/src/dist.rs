//! `cargo xtask dist`: vvm-host as a release tarball and a `.deb`.
//!
//! Both hold the binary, its man pages (the checked-in ones, which
//! `crates/vvm-host/tests/cli.rs` keeps current) and completion scripts for
//! bash, zsh and fish (printed by the binary itself). The `.deb` is built by
//! Debian's own `dpkg-deb` from a staged tree in the usual places:
//! `/usr/bin`, `/usr/share/man/man1` (gzipped), the shells' vendor
//! completion directories, `/usr/share/doc/vvm-host`.
//!
//! By default the binary is a release build with every driver. With
//! `--from-test-build` it is the workspace test build's own binary (no
//! compile at all: what CI packages to prove the package installs and
//! runs). Targets this machine cannot build (musl without its rustup
//! target) are reported as skipped, never faked.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

/// The drivers a release package carries (every feature vvm-host has).
const FEATURES: &str = "scylla,dynamodb,valkey,postgres,etcd";
/// The shells whose completion scripts the packages carry, with the file
/// name each shell looks for and where the `.deb` installs it.
const COMPLETIONS: [(&str, &str, &str); 3] = [
    ("bash", "vvm-host", "usr/share/bash-completion/completions"),
    ("zsh", "_vvm-host", "usr/share/zsh/vendor-completions"),
    (
        "fish",
        "vvm-host.fish",
        "usr/share/fish/vendor_completions.d",
    ),
];

/// Options of `dist`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Package the workspace test build's binary instead of a release build
    /// (no compile; for CI's install check).
    #[arg(long)]
    from_test_build: bool,
    /// Where the tarball and the `.deb` go.
    #[arg(long, default_value = "target/dist")]
    out: PathBuf,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let root = crate::tidy::workspace_root();
    let out = root.join(&args.out);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let version = env!("CARGO_PKG_VERSION");
    let binary = if args.from_test_build {
        crate::workspace_build::build()?.bin("vvm-host")?
    } else {
        release_binary(&root, None)?
    };
    let arch = command_output("dpkg", &["--print-architecture"]).unwrap_or_else(|_| "amd64".into());
    let gnu = tarball(&root, &binary, &out, version, "x86_64-unknown-linux-gnu")?;
    println!("wrote {}", gnu.display());
    let deb = deb(&root, &binary, &out, version, &arch)?;
    println!("wrote {}", deb.display());
    if args.from_test_build {
        return Ok(());
    }
    let musl = "x86_64-unknown-linux-musl";
    let installed =
        command_output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    if installed.lines().any(|t| t.trim() == musl) {
        let binary = release_binary(&root, Some(musl))?;
        println!(
            "wrote {}",
            tarball(&root, &binary, &out, version, musl)?.display()
        );
    } else {
        println!("{musl}: skipped (its rustup target is not installed here)");
    }
    Ok(())
}

/// `cargo build --release -p vvm-host` with every driver, for `target`.
fn release_binary(root: &Path, target: Option<&str>) -> anyhow::Result<PathBuf> {
    let mut command = crate::cargo::command();
    command.current_dir(root).args([
        "build",
        "--release",
        "-p",
        "vvm-host",
        "--features",
        FEATURES,
    ]);
    if let Some(target) = target {
        command.args(["--target", target]);
    }
    let status = command.status().context("running cargo build")?;
    anyhow::ensure!(status.success(), "the release build failed ({status})");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dir = match target {
        Some(target) => target_dir.join(target).join("release"),
        None => target_dir.join("release"),
    };
    Ok(dir.join("vvm-host"))
}

/// The release tarball: `vvm-host-VERSION-TARGET/{bin,man,completions}`.
fn tarball(
    root: &Path,
    binary: &Path,
    out: &Path,
    version: &str,
    target: &str,
) -> anyhow::Result<PathBuf> {
    let name = format!("vvm-host-{version}-{target}");
    let stage = out.join("stage").join(&name);
    fresh_dir(&stage)?;
    copy(binary, &stage.join("bin/vvm-host"))?;
    for page in man_pages(root)? {
        copy(&page, &stage.join("man/man1").join(file_name(&page)?))?;
    }
    for (shell, file, _) in COMPLETIONS {
        write_completion(binary, shell, &stage.join("completions").join(file))?;
    }
    copy(
        &root.join("crates/vvm-host/README.md"),
        &stage.join("README.md"),
    )?;
    let tarball = out.join(format!("{name}.tar.gz"));
    run_tool(
        Command::new("tar")
            .arg("-czf")
            .arg(&tarball)
            .arg("--owner=0")
            .arg("--group=0")
            .arg("-C")
            .arg(out.join("stage"))
            .arg(&name),
    )?;
    Ok(tarball)
}

/// The `.deb`, built by `dpkg-deb` from a tree staged in the usual places.
fn deb(
    root: &Path,
    binary: &Path,
    out: &Path,
    version: &str,
    arch: &str,
) -> anyhow::Result<PathBuf> {
    let stage = out.join("stage").join(format!("deb-{arch}"));
    fresh_dir(&stage)?;
    copy(binary, &stage.join("usr/bin/vvm-host"))?;
    let man = stage.join("usr/share/man/man1");
    for page in man_pages(root)? {
        let target = man.join(file_name(&page)?);
        copy(&page, &target)?;
        run_tool(Command::new("gzip").arg("-9n").arg(&target))?;
    }
    for (shell, file, dir) in COMPLETIONS {
        write_completion(binary, shell, &stage.join(dir).join(file))?;
    }
    let doc = stage.join("usr/share/doc/vvm-host");
    copy(
        &root.join("crates/vvm-host/README.md"),
        &doc.join("README.md"),
    )?;
    write(&doc.join("copyright"), COPYRIGHT)?;
    let control = format!(
        "Package: vvm-host\nVersion: {version}\nArchitecture: {arch}\n\
         Maintainer: ttl-cluster developers <ttl-cluster@example.invalid>\n\
         Depends: {}\nRecommends: man-db\nSection: admin\nPriority: optional\n\
         Description: run a command on at most one node of a cluster at a time\n \
         vvm-host takes a lease in a store you already run (an embedded redb file,\n \
         Valkey/Redis, PostgreSQL, etcd, Cassandra/ScyllaDB, DynamoDB), runs the\n \
         command only while it leads, and stops it before the lease can expire.\n",
        libc_dependency(binary)
    );
    write(&stage.join("DEBIAN/control"), &control)?;
    let deb = out.join(format!("vvm-host_{version}_{arch}.deb"));
    run_tool(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "--build"])
            .arg(&stage)
            .arg(&deb),
    )?;
    Ok(deb)
}

const COPYRIGHT: &str = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
Upstream-Name: ttl-cluster\n\nFiles: *\nCopyright: the ttl-cluster developers\n\
License: MIT or Apache-2.0\n On Debian systems the Apache License 2.0 is in\n \
/usr/share/common-licenses/Apache-2.0.\n";

/// `libc6 (>= X)` for the newest glibc symbol version the binary needs.
fn libc_dependency(binary: &Path) -> String {
    let symbols = Command::new("objdump")
        .arg("-T")
        .arg(binary)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let newest = symbols
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max();
    match newest {
        Some((major, minor)) => format!("libc6 (>= {major}.{minor})"),
        None => "libc6".into(),
    }
}

fn man_pages(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = root.join("crates/vvm-host/doc");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "1"))
        .collect();
    pages.sort();
    anyhow::ensure!(!pages.is_empty(), "no man pages in {}", dir.display());
    Ok(pages)
}

fn write_completion(binary: &Path, shell: &str, to: &Path) -> anyhow::Result<()> {
    let output = Command::new(binary)
        .args(["completions", shell])
        .output()
        .with_context(|| format!("running {} completions {shell}", binary.display()))?;
    if !output.status.success() {
        bail!(
            "{} completions {shell} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    write(to, &String::from_utf8_lossy(&output.stdout))
}

fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn file_name(path: &Path) -> anyhow::Result<&std::ffi::OsStr> {
    path.file_name()
        .with_context(|| format!("{} has no file name", path.display()))
}

fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
}

fn write(to: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(to, text).with_context(|| format!("writing {}", to.display()))
}

fn run_tool(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {:?}", command.get_program()))?;
    anyhow::ensure!(
        status.success(),
        "{:?} failed ({status})",
        command.get_program()
    );
    Ok(())
}

fn command_output(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(program).args(args).output()?;
    anyhow::ensure!(output.status.success(), "{program} failed");
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}
