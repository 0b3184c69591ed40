//! Who drives a build or a run: `host/pid/start-time` of a databuild process, and whether that
//! process is still alive. The start time tells a live process from a later one reusing its pid.

use std::sync::OnceLock;

pub fn hostname() -> Option<String> {
    nix::unistd::gethostname()
        .ok()
        .map(|h| h.to_string_lossy().into_owned())
}

/// The start time of a process, in clock ticks since boot (field 22 of `/proc/PID/stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it follow its closing paren.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// This process, as an owner string.
pub fn this_owner() -> String {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER
        .get_or_init(|| {
            let pid = std::process::id();
            format!(
                "{}/{pid}/{}",
                hostname().unwrap_or_default(),
                start_time(pid).unwrap_or(0)
            )
        })
        .clone()
}

/// `Some(true)` if the owner is a live process on this machine, `Some(false)` if it is a process
/// of this machine that is gone, `None` when it cannot be told (another machine, or no owner).
pub fn owner_alive(owner: Option<&str>) -> Option<bool> {
    let mut parts = owner?.rsplitn(3, '/');
    let started: u64 = parts.next()?.parse().ok()?;
    let pid: u32 = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    if Some(host) != hostname().as_deref() {
        return None;
    }
    Some(start_time(pid) == Some(started))
}

/// Is the process driving some work gone? On this machine we look at the process; on another
/// (a shared log), at its lease: one silent for `timeout` (by the log's clock) has its lease
/// revoked here, which fences it off (see [`crate::run::lease`]), and only then counts as gone.
pub fn owner_dead(
    store: &dyn databuild_log::EventStore,
    owner: Option<&str>,
    timeout: std::time::Duration,
) -> Result<bool, databuild_log::LogError> {
    match owner_alive(owner) {
        Some(alive) => Ok(!alive),
        None => {
            let Some(owner) = owner else { return Ok(false) };
            match store.silent_for(owner)? {
                Some(silent) if silent >= timeout => store.revoke_lease(owner, timeout),
                // Never heard of: it predates leases or never started; leave it be.
                _ => Ok(false),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_dead_one_is_not() {
        assert_eq!(owner_alive(Some(&this_owner())), Some(true));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let started = start_time(pid);
        child.wait().unwrap();
        let dead = format!("{}/{pid}/{}", hostname().unwrap(), started.unwrap_or(1));
        assert_eq!(owner_alive(Some(&dead)), Some(false));
        assert_eq!(owner_alive(Some("elsewhere/1/1")), None);
        assert_eq!(owner_alive(None), None);
    }
}
