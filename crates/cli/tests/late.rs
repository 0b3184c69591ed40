//! Late is visible (#60 point 4): once the next tick of an int-keyed cadence is past its p90,
//! `status` and `explain` of it, and of the job output waiting on it, say so in their reasons
//! and in a typed `late`, in-process and through the service.

use std::time::Duration;

use crate::forecast::{forecast, landed};
use crate::util::{Project, Service};

/// Ticks 1..=3 landed a second apart; returns once `ticks/4` is past its `expected_by`.
pub(crate) fn overdue() -> Project {
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
