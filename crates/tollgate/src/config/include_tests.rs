//! `include` and `${VAR}`: files in real temporary directories, variables from a table.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::model::RouteAction;
use super::*;

/// A fresh directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("tollgate-include-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    /// Writes `text` to `name` (directories made); its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `name` as errors show it.
    fn shown(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn frontend(name: &str, port: u16, backend: &str) -> String {
    format!("[[frontend]]\nname = \"{name}\"\nbind = [\"127.0.0.1:{port}\"]\ndefault_backend = \"{backend}\"\n")
}

fn backend(name: &str) -> String {
    format!("[[backend]]\nname = \"{name}\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9001\"\n")
}

fn no_env(_: &str) -> Option<OsString> {
    None
}

/// The main file at `path`, read with variables from `env`.
fn load_env(path: &Path, env: super::expand::Env<'_>) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).unwrap();
    parse_env(&text, &path.display().to_string(), env)
}

fn errors(path: &Path) -> Vec<ConfigError> {
    match load(path) {
        Ok(_) => panic!("{} was accepted", path.display()),
        Err(e) => e.0,
    }
}

#[test]
fn includes_nest_and_globs_are_read_in_name_order() {
    let dir = Dir::new("order");
    let main = dir.write(
        "tollgate.toml",
        &format!(
            "include = [\"conf.d/*.toml\"]\n[global]\nworkers = 1\n{}",
            frontend("main", 18001, "a")
        ),
    );
    dir.write(
        "conf.d/20-b.toml",
        &format!("{}{}", frontend("b", 18003, "b"), backend("b")),
    );
    dir.write(
        "conf.d/10-a.toml",
        &format!(
            "include = [\"../nested/x.toml\"]\n{}{}",
            frontend("a", 18002, "a"),
            backend("a")
        ),
    );
    dir.write("nested/x.toml", &backend("x"));
    // Not matched: another suffix, a hidden file, a directory.
    dir.write("conf.d/30-c.toml.bak", "not toml at all [");
    dir.write("conf.d/.40-d.toml", "not toml at all [");
    std::fs::create_dir_all(dir.0.join("conf.d/50-e.toml")).unwrap();
    let c = load(&main).unwrap_or_else(|e| panic!("{e}"));
    let files: Vec<String> = c.files.iter().map(|f| f.display().to_string()).collect();
    assert_eq!(
        files,
        [
            dir.shown("tollgate.toml"),
            dir.shown("conf.d/10-a.toml"),
            dir.shown("conf.d/../nested/x.toml"),
            dir.shown("conf.d/20-b.toml"),
        ]
    );
    // The main file's own first, then each file's, in the order read.
    let names: Vec<&str> = c.frontends.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["main", "a", "b"]);
    let names: Vec<&str> = c.backends.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["a", "x", "b"]);
    assert_eq!(c.global.workers, 1);
}

#[test]
fn a_glob_may_match_nothing_but_a_named_file_must_exist() {
    let dir = Dir::new("missing");
    let body = format!("{}{}", frontend("web", 18001, "app"), backend("app"));
    let main = dir.write(
        "a.toml",
        &format!("include = [\"conf.d/*.toml\", \"none/*.toml\"]\n{body}"),
    );
    let c = load(&main).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.files.len(), 1);
    let main = dir.write("b.toml", &format!("\ninclude = [\"extra.toml\"]\n{body}"));
    let e = errors(&main).remove(0);
    assert_eq!(
        (e.path.as_str(), e.line, e.column, e.key.as_str()),
        (dir.shown("b.toml").as_str(), 2, 12, "include[0]"),
        "{e}"
    );
    assert!(
        e.message.contains(&format!("cannot read {}", dir.shown("extra.toml"))) && e.message.contains("No such file"),
        "{e}"
    );
    // Globs are for file names only.
    let main = dir.write("c.toml", &format!("include = \"*/x.toml\"\n{body}"));
    let e = errors(&main).remove(0);
    assert!(e.message.contains("only be in the file name"), "{e}");
    let main = dir.write("d.toml", &format!("include = 5\n{body}"));
    let e = errors(&main).remove(0);
    assert!(e.message.contains("must be a list of paths"), "{e}");
}

