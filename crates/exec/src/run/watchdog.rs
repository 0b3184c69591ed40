//! Jobs never outlive the process driving them: a watchdog process kills their process groups
//! when this process dies, and, for a shared log, when its lease runs out.

use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use nix::unistd::Pid;

/// Kills the process groups of running jobs when this process dies, however it dies: a watchdog
/// `sh` waits for end-of-file on a pipe whose only writer is this process (the kernel closes it
/// when this process is gone, SIGKILL included), then kills every process group left in the
/// registry. A whole group goes, so a job's own subprocesses go too.
///
/// This replaces a parent-death signal set between `fork` and `exec`: such a hook forces a full
/// `fork` of this large, multi-threaded process for every job (page tables copied, copy-on-write
/// faults after), which cost more than the jobs themselves; without it jobs start with
/// `posix_spawn`. One watchdog serves the whole process.
///
/// The registry is a memory file shared with the watchdog (its stdout), in fixed-width slots
/// written with one `pwrite` each. The watchdog reads it only once this process is gone, so a
/// job costs it no wake-up: telling it about each job through its pipe woke it four times per
/// job, and on this kind of VM a wake-up across CPUs costs ~40 µs.
struct Watchdog {
    /// Never written: it stays open for as long as this process lives.
    _alive: ChildStdin,
    registry: std::fs::File,
    /// Which slots of the registry are taken.
    taken: Mutex<Vec<bool>>,
}

/// Bytes per registry slot: an entry (a process group, or `p`), padded with spaces, and a newline.
/// The first slot is the lease's: `d` and the deadline ([`fence_jobs_at`]).
const SLOT: usize = 16;

/// The lease watchdog, for a shared log: while this process (`$1`) lives, it compares the lease's
/// deadline (the registry's first line, `d` and centiseconds of `/proc/uptime`, which counts
/// `CLOCK_BOOTTIME`) with the clock five times a second, and once the deadline has passed it
/// kills every registered process group. A process of its own, it acts while this one is stopped
/// (`SIGSTOP`) or stuck on a log it cannot reach.
const LEASE_WATCHDOG_SCRIPT: &str = r#"trap '' INT TERM HUP
while [ -d "/proc/$1" ]; do
  read -r up _ < /proc/uptime
  now=${up%.*}${up#*.}
  read -r first < /proc/self/fd/1
  deadline=${first#d}
  if [ "${deadline:-0}" -gt 0 ] && [ "$now" -gt "$deadline" ]; then
    while read -r pg; do
      case $pg in ''|p|d*) ;; *) kill -9 "-$pg" 2>/dev/null ;; esac
    done < /proc/self/fd/1
  fi
  sleep 0.2
done"#;

/// Jobs of this process may run until `deadline` (`CLOCK_BOOTTIME` ns), when the lease
/// watchdog kills them (see [`crate::run::lease`]); started at the first call.
pub fn fence_jobs_at(deadline: u64) {
    let Some(w) = watchdog() else { return };
    w.write(0, &format!("d{}", deadline.div_ceil(10_000_000)));
    static LEASE_WATCHDOG: OnceLock<()> = OnceLock::new();
    LEASE_WATCHDOG.get_or_init(|| {
        let Ok(registry) = w.registry.try_clone() else {
            return;
        };
        let started = Command::new("sh")
            .args([
                "-c",
                LEASE_WATCHDOG_SCRIPT,
                "databuild-lease-watchdog",
                &std::process::id().to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::from(registry))
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        // Reaped by nobody: it ends with this process.
        if let Ok(child) = started {
            std::mem::forget(child);
        }
    });
}

/// `$1` is this process's watch token: at the end, if anything was still registered (groups, or
/// `p`: a job being started), every process whose environment carries the token goes too (a job
/// started a moment before its group was registered, or a subprocess that left its group). A
/// process that ended normally has nothing registered, and costs no sweep.
const WATCHDOG_SCRIPT: &str = r#"trap '' INT TERM HUP
while read -r _; do :; done
registered=
while read -r pg; do
  case $pg in
    ''|d*) ;;
    p) registered=1 ;;
    *) registered=1; kill -9 "-$pg" 2>/dev/null ;;
  esac
done < /proc/self/fd/1
[ -z "$registered" ] && exit 0
for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  grep -qsxz "DATABUILD_WATCH=$1" "$d/environ" && kill -9 "${d#/proc/}" 2>/dev/null
done"#;

/// Marks the jobs of this process (`DATABUILD_WATCH` in their environment) for the watchdog.
pub(crate) fn watch_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| format!("{}-{}", std::process::id(), databuild_log::event::now_ns()))
}

fn watchdog() -> Option<&'static Watchdog> {
    static WATCHDOG: OnceLock<Option<Watchdog>> = OnceLock::new();
    WATCHDOG
        .get_or_init(|| {
            use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
            let registry = std::fs::File::from(
                memfd_create(c"databuild-watchdog", MemFdCreateFlag::MFD_CLOEXEC).ok()?,
            );
            let mut child = Command::new("sh")
                .args(["-c", WATCHDOG_SCRIPT, "databuild-watchdog", watch_token()])
                .stdin(Stdio::piped())
                .stdout(Stdio::from(registry.try_clone().ok()?))
                .stderr(Stdio::null())
                .process_group(0) // terminal signals aimed at us do not reach it
                .spawn()
                .ok()?;
            let alive = child.stdin.take()?;
            // Reaped by nobody until we exit: it must outlive us, and it is one process.
            std::mem::forget(child);
            Some(Watchdog {
                _alive: alive,
                registry,
                // The first slot is the lease's deadline.
                taken: Mutex::new(vec![true]),
            })
        })
        .as_ref()
}

impl Watchdog {
    fn take_slot(&self, entry: &str) -> usize {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let slot = taken.iter().position(|t| !t).unwrap_or(taken.len());
        if slot == taken.len() {
            taken.push(true);
        } else {
            taken[slot] = true;
        }
        drop(taken);
        self.write(slot, entry);
        slot
    }

    /// One `pwrite`: the watchdog sees the slot's old entry or its new one, never a mix.
    fn write(&self, slot: usize, entry: &str) {
        use std::os::unix::fs::FileExt;
        let mut line = [b' '; SLOT];
        line[SLOT - 1] = b'\n';
        line[..entry.len()].copy_from_slice(entry.as_bytes());
        let _ = self.registry.write_all_at(&line, (slot * SLOT) as u64);
    }

    fn free_slot(&self, slot: usize) {
        // Blanked before it is freed: a job taking the slot next must not have its entry erased.
        self.write(slot, "");
        self.taken.lock().unwrap_or_else(|e| e.into_inner())[slot] = false;
    }
}

/// A job's slot in the watchdog's registry for as long as this value lives: `p` while the job
/// is being started and its group is not known yet, then its process group.
pub(crate) struct Guarded(Option<usize>);

impl Guarded {
    /// Taken before a job starts, so that the watchdog, were this process to die before the job's
    /// group is registered, still finds something registered and sweeps by token.
    pub(crate) fn starting() -> Guarded {
        Guarded(watchdog().map(|w| w.take_slot("p")))
    }

    pub(crate) fn started(&self, group: Pid) {
        if let (Some(w), Some(slot)) = (watchdog(), self.0) {
            w.write(slot, &group.to_string());
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let (Some(w), Some(slot)) = (watchdog(), self.0) {
            w.free_slot(slot);
        }
    }
}
