//! Ending what a dead driver left running on this machine, before its runs' claims are released.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// Ends what is left on this machine of the given runs' jobs: every process whose environment
/// carries one of their `DATABUILD_JOB_RUN_ID`s is killed, and this waits (up to 5 s) until none
/// is left. A driver killed with SIGKILL leaves its jobs to its watchdog, which takes a moment (and
/// cannot find a job that left both its process group and the watch token); a build closing the
/// driver's runs must not release their partitions to another run while they are still written.
pub fn end_leftover_jobs(run_ids: &[&str]) {
    if run_ids.is_empty() {
        return;
    }
    let marks: std::collections::HashSet<Vec<u8>> = run_ids
        .iter()
        .map(|id| format!("DATABUILD_JOB_RUN_ID={id}").into_bytes())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let left = processes_marked(&marks);
        if left.is_empty() {
            return;
        }
        for pid in left {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Live processes (not zombies: those hold no files) whose environment holds one of `marks`.
fn processes_marked(marks: &std::collections::HashSet<Vec<u8>>) -> Vec<Pid> {
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid as u32 != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| marks.contains(var)))
        })
        .filter(|pid| {
            // The state follows the command name's closing parenthesis.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        })
        .map(Pid::from_raw)
        .collect()
}
