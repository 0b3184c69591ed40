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
//! pidfd the follower polls, without a `pidfd_open`.
//!
//! The child does what `Command` asked of `posix_spawn`: its own process group, `/dev/null` for
//! stdin and the log pipe for stdout and stderr, the graph's folder, handled signals back to
//! their defaults (and `SIGPIPE`, which Rust ignores), no blocked signals, then `execve`. It runs
//! on memory it shares with this process's other threads, so it only makes system calls through
//! libc: no allocation, no lock. A failing step leaves its `errno` where the parent reads it.
//!
//! The one module of `databuild-exec` allowed `unsafe` (with `databuild-log`'s `wal_batch` and the
//! binary's `main.rs`, the only ones in the workspace): `clone` with a stack of our own.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CString, OsStr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// A job's command, as `execve` takes it.
pub(crate) struct Launch {
    program: CString,
    /// `argv` and `envp` own the strings `argv_ptrs` and `envp_ptrs` point into.
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
            own.retain(|(name, _)| *name != pair.0);
            own.push(pair);
        }
        let mut envp = Vec::with_capacity(own.len() + 64);
        for (name, value) in std::env::vars_os() {
            if !own.iter().any(|(n, _)| n.as_bytes() == name.as_bytes()) {
                envp.push(c_string(
                    &[name.as_bytes(), b"=", value.as_bytes()].concat(),
                )?);
            }
        }
        for (name, value) in own {
            envp.push(c_string(format!("{name}={value}").as_bytes())?);
        }
        let pointers = |strings: &[CString]| {
            let mut p: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        Ok(Launch {
            argv_ptrs: pointers(&argv),
            envp_ptrs: pointers(&envp),
            _argv: argv,
            _envp: envp,
            program,
            dir: c_string(dir.as_os_str().as_bytes())?,
        })
    }
}

/// A started job process, reaped at the latest when dropped (killed first if it still runs).
pub(crate) struct JobProcess {
    pid: i32,
    reaped: bool,
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

    /// Its exit status if it has ended (and reaps it), without waiting.
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.wait_with(libc::WNOHANG)
    }

    fn wait_with(&mut self, flags: c_int) -> std::io::Result<Option<ExitStatus>> {
        let mut status: c_int = 0;
        loop {
            // SAFETY: waits for our own child, writing its status into a local.
            let r = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            match r {
                0 => return Ok(None),
                r if r == self.pid => {
                    self.reaped = true;
                    return Ok(Some(ExitStatus::from_raw(status)));
                }
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

impl Drop for JobProcess {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signals and reaps our own child, which is not reaped yet, so its pid is
            // still ours.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.wait_with(0);
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
    let file = std::fs::File::open("/dev/null")?;
    Ok(NULL.get_or_init(|| above_std(file.into())).as_raw_fd())
}

/// `fd` moved above the standard descriptors (0–2), where the child's `dup2` onto them cannot
/// overwrite it before it is read (when this process was started with one of them closed).
fn above_std(fd: OwnedFd) -> OwnedFd {
    if fd.as_raw_fd() > 2 {
        return fd;
    }
    rustix::io::fcntl_dupfd_cloexec(&fd, 3).unwrap_or(fd)
}

/// Whether the kernel takes `CLONE_PIDFD` (Linux 5.2); found out at the first start.
static NO_CLONE_PIDFD: AtomicBool = AtomicBool::new(false);

/// Starts `launch` with `output` as its stdout and stderr; returns once it has called `execve`
/// (or failed before: then the error, and the child is reaped).
pub(crate) fn spawn(launch: &Launch, output: BorrowedFd<'_>) -> std::io::Result<Spawned> {
    let stdin = dev_null()?;
    let output = above_std(output.try_clone_to_owned()?);
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
            error: 0,
        };
        loop {
            let with_pidfd = !NO_CLONE_PIDFD.load(Ordering::Relaxed);
            match clone_child(stack, &mut args, with_pidfd) {
                Err(e) if with_pidfd && e.raw_os_error() == Some(libc::EINVAL) => {
                    NO_CLONE_PIDFD.store(true, Ordering::Relaxed);
                }
                other => break other,
            }
        }
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
    let mut process = JobProcess { pid, reaped: false };
    // SAFETY: the child wrote `error` (if at all) before it exited; it has, or has exec'd.
    let error = unsafe { std::ptr::read_volatile(&args.error) };
    if error != 0 {
        let _ = process.wait_with(0);
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
        if libc::setpgid(0, 0) != 0 {
            fail(args);
        }
        for (from, to) in [(args.stdin, 0), (args.output, 1), (args.output, 2)] {
            if libc::dup2(from, to) < 0 {
                fail(args);
            }
        }
        if libc::chdir(args.dir) != 0 {
            fail(args);
        }
        // As glibc's `posix_spawn` does for `Command`: what this process handles goes back to
        // the default, what it ignores stays ignored, and `SIGPIPE` (ignored by Rust's runtime)
        // goes back to the default too.
        for signal in 1..32 {
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
        libc::execve(args.program, args.argv, args.envp);
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
        let mut spawned = spawn(&launch, writer.as_fd()).expect("spawn");
        drop(writer);
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

    use std::os::fd::AsFd;

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
        let e = spawn(&launch, writer.as_fd()).err().expect("chdir fails");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path().join("data.txt");
        std::fs::write(&data, "not a program").expect("write");
        let launch = Launch::new(&data, &[], &[], Path::new("/")).expect("launch");
        let e = spawn(&launch, writer.as_fd())
            .err()
            .expect("not executable");
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
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
        let spawned = spawn(&launch, writer.as_fd()).expect("spawn");
        let pid = spawned.process.id();
        drop(spawned);
        // Reaped: the pid is no child of ours any more.
        let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        assert_eq!(r, -1);
    }
}
