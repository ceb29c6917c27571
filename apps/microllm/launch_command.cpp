// `microllm launch`: starts one process per local GPU for data-parallel training, each with
// the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), so `microllm train` (or any torchrun-style program) finds its place:
//
//   microllm launch --nproc 8 -- microllm train --config … --device cuda …
//   microllm launch --nproc 8 --nnodes 2 --node-rank R --master HOST0:29500 -- microllm train …
//
// Global rank = node_rank · nproc + local rank. A command word `microllm` runs this very
// executable. Each child gets its own process group; SIGINT, SIGTERM, SIGHUP and SIGQUIT
// sent to the launcher are forwarded to every child's group (a second one escalates to
// SIGKILL), and a child dies with the launcher (PR_SET_PDEATHSIG). When a child fails (non-zero
// exit or a signal), the launcher names its rank, sends SIGTERM to the other children
// (SIGKILL after --kill-timeout seconds) and exits with that child's status (128 + signal
// for a signal). Stopping a rank stops its whole process group: the launcher waits until the
// groups of the stopped ranks are empty, so a process a rank started that ignores SIGTERM is
// killed at the deadline too, rather than outliving the launcher. Reference: torchrun's environment
// variables (PyTorch "torchrun (Elastic Launch)").
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "microllm/core/error.h"

extern char** environ;

namespace microllm::app {
namespace {

struct LaunchCli {
  int nproc = 1, nnodes = 1, node_rank = 0;
  std::string master;  // ADDR:PORT ([ADDR]:PORT for IPv6)
  double kill_timeout = 10.0;
  std::vector<std::string> command;
};

struct Child {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  bool stopped = false;  // signalled by the launcher while running: its group is waited for
};

// "host:port" or "[v6 address]:port" → (host, port).
std::pair<std::string, int> parse_master(const std::string& text) {
  const size_t colon = text.rfind(':');
  MICROLLM_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < text.size(), "launch",
                 "--master '", text, "' is not ADDR:PORT");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  MICROLLM_CHECK(end && *end == '\0' && port >= 1 && port <= 65535, "launch", "--master '", text,
                 "': port '", port_text, "' is not in 1..65535");
  return {host, static_cast<int>(port)};
}

std::string self_executable() {
  std::vector<char> buf(PATH_MAX + 1, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), PATH_MAX);
  MICROLLM_CHECK(n > 0, "launch",
                 "cannot find this executable (/proc/self/exe): ", std::strerror(errno));
  return std::string(buf.data(), static_cast<size_t>(n));
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  return "stopped (status " + std::to_string(status) + ")";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Sends `sig` to every running child's process group (or to the child, if it has none yet)
// and to what is left of the groups of stopped children, and marks the running ones stopped.
void signal_children(std::vector<Child>& children, int sig) {
  for (Child& c : children) {
    if (c.running && ::kill(-c.pid, sig) != 0) ::kill(c.pid, sig);
    if (!c.running && c.stopped) ::kill(-c.pid, sig);
    c.stopped = c.stopped || c.running;
  }
}

// Whether a stopped child's process group still has members (the child itself, or what it
// started). A group id is not reused while the group has members.
bool stopped_groups_left(const std::vector<Child>& children) {
  for (const Child& c : children)
    if (c.stopped && ::kill(-c.pid, 0) == 0) return true;
  return false;
}

int run_launch(const LaunchCli& cli) {
  MICROLLM_CHECK(cli.nnodes >= 1 && cli.node_rank >= 0 && cli.node_rank < cli.nnodes, "launch",
                 "--node-rank ", cli.node_rank, " must lie in 0..", cli.nnodes - 1, " (--nnodes ",
                 cli.nnodes, ")");
  MICROLLM_CHECK(cli.nnodes == 1 || !cli.master.empty(), "launch", "--nnodes ", cli.nnodes,
                 " needs --master ADDR:PORT (an address of node 0 that every node can reach)");
  MICROLLM_CHECK(!cli.command.empty(), "launch", "no command to run (give it after --)");
  MICROLLM_CHECK(cli.kill_timeout >= 0, "launch", "--kill-timeout must be ≥ 0, found ",
                 cli.kill_timeout);
  const auto [master_addr, master_port] =
      parse_master(cli.master.empty() ? "127.0.0.1:29500" : cli.master);
  const int world = cli.nnodes * cli.nproc;

  // argv and environment of every child, built before forking.
  std::vector<std::string> args = cli.command;
  if (args[0] == "microllm") args[0] = self_executable();
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const char* kOurs[] = {
      "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="};
  std::vector<std::string> inherited;
  for (char** e = environ; e && *e; ++e) {
    bool ours = false;
    for (const char* prefix : kOurs)
      ours = ours || std::strncmp(*e, prefix, std::strlen(prefix)) == 0;
    if (!ours) inherited.emplace_back(*e);
  }
  std::vector<std::vector<std::string>> envs(static_cast<size_t>(cli.nproc), inherited);
  std::vector<std::vector<char*>> envps(static_cast<size_t>(cli.nproc));
  std::vector<Child> children(static_cast<size_t>(cli.nproc));
  for (int local = 0; local < cli.nproc; ++local) {
    Child& c = children[static_cast<size_t>(local)];
    c.local_rank = local;
    c.rank = cli.node_rank * cli.nproc + local;
    std::vector<std::string>& env = envs[static_cast<size_t>(local)];
    env.push_back("RANK=" + std::to_string(c.rank));
    env.push_back("WORLD_SIZE=" + std::to_string(world));
    env.push_back("LOCAL_RANK=" + std::to_string(local));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(cli.nproc));
    env.push_back("MASTER_ADDR=" + master_addr);
    env.push_back("MASTER_PORT=" + std::to_string(master_port));
    for (std::string& kv : env) envps[static_cast<size_t>(local)].push_back(kv.data());
    envps[static_cast<size_t>(local)].push_back(nullptr);
  }

