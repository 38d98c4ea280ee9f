//! `echo-convert`: a tiny CRD conversion webhook, used as a test fixture. It
//! runs as a Pod through the testenv process-kubelet (image `echo-convert`).
//!
//! For the test kinds it converts between `v1` (`spec.foo`) and `v2`
//! (`spec.bar`), sets `apiVersion` to the desired version, and stamps the
//! annotation `echo-convert.testenv.dco.rs/converted-by: <pod name>` so a test
//! can tell that (and which replica of) the webhook did the conversion.
//!
//! ```text
//! echo-convert --bind 127.0.0.5:8443 --cert tls.crt --key tls.key   # HTTPS
//! echo-convert --bind 127.0.0.5:8080 --http                         # plain HTTP (probes, process tests)
//! ```
//! `--whoami` prints the identity `kube::Client::try_default()` gets in the Pod.
//! Endpoints: `POST /convert` (ConversionReview v1), `GET /healthz`, `GET /`
//! (both answer with the pod name).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

const ANNOTATION: &str = "echo-convert.testenv.dco.rs/converted-by";

struct Args {
    bind: SocketAddr,
    cert: Option<String>,
    key: Option<String>,
    plain: bool,
    whoami: bool,
}

fn parse_args() -> Result<Args> {
    let pod_ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
    let mut bind = format!("{pod_ip}:8443");
    let (mut cert, mut key, mut plain, mut whoami) = (None, None, false, false);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let mut value = |name: &str| -> Result<String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it.next().with_context(|| format!("{name} needs a value")),
            }
        };
        match flag.as_str() {
            "--bind" => bind = value("--bind")?,
            "--cert" => cert = Some(value("--cert")?),
            "--key" => key = Some(value("--key")?),
            "--http" => plain = true,
            "--whoami" => whoami = true,
            other => bail!("unknown argument {other}"),
        }
    }
    if !plain && (cert.is_none() || key.is_none()) {
        bail!("--cert and --key are required unless --http");
    }
    Ok(Args { bind: bind.parse().with_context(|| format!("bad --bind {bind}"))?, cert, key, plain, whoami })
}

fn pod_name() -> String {
    std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).unwrap_or_else(|_| "echo-convert".into())
}

fn tls_acceptor(cert: &str, key: &str) -> Result<TlsAcceptor> {
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(
        std::fs::File::open(cert).with_context(|| format!("open {cert}"))?,
    ))
    .collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut std::io::BufReader::new(
        std::fs::File::open(key).with_context(|| format!("open {key}"))?,
    ))?
    .context("no private key")?;
    let mut cfg = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

/// Converts one object to `desired` (`group/version`).
pub fn convert_object(mut obj: Value, desired: &str, pod: &str) -> Value {
    let to_v2 = desired.ends_with("/v2");
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let (from, to) = if to_v2 { ("foo", "bar") } else { ("bar", "foo") };
        if let Some(v) = spec.remove(from) {
            spec.insert(to.to_string(), v);
        }
    }
    obj["apiVersion"] = Value::String(desired.to_string());
    let meta = &mut obj["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"][ANNOTATION] = Value::String(pod.to_string());
    obj
}

