//! The proxy's choice of a backend pool from an HTTP/1.x request header: rules match the
//! Host (exact, ASCII case-insensitive, port ignored) and/or a prefix of the request
//! target's path; each names a pool used round-robin; a default pool takes the rest.
//!
//! Among the rules that match, one naming the Host beats one that does not (as a web
//! server picks the virtual host first), then the longest path prefix wins, then the rule
//! listed first. Paths are compared byte for byte, without percent-decoding or dot-segment
//! removal: this is routing, not access control.

use std::fmt;
use std::net::SocketAddrV4;

/// Header lines a request may carry before it is refused as malformed.
pub const MAX_HEADERS: usize = 96;

/// One routing rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The Host it matches (any Host when `None`).
    pub host: Option<String>,
    /// The path prefix it matches (any path when `None`); starts with `/`.
    pub path_prefix: Option<String>,
    /// Its pool, used round-robin.
    pub backends: Vec<SocketAddrV4>,
}

/// Why a set of routes is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// No rule and no default pool (or TCP mode without a default pool): nothing could be
    /// served.
    NoBackends,
    /// Rules in TCP mode, which reads no header to match them on.
    RoutesNeedHttp,
    /// Route `index` (from 0) names no backend.
    EmptyPool(usize),
    /// Route `index` has neither `host` nor `path_prefix` (use the default pool).
    MatchesEverything(usize),
    /// Route `index`'s `host` is empty, has a port, or is not a plain host name.
    BadHost(usize, String),
    /// Route `index`'s `path_prefix` does not start with `/` or has a space or control byte.
    BadPathPrefix(usize, String),
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::NoBackends => f.write_str(
                "no upstream and no route: the proxy has no backend (tcp mode needs upstream)",
            ),
            RouteError::RoutesNeedHttp => {
                f.write_str("routes match the HTTP header: they need mode http")
            }
            RouteError::EmptyPool(i) => write!(f, "route {}: backends is empty", i + 1),
            RouteError::MatchesEverything(i) => write!(
                f,
                "route {}: needs host or path_prefix (the default pool is upstream)",
                i + 1
            ),
            RouteError::BadHost(i, h) => write!(
                f,
                "route {}: host {h:?} is not a host name without a port",
                i + 1
            ),
            RouteError::BadPathPrefix(i, p) => write!(
                f,
                "route {}: path_prefix {p:?} must start with '/' and hold no space",
                i + 1
            ),
        }
    }
}

impl std::error::Error for RouteError {}

/// Why a request header is refused (answered `400 Bad Request`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request line or a header line does not parse, or the header is incomplete.
    Malformed,
    /// More than [`MAX_HEADERS`] header lines.
    TooManyHeaders,
    /// An HTTP/1.1 request without Host (RFC 9112 3.2: a server MUST answer 400).
    MissingHost,
    /// More than one Host line (RFC 9112 3.2: a server MUST answer 400).
    DuplicateHost,
}

/// Where a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The pool of route `index`.
    Route(usize),
    /// The default pool (no rule matched).
    Default,
    /// No rule matched and there is no default pool.
    Unrouted,
    /// The header is refused.
    Refused(Refusal),
}

/// The rules, the default pool and each pool's round-robin position.
#[derive(Clone, Debug)]
pub struct Router {
    routes: Vec<Route>,
    default: Vec<SocketAddrV4>,
    /// Next backend per route, then the default pool's.
    next: Vec<usize>,
}

