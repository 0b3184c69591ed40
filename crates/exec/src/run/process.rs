//! Running a short-lived helper process (a config executable, a probe) safely: output captured on
//! threads so a chatty child never blocks on a full pipe, output capped, and on timeout the whole
//! process group killed so grandchildren cannot keep pipes open.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use wait_timeout::ChildExt;

/// The most bytes kept of a helper's stdout or stderr.
pub const OUTPUT_LIMIT: u64 = 64 * 1024 * 1024;

#[derive(Debug)]
pub struct Captured {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// True when stdout or stderr went past [`OUTPUT_LIMIT`] and was cut.
    pub truncated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{program}` did not finish within {}", humanize(.after))]
    TimedOut { program: String, after: Duration },
    #[error("waiting for `{program}` failed: {source}")]
    Wait {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// The same error, naming the command as `shown` (its whole command line, say).
    pub fn named(self, shown: &str) -> RunError {
        let program = shown.to_string();
        match self {
            RunError::Spawn { source, .. } => RunError::Spawn { program, source },
            RunError::TimedOut { after, .. } => RunError::TimedOut { program, after },
            RunError::Wait { source, .. } => RunError::Wait { program, source },
        }
    }
}

pub fn humanize(d: &Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{} ms", d.as_millis())
    } else if secs < 120.0 {
        format!("{secs:.0} s")
    } else {
        format!("{:.0} min", secs / 60.0)
    }
}

/// Describes how a process ended, for error messages: `exit status 3` or `killed by signal 9 (SIGKILL)`.
pub fn describe_status(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("killed by signal {sig} ({s})"),
            Err(_) => format!("killed by signal {sig}"),
        },
        _ => status.to_string(),
    }
}

/// The last `n` lines of `bytes`, for quoting a failing helper's stderr in an error.
pub fn tail_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn run_captured(cmd: Command, timeout: Duration) -> Result<Captured, RunError> {
    run_fed(cmd, None, timeout)
}

/// [`run_captured`], with `input` on the child's stdin (written on a thread, so a child that
/// reads none of it never blocks us; it is closed once written).
pub fn run_fed(
    mut cmd: Command,
    input: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Captured, RunError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        program: program.clone(),
        source,
    })?;
    let capture = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut truncated = false;
            if let Some(pipe) = pipe {
                let mut limited = pipe.take(OUTPUT_LIMIT);
                let _ = limited.read_to_end(&mut buf);
                // Drain the rest so the child is not blocked, but keep none of it.
                let mut rest = limited.into_inner();
                truncated = std::io::copy(&mut rest, &mut std::io::sink()).unwrap_or(0) > 0;
            }
            (buf, truncated)
        })
    };
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        thread::spawn(move || {
            use std::io::Write as _;
            let _ = stdin.write_all(&input);
        });
    }
    let out = capture(child.stdout.take().map(|p| Box::new(p) as _));
    let err = capture(child.stderr.take().map(|p| Box::new(p) as _));
    let pgid = Pid::from_raw(child.id() as i32);
    let status = match child.wait_timeout(timeout) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = killpg(pgid, Signal::SIGKILL);
            let _ = child.wait();
            return Err(RunError::TimedOut {
                program,
                after: timeout,
            });
        }
        Err(source) => {
            let _ = killpg(pgid, Signal::SIGKILL);
            return Err(RunError::Wait { program, source });
        }
    };
    // The child is gone; make sure no grandchild keeps the pipes (and our reader threads) alive.
    let _ = killpg(pgid, Signal::SIGKILL);
    let (stdout, t1) = out.join().unwrap_or_default();
    let (stderr, t2) = err.join().unwrap_or_default();
    Ok(Captured {
        status,
        stdout,
        stderr,
        truncated: t1 || t2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn captures_output_and_status() {
        let c = run_captured(sh("echo out; echo err >&2; exit 3"), Duration::from_secs(5)).unwrap();
        assert_eq!(c.stdout, b"out\n");
        assert_eq!(c.stderr, b"err\n");
        assert_eq!(describe_status(&c.status), "exit status 3");
    }

    #[test]
    fn feeds_its_input_on_stdin() {
        let c = run_fed(sh("cat"), Some(b"{}".to_vec()), Duration::from_secs(5)).unwrap();
        assert_eq!(c.stdout, b"{}");
    }

    #[test]
    fn kills_on_timeout_including_grandchildren() {
        let start = std::time::Instant::now();
        let err = run_captured(sh("sleep 30 & sleep 30"), Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, RunError::TimedOut { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn reports_signals_and_missing_programs() {
        let c = run_captured(sh("kill -9 $$"), Duration::from_secs(5)).unwrap();
        assert_eq!(describe_status(&c.status), "killed by signal 9 (SIGKILL)");
        let err =
            run_captured(Command::new("/no/such/program"), Duration::from_secs(5)).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot start `/no/such/program`"),
            "{err}"
        );
    }
}
