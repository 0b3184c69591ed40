//! What a run cost, measured without the job's help ([`RunResources`], recorded on its end):
//! from the kernel's count of a reaped local job, or from Slurm's accounting (`sacct`).
//!
//! Peak memory is the larger of the largest single process's (`ru_maxrss`, Slurm's `MaxRSS`) and,
//! for a local job that runs past [`PeakSampler`]'s first reading, the most its whole process
//! group (the job and every descendant that stayed in it) held at once at any reading: a job
//! whose four workers take 1 GiB each is recorded at 4 GiB. A job of a few ms is never sampled,
//! so a build of thousands of them pays nothing for it.

use std::time::Duration;

pub use databuild_log::RunResources;

use super::spawn::Usage;

/// The resources of a local run that took `wall` from start to exit: the kernel's count when the
/// process was reaped (`None` if it could not be), and the job process's own peak memory as
/// last sampled while it ran (`sampled`, see [`PeakSampler`]).
pub(crate) fn of_process(
    usage: Option<Usage>,
    sampled: Option<u64>,
    wall: Duration,
) -> RunResources {
    let mut r = RunResources {
        wall_ms: Some(ms(wall)),
        max_rss_bytes: sampled,
        ..RunResources::default()
    };
    if let Some(u) = usage {
        r.cpu_user_ms = Some(ms(u.user));
        r.cpu_system_ms = Some(ms(u.system));
        r.max_rss_bytes = r.max_rss_bytes.max(u.max_rss_bytes);
        r.read_bytes = Some(u.read_bytes);
        r.write_bytes = Some(u.write_bytes);
    }
    r
}

/// When a running job's memory is read: its own peak (`VmHWM` in `/proc/PID/status`) and what
/// its process group holds together (each member's resident size, summed): first after `FIRST`,
/// then every `EVERY`, on the follower's wake-ups it makes anyway (a quiet job's poll times out
/// every 50 ms). A job of a few ms, as most of a big build's are, is never read: its peak is
/// known only when the kernel's count tells it (see `Usage::max_rss_bytes`).
pub(crate) struct PeakSampler {
    pid: i32,
    next: std::time::Instant,
    pub peak: Option<u64>,
}

impl PeakSampler {
    const FIRST: Duration = Duration::from_millis(200);
    const EVERY: Duration = Duration::from_millis(250);

    pub fn new(pid: i32, started: std::time::Instant) -> PeakSampler {
        PeakSampler {
            pid,
            next: started + Self::FIRST,
            peak: None,
        }
    }

    /// Reads the peak if it is time to.
    pub fn tick(&mut self) {
        let now = std::time::Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + Self::EVERY;
        // The job leads its own process group (it is started with `setpgid(0, 0)`).
        self.peak = self.peak.max(vm_hwm(self.pid)).max(group_rss(self.pid));
    }
}

/// What the processes of group `group` hold resident together now, in bytes (`None` if none is
/// left). One pass over `/proc`: a descendant that left the group (`setsid`) is not counted.
fn group_rss(group: i32) -> Option<u64> {
    let page = rustix::param::page_size() as u64;
    let mut pages = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // it exited meanwhile
        };
        if let Some((pgrp, rss)) = group_and_rss(&stat) {
            if pgrp == group {
                pages = Some(pages.unwrap_or(0) + rss);
            }
        }
    }
    pages.map(|p: u64| p * page)
}

/// A `/proc/PID/stat` line's process group (its 5th field) and resident pages (its 24th): read
/// after the command's closing parenthesis, as the command may hold spaces and parentheses.
fn group_and_rss(stat: &str) -> Option<(i32, u64)> {
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    Some((fields.get(2)?.parse().ok()?, fields.get(21)?.parse().ok()?))
}

/// A process's peak resident memory (`VmHWM`), in bytes; `None` once it has exited.
fn vm_hwm(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The fields `sacct` is asked for, in the order [`of_sacct`] reads them.
pub(crate) const SACCT_FORMAT: &str = "JobID,ElapsedRaw,TotalCPU,UserCPU,SystemCPU,MaxRSS";

/// The resources in `sacct -P -n --format=SACCT_FORMAT` output: `ElapsedRaw` of the job's own
/// line, CPU times of that line (the job with its steps), and the largest `MaxRSS` of any line
/// (the steps carry it). A field a cluster without accounting leaves empty stays `None`.
pub(crate) fn of_sacct(text: &str) -> RunResources {
    let mut r = RunResources::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split('|').collect();
        let [id, elapsed, _total, user, system, rss, ..] = f[..] else {
            continue;
        };
        if !id.contains('.') {
            r.wall_ms = elapsed.trim().parse::<u64>().ok().map(|s| s * 1000);
            r.cpu_user_ms = slurm_duration(user).map(ms);
            r.cpu_system_ms = slurm_duration(system).map(ms);
        }
        if let Some(bytes) = slurm_bytes(rss) {
            r.max_rss_bytes = Some(r.max_rss_bytes.unwrap_or(0).max(bytes));
        }
    }
    r
}