  // Signals are received with sigtimedwait below; children get the original mask back.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&handled, sig);
  sigprocmask(SIG_BLOCK, &handled, &original);
  std::fprintf(stderr, "microllm launch: ranks %d..%d of %d on this node, master %s:%d\n",
               cli.node_rank * cli.nproc, cli.node_rank * cli.nproc + cli.nproc - 1, world,
               master_addr.c_str(), master_port);
  std::fflush(stderr);
  const pid_t launcher = ::getpid();
  int alive = 0;
  for (Child& c : children) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(128 + SIGTERM);  // the launcher died before prctl
      sigprocmask(SIG_SETMASK, &original, nullptr);
      ::execvpe(argv[0], argv.data(), envps[static_cast<size_t>(c.local_rank)].data());
      std::fprintf(stderr, "microllm launch: rank %d: cannot run '%s': %s\n", c.rank, argv[0],
                   std::strerror(errno));
      ::_exit(127);
    }
    if (pid < 0) {
      const int err = errno;
      signal_children(children, SIGKILL);
      while (::waitpid(-1, nullptr, 0) > 0) {
      }
      sigprocmask(SIG_SETMASK, &original, nullptr);
      MICROLLM_FAIL("launch", "fork for rank ", c.rank, ": ", std::strerror(err));
    }
    ::setpgid(pid, pid);  // also here, so the group exists before any signal is forwarded
    c.pid = pid;
    c.running = true;
    ++alive;
  }

  using Clock = std::chrono::steady_clock;
  const auto never = Clock::time_point::max();
  auto kill_at = never;
  int interrupted = 0;  // the first forwarded signal
  int failed_status = 0;
  const Child* failed = nullptr;
  while (alive > 0 || (kill_at != never && stopped_groups_left(children))) {
    timespec tick{0, 200 * 1000 * 1000};
    siginfo_t info;
    const int sig = ::sigtimedwait(&handled, &info, &tick);
    if (sig > 0 && sig != SIGCHLD) {
      if (interrupted == 0) {
        interrupted = sig;
        std::fprintf(stderr, "microllm launch: forwarding %s to %d rank(s)\n", ::strsignal(sig),
                     alive);
        signal_children(children, sig);
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(cli.kill_timeout));
      } else {
        signal_children(children, SIGKILL);
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Child& c : children) {
        if (c.pid != pid || !c.running) continue;
        c.running = false;
        --alive;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed == nullptr && interrupted == 0) {
          failed = &c;
          failed_status = status;
          c.stopped = true;  // what it started is stopped with the others
          std::fprintf(stderr,
                       "microllm launch: rank %d (local rank %d, pid %d) %s; stopping the other %d "
                       "rank(s)\n",
                       c.rank, c.local_rank, static_cast<int>(c.pid),
                       describe_status(status).c_str(), alive);
          signal_children(children, SIGTERM);
          kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(cli.kill_timeout));
        }
      }
    }
    if (Clock::now() >= kill_at) {
      signal_children(children, SIGKILL);
      kill_at = never;
    }
  }
  sigprocmask(SIG_SETMASK, &original, nullptr);
  if (failed != nullptr) {
    std::fprintf(stderr, "microllm launch: failed: rank %d %s\n", failed->rank,
                 describe_status(failed_status).c_str());
    return exit_code_of(failed_status) != 0 ? exit_code_of(failed_status) : 1;
  }
  if (interrupted != 0) return 128 + interrupted;
  return 0;
}

}  // namespace

Command add_launch_command(CLI::App& parent) {
  auto c = std::make_shared<LaunchCli>();
  CLI::App* cmd = parent.add_subcommand(
      "launch",
      "Start one process per local GPU for data-parallel training (torchrun environment)");
  cmd->add_option("--nproc", c->nproc, "processes on this node (one per GPU)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--nnodes", c->nnodes, "nodes taking part")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--node-rank", c->node_rank, "this node's index, 0..nnodes-1")
      ->capture_default_str();
  cmd->add_option("--master", c->master,
                  "ADDR:PORT where rank 0 listens (default 127.0.0.1:29500; "
                  "required with --nnodes > 1)");
  cmd->add_option("--kill-timeout", c->kill_timeout,
                  "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  cmd->add_option("command", c->command, "the program and its arguments, after --")->required();
  cmd->footer(
      "Example: microllm launch --nproc 8 -- microllm train --config cfg.json --data train.bin "
      "--device cuda");
  return {cmd, [c] { return run_launch(*c); }};
}

}  // namespace microllm::app