impl Router {
    /// Checks the rules (hosts are kept lower-case).
    pub fn new(routes: Vec<Route>, default: Vec<SocketAddrV4>) -> Result<Router, RouteError> {
        if routes.is_empty() && default.is_empty() {
            return Err(RouteError::NoBackends);
        }
        let mut checked = Vec::with_capacity(routes.len());
        for (i, mut r) in routes.into_iter().enumerate() {
            if r.backends.is_empty() {
                return Err(RouteError::EmptyPool(i));
            }
            if r.host.is_none() && r.path_prefix.is_none() {
                return Err(RouteError::MatchesEverything(i));
            }
            if let Some(h) = &r.host {
                let ok = !h.is_empty()
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._[]".contains(&b));
                if !ok {
                    return Err(RouteError::BadHost(i, h.clone()));
                }
                r.host = Some(h.to_ascii_lowercase());
            }
            if let Some(p) = &r.path_prefix {
                if !p.starts_with('/') || p.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(RouteError::BadPathPrefix(i, p.clone()));
                }
            }
            checked.push(r);
        }
        Ok(Router {
            next: vec![0; checked.len() + 1],
            routes: checked,
            default,
        })
    }

    /// Whether any rule is set (they need the HTTP header).
    pub fn has_routes(&self) -> bool {
        !self.routes.is_empty()
    }

    /// Where the request whose header (up to and including its blank line) is `header`
    /// goes. Never panics, whatever the bytes.
    pub fn decide(&self, header: &[u8]) -> Decision {
        let (host, path) = match target(header) {
            Ok(t) => t,
            Err(r) => return Decision::Refused(r),
        };
        self.decide_target(host, path)
    }

    /// The decision for a Host (without port, any case) and a request path.
    fn decide_target(&self, host: Option<&[u8]>, path: &[u8]) -> Decision {
        let mut best: Option<(usize, (bool, usize))> = None;
        for (i, r) in self.routes.iter().enumerate() {
            let host_ok = match (&r.host, host) {
                (None, _) => true,
                (Some(want), Some(h)) => want.as_bytes().eq_ignore_ascii_case(h),
                (Some(_), None) => false,
            };
            let prefix = r.path_prefix.as_deref().unwrap_or("");
            if !host_ok || !path.starts_with(prefix.as_bytes()) {
                continue;
            }
            let rank = (r.host.is_some(), prefix.len());
            // Strictly better only: the first listed wins a tie.
            if best.is_none_or(|(_, b)| rank > b) {
                best = Some((i, rank));
            }
        }
        match best {
            Some((i, _)) => Decision::Route(i),
            None if self.default.is_empty() => Decision::Unrouted,
            None => Decision::Default,
        }
    }

    /// The next backend of the decision's pool, round-robin (`None` for no pool).
    pub fn backend(&mut self, d: Decision) -> Option<SocketAddrV4> {
        let (pool, next) = match d {
            Decision::Route(i) => (&self.routes.get(i)?.backends, &mut self.next[i]),
            Decision::Default => (&self.default, &mut self.next[self.routes.len()]),
            Decision::Unrouted | Decision::Refused(_) => return None,
        };
        if pool.is_empty() {
            return None;
        }
        let addr = pool[*next % pool.len()];
        *next = (*next + 1) % pool.len();
        Some(addr)
    }
}

/// The request's Host (port removed; from an absolute-form target if there is one, RFC
/// 9112 3.2.2) and its path.
fn target(header: &[u8]) -> Result<(Option<&[u8]>, &[u8]), Refusal> {
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut lines);
    match req.parse(header) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Refusal::Malformed),
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooManyHeaders),
        Err(_) => return Err(Refusal::Malformed),
    }
    let (Some(path), Some(version)) = (req.path, req.version) else {
        return Err(Refusal::Malformed);
    };
    let mut hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host = hosts.next().map(|h| trim(h.value));
    if hosts.next().is_some() {
        return Err(Refusal::DuplicateHost);
    }
    // RFC 9112 3.2: an HTTP/1.1 request without Host MUST get 400 (1.0 may omit it).
    if host.is_none() && version >= 1 {
        return Err(Refusal::MissingHost);
    }
    let (host, path) = match absolute_form(path.as_bytes()) {
        // RFC 9112 3.2.2: the target's authority replaces the Host field.
        Some((authority, path)) => (Some(authority), path),
        None => (host, path.as_bytes()),
    };
    Ok((host.map(without_port).filter(|h| !h.is_empty()), path))
}

