//! What a plan will cost before it runs: its wall time at a parallelism, its critical path and
//! its total work, from each job's recorded run durations.
//!
//! The wall time replays the scheduler's way of running a plan: a run is ready once the runs
//! building its inputs have ended, and whenever a slot is free the earliest ready run (in plan
//! order among those ready at once) starts on it. That is what `build --parallel N` does, so the
//! figure follows the graph's shape (a long chain takes its length however many slots there
//! are) instead of dividing the work by N. Per-job concurrency limits are not replayed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::plan::Plan;

/// A job's recorded run durations, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobDurations {
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// The estimated cost of a plan, at one parallelism. Runs of jobs with no recorded duration
/// count as taking no time: the figures are then lower bounds, and `runs_without_history` says
/// how many runs that leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub parallel: usize,
    /// Wall time if every run takes its job's median / 95th percentile duration.
    pub wall_p50_ms: f64,
    pub wall_p95_ms: f64,
    /// The longest chain of dependent runs, at median durations: no parallelism beats it.
    pub critical_path_p50_ms: f64,
    /// The sum of every run's duration: the job time the build spends.
    pub work_p50_ms: f64,
    pub work_p95_ms: f64,
    pub runs_without_history: usize,
    /// The jobs with no recorded duration that the plan runs, by name.
    pub jobs_without_history: Vec<String>,
}

/// Estimates `plan` at `parallel` slots; `durations` is indexed by job (as [`PlannedRun`]'s
/// `job_index`), `None` for a job with no completed run.
///
/// [`PlannedRun`]: crate::plan::PlannedRun
pub fn estimate(plan: &Plan, durations: &[Option<JobDurations>], parallel: usize) -> Estimate {
    let parallel = parallel.max(1);
    let of = |i: usize| durations.get(plan.runs[i].job_index).copied().flatten();
    let p50: Vec<f64> = (0..plan.runs.len())
        .map(|i| of(i).map_or(0.0, |d| d.p50_ms))
        .collect();
    let p95: Vec<f64> = (0..plan.runs.len())
        .map(|i| of(i).map_or(0.0, |d| d.p95_ms))
        .collect();
    let mut jobs_without_history: Vec<String> = Vec::new();
    let mut runs_without_history = 0;
    for (i, run) in plan.runs.iter().enumerate() {
        if of(i).is_none() {
            runs_without_history += 1;
            if !jobs_without_history.iter().any(|j| **j == *run.job) {
                jobs_without_history.push(run.job.to_string());
            }
        }
    }
    // Nothing known of any run: nothing to replay (a first backfill of a million runs).
    let known = runs_without_history < plan.runs.len();
    let replay = |took: &[f64], slots: usize| {
        if known {
            wall_time(plan, took, slots)
        } else {
            0.0
        }
    };
    Estimate {
        parallel,
        wall_p50_ms: replay(&p50, parallel),
        wall_p95_ms: replay(&p95, parallel),
        critical_path_p50_ms: replay(&p50, usize::MAX),
        work_p50_ms: p50.iter().sum(),
        work_p95_ms: p95.iter().sum(),
        runs_without_history,
        jobs_without_history,
    }
}

