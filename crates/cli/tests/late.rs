//! Late is visible (#60 point 4): once the next tick of an int-keyed cadence is past its p90,
//! `status` and `explain` of it, and of the job output waiting on it, say so in their reasons
//! and in a typed `late`, in-process and through the service.

use std::time::Duration;

use crate::forecast::{forecast, landed};
use crate::util::{eventually, Project, Service};

/// Ticks 1..=3 landed a second apart; returns once `ticks/4` is past its `expected_by`.
fn overdue() -> Project {
    let p = landed(3);
    let by = forecast(&p, "ticks/4")["expected_by_ns"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    std::thread::sleep(Duration::from_nanos((by - now).max(0) as u64 + 300_000_000));
    p
}

fn status(p: &Project, r: &str) -> serde_json::Value {
    let out = p.run(&["--json", "status", r]);
    out.expect_code(0);
    out.json()[0].clone()
}

#[test]
fn status_and_explain_say_a_late_external_and_what_waits_on_it_are_late() {
    let p = overdue();
    let own = status(&p, "ticks/4");
    assert_eq!(own["late"]["ref"], "ticks/4", "{own:#}");
    assert_eq!(own["late"]["minutes_late"], 0);
    assert!(own["late"]["expected_by"].as_str().unwrap().ends_with('Z'));
    let by = own["late"]["expected_by_ns"].as_i64().unwrap();
    let reasons = own["reasons"].to_string();
    assert!(reasons.contains("ticks/4 expected by "), "{reasons}");
    assert!(reasons.contains(", 0 min late"), "{reasons}");

    let waiting = status(&p, "counted/4");
    assert_eq!(waiting["status"], "missing");
    assert_eq!(waiting["late"]["ref"], "ticks/4", "{waiting:#}");
    assert_eq!(waiting["late"]["expected_by_ns"], by);
    let text = p.run(&["status", "counted/4"]);
    assert!(
        text.stdout.contains("waits for ticks/4 expected by "),
        "{}",
        text.stdout
    );
    // A live one, and one whose input is there, are not late.
    assert!(status(&p, "ticks/3").get("late").is_none());
    p.run(&["build", "counted/3"]).expect_code(0);
    assert!(status(&p, "counted/3").get("late").is_none());

    let explained = p.run(&["--json", "explain", "counted/4"]);
    explained.expect_code(0);
    assert_eq!(explained.json()["late"]["ref"], "ticks/4");
    let text = p.run(&["explain", "ticks/4"]);
    assert!(text.stdout.contains(" min late"), "{}", text.stdout);

    // The service answers the same.
    let s = Service::start(&p, &[]);
    let (code, over) = s.get("/api/v1/partitions/counted%2F4/status");
    assert_eq!(code, 200, "{over:#}");
    assert_eq!(over["late"]["ref"], "ticks/4", "{over:#}");
    let (code, over) = s.get("/api/v1/partitions/ticks%2F4/explain");
    assert_eq!(code, 200, "{over:#}");
    assert_eq!(over["late"]["expected_by_ns"], by, "{over:#}");
}

/// The `late` arrival events of `r` the service's log holds.
fn late_events(s: &Service, r: &str) -> usize {
    let (_, events) = s.get(&format!(
        "/api/v1/events?partition={}",
        r.replace('/', "%2F")
    ));
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "arrival" && e["status"] == "late")
        .count()
}

fn gauge(s: &Service) -> String {
    let (_, text) = s.get("/metrics");
    let text = text.as_str().unwrap().to_string();
    text.lines()
        .find(|l| l.starts_with("databuild_late_partitions "))
        .unwrap_or_else(|| panic!("no late gauge in {text}"))
        .to_string()
}

