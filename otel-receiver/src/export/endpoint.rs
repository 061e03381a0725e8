//! The OTLP endpoint, parsed once when the configuration is resolved. Credentials written into
//! the URL (`https://user:secret@host`) are taken out of it into a `Basic` authorization header,
//! a [`Secret`], so that the URL the exporters, the SDK's own debug logs and every line of ours
//! carry has none: what prints an [`Endpoint`] cannot show them. A port above 65535, a missing
//! host or a scheme other than http(s) is refused at start rather than failing every export.

use std::fmt;

use base64::Engine as _;
use percent_encoding::percent_decode_str;

use super::secret::Secret;
use crate::text::redact_url;

/// Why an endpoint was refused. The text shows the endpoint without its credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{shown:?} {problem}")]
pub struct EndpointError {
    shown: String,
    problem: String,
}

/// An OTLP collector's URL, without user information.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    url: url::Url,
    /// `Basic base64(user:password)` from the URL's user information, if it had any.
    basic_auth: Option<Secret>,
}

impl Endpoint {
    /// Parses `text`: an `http://` or `https://` URL with a host and, if given, a valid port.
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        let refuse = |problem: &str| EndpointError {
            shown: redact_url(text),
            problem: problem.to_string(),
        };
        let mut url = url::Url::parse(text.trim()).map_err(|e| match e {
            url::ParseError::InvalidPort => refuse("has a port outside 1–65535"),
            url::ParseError::RelativeUrlWithoutBase => {
                refuse("must start with http:// or https://")
            }
            other => refuse(&format!("is not a URL: {other}")),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refuse("must start with http:// or https://"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(refuse("has no host"));
        }
        if url.port() == Some(0) {
            return Err(refuse("has a port outside 1–65535"));
        }
        if url.fragment().is_some() {
            return Err(refuse("has a #fragment, which no collector reads"));
        }
        let basic_auth = if url.username().is_empty() && url.password().is_none() {
            None
        } else {
            let user = percent_decode_str(url.username()).decode_utf8_lossy();
            let password = url
                .password()
                .map(|p| percent_decode_str(p).decode_utf8_lossy())
                .unwrap_or_default();
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            Some(Secret::new(format!("Basic {token}")))
        };
        // Both calls only fail on URLs that cannot have credentials, which http(s) ones can.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Ok(Endpoint { url, basic_auth })
    }

    /// The URL without credentials, as given otherwise (gRPC's collector address).
    pub fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// The URL of one signal for OTLP/HTTP: `path` (`v1/metrics`) appended to the endpoint's
    /// path, its query kept, as the specification's `OTEL_EXPORTER_OTLP_ENDPOINT` rule says.
    pub fn signal_url(&self, path: &str) -> String {
        let mut url = self.url.clone();
        let joined = format!("{}/{}", url.path().trim_end_matches('/'), path);
        url.set_path(&joined);
        url.to_string()
    }

    pub fn is_https(&self) -> bool {
        self.url.scheme() == "https"
    }

    /// The `Authorization` value the URL's user information stood for.
    pub fn basic_auth(&self) -> Option<&Secret> {
        self.basic_auth.as_ref()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `url` adds a `/` to an empty path; the endpoint is shown as the user wrote it.
        let text = self.url.as_str();
        f.write_str(if self.url.path() == "/" && self.url.query().is_none() {
            text.trim_end_matches('/')
        } else {
            text
        })
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Endpoint({self}{})",
            if self.basic_auth.is_some() {
                ", with credentials <redacted>"
            } else {
                ""
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_url_for_a_secret_header() {
        let e =
            Endpoint::parse("https://us%40r:s3cr%3At@collector.example:4318/otlp").expect("valid");
        assert_eq!(e.as_str(), "https://collector.example:4318/otlp");
        assert_eq!(e.to_string(), "https://collector.example:4318/otlp");
        let auth = e.basic_auth().expect("credentials");
        // base64("us@r:s3cr:t")
        assert_eq!(auth.expose(), "Basic dXNAcjpzM2NyOnQ=");
        for shown in [format!("{e}"), format!("{e:?}")] {
            assert!(
                !shown.contains("s3cr") && !shown.contains("us%40r"),
                "{shown}"
            );
        }
        assert!(Endpoint::parse("http://host:4318")
            .expect("valid")
            .basic_auth()
            .is_none());
    }

    #[test]
    fn signal_paths_are_appended_to_the_path_and_the_query_is_kept() {
        let e = Endpoint::parse("http://host:4318").expect("valid");
        assert_eq!(e.to_string(), "http://host:4318");
        assert_eq!(e.signal_url("v1/metrics"), "http://host:4318/v1/metrics");
        let e = Endpoint::parse("http://host:4318/base/?tenant=a&x=1").expect("valid");
        assert_eq!(
            e.signal_url("v1/logs"),
            "http://host:4318/base/v1/logs?tenant=a&x=1"
        );
    }

    #[test]
    fn bad_endpoints_are_refused_without_showing_their_credentials() {
        for (text, problem) in [
            ("http://u:pw@host:65536", "port outside"),
            ("http://host:0", "port outside"),
            ("collector:4317", "must start with http"),
            ("ftp://host", "must start with http"),
            ("http://u:pw@:4317", "URL"),
            ("http://host/#x", "fragment"),
        ] {
            let e = Endpoint::parse(text).expect_err(text).to_string();
            assert!(e.contains(problem), "{text}: {e}");
            assert!(!e.contains("pw"), "{text}: {e}");
        }
        assert!(Endpoint::parse("http://host:65535").is_ok());
    }
}
