//! The builds this process is running, each on its own thread with the flag that interrupts it
//! ([`Builds`]), so that shutdown can cancel them all and wait for them to record it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A build running on its own thread, and the flag that interrupts it.
type RunningBuild = (Arc<AtomicBool>, JoinHandle<()>);

/// Builds this process is running, by id.
#[derive(Default)]
pub struct Builds {
    running: Mutex<HashMap<String, RunningBuild>>,
}

impl Builds {
    pub(crate) fn add(&self, id: String, interrupt: Arc<AtomicBool>, handle: JoinHandle<()>) {
        let mut running = self.running.lock().expect("builds lock");
        running.retain(|_, (_, h)| !h.is_finished());
        running.insert(id, (interrupt, handle));
    }

    /// Interrupts every running build and waits (up to `grace`) for them to record it.
    pub fn cancel_all(&self, grace: Duration) {
        let running: Vec<_> = self.running.lock().expect("builds lock").drain().collect();
        for (_, (flag, _)) in &running {
            flag.store(true, Ordering::SeqCst);
        }
        let deadline = Instant::now() + grace;
        for (_, (_, handle)) in running {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build's thread: runs until interrupted, or for `at_most` when it does not listen.
    fn running(flag: &Arc<AtomicBool>, listens: bool, at_most: Duration) -> JoinHandle<()> {
        let flag = flag.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < at_most && !(listens && flag.load(Ordering::SeqCst)) {
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    }

    #[test]
    fn cancelling_interrupts_every_running_build_and_waits_for_it_to_end() {
        let builds = Builds::default();
        let flags = [
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        ];
        for (i, flag) in flags.iter().enumerate() {
            let handle = running(flag, true, Duration::from_secs(30));
            builds.add(format!("b{i}"), flag.clone(), handle);
        }
        let start = Instant::now();
        builds.cancel_all(Duration::from_secs(30));
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(flags.iter().all(|f| f.load(Ordering::SeqCst)));
        assert!(builds.running.lock().unwrap().is_empty());
    }

    #[test]
    fn a_build_that_does_not_stop_is_waited_for_no_longer_than_the_grace() {
        let builds = Builds::default();
        let flag = Arc::new(AtomicBool::new(false));
        builds.add(
            "b".into(),
            flag.clone(),
            running(&flag, false, Duration::from_secs(2)),
        );
        let start = Instant::now();
        builds.cancel_all(Duration::from_millis(100));
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(flag.load(Ordering::SeqCst));
    }

    #[test]
    fn builds_that_ended_are_forgotten_when_another_starts() {
        let builds = Builds::default();
        let flag = Arc::new(AtomicBool::new(false));
        let ended = std::thread::spawn(|| {});
        while !ended.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        builds.add("ended".into(), flag.clone(), ended);
        builds.add(
            "new".into(),
            flag.clone(),
            running(&flag, true, Duration::from_secs(30)),
        );
        let ids: Vec<String> = builds.running.lock().unwrap().keys().cloned().collect();
        assert_eq!(ids, ["new"]);
        builds.cancel_all(Duration::from_secs(30));
    }
}
