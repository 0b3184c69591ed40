//! The storage conformance suite: every backend must pass every test here.

// Test code may unwrap: a panic is its failure. (`allow-unwrap-in-tests` in `clippy.toml`
// covers only `#[test]` functions and `#[cfg(test)]` modules, not this crate's helpers.)
#![allow(clippy::unwrap_used)]

use databuild_log::*;
use proptest::prelude::*;

/// The backends every test of the suite runs on.
#[derive(Clone, Copy)]
enum Backend {
    Sqlite,
    /// The test command's throwaway server (`DATABUILD_TEST_POSTGRES`), a fresh database a test.
    Postgres,
}

/// Makes a test of the suite two: `NAME::sqlite`, which always runs, and `NAME::postgres`, which
/// needs the test command's PostgreSQL and so is ignored unless asked for (`./test.sh` runs the
/// ignored tests, with PostgreSQL started): a plain `cargo test` lists it as ignored rather than
/// passing it without a server.
macro_rules! on_every_backend {
    ($test:ident) => {
        mod $test {
            #[test]
            fn sqlite() {
                super::$test(super::Backend::Sqlite)
            }

            #[test]
            #[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
            fn postgres() {
                super::$test(super::Backend::Postgres)
            }
        }
    };
}

/// A fresh, empty log on a backend, and a way to open more handles on it (as another process
/// would).
struct Fixture {
    _dir: tempfile::TempDir,
    open: Box<dyn Fn() -> Box<dyn EventStore>>,
}

fn fixture(backend: Backend) -> Fixture {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("events.db");
            Fixture {
                _dir: dir,
                open: Box::new(move || Box::new(SqliteStore::open(&path).unwrap())),
            }
        }
        Backend::Postgres => {
            let url = fresh_postgres_database(&test_postgres());
            Fixture {
                _dir: tempfile::tempdir().unwrap(),
                open: Box::new(move || Box::new(PostgresStore::open(&url).unwrap())),
            }
        }
    }
}

/// The test command's PostgreSQL server (its admin URL). Only ignored tests ask for it: one run
/// without it fails, rather than passing without having run.
fn test_postgres() -> String {
    std::env::var("DATABUILD_TEST_POSTGRES")
        .expect("needs PostgreSQL: DATABUILD_TEST_POSTGRES is not set (./test.sh starts one)")
}

