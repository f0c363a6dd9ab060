// tools/main.cpp — `lockon`: command-line parsing (CLI11) and dispatch.
//
//   lockon run [options] NAME -- COMMAND [ARGS...]
//   lockon key NAME [--arg TYPE:VALUE ...] [--prefix P] | key --no-function ...
//   lockon status KEY
//   lockon release --force KEY
//
// docs/cli.md is the manual; exit_codes.hpp the exit statuses.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "child.hpp"
#include "cli_options.hpp"
#include "exit_codes.hpp"
#include "inspect_command.hpp"
#include "key_command.hpp"
#include "lockon/errors.hpp"
#include "lockon/key.hpp"
#include "lockon/name.hpp"
#include "report.hpp"
#include "run_command.hpp"

#ifndef LOCKON_CLI_VERSION
#define LOCKON_CLI_VERSION "unknown"
#endif

namespace lockon::cli {

std::string exit_code_table() {
  return "Exit status of `run`: COMMAND's own status (128+N if it died of signal N), or:\n"
         "  1    -n found the lock held (change it with -E)\n"
         "  64   usage error: bad option, URL or duration\n"
         "  65   not a lock: NAME or a companion key holds another type\n"
         "  69   Redis unreachable, or no Redlock majority reachable\n"
         "  70   internal error\n"
         "  75   -w ran out while the lock stayed held (release: the lock changed hands)\n"
         "  77   Redis refused the credentials\n"
         "  79   the lock was lost while COMMAND ran (--on-lost=term)\n"
         "  126  COMMAND could not be executed\n"
         "  127  COMMAND not found\n"
         "Other commands exit 0 on success, else with a status above.\n"
         "Environment: LOCKON_REDIS_URL is the server URL when no --url is given\n"
         "(several URLs separated by spaces mean Redlock); default redis://127.0.0.1:6379.";
}

namespace {

void add_url_option(CLI::App& command, ServerOptions& servers) {
  command
      .add_option("--url", servers.urls,
                  "Redis URL redis://[[user]:password@]host[:port][/db], rediss://... (TLS) or unix:///path; repeat it for "
                  "Redlock over several independent masters (default: $LOCKON_REDIS_URL, else "
                  "redis://127.0.0.1:6379)")
      ->type_name("URL")
      ->allow_extra_args(false);
  // Named like redis-cli's; for rediss:// URLs (also settable in the URL's
  // query: ?cacert=...&sni=...).
  command.add_option("--cacert", servers.cacert, "TLS: trusted CA certificates (PEM file); default: the system store")
      ->type_name("FILE");
  command.add_option("--cacertdir", servers.cacertdir, "TLS: directory of trusted CA certificates (hashed names)")
      ->type_name("DIR");
  command.add_option("--cert", servers.cert, "TLS: client certificate (PEM) for mutual TLS; needs --key")
      ->type_name("FILE");
  command.add_option("--key", servers.key, "TLS: private key (PEM) of --cert")->type_name("FILE");
  command.add_option("--sni", servers.sni, "TLS: server name sent and verified (default: the URL's host)")
      ->type_name("NAME");
  command.add_flag("--insecure", servers.insecure,
                   "TLS: do not verify the server's certificate at all (tests only; never a default)");
}

CLI::App* add_run(CLI::App& app, RunOptions& o, std::string& on_lost) {
  CLI::App* run = app.add_subcommand("run", "Run COMMAND while holding the lock NAME (a distributed flock); "
                                             "NAME1 NAME2 ... -- COMMAND holds all the names or none");
  run->add_option("NAME", o.name,
                  "The lock: the Redis key itself, so it excludes any standard lock on that key "
                  "(redis-py, node-redlock, lockon's C++ API)")
      ->required();
  // Not ->required(): after "--" COMMAND is taken before CLI11 parses (see
  // split_at_dash); validate_run_options reports a missing one.
  run->add_option("COMMAND", o.command, "The command and its arguments (put -- before it)");
  add_url_option(*run, o.servers);
  run->add_option("--ttl", o.ttl,
                  "Lease length; renewed every ttl/3 while COMMAND runs, so a crashed lockon frees the "
                  "lock after at most this (e.g. 500ms, 10s, 2m)")
      ->type_name("DURATION")
      ->capture_default_str();
  auto* nonblock = run->add_flag("-n,--nonblock", o.nonblock, "Fail at once if the lock is held (exit status: -E)");
  run->add_option("-w,--wait", o.wait, "Give up after waiting this long for the lock (exit 75); default: wait forever")
      ->type_name("DURATION")
      ->excludes(nonblock);
  run->add_option("-E,--conflict-exit-code", o.conflict_exit_code, "Exit status when -n finds the lock held")
      ->type_name("N")
      ->check(CLI::Range(0, 255))
      ->capture_default_str();
  run->add_option("--fence-env", o.fence_env,
                  "Enable fencing: export the fence (a number that grows with every acquisition of NAME) "
                  "to COMMAND as environment variable VAR")
      ->type_name("VAR");
  run->add_option("--replicas", o.replicas,
                  "Require N replicas to acknowledge the acquisition (Redis WAIT) before COMMAND starts; "
                  "fewer: the lock is released and lockon fails (single server / Sentinel only)")
      ->type_name("N")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  run->add_option("--replica-timeout", o.replica_timeout, "How long --replicas waits for the acknowledgements")
      ->type_name("DURATION")
      ->capture_default_str();
  run->add_option("--on-lost", on_lost,
                  "If the lock is lost while COMMAND runs: term = SIGTERM COMMAND (SIGKILL after "
                  "--kill-after) and exit 79; ignore = warn and let it finish")
      ->type_name("ACTION")
      ->check(CLI::IsMember({"term", "ignore"}))
      ->capture_default_str();
  run->add_option("--kill-after", o.kill_after, "Grace between SIGTERM and SIGKILL for --on-lost=term")
      ->type_name("DURATION")
      ->capture_default_str();
  run->add_option("--label", o.label, "A label for the holder record that `lockon status` shows")
      ->type_name("TEXT");
  run->add_flag("-v,--verbose", o.verbose, "Report progress on stderr (never a password or a full token)");
  auto* shared = run->add_flag("-s,--shared", o.shared,
                               "Hold a reader's share of the read-write lock NAME (lockon::ReadWriteLock): "
                               "shared runs overlap, an --exclusive run (or a C++ writer) excludes them; one server only");
  auto* exclusive = run->add_flag("-x,--exclusive", o.exclusive,
                                  "Hold the writer side of the read-write lock NAME: excludes --shared runs and other "
                                  "--exclusive runs, as flock -x against -s; one server only")
                        ->excludes(shared);
  run->add_option("--permits", o.permits,
                  "Hold one of N permits of the semaphore NAME (lockon::Semaphore): at most N such runs at "
                  "once, like `consul lock -n N`; every user must pass the same N; one server only")
      ->type_name("N")
      ->check(CLI::Range(1LL, 1000000000LL))
      ->excludes(shared)
      ->excludes(exclusive);
  run->footer(
      "NAME is acquired (waiting, unless -n/-w), COMMAND runs as a child while the lease is renewed,\n"
      "and the lock is released once COMMAND is gone. SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to lockon are\n"
      "forwarded to COMMAND (signals from the terminal reach it directly). A signal while waiting\n"
      "ends lockon at once. A lockon killed with SIGKILL leaves a lock that expires after --ttl.\n\n" +
      exit_code_table());
  return run;
}

CLI::App* add_key(CLI::App& app, KeyOptions& o) {
  CLI::App* key = app.add_subcommand("key", "Print the Redis key lock_on derives for a function name and arguments");
  key->add_option("NAME", o.name, "The function identity given to lock_on (omit with --no-function)");
  key->add_option("--arg", o.args,
                  "One lock argument, in order; TYPE is int, uint, str, bool (true/false/1/0) or float, "
                  "e.g. --arg int:42 --arg str:EUR")
      ->type_name("TYPE:VALUE")
      ->allow_extra_args(false);
  key->add_flag("--no-function", o.no_function,
                "Drop the function identity: the key every function locking these arguments shares");
  key->add_option("--prefix", o.prefix, "Key prefix")->type_name("P")->capture_default_str();
  key->footer(std::string(key_layout()));
  return key;
}

CLI::App* add_status(CLI::App& app, InspectOptions& o) {
  CLI::App* status = app.add_subcommand(
      "status", "Show whether a lock key is held, its remaining TTL, fence and the first characters of its token");
  status->add_option("KEY", o.key, "The lock key")->required();
  status->add_flag("--json", o.json, "Print one JSON object (holder, held for, lease left, fence, waiters)");
  add_url_option(*status, o.servers);
  status->footer("Also shows the holder (host, pid, label), how long it has held the lock, the lease left and\n"
                 "the waiters (count, longest wait, who), from the holder records lockon clients write.");
  return status;
}

CLI::App* add_list(CLI::App& app, InspectOptions& o) {
  CLI::App* list = app.add_subcommand("list", "List the locks held now (keys with a lockon holder record)");
  list->add_option("PATTERN", o.key, "SCAN MATCH pattern for lock keys (default: all)");
  list->add_option("--limit", o.limit, "Show at most this many locks")->capture_default_str();
  list->add_flag("--json", o.json, "Print one JSON object");
  add_url_option(*list, o.servers);
  return list;
}

CLI::App* add_release(CLI::App& app, InspectOptions& o) {
  CLI::App* release = app.add_subcommand(
      "release", "Delete a stuck lock after printing what it held (an operator action: requires --force)");
  release->add_option("KEY", o.key, "The lock key")->required();
  release->add_flag("--force", o.force, "Confirm: delete the lock even though someone may hold it");
  add_url_option(*release, o.servers);
  release->footer(
      "Deletes the key only if it still holds the token printed (compare-and-delete), on every node.\n"
      "The fence counter is kept: fences never go backwards.");
  return release;
}

int usage_error(std::string_view message) {
  std::cerr << "lockon: " << argument_secrets().apply(one_line(message)) << " (see 'lockon --help')\n";
  return exit_code::usage;
}

// `lockon run NAME1 NAME2 ... -- COMMAND`: CLI11 is given only the words
// before the first "--" (NAME takes the first positional, COMMAND the other
// positionals: more names); the words after it are COMMAND. Returns how
// many words CLI11 parses.
int split_at_dash(int argc, char** argv, std::vector<std::string>& after_dash) {
  if (argc < 2 || std::string_view(argv[1]) != "run") return argc;
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      after_dash.assign(argv + i + 1, argv + argc);
      return i;
    }
  }
  return argc;
}

