//! What actually went wrong, below a client's own message.

/// An error's causes below its own message, joined, each once (tonic's chain repeats the
/// OS's): reqwest's "error sending request" and tonic's "transport error" say nothing, the
/// OS's "Permission denied" or "Connection refused" beneath them does. The error's own
/// message where it has no cause.
pub(crate) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !parts.iter().any(|p: &String| p.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
    }
    if parts.is_empty() {
        parts.push(e.to_string());
    }
    parts.join(": ")
}

/// What an answer that broke HTTP was, where an error's chain holds one: a malformed status
/// line or header, a header block past the client's limit (hyper takes at most 100 headers),
/// a body past the 4 MiB the OTLP client reads. Such a server was reached and answered: it is
/// not a failure to connect, which these used to be filed as.
pub(crate) fn protocol_fault(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_parse_too_large() {
                return Some("a header block too large (too many or too long headers)");
            }
            if h.is_parse() || h.is_parse_status() {
                return Some("a malformed answer (an invalid status line or header)");
            }
        }
        if err
            .downcast_ref::<opentelemetry_http::ResponseBodyTooLarge>()
            .is_some()
        {
            return Some("a body over 4 MiB");
        }
        next = err.source();
    }
    None
}