/// When the last run ends, replaying `slots` slots (`usize::MAX`: as many as there are runs,
/// which gives the critical path) over runs that take `took` ms each.
fn wall_time(plan: &Plan, took: &[f64], slots: usize) -> f64 {
    let n = plan.runs.len();
    let mut waiting: Vec<usize> = plan.runs.iter().map(|r| r.depends_on.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, run) in plan.runs.iter().enumerate() {
        for &d in &run.depends_on {
            dependents[d].push(i);
        }
    }
    // Times in µs, so that the heaps order integers. Ready runs by (ready at, plan order);
    // running runs by when they end.
    let mut ready: BinaryHeap<Reverse<(u64, usize)>> = (0..n)
        .filter(|&i| waiting[i] == 0)
        .map(|i| Reverse((0, i)))
        .collect();
    let mut running: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let (mut now, mut last) = (0u64, 0u64);
    while !ready.is_empty() || !running.is_empty() {
        // Start what is ready now on the free slots.
        while running.len() < slots {
            match ready.peek() {
                Some(Reverse((at, _))) if *at <= now => {
                    let Reverse((_, i)) = ready.pop().expect("peeked");
                    let end = now + (took[i] * 1000.0).round() as u64;
                    running.push(Reverse((end, i)));
                }
                _ => break,
            }
        }
        // Then the next thing that happens: a run ends, or (with slots free) one becomes ready.
        let next_end = running.peek().map(|Reverse((end, _))| *end);
        let next_ready = ready.peek().map(|Reverse((at, _))| *at);
        match (next_end, next_ready) {
            (Some(end), Some(at)) if running.len() < slots && at < end => now = at,
            (Some(end), _) => {
                let Reverse((_, i)) = running.pop().expect("peeked");
                now = end;
                last = last.max(end);
                for &d in &dependents[i] {
                    waiting[d] -= 1;
                    if waiting[d] == 0 {
                        ready.push(Reverse((end, d)));
                    }
                }
            }
            (None, Some(at)) => now = now.max(at),
            (None, None) => break,
        }
    }
    last as f64 / 1000.0
}

/// What is left of one job's runs in a build, for [`eta`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobLeft {
    /// Runs planned that have not ended yet (running ones included).
    pub left: u64,
    /// The job's median recorded duration; `None` if it has none.
    pub p50_ms: Option<f64>,
}

/// How long what is left of a build will take, at median durations.
#[derive(Debug, Clone, PartialEq)]
pub struct Eta {
    /// The larger of `work_ms` spread over the slots and `critical_path_ms`.
    pub ms: f64,
    /// The job time left, summed.
    pub work_ms: f64,
    /// The longest chain of jobs left (a job that reads its own outputs, as a day reading the
    /// day before, is a chain of all its runs left).
    pub critical_path_ms: f64,
    /// Runs left of jobs with no recorded duration, counted as taking no time: the ETA is then
    /// a lower bound.
    pub runs_without_history: u64,
}

/// The ETA of what is left of a build at `parallel` slots, from the jobs' graph (`inputs[j]`:
/// the jobs job `j` reads) and what each has left. Neither bound alone is honest: work over
/// slots ignores a long chain, and the chain ignores a wide level; the larger of the two is what
/// no schedule beats, and what the scheduler's greedy order comes close to.
pub fn eta(inputs: &[Vec<usize>], left: &[JobLeft], parallel: usize) -> Eta {
    let parallel = parallel.max(1) as f64;
    let weight = |j: usize| -> f64 {
        let l = left[j];
        if l.left == 0 {
            return 0.0;
        }
        let p50 = l.p50_ms.unwrap_or(0.0);
        if inputs[j].contains(&j) {
            p50 * l.left as f64
        } else {
            p50
        }
    };
    // Longest path ending at each job, memoized; an edge closing a cycle (other than a job's
    // own) is left out, so every job is visited once.
    #[derive(Clone, Copy, PartialEq)]
    enum Seen {
        No,
        OnPath,
        Done(f64),
    }
    fn longest(
        j: usize,
        inputs: &[Vec<usize>],
        w: &dyn Fn(usize) -> f64,
        seen: &mut [Seen],
    ) -> f64 {
        match seen[j] {
            Seen::Done(v) => return v,
            Seen::OnPath => return 0.0,
            Seen::No => {}
        }
        seen[j] = Seen::OnPath;
        let mut best: f64 = 0.0;
        for &i in inputs[j].iter().filter(|&&i| i != j) {
            best = best.max(longest(i, inputs, w, seen));
        }
        let v = best + w(j);
        seen[j] = Seen::Done(v);
        v
    }
    let mut seen = vec![Seen::No; left.len()];
    let critical_path_ms = (0..left.len())
        .map(|j| longest(j, inputs, &weight, &mut seen))
        .fold(0.0, f64::max);
    let work_ms = left
        .iter()
        .map(|l| l.left as f64 * l.p50_ms.unwrap_or(0.0))
        .sum::<f64>();
    Eta {
        ms: (work_ms / parallel).max(critical_path_ms),
        work_ms,
        critical_path_ms,
        runs_without_history: left
            .iter()
            .filter(|l| l.p50_ms.is_none())
            .map(|l| l.left)
            .sum(),
    }
}