/// A fixed clock (`DATABUILD_NOW`) just past `ticks/4`'s `expected_by`, before `ticks/5`'s:
/// the one late partition stays the only one, however long the test takes.
fn just_past_the_next_tick(p: &Project) -> String {
    let by = forecast(p, "ticks/4")["expected_by_ns"].as_i64().unwrap() + 300_000_000;
    chrono::DateTime::from_timestamp_nanos(by).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

#[test]
fn the_watcher_records_a_late_partition_once_and_the_gauge_counts_it_until_it_lands() {
    let p = landed(3);
    let now = just_past_the_next_tick(&p);
    // Someone is told (#60 point 6): an alert on `late` reads the event's JSON.
    let graph = std::fs::read_to_string(p.path().join("databuild.toml")).unwrap();
    p.file(
        "databuild.toml",
        &format!(
            "{graph}\n[[alert]]\nname = \"late_ticks\"\non = [\"late\"]\ncommand = [\"sh\", \"-c\", \"cat >> alerts.log; echo >> alerts.log\"]\n"
        ),
    );
    let s = Service::start(
        &p,
        &[
            ("DATABUILD_ARRIVAL_PROBE_INTERVAL", "0.2"),
            ("DATABUILD_NOW", &now),
        ],
    );
    eventually(Duration::from_secs(10), "ticks/4 recorded late", || {
        (late_events(&s, "ticks/4") > 0).then_some(())
    });
    // Later turns still see it late, and record nothing more.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(late_events(&s, "ticks/4"), 1);
    let (_, events) = s.get("/api/v1/events?partition=ticks%2F4");
    let message = events["events"][0]["message"].as_str().unwrap();
    assert!(message.starts_with("ticks/4 expected by "), "{message}");
    assert_eq!(gauge(&s), "databuild_late_partitions 1");
    let told = eventually(Duration::from_secs(10), "the late alert ran", || {
        std::fs::read_to_string(p.path().join("alerts.log"))
            .ok()
            .filter(|t| !t.is_empty())
    });
    let body: serde_json::Value = serde_json::from_str(told.lines().next().unwrap()).unwrap();
    assert_eq!(body["event"], "late", "{body}");
    assert_eq!(body["partition_ref"], "ticks/4", "{body}");
    // The dashboard's home lists it, linking to its page.
    let (_, home) = s.call("GET", "/", None, None);
    assert!(home.contains("<h2>Late partitions</h2>"), "{home}");
    assert!(home.contains(r#"href="/partitions/ticks%2F4""#), "{home}");
    assert!(home.contains(" min</td>"), "{home}");
    // Its page shows its forecast and the steps of it.
    let (_, page) = s.call("GET", "/partitions/ticks%2F4", None, None);
    assert!(page.contains("<h2>Forecast</h2>"), "{page}");
    assert!(page.contains("ticks/4: missing, expected at "), "{page}");
    assert!(page.contains(" LATE</p>"), "{page}");
    assert!(
        page.contains("<li>input ticks/4 (dataset `ticks`): expected at "),
        "{page}"
    );
    // Its dataset's page charts when its partitions landed: its axes, its band, the next one.
    let (_, page) = s.call("GET", "/datasets/ticks", None, None);
    assert!(page.contains("<h2>Landing times</h2>"), "{page}");
    assert!(page.contains(r#"<svg xmlns="http://www.w3.org/2000/svg" class="landings""#));
    let caption = "partitions in key order, ticks/2 to ticks/3 (2 of them); up: time after the previous key arrived";
    assert!(page.contains(caption), "{page}");
    assert!(page.contains(">p50–p90 "), "{page}");
    assert!(
        page.contains(">1000 ms</text>"),
        "an axis of durations: {page}"
    );
    assert!(page.contains("<title>next: ticks/4 expected at "), "{page}");
    assert!(page.contains(" (late)</title>"), "{page}");
    // It lands: its arrival follows, and it is late no more.
    p.partition("ticks/4");
    eventually(Duration::from_secs(10), "ticks/4 arrives", || {
        (gauge(&s) == "databuild_late_partitions 0").then_some(())
    });
    let (_, events) = s.get("/api/v1/events?partition=ticks%2F4");
    let statuses: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["late", "available"], "{events:#}");
}
