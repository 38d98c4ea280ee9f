//! Why a listener could not be bound, for the start-up error of `dco-operator` and
//! `dco-webhook`: both bind every listener they serve before anything reports Ready, and exit
//! with this message when one fails (docs/operations.md, "Listeners").

use std::io::ErrorKind;
use std::net::SocketAddr;

/// `cannot listen on <addr> for <listener> (<flag>): <cause>; <fix>`.
pub fn bind_error(listener: &str, flag: &str, addr: SocketAddr, e: &std::io::Error) -> String {
    let fix = match e.kind() {
        ErrorKind::AddrInUse => format!(
            "address in use: another process (or another replica of the same Pod template) listens on {addr}; on a cluster whose Pods share the host network set bindPodIP=true (the chart; it binds each Pod's own address, $(POD_IP)), or give {flag} a free port"
        ),
        ErrorKind::AddrNotAvailable => format!(
            "{} is not an address of this host; bind the Pod's own address ($(POD_IP)) or 0.0.0.0 in {flag}",
            addr.ip()
        ),
        ErrorKind::PermissionDenied => format!(
            "permission denied: port {} is below 1024 and needs CAP_NET_BIND_SERVICE, which the restricted Pod Security profile drops; give {flag} a port of 1024 or above",
            addr.port()
        ),
        _ => format!("change {flag}"),
    };
    format!("cannot listen on {addr} for {listener} ({flag}): {e}; {fix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_in_use_names_the_listener_the_flag_and_bind_pod_ip() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let e = std::net::TcpListener::bind(addr).unwrap_err();
        let m = bind_error("admission reviews", "--admission-listen", addr, &e);
        assert!(
            m.starts_with(&format!("cannot listen on {addr} for admission reviews (--admission-listen): ")),
            "{m}"
        );
        assert!(m.contains("address in use") && m.contains("bindPodIP=true"), "{m}");
        let other = std::io::Error::other("boom");
        assert!(bind_error("x", "--listen", addr, &other).ends_with("boom; change --listen"));
    }
}