/// `http://authority/path` split into authority and path (`/` when empty).
fn absolute_form(t: &[u8]) -> Option<(&[u8], &[u8])> {
    let scheme_end = t.windows(3).position(|w| w == b"://")?;
    let scheme = &t[..scheme_end];
    if !scheme.eq_ignore_ascii_case(b"http") && !scheme.eq_ignore_ascii_case(b"https") {
        return None;
    }
    let rest = &t[scheme_end + 3..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    // userinfo@host (deprecated, RFC 9110 4.2.4): the host is after the last '@'.
    let authority = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let path = if end == rest.len() || rest[end] == b'?' {
        &b"/"[..]
    } else {
        &rest[end..]
    };
    Some((authority, path))
}

/// `host[:port]` or `[v6]:port` without the port.
fn without_port(h: &[u8]) -> &[u8] {
    if h.first() == Some(&b'[') {
        return match h.iter().position(|&b| b == b']') {
            Some(end) => &h[..=end],
            None => h,
        };
    }
    match h.iter().position(|&b| b == b':') {
        Some(colon) => &h[..colon],
        None => h,
    }
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use proptest::prelude::*;

    use super::*;

    fn addr(n: u8) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, n), 80)
    }

    fn route(host: Option<&str>, prefix: Option<&str>, n: u8) -> Route {
        Route {
            host: host.map(str::to_string),
            path_prefix: prefix.map(str::to_string),
            backends: vec![addr(n)],
        }
    }

    fn router(default: bool) -> Router {
        Router::new(
            vec![
                route(Some("Api.Example"), None, 1),
                route(None, Some("/static/"), 2),
                route(None, Some("/static/img/"), 3),
                route(Some("api.example"), Some("/v2/"), 4),
                route(None, Some("/v2/"), 5),
            ],
            if default {
                vec![addr(9), addr(10)]
            } else {
                vec![]
            },
        )
        .unwrap()
    }

    fn req(target: &str, host: Option<&str>) -> Vec<u8> {
        let mut h = format!("GET {target} HTTP/1.1\r\n");
        if let Some(host) = host {
            h += &format!("Host: {host}\r\n");
        }
        h += "Accept: */*\r\n\r\n";
        h.into_bytes()
    }

    #[test]
    fn host_matches_case_insensitively_without_its_port() {
        let r = router(true);
        assert_eq!(r.decide(&req("/", Some("api.example"))), Decision::Route(0));
        assert_eq!(
            r.decide(&req("/", Some("API.EXAMPLE:8080"))),
            Decision::Route(0)
        );
        assert_eq!(
            r.decide(&req("/", Some("api.example.com"))),
            Decision::Default
        );
        assert_eq!(r.decide(&req("/", Some("other"))), Decision::Default);
    }

    #[test]
    fn the_longest_prefix_wins_and_a_host_rule_beats_a_hostless_one() {
        let r = router(false);
        assert_eq!(
            r.decide(&req("/static/a.css", Some("x"))),
            Decision::Route(1)
        );
        assert_eq!(
            r.decide(&req("/static/img/a.png", Some("x"))),
            Decision::Route(2)
        );
        assert_eq!(r.decide(&req("/v2/users", Some("x"))), Decision::Route(4));
        assert_eq!(
            r.decide(&req("/v2/users", Some("api.example"))),
            Decision::Route(3),
            "host and prefix beat the prefix alone"
        );
        assert_eq!(
            r.decide(&req("/static/img/a.png", Some("api.example"))),
            Decision::Route(0),
            "a matching host beats a longer hostless prefix"
        );
        assert_eq!(r.decide(&req("/statics", Some("x"))), Decision::Unrouted);
    }

    #[test]
    fn absolute_form_replaces_the_host_field() {
        let r = router(true);
        let d = r.decide(&req("http://API.example:81/v2/x?q", Some("other")));
        assert_eq!(d, Decision::Route(3), "RFC 9112 3.2.2");
        let d = r.decide(&req("http://u@api.example", Some("other")));
        assert_eq!(d, Decision::Route(0));
    }

    #[test]
    fn bad_headers_are_refused_as_rfc_9112_says() {
        let r = router(true);
        let refused = |h: &[u8]| match r.decide(h) {
            Decision::Refused(why) => Some(why),
            _ => None,
        };
        // RFC 9112 3.2 MUST: 400 for an HTTP/1.1 request without Host or with two.
        assert_eq!(refused(&req("/", None)), Some(Refusal::MissingHost));
        assert_eq!(
            refused(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"),
            Some(Refusal::DuplicateHost)
        );
        // HTTP/1.0 may omit Host: routed by path alone.
        assert_eq!(
            r.decide(b"GET /static/x HTTP/1.0\r\n\r\n"),
            Decision::Route(1)
        );
        assert_eq!(refused(b"GET / HTTP/1.1\r\n"), Some(Refusal::Malformed));
        assert_eq!(refused(b"GARBAGE\r\n\r\n"), Some(Refusal::Malformed));
        assert_eq!(
            refused(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"),
            Some(Refusal::Malformed)
        );
        assert_eq!(
            refused(b"GET / HTTP/1.1\r\nBad Name: a\r\n\r\n"),
            Some(Refusal::Malformed)
        );
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..MAX_HEADERS {
            many.extend(format!("X-{i}: y\r\n").bytes());
        }
        many.extend(b"\r\n");
        assert_eq!(refused(&many), Some(Refusal::TooManyHeaders));
    }

    #[test]
    fn each_pool_is_used_round_robin() {
        let mut r = Router::new(
            vec![Route {
                host: Some("a".into()),
                path_prefix: None,
                backends: vec![addr(1), addr(2)],
            }],
            vec![addr(7), addr(8), addr(9)],
        )
        .unwrap();
        let d = r.decide(&req("/", Some("a")));
        let got: Vec<_> = (0..4).map(|_| r.backend(d).unwrap()).collect();
        assert_eq!(got, [addr(1), addr(2), addr(1), addr(2)]);
        let got: Vec<_> = (0..4)
            .map(|_| r.backend(Decision::Default).unwrap())
            .collect();
        assert_eq!(got, [addr(7), addr(8), addr(9), addr(7)]);
        assert_eq!(r.backend(Decision::Unrouted), None);
    }

    #[test]
    fn bad_rules_are_refused_naming_the_route() {
        let e = |routes: Vec<Route>, default: Vec<SocketAddrV4>| {
            Router::new(routes, default).unwrap_err()
        };
        assert_eq!(e(vec![], vec![]), RouteError::NoBackends);
        let mut empty = route(Some("a"), None, 1);
        empty.backends.clear();
        assert_eq!(e(vec![empty], vec![]), RouteError::EmptyPool(0));
        assert_eq!(
            e(
                vec![route(Some("a"), None, 1), route(None, None, 2)],
                vec![]
            ),
            RouteError::MatchesEverything(1)
        );
        assert!(matches!(
            e(vec![route(Some("a:80"), None, 1)], vec![]),
            RouteError::BadHost(0, _)
        ));
        assert!(matches!(
            e(vec![route(None, Some("api"), 1)], vec![]),
            RouteError::BadPathPrefix(0, _)
        ));
        assert_eq!(
            RouteError::EmptyPool(0).to_string(),
            "route 1: backends is empty"
        );
    }

    /// The rule a reference model picks: host-naming rules first, then the longest prefix,
    /// then the first listed.
    fn model(routes: &[Route], host: &str, path: &str) -> Option<usize> {
        let mut best: Option<(usize, (bool, usize))> = None;
        for (i, r) in routes.iter().enumerate() {
            let h = r.host.as_ref().is_none_or(|w| w.eq_ignore_ascii_case(host));
            let p = r.path_prefix.as_deref().unwrap_or("");
            if h && path.starts_with(p) {
                let rank = (r.host.is_some(), p.len());
                if best.is_none_or(|(_, b)| rank > b) {
                    best = Some((i, rank));
                }
            }
        }
        best.map(|(i, _)| i)
    }

    fn rule() -> impl Strategy<Value = Route> {
        (
            prop::option::of(prop::sample::select(vec!["a", "b.example", "C"])),
            prop::option::of(prop::sample::select(vec!["/", "/x", "/x/", "/x/y", "/z"])),
        )
            .prop_filter("a rule matches something", |(h, p)| {
                h.is_some() || p.is_some()
            })
            .prop_map(|(h, p)| route(h, p, 1))
    }

    proptest! {
        /// Whatever the bytes, `decide` returns and never panics; a decision names a rule
        /// that exists.
        #[test]
        fn random_header_bytes_always_get_a_decision(
            bytes in prop::collection::vec(any::<u8>(), 0..2048),
            default in any::<bool>(),
        ) {
            let r = router(default);
            match r.decide(&bytes) {
                Decision::Route(i) => prop_assert!(i < 5),
                Decision::Default => prop_assert!(default),
                Decision::Unrouted => prop_assert!(!default),
                Decision::Refused(_) => {}
            }
        }

        /// Request-shaped noise: a valid request line around random bytes for the target
        /// and the Host value; the parser refuses or decides, never panics.
        #[test]
        fn mangled_requests_always_get_a_decision(
            target in prop::collection::vec(any::<u8>(), 0..64),
            host in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let r = router(true);
            let mut h = b"GET ".to_vec();
            h.extend(&target);
            h.extend(b" HTTP/1.1\r\nHost: ");
            h.extend(&host);
            h.extend(b"\r\n\r\n");
            let d = r.decide(&h);
            prop_assert!(!matches!(d, Decision::Unrouted), "a default pool exists: {:?}", d);
        }

        /// Well-formed requests land where the reference model says.
        #[test]
        fn decisions_agree_with_a_reference_model(
            routes in prop::collection::vec(rule(), 1..6),
            host in prop::sample::select(vec!["a", "A", "b.example", "c", "zz"]),
            port in prop::option::of(1u16..),
            path in prop::sample::select(vec!["/", "/x", "/x/", "/x/y/z", "/xy", "/z", "/q"]),
            default in any::<bool>(),
        ) {
            let pool = if default { vec![addr(9)] } else { vec![] };
            let r = Router::new(routes.clone(), pool).unwrap();
            let host_field = match port {
                Some(p) => format!("{host}:{p}"),
                None => host.to_string(),
            };
            let d = r.decide(&req(path, Some(&host_field)));
            let want = match model(&routes, host, path) {
                Some(i) => Decision::Route(i),
                None if default => Decision::Default,
                None => Decision::Unrouted,
            };
            prop_assert_eq!(d, want);
        }
    }
}
