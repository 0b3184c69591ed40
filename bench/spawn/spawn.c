/* How much a process start costs the starting thread: glibc's posix_spawn (what
 * std::process::Command uses), against clone(CLONE_VM | CLONE_VFORK) on a stack kept from one
 * start to the next (what crates/exec/src/spawn.rs does), with or without another thread of
 * the process busy on the other core. Each start runs /bin/true with a log pipe, its own
 * process group and, for the clone, the reset of handled signals spawn.rs does in the child.
 *
 *   spawn MODE STARTS BUSY    MODE 0: posix_spawn, 1: clone on a kept stack; BUSY 0 or 1
 * Prints the starting thread's CPU per start (CLOCK_THREAD_CPUTIME_ID) and the wall clock per
 * start (the child's run included). Built and run by bench/spawn.sh. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static volatile int stop = 0;

static void *busy(void *unused) {
  (void)unused;
  volatile unsigned long x = 0;
  while (!stop) x++;
  return 0;
}

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

struct child_args { char **argv; int out; };

static int child(void *p) {
  struct child_args *a = p;
  setpgid(0, 0);
  dup2(a->out, 1);
  dup2(a->out, 2);
  for (int sig = 1; sig < 32; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa;
    sigaction(sig, 0, &sa);
    if ((sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL) || sig == SIGPIPE) {
      sa.sa_handler = SIG_DFL;
      sigaction(sig, &sa, 0);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, 0);
  execve(a->argv[0], a->argv, environ);
  _exit(127);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: spawn MODE STARTS BUSY\n");
    return 2;
  }
  int mode = atoi(argv[1]), n = atoi(argv[2]), with_busy = atoi(argv[3]);
  pthread_t thread;
  if (with_busy) pthread_create(&thread, 0, busy, 0);
  char *child_argv[] = {"/bin/true", 0};
  static char stack[64 * 1024] __attribute__((aligned(16)));
  double cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID), wall0 = clock_s(CLOCK_MONOTONIC);
  for (int i = 0; i < n; i++) {
    int pipe_fds[2];
    pipe2(pipe_fds, O_CLOEXEC);
    pid_t pid;
    if (mode == 0) {
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
      posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
      posix_spawnattr_t attr;
      posix_spawnattr_init(&attr);
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
      posix_spawnattr_setpgroup(&attr, 0);
      posix_spawn(&pid, child_argv[0], &actions, &attr, child_argv, environ);
      posix_spawn_file_actions_destroy(&actions);
      posix_spawnattr_destroy(&attr);
    } else {
      struct child_args a = {child_argv, pipe_fds[1]};
      sigset_t all, old;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old);
      pid = clone(child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
      pthread_sigmask(SIG_SETMASK, &old, 0);
    }
    close(pipe_fds[1]);
    char buf[16];
    while (read(pipe_fds[0], buf, sizeof buf) > 0) {}
    close(pipe_fds[0]);
    int status;
    waitpid(pid, &status, 0);
  }
  double cpu1 = clock_s(CLOCK_THREAD_CPUTIME_ID), wall1 = clock_s(CLOCK_MONOTONIC);
  stop = 1;
  printf("%-32s %-16s %6.1f us of the starting thread, %6.1f us wall a start\n",
         mode ? "clone, stack kept" : "posix_spawn", with_busy ? "thread busy" : "no other thread",
         (cpu1 - cpu0) / n * 1e6, (wall1 - wall0) / n * 1e6);
  return 0;
}