/// Creates an empty database on the test server and returns its URL.
pub fn fresh_postgres_database(admin: &str) -> String {
    let name = format!("t_{}", uuid_simple());
    let mut client = ::postgres::Client::connect(admin, ::postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let base = admin.rsplit_once('/').unwrap().0;
    format!("{base}/{name}")
}

fn uuid_simple() -> String {
    databuild_log::event::new_id().replace('-', "")
}

/// A fresh log on `backend` and a handle on it.
fn store_on(backend: Backend) -> (Fixture, Box<dyn EventStore>) {
    let f = fixture(backend);
    let store = (f.open)();
    (f, store)
}

fn is_sqlite(store: &dyn EventStore) -> bool {
    store.location().starts_with("sqlite:")
}

/// The events of one successful single-run build of `p`.
fn build_events(br: &str, run: &str, p: &str) -> Vec<Event> {
    vec![
        Event::build_request(br, Status::Received).with_data(|d| d.requested = vec![p.into()]),
        Event::build_request(br, Status::Planning),
        Event::partition(Some(br), p, Status::Requested),
        Event::build_request(br, Status::AnalysisCompleted),
        Event::job_run(br, run, "job", Status::Scheduled).with_data(|d| d.outputs = vec![p.into()]),
        Event::partition(Some(br), p, Status::Scheduled).with_run(run),
        Event::build_request(br, Status::Executing),
        Event::job_run(br, run, "job", Status::Running).with_data(|d| d.pid = Some(42)),
        Event::partition(Some(br), p, Status::Building).with_run(run),
        Event::job_run(br, run, "job", Status::Completed).with_data(|d| d.exit_code = Some(0)),
        Event::partition(Some(br), p, Status::Available)
            .with_run(run)
            .with_data(|d| d.data_version = Some("v1".into())),
        Event::build_request(br, Status::Completed),
    ]
}

fn a_build_projects_into_every_view(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let appended = store.append(build_events("b1", "r1", "a/1")).unwrap();
    let idx: Vec<i64> = appended.iter().map(|e| e.idx).collect();
    assert!(
        idx.windows(2).all(|w| w[0] < w[1]),
        "idx strictly increases"
    );
    assert_eq!(store.last_idx().unwrap(), *idx.last().unwrap());

    let p = store.partition("a/1").unwrap().unwrap();
    assert_eq!(p.status, Status::Available);
    assert_eq!(p.job_run_id.as_deref(), Some("r1"));
    assert_eq!(p.data_version.as_deref(), Some("v1"));
    assert!(store.partition("a/2").unwrap().is_none());

    let b = store.build_request("b1").unwrap().unwrap();
    assert_eq!(b.status, Status::Completed);
    assert_eq!(b.requested_partitions, ["a/1"]);
    let rp = store.request_partitions("b1").unwrap();
    assert_eq!(rp[0].status, Status::Available);

    let run = store.job_run("r1").unwrap().unwrap();
    assert_eq!(run.status, Status::Completed);
    assert_eq!(run.outputs, ["a/1"]);
    assert_eq!((run.exit_code, run.pid), (Some(0), Some(42)));
    assert!(run.duration_ms().unwrap() >= 0.0);

    let stats = store.job_stats(None).unwrap();
    assert_eq!(stats[0].job, "job");
    assert_eq!((stats[0].runs, stats[0].completed), (1, 1));
    assert_eq!(stats[0].success_rate, Some(1.0));
    assert!(stats[0].p95_ms.is_some());
}
on_every_backend!(a_build_projects_into_every_view);

/// Events read back exactly as appended, every column, whatever the batch's length (SQLite inserts
/// a batch as a few multi-row statements by its length's binary digits), and their `idx` keep
/// increasing across batches, a refused batch and another handle's writes (on SQLite, with no
/// gap).
fn events_read_back_as_appended_in_batches_of_any_length(backend: Backend) {
    let (fixture, store) = store_on(backend);
    let other = (fixture.open)();
    let mut expected = Vec::new();
    let mut builds = 0;
    for len in [1, 2, 3, 7, 32, 33, 45, 63, 64, 100] {
        let mut batch = Vec::new();
        while batch.len() < len {
            builds += 1;
            let p = format!("p/{builds}");
            batch.extend(build_events(
                &format!("b{builds}"),
                &format!("r{builds}"),
                &p,
            ));
        }
        batch.truncate(len);
        // The cut may leave a build unfinished: a run of another build can claim its
        // partitions later, but no test here needs it.
        let appended = store.append(batch).unwrap();
        expected.extend(appended);
        // Refused as a whole: it takes no `idx`.
        let refused = Event::job_run("nobody", "r-none", "job", Status::Completed);
        assert!(store.append(vec![refused]).is_err());
        // Another handle writes in between.
        builds += 1;
        let theirs = Event::build_request(&format!("b{builds}"), Status::Received)
            .with_data(|d| d.requested = vec![format!("q/{builds}")]);
        expected.extend(other.append(vec![theirs]).unwrap());
    }
    let idx: Vec<i64> = expected.iter().map(|e| e.idx).collect();
    assert!(idx.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
    if is_sqlite(store.as_ref()) {
        // PostgreSQL's sequence leaves the gaps of refused batches; SQLite's log has none.
        let first = idx[0];
        assert_eq!(idx, (first..first + idx.len() as i64).collect::<Vec<_>>());
    }
    assert_eq!(store.events(&EventFilter::default()).unwrap(), expected);
}
on_every_backend!(events_read_back_as_appended_in_batches_of_any_length);

/// A run scheduled and started in one batch (a claim, which PostgreSQL writes as one row) ends
/// with the same row as one scheduled and started in two batches, on every backend.
fn a_run_claimed_in_one_batch_has_the_row_of_one_claimed_in_two(backend: Backend) {
    let claim = |br: &str, run: &str, p: &str| {
        vec![
            Event::job_run(br, run, "job", Status::Scheduled).with_data(|d| {
                d.outputs = vec![p.into()];
                d.inputs = vec!["raw/1".into()];
                d.args = vec!["--x".into()];
                d.job_version = Some("jv".into());
            }),
            Event::job_run(br, run, "job", Status::Running).with_data(|d| {
                d.pid = Some(42);
                d.host = Some("h".into());
                d.owner = Some("h/42/1".into());
                d.log_path = Some(format!("/logs/{run}"));
                d.input_versions = [("raw/1".to_string(), "v9".to_string())].into();
                d.code_versions = [("jobs/x.sh".to_string(), "1a2b".to_string())].into();
            }),
        ]
    };
    let mut rows = Vec::new();
    let (_dir, store) = store_on(backend);
    store
        .append(vec![Event::build_request("b", Status::Received)])
        .unwrap();
    store.append(claim("b", "one", "p/1")).unwrap();
    for e in claim("b", "two", "p/2") {
        store.append(vec![e]).unwrap();
    }
    let one = store.job_run("one").unwrap().unwrap();
    let two = store.job_run("two").unwrap().unwrap();
    assert_eq!(one.status, Status::Running, "{}", store.location());
    assert_eq!(one.pid, Some(42));
    assert_eq!(
        one.input_versions.get("raw/1").map(String::as_str),
        Some("v9")
    );
    assert_eq!(
        one.code_versions.get("jobs/x.sh").map(String::as_str),
        Some("1a2b"),
        "{}",
        store.location()
    );
    assert!(one.started_at.is_some() && one.scheduled_at.is_some());
    let same = |mut r: JobRunRow| {
        r.job_run_id.clear();
        r.outputs.clear();
        r.log_path = None;
        (r.scheduled_at, r.started_at) = (None, None);
        format!("{r:?}")
    };
    assert_eq!(same(one), same(two), "{}", store.location());
    // Both runs are found as readers of what they read.
    let mut readers = store
        .readers("raw/1", None, Some("v9"), ReadersOf::Data, 10)
        .unwrap();
    readers.sort();
    assert_eq!(readers, ["one", "two"], "{}", store.location());
    rows.push(same(store.job_run("one").unwrap().unwrap()));
    rows.dedup();
    assert_eq!(rows.len(), 1, "the backends' rows differ: {rows:?}");
}
on_every_backend!(a_run_claimed_in_one_batch_has_the_row_of_one_claimed_in_two);

/// A run claimed `queued` has what its claim fixed and no `started_at`; its `running` (alone, or
/// in its claim's batch) sets `started_at` to when it started and keeps the rest; one cancelled
/// while queued never started. Unfinished runs include the queued.
fn a_queued_run_starts_with_its_running(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let scheduled = |run: &str| {
        Event::job_run("b", run, "job", Status::Scheduled)
            .with_data(|d| d.outputs = vec![format!("p/{run}")])
    };
    let queued = |run: &str| {
        Event::job_run("b", run, "job", Status::Queued).with_data(|d| {
            d.pid = Some(42);
            d.owner = Some("h/42/1".into());
            d.log_path = Some(format!("/logs/{run}"));
            d.input_versions = [("raw/1".to_string(), "v9".to_string())].into();
        })
    };
    let running = |run: &str, at: i64| {
        let mut e = Event::job_run("b", run, "job", Status::Running);
        e.timestamp = at;
        e
    };
    store
        .append(vec![Event::build_request("b", Status::Received)])
        .unwrap();
    store.append(vec![scheduled("one"), queued("one")]).unwrap();
    store
        .append(vec![scheduled("two"), queued("two"), running("two", 77)])
        .unwrap();
    store
        .append(vec![scheduled("three"), queued("three")])
        .unwrap();
    let one = store.job_run("one").unwrap().unwrap();
    assert_eq!(
        (one.status, one.started_at),
        (Status::Queued, None),
        "{}",
        store.location()
    );
    assert_eq!(one.log_path.as_deref(), Some("/logs/one"));
    let unfinished = store
        .job_runs(&RunQuery {
            unfinished: true,
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(unfinished.len(), 3, "{}", store.location());
    store.append(vec![running("one", 55)]).unwrap();
    for (run, at) in [("one", 55), ("two", 77)] {
        let row = store.job_run(run).unwrap().unwrap();
        assert_eq!(
            (row.status, row.started_at),
            (Status::Running, Some(at)),
            "{run} {}",
            store.location()
        );
        assert_eq!(row.pid, Some(42));
        assert_eq!(row.log_path, Some(format!("/logs/{run}")));
        assert_eq!(
            row.input_versions.get("raw/1").map(String::as_str),
            Some("v9")
        );
    }
    store
        .append(vec![Event::job_run("b", "three", "job", Status::Cancelled)
            .with_data(|d| d.not_started = true)])
        .unwrap();
    let three = store.job_run("three").unwrap().unwrap();
    assert_eq!((three.status, three.started_at), (Status::Cancelled, None));
    let problems = databuild_log::check_store(store.as_ref()).unwrap().problems;
    assert!(problems.is_empty(), "{problems:?}");
}
on_every_backend!(a_queued_run_starts_with_its_running);

/// A brief listing of a build's runs has all but what each run read and ran with.
fn a_brief_run_listing_leaves_out_what_runs_read_and_ran_with(backend: Backend) {
    let (_dir, store) = store_on(backend);
    store.append(reading_events("b", "r", Some("r0"))).unwrap();
    let query = |brief| RunQuery {
        build_request_id: Some("b".into()),
        brief,
        limit: 10,
        ..Default::default()
    };
    let whole = store.job_runs(&query(false)).unwrap().remove(0);
    let brief = store.job_runs(&query(true)).unwrap().remove(0);
    assert!(!whole.input_versions.is_empty() && !whole.input_runs.is_empty());
    assert!(brief.input_versions.is_empty() && brief.input_runs.is_empty());
    assert!(brief.inputs.is_empty() && brief.args.is_empty() && brief.env.is_empty());
    let light = |r: &JobRunRow| {
        (
            r.job_run_id.clone(),
            r.status,
            r.outputs.clone(),
            r.scheduled_at,
            r.started_at,
            r.ended_at,
            r.pid,
            r.log_path.clone(),
        )
    };
    assert_eq!(light(&whole), light(&brief), "{}", store.location());
}
on_every_backend!(a_brief_run_listing_leaves_out_what_runs_read_and_ran_with);

/// A run's recipe (what planning reads of it) is exactly that part of its whole row, and ids that
/// have no run are left out.
fn a_runs_recipe_is_that_part_of_its_row(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let mut events = reading_events("b", "r", Some("r0"));
    for e in &mut events {
        if e.kind == Kind::JobRun && e.status == Status::Scheduled {
            e.data.args = vec!["--day".into(), "1".into()];
            e.data.env = [("Z".to_string(), "1".to_string()), ("A".into(), "2".into())]
                .into_iter()
                .collect();
        }
        if e.kind == Kind::JobRun && e.status == Status::Running {
            e.data.code_versions = [("@definition".to_string(), "d".to_string())].into();
        }
    }
    store.append(events).unwrap();
    let whole = store.job_run("r").unwrap().expect("the run");
    let recipes = store.run_recipes(&["nope", "r"]).unwrap();
    assert_eq!(
        recipes,
        [RunRecipe::from(whole.clone())],
        "{}",
        store.location()
    );
    let recipe = &recipes[0];
    assert_eq!(recipe.job_version, whole.job_version);
    assert_eq!(&*recipe.args, ["--day", "1"]);
    assert_eq!(
        &*recipe.code_versions,
        [("@definition".to_string(), "d".to_string())]
    );
    assert_eq!(
        recipe
            .env
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>(),
        ["A", "Z"]
    );
    assert_eq!(recipe.read("a/1").map(String::as_str), Some("v1"));
    assert_eq!(recipe.read("raw/1").map(String::as_str), Some("x"));
    assert_eq!(recipe.read("b/1"), None);
}
on_every_backend!(a_runs_recipe_is_that_part_of_its_row);

/// A build's partitions read a page at a time, in ref order, from a cursor: what the build's
/// detail shows of a backfill instead of all of its rows.
fn a_builds_partitions_are_read_a_page_at_a_time(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let refs: Vec<String> = (0..25).map(|i| format!("a/{i:02}")).collect();
    let mut events = vec![
        Event::build_request("b1", Status::Received).with_data(|d| d.requested = refs.clone()),
        Event::build_request("b1", Status::Planning),
    ];
    events.extend(
        refs.iter()
            .map(|r| Event::partition(Some("b1"), r, Status::Requested)),
    );
    store.append(events).unwrap();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .request_partitions_page("b1", after.as_deref(), 10)
            .unwrap();
        assert!(page.len() <= 10);
        let Some(last) = page.last() else { break };
        after = Some(last.partition_ref.clone());
        seen.extend(page.into_iter().map(|p| p.partition_ref));
    }
    assert_eq!(
        seen,
        refs,
        "every row once, in order ({})",
        store.location()
    );
    assert!(store
        .request_partitions_page("other", None, 10)
        .unwrap()
        .is_empty());
}
on_every_backend!(a_builds_partitions_are_read_a_page_at_a_time);

/// Ids people type: a prefix of an id (the key), or its short form (the last 8 characters),
/// found through indexes; several matches are all given (up to the limit).
fn ids_are_found_by_prefix_and_by_short_form(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let ids = [
        "01a233f1-c706-70b6-ba8f-81f71eeeff77",
        "01a233f1-c706-70b6-ba8f-81f7aaaaaaaa",
        "01a233f9-27ab-7605-8d32-0d6f15fb4ee9",
    ];
    for (i, br) in ids.iter().enumerate() {
        store
            .append(build_events(
                br,
                &format!("run-{i}-{br}"),
                &format!("a/{i}"),
            ))
            .unwrap();
    }
    let find = |kind, text: &str| {
        let mut found = store.ids_matching(kind, text, 10).unwrap();
        found.sort();
        found
    };
    assert_eq!(find(IdKind::BuildRequest, "01a233f9"), [ids[2]]);
    assert_eq!(find(IdKind::BuildRequest, "01a233f1"), [ids[0], ids[1]]);
    assert_eq!(find(IdKind::BuildRequest, "1eeeff77"), [ids[0]]);
    assert_eq!(find(IdKind::BuildRequest, ids[1]), [ids[1]]);
    assert!(find(IdKind::BuildRequest, "01a233f2").is_empty());
    assert!(
        find(IdKind::BuildRequest, "eeeff77").is_empty(),
        "a short form is whole"
    );
    assert_eq!(find(IdKind::JobRun, "run-2"), [format!("run-2-{}", ids[2])]);
    assert_eq!(
        find(IdKind::JobRun, "15fb4ee9"),
        [format!("run-2-{}", ids[2])]
    );
    assert_eq!(
        store
            .ids_matching(IdKind::BuildRequest, "01a2", 2)
            .unwrap()
            .len(),
        2
    );
    assert_eq!(databuild_log::short_id(ids[0]), "1eeeff77");
}
on_every_backend!(ids_are_found_by_prefix_and_by_short_form);

fn a_refused_event_loses_its_whole_batch_and_says_why(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let mut events = build_events("b1", "r1", "a/1");
    events.insert(3, Event::build_request("b1", Status::Completed));
    let err = store.append(events).unwrap_err();
    assert_eq!(
        err.to_string(),
        "event refused: build request b1 cannot go to `completed` from `planning` (event 3 of its batch: build_request `completed`)"
    );
    assert_eq!(
        store.last_idx().unwrap(),
        0,
        "nothing of the batch was written"
    );
    assert!(store.build_request("b1").unwrap().is_none());
}
on_every_backend!(a_refused_event_loses_its_whole_batch_and_says_why);

fn a_partition_is_claimed_by_one_run_at_a_time_even_across_handles(backend: Backend) {
    let (fixture, store) = store_on(backend);
    let other = (fixture.open)();
    let start = |br: &str, run: &str| {
        vec![
            Event::build_request(br, Status::Received),
            Event::job_run(br, run, "job", Status::Scheduled),
            Event::partition(Some(br), "a/1", Status::Scheduled).with_run(run),
            Event::job_run(br, run, "job", Status::Running),
            Event::partition(Some(br), "a/1", Status::Building).with_run(run),
        ]
    };
    store.append(start("b1", "r1")).unwrap();
    let err = other.append(start("b2", "r2")).unwrap_err();
    assert!(
        err.to_string()
            .contains("partition a/1 is already being built by run r1"),
        "{err}"
    );
    // Once r1 is done, another run may rebuild it.
    store
        .append(vec![
            Event::partition(Some("b1"), "a/1", Status::Failed).with_run("r1")
        ])
        .unwrap();
    other.append(start("b2", "r2")).unwrap();
    assert_eq!(
        other
            .partition("a/1")
            .unwrap()
            .unwrap()
            .job_run_id
            .as_deref(),
        Some("r2")
    );
}
on_every_backend!(a_partition_is_claimed_by_one_run_at_a_time_even_across_handles);

/// Handles writing at the same time, one commit each per run as builds do, lose nothing: every
/// event is there once, in one order all handles agree on, and the projections match it.
fn handles_appending_at_once_lose_nothing(backend: Backend) {
    let (fixture, store) = store_on(backend);
    let writers = 3;
    let builds = 60;
    std::thread::scope(|scope| {
        for w in 0..writers {
            let handle = (fixture.open)();
            scope.spawn(move || {
                for b in 0..builds {
                    let events = build_events(
                        &format!("w{w}-b{b}"),
                        &format!("w{w}-r{b}"),
                        &format!("w{w}/{b}"),
                    );
                    for commit in events.chunks(3) {
                        handle.append(commit.to_vec()).unwrap();
                    }
                }
            });
        }
    });
    let per_build = build_events("b", "r", "p").len();
    let all = store.events(&EventFilter::default()).unwrap();
    assert_eq!(all.len(), writers * builds * per_build);
    assert!(all.windows(2).all(|p| p[0].idx < p[1].idx));
    let ids: std::collections::HashSet<_> = all.iter().map(|e| &e.event_id).collect();
    assert_eq!(ids.len(), all.len());
    let report = databuild_log::check_store(store.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let built = store
        .partitions(&PartitionQuery {
            status: Some(Status::Available),
            limit: 1000,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(built.len(), writers * builds);
}
on_every_backend!(handles_appending_at_once_lose_nothing);

fn events_filter_and_page(backend: Backend) {
    let (_dir, store) = store_on(backend);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    store.append(build_events("b2", "r2", "a/2")).unwrap();
    let all = store.events(&EventFilter::default()).unwrap();
    assert_eq!(all.len(), 24);
    let by_build = store
        .events(&EventFilter {
            build_request_id: Some("b2".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_build.len(), 12);
    let by_part = store
        .events(&EventFilter {
            partition_ref: Some("a/1".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_part.len(), 4);
    let by_job = store
        .events(&EventFilter {
            job: Some("job".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_job.len(), 6);
    let page = store
        .events(&EventFilter {
            since: Some(all[9].idx),
            limit: Some(3),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        page.iter().map(|e| e.idx).collect::<Vec<_>>(),
        [all[10].idx, all[11].idx, all[12].idx]
    );
    let timed = store
        .events(&EventFilter {
            from: Some(all[12].timestamp),
            to: Some(all[13].timestamp + 1),
            ..Default::default()
        })
        .unwrap();
    assert!(timed.iter().all(|e| e.timestamp >= all[12].timestamp));
    assert!(!timed.is_empty());
    assert_eq!(all[0].data.requested, ["a/1"]);
}
on_every_backend!(events_filter_and_page);

/// `newest_first` reads a filter's last events from the log's end: a starting service's read of
/// the newest alert deliveries, with the event each was sent for.
fn the_newest_events_of_a_kind_are_read_last_first(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let delivery = |name: &str, fired_by| {
        Event::alert(name, fired_by, Status::Completed, 1, "delivered".into())
    };
    store.append(vec![delivery("a", 1)]).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    store
        .append(vec![delivery("a", 2), delivery("b", 2)])
        .unwrap();
    store.append(build_events("b2", "r2", "a/2")).unwrap();
    let newest = store
        .events(&EventFilter {
            kind: Some(Kind::Alert),
            newest_first: true,
            limit: Some(2),
            ..Default::default()
        })
        .unwrap();
    let read: Vec<_> = newest
        .iter()
        .map(|e| (e.data.alert.as_deref().unwrap(), e.data.fired_by.unwrap()))
        .collect();
    assert_eq!(read, [("b", 2), ("a", 2)]);
    assert!(newest[0].idx > newest[1].idx);
}
on_every_backend!(the_newest_events_of_a_kind_are_read_last_first);

fn partitions_list_by_glob_and_status_with_keyset_pages(backend: Backend) {
    let (_dir, store) = store_on(backend);
    for i in 0..5 {
        store
            .append(build_events(
                &format!("b{i}"),
                &format!("r{i}"),
                &format!("a/{i}"),
            ))
            .unwrap();
    }
    store.append(build_events("bx", "rx", "other/1")).unwrap();
    store
        .append(vec![Event::partition(None, "a/3", Status::Tainted)])
        .unwrap();
    let q = |pattern: Option<&str>, status: Option<Status>, after: Option<&str>| {
        store
            .partitions(&PartitionQuery {
                pattern: pattern.map(str::to_string),
                status,
                limit: 2,
                after: after.map(str::to_string),
            })
            .unwrap()
            .into_iter()
            .map(|p| p.partition_ref)
            .collect::<Vec<_>>()
    };
    assert_eq!(q(Some("a/*"), None, None), ["a/0", "a/1"]);
    assert_eq!(q(Some("a/*"), None, Some("a/1")), ["a/2", "a/3"]);
    assert_eq!(q(None, Some(Status::Tainted), None), ["a/3"]);
    let counts = store.partition_counts(Some("a/*")).unwrap();
    assert_eq!(counts[&Status::Available], 4);
    assert_eq!(counts[&Status::Tainted], 1);
}
on_every_backend!(partitions_list_by_glob_and_status_with_keyset_pages);

fn sql_reads_but_refuses_everything_else(backend: Backend) {
    let (_dir, store) = store_on(backend);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    let limits = SqlLimits::default();
    let r = store
        .sql("SELECT partition_ref, status FROM partition_status", limits)
        .unwrap();
    assert_eq!(r.columns, ["partition_ref", "status"]);
    assert_eq!(
        r.rows,
        [[serde_json::json!("a/1"), serde_json::json!("live")]]
    );
    for view in [
        "job_run_durations",
        "build_request_summary",
        "events_per_hour",
    ] {
        store.sql(&format!("SELECT * FROM {view}"), limits).unwrap();
    }
    let mut refused = vec![
        ("DELETE FROM events", "read"),
        ("INSERT INTO meta VALUES ('x', 'y')", "read"),
        ("DROP TABLE events", "read"),
        ("SELECT 1; DELETE FROM events", "one statement"),
        ("SELEC 1", "failed"),
    ];
    if is_sqlite(store.as_ref()) {
        refused.extend([
            ("ATTACH DATABASE '/tmp/x.db' AS x", "refused"),
            ("PRAGMA journal_mode = DELETE", "refused"),
            ("SELECT load_extension('/tmp/evil')", "refused"),
        ]);
    } else {
        refused.extend([
            ("UPDATE meta SET value = 'x'", "read"),
            ("SELECT pg_sleep(5)", "stopped"),
        ]);
    }
    for (q, needle) in refused {
        let limits = SqlLimits {
            timeout: std::time::Duration::from_secs(1),
            ..limits
        };
        let err = store.sql(q, limits).unwrap_err();
        assert!(matches!(err, LogError::Sql(_)), "{q}: {err}");
        assert!(err.to_string().contains(needle), "{q}: {err}");
    }
    assert_eq!(store.last_idx().unwrap(), 12, "nothing changed");
    let endless = if is_sqlite(store.as_ref()) {
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    } else {
        "SELECT pg_sleep(30)"
    };
    let slow = store.sql(
        endless,
        SqlLimits {
            max_rows: 10,
            timeout: std::time::Duration::from_millis(200),
            ..Default::default()
        },
    );
    assert!(slow.unwrap_err().to_string().contains("was stopped"));
    let capped = store
        .sql(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) SELECT i FROM n",
            SqlLimits { max_rows: 10, ..limits },
        )
        .unwrap();
    assert_eq!(capped.rows.len(), 10);
    assert!(capped.truncated);
}
on_every_backend!(sql_reads_but_refuses_everything_else);

/// A query building a huge value is refused as it builds it, quickly, naming the limit: the
/// value never reaches the result (SQLite: SQLITE_LIMIT_LENGTH; PostgreSQL: checked on the server
/// before it ships).
fn sql_refuses_a_value_longer_than_its_limit(backend: Backend) {
    let (_f, store) = store_on(backend);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    let sqlite = is_sqlite(store.as_ref());
    let long = |n: usize| match sqlite {
        true => format!("SELECT printf('%.*c', {n}, 'x') AS v FROM events LIMIT 8"),
        false => format!("SELECT repeat('x', {n}) AS v FROM events LIMIT 8"),
    };
    let started = std::time::Instant::now();
    let err = store
        .sql(&long(100_000_000), SqlLimits::default())
        .unwrap_err();
    assert!(matches!(err, LogError::SqlTooLarge(_)), "{err}");
    assert!(
        err.to_string().starts_with(
            "a value in the result would be longer than 1 MiB (the limit on one value)"
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let limits = SqlLimits {
        max_value_len: 2000,
        ..Default::default()
    };
    let short = store.sql(&long(1000), limits).unwrap();
    assert_eq!(short.rows.len(), 8);
    assert_eq!(short.rows[0][0].as_str().unwrap().len(), 1000);
    let err = store.sql(&long(3000), limits).unwrap_err();
    assert!(err.to_string().contains("longer than 2000 bytes"), "{err}");
}
on_every_backend!(sql_refuses_a_value_longer_than_its_limit);

/// A value the log holds that is longer than a result may hold (the inputs of a run reading tens
/// of thousands of partitions) can still be measured and cut by the query; only returning it
/// whole is refused.
fn sql_reads_a_stored_value_longer_than_a_result_holds_in_parts(backend: Backend) {
    let (_f, store) = store_on(backend);
    let inputs: Vec<String> = (0..50_000)
        .map(|i| format!("raw/partition={i:08}"))
        .collect();
    let mut events = build_events("b1", "r1", "a/1");
    events[4] = Event::job_run("b1", "r1", "job", Status::Scheduled).with_data(|d| {
        d.outputs = vec!["a/1".into()];
        d.inputs = inputs.clone();
    });
    store.append(events).unwrap();
    let measured = store
        .sql(
            "SELECT length(inputs), substr(inputs, 1, 5) FROM job_runs WHERE job_run_id = 'r1'",
            SqlLimits::default(),
        )
        .unwrap();
    let length = measured.rows[0][0].as_i64().unwrap();
    assert!(length > 1 << 20, "{length}");
    assert_eq!(measured.rows[0][1], "[\"raw");
    let whole = store.sql(
        "SELECT inputs FROM job_runs WHERE job_run_id = 'r1'",
        SqlLimits::default(),
    );
    assert!(matches!(whole, Err(LogError::SqlTooLarge(_))), "{whole:?}");
}
on_every_backend!(sql_reads_a_stored_value_longer_than_a_result_holds_in_parts);

/// A result past `max_bytes` is refused, not cut: the message names the cap and how to narrow
/// the query.
fn sql_refuses_a_result_larger_than_its_byte_cap(backend: Backend) {
    let (_f, store) = store_on(backend);
    let wide = match is_sqlite(store.as_ref()) {
        true => "printf('%.*c', 100, 'x')",
        false => "repeat('x', 100)",
    };
    let query = |n: usize| {
        format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) \
             SELECT i, {wide} AS v FROM n"
        )
    };
    let limits = SqlLimits {
        max_bytes: 10 * 1024,
        ..Default::default()
    };
    let err = store.sql(&query(1000), limits).unwrap_err();
    assert!(matches!(err, LogError::SqlTooLarge(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("larger than 10 KiB (the limit on one result)"),
        "{message}"
    );
    assert!(
        message.contains("LIMIT") && message.contains("fewer columns"),
        "{message}"
    );
    let fits = store.sql(&query(50), limits).unwrap();
    assert_eq!(fits.rows.len(), 50);
    assert!(!fits.truncated);
    // The row cap still cuts first, and says so.
    let capped = store
        .sql(
            &query(1000),
            SqlLimits {
                max_rows: 20,
                ..limits
            },
        )
        .unwrap();
    assert_eq!((capped.rows.len(), capped.truncated), (20, true));
}
on_every_backend!(sql_refuses_a_result_larger_than_its_byte_cap);

/// One function call doing a lot of work stops by the deadline: SQLite's progress handler does
/// not run inside a call, so the value limit and the interrupt do it; PostgreSQL's statement
/// timeout does.
fn sql_stops_a_heavy_function_call_by_its_deadline(backend: Backend) {
    let (_f, store) = store_on(backend);
    let heavy: &[&str] = match is_sqlite(store.as_ref()) {
        true => &["SELECT replace(hex(zeroblob(200000000)), '0', 'aa')"],
        false => &[
            "SELECT repeat(md5('x'), 50000000)",
            "SELECT length(regexp_replace(repeat('ab', 40000000), 'a', 'xyz', 'g'))",
        ],
    };
    let limits = SqlLimits {
        timeout: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    for q in heavy {
        let started = std::time::Instant::now();
        let err = store.sql(q, limits).unwrap_err();
        let took = started.elapsed();
        assert!(
            took < limits.timeout + std::time::Duration::from_secs(2),
            "{q}: {took:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("was stopped")
                || message.contains("too large")
                || message.contains("longer than"),
            "{q}: {message}"
        );
    }
}
on_every_backend!(sql_stops_a_heavy_function_call_by_its_deadline);

/// However a store bounds the result (PostgreSQL runs the query as a subquery), values keep
/// their JSON types and the query's order, repeated names stay, and a trailing `;` or comment
/// is no error.
fn sql_results_keep_their_types_names_and_order(backend: Backend) {
    let (_f, store) = store_on(backend);
    let limits = SqlLimits::default();
    let r = store
        .sql("SELECT 1 AS a, 1.5 AS b, 'x' AS a, NULL AS d;  ", limits)
        .unwrap();
    assert_eq!(r.columns, ["a", "b", "a", "d"]);
    assert_eq!(
        r.rows,
        [serde_json::json!([1, 1.5, "x", null])
            .as_array()
            .unwrap()
            .clone()]
    );
    let r = store
        .sql(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) \
             SELECT i FROM n ORDER BY i DESC -- newest first",
            limits,
        )
        .unwrap();
    let order: Vec<i64> = r.rows.iter().map(|r| r[0].as_i64().unwrap()).collect();
    assert_eq!(order, [5, 4, 3, 2, 1]);
    // Past one fetch of rows (PostgreSQL fetches 1,000 at a time).
    let many = store
        .sql(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500) \
             SELECT i FROM n ORDER BY i",
            limits,
        )
        .unwrap();
    assert_eq!((many.rows.len(), many.truncated), (2500, false));
    assert_eq!(many.rows[2499][0], serde_json::json!(2500));
    let cut = store
        .sql(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500) \
             SELECT i FROM n ORDER BY i",
            SqlLimits {
                max_rows: 2000,
                ..limits
            },
        )
        .unwrap();
    assert_eq!((cut.rows.len(), cut.truncated), (2000, true));
    if !is_sqlite(store.as_ref()) {
        let r = store
            .sql("SELECT true AS t, false AS f, ARRAY[1, 2] AS a", limits)
            .unwrap();
        assert_eq!(
            r.rows[0],
            serde_json::json!([true, false, "{1,2}"])
                .as_array()
                .unwrap()
                .clone()
        );
    }
}
on_every_backend!(sql_results_keep_their_types_names_and_order);

#[test]
fn bad_log_files_get_clear_errors_and_are_never_reset() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let err = SqliteStore::open(&garbage).err().unwrap().to_string();
    assert!(err.contains("not an SQLite database"), "{err}");
    assert_eq!(
        std::fs::read(&garbage).unwrap(),
        vec![0x5a; 8192],
        "left untouched"
    );

    let foreign = dir.path().join("foreign.db");
    rusqlite_touch(&foreign);
    let err = SqliteStore::open(&foreign).err().unwrap().to_string();
    assert!(err.contains("not a DataBuild event log"), "{err}");

    let err = SqliteStore::open(&dir.path().join("no/such/dir/events.db"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");

    let newer = dir.path().join("newer.db");
    drop(SqliteStore::open(&newer).unwrap());
    set_schema_version(&newer, 99);
    let err = SqliteStore::open(&newer).err().unwrap();
    assert!(
        matches!(err, LogError::NewerSchema { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade databuild"));
}

#[test]
fn reopening_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.db");
    SqliteStore::open(&path)
        .unwrap()
        .append(build_events("b1", "r1", "a/1"))
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.last_idx().unwrap(), 12);
    assert_eq!(
        store.partition("a/1").unwrap().unwrap().status,
        Status::Available
    );
}

/// Runs `sql` on the log file from another process (Python's sqlite3), as a user or another tool
/// would.
fn sqlite_exec(path: &std::path::Path, sql: &str) {
    let ok = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()",
        ])
        .arg(path)
        .arg(sql)
        .status()
        .unwrap()
        .success();
    assert!(ok, "{sql}");
}

fn rusqlite_touch(path: &std::path::Path) {
    sqlite_exec(path, "create table t (x)");
}

fn set_schema_version(path: &std::path::Path, v: i64) {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('update meta set value = ? where key = \"schema_version\"', (sys.argv[2],)); c.commit()"])
        .arg(path)
        .arg(v.to_string())
        .status()
        .unwrap();
    assert!(out.success());
}

#[path = "../src/testing.rs"]
mod testing;
use testing::arb_event;

/// The store's projections hold what the reference replay holds, and its counts a recount.
fn store_matches(
    store: &dyn EventStore,
    replay: &Replay,
) -> std::result::Result<(), TestCaseError> {
    for (r, (status, run)) in &replay.partitions {
        let row = store.partition(r).unwrap().unwrap();
        prop_assert_eq!(row.status, *status);
        prop_assert_eq!(&row.job_run_id, run);
    }
    for (id, status) in &replay.build_requests {
        prop_assert_eq!(store.build_request(id).unwrap().unwrap().status, *status);
    }
    for (id, status) in &replay.job_runs {
        prop_assert_eq!(store.job_run(id).unwrap().unwrap().status, *status);
    }
    let problems = databuild_log::check_store(store).unwrap().problems;
    prop_assert!(problems.is_empty(), "{:?}", problems);
    Ok(())
}

/// The store accepts exactly what the reference replay accepts, and its projections agree.
fn store_agrees_with_replay(
    backend: Backend,
    events: Vec<Event>,
) -> std::result::Result<(), TestCaseError> {
    let (_dir, store) = store_on(backend);
    let mut replay = Replay::default();
    for e in &events {
        let expected = replay.apply(e).is_ok();
        let got = store.append(vec![e.clone()]).is_ok();
        prop_assert_eq!(expected, got, "{:?}", e);
    }
    store_matches(store.as_ref(), &replay)
}

/// The same in batches: a batch is taken whole or refused whole, and what a batch changes
/// several times (a run scheduled, started and finished) ends as the replay says.
fn store_agrees_with_replay_in_batches(
    backend: Backend,
    events: Vec<Event>,
    size: usize,
) -> std::result::Result<(), TestCaseError> {
    let (_dir, store) = store_on(backend);
    let mut replay = Replay::default();
    for batch in events.chunks(size) {
        let mut after = replay.clone();
        let expected = batch.iter().all(|e| after.apply(e).is_ok());
        let got = store.append(batch.to_vec()).is_ok();
        prop_assert_eq!(expected, got, "{:?}", batch);
        if expected {
            replay = after;
        }
    }
    store_matches(store.as_ref(), &replay)
}

/// The two properties above as `on_every_backend!` makes a test: on SQLite always, on
/// PostgreSQL when asked for.
mod store_agrees_with_replay {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn sqlite(events in proptest::collection::vec(arb_event(), 0..40)) {
            store_agrees_with_replay(Backend::Sqlite, events)?;
        }

        #[test]
        #[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
        fn postgres(events in proptest::collection::vec(arb_event(), 0..40)) {
            store_agrees_with_replay(Backend::Postgres, events)?;
        }
    }
}

mod store_agrees_with_replay_in_batches {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn sqlite(events in proptest::collection::vec(arb_event(), 0..60), size in 2usize..8) {
            store_agrees_with_replay_in_batches(Backend::Sqlite, events, size)?;
        }

        #[test]
        #[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
        fn postgres(events in proptest::collection::vec(arb_event(), 0..60), size in 2usize..8) {
            store_agrees_with_replay_in_batches(Backend::Postgres, events, size)?;
        }
    }
}

#[test]
fn an_empty_sqlite_file_is_migrated_to_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    let ok = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('pragma user_version = 0')",
        ])
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let store = SqliteStore::open(&path).unwrap();
    let v = store
        .sql(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            SqlLimits::default(),
        )
        .unwrap();
    assert_eq!(
        v.rows[0][0],
        serde_json::json!(sqlite::SCHEMA_VERSION.to_string())
    );
    store.append(build_events("b1", "r1", "a/1")).unwrap();
}

/// `b/1`'s run read `a/1` as run `r1` built it (and `raw/1` at a data version).
fn reading_events(br: &str, run: &str, input_run: Option<&str>) -> Vec<Event> {
    let mut events = build_events(br, run, "b/1");
    for e in &mut events {
        if e.kind == Kind::JobRun && e.status == Status::Running {
            e.data.input_versions = [("a/1".into(), "v1".into()), ("raw/1".into(), "x".into())]
                .into_iter()
                .collect();
            e.data.input_runs = input_run
                .map(|r| [("a/1".to_string(), r.to_string())].into_iter().collect())
                .unwrap_or_default();
        }
    }
    events
}

/// The reverse index of what runs read: by the run that built the instance, or by an external's
/// data version; another instance of the same partition has other readers.
fn the_readers_of_an_instance_are_found_by_its_run_or_version(backend: Backend) {
    let (_dir, store) = store_on(backend);
    let at = store.location();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    store
        .append(reading_events("b2", "r2", Some("r1")))
        .unwrap();
    store.append(build_events("b3", "r3", "a/1")).unwrap();
    assert_eq!(
        store
            .readers("a/1", Some("r1"), None, ReadersOf::Instance, 10)
            .unwrap(),
        ["r2"],
        "{at}"
    );
    // Another instance: its own readers (none), and by its version those of the same data.
    assert!(
        store
            .readers("a/1", Some("r3"), None, ReadersOf::Data, 10)
            .unwrap()
            .is_empty(),
        "{at}"
    );
    assert_eq!(
        store
            .readers("a/1", Some("r3"), Some("v1"), ReadersOf::Data, 10)
            .unwrap(),
        ["r2"],
        "{at}"
    );
    assert!(
        store
            .readers("a/1", Some("r3"), Some("v2"), ReadersOf::Data, 10)
            .unwrap()
            .is_empty(),
        "{at}"
    );
    assert_eq!(
        store
            .readers("raw/1", None, Some("x"), ReadersOf::Instance, 10)
            .unwrap(),
        ["r2"],
        "{at}"
    );
    assert!(
        store
            .readers("raw/1", None, Some("y"), ReadersOf::Instance, 10)
            .unwrap()
            .is_empty(),
        "{at}"
    );
    let run = store.job_run("r2").unwrap().unwrap();
    assert_eq!(
        run.input_runs.get("a/1").map(String::as_str),
        Some("r1"),
        "{at}"
    );
}
on_every_backend!(the_readers_of_an_instance_are_found_by_its_run_or_version);

/// A version 7 log gains lineage in place: what its runs read is indexed by data version (the
/// runs that built those inputs were not recorded), and new runs record them.
#[test]
fn a_version_7_log_gains_the_readers_index_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    store.append(reading_events("b2", "r2", None)).unwrap();
    drop(store);
    sqlite_exec(
        &path,
        &format!(
            "{UNDO_V15} {UNDO_V9_V13} drop table run_inputs; alter table job_runs drop column input_runs;
             update meta set value = 7 where key = 'schema_version';"
        ),
    );
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store
            .readers("a/1", Some("r1"), Some("v1"), ReadersOf::Instance, 10)
            .unwrap(),
        ["r2"]
    );
    assert_eq!(
        store
            .readers("raw/1", None, Some("x"), ReadersOf::Instance, 10)
            .unwrap(),
        ["r2"]
    );
    store.append(build_events("b3", "r3", "a/1")).unwrap();
    store
        .append(reading_events("b4", "r4", Some("r3")))
        .unwrap();
    assert_eq!(
        store
            .readers("a/1", Some("r3"), None, ReadersOf::Data, 10)
            .unwrap(),
        ["r4"]
    );
    let report = databuild_log::check_store(&store).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// What schema version 13 added, undone (to make a log of version 12).
const UNDO_V13: &str = "alter table job_runs drop column code_versions;
     alter table partition_checks drop column code_versions;";

/// What schema versions 13, 12, 11, 10 and 9 added, undone (to make a log of version 8 or older).
const UNDO_V9_V13: &str =
    "alter table job_runs drop column code_versions; alter table wants drop column retry_at; drop index events_of_delegations; drop index events_of_checks; drop table plan_cache; drop view check_results; drop view partition_status; drop table partition_checks;
     CREATE VIEW partition_status AS
     SELECT partition_ref, CASE status WHEN 'available' THEN 'live' ELSE status END AS status,
            job, build_request_id, job_run_id, data_version,
            datetime(updated_at / 1000000000, 'unixepoch') AS updated
     FROM partitions;";

fn arrival_at(dataset: &str, r: &str, at: i64) -> Event {
    let mut e = Event::arrival(dataset, r, Some(format!("v-{r}")));
    e.timestamp = at;
    e
}

/// An external partition's first sighting is kept, a later one of the same ref changes nothing;
/// a dataset's latest arrivals read latest first, and a batch of refs reads those that have one.
/// The replay agrees, and anything else of the event is refused.
fn arrivals_keep_the_first_sighting_and_read_by_dataset(backend: Backend) {
    let (_f, store) = store_on(backend);
    store
        .append(vec![
            arrival_at("raw", "raw/1", 100),
            arrival_at("raw", "raw/2", 300),
            arrival_at("other", "other/1", 200),
        ])
        .unwrap();
    store.append(vec![arrival_at("raw", "raw/1", 900)]).unwrap();
    store.append(vec![arrival_at("raw", "raw/3", 500)]).unwrap();
    let recent = store.recent_arrivals("raw", 2).unwrap();
    let refs: Vec<(&str, i64)> = recent
        .iter()
        .map(|a| (a.partition_ref.as_str(), a.arrived_at))
        .collect();
    assert_eq!(refs, [("raw/3", 500), ("raw/2", 300)]);
    assert_eq!(recent[0].data_version.as_deref(), Some("v-raw/3"));
    let mut of = store
        .arrivals_of(&["raw/1", "nothing/1", "other/1"])
        .unwrap();
    of.sort_by(|a, b| a.partition_ref.cmp(&b.partition_ref));
    let found: Vec<(&str, &str, i64)> = of
        .iter()
        .map(|a| (a.partition_ref.as_str(), a.dataset.as_str(), a.arrived_at))
        .collect();
    assert_eq!(found, [("other/1", "other", 200), ("raw/1", "raw", 100)]);
    let mut under_a_build = arrival_at("raw", "raw/9", 1);
    under_a_build.build_request_id = Some("b".into());
    let mut no_dataset = arrival_at("raw", "raw/9", 1);
    no_dataset.data.dataset = None;
    for bad in [under_a_build, no_dataset] {
        assert!(store.append(vec![bad]).is_err());
    }
    let report = databuild_log::check_store(store.as_ref()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
on_every_backend!(arrivals_keep_the_first_sighting_and_read_by_dataset);

fn late_at(dataset: &str, r: &str, at: i64) -> Event {
    let mut e = Event::late_arrival(dataset, r, format!("{r} expected by …"));
    e.timestamp = at;
    e
}

/// A partition recorded `late` has not arrived: no arrival is projected until its `available`
/// one follows, which is kept at its own time; an arrival of another status is refused. It is
/// in `late_partitions` until then (recorded again: its latest time), never after, and a late
/// note of a partition that has arrived adds nothing, also within one batch. The replay agrees.
fn a_late_arrival_is_not_an_arrival_until_it_lands(backend: Backend) {
    let (_f, store) = store_on(backend);
    store.append(vec![late_at("raw", "raw/4", 100)]).unwrap();
    assert!(store.arrivals_of(&["raw/4"]).unwrap().is_empty());
    assert!(store.recent_arrivals("raw", 5).unwrap().is_empty());
    store
        .append(vec![
            late_at("raw", "raw/4", 150),
            late_at("raw", "raw/6", 160),
        ])
        .unwrap();
    assert_eq!(store.late_refs().unwrap(), ["raw/4", "raw/6"]);
    let report = databuild_log::check_store(store.as_ref()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    store.append(vec![arrival_at("raw", "raw/4", 300)]).unwrap();
    let found = store.arrivals_of(&["raw/4"]).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].arrived_at, 300);
    assert_eq!(store.late_refs().unwrap(), ["raw/6"]);
    store
        .append(vec![
            late_at("raw", "raw/4", 400),
            arrival_at("raw", "raw/7", 410),
            late_at("raw", "raw/7", 420),
            late_at("raw", "raw/8", 430),
            arrival_at("raw", "raw/8", 440),
        ])
        .unwrap();
    assert_eq!(store.late_refs().unwrap(), ["raw/6"]);
    let mut failed = arrival_at("raw", "raw/5", 1);
    failed.status = Status::Failed;
    assert!(store.append(vec![failed]).is_err());
    let report = databuild_log::check_store(store.as_ref()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
on_every_backend!(a_late_arrival_is_not_an_arrival_until_it_lands);

/// A check's result of `p`'s instance built by `run`.
fn check_event(p: &str, run: &str, name: &str, passed: bool, blocking: bool) -> Event {
    let mut e = Event::check(None, p, run, name, passed)
        .with_message(if passed { "ok" } else { "no rows" })
        .with_data(|d| {
            d.blocking = Some(blocking);
            d.check_version = Some("1".into());
            d.check_command = vec!["true".into()];
            d.metrics = Some(serde_json::json!({"rows": 0}));
            d.code_versions = [("checks/rows.sh".to_string(), "c0de".to_string())].into();
        });
    e.job = Some("job".into());
    e
}

/// The latest result of each (partition, check) is kept in the append's transaction; a failed
/// blocking check of the current instance shows in `partition_status`, and the replay agrees.
fn check_results_keep_the_latest_per_partition_and_check(backend: Backend) {
    let (_f, store) = store_on(backend);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    assert!(!store.any_blocking_failure().unwrap());
    store
        .append(vec![
            check_event("a/1", "r1", "rows", false, true),
            check_event("a/1", "r1", "soft", false, false),
        ])
        .unwrap();
    assert!(store.any_blocking_failure().unwrap());
    let status = |store: &dyn EventStore| {
        store
            .sql(
                "SELECT status FROM partition_status WHERE partition_ref = 'a/1'",
                SqlLimits::default(),
            )
            .unwrap()
            .rows[0][0]
            .clone()
    };
    assert_eq!(status(store.as_ref()), "check_failed");
    let mut rows = store.checks_of(&["a/1", "b/1"]).unwrap();
    rows.sort_by(|a, b| a.check_name.cmp(&b.check_name));
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0].check_name.as_str(),
            rows[0].passed(),
            rows[0].blocking
        ),
        ("rows", false, true)
    );
    assert_eq!(rows[0].metrics, Some(serde_json::json!({"rows": 0})));
    assert_eq!(rows[0].command, ["true"]);
    assert_eq!(
        rows[0]
            .code_versions
            .get("checks/rows.sh")
            .map(String::as_str),
        Some("c0de"),
        "{}",
        store.location()
    );
    assert_eq!(rows[0].job_run_id, "r1");
    // Fixed: the check passes on the same instance.
    store
        .append(vec![check_event("a/1", "r1", "rows", true, true)])
        .unwrap();
    assert!(!store.any_blocking_failure().unwrap());
    assert_eq!(status(store.as_ref()), "live");
    let counts = store.check_counts().unwrap();
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.check_name.as_str(), c.passed, c.failed))
            .collect::<Vec<_>>(),
        [("rows", 1, 0), ("soft", 0, 1)]
    );
    let results = store
        .sql(
            "SELECT check_name, result, current FROM check_results ORDER BY check_name",
            SqlLimits::default(),
        )
        .unwrap();
    assert_eq!(results.rows.len(), 2);
    assert_eq!(results.rows[0][1], "passed");
    let report = databuild_log::check_store(store.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // A check event names its partition, its instance and its check.
    let mut bad = check_event("a/1", "r1", "rows", true, true);
    bad.data.check = None;
    assert!(store.append(vec![bad]).is_err());
}
on_every_backend!(check_results_keep_the_latest_per_partition_and_check);

/// A version 12 log (made before code versions) gains them in place: its runs and check
/// results read back with none (they compare on their versions only), new ones record theirs.
#[test]
fn a_version_12_log_gains_code_versions_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v12.db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    drop(store);
    sqlite_exec(
        &path,
        &format!("{UNDO_V15} {UNDO_V13} update meta set value = 12 where key = 'schema_version';"),
    );
    let store = SqliteStore::open(&path).unwrap();
    let old = store.job_run("r1").unwrap().expect("the old run");
    assert!(old.code_versions.is_empty());
    assert!(store.run_recipes(&["r1"]).unwrap()[0]
        .code_versions
        .is_empty());
    let mut events = build_events("b2", "r2", "a/1");
    for e in &mut events {
        if e.kind == Kind::JobRun && e.status == Status::Running {
            e.data.code_versions = [("jobs/a.sh".to_string(), "1a2b".to_string())].into();
        }
    }
    store.append(events).unwrap();
    store
        .append(vec![check_event("a/1", "r2", "rows", true, true)])
        .unwrap();
    let new = store.job_run("r2").unwrap().expect("the new run");
    assert_eq!(new.code_versions.len(), 1);
    assert_eq!(store.checks_of(&["a/1"]).unwrap()[0].code_versions.len(), 1);
    let report = databuild_log::check_store(&store).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// What versions 15 to 18 added, undone: a log from before them.
const UNDO_V15: &str = "drop table late_partitions; alter table wants drop column deadline;
     drop index events_of_alerts;
     drop table run_metrics; drop index events_of_environments; drop table arrivals;";

/// A version 17 log gains `late_partitions` and wants' deadlines in place, from its events: a
/// partition late and not arrived is late, one that arrived is not; a want asked `--by` has
/// its deadline, one without has none.
#[test]
fn a_version_17_log_gains_late_partitions_and_deadlines_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v17.db");
    let store = SqliteStore::open(&path).unwrap();
    let want = |id: &str, deadline: Option<i64>| {
        Event::want(id, Status::Requested).with_data(|d| {
            d.requested = vec!["a/1".into()];
            d.deadline = deadline;
        })
    };
    store
        .append(vec![
            late_at("raw", "raw/1", 100),
            late_at("raw", "raw/2", 110),
            arrival_at("raw", "raw/2", 120),
            // Noted late twice, the second by a host whose clock is behind: the latest note
            // in the log's order is kept, as appends keep it.
            late_at("raw", "raw/3", 200),
            late_at("raw", "raw/3", 150),
            want("w1", Some(5_000)),
            want("w2", None),
        ])
        .unwrap();
    drop(store);
    sqlite_exec(
        &path,
        "drop table late_partitions; alter table wants drop column deadline;
         drop index events_of_alerts; update meta set value = 17 where key = 'schema_version';",
    );
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.late_refs().unwrap(), ["raw/1", "raw/3"]);
    let mut wants = store.wants(None, false, 10).unwrap();
    wants.sort_by(|a, b| a.want_id.cmp(&b.want_id));
    let deadlines: Vec<Option<i64>> = wants.iter().map(|w| w.deadline).collect();
    assert_eq!(deadlines, [Some(5_000), None]);
    let report = databuild_log::check_store(&store).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// A version 14 log gains `run_metrics` in place, and a run that ends after the upgrade fills it.
#[test]
fn a_version_14_log_gains_run_metrics_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v14.db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    drop(store);
    sqlite_exec(
        &path,
        &format!("{UNDO_V15} update meta set value = 14 where key = 'schema_version';"),
    );
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.run_metrics("r1").unwrap().is_empty());
    store.append(measured_build("b2", "r2", "a/1", 7)).unwrap();
    assert_eq!(store.run_metrics("r2").unwrap().len(), 3);
}

/// A build of `p` whose run's end records its wall time (`ms`), its CPU time, and a `rows`
/// metric its job reported.
fn measured_build(br: &str, run: &str, p: &str, ms: u64) -> Vec<Event> {
    let mut events = build_events(br, run, p);
    let end = events
        .iter_mut()
        .find(|e| e.kind == Kind::JobRun && e.status == Status::Completed)
        .unwrap();
    end.data.outputs = vec![p.into()];
    end.data.resources = Some(RunResources {
        wall_ms: Some(ms),
        cpu_user_ms: Some(ms / 2),
        ..RunResources::default()
    });
    end.data.metrics = Some(serde_json::json!({ p: {"rows": ms * 10} }));
    events
}

/// A run's measures and reported metrics are kept per output ref, and read back one job's
/// metric at a time in key order (ref, then run), a page at a time, or one run's at once.
fn run_metrics_are_kept_per_ref_and_read_in_key_order(backend: Backend) {
    let (_dir, store) = store_on(backend);
    // Run ids in time order, as UUIDv7s are; refs out of order.
    for (i, p) in ["b/1", "a/1", "b/1"].iter().enumerate() {
        let run = format!("r{i}");
        store
            .append(measured_build(&format!("b{i}"), &run, p, 100 + i as u64))
            .unwrap();
    }
    let failed = vec![
        Event::build_request("b9", Status::Received)
            .with_data(|d| d.requested = vec!["c/1".into()]),
        Event::job_run("b9", "r9", "job", Status::Scheduled)
            .with_data(|d| d.outputs = vec!["c/1".into()]),
        Event::job_run("b9", "r9", "job", Status::Running),
        Event::job_run("b9", "r9", "job", Status::Failed).with_data(|d| {
            d.outputs = vec!["c/1".into()];
            d.resources = Some(RunResources {
                wall_ms: Some(5),
                ..RunResources::default()
            });
        }),
    ];
    store.append(failed).unwrap();
    let key = |m: &MetricValue| (m.partition_ref.clone(), m.job_run_id.clone(), m.value);
    let wall: Vec<_> = store
        .metric_values("job", "wall_ms", None, 10)
        .unwrap()
        .iter()
        .map(key)
        .collect();
    let row = |r: &str, run: &str, v: f64| (r.to_string(), run.to_string(), v);
    assert_eq!(
        wall,
        [
            row("a/1", "r1", 101.0),
            row("b/1", "r0", 100.0),
            row("b/1", "r2", 102.0),
            row("c/1", "r9", 5.0)
        ]
    );
    let after = MetricKey {
        partition_ref: "a/1".into(),
        job_run_id: "r1".into(),
    };
    let page: Vec<_> = store
        .metric_values("job", "rows", Some(&after), 1)
        .unwrap()
        .iter()
        .map(key)
        .collect();
    assert_eq!(page, [row("b/1", "r0", 1000.0)]);
    assert!(store
        .metric_values("other", "wall_ms", None, 10)
        .unwrap()
        .is_empty());
    let names: Vec<String> = store
        .run_metrics("r2")
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["cpu_user_ms", "rows", "wall_ms"]);
    let sql = store
        .sql(
            "SELECT value FROM run_metrics WHERE job = 'job' AND name = 'rows' AND partition_ref = 'a/1'",
            SqlLimits::default(),
        )
        .unwrap();
    assert_eq!(sql.rows.len(), 1);
}
on_every_backend!(run_metrics_are_kept_per_ref_and_read_in_key_order);