#[test]
fn a_duplicate_name_across_files_names_both() {
    let dir = Dir::new("dup");
    let main = dir.write(
        "tollgate.toml",
        &format!(
            "include = [\"conf.d/*.toml\"]\n{}{}",
            frontend("web", 18001, "app"),
            backend("app")
        ),
    );
    dir.write("conf.d/api.toml", &format!("# the API\n{}", backend("app")));
    let e = errors(&main).remove(0);
    assert_eq!(
        (e.path.as_str(), e.line, e.key.as_str()),
        (dir.shown("conf.d/api.toml").as_str(), 3, "backend[1].name"),
        "{e}"
    );
    assert_eq!(
        e.message,
        format!(
            "duplicate name `app`: also defined at {}:7:8",
            dir.shown("tollgate.toml")
        )
    );
    // Frontends too.
    dir.write("conf.d/api.toml", &frontend("web", 18002, "app"));
    let e = errors(&main).remove(0);
    assert_eq!(e.path, dir.shown("conf.d/api.toml"), "{e}");
    assert!(e.message.contains(&dir.shown("tollgate.toml")), "{e}");
}

#[test]
fn errors_inside_an_included_file_are_positioned_in_it() {
    let dir = Dir::new("errors");
    let main = dir.write(
        "tollgate.toml",
        &format!(
            "include = [\"site.toml\"]\n{}{}",
            frontend("web", 18001, "app"),
            backend("app")
        ),
    );
    let site = dir.shown("site.toml");
    // An unknown key (the deserializer's error): the merged index in the key path.
    dir.write("site.toml", &format!("\n\n{}bnid = 1\n", frontend("api", 18002, "app")));
    let e = errors(&main).remove(0);
    assert_eq!((e.path.as_str(), e.line, e.column), (site.as_str(), 7, 1), "{e}");
    assert_eq!(e.key, "frontend[1].bnid", "{e}");
    assert!(e.message.contains("unknown field"), "{e}");
    // A value validation refuses.
    dir.write("site.toml", &backend("api").replace("9001", "99999"));
    let e = errors(&main).remove(0);
    assert_eq!((e.path.as_str(), e.line, e.column), (site.as_str(), 5, 11), "{e}");
    assert_eq!(e.key, "backend[1].server[0].address", "{e}");
    // TOML itself.
    dir.write("site.toml", "[[backend]\n");
    let e = errors(&main).remove(0);
    assert_eq!((e.path.as_str(), e.line), (site.as_str(), 1), "{e}");
    // A section that exists once belongs to the main file.
    dir.write("site.toml", &format!("{}\n[global]\nworkers = 2\n", backend("api")));
    let e = errors(&main).remove(0);
    assert_eq!((e.path.as_str(), e.line, e.column), (site.as_str(), 7, 2), "{e}");
    assert!(
        e.message.contains("`[global]` cannot be in an included file")
            && e.message.contains(&dir.shown("tollgate.toml")),
        "{e}"
    );
    // The main file's own errors are where they always were.
    let bad_main = dir.write(
        "bad.toml",
        &format!("{}{}", frontend("web", 18001, "nope"), backend("app")),
    );
    let e = errors(&bad_main).remove(0);
    assert_eq!((e.path.as_str(), e.line), (dir.shown("bad.toml").as_str(), 4), "{e}");
}

