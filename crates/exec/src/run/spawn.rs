//! Starts a job's process as `posix_spawn` would, without its per-call stack.
//!
//! glibc's `posix_spawn` (which `std::process::Command` uses) maps a fresh stack for the child
//! of every call and unmaps it after. Unmapping memory of a process whose other threads run on
//! other CPUs makes the kernel interrupt each of those CPUs to flush their TLBs: with the
//! scheduler and the other slot busy, a start cost the starting thread ~68 µs instead of ~41
//! (a C loop starting `/bin/true` beside a busy thread, BENCHMARKS.md, session 23). Here each
//! slot thread keeps one small stack for all its starts, and the child is created as
//! `posix_spawn` creates it: `clone(CLONE_VM | CLONE_VFORK)`, so it borrows this process's
//! memory until its `execve` and the parent resumes only then. `CLONE_PIDFD` hands back the
//! pidfd the follower polls, without a `pidfd_open` per start.
//!
//! `execve`, `dup2`, `chdir` and `setpgid` are made as raw system calls, as glibc's
//! `posix_spawn` makes them through its internal symbols: a tool that wraps libc's (an
//! `LD_PRELOAD` build tracer) would otherwise run its wrapper in the child, on shared memory.
//!
//! The child does what `Command` asked of `posix_spawn`: its own process group, `/dev/null` for
//! stdin and the log pipe for stdout and stderr, the graph's folder, handled signals back to
//! their defaults (and `SIGPIPE`, which Rust ignores), no blocked signals, then `execve`. It runs
//! on memory it shares with this process's other threads, so it only makes system calls through
//! libc: no allocation, no lock. A failing step leaves its `errno` where the parent reads it.
//!
//! A job that ends stays a zombie until the follower has killed what it left in its process
//! group ([`JobProcess::try_wait`] does not reap): while the zombie holds the pid, no new process
//! can take it, so the group's id cannot name someone else's processes.
//!
//! The one module of `databuild-exec` allowed `unsafe` (with `link`'s `exchange`,
//! `databuild-log`'s `wal_batch` and the binary's `main.rs`, the only ones in the workspace):
//! `clone` with a stack of our own.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::OnceLock;

/// A job's command, as `execve` takes it.
pub(crate) struct Launch {
    program: CString,
    /// `argv` and `envp` own the strings `argv_ptrs` and `envp_ptrs` point into (the inherited
    /// variables' are [`inherited_env`]'s, kept for the whole process).
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    envp_ptrs: Vec<*const c_char>,
    dir: CString,
}

/// Bytes that cannot go to `execve`: a NUL inside a program, argument, variable or folder.
fn c_string(bytes: &[u8]) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a NUL byte in the command, its environment or its folder",
        )
    })
}

impl Launch {
    /// `program` run with `args` (after `argv[0]`, the program itself) in `dir`, with this
    /// process's environment and `env` over it (a name in `env` replaces the inherited one).
    pub(crate) fn new(
        program: &Path,
        args: &[&OsStr],
        env: &[(String, String)],
        dir: &Path,
    ) -> std::io::Result<Launch> {
        let program = c_string(program.as_os_str().as_bytes())?;
        let mut argv = vec![program.clone()];
        for arg in args {
            argv.push(c_string(arg.as_bytes())?);
        }
        // A name given twice takes its last value, as with `Command::envs`.
        let mut own: Vec<&(String, String)> = Vec::with_capacity(env.len());
        for pair in env {
            if !databuild_core::graph::is_env_name(&pair.0) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("`{}` cannot name an environment variable", pair.0),
                ));
            }
            own.retain(|(name, _)| *name != pair.0);
            own.push(pair);
        }
        let mut envp = Vec::with_capacity(own.len());
        for (name, value) in &own {
            envp.push(c_string(format!("{name}={value}").as_bytes())?);
        }
        let inherited = inherited_env()
            .iter()
            .filter(|v| !own.iter().any(|(n, _)| n.as_bytes() == v.name()))
            .map(|v| v.entry.as_ptr());
        let mut envp_ptrs: Vec<*const c_char> = inherited.collect();
        envp_ptrs.extend(envp.iter().map(|s| s.as_ptr()));
        envp_ptrs.push(std::ptr::null());
        let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|s| s.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        Ok(Launch {
            argv_ptrs,
            envp_ptrs,
            _argv: argv,
            _envp: envp,
            program,
            dir: c_string(dir.as_os_str().as_bytes())?,
        })
    }
}

/// A variable of this process's environment, as `execve` takes it (`NAME=value`).
struct Inherited {
    entry: CString,
    name_len: usize,
}