fn review(body: &[u8], pod: &str) -> Result<Value> {
    let req: Value = serde_json::from_slice(body)?;
    let request = req.get("request").context("no request")?;
    let uid = request.get("uid").cloned().unwrap_or(Value::Null);
    let desired = request.get("desiredAPIVersion").and_then(Value::as_str).context("no desiredAPIVersion")?;
    let objects = request.get("objects").and_then(Value::as_array).cloned().unwrap_or_default();
    let n = objects.len();
    let converted: Vec<Value> = objects.into_iter().map(|o| convert_object(o, desired, pod)).collect();
    println!("converted {n} object(s) to {desired}");
    Ok(json!({
        "apiVersion": req.get("apiVersion").cloned().unwrap_or(json!("apiextensions.k8s.io/v1")),
        "kind": "ConversionReview",
        "response": {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}},
    }))
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let pod = pod_name();
    let reply = |code: StatusCode, ct: &str, body: Vec<u8>| {
        Response::builder()
            .status(code)
            .header("content-type", ct)
            .body(Full::new(Bytes::from(body)))
            .expect("response")
    };
    let res = match (req.method(), req.uri().path()) {
        (&Method::POST, "/convert") => match req.into_body().collect().await {
            Ok(b) => match review(&b.to_bytes(), &pod) {
                Ok(v) => reply(StatusCode::OK, "application/json", v.to_string().into_bytes()),
                Err(e) => reply(StatusCode::BAD_REQUEST, "text/plain", e.to_string().into_bytes()),
            },
            Err(e) => reply(StatusCode::BAD_REQUEST, "text/plain", e.to_string().into_bytes()),
        },
        (&Method::GET, "/healthz") | (&Method::GET, "/") => {
            reply(StatusCode::OK, "text/plain", pod.into_bytes())
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", b"not found".to_vec()),
    };
    Ok(res)
}

async fn whoami() -> Result<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let client = kube::Client::try_default().await?;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(client);
    let review = api.create(&kube::api::PostParams::default(), &SelfSubjectReview::default()).await?;
    Ok(review.status.and_then(|s| s.user_info).and_then(|u| u.username).unwrap_or_default())
}

#[tokio::main]
async fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = parse_args()?;
    let tls = if args.plain {
        None
    } else {
        Some(tls_acceptor(args.cert.as_deref().unwrap_or_default(), args.key.as_deref().unwrap_or_default())?)
    };
    let listener = TcpListener::bind(args.bind).await.with_context(|| format!("bind {}", args.bind))?;
    println!(
        "echo-convert {} listening on {} ({})",
        pod_name(),
        args.bind,
        if args.plain { "http" } else { "https" }
    );
    if args.whoami {
        // proves the in-cluster configuration the testenv provides (KUBECONFIG
        // with the Pod's service-account token) works with kube's defaults
        match whoami().await {
            Ok(user) => println!("whoami: {user}"),
            Err(e) => println!("whoami failed: {e:#}"),
        }
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => r?,
            _ = term.recv() => {
                println!("SIGTERM: shutting down");
                return Ok(());
            }
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let svc = service_fn(handle);
            let builder = hyper::server::conn::http1::Builder::new();
            let res = match tls {
                Some(acc) => match acc.accept(stream).await {
                    Ok(s) => builder.serve_connection(TokioIo::new(s), svc).await,
                    Err(e) => {
                        eprintln!("tls: {e}");
                        return;
                    }
                },
                None => builder.serve_connection(TokioIo::new(stream), svc).await,
            };
            if let Err(e) = res {
                eprintln!("connection: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_between_v1_and_v2_and_stamps_the_pod() {
        let v1 =
            json!({"apiVersion": "g/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"foo": "x"}});
        let v2 = convert_object(v1, "g/v2", "pod-a");
        assert_eq!(v2["apiVersion"], "g/v2");
        assert_eq!(v2["spec"], json!({"bar": "x"}));
        assert_eq!(v2["metadata"]["annotations"][ANNOTATION], "pod-a");
        let back = convert_object(v2, "g/v1", "pod-b");
        assert_eq!(back["spec"], json!({"foo": "x"}));
        assert_eq!(back["metadata"]["annotations"][ANNOTATION], "pod-b");
    }

    #[test]
    fn answers_a_conversion_review() {
        let req = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u1", "desiredAPIVersion": "g/v2", "objects": [
                {"apiVersion": "g/v1", "kind": "Widget", "metadata": {"name": "a"}, "spec": {"foo": "1"}},
            ]},
        });
        let resp = review(req.to_string().as_bytes(), "p").unwrap();
        assert_eq!(resp["response"]["uid"], "u1");
        assert_eq!(resp["response"]["result"]["status"], "Success");
        assert_eq!(resp["response"]["convertedObjects"][0]["spec"]["bar"], "1");
    }
}
