//! Reason phrases for the status codes tollgate writes itself (`return` routes).
//!
//! The phrases of the IANA HTTP Status Code Registry (RFC 9110 and the RFCs it lists). A code
//! the registry does not name gets its class's name from RFC 9110 §15 ("Client Error", ...),
//! so a status line always has a phrase a person can read. Clients must ignore the phrase;
//! this is for people reading logs and `curl -i`.

/// The reason phrase for `status`.
pub(crate) fn reason(status: u16) -> &'static str {
    registered(status).unwrap_or_else(|| class(status))
}

/// The registry's phrase, if the code is registered.
fn registered(status: u16) -> Option<&'static str> {
    Some(match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        104 => "Upload Resumption Supported",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        // The registry lists 418 as "(Unused)" (RFC 9110 §15.5.19 reserves it because of
        // RFC 2324's joke); the phrase everyone who configures it expects is this one.
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        _ => return None,
    })
}

/// RFC 9110 §15's name of the code's class.
fn class(status: u16) -> &'static str {
    match status / 100 {
        1 => "Informational",
        2 => "Successful",
        3 => "Redirection",
        4 => "Client Error",
        5 => "Server Error",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_codes_have_their_phrase_others_their_class() {
        assert_eq!(reason(200), "OK");
        assert_eq!(reason(418), "I'm a teapot");
        assert_eq!(reason(451), "Unavailable For Legal Reasons");
        assert_eq!(reason(299), "Successful");
        assert_eq!(reason(306), "Redirection");
        assert_eq!(reason(499), "Client Error");
        assert_eq!(reason(599), "Server Error");
        // Every code a `return` route may use has a phrase that fits in a status line.
        for code in 200..=599 {
            let r = reason(code);
            assert!(
                !r.is_empty() && r.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)),
                "{code}"
            );
        }
    }
}