impl Inherited {
    fn name(&self) -> &[u8] {
        &self.entry.as_bytes()[..self.name_len]
    }
}

/// This process's environment, read once: every job inherits it but for the names its run sets.
/// Reading and copying it again for each start was most of the 14% of a slot thread's time its
/// `Launch::new` took (perf, 24k jobs). Nothing in DataBuild changes its own environment once it
/// runs (no `set_var`).
fn inherited_env() -> &'static [Inherited] {
    static INHERITED: OnceLock<Vec<Inherited>> = OnceLock::new();
    INHERITED.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(name, value)| {
                let entry = [name.as_bytes(), b"=", value.as_bytes()].concat();
                Some(Inherited {
                    entry: CString::new(entry).ok()?,
                    name_len: name.len(),
                })
            })
            .collect()
    })
}

/// A started job process, reaped at the latest when dropped (its group killed first if it
/// still runs).
pub(crate) struct JobProcess {
    pid: i32,
    /// Its exit, once seen (it may not be reaped yet).
    exit: Option<ExitStatus>,
    reaped: bool,
    /// What the kernel counted of it, once reaped.
    usage: Option<Usage>,
    /// This process's peak resident memory once the job had started: the floor under which
    /// the kernel's count of the job's peak is this process's, not the job's (see [`Usage`]).
    spawner_peak_rss: u64,
}

/// This process's peak resident memory (`getrusage(RUSAGE_SELF)`), in bytes.
fn own_peak_rss() -> u64 {
    // SAFETY: a zeroed `rusage` is a valid value of the plain C struct `getrusage` fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: asks about this process, writing into a local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss.max(0) as u64 * 1024
}

/// What the kernel counted of a reaped job (`wait4`'s `rusage`): the job and every descendant
/// it waited for. Descendants it left running are killed with its group, uncounted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub user: std::time::Duration,
    pub system: std::time::Duration,
    /// The peak resident memory of the largest single process among them, when the kernel's
    /// count tells it. A job started on this process's memory (`CLONE_VM`, as `posix_spawn`
    /// starts one too) inherits this process's peak at its `execve` as its own: a count no
    /// higher than that peak may be this process's, so it says nothing of the job (`None`).
    pub max_rss_bytes: Option<u64>,
    /// Block I/O (512-byte blocks in the kernel's count): page-cache hits are not counted.
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl Usage {
    fn of(r: &libc::rusage, spawner_peak_rss: u64) -> Usage {
        let time = |t: libc::timeval| {
            std::time::Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000)
        };
        let count = |n: libc::c_long| n.max(0) as u64;
        Usage {
            user: time(r.ru_utime),
            system: time(r.ru_stime),
            // Linux counts it in KiB.
            max_rss_bytes: Some(count(r.ru_maxrss) * 1024).filter(|b| *b > spawner_peak_rss),
            read_bytes: count(r.ru_inblock) * 512,
            write_bytes: count(r.ru_oublock) * 512,
        }
    }
}

/// What [`spawn`] hands back: the process, and a pidfd of it when the kernel gives one.
pub(crate) struct Spawned {
    pub process: JobProcess,
    pub pidfd: Option<OwnedFd>,
}

impl JobProcess {
    pub(crate) fn id(&self) -> i32 {
        self.pid
    }

    /// Its exit status if it has ended, without waiting, and without reaping it: see the
    /// module's comment, and [`JobProcess::reap`].
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.exit.is_none() {
            self.exit = self.peek()?;
        }
        Ok(self.exit)
    }

    /// `waitid(WNOWAIT)`: the exit, leaving the zombie in place.
    fn peek(&self) -> std::io::Result<Option<ExitStatus>> {
        loop {
            // SAFETY: asks about our own child, writing into a zeroed local.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            let r = unsafe { libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags) };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // SAFETY: filled by `waitid` for a `SIGCHLD`-style event (or left zeroed).
            let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
            if pid == 0 {
                return Ok(None); // still running
            }
            // Back into the form `waitpid` gives, which `ExitStatus` reads.
            let raw = match info.si_code {
                libc::CLD_EXITED => (status & 0xff) << 8,
                libc::CLD_DUMPED => status | 0x80,
                _ => status, // killed by the signal `status`
            };
            return Ok(Some(ExitStatus::from_raw(raw)));
        }
    }

    /// What the kernel counted of it, once [`JobProcess::reap`]ed.
    pub(crate) fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Reaps it, waiting for it to end if it runs (its pid is then free for others). `wait4`,
    /// not `waitpid`: the same system call, which also hands back what it used.
    pub(crate) fn reap(&mut self) -> std::io::Result<ExitStatus> {
        let mut status: c_int = 0;
        while !self.reaped {
            // SAFETY: a zeroed `rusage` is a valid value of the plain C struct `wait4` fills.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: waits for our own child, not reaped yet, writing its status and usage into
            // locals.
            let r = unsafe { libc::wait4(self.pid, &mut status, 0, &mut usage) };
            if r == self.pid {
                self.reaped = true;
                self.usage = Some(Usage::of(&usage, self.spawner_peak_rss));
                self.exit.get_or_insert(ExitStatus::from_raw(status));
            } else {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
        Ok(self.exit.expect("set when reaped"))
    }
}

impl Drop for JobProcess {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signals our own child's group (it made one of its pid before `execve`, or
            // failed and was reaped by `spawn`): not reaped yet, so the group's id is still ours.
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
            let _ = self.reap();
        }
    }
}

