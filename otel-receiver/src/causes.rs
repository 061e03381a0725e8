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
