//! `tollgate convert`: the command around `tollgate::convert`: reads the inputs, writes the
//! TOML (and the htpasswd files of userlists) beside it, checks it as `tollgate check`
//! would, and prints the report.
//!
//! Exit status: 0 converted and the output passes `check`; 1 written but `check` refused it
//! (or a file could not be written); 2 the input is malformed (`FILE:LINE: message`), or
//! `--strict` and a line was dropped (nothing is written then); 64 a usage error.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tollgate::convert::{self, CheckVerdict, Options, Report};

#[derive(clap::Args)]
pub(crate) struct ConvertArgs {
    /// HAProxy configuration files or directories (their `*.cfg` files in lexical order),
    /// read in the order given, as `haproxy -f A -f B` would.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Where to write the TOML config (default: standard output). Userlists' htpasswd files
    /// are written beside it.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// The report's form: `text` (on standard error) or `json` (on standard output when
    /// `--output` is given, else on standard error).
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    report: String,
    /// Fail (exit 2, write nothing) when any line has no equivalent.
    #[arg(long)]
    strict: bool,
    /// Do not check the output as `tollgate check` would.
    #[arg(long)]
    no_check: bool,
}

const EXIT_CHECK_FAILED: u8 = 1;
const EXIT_REFUSED: u8 = 2;

pub(crate) fn run(args: ConvertArgs) -> ExitCode {
    let options = Options {
        inputs: args.inputs.clone(),
        env: std::env::vars().collect(),
    };
    let conversion = match convert::convert(&options) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    if args.strict && conversion.dropped().next().is_some() {
        for i in conversion.dropped() {
            eprintln!("{}: no equivalent: {}: {}", i.at(), i.text, i.reason);
        }
        eprintln!(
            "--strict: {} line(s) have no equivalent; nothing written",
            conversion.dropped().count()
        );
        return ExitCode::from(EXIT_REFUSED);
    }
    let shown = args.output.as_ref().map(|p| p.display().to_string());
    let mut verdict = CheckVerdict {
        ok: true,
        skipped: true,
        errors: Vec::new(),
    };
    match &args.output {
        Some(path) => {
            if let Err(e) = write_outputs(path, &conversion) {
                eprintln!("tollgate: cannot write {}: {e}", path.display());
                return ExitCode::from(EXIT_CHECK_FAILED);
            }
            if !args.no_check {
                verdict = convert::check(&conversion.toml, &path.display().to_string());
            }
        }
        None => {
            if !args.no_check {
                // Relative paths are checked against the working directory, where the
                // config would be written.
                verdict = convert::check(&conversion.toml, "tollgate.toml");
            }
            let mut out = std::io::stdout().lock();
            if out
                .write_all(conversion.toml.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                return ExitCode::from(EXIT_CHECK_FAILED);
            }
            for (name, _) in &conversion.side_files {
                eprintln!("note: {name} is not written without --output");
            }
        }
    }
    let ok = verdict.ok;
    let report = Report::new(&conversion, shown, verdict);
    if args.report == "json" {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if args.output.is_some() {
            println!("{text}");
        } else {
            eprintln!("{text}");
        }
    } else {
        eprint!("{}", report.text());
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CHECK_FAILED)
    }
}

/// The TOML, and the userlists' htpasswd files beside it (mode 0600: they hold hashes).
fn write_outputs(path: &Path, c: &convert::Conversion) -> std::io::Result<()> {
    std::fs::write(path, &c.toml)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for (name, body) in &c.side_files {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(name))?;
        f.write_all(body.as_bytes())?;
    }
    Ok(())
}
