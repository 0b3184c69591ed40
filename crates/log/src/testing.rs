//! Random events for property tests, shared by the unit tests and the storage suite
//! (`tests/store.rs` includes this file).

use databuild_log::{Event, Kind, Status};
use proptest::prelude::*;

/// Random events over a tiny space of ids so that collisions (and so refusals) are common.
pub fn arb_event() -> impl Strategy<Value = Event> {
    let status = proptest::sample::select(Status::ALL.to_vec());
    let kind = proptest::sample::select(Kind::ALL.to_vec());
    (kind, status, 0..2usize, 0..2usize, 0..3usize, any::<bool>()).prop_map(
        |(kind, status, br, part, run, with_run)| {
            let (br, r, run) = (format!("b{br}"), format!("p{part}"), format!("r{run}"));
            match kind {
                Kind::BuildRequest => Event::build_request(&br, status),
                Kind::JobRun => Event::job_run(&br, &run, "job", status),
                Kind::Delegation => Event::delegation(&br, &r, "other"),
                Kind::Alias => Event::alias("t", run.len() as u32),
                Kind::Gc => Event::gc("gc", serde_json::json!({})),
                Kind::Environment => {
                    let mut e = Event::environment("dev", Status::Created);
                    e.status = status;
                    e
                }
                Kind::Alert => {
                    let mut e = Event::alert("a", 1, Status::Completed, 1, "sent".into());
                    e.status = status;
                    e
                }
                Kind::Arrival => {
                    let mut e = Event::arrival("d", &r, with_run.then(|| run.clone()));
                    e.status = status;
                    e
                }
                Kind::Check => {
                    let mut e = Event::check(None, &r, &run, "c", with_run);
                    e.status = status;
                    e
                }
                Kind::Want => Event::want(&run, status).with_data(|d| {
                    if with_run {
                        d.requested = vec![r.clone()];
                    }
                }),
                Kind::Partition
                    if matches!(status, Status::Sealed | Status::Expired) && with_run =>
                {
                    Event::partition(None, &format!("source/{r}"), status)
                }
                Kind::Partition
                    if matches!(
                        status,
                        Status::Tainted | Status::Removed | Status::Sealed | Status::Expired
                    ) =>
                {
                    Event::partition(None, &r, status)
                }
                Kind::Partition if with_run => {
                    Event::partition(Some(&br), &r, status).with_run(&run)
                }
                Kind::Partition => Event::partition(Some(&br), &r, status),
            }
        },
    )
}