#[test]
fn cycles_double_includes_and_depth_are_refused() {
    let dir = Dir::new("cycle");
    let body = format!("{}{}", frontend("web", 18001, "app"), backend("app"));
    let main = dir.write("main.toml", &format!("include = [\"a.toml\"]\n{body}"));
    dir.write("a.toml", "include = [\"b.toml\"]\n");
    dir.write("b.toml", "include = [\"main.toml\"]\n");
    let e = errors(&main).remove(0);
    assert_eq!((e.path.as_str(), e.line), (dir.shown("b.toml").as_str(), 1), "{e}");
    assert_eq!(
        e.message,
        format!(
            "include cycle: {} -> {} -> {} -> {}",
            dir.shown("main.toml"),
            dir.shown("a.toml"),
            dir.shown("b.toml"),
            dir.shown("main.toml")
        )
    );
    // A file including itself.
    dir.write("b.toml", "include = [\"b.toml\"]\n");
    let e = errors(&main).remove(0);
    assert!(e.message.starts_with("include cycle:"), "{e}");
    // One file from two places.
    dir.write("b.toml", "");
    dir.write("c.toml", "include = [\"b.toml\"]\n");
    let main = dir.write("two.toml", &format!("include = [\"a.toml\", \"c.toml\"]\n{body}"));
    let e = errors(&main).remove(0);
    assert_eq!(e.path, dir.shown("c.toml"), "{e}");
    assert!(
        e.message
            .contains(&format!("is included twice (first at {}:1:12)", dir.shown("a.toml"))),
        "{e}"
    );
    // Nesting deeper than MAX_DEPTH.
    for i in 0..=include::MAX_DEPTH {
        dir.write(
            &format!("deep{i}.toml"),
            &format!("include = [\"deep{}.toml\"]\n", i + 1),
        );
    }
    dir.write(&format!("deep{}.toml", include::MAX_DEPTH + 1), "");
    let main = dir.write("deep.toml", &format!("include = [\"deep0.toml\"]\n{body}"));
    let e = errors(&main).remove(0);
    assert!(e.message.contains("nest more than 8 deep"), "{e}");
    // More than MAX_FILES files.
    for i in 0..include::MAX_FILES {
        dir.write(&format!("many/{i:03}.toml"), "");
    }
    let main = dir.write("many.toml", &format!("include = [\"many/*.toml\"]\n{body}"));
    let e = errors(&main);
    assert_eq!(e.len(), 1, "said once");
    assert!(e[0].message.contains("at most 64 files"), "{}", e[0]);
}

#[test]
fn variables_expand_in_string_values_with_defaults() {
    let dir = Dir::new("env");
    let main = dir.write(
        "tollgate.toml",
        "include = [\"${CONF:-conf.d}/*.toml\"]\n\
         [[frontend]]\nname = \"web\"\nbind = [\"${BIND_HOST:-127.0.0.1}:${PORT}\"]\ndefault_backend = \"app\"\n",
    );
    dir.write("conf.d/app.toml", &backend("app"));
    dir.write(
        "other/app.toml",
        &backend("app").replace("9001", "${SERVER_PORT:-9002}"),
    );
    let env = |name: &str| -> Option<OsString> {
        match name {
            "PORT" => Some("18005".into()),
            _ => None,
        }
    };
    let c = load_env(&main, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.frontends[0].binds[0].to_string(), "127.0.0.1:18005");
    assert_eq!(c.backends[0].servers[0].address.port(), 9001);
    let env = |name: &str| -> Option<OsString> {
        match name {
            "PORT" => Some("18006".into()),
            "CONF" => Some("other".into()),
            "BIND_HOST" => Some("127.0.0.2".into()),
            _ => None,
        }
    };
    let c = load_env(&main, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.frontends[0].binds[0].to_string(), "127.0.0.2:18006");
    assert_eq!(c.backends[0].servers[0].address.port(), 9002);
    assert_eq!(c.files[1], dir.0.join("other/app.toml"));
    // Unset, no default: the variable is named, at the value's position.
    let e = load_env(&main, &no_env).unwrap_err().0.remove(0);
    assert_eq!(
        (e.path.as_str(), e.line, e.column, e.key.as_str()),
        (dir.shown("tollgate.toml").as_str(), 4, 9, "frontend[0].bind[0]"),
        "{e}"
    );
    assert!(e.message.contains("`PORT` is not set"), "{e}");
    // In an included file, at its position there.
    let env = |name: &str| -> Option<OsString> {
        match name {
            "PORT" => Some("18006".into()),
            "CONF" => Some("other".into()),
            _ => None,
        }
    };
    dir.write("other/app.toml", &backend("app").replace("9001", "${SERVER_PORT}"));
    let e = load_env(&main, &env).unwrap_err().0.remove(0);
    assert_eq!(
        (e.path.as_str(), e.line, e.key.as_str()),
        (dir.shown("other/app.toml").as_str(), 5, "backend[0].server[0].address"),
        "{e}"
    );
    assert!(e.message.contains("`SERVER_PORT` is not set"), "{e}");
}

