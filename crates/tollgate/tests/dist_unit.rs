//! `dist/tollgate.service` against the documented defaults: under `ProtectSystem=strict`
//! the whole file system is read-only but what the unit lists, so every place the docs tell
//! an operator tollgate writes (the access log, ACME's `state_dir`, the control socket) must
//! be under a directory the unit makes writable.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The values of `key=` lines in the unit's `[Service]` section (space-separated lists split).
fn values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// The paths the docs show for `key = "/…"` (absolute ones: the documented places).
fn documented(doc: &str, key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("docs").join(doc)).unwrap();
    text.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix(key)?.trim_start().strip_prefix('=')?.trim();
            let path = rest.strip_prefix('"')?.split('"').next()?;
            path.starts_with('/').then(|| path.to_string())
        })
        .collect()
}

#[test]
fn every_documented_place_tollgate_writes_is_writable_under_the_unit() {
    let unit = std::fs::read_to_string(repo().join("dist/tollgate.service")).unwrap();
    assert!(values(&unit, "ProtectSystem").contains(&"strict".to_string()));
    let mut writable: Vec<PathBuf> = Vec::new();
    for (key, base) in [
        ("LogsDirectory", "/var/log"),
        ("StateDirectory", "/var/lib"),
        ("RuntimeDirectory", "/run"),
    ] {
        writable.extend(values(&unit, key).iter().map(|d| Path::new(base).join(d)));
    }
    writable.extend(values(&unit, "ReadWritePaths").iter().map(PathBuf::from));

    let mut places = documented("logging.md", "access");
    places.extend(documented("config.md", "state_dir"));
    places.push("/run/tollgate/tollgate.sock".to_string());
    assert!(
        places.iter().any(|p| p.starts_with("/var/log/")) && places.iter().any(|p| p.starts_with("/var/lib/")),
        "the docs' places were not found: {places:?}"
    );
    for place in &places {
        assert!(
            writable.iter().any(|w| Path::new(place).starts_with(w)),
            "{place} (documented) is read-only under the unit; writable: {writable:?}"
        );
    }
    // The workers (as `[global] user`) write the log and the state: the directories are theirs.
    let chown = values(&unit, "ExecStartPre").join(" ");
    for dir in ["/var/log/tollgate", "/var/lib/tollgate"] {
        assert!(
            chown.contains("chown") && chown.contains(dir),
            "{dir} is not given to the workers' user"
        );
    }
}