/// What a job's runs use, from its history: the p95 of their peak memory and the median of their
/// CPU time (user and system).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobResources {
    pub max_rss_p95_bytes: Option<f64>,
    pub cpu_p50_ms: Option<f64>,
}

/// What a plan will use besides time.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceEstimate {
    /// An upper bound of the memory its runs hold at once at `parallel`: the sum of the
    /// `parallel` largest p95 peak memories among its runs, as if the hungriest ran together.
    /// `None` when no run's job has a recorded peak.
    pub peak_memory_bytes: Option<u64>,
    /// Σ runs × their job's median CPU time, in hours.
    pub cpu_hours: f64,
    /// Runs whose job has no recorded peak memory or CPU time: counted as 0.
    pub runs_without_resources: usize,
}

/// The memory and CPU time of `plan` at `parallel` runs at once, from each job's history
/// (`resources`, by job index). The memory is a bound, not a forecast: which runs overlap
/// depends on timing, and the worst case is the `parallel` largest together.
pub fn resources(
    plan: &Plan,
    resources: &[Option<JobResources>],
    parallel: usize,
) -> ResourceEstimate {
    let mut peaks = Vec::new();
    let (mut cpu_ms, mut without) = (0.0, 0);
    for run in &plan.runs {
        let r = resources.get(run.job_index).copied().flatten();
        let (peak, cpu) = (
            r.and_then(|r| r.max_rss_p95_bytes),
            r.and_then(|r| r.cpu_p50_ms),
        );
        peaks.extend(peak);
        cpu_ms += cpu.unwrap_or(0.0);
        if peak.is_none() || cpu.is_none() {
            without += 1;
        }
    }
    let at_once = parallel.max(1).min(peaks.len());
    let peak_memory_bytes = (!peaks.is_empty()).then(|| {
        peaks.select_nth_unstable_by(at_once - 1, |a, b| b.total_cmp(a));
        peaks[..at_once].iter().sum::<f64>().ceil() as u64
    });
    ResourceEstimate {
        peak_memory_bytes,
        cpu_hours: cpu_ms / 3_600_000.0,
        runs_without_resources: without,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlannedRun;
    use crate::PartitionRef;

    /// Runs of job `job` (an index) with the given dependencies.
    fn plan(runs: &[(usize, &[usize])]) -> Plan {
        Plan {
            runs: runs
                .iter()
                .enumerate()
                .map(|(i, (job, deps))| PlannedRun {
                    job_index: *job,
                    job: format!("j{job}").into(),
                    outputs: vec![PartitionRef::new(format!("o/{i}")).unwrap()],
                    inputs: Vec::new(),
                    extras: None,
                    depends_on: deps.to_vec(),
                    reasons: Vec::new(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn took(p50: f64, p95: f64) -> Option<JobDurations> {
        Some(JobDurations {
            p50_ms: p50,
            p95_ms: p95,
        })
    }

    #[test]
    fn independent_runs_share_the_slots_and_a_chain_takes_its_length() {
        let wide = plan(&[(0, &[]), (0, &[]), (0, &[]), (0, &[])]);
        let e = estimate(&wide, &[took(100.0, 200.0)], 2);
        assert_eq!((e.wall_p50_ms, e.wall_p95_ms), (200.0, 400.0));
        assert_eq!((e.work_p50_ms, e.critical_path_p50_ms), (400.0, 100.0));
        let chain = plan(&[(0, &[]), (0, &[0]), (0, &[1])]);
        let e = estimate(&chain, &[took(100.0, 100.0)], 8);
        assert_eq!(e.wall_p50_ms, 300.0, "more slots do not shorten a chain");
        assert_eq!(e.critical_path_p50_ms, 300.0);
    }

    #[test]
    fn a_fan_in_waits_for_its_slowest_input() {
        // Two leaves of 100 and 400 ms, then a fan-in of 50 ms, on 2 slots.
        let p = plan(&[(0, &[]), (1, &[]), (2, &[0, 1])]);
        let e = estimate(
            &p,
            &[took(100.0, 100.0), took(400.0, 400.0), took(50.0, 50.0)],
            2,
        );
        assert_eq!(e.wall_p50_ms, 450.0);
        assert_eq!(e.work_p50_ms, 550.0);
    }

    #[test]
    fn a_slot_is_never_held_for_a_run_that_is_not_ready() {
        // A long run, a short one depending on it, then 50 independent short ones, on 2 slots:
        // the independent ones use the second slot while the long one runs.
        let mut runs: Vec<(usize, &[usize])> = vec![(0, &[]), (1, &[0])];
        runs.extend(std::iter::repeat_n((1, &[][..]), 50));
        let e = estimate(
            &plan(&runs),
            &[took(100_000.0, 100_000.0), took(1000.0, 1000.0)],
            2,
        );
        assert_eq!(e.wall_p50_ms, 101_000.0);
    }

    #[test]
    fn runs_without_history_are_counted_and_named() {
        let p = plan(&[(0, &[]), (1, &[]), (1, &[0])]);
        let e = estimate(&p, &[took(10.0, 20.0), None], 1);
        assert_eq!(e.runs_without_history, 2);
        assert_eq!(e.jobs_without_history, ["j1"]);
        assert_eq!(e.wall_p50_ms, 10.0);
        assert_eq!(estimate(&plan(&[]), &[], 0).wall_p50_ms, 0.0);
    }

    #[test]
    fn the_eta_is_the_longer_of_work_over_slots_and_the_chain_of_jobs() {
        let left = |left, ms| JobLeft {
            left,
            p50_ms: Some(ms),
        };
        // a -> b -> c, wide: 100 runs of a at 10 ms over 2 slots outweigh the chain.
        let inputs = vec![vec![], vec![0], vec![1]];
        let wide = eta(&inputs, &[left(100, 10.0), left(1, 5.0), left(1, 5.0)], 2);
        assert_eq!(wide.work_ms, 1010.0);
        assert_eq!(wide.critical_path_ms, 20.0);
        assert_eq!(wide.ms, 505.0);
        // A job reading its own outputs is a chain of its runs: 50 x 10 ms, however many slots.
        let chain = eta(&[vec![0]], &[left(50, 10.0)], 8);
        assert_eq!(chain.critical_path_ms, 500.0);
        assert_eq!(chain.ms, 500.0);
        // Jobs with nothing left weigh nothing; jobs with no history are counted apart.
        let done = eta(
            &inputs,
            &[
                left(0, 1000.0),
                JobLeft {
                    left: 3,
                    p50_ms: None,
                },
                left(1, 5.0),
            ],
            1,
        );
        assert_eq!(done.ms, 5.0);
        assert_eq!(done.runs_without_history, 3);
        // A cycle between two jobs ends.
        let cycle = eta(&[vec![1], vec![0]], &[left(1, 1.0), left(1, 2.0)], 1);
        assert_eq!(cycle.critical_path_ms, 3.0);
    }

    #[test]
    fn memory_is_the_largest_peaks_at_once_and_cpu_the_sum_of_medians() {
        // Jobs 0 (1 GiB, 1 min of CPU), 1 (4 GiB, 2 min) and 2 (no history).
        let p = plan(&[(0, &[]), (0, &[]), (1, &[]), (1, &[]), (2, &[])]);
        let gib = (1u64 << 30) as f64;
        let of = [
            Some(JobResources {
                max_rss_p95_bytes: Some(gib),
                cpu_p50_ms: Some(60_000.0),
            }),
            Some(JobResources {
                max_rss_p95_bytes: Some(4.0 * gib),
                cpu_p50_ms: Some(120_000.0),
            }),
            None,
        ];
        let one = resources(&p, &of, 1);
        assert_eq!(one.peak_memory_bytes, Some(4 << 30));
        assert!((one.cpu_hours - 0.1).abs() < 1e-9, "{one:?}");
        assert_eq!(one.runs_without_resources, 1);
        assert_eq!(resources(&p, &of, 3).peak_memory_bytes, Some(9 << 30));
        // More slots than runs with a peak: every peak at once.
        assert_eq!(resources(&p, &of, 50).peak_memory_bytes, Some(10 << 30));
        assert_eq!(
            resources(&plan(&[(2, &[])]), &of, 4).peak_memory_bytes,
            None
        );
    }
}
