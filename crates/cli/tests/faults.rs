//! The fault-injection test of issue #33: `scripts/faults.sh` runs two `databuild serve` hosts
//! (network, UTS, PID and mount namespaces of their own, on a bridge it makes) on one PostgreSQL
//! event log and one data dir, and interrupts a build with a real fault per scenario (kill -9, a
//! network cut, SIGSTOP, a PostgreSQL restart); after each it checks that no partition was written
//! by two runs at overlapping times, that every requested partition is live, and that
//! `check-log` passes. It needs root, namespaces and PostgreSQL's binaries, and takes a few
//! minutes: it is `#[ignore]`d, `./test.sh` runs it, and run without what it needs it fails,
//! saying why.

use std::path::PathBuf;
use std::process::Command;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/faults.sh")
}

/// `None` when the script can run here; else why not.
fn cannot_run() -> Option<String> {
    let out = Command::new("bash").arg(script()).arg("--check").output();
    match out {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        Err(e) => Some(format!("cannot run bash: {e}")),
    }
}

#[test]
#[ignore = "needs root, namespaces and PostgreSQL's binaries, and minutes; ./test.sh runs it"]
fn two_hosts_survive_kill_cut_stop_and_postgres_restart() {
    if let Some(why) = cannot_run() {
        panic!("the fault-injection test cannot run here: {why}");
    }
    let scratch = tempfile::tempdir().expect("temp dir");
    // The script makes (and removes) this folder; the temp dir only holds it.
    let status = Command::new("bash")
        .arg(script())
        .arg(scratch.path().join("faults"))
        .env("DATABUILD_BIN", env!("CARGO_BIN_EXE_databuild"))
        .status()
        .expect("run scripts/faults.sh");
    assert!(
        status.success(),
        "scripts/faults.sh failed ({status}): see its FAIL lines above"
    );
}