/// What the child reads, and where it leaves the `errno` of a step that failed.
#[repr(C)]
struct ChildArgs {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    dir: *const c_char,
    stdin: RawFd,
    output: RawFd,
    /// The last signal whose handler the child resets (`SIGRTMAX`, read in the parent).
    last_signal: c_int,
    error: c_int,
}

/// A stack for the children a thread starts: mapped once per thread, below a guard page.
struct ChildStack {
    base: *mut c_void,
    len: usize,
}

const STACK_BYTES: usize = 64 * 1024;
const GUARD_BYTES: usize = 4096;

impl ChildStack {
    fn new() -> std::io::Result<ChildStack> {
        let len = STACK_BYTES + GUARD_BYTES;
        // SAFETY: a fresh anonymous mapping; its lowest page becomes inaccessible.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let stack = ChildStack { base, len };
            if libc::mprotect(base, GUARD_BYTES, libc::PROT_NONE) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(stack)
        }
    }

    /// The stack's top (it grows down), 16-byte aligned as the ABI wants.
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping; page-aligned, so 16-byte aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: our own mapping, used by no child any more (each ended its use at `execve`).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

thread_local! {
    static STACK: RefCell<Option<ChildStack>> = const { RefCell::new(None) };
}

/// `/dev/null`, opened once for every job's stdin.
fn dev_null() -> std::io::Result<RawFd> {
    static NULL: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = NULL.get() {
        return Ok(fd.as_raw_fd());
    }
    let file = above_std(std::fs::File::open("/dev/null")?.into())?;
    Ok(NULL.get_or_init(|| file).as_raw_fd())
}

/// `fd` moved above the standard descriptors (0–2), where the child's `dup2` onto them cannot
/// overwrite it before it is read (when this process was started with one of them closed).
fn above_std(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// Whether pidfds can be polled for a child's exit (Linux 5.3, with `pidfd_open`). Linux 5.2
/// hands one back from `clone` but reports it readable at once, and kernels before ignore the
/// flag: the follower then waits on the pipe and `waitid` instead.
fn pidfds_work() -> bool {
    static WORK: OnceLock<bool> = OnceLock::new();
    *WORK.get_or_init(|| {
        // SAFETY: opens a pidfd of this process, closed at once.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        if fd < 0 {
            return false;
        }
        // SAFETY: the descriptor just opened, owned by nobody else.
        drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        true
    })
}

/// Starts `launch` with `output` as its stdout and stderr (this process's copy closes once the
/// child has it); returns once the child has called `execve` (or failed before: then the error,
/// and the child is reaped).
pub(crate) fn spawn(launch: &Launch, output: OwnedFd) -> std::io::Result<Spawned> {
    let stdin = dev_null()?;
    let output = above_std(output)?;
    STACK.with(|cell| {
        let mut stack = cell.borrow_mut();
        if stack.is_none() {
            *stack = Some(ChildStack::new()?);
        }
        let stack = stack.as_ref().expect("just made");
        let mut args = ChildArgs {
            program: launch.program.as_ptr(),
            argv: launch.argv_ptrs.as_ptr(),
            envp: launch.envp_ptrs.as_ptr(),
            dir: launch.dir.as_ptr(),
            stdin,
            output: output.as_raw_fd(),
            last_signal: libc::SIGRTMAX(),
            error: 0,
        };
        clone_child(stack, &mut args, pidfds_work())
    })
}

