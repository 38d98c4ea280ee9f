//! A ConversionReview sent straight to one webhook replica, as the apiserver sends it: over TLS
//! verified with the target's `caBundle` for the Service's DNS name, at the Pod's own address
//! (the resolver's choice, made by the test). For tests that must know what one replica
//! answers, whichever replica the apiserver would have picked.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An answer is at most this large here (one small object); more is a broken replica.
const MAX_ANSWER: usize = 1 << 20;

/// What one replica is: where it listens and how it is verified.
#[derive(Clone)]
pub struct Replica {
    /// `ip:port`
    pub addr: String,
    /// `<service>.<namespace>.svc`
    pub host: String,
    tls: Arc<rustls::ClientConfig>,
}

impl Replica {
    pub fn new(addr: String, host: String, ca_pem: &[u8]) -> Result<Replica> {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut &ca_pem[..]) {
            roots.add(c?)?;
        }
        let cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        Ok(Replica { addr, host, tls: Arc::new(cfg) })
    }

    /// POSTs `review` to `path` on a new connection (HTTP/1.1, closed after the answer) and
    /// returns the status code and the body, within `timeout`.
    pub async fn post(&self, path: &str, review: &Value, timeout: Duration) -> Result<(u16, String)> {
        tokio::time::timeout(timeout, self.post_inner(path, review))
            .await
            .with_context(|| format!("no answer from {} within {timeout:?}", self.addr))?
    }

    async fn post_inner(&self, path: &str, review: &Value) -> Result<(u16, String)> {
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        let name = rustls::pki_types::ServerName::try_from(self.host.clone())?;
        let mut tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .with_context(|| format!("TLS with {} as {}", self.addr, self.host))?;
        let body = review.to_string();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.host,
            body.len()
        );
        tls.write_all(head.as_bytes()).await?;
        tls.write_all(body.as_bytes()).await?;
        tls.flush().await?;
        let mut answer = Vec::new();
        // A server may close without TLS close_notify after `Connection: close`: what was read
        // until then is the answer.
        let read = (&mut tls).take(MAX_ANSWER as u64).read_to_end(&mut answer).await;
        if answer.is_empty() {
            read.with_context(|| format!("reading the answer from {}", self.addr))?;
        }
        let text = String::from_utf8_lossy(&answer);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            bail!("{} answered no HTTP head: {:?}", self.addr, text.chars().take(200).collect::<String>())
        };
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .with_context(|| format!("{} answered a bad status line: {head:?}", self.addr))?;
        // Content-Length framing (hyper answers small bodies so); chunked bodies are not
        // expected here and would show their chunk sizes in the text.
        Ok((status, body.to_string()))
    }
}
