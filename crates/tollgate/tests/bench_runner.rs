//! `bench/compare`, the comparison runner (a Python 3 standard-library script), has a
//! self-test that needs no proxy and no load tool: it parses wrk, h2load and h3load output
//! samples, reads a child's CPU time, memory and sockets from `/proc`, drives its HTTP/1.1 and
//! HTTP/2 clients against canned answers, renders every config template, and checks the
//! medians, ratios and Markdown tables. It runs here so that a change to the runner (or to a
//! template it renders) that breaks it fails the suite. Under a second.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

use std::path::Path;
use std::process::Command;

/// The self-test's own count of checks, at least: fewer means checks were lost, not passed.
const CHECKS: usize = 18;

#[test]
fn bench_compare_self_test_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("bench/compare");
    let out = match Command::new("python3")
        .arg(&script)
        .arg("--self-test")
        .current_dir(&root)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "python3 not installed (.ci/run installs it); CI may not skip this test"
            );
            println!("skipped: python3 not installed");
            return;
        }
        Err(e) => panic!("running {}: {e}", script.display()),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench/compare --self-test failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let ran: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("self-test ok: ")?.strip_suffix(" checks")?.parse().ok())
        .unwrap_or_else(|| panic!("no 'self-test ok: N checks' line:\n{stdout}\n{stderr}"));
    assert!(
        ran >= CHECKS,
        "the self-test ran {ran} checks, expected at least {CHECKS}:\n{stderr}"
    );
}