/// One `clone` of the child onto `stack`, all signals blocked around it so that none is
/// handled by this process's handlers on the child's side before it resets them.
fn clone_child(
    stack: &ChildStack,
    args: &mut ChildArgs,
    with_pidfd: bool,
) -> std::io::Result<Spawned> {
    let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    if with_pidfd {
        flags |= libc::CLONE_PIDFD;
    }
    let mut pidfd: c_int = -1;
    // SAFETY: `child_main` runs on `stack` (this thread's, unused by any other child: this
    // thread is suspended until the child's `execve` or exit, `CLONE_VFORK`), reads `args`,
    // which outlive the call, and makes only system calls. The signal masks are plain values.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            stack.top(),
            flags,
            (args as *mut ChildArgs).cast(),
            &mut pidfd as *mut c_int,
        );
        let cloned = std::io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(cloned);
        }
        pid
    };
    let pidfd = (with_pidfd && pidfd >= 0).then(|| {
        // SAFETY: the kernel just gave us this descriptor, owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(pidfd) }
    });
    let mut process = JobProcess {
        pid,
        exit: None,
        reaped: false,
        usage: None,
        // Read once the child has exec'd (the parent resumes only then): a peak only grows, so
        // this is at least what the child inherited.
        spawner_peak_rss: own_peak_rss(),
    };
    // SAFETY: the child wrote `error` (if at all) before it exited; it has, or has exec'd.
    let error = unsafe { std::ptr::read_volatile(&args.error) };
    if error != 0 {
        let _ = process.reap();
        return Err(std::io::Error::from_raw_os_error(error));
    }
    Ok(Spawned { process, pidfd })
}

