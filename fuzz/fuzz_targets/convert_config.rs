//! Arbitrary text as an HAProxy configuration for `tollgate convert` (`convert::convert_text`):
//! never a panic, never unbounded work; a refusal names `fuzz.cfg` and a line of the input;
//! a conversion is TOML that parses, and every line it reports is a line of the input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let lines = u32::try_from(text.lines().count()).unwrap_or(u32::MAX);
    match tollgate::convert::convert_text(text, "fuzz.cfg") {
        Ok(c) => {
            if let Err(e) = toml::from_str::<toml::Value>(&c.toml) {
                panic!("the output is not TOML: {e}\n{}", c.toml);
            }
            for i in &c.issues {
                assert_eq!(i.file, "fuzz.cfg");
                assert!(i.line >= 1 && i.line <= lines, "issue at line {} of {lines}: {i:?}", i.line);
            }
        }
        Err(e) => {
            assert_eq!(e.file, "fuzz.cfg");
            assert!(e.line <= lines.max(1), "error at line {} of {lines}: {e}", e.line);
        }
    }
});