void apply_names(RunOptions& o, std::vector<std::string> after_dash) {
  if (!o.command.empty()) {
    o.names.push_back(o.name);
    o.names.insert(o.names.end(), o.command.begin(), o.command.end());
    for (std::size_t i = 1; i < o.names.size(); ++i) o.name += "," + o.names[i];
  }
  o.command = std::move(after_dash);
}

}  // namespace
}  // namespace lockon::cli

int main(int argc, char** argv) {
  using namespace lockon::cli;
  remember_inherited_fds();

  CLI::App app{"lockon — distributed locks on Redis: a distributed flock(1) and lock-key inspection", "lockon"};
  app.set_version_flag("--version", "lockon " LOCKON_CLI_VERSION);
  app.require_subcommand(1);
  app.footer(exit_code_table());

  RunOptions run_options;
  std::string on_lost = "term";
  KeyOptions key_options;
  InspectOptions status_options;
  InspectOptions release_options;
  InspectOptions list_options;
  CLI::App* run = add_run(app, run_options, on_lost);
  CLI::App* key = add_key(app, key_options);
  CLI::App* status = add_status(app, status_options);
  CLI::App* release = add_release(app, release_options);
  CLI::App* list = add_list(app, list_options);

  for (int i = 1; i < argc; ++i) argument_secrets().add_url_credentials(argv[i]);
  if (const char* from_environment = std::getenv(kUrlEnvironmentVariable); from_environment != nullptr)
    argument_secrets().add_url_credentials(from_environment);

  std::vector<std::string> after_dash;
  const int parse_argc = split_at_dash(argc, argv, after_dash);
  const bool dashed = parse_argc != argc;
  try {
    app.parse(parse_argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help / --version: printed to stdout, exit 0
  } catch (const CLI::ExtrasError& e) {
    return usage_error(std::string(e.what()) + "; put -- before COMMAND if it has options");
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  // A misplaced --url value taken as NAME or KEY: refused, not locked under
  // (or looked up by) a key named after the URL.
  const auto url_as_name = [](const std::string& name) {
    return looks_like_url(name) ? usage_error("'" + name + "' is a Redis URL, not a lock name: give it with --url") : 0;
  };
  try {
    if (run->parsed()) {
      run_options.on_lost = on_lost == "ignore" ? OnLost::ignore : OnLost::term;
      if (dashed) apply_names(run_options, std::move(after_dash));
      if (const int refused = url_as_name(run_options.name)) return refused;
      for (const std::string& name : run_options.names)
        if (const int refused = url_as_name(name)) return refused;
      // Before the command starts (the locks would refuse them too, later).
      // (`name` joins `names` when several are given: each is checked.)
      if (run_options.names.empty()) lockon::validate_name(run_options.name, "run NAME");
      for (const std::string& name : run_options.names) lockon::validate_name(name, "run NAME");
      return run_command(run_options);
    }
    if (key->parsed()) return key_command(key_options);
    // KEY is a lock name: the library's bound on names (lockon/name.hpp)
    // holds here too (ConfigError: a usage error below).
    if (status->parsed()) {
      if (url_as_name(status_options.key)) return exit_code::usage;
      lockon::validate_name(status_options.key, "status KEY");
      return status_command(status_options);
    }
    if (release->parsed()) {
      if (url_as_name(release_options.key)) return exit_code::usage;
      lockon::validate_name(release_options.key, "release KEY");
      return release_command(release_options);
    }
    if (list->parsed()) return list_command(list_options);
    return usage_error("no command given");
  } catch (const lockon::ConfigError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    // Commands report their own failures; this is the backstop.
    std::cerr << "lockon: " << argument_secrets().apply(one_line(e.what())) << '\n';
    return exit_code_for(e);
  }
}