/// An anomaly check learns from the partitions before the one it judges, nearest first, each's
/// current instance, none that failed a check; a job's last runs give its percentiles' sample.
fn metric_history_skips_failed_checks_and_reads_backwards(backend: Backend) {
    let (_dir, store) = store_on(backend);
    for i in 1..=5u64 {
        let p = format!("d/{i}");
        store
            .append(measured_build(
                &format!("b{i}"),
                &format!("r{i}"),
                &p,
                10 * i,
            ))
            .unwrap();
    }
    // d/3 failed a check; x/1 is outside the output's range.
    store
        .append(vec![Event::check(None, "d/3", "r3", "rows_band", false)])
        .unwrap();
    store.append(measured_build("b9", "r9", "x/1", 1)).unwrap();
    let q = HistoryQuery {
        job: "job",
        name: "rows",
        from: "d/",
        before: "d/5",
        limit: 10,
    };
    let history = store.metric_history(&q).unwrap();
    let want = |r: &str, v: f64| (r.to_string(), v);
    assert_eq!(
        history,
        [want("d/4", 400.0), want("d/2", 200.0), want("d/1", 100.0)]
    );
    let two = store
        .metric_history(&HistoryQuery { limit: 2, ..q })
        .unwrap();
    assert_eq!(two, [want("d/4", 400.0), want("d/2", 200.0)]);
    let recent = store.recent_metrics("job", 2).unwrap();
    let runs: std::collections::BTreeSet<&str> =
        recent.iter().map(|m| m.job_run_id.as_str()).collect();
    assert_eq!(runs.len(), 2, "{recent:?}");
    assert!(store.recent_metrics("other", 2).unwrap().is_empty());
}
on_every_backend!(metric_history_skips_failed_checks_and_reads_backwards);