/// The child, from `clone` to `execve`: system calls only (see the module's comment).
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive while the parent waits for this child.
    unsafe {
        let args = &mut *arg.cast::<ChildArgs>();
        let fail = |args: &mut ChildArgs| -> ! {
            std::ptr::write_volatile(&mut args.error, *libc::__errno_location());
            libc::_exit(127)
        };
        if libc::syscall(libc::SYS_setpgid, 0, 0) != 0 {
            fail(args);
        }
        // `dup3` (no flags) is `dup2` on every architecture; `from` is above 2, never `to`.
        for (from, to) in [(args.stdin, 0), (args.output, 1), (args.output, 2)] {
            if libc::syscall(libc::SYS_dup3, from, to, 0) < 0 {
                fail(args);
            }
        }
        if libc::syscall(libc::SYS_chdir, args.dir) != 0 {
            fail(args);
        }
        // As glibc's `posix_spawn` does for `Command`: what this process handles goes back to
        // the default, what it ignores stays ignored, and `SIGPIPE` (ignored by Rust's runtime)
        // goes back to the default too.
        // Up to `SIGRTMAX`: glibc's own two real-time signals refuse `sigaction`, and are skipped.
        for signal in 1..=args.last_signal {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut action) != 0 {
                continue;
            }
            let handled =
                action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN;
            if handled || signal == libc::SIGPIPE {
                action.sa_sigaction = libc::SIG_DFL;
                action.sa_flags = 0;
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::syscall(libc::SYS_execve, args.program, args.argv, args.envp);
        fail(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn run(program: &str, args: &[&str], env: &[(&str, &str)], dir: &Path) -> (ExitStatus, String) {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let launch = Launch::new(Path::new(program), &args, &env, dir).expect("launch");
        let (mut reader, writer) = std::io::pipe().expect("pipe");
        let mut spawned = spawn(&launch, writer.into()).expect("spawn");
        let mut out = String::new();
        reader.read_to_string(&mut out).expect("read");
        let status = loop {
            if let Some(s) = spawned.process.try_wait().expect("wait") {
                break s;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        (status, out)
    }

    #[test]
    fn a_child_gets_its_arguments_environment_folder_group_and_output() {
        let dir = tempfile::tempdir().expect("dir");
        let (status, out) = run(
            "/bin/sh",
            &[
                "-c",
                "echo \"$1 $V $(pwd) $$\" && ps -o pgid= -p $$ && echo err >&2",
                "sh",
                "arg",
            ],
            &[("V", "value")],
            dir.path(),
        );
        assert!(status.success(), "{status:?}");
        let lines: Vec<&str> = out.lines().collect();
        let first: Vec<&str> = lines[0].split(' ').collect();
        assert_eq!(first[..2], ["arg", "value"]);
        assert_eq!(Path::new(first[2]), dir.path().canonicalize().unwrap());
        assert_eq!(lines[1].trim(), first[3], "its own process group");
        assert_eq!(lines[2], "err", "stderr goes where stdout goes");
    }

    #[test]
    fn a_variable_given_again_is_replaced_not_repeated() {
        let dir = tempfile::tempdir().expect("dir");
        let (_, out) = run(
            "/usr/bin/env",
            &[],
            &[("PATH", "/first"), ("V", "1"), ("PATH", "/replaced")],
            dir.path(),
        );
        let paths: Vec<&str> = out.lines().filter(|l| l.starts_with("PATH=")).collect();
        assert_eq!(paths, ["PATH=/replaced"]);
        assert!(out.lines().any(|l| l == "V=1"), "{out}");
    }

    #[test]
    fn the_child_has_default_sigpipe_and_no_blocked_signal() {
        let dir = tempfile::tempdir().expect("dir");
        // `grep` itself reads its mask: a shell blocks every signal while it starts a command.
        let (_, out) = run(
            "/usr/bin/grep",
            &["-E", "^(SigBlk|SigIgn)", "/proc/self/status"],
            &[],
            dir.path(),
        );
        assert_eq!(out.lines().count(), 2, "{out}");
        for line in out.lines() {
            let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
            if line.starts_with("SigBlk") {
                assert_eq!(mask, 0, "{out}");
            } else {
                assert_eq!(
                    mask & (1 << (libc::SIGPIPE - 1)),
                    0,
                    "SIGPIPE ignored: {out}"
                );
            }
        }
    }

    #[test]
    fn a_step_that_fails_in_the_child_is_the_error() {
        let launch = Launch::new(
            Path::new("/bin/true"),
            &[],
            &[],
            Path::new("/no/such/folder"),
        )
        .expect("launch");
        let (_reader, writer) = std::io::pipe().expect("pipe");
        let e = spawn(&launch, writer.try_clone().expect("dup").into())
            .err()
            .expect("chdir fails");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path().join("data.txt");
        std::fs::write(&data, "not a program").expect("write");
        let launch = Launch::new(&data, &[], &[], Path::new("/")).expect("launch");
        let e = spawn(&launch, writer.into()).err().expect("not executable");
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    }

    #[test]
    fn a_variable_name_with_an_equals_sign_is_refused() {
        for name in ["A=B", ""] {
            let env = [(name.to_string(), "x".to_string())];
            let e = Launch::new(Path::new("/bin/true"), &[], &env, Path::new("/"))
                .err()
                .expect("refused");
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{name}");
        }
    }

    #[test]
    fn a_nul_byte_is_refused_before_anything_starts() {
        let e = Launch::new(
            Path::new("/bin/true"),
            &[OsStr::new("a\0b")],
            &[],
            Path::new("/"),
        )
        .err()
        .expect("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    /// The state letter of `/proc/PID/stat`, if the process is there.
    fn state(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    /// `sh -c script`, in `/`.
    fn sh(script: &str) -> Launch {
        Launch::new(
            Path::new("/bin/sh"),
            &[OsStr::new("-c"), OsStr::new(script)],
            &[],
            Path::new("/"),
        )
        .expect("launch")
    }

    #[test]
    fn an_ended_job_stays_a_zombie_until_reaped() {
        let launch = sh("exit 3");
        let (_reader, writer) = std::io::pipe().expect("pipe");
        let mut process = spawn(&launch, writer.into()).expect("spawn").process;
        let status = loop {
            if let Some(s) = process.try_wait().expect("wait") {
                break s;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(status.code(), Some(3));
        // Seen, not reaped: its pid (and so its group's id) is still taken.
        assert_eq!(state(process.id()), Some('Z'));
        assert_eq!(
            process.try_wait().expect("again").map(|s| s.code()),
            Some(Some(3))
        );
        assert_eq!(process.reap().expect("reap").code(), Some(3));
        assert_eq!(state(process.id()), None);
    }

    #[test]
    fn a_dropped_process_takes_its_group_with_it() {
        let launch = sh("sleep 30 & echo $!; wait");
        let (reader, writer) = std::io::pipe().expect("pipe");
        let spawned = spawn(&launch, writer.into()).expect("spawn");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(reader), &mut line).expect("read");
        let sleeper: i32 = line.trim().parse().expect("a pid");
        drop(spawned);
        // The background `sleep` of its group is killed too (gone, or a zombie of whoever
        // adopted it).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !matches!(state(sleeper), None | Some('Z')) {
            assert!(
                std::time::Instant::now() < deadline,
                "the group's `sleep` still runs"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_dropped_process_is_killed_and_reaped() {
        let launch = Launch::new(
            Path::new("/bin/sleep"),
            &[OsStr::new("30")],
            &[],
            Path::new("/"),
        )
        .expect("launch");
        let (_reader, writer) = std::io::pipe().expect("pipe");
        let spawned = spawn(&launch, writer.into()).expect("spawn");
        let pid = spawned.process.id();
        drop(spawned);
        // Reaped: the pid is no child of ours any more.
        let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        assert_eq!(r, -1);
    }
}