/// Slurm's `[DD-[HH:]]MM:SS[.mmm]`.
fn slurm_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let (clock, millis) = match rest.split_once('.') {
        Some((c, m)) => (c, format!("{m:0<3}")[..3].parse::<u64>().ok()?),
        None => (rest, 0),
    };
    let mut seconds = 0u64;
    for part in clock.split(':') {
        seconds = seconds * 60 + part.parse::<u64>().ok()?;
    }
    Some(Duration::from_millis(
        (days * 86_400 + seconds) * 1000 + millis,
    ))
}

/// Slurm's memory sizes: a number with an optional `K`, `M`, `G` or `T` (KiB by default).
fn slurm_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&text[..i], c.to_ascii_uppercase()),
        _ => (text, 'K'),
    };
    let shift = match unit {
        'K' => 10,
        'M' => 20,
        'G' => 30,
        'T' => 40,
        _ => return None,
    };
    let n: f64 = number.parse().ok()?;
    Some((n * (1u64 << shift) as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaped_process_gives_every_measure_but_its_outputs_and_wait() {
        let usage = Usage {
            user: Duration::from_millis(1500),
            system: Duration::from_millis(20),
            max_rss_bytes: Some(300 << 20),
            read_bytes: 4096,
            write_bytes: 512,
        };
        let r = of_process(Some(usage), Some(200 << 20), Duration::from_millis(1600));
        assert_eq!(
            (r.wall_ms, r.cpu_user_ms, r.cpu_system_ms, r.max_rss_bytes),
            (Some(1600), Some(1500), Some(20), Some(300 << 20))
        );
        assert_eq!((r.read_bytes, r.write_bytes), (Some(4096), Some(512)));
        assert_eq!((r.output_bytes, r.queue_wait_ms), (None, None));
        let unknown = of_process(None, None, Duration::from_millis(5));
        assert_eq!((unknown.wall_ms, unknown.cpu_user_ms), (Some(5), None));
        // The kernel's count could be this process's: the sample stands.
        let hidden = Usage {
            max_rss_bytes: None,
            ..usage
        };
        let r = of_process(Some(hidden), Some(2 << 20), Duration::from_millis(5));
        assert_eq!(r.max_rss_bytes, Some(2 << 20));
    }

    #[test]
    fn a_stat_line_gives_its_group_and_resident_pages_whatever_its_command() {
        let stat = "4242 (a (weird) job) S 1 4200 4200 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 \
                    2815805 3133440 393 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        assert_eq!(group_and_rss(stat), Some((4200, 393)));
        assert_eq!(group_and_rss("4242 (cut"), None);
    }

    #[test]
    fn a_groups_resident_memory_is_its_members_together() {
        let me = rustix::process::getpgrp().as_raw_nonzero().get();
        assert!(group_rss(me).is_some_and(|b| b > 1 << 20));
        assert_eq!(group_rss(i32::MAX), None);
    }

    #[test]
    fn a_running_processs_peak_is_read_from_proc() {
        let me = std::process::id() as i32;
        assert!(vm_hwm(me).is_some_and(|b| b > 1 << 20));
        let mut s = PeakSampler::new(me, std::time::Instant::now() - Duration::from_secs(1));
        s.tick();
        assert!(s.peak.is_some());
        assert_eq!(vm_hwm(i32::MAX), None);
    }

    #[test]
    fn sacct_lines_give_the_jobs_times_and_its_largest_steps_memory() {
        let text = "42|65|00:01:02.500|00:01:00|00:00:02.5|\n\
                    42.batch|65|00:01:02.500|00:01:00|00:00:02.5|307200K\n\
                    42.0|3|00:00:01|00:00:01|00:00:00|1.5G\n";
        let r = of_sacct(text);
        assert_eq!(r.wall_ms, Some(65_000));
        assert_eq!(r.cpu_user_ms, Some(60_000));
        assert_eq!(r.cpu_system_ms, Some(2_500));
        assert_eq!(r.max_rss_bytes, Some(3 << 29));
        // Accounting off: the fields come back empty, and stay unknown.
        let r = of_sacct("42||||||\n");
        assert_eq!(
            (r.wall_ms, r.cpu_user_ms, r.max_rss_bytes),
            (None, None, None)
        );
        assert_eq!(
            slurm_duration("1-02:03:04"),
            Some(Duration::from_secs(93_784))
        );
    }
}
