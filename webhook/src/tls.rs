//! The serving certificate: loaded from PEM files, held behind `ArcSwap` and handed to rustls
//! through `ResolvesServerCert`, reloaded when the files change so a rotated Secret (cert-
//! manager or the operator's own) takes effect without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::metrics::{Metrics, ResultLabel};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} file {path}: {source}; check --tls-{what}-file and the mounted Secret")]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{path} holds no PEM certificate; --tls-cert-file must point at a PEM chain (tls.crt)")]
    NoCertificate { path: PathBuf },
    #[error(
        "{path} holds no PEM private key; --tls-key-file must point at a PKCS#8, PKCS#1 or SEC1 key (tls.key)"
    )]
    NoKey { path: PathBuf },
    #[error("{path} is not valid PEM: {source}")]
    Pem { path: PathBuf, source: std::io::Error },
    #[error("the private key in {path} is not usable: {source}")]
    Key { path: PathBuf, source: rustls::Error },
    #[error(
        "the key in {key} does not belong to the certificate in {cert}; the Secret's tls.crt and tls.key must be a pair"
    )]
    Mismatch { cert: PathBuf, key: PathBuf },
}

/// Where the certificate comes from.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { what, path: path.to_path_buf(), source })
}

/// Parse a PEM certificate chain and private key into a rustls `CertifiedKey`.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8], files: &CertFiles) -> Result<CertifiedKey, TlsError> {
    let certs = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem { path: files.cert.clone(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: files.cert.clone() });
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|source| TlsError::Pem { path: files.key.clone(), source })?
        .ok_or_else(|| TlsError::NoKey { path: files.key.clone() })?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|source| TlsError::Key { path: files.key.clone(), source })?;
    let ck = CertifiedKey::new(certs, signing);
    match ck.keys_match() {
        Ok(()) => Ok(ck),
        // Unknown means the key type cannot report its public key; accept it rather than
        // refuse a usable pair.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(ck),
        Err(_) => Err(TlsError::Mismatch { cert: files.cert.clone(), key: files.key.clone() }),
    }
}

/// The current certificate, swapped in place on reload.
#[derive(Debug)]
pub struct CertStore {
    files: CertFiles,
    current: ArcSwap<CertifiedKey>,
    /// The bytes the current certificate was built from; a reload only swaps when they change.
    loaded_from: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl CertStore {
    /// Load the files once; start-up fails if they are unusable.
    pub fn load(files: CertFiles) -> Result<Arc<CertStore>, TlsError> {
        let (cert, key) = (read("cert", &files.cert)?, read("key", &files.key)?);
        let ck = certified_key(&cert, &key, &files)?;
        Ok(Arc::new(CertStore {
            files,
            current: ArcSwap::from_pointee(ck),
            loaded_from: Mutex::new((cert, key)),
        }))
    }

    /// Re-read the files. `Ok(true)` when a new certificate is now served; `Ok(false)` when
    /// nothing changed; `Err` keeps serving the previous certificate.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert, key) = (read("cert", &self.files.cert)?, read("key", &self.files.key)?);
        let mut loaded = self.loaded_from.lock().unwrap_or_else(PoisonError::into_inner);
        if loaded.0 == cert && loaded.1 == key {
            return Ok(false);
        }
        // Secret volumes update both files in one atomic symlink swap, but a writer that
        // replaces them one at a time can be caught in between: a mismatch is then an error
        // for this poll and succeeds on the next.
        let ck = certified_key(&cert, &key, &self.files)?;
        self.current.store(Arc::new(ck));
        *loaded = (cert, key);
        Ok(true)
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// Poll the files every `interval` until `shutdown` resolves.
    pub async fn watch(self: Arc<Self>, interval: Duration, metrics: Arc<Metrics>) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let result = match self.reload() {
                Ok(false) => continue,
                Ok(true) => {
                    tracing::info!(cert = %self.files.cert.display(), "serving certificate changed on disk; now serving the new one");
                    "reloaded"
                }
                Err(e) => {
                    tracing::error!(error = %e, "serving certificate files changed but cannot be loaded; still serving the previous certificate");
                    "error"
                }
            };
            metrics.tls_reloads.get_or_create(&ResultLabel { result: result.to_string() }).inc();
        }
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// rustls server config: TLS 1.2 and 1.3 only, HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(store: Arc<CertStore>) -> Result<ServerConfig, rustls::Error> {
    let mut cfg = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(store);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}
