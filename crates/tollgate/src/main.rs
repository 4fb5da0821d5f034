//! The `tollgate` command line.
//!
//! Exit status: 0 success; 1 a runtime failure (a port in use, a worker that cannot start);
//! 2 a config refused (`FILE:LINE:COL: message` lines on stderr, from `run`, `check` and
//! `reload` alike); 64 a usage error (EX_USAGE: unknown option, missing value).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod convert_cmd;
mod manpage;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use tollgate::config::{self, Config, ConfigErrors};
use tollgate::runtime;

/// EX_USAGE from sysexits.h: the command line was wrong.
const EXIT_USAGE: u8 = 64;
/// A config file was refused.
const EXIT_REFUSED: u8 = 2;

const EXAMPLES: &str = "\
Examples:
  tollgate                                  run the embedded demo (127.0.0.1:8080 -> two built-in origins)
  tollgate run --config /etc/tollgate/tollgate.toml   (or: tollgate -c FILE)
  tollgate check --config tollgate.toml     validate a config; exit 2 with FILE:LINE:COL on error
  tollgate reload --config tollgate.toml    reload a running master (or: kill -HUP <master pid>)
  tollgate ctl -c tollgate.toml show servers                  live server state (--json)
  tollgate ctl -c tollgate.toml set server app/a state drain  ready | drain | maint [--kill]
  tollgate convert haproxy.cfg -o tollgate.toml   convert an HAProxy config (report on stderr)
  tollgate completions bash                 shell completions (bash, zsh, fish); `tollgate man`: the man page
  RUST_LOG=tollgate=debug tollgate run      per-connection events and counters

Without --config, `run` reads ./tollgate.toml, then /etc/tollgate/tollgate.toml, and
otherwise runs the embedded default. With a config file, `run` starts a master process that
owns the sockets and runs the proxy in a worker process it can reload without closing a
socket; --no-master (or `[global] master = false`) serves from one process.

