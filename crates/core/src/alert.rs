//! Alerts (`[[alert]]`): who is told when a want is at risk or missed its deadline, a partition
//! is late, or a build failed, and how: a command fed the alert's JSON on stdin, or a signed POST.

/// What an alert is sent for: the log events of these kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlertOn {
    /// A want's forecast passes its deadline (`want sla_at_risk`).
    SlaAtRisk,
    /// A want's partition was not live by its deadline (`want sla_missed`).
    SlaMissed,
    /// An event with status `late`, whatever its kind.
    Late,
    /// A build request failed (`build_request failed`).
    BuildFailed,
}

impl AlertOn {
    pub const NAMES: &'static str = "sla_at_risk, sla_missed, late, build_failed";

    pub fn parse(s: &str) -> Option<AlertOn> {
        Some(match s {
            "sla_at_risk" => AlertOn::SlaAtRisk,
            "sla_missed" => AlertOn::SlaMissed,
            "late" => AlertOn::Late,
            "build_failed" => AlertOn::BuildFailed,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AlertOn::SlaAtRisk => "sla_at_risk",
            AlertOn::SlaMissed => "sla_missed",
            AlertOn::Late => "late",
            AlertOn::BuildFailed => "build_failed",
        }
    }
}

/// Where an alert goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertTarget {
    /// Run with the alert's JSON on stdin.
    Command(Vec<String>),
    /// POSTed the JSON, signed with HMAC-SHA256 under the secret in `secret_env` (if set) in
    /// `X-DataBuild-Signature`, as webhook sources verify.
    Url {
        url: String,
        secret_env: Option<String>,
    },
}

/// An `[[alert]]` of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub name: String,
    pub on: Vec<AlertOn>,
    pub target: AlertTarget,
}
