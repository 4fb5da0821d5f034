//! TLS to a server (`tls = true` on a `[[backend.server]]`): the client handshake, with the
//! configured SNI and verification, under `timeouts.tls_handshake`.

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::config::model::ServerTls;
use crate::error::{Error, ErrorKind, Side};

pub(crate) type ClientTlsStream = tokio_rustls::client::TlsStream<TcpStream>;

pub(crate) async fn connect(
    tls: &ServerTls,
    stream: TcpStream,
    limit: std::time::Duration,
    server: &str,
) -> Result<ClientTlsStream, Error> {
    let connector = TlsConnector::from(Arc::clone(&tls.client_config));
    match tokio::time::timeout(limit, connector.connect(tls.server_name.clone(), stream)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(Error::new(ErrorKind::Tls, Side::Back, format!("TLS to {server}")).with_source(e)),
        Err(_) => Err(Error::new(
            ErrorKind::Tls,
            Side::Back,
            format!("TLS to {server}: handshake timed out after {limit:?}"),
        )),
    }
}

/// Whether the server selected HTTP/2 by ALPN (a `proto = "h2"` server offers only `h2`:
/// one that selects nothing would answer HTTP/2 frames as garbage, so it is refused).
pub(crate) fn selected_h2(stream: &ClientTlsStream) -> bool {
    stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice())
}