/// A version 17 log gains the index of its alert deliveries in place; those recorded before
/// `fired_by` read back newest first, naming no event.
#[test]
fn a_version_17_log_gains_the_index_of_its_alert_deliveries_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v17.db");
    let store = SqliteStore::open(&path).unwrap();
    let mut old = Event::alert("a", 0, Status::Completed, 1, "delivered".into());
    old.data.fired_by = None;
    store.append(vec![old]).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    drop(store);
    sqlite_exec(
        &path,
        "drop index events_of_alerts; drop table late_partitions;
         alter table wants drop column deadline;
         update meta set value = 17 where key = 'schema_version';",
    );
    let indexed = || -> i64 {
        rusqlite::Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'events_of_alerts'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(indexed(), 0);
    let store = SqliteStore::open(&path).unwrap();
    let newest = store
        .events(&EventFilter {
            kind: Some(Kind::Alert),
            newest_first: true,
            limit: Some(10),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0].data.fired_by, None);
    drop(store);
    assert_eq!(indexed(), 1);
}

/// What schema version 14 changed, undone: the partial index of unfinished runs without `queued`.
const UNDO_V14: &str = "drop index job_runs_unfinished;
     create index job_runs_unfinished on job_runs (status) where status in ('scheduled', 'running');";

/// The SQL of the partial index of unfinished runs, as the log's schema holds it.
fn unfinished_index(path: &std::path::Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT sql FROM sqlite_master WHERE name = 'job_runs_unfinished'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// A version 13 log's partial index of unfinished runs is made again in place, `queued` in it; its
/// runs read back as before.
#[test]
fn a_version_13_log_gains_queued_in_its_unfinished_index_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v13.db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    drop(store);
    sqlite_exec(
        &path,
        &format!("{UNDO_V15} {UNDO_V14} update meta set value = 13 where key = 'schema_version';"),
    );
    assert!(!unfinished_index(&path).contains("queued"));
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.job_run("r1").unwrap().is_some());
    drop(store);
    assert!(
        unfinished_index(&path).contains("'queued'"),
        "{}",
        unfinished_index(&path)
    );
}