const ROUTED: &str = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:18001\"]\nmode = \"http\"\n\
                      [[frontend.route]]\npath_prefix = \"/u/\"\nbackend = \"app\"\n\
                      rewrite_path = { regex = \"^/u/(?<id>[0-9]+)$\", replace = \"/users/${id}$$\" }\n\
                      [[frontend.route]]\nreturn = { status = 200, body = \"${BODY}|$${BODY}\" }\n\
                      [[backend]]\nname = \"app\"\nmode = \"http\"\n\
                      [[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9001\"\n";

#[test]
fn a_variable_sets_a_value_and_never_adds_structure() {
    // Quotes, newlines and brackets in a value stay in that string: no `[global]`, no key.
    let hostile = "x\"\n[global]\nworkers = 77\n\"\"\"";
    let env = |name: &str| (name == "BODY").then(|| OsString::from(hostile));
    let c = parse_env(ROUTED, "t.toml", &env).unwrap_or_else(|e| panic!("{e}"));
    let RouteAction::Return(answer) = &c.frontends[0].routes[1].action else {
        panic!("not a return");
    };
    assert_eq!(&*answer.body, format!("{hostile}|${{BODY}}").as_bytes());
    assert_ne!(c.global.workers, 77);
    // The master's text for the workers carries the value, escaped, and nothing else.
    let dir = Dir::new("hostile");
    let path = dir.write("t.toml", ROUTED);
    let (_, text) = load_text(
        ROUTED.to_string(),
        &path.display().to_string(),
        None,
        Resolve::Written(&env),
        true,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = text.unwrap();
    assert!(!text.contains("include"), "{text}");
    let worker = parse_with_ids(&text, &path.display().to_string(), &mut ids::IdTable::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let RouteAction::Return(answer) = &worker.frontends[0].routes[1].action else {
        panic!("not a return");
    };
    assert_eq!(&*answer.body, format!("{hostile}|${{BODY}}").as_bytes());
    assert_eq!(worker.global.workers, c.global.workers);
}

#[test]
fn a_path_rewrite_keeps_its_own_dollars() {
    let env = |name: &str| (name == "BODY").then(|| OsString::from("b"));
    // `${id}` is the regex group, not a variable (none is set by that name).
    parse_env(ROUTED, "t.toml", &env).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_workers_text_holds_every_file_and_no_include() {
    let dir = Dir::new("prepared");
    let main = dir.write(
        "tollgate.toml",
        &format!(
            "include = [\"conf.d/*.toml\"]\n[global]\nworkers = 3\n{}",
            frontend("web", 18001, "api")
        ),
    );
    dir.write(
        "conf.d/api.toml",
        &format!("{}{}", backend("api"), frontend("api", 18002, "api")),
    );
    let (c, text) = load_with_text(&main).unwrap_or_else(|e| panic!("{e}"));
    // The workers read no file: move the included one away first.
    std::fs::remove_dir_all(dir.0.join("conf.d")).unwrap();
    let worker = parse_with_ids(&text, &main.display().to_string(), &mut ids::IdTable::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(worker.summary(), c.summary());
    assert_eq!(worker.frontends.len(), 2);
    assert!(!text.contains("include"), "{text}");
    // A worker's errors name the text it read (a certificate may change in between).
    let e = parse_with_ids(
        "[[frontend]]\n",
        &main.display().to_string(),
        &mut ids::IdTable::default(),
    )
    .unwrap_err()
    .0
    .remove(0);
    assert_eq!(e.path, format!("{} (merged)", main.display()), "{e}");
}

#[test]
fn secrets_come_from_files_and_are_never_shown() {
    let dir = Dir::new("secrets");
    dir.write("stats.auth", "admin:s3cr3t-pw\n");
    let body = format!("{}{}", frontend("web", 18001, "app"), backend("app"));
    let main = dir.write(
        "a.toml",
        &format!("[admin]\nbind = \"127.0.0.1:0\"\nstats_auth_file = \"stats.auth\"\n{body}"),
    );
    let c = load(&main).unwrap_or_else(|e| panic!("{e}"));
    let auth = c.admin.stats_auth.clone().unwrap();
    assert_eq!((auth.user.as_str(), auth.password.as_str()), ("admin", "s3cr3t-pw"));
    assert!(!format!("{c:?}").contains("s3cr3t"));
    // Both ways at once, a missing file, a file of the wrong shape.
    let main = dir.write(
        "b.toml",
        &format!("[admin]\nbind = \"127.0.0.1:0\"\nstats_auth = \"a:b\"\nstats_auth_file = \"stats.auth\"\n{body}"),
    );
    let e = errors(&main).remove(0);
    assert_eq!((e.line, e.key.as_str()), (4, "admin.stats_auth_file"), "{e}");
    assert!(e.message.contains("keep one"), "{e}");
    let main = dir.write(
        "c.toml",
        &format!("[admin]\nbind = \"127.0.0.1:0\"\nstats_auth_file = \"nope.auth\"\n{body}"),
    );
    let e = errors(&main).remove(0);
    assert_eq!((e.line, e.key.as_str()), (3, "admin.stats_auth_file"), "{e}");
    assert!(
        e.message.contains(&format!("cannot read {}", dir.shown("nope.auth"))),
        "{e}"
    );
    dir.write("bad.auth", "no-colon-s3cr3t\n");
    let main = dir.write(
        "d.toml",
        &format!("[admin]\nbind = \"127.0.0.1:0\"\nstats_auth_file = \"bad.auth\"\n{body}"),
    );
    let e = errors(&main).remove(0);
    assert!(
        e.message.contains("expected \"user:password\"") && !e.message.contains("s3cr3t"),
        "{e}"
    );

    // Redis: the password joins a URL written without one.
    dir.write("redis.pw", "r3dis-pw\n");
    let shared = |url: &str| {
        dir.write(
            "e.toml",
            &format!("[shared]\nredis = \"{url}\"\nredis_password_file = \"redis.pw\"\n{body}"),
        )
    };
    let c = load(&shared("redis://127.0.0.1:6379/2")).unwrap_or_else(|e| panic!("{e}"));
    let sharing = c.sharing.clone().unwrap();
    assert_eq!(sharing.password.as_ref().map(|p| p.expose()), Some("r3dis-pw"));
    assert!(!format!("{c:?}").contains("r3dis-pw"));
    assert_eq!(sharing.shown_url(), "redis://127.0.0.1:6379/2");
    let info = sharing.client().unwrap().get_connection_info().clone();
    assert_eq!(info.redis_settings().password(), Some("r3dis-pw"));
    let e = errors(&shared("redis://:inline@127.0.0.1:6379")).remove(0);
    assert_eq!(e.key, "shared.redis_password_file", "{e}");
    assert!(e.message.contains("has a password already"), "{e}");
}