Exit status: 0 ok, 1 runtime failure, 2 config refused, 64 usage error.";

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "A reverse proxy and load balancer (TCP and HTTP).",
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a command: the options of `run`.
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy (the default command).
    Run(RunArgs),
    /// Validate a config file (with the files it includes): print a one-line summary and
    /// the files read.
    Check {
        /// Config file (TOML) to validate; default, as for `run`: ./tollgate.toml, then
        /// /etc/tollgate/tollgate.toml.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Ask the running master to reload its config file; waits for the outcome
    /// (exit 0: the new generation serves; exit 2: refused, the old one keeps serving).
    Reload(AnswerArgs),
    /// Show the running master's worker generations.
    Status(AnswerArgs),
    /// Runtime API of the running master: show and change live server state.
    Ctl(CtlArgs),
    /// Print a shell completion script: `tollgate completions bash > /etc/bash_completion.d/tollgate`.
    Completions {
        /// bash, zsh, fish (also elvish, powershell).
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `tollgate man > tollgate.1; man ./tollgate.1`.
    Man,
    /// Explain, from the config alone, where a request would go: frontend, each route tried
    /// and why it did not match, backend or fixed response, and the server a pick would choose.
    Explain(ExplainArgs),
    /// Convert an HAProxy configuration (haproxy.cfg) into a tollgate config: every line
    /// converted, converted with a note, or kept as a comment with the reason; the output is
    /// checked as `tollgate check` would.
    Convert(convert_cmd::ConvertArgs),
    /// Internal: a worker process started by the master (stdin is its socketpair).
    #[command(hide = true)]
    Worker {
        /// The generation number the master gave this worker.
        #[arg(long)]
        generation: u64,
    },
}

#[derive(clap::Args)]
struct ControlArgs {
    /// The master's control socket (default: `global.control_socket` of --config, else
    /// /run/tollgate/tollgate.sock).
    #[arg(long, short)]
    socket: Option<PathBuf>,
    /// The config file the master runs (only read for `global.control_socket`).
    #[arg(long, short)]
    config: Option<PathBuf>,
}

#[derive(clap::Args)]
struct AnswerArgs {
    #[command(flatten)]
    target: ControlArgs,
    /// Print the master's answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct CtlArgs {
    #[command(flatten)]
    target: ControlArgs,
    /// Print the master's answer as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand)]
enum CtlCommand {
    /// Show live state.
    Show {
        #[command(subcommand)]
        what: CtlShow,
    },
    /// Change live state (kept across reloads unless the file changes that server).
    Set {
        #[command(subcommand)]
        what: CtlSet,
    },
    /// Resume accepting on a frontend: `enable frontend web`.
    Enable {
        #[command(subcommand)]
        what: CtlFrontend,
    },
    /// Stop accepting on a frontend, keep serving its connections: `disable frontend web`.
    Disable {
        #[command(subcommand)]
        what: CtlFrontend,
    },
    /// Close established sessions: `shutdown sessions server app/a`.
    Shutdown {
        #[command(subcommand)]
        what: CtlShutdown,
    },
    /// Where a request would go now: `tollgate explain` against the running config and the
    /// servers' live states, weights and connections.
    Explain(ExplainRequest),
    /// Add a server: `add server app/n address=10.0.0.5:80 [weight=N] [maxconn=N] [backup]
    /// [check] [slowstart=DUR] [enabled]` (in maint unless `enabled`).
    Add {
        #[command(subcommand)]
        what: CtlAdd,
    },
    /// Remove a server in maint (or drain) with no connection: `del server app/n`.
    Del {
        #[command(subcommand)]
        what: CtlDel,
    },
    /// Forget stick table entries: `clear table api [KEY]`.
    Clear {
        #[command(subcommand)]
        what: CtlClear,
    },
}

#[derive(Subcommand)]
enum CtlClear {
    /// One entry of a limit's table (KEY as `show table` prints it: an address for a
    /// `source` key), or every entry.
    Table {
        /// The limit's name.
        limit: String,
        key: Option<String>,
    },
}

#[derive(Subcommand)]
enum CtlAdd {
    /// A server, kept across reloads unless the file defines one of that name.
    Server {
        /// BACKEND/SERVER
        server: String,
        /// address=IP:PORT, weight=N, maxconn=N, slowstart=DUR, backup, check, enabled.
        words: Vec<String>,
    },
}

#[derive(Subcommand)]
enum CtlDel {
    /// A server (from the file or added at run time); a file server stays deleted across
    /// reloads until the file changes it.
    Server {
        /// BACKEND/SERVER
        server: String,
    },
}

#[derive(Subcommand)]
enum CtlFrontend {
    /// A frontend, by name (kept across reloads while the file has it).
    Frontend { name: String },
}

#[derive(Subcommand)]
enum CtlShutdown {
    /// Sessions of one kind.
    Sessions {
        #[command(subcommand)]
        of: CtlSessionsOf,
    },
}

#[derive(Subcommand)]
enum CtlSessionsOf {
    /// Every established session on a server, on every worker thread (its state, weight
    /// and new connections are unchanged).
    Server {
        /// BACKEND/SERVER
        server: String,
    },
}

#[derive(Subcommand)]
enum CtlShow {
    /// Every server (of one backend): state, weight, connections, counters.
    Servers {
        /// Only this backend.
        backend: Option<String>,
    },
    /// Every metric, in the Prometheus text format `GET /metrics` serves.
    Metrics,
    /// Version, uptime, generations, worker threads, every budget (limit, in use, parked)
    /// and the non-zero process counters.
    Info,
    /// Frontends, backends and servers: states, sessions, rates, bytes, errors, checks
    /// (`show stat`, `show stat frontend NAME`, `show stat backend NAME`).
    Stat {
        /// frontend | backend
        kind: Option<String>,
        /// Its name.
        name: Option<String>,
    },
    /// Every live client connection (on one backend, or one server: BACKEND/SERVER).
    Sessions { filter: Option<String> },
    /// The last requests and responses refused as malformed, with the offending byte.
    Errors,
    /// Every budget of every worker thread: limit, in use, parked, waiting.
    Budgets,
    /// Every TLS frontend's certificates (of one frontend): names, validity, days to
    /// expiry, source (file, acme, runtime), OCSP staple, serial, SHA-256 fingerprint.
    Certs {
        /// Only this frontend.
        frontend: Option<String>,
    },
    /// A stick table (`[[frontend.limit]]`): its counters and entries (key, rate now,
    /// requests in flight, last seen), highest rates first.
    Table {
        /// The limit's name.
        limit: String,
    },
}

#[derive(Subcommand)]
enum CtlSet {
    /// Set a server's admin state or weight: `set server app/a state drain`.
    Server {
        /// BACKEND/SERVER
        server: String,
        #[command(subcommand)]
        field: CtlServerField,
    },
    /// Swap a frontend's certificate without a reload: `set cert web /etc/tls/a.pem`. It
    /// replaces the certificate configured from that file (or the one serving the same
    /// names, or is added); new handshakes get it at once, open connections keep theirs. A
    /// later reload reads the configured files again: write the new files first. The files
    /// are read here, with your rights, and their contents sent to the master.
    Cert {
        frontend: String,
        /// PEM chain, leaf first.
        cert: PathBuf,
        /// PEM private key (default: the configured key of that certificate, else CERT).
        key: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum CtlServerField {
    /// ready (takes new connections), drain (no new ones, established ones finish),
    /// maint (no new ones; with --kill the established ones are closed).
    State {
        state: String,
        /// With maint: close the server's established connections too.
        #[arg(long)]
        kill: bool,
    },
    /// Weight 0 to 256 (0: no new connections).
    Weight { weight: u32 },
    /// IP:PORT, or IP to keep the port: new connections go there, established ones finish.
    Address { address: String },
}

#[derive(clap::Args)]
struct ExplainArgs {
    /// Config file (TOML).
    #[arg(long, short)]
    config: PathBuf,
    #[command(flatten)]
    request: ExplainRequest,
    /// Print JSON instead of lines.
    #[arg(long)]
    json: bool,
}

/// The request to explain, for `tollgate explain` and `ctl explain`.
#[derive(clap::Args)]
struct ExplainRequest {
    /// The request: `[METHOD] URL`, e.g. `GET https://api.example/v1/x` (scheme and port
    /// choose the frontend; host and path are what routes match).
    #[arg(required = true, num_args = 1..=2)]
    request: Vec<String>,
    /// A request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// The TLS server name (TCP frontends; default: the URL's host).
    #[arg(long)]
    sni: Option<String>,
    /// The client presents a certificate that verifies (what `client_cert` routes see;
    /// default: none).
    #[arg(long)]
    client_cert: bool,
    /// The frontend to explain, by name (default: the one bound to the URL's port).
    #[arg(long)]
    frontend: Option<String>,
    /// Pick the frontend bound to this port.
    #[arg(long)]
    port: Option<u16>,
    /// The client address (what `hash_key = "source"` hashes).
    #[arg(long, default_value = "127.0.0.1")]
    source: std::net::IpAddr,
}

impl ExplainRequest {
    fn into_query(self) -> Result<tollgate::admin::explain::Query, String> {
        // `DELETE http://x/v1` as one argument (the documented quoted form) or as two.
        let words: Vec<String> = match self.request.as_slice() {
            [one] => one.split_ascii_whitespace().map(str::to_string).collect(),
            _ => self.request,
        };
        let mut request = words.into_iter();
        let (method, url) = match (request.next(), request.next(), request.next()) {
            (Some(url), None, None) => ("GET".to_string(), url),
            (Some(method), Some(url), None) => (method, url),
            _ => return Err("expected `[METHOD] URL` (the URL without spaces)".into()),
        };
        let mut headers = Vec::new();
        for h in &self.headers {
            let Some((name, value)) = h.split_once(':') else {
                return Err(format!("header {h:?} is not `Name: value`"));
            };
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
        Ok(tollgate::admin::explain::Query {
            method,
            url,
            headers,
            sni: self.sni,
            client_cert: self.client_cert,
            frontend: self.frontend,
            port: self.port,
            source: self.source,
        })
    }
}

#[derive(clap::Args, Default)]
struct RunArgs {
    /// Config file (TOML); default ./tollgate.toml, then /etc/tollgate/tollgate.toml, else the
    /// embedded demo.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Serve from this process, without a master (no reload; for debugging and tests).
    #[arg(long)]
    no_master: bool,
}

/// mimalloc: its pages are per size class and per thread, and it returns an emptied page
/// to the kernel once its purge delay passed (workers call `tollgate_sys::allocator::collect`
/// once a second, so a quiet worker does too), so the memory of connections that closed or
/// went to the park is handed back (glibc's arenas kept it; docs/benchmarks.md has the
/// figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tollgate_sys::allocator::enable();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS // --help, --version
            };
        }
    };
    match cli.command {
        Some(Command::Check { config }) => match find_config(config) {
            Some(path) => check(&path),
            None => {
                eprintln!(
                    "tollgate: no config file to check: neither ./tollgate.toml nor /etc/tollgate/tollgate.toml exists (give one with --config)"
                );
                ExitCode::from(EXIT_USAGE)
            }
        },
        Some(Command::Reload(args)) => control(&args.target, tollgate::command::Command::Reload, args.json),
        Some(Command::Status(args)) => control(&args.target, tollgate::command::Command::Status, args.json),
        Some(Command::Ctl(args)) => ctl(args),
        Some(Command::Completions { shell }) => completions(shell),
        Some(Command::Man) => man(),
        Some(Command::Explain(args)) => explain(args),
        Some(Command::Convert(args)) => convert_cmd::run(args),
        Some(Command::Worker { generation }) => report(worker(generation)),
        Some(Command::Run(args)) => report(run(args)),
        None => report(run(cli.run)),
    }
}

/// Prints a failure as one line (a refused config as its `FILE:LINE:COL` lines) and picks
/// the exit status.
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<ConfigErrors>().is_some() => {
            eprintln!("{e}");
            ExitCode::from(EXIT_REFUSED)
        }
        Err(e) => {
            eprintln!("tollgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A process-level failure as an operator reads it: what failed and why, without the
/// kind/side classification the proxy uses to pick a status.
fn plain(e: tollgate::error::Error) -> anyhow::Error {
    match &e.source {
        Some(source) => anyhow::anyhow!("{}: {}", e.context, tollgate::error::os_message(source)),
        None => anyhow::anyhow!("{}", e.context),
    }
}

/// `tollgate explain`: exit 0 with the explanation, 2 for a refused config, 64 for a
/// request that names no frontend or cannot be read.
fn explain(args: ExplainArgs) -> ExitCode {
    use tollgate::admin::explain::explain;
    let config = match config::load(&args.config) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let query = match args.request.into_query() {
        Ok(query) => query,
        Err(msg) => {
            eprintln!("tollgate: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match explain(&config, &query) {
        Ok(e) if args.json => match serde_json::to_string_pretty(&e) {
            Ok(text) => {
                stdout_line(&text);
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("tollgate: {err}");
                ExitCode::FAILURE
            }
        },
        Ok(e) => {
            stdout_text(&e.to_string());
            ExitCode::SUCCESS
        }
        Err(reason) => {
            eprintln!("tollgate: {reason}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn check(path: &Path) -> ExitCode {
    match config::load(path) {
        Ok(c) => {
            for warning in c.warnings() {
                eprintln!("{}: warning: {warning}", path.display());
            }
            stdout_line(&format!("{}: ok: {}", path.display(), c.summary()));
            // The main file, then each included one, in the order read.
            for file in &c.files {
                stdout_line(&format!("read {}", file.display()));
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

fn ctl(args: CtlArgs) -> ExitCode {
    use tollgate::admin::ctl;
    let command = match args.command {
        CtlCommand::Show {
            what: CtlShow::Servers { backend },
        } => Ok(tollgate::command::Command::ShowServers { backend }),
        CtlCommand::Show { what: CtlShow::Metrics } => Ok(tollgate::command::Command::Metrics),
        CtlCommand::Show { what: CtlShow::Info } => {
            // The metrics answer, summed up for a person.
            return control_with(
                &args.target,
                tollgate::command::Command::Metrics,
                args.json,
                tollgate::admin::ctl::render_info,
            );
        }
        CtlCommand::Show {
            what: CtlShow::Stat { kind, name },
        } => {
            return show(
                &args.target,
                args.json,
                tollgate::admin::show::stat(kind.as_deref(), name.as_deref()),
            );
        }
        CtlCommand::Show {
            what: CtlShow::Sessions { filter },
        } => {
            return show(
                &args.target,
                args.json,
                tollgate::admin::show::sessions(filter.as_deref()),
            );
        }
        CtlCommand::Show { what: CtlShow::Errors } => {
            let query = tollgate::command::show::Query::Errors;
            return show(&args.target, args.json, Ok(tollgate::command::Command::Show { query }));
        }
        CtlCommand::Show {
            what: CtlShow::Certs { frontend },
        } => {
            let query = tollgate::command::show::Query::Certs { frontend };
            return show(&args.target, args.json, Ok(tollgate::command::Command::Show { query }));
        }
        CtlCommand::Set {
            what: CtlSet::Cert { frontend, cert, key },
        } => ctl::set_cert(&frontend, &cert, key.as_deref()),
        CtlCommand::Show {
            what: CtlShow::Table { limit },
        } => Ok(tollgate::command::Command::ShowTable { limit }),
        CtlCommand::Clear {
            what: CtlClear::Table { limit, key },
        } => Ok(tollgate::command::Command::ClearTable { limit, key }),
        CtlCommand::Show { what: CtlShow::Budgets } => {
            let query = tollgate::command::show::Query::Budgets;
            return show(&args.target, args.json, Ok(tollgate::command::Command::Show { query }));
        }
        CtlCommand::Set {
            what: CtlSet::Server { server, field },
        } => match field {
            CtlServerField::State { state, kill } => ctl::set_state(&server, &state, kill),
            CtlServerField::Weight { weight } => ctl::set_weight(&server, weight),
            CtlServerField::Address { address } => ctl::set_address(&server, &address),
        },
        CtlCommand::Enable {
            what: CtlFrontend::Frontend { name },
        } => Ok(tollgate::command::Command::SetFrontend {
            frontend: name,
            enabled: true,
        }),
        CtlCommand::Disable {
            what: CtlFrontend::Frontend { name },
        } => Ok(tollgate::command::Command::SetFrontend {
            frontend: name,
            enabled: false,
        }),
        CtlCommand::Shutdown {
            what: CtlShutdown::Sessions {
                of: CtlSessionsOf::Server { server },
            },
        } => ctl::shutdown_sessions(&server),
        CtlCommand::Explain(request) => request
            .into_query()
            .map(|query| tollgate::command::Command::Explain { query }),
        CtlCommand::Add {
            what: CtlAdd::Server { server, words },
        } => ctl::add_server(&server, &words),
        CtlCommand::Del {
            what: CtlDel::Server { server },
        } => ctl::del_server(&server),
    };
    match command {
        Ok(command) => control(&args.target, command, args.json),
        Err(msg) => {
            eprintln!("tollgate ctl: {msg}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// A `show stat|sessions|errors|budgets`, rendered as tables (or `--json`).
fn show(target: &ControlArgs, json: bool, command: Result<tollgate::command::Command, String>) -> ExitCode {
    match command {
        Ok(command) => control_with(target, command, json, tollgate::admin::show::render_show),
        Err(msg) => {
            eprintln!("tollgate ctl: {msg}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "tollgate", &mut std::io::stdout());
    ExitCode::SUCCESS
}

/// The man page, generated from this very CLI definition (so it never drifts from `--help`).
fn man() -> ExitCode {
    match manpage::render(Cli::command()) {
        Ok(out) => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tollgate: man page: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Sends one command to the master: exit 0 done, 2 refused, 1 master unreachable.
fn control(args: &ControlArgs, command: tollgate::command::Command, json: bool) -> ExitCode {
    control_with(args, command, json, tollgate::admin::ctl::render)
}

/// `control`, printing the answer with `render`.
fn control_with(
    args: &ControlArgs,
    command: tollgate::command::Command,
    json: bool,
    render: fn(&tollgate::command::Reply, bool) -> (String, bool),
) -> ExitCode {
    let path = tollgate::master::control::client_path(args.socket.clone(), args.config.as_deref());
    let name = command.name();
    match tollgate::master::control::request(&path, command) {
        Ok(reply) => match render(&reply, json) {
            (text, true) => {
                stdout_line(&text);
                ExitCode::SUCCESS
            }
            (text, false) if json => {
                stdout_line(&text);
                ExitCode::from(EXIT_REFUSED)
            }
            (text, false) => {
                eprintln!("tollgate: {name} refused:\n{text}");
                ExitCode::from(EXIT_REFUSED)
            }
        },
        Err(e) => {
            eprintln!("tollgate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Test hook, read once at worker start: spin worker thread 0 this many ms after it starts
/// (first generation only, so the restarted worker serves). See docs/reload.md.
fn debug_options(generation: u64) -> runtime::StartOptions {
    let spin = std::env::var("TOLLGATE_DEBUG_SPIN_AFTER_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|_| generation == 1)
        .map(Duration::from_millis);
    if let Some(after) = spin {
        tracing::warn!(
            ?after,
            "TOLLGATE_DEBUG_SPIN_AFTER_MS is set: a worker thread will spin (test hook)"
        );
    }
    runtime::StartOptions {
        debug_spin_after: spin,
        ..runtime::StartOptions::default()
    }
}

fn worker(generation: u64) -> anyhow::Result<()> {
    init_logging();
    runtime::limits::nofile_limit();
    tollgate::master::worker::run(generation, debug_options(generation)).map_err(plain)?;
    Ok(())
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging();
    let fd_limit = runtime::limits::nofile_limit();
    let mut _demo_origins = None;
    let config = match find_config(args.config) {
        Some(path) => {
            let (config, text) = config::load_with_text(&path)?;
            if config.global.master && !args.no_master {
                // Bound here, so a port in use is one plain line before anything starts.
                let sockets = tollgate::listener::bind_all(&config)?;
                let quic = tollgate::listener::udp::bind_quic(&config)?;
                tollgate::master::run(&path, config, text, sockets, quic).map_err(plain)?;
                return Ok(());
            }
            config
        }
        None => {
            let origins = tollgate::origin::spawn(&["origin-a", "origin-b"]).context("starting demo origins")?;
            let (a, b) = match origins.addrs.as_slice() {
                [(_, a), (_, b)] => (*a, *b),
                _ => anyhow::bail!("demo origins did not start"),
            };
            let bind = std::env::var("TOLLGATE_DEMO_BIND").unwrap_or_else(|_| config::DEMO_BIND.to_string());
            let config = config::embedded_default(&bind, a, b)?;
            tracing::info!(
                "no config file found (./tollgate.toml, /etc/tollgate/tollgate.toml): running the embedded default"
            );
            tracing::info!("demo origins origin-a on {a} and origin-b on {b}; try: curl http://{bind}/ (twice)");
            tracing::info!("the embedded default runs in one process (no master, no reload)");
            _demo_origins = Some(origins);
            config
        }
    };
    serve(Arc::new(config), fd_limit)
}

fn find_config(explicit: Option<PathBuf>) -> Option<PathBuf> {
    explicit.or_else(|| {
        ["tollgate.toml", "/etc/tollgate/tollgate.toml"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    })
}

fn serve(config: Arc<Config>, fd_limit: u64) -> anyhow::Result<()> {
    let sockets = tollgate::listener::bind_all(&config)?;
    let quic = tollgate::listener::udp::bind_quic(&config)?;
    let admin = config
        .admin
        .bind
        .map(tollgate::admin::http::bind)
        .transpose()
        .map_err(plain)?;
    let notify = tollgate::master::notify::Notifier::from_env();
    tollgate::master::privileges::warn_if_root(&config.global);
    // Sockets bound, config (and certificates) read, no worker thread started yet.
    tollgate::master::privileges::drop_privileges(&config.global).map_err(plain)?;
    let source = config
        .source
        .as_ref()
        .map_or("<embedded default>".into(), |p| p.display().to_string());
    tracing::info!(config = %source, fd_limit, "{}", config.summary());
    for s in &sockets {
        if s.worker.is_none_or(|w| w == 0) {
            tracing::info!(frontend = %config.frontends.get(s.frontend).map_or("", |f| f.name.as_str()), addr = %s.local, "listening");
        }
    }
    for s in quic.iter().filter(|s| s.worker == 0) {
        tracing::info!(frontend = %config.frontends.get(s.frontend).map_or("", |f| f.name.as_str()), addr = %s.local, "listening (quic, UDP)");
    }
    let hard_stop_after = config.timeouts.hard_stop_after;
    let options = runtime::StartOptions {
        udp: quic,
        ..debug_options(1)
    };
    let running = runtime::start_with(Arc::clone(&config), sockets, options).context("starting workers")?;
    let signals = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    signals.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        if let Some(listener) = admin {
            tokio::spawn(tollgate::admin::http::serve_process(listener, Arc::clone(running.shared())));
        }
        notify.ready(&format!("serving (no master), {} worker threads", config.global.workers));
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut usr1 = signal(SignalKind::user_defined1())?;
        loop {
            tokio::select! {
                _ = usr1.recv() => {
                    tracing::info!("SIGUSR1: reopening the access log");
                    running.reopen_logs();
                }
                _ = term.recv() => {
                    tracing::info!(?hard_stop_after, "SIGTERM: finishing connections in flight, then exiting");
                    notify.stopping("stopping: finishing the connections in flight");
                    running.soft_stop();
                    break;
                }
                _ = int.recv() => {
                    tracing::info!("SIGINT: exiting now");
                    notify.stopping("stopping now (SIGINT)");
                    running.hard_stop();
                    break;
                }
                _ = hup.recv() => tracing::warn!("SIGHUP ignored: reloading needs the master (run without --no-master)"),
            }
        }
        let deadline = tokio::time::Instant::now() + hard_stop_after;
        while !running.is_finished() {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!("hard_stop_after reached: closing the connections still open");
                    running.hard_stop();
                    break;
                }
                _ = int.recv() => { running.hard_stop(); break; }
                _ = usr1.recv() => running.reopen_logs(),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        Ok::<_, anyhow::Error>(())
    })?;
    running.join().context("workers")?;
    Ok(())
}

/// Writes a command's answer to stdout. A reader that went away (`tollgate explain ... |
/// head`) is not an error: the rest is dropped quietly instead of panicking as `println!`
/// does on a broken pipe.
fn stdout_text(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn stdout_line(text: &str) {
    stdout_text(&format!("{text}\n"));
}