/// A version 8 log gains the checks projection in place.
#[test]
fn a_version_8_log_gains_check_results_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    drop(store);
    sqlite_exec(
        &path,
        &format!(
            "{UNDO_V15} {UNDO_V9_V13} update meta set value = 8 where key = 'schema_version';"
        ),
    );
    let store = SqliteStore::open(&path).unwrap();
    store
        .append(vec![check_event("a/1", "r1", "rows", false, true)])
        .unwrap();
    assert_eq!(store.checks_of(&["a/1"]).unwrap().len(), 1);
    let r = store
        .sql("SELECT status FROM partition_status", SqlLimits::default())
        .unwrap();
    assert_eq!(r.rows[0][0], "check_failed");
    let report = databuild_log::check_store(&store).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn a_version_1_log_is_upgraded_in_place_and_keeps_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    drop(store);
    // Make it what version 1 wrote: no alias index, schema version 1.
    sqlite_exec(
        &path,
        &format!(
            "{UNDO_V15} {UNDO_V9_V13} drop index events_of_alias; drop table wants; drop index events_of_wants;
         drop table job_counts; drop table partition_counts;
         alter table partitions drop column prev_status;
         alter table partitions drop column prev_job_run_id;
         alter table partitions drop column prev_build_request_id;
         alter table partitions drop column prev_message;
         alter table partitions drop column prev_updated_at;
         alter table heartbeats drop column revoked;
         alter table build_requests drop column requested_count;
         alter table build_requests drop column requested_head;
         drop view planned_runs; drop index job_runs_by_build_outputs;
         drop index events_of_build_requests;
         drop index build_requests_by_short_id; drop index job_runs_by_short_id;
         drop table run_inputs; alter table job_runs drop column input_runs;
         create index job_runs_by_build on job_runs (build_request_id);
         update meta set value = 1 where key = 'schema_version';"
        ),
    );
    let store = SqliteStore::open(&path).unwrap();
    let v = store
        .sql(
            "SELECT (SELECT value FROM meta WHERE key = 'schema_version'), (SELECT count(*) FROM sqlite_master WHERE name = 'events_of_alias'), (SELECT count(*) FROM events)",
            SqlLimits::default(),
        )
        .unwrap();
    assert_eq!(
        v.rows[0][0],
        serde_json::json!(sqlite::SCHEMA_VERSION.to_string())
    );
    assert_eq!(v.rows[0][1], serde_json::json!(1));
    // Projections added by version 2 are filled from what version 1 wrote.
    let report = databuild_log::check_store(&store).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let jobs = store.job_stats(None).unwrap();
    assert!(jobs.iter().any(|j| j.runs > 0), "{jobs:?}");
    assert!(v.rows[0][2].as_i64().unwrap() > 0);
    store.append(vec![Event::alias("orders", 2)]).unwrap();
    let aliases = store
        .events(&EventFilter {
            kind: Some(Kind::Alias),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(aliases.len(), 1);
    assert_eq!(aliases[0].data.version, Some(2));
    // The upgraded log keeps its counts right as it grows (kept by the writer since version 3).
    store.append(build_events("b2", "r2", "a/1")).unwrap();
    store.append(build_events("b3", "r3", "a/2")).unwrap();
    let report = databuild_log::check_store(&store).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn a_log_locked_by_another_process_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.db");
    drop(SqliteStore::open(&path).unwrap());
    let store = SqliteStore::open(&path).unwrap();
    // Another process holds the write lock for longer than the store waits.
    let mut holder = std::process::Command::new("python3")
        .args(["-c", "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(8)"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let err = store.append(build_events("b1", "r1", "a/1")).unwrap_err();
    assert!(matches!(err, LogError::Locked { .. }), "{err}");
    assert!(
        err.to_string().contains("is locked by another process"),
        "{err}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
}

fn unfinished_queries_see_only_unfinished_work(backend: Backend) {
    let (_f, store) = store_on(backend);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    store
        .append(vec![
            Event::build_request("b2", Status::Received)
                .with_data(|d| d.requested = vec!["a/2".into()]),
            Event::job_run("b2", "r2", "job", Status::Scheduled)
                .with_data(|d| d.outputs = vec!["a/2".into()]),
        ])
        .unwrap();
    let runs = store
        .job_runs(&RunQuery {
            unfinished: true,
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        runs.iter()
            .map(|r| r.job_run_id.as_str())
            .collect::<Vec<_>>(),
        ["r2"]
    );
    let builds = store
        .build_requests(&BuildQuery {
            unfinished: true,
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        builds
            .iter()
            .map(|b| b.build_request_id.as_str())
            .collect::<Vec<_>>(),
        ["b2"]
    );
}
on_every_backend!(unfinished_queries_see_only_unfinished_work);

/// Builds page by page, newest first, with no build twice or missed whatever the page size;
/// a time range keeps the builds created within it.
fn builds_page_by_keyset_and_by_time(backend: Backend) {
    let (_f, store) = store_on(backend);
    let mut created = Vec::new();
    for i in 0..7 {
        let (br, run) = (format!("b{i}"), format!("r{i}"));
        let mut events = build_events(&br, &run, &format!("a/{i}"));
        // Two builds at each time: the id orders those.
        let at = 1_000 + (i / 2) as i64;
        for e in &mut events {
            e.timestamp = at;
        }
        store.append(events).unwrap();
        created.push((at, br));
    }
    let all = store
        .build_requests(&BuildQuery {
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    let all: Vec<(i64, String)> = all
        .into_iter()
        .map(|b| (b.created_at, b.build_request_id))
        .collect();
    assert_eq!(all.len(), 7);
    assert!(all
        .windows(2)
        .all(|w| w[0].0 > w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1)));
    for size in 1..=3 {
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .build_requests(&BuildQuery {
                    limit: size,
                    after: after.take(),
                    ..Default::default()
                })
                .unwrap();
            after = page
                .last()
                .map(|b| (b.created_at, b.build_request_id.clone()));
            paged.extend(
                page.iter()
                    .map(|b| (b.created_at, b.build_request_id.clone())),
            );
            if page.len() < size {
                break;
            }
        }
        assert_eq!(paged, all, "pages of {size}");
    }
    let timed = store
        .build_requests(&BuildQuery {
            limit: 100,
            from: Some(1_001),
            to: Some(1_003),
            ..Default::default()
        })
        .unwrap();
    let mut ids: Vec<&str> = timed.iter().map(|b| b.build_request_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["b2", "b3", "b4", "b5"]);
}
on_every_backend!(builds_page_by_keyset_and_by_time);

fn events_filter_by_kind(backend: Backend) {
    let (_f, store) = store_on(backend);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    let runs = store
        .events(&EventFilter {
            kind: Some(Kind::JobRun),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|e| e.kind == Kind::JobRun));
}
on_every_backend!(events_filter_by_kind);

/// `check_store` recounts the count projections on both backends, and names a count that drifted
/// as well as one the projection lost.
fn the_check_recounts_the_count_projections(backend: Backend) {
    let (_f, store) = store_on(backend);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    let report = check_store(store.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    sqlite_exec(
        &path,
        "update job_counts set n = 5; delete from partition_counts;",
    );
    let problems = check_store(&store).unwrap().problems;
    assert!(
        problems
            .iter()
            .any(|p| p
                .starts_with("job_counts says 5 `completed` of job `job`, but job_runs holds 1")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p
                .contains("partition_counts says 0 `available` of job ``, but partitions holds 1")),
        "{problems:?}"
    );
}
on_every_backend!(the_check_recounts_the_count_projections);

/// A claim given back (`cancelled` by the run holding it) frees the partition for the next
/// claim on the same handle, whose writer remembers states between batches, and the counts
/// follow the row back and forth.
fn a_released_claim_can_be_claimed_again_by_the_same_writer(backend: Backend) {
    let (_f, store) = store_on(backend);
    let claim = |br: &str, run: &str| {
        vec![
            Event::build_request(br, Status::Received),
            Event::partition(Some(br), "a/1", Status::Requested),
            Event::job_run(br, run, "job", Status::Scheduled),
            Event::partition(Some(br), "a/1", Status::Scheduled).with_run(run),
            Event::job_run(br, run, "job", Status::Running),
            Event::partition(Some(br), "a/1", Status::Building).with_run(run),
        ]
    };
    store.append(build_events("b0", "r0", "a/1")).unwrap();
    store.append(claim("b1", "r1")).unwrap();
    store
        .append(vec![
            Event::partition(Some("b1"), "a/1", Status::Cancelled).with_run("r1"),
            Event::job_run("b1", "r1", "job", Status::Cancelled),
        ])
        .unwrap();
    let row = store.partition("a/1").unwrap().unwrap();
    assert_eq!(
        (row.status, row.job_run_id.as_deref()),
        (Status::Available, Some("r0"))
    );
    store.append(claim("b2", "r2")).unwrap();
    let row = store.partition("a/1").unwrap().unwrap();
    assert_eq!(
        (row.status, row.job_run_id.as_deref()),
        (Status::Building, Some("r2"))
    );
    let report = check_store(store.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
on_every_backend!(a_released_claim_can_be_claimed_again_by_the_same_writer);

/// A PostgreSQL log of version 3 (count triggers) is upgraded in place: the counts its triggers
/// kept stay, and from then on the writer keeps them (a trigger left behind would count every
/// change twice, and the recount would say so).
#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn a_version_3_postgres_log_is_upgraded_and_keeps_its_counts() {
    let url = fresh_postgres_database(&test_postgres());
    let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    for step in [
        include_str!("../src/postgres/v1.sql"),
        include_str!("../src/postgres/v2.sql"),
        include_str!("../src/postgres/v3.sql"),
    ] {
        client.batch_execute(step).unwrap();
    }
    client
        .batch_execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', '3'), ('appends', '0');
             INSERT INTO job_runs (job_run_id, job, status, outputs, scheduled_at)
                 VALUES ('old', 'job', 'completed', '[]', 1);
             INSERT INTO partitions (partition_ref, status, job_run_id, job, updated_at)
                 VALUES ('a/0', 'available', 'old', 'job', 1);",
        )
        .unwrap();
    let store = PostgresStore::open(&url).unwrap();
    let triggers: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(triggers, 0);
    store.append(build_events("b1", "r1", "a/1")).unwrap();
    store.append(build_events("b2", "r2", "a/1")).unwrap();
    let jobs = store.job_stats(Some("job")).unwrap();
    assert_eq!((jobs[0].runs, jobs[0].completed), (3, 3));
    assert_eq!(
        store.job_partition_counts("job").unwrap()[&Status::Available],
        1
    );
    // The rows written here without events are the replay's to notice; the recounts agree.
    let report = check_store(&store).unwrap();
    assert!(
        report.problems.iter().all(|p| !p.contains("_counts says")),
        "{:?}",
        report.problems
    );
}

/// The fence of a shared log: a silent owner's lease is revoked only after the timeout, by the
/// log's clock; a revoked lease is never renewed until its owner rejoins; another owner's lease
/// is untouched.
fn a_lease_is_revoked_only_after_its_timeout_and_then_refuses_renewal(backend: Backend) {
    use std::time::Duration;
    let (_fx, store) = store_on(backend);
    let at = store.location();
    let (a, b) = ("host-a/1/1", "host-b/2/2");
    assert_eq!(store.silent_for(a).unwrap(), None, "{}", at);
    assert!(!store.revoke_lease(a, Duration::ZERO).unwrap(), "{}", at);
    store.heartbeat(a).unwrap();
    store.heartbeat(b).unwrap();
    assert!(store.silent_for(a).unwrap().unwrap() < Duration::from_secs(5));
    // Not silent long enough: kept, and still renewed.
    assert!(
        !store.revoke_lease(a, Duration::from_secs(60)).unwrap(),
        "{}",
        at
    );
    store.heartbeat(a).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        store.revoke_lease(a, Duration::from_millis(20)).unwrap(),
        "{}",
        at
    );
    // Revoked: its holder learns it at its next renewal, and asking again still says so.
    let refused = store.heartbeat(a).unwrap_err();
    assert!(
        matches!(refused, databuild_log::LogError::LeaseLost { .. }),
        "{}: {refused}",
        at
    );
    assert!(store.revoke_lease(a, Duration::from_secs(60)).unwrap());
    store.heartbeat(b).unwrap();
    // Having dropped its work, it rejoins with a fresh lease.
    store.rejoin(a).unwrap();
    store.heartbeat(a).unwrap();
    assert!(!store.revoke_lease(a, Duration::from_secs(60)).unwrap());
    assert_eq!(store.shared(), !is_sqlite(store.as_ref()), "{}", at);
}
on_every_backend!(a_lease_is_revoked_only_after_its_timeout_and_then_refuses_renewal);

/// One run of [`a_batch_projects_as_its_events_one_at_a_time`]: its events in order, from its
/// claim to its end (`outcome`: 0 built, 1 failed, 2 given up before starting, 3 given up
/// after), its partition events naming the job or not; claimed `queued` then started (its end
/// naming when), or claimed `running` as logs from before `queued` were.
fn run_events(br: &str, run: &str, p: &str, outcome: u8, named: bool, queued: bool) -> Vec<Event> {
    let part = |status| {
        let mut e = Event::partition(Some(br), p, status).with_run(run);
        e.job = named.then(|| "job".to_string());
        e
    };
    let mut events = vec![
        Event::job_run(br, run, "job", Status::Scheduled).with_data(|d| d.outputs = vec![p.into()]),
        part(Status::Scheduled),
    ];
    let claim = if queued {
        Status::Queued
    } else {
        Status::Running
    };
    let claimed = Event::job_run(br, run, "job", claim).with_data(|d| {
        d.pid = Some(7);
        d.host = Some("h".into());
        d.log_path = Some(format!("logs/{run}"));
        d.input_versions = [("raw/1".to_string(), "x".to_string())].into();
    });
    if outcome == 2 {
        if queued {
            events.push(claimed);
            events.push(part(Status::Building));
            events.push(
                Event::job_run(br, run, "job", Status::Cancelled)
                    .with_data(|d| d.not_started = true),
            );
            events.push(part(Status::Cancelled).with_message("not built"));
        } else {
            events.push(Event::job_run(br, run, "job", Status::Cancelled));
            events.push(Event::partition(Some(br), p, Status::Cancelled).with_message("not built"));
        }
        return events;
    }
    events.push(claimed);
    events.push(part(Status::Building));
    let mut started_at = None;
    if queued {
        let start = Event::job_run(br, run, "job", Status::Running);
        started_at = Some(start.timestamp);
        events.push(start);
    }
    let (run_end, partition_end) = match outcome {
        0 => (Status::Completed, Status::Available),
        1 => (Status::Failed, Status::Failed),
        _ => (Status::Cancelled, Status::Cancelled),
    };
    events.push(
        Event::job_run(br, run, "job", run_end)
            .with_message(format!("{run} ended"))
            .with_data(|d| {
                d.exit_code = Some(outcome as i32);
                d.started_at = started_at;
            }),
    );
    events.push(
        part(partition_end)
            .with_message(format!("{p} by {run}"))
            .with_data(|d| d.data_version = (outcome == 0).then(|| format!("v-{run}"))),
    );
    events
}

/// The rows of every projection a build writes, in a fixed order.
fn projections(store: &dyn EventStore) -> Vec<SqlResult> {
    [
        "SELECT * FROM partitions ORDER BY partition_ref",
        "SELECT * FROM request_partitions ORDER BY build_request_id, partition_ref",
        "SELECT * FROM job_runs ORDER BY job_run_id",
        "SELECT * FROM run_inputs ORDER BY job_run_id, input_ref",
        // A count that went back to zero may keep its row or not (a batch adds up its changes
        // first); either way it counts nothing.
        "SELECT * FROM job_counts WHERE n <> 0 OR last_scheduled_at IS NOT NULL ORDER BY 1, 2",
        "SELECT * FROM partition_counts WHERE n <> 0 ORDER BY 1, 2",
    ]
    .iter()
    .map(|q| store.sql(q, SqlLimits::default()).unwrap())
    .collect()
}

/// A batch leaves out the projection writes its later events rewrite (a run's start, ended
/// in the same batch): every row must end as it does when the same events come one at a
/// time. Two builds of the same partitions, runs interleaved, cut into batches at random.
fn a_batch_projects_as_its_events_one_at_a_time(
    backend: Backend,
    runs: Vec<(u8, bool, bool)>,
    picks: Vec<usize>,
    cuts: Vec<bool>,
) -> std::result::Result<(), TestCaseError> {
    let mut events = Vec::new();
    for br in ["b1", "b2"] {
        let refs: Vec<String> = (0..runs.len()).map(|i| format!("p/{i}")).collect();
        events.push(
            Event::build_request(br, Status::Received).with_data(|d| d.requested = refs.clone()),
        );
        events.push(Event::build_request(br, Status::Planning));
        events.push(Event::build_request(br, Status::AnalysisCompleted));
        events.push(Event::build_request(br, Status::Executing));
        // Each run's events in its order, the runs interleaved as `picks` says.
        let mut left: Vec<std::collections::VecDeque<Event>> = runs
            .iter()
            .enumerate()
            .map(|(i, (outcome, named, queued))| {
                run_events(
                    br,
                    &format!("{br}-r{i}"),
                    &refs[i],
                    *outcome,
                    *named,
                    *queued,
                )
                .into()
            })
            .collect();
        let mut pick = picks.iter();
        while left.iter().any(|l| !l.is_empty()) {
            let open: Vec<usize> = (0..left.len()).filter(|&i| !left[i].is_empty()).collect();
            let i = open[pick.next().copied().unwrap_or(0) % open.len()];
            events.push(left[i].pop_front().unwrap());
        }
        events.push(Event::build_request(br, Status::Completed));
    }
    let (_dir, singles) = store_on(backend);
    let (_batch_dir, store) = store_on(backend);
    for e in &events {
        singles.append(vec![e.clone()]).unwrap();
    }
    let mut batch = Vec::new();
    for (e, cut) in events
        .iter()
        .zip(cuts.iter().chain(std::iter::repeat(&false)))
    {
        batch.push(e.clone());
        if *cut {
            store.append(std::mem::take(&mut batch)).unwrap();
        }
    }
    store.append(batch).unwrap();
    prop_assert_eq!(projections(store.as_ref()), projections(singles.as_ref()));
    Ok(())
}

mod a_batch_projects_as_its_events_one_at_a_time {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn sqlite(
            runs in proptest::collection::vec((0u8..4, any::<bool>(), any::<bool>()), 1..4),
            picks in proptest::collection::vec(0usize..4, 0..48),
            cuts in proptest::collection::vec(any::<bool>(), 80),
        ) {
            a_batch_projects_as_its_events_one_at_a_time(Backend::Sqlite, runs, picks, cuts)?;
        }

        #[test]
        #[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
        fn postgres(
            runs in proptest::collection::vec((0u8..4, any::<bool>(), any::<bool>()), 1..4),
            picks in proptest::collection::vec(0usize..4, 0..48),
            cuts in proptest::collection::vec(any::<bool>(), 80),
        ) {
            a_batch_projects_as_its_events_one_at_a_time(Backend::Postgres, runs, picks, cuts)?;
        }
    }
}
