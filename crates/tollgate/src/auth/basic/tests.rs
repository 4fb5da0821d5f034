use super::*;

/// Made by Apache's htpasswd 2.4 (`-nbB`, `-nb2`, `-nb5`, `-nbm`, `-nbs`), password `secret`.
const FILE: &str = "# made by htpasswd\n\
    alice:$2y$05$LlNh6baUGMOtO/VdJ8Uhkexo9u6jO4Y043PSigVhgt/qLZSbOjv6e\n\
    \n\
    bob:$5$uiyujcBxJLtegUOu$nLCBlje6oNLfb.ASgJ/0lAlKZkynPDmo8mrANXP5WN9\n\
    carol:$6$kf.5IV2b22.763Ws$cBa8aDlUs2cwjcvlo.7g0CMSSh0VWnSR1i16/HGipX/S9lJTWwmeHuwXRPC9vi1UfgORVRUB5lu.5FeJxKAj8.\r\n";

#[test]
fn htpasswd_hashes_verify() {
    let users = Users::parse(FILE).unwrap();
    assert_eq!(users.len(), 3);
    for user in ["alice", "bob", "carol"] {
        let (hash, known) = users.hash_for(user).unwrap();
        assert!(known);
        assert!(hash.verify(b"secret"), "{user}");
        assert!(!hash.verify(b"Secret"), "{user}");
        assert!(!hash.verify(b""), "{user}");
        assert!(!hash.verify(b"secret\0"), "{user}");
    }
    let (decoy, known) = users.hash_for("mallory").unwrap();
    assert!(!known);
    assert!(!decoy.verify(b"anything"));
    assert!(!format!("{users:?}").contains("$2y$"), "Debug shows no hash");
}

#[test]
fn weak_and_malformed_entries_are_refused_with_the_line_and_the_fix() {
    for (line, want) in [
        (
            "dave:$apr1$CqB7/UG7$WQsKV7N/WqD.BMu2aZ519.",
            "line 1: user `dave`: MD5 hashes are refused",
        ),
        ("eve:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=", "unsalted SHA-1"),
        ("frank:secret", "plain text are refused"),
        ("gina:abJnggxhB/yWI", "DES crypt"),
        ("nocolon", "not `user:hash`"),
        (
            ":$2y$05$LlNh6baUGMOtO/VdJ8Uhkexo9u6jO4Y043PSigVhgt/qLZSbOjv6e",
            "printable text",
        ),
        ("h:$2y$05$short", "malformed bcrypt"),
        (
            "h:$2y$99$LlNh6baUGMOtO/VdJ8Uhkexo9u6jO4Y043PSigVhgt/qLZSbOjv6e",
            "malformed bcrypt",
        ),
        ("h:$6$rounds=999999999$salt$x", "rounds must be"),
        ("h:$5$salt$tooshort", "malformed SHA-crypt"),
    ] {
        let e = Users::parse(line).unwrap_err();
        assert!(e.contains(want), "{line}: {e}");
        if want.contains("refused") {
            assert!(e.contains("htpasswd -B"), "{e}");
        }
    }
    let twice = "a:$2y$05$LlNh6baUGMOtO/VdJ8Uhkexo9u6jO4Y043PSigVhgt/qLZSbOjv6e\n\
                 a:$2y$05$LlNh6baUGMOtO/VdJ8Uhkexo9u6jO4Y043PSigVhgt/qLZSbOjv6e\n";
    assert!(
        Users::parse(twice)
            .unwrap_err()
            .contains("line 2: user `a` is listed twice")
    );
    assert!(Users::parse("# nothing\n\n").unwrap().is_empty());
}

#[test]
fn basic_credentials_parse() {
    // `alice:secret`, and a password with a colon.
    assert_eq!(
        credentials(b"Basic YWxpY2U6c2VjcmV0"),
        Some(("alice".to_string(), b"secret".to_vec()))
    );
    assert_eq!(
        credentials(b"basic  YWxpY2U6c2U6Y3JldA=="),
        Some(("alice".to_string(), b"se:cret".to_vec()))
    );
    assert_eq!(credentials(b"BASIC Og=="), Some((String::new(), Vec::new())));
    for bad in [
        &b"Bearer YWxpY2U6c2VjcmV0"[..],
        b"Basic",
        b"Basic ",
        b"Basic YWxpY2U",
        b"Basic YWxpY2U6c2VjcmV0=",
        b"Basic YW=pY2U6c2VjcmV0",
        b"Basic YWxpY2U@c2VjcmV0",
        b"Basic YWxpY2Vfc2VjcmV0",
        b"Basic /w==",
    ] {
        assert_eq!(credentials(bad), None, "{}", String::from_utf8_lossy(bad));
    }
    let long = format!("Basic {}", "QUFB".repeat(300));
    assert_eq!(credentials(long.as_bytes()), None, "over 1 KiB");
}

#[test]
fn base64_round_trips() {
    assert_eq!(decode_base64(b"").unwrap(), b"");
    assert_eq!(decode_base64(b"Zg==").unwrap(), b"f");
    assert_eq!(decode_base64(b"Zm8=").unwrap(), b"fo");
    assert_eq!(decode_base64(b"Zm9v").unwrap(), b"foo");
    assert_eq!(decode_base64(b"Zm9vYmFy").unwrap(), b"foobar");
    assert_eq!(decode_base64(b"Zg=a"), None);
    assert_eq!(decode_base64(b"Zg==Zg=="), None);
}
