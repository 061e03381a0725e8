//! Text from outside shown to people, and URLs shown without their secrets: the one place that
//! decides what reaches a terminal or a text file.
//!
//! Any user on a GPU node names their process, their Slurm account and their pod; a Prometheus
//! answers whatever label values it holds, and a server whatever error it likes. Written raw,
//! such a name moves an administrator's cursor, rewrites the window title (`ESC ] 0 ; … BEL`),
//! clears the screen, returns to the start of the line to print over what came before (CR), or
//! reverses what follows it (the bidi controls, which also fool a reader of a log file). So
//! every outside text is shown through [`one_line`] or [`lines`]:
//!
//! - C0 controls (`\x00`–`\x1f`, newline kept by [`lines`] only), DEL and the C1 controls
//!   (`U+0080`–`U+009F`, which some terminals take as `ESC [`) are shown escaped: `\x1b`, `\r`,
//!   `\t`, `\n`, `\x7f`, `\u{9b}`;
//! - the Unicode bidi controls (`U+202A`–`U+202E`, `U+2066`–`U+2069`, `U+200E`, `U+200F`,
//!   `U+061C`) and the line and paragraph separators (`U+2028`, `U+2029`) likewise:
//!   `\u{202e}`;
//! - the text is cut after a number of characters, the cut marked `…[+N chars]`. A name
//!   ([`NAME_MAX_CHARS`]) and a message ([`MESSAGE_MAX_CHARS`]) have their caps; a report's
//!   own multi-line text none.
//!
//! A backslash is left as it is: a name that spells `\x1b` reads as what it is, text.
//!
//! URLs: [`redact_url`] takes the user information (`user:password@`) out of every URL in a
//! text, whether or not it parses; every command shows URLs through it (the fleet report's
//! header and JSON, its errors, the OTLP endpoint in the agent's logs).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;

/// The most characters of one name shown (a process, user, pod, namespace, container, Slurm
/// field, job id or label value): the longest a legitimate source gives is a Kubernetes pod
/// name, a DNS subdomain of up to 253 characters.
pub const NAME_MAX_CHARS: usize = 256;

/// The most characters of one message from outside shown (a query API's refusal, a
/// collector's rejection, a server's error body): enough for Prometheus' longest parse error,
/// which quotes the query (the fleet report's longest is about 700 characters), and a few lines
/// of a terminal, where 86 KB of one were printed whole.
pub const MESSAGE_MAX_CHARS: usize = 2048;

/// The most characters of one log line: a line is one event with its fields, each of which
/// may carry a message.
pub const LOG_LINE_MAX_CHARS: usize = 8192;

/// How `c` is shown when it may not be shown as itself.
fn escaped(c: char, keep_newline: bool) -> Option<Escape> {
    match c {
        '\n' if keep_newline => None,
        '\n' => Some(Escape::Named("\\n")),
        '\r' => Some(Escape::Named("\\r")),
        '\t' => Some(Escape::Named("\\t")),
        '\0'..='\u{1f}' | '\u{7f}' => Some(Escape::Byte(c as u8)),
        '\u{80}'..='\u{9f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{061c}'
        | '\u{2028}'
        | '\u{2029}' => Some(Escape::Unicode(c as u32)),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Escape {
    Named(&'static str),
    Byte(u8),
    Unicode(u32),
}

impl Escape {
    fn write(self, out: &mut String) {
        let _ = match self {
            Escape::Named(s) => out.write_str(s),
            Escape::Byte(b) => write!(out, "\\x{b:02x}"),
            Escape::Unicode(u) => write!(out, "\\u{{{u:x}}}"),
        };
    }
    fn chars(self) -> usize {
        match self {
            Escape::Named(s) => s.len(),
            Escape::Byte(_) => 4,
            Escape::Unicode(u) => 4 + format!("{u:x}").len(),
        }
    }
}

fn shown(text: &str, max_chars: usize, keep_newline: bool) -> Cow<'_, str> {
    let clean = !text.chars().any(|c| escaped(c, keep_newline).is_some());
    // Bytes bound characters: only a long text needs counting.
    if clean && (text.len() <= max_chars || text.chars().count() <= max_chars) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_mul(2)) + 16);
    let mut used = 0usize;
    for (i, c) in text.char_indices() {
        let escape = escaped(c, keep_newline);
        let width = escape.map_or(1, Escape::chars);
        if used + width > max_chars {
            let left = text[i..].chars().count();
            let _ = write!(out, "…[+{left} chars]");
            return Cow::Owned(out);
        }
        used += width;
        match escape {
            Some(e) => e.write(&mut out),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` on one line: every control character, newline included, and every bidi mark shown
/// escaped; cut after `max_chars` characters (escapes counted as shown), the cut marked.
pub fn one_line(text: &str, max_chars: usize) -> Cow<'_, str> {
    shown(text, max_chars, false)
}

/// [`one_line`], but newlines kept: a multi-line text (a report, a page's preformatted block).
pub fn lines(text: &str, max_chars: usize) -> Cow<'_, str> {
    shown(text, max_chars, true)
}

/// A name from outside (process, user, pod, label value…), on one line, within
/// [`NAME_MAX_CHARS`].
pub fn name(text: &str) -> Cow<'_, str> {
    one_line(text, NAME_MAX_CHARS)
}

/// A message from outside (an error body, a server's refusal), on one line, within
/// [`MESSAGE_MAX_CHARS`].
pub fn message(text: &str) -> Cow<'_, str> {
    one_line(text, MESSAGE_MAX_CHARS)
}

/// An attribute value as it is exported (a Prometheus label value, an OTLP string attribute):
/// every control character but the line feed, and every bidi mark, shown escaped as
/// [`lines`] shows them, and nothing cut, so that two values stay two series and the same
/// value is always the same series. The line feed is the exposition format's own to escape
/// (`\n`, which Prometheus reads back), and moves no cursor. A value without any is passed
/// as it is.
pub fn exported(text: &str) -> Cow<'_, str> {
    lines(text, usize::MAX)
}

/// Makes the name in `text` safe to show, in place: what a report's model does with each
/// outside value as it takes it in.
pub fn clean_name(text: &mut String) {
    if let Cow::Owned(shown) = name(text) {
        *text = shown;
    }
}

/// [`clean_name`] for an optional value.
pub fn clean_opt_name(text: &mut Option<String>) {
    if let Some(t) = text {
        clean_name(t);
    }
}

/// Every URL in `text` without its user information: `https://user:secret@host/x` →
/// `https://host/x`. Works on text that does not parse as a URL (a mistyped flag, an error
/// message that quotes one, a redirect's `Location`): whatever stands before the last `@` of
/// a URL's authority and path (up to its `?` or `#`, or the end of the word) goes, so that a
/// password with an unescaped `/` or `@` in it goes whole. A URL with an `@` in its path is
/// shown shorter than it is, which is the safe way to be wrong.
///
/// The query's secret-looking values go too (`?orgId=7&token=X` → `?orgId=7&token=<redacted>`):
/// those of a parameter whose name holds `token`, `key`, `pass`, `secret`, `auth`,
/// `credential` or `signature` (any case), as query APIs and their proxies take them.
pub fn redact_url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // The URL runs to the end of the word.
        let word_end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .unwrap_or(after.len());
        let word = &after[..word_end];
        let before_query = word.find(['?', '#']).unwrap_or(word.len());
        let kept = match word[..before_query].rfind('@') {
            Some(last_at) => last_at + 1,
            None => 0,
        };
        out.push_str(&word[kept..before_query]);
        redact_query(&word[before_query..], &mut out);
        rest = &after[word_end..];
    }
    out.push_str(rest);
    out
}

/// Words in a query parameter's name that mark its value secret.
const SECRET_PARAMS: [&str; 7] = [
    "token",
    "key",
    "pass",
    "secret",
    "auth",
    "credential",
    "signature",
];

/// `tail` (a URL's `?query#fragment`, or "") onto `out`, each secret-looking value redacted.
fn redact_query(tail: &str, out: &mut String) {
    let Some(query) = tail.strip_prefix('?') else {
        out.push_str(tail);
        return;
    };
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    out.push('?');
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        let (name, value) = pair.split_at(pair.find('=').unwrap_or(pair.len()));
        let lower = percent_encoding::percent_decode_str(name)
            .decode_utf8_lossy()
            .to_ascii_lowercase();
        out.push_str(name);
        if value.len() > 1 && SECRET_PARAMS.iter().any(|w| lower.contains(w)) {
            out.push_str("=<redacted>");
        } else {
            out.push_str(value);
        }
    }
    out.push_str(fragment);
}

/// A writer that passes each write on as one line of safe text: what the program's logging
/// writes through. One write is one formatted event (the `tracing` formatter writes each whole);
/// its last newline is kept, every other control character and bidi mark escaped, and the line
/// cut at [`LOG_LINE_MAX_CHARS`]. With `colour`, the formatter's own colour sequences
/// (`ESC [ digits ; … m`) pass: `tracing` escapes `ESC` in every value it formats, so any that
/// reaches here is its own.
#[derive(Debug)]
pub struct SafeLines<W> {
    inner: W,
    colour: bool,
}

impl<W: io::Write> SafeLines<W> {
    /// Lines to `inner`; `colour` keeps the formatter's colour sequences.
    pub fn new(inner: W, colour: bool) -> Self {
        SafeLines { inner, colour }
    }
}

/// `text` with its colour sequences (`ESC [ [0-9;]* m`) cut out, kept in order as
/// (position in the cut text, sequence).
fn split_colours(text: &str) -> (String, Vec<(usize, &str)>) {
    let mut plain = String::with_capacity(text.len());
    let mut colours = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('\u{1b}') {
        plain.push_str(&rest[..at]);
        let seq = &rest[at..];
        let body = seq[1..].strip_prefix('[').map(|b| {
            b.find(|c: char| !(c.is_ascii_digit() || c == ';'))
                .filter(|&end| b[end..].starts_with('m'))
                .map(|end| end + 3)
        });
        match body.flatten() {
            Some(len) => {
                colours.push((plain.len(), &seq[..len]));
                rest = &seq[len..];
            }
            None => {
                plain.push('\u{1b}');
                rest = &seq[1..];
            }
        }
    }
    plain.push_str(rest);
    (plain, colours)
}

impl<W: io::Write> io::Write for SafeLines<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (body, newline) = match text.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (text.as_ref(), ""),
        };
        let mut line = if self.colour {
            let (plain, colours) = split_colours(body);
            if colours.is_empty() {
                one_line(&plain, LOG_LINE_MAX_CHARS).into_owned()
            } else {
                // Each stretch between two colour sequences escaped on its own.
                let mut out = String::with_capacity(plain.len() + 64);
                let mut from = 0;
                for (at, seq) in colours {
                    out.push_str(&one_line(&plain[from..at], LOG_LINE_MAX_CHARS));
                    out.push_str(seq);
                    from = at;
                }
                out.push_str(&one_line(&plain[from..], LOG_LINE_MAX_CHARS));
                out
            }
        } else {
            one_line(body, LOG_LINE_MAX_CHARS).into_owned()
        };
        // One write, so that lines of two threads do not interleave.
        line.push_str(newline);
        self.inner.write_all(line.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_bidi_marks_are_shown_escaped() {
        assert_eq!(
            one_line("a\u{1b}]0;t\u{7}b\rc\td\ne\u{7f}f\u{9b}g\u{0}", 100),
            "a\\x1b]0;t\\x07b\\rc\\td\\ne\\x7ff\\u{9b}g\\x00"
        );
        assert_eq!(
            one_line(
                "\u{202a}\u{202e}\u{2066}\u{2069}\u{200e}\u{200f}\u{61c}\u{2028}",
                100
            ),
            "\\u{202a}\\u{202e}\\u{2066}\\u{2069}\\u{200e}\\u{200f}\\u{61c}\\u{2028}"
        );
        assert_eq!(lines("a\nb\rc", 100), "a\nb\\rc");
        // The characters next to the ranges pass: space, `~`, U+00A0, U+2065, U+202F.
        for fine in [" ~", "\u{a0}", "\u{2065}\u{202f}\u{200d}", "é名前"] {
            assert!(matches!(one_line(fine, 100), Cow::Borrowed(_)), "{fine:?}");
        }
        // Every C0, DEL and C1 character is escaped, and nothing else below U+00A0.
        for c in (0u32..0xa0).filter_map(char::from_u32) {
            let shown = one_line(&c.to_string(), 100).into_owned();
            let control = c < ' ' || ('\u{7f}'..='\u{9f}').contains(&c);
            assert_eq!(shown != c.to_string(), control, "U+{:04X}", c as u32);
            assert!(shown.chars().all(|s| (' '..'\u{7f}').contains(&s)) || !control);
        }
    }

    #[test]
    fn text_is_cut_at_its_cap_and_the_cut_is_marked() {
        assert_eq!(one_line("abcdef", 6), "abcdef");
        assert_eq!(one_line("abcdefg", 6), "abcdef…[+1 chars]");
        assert_eq!(one_line("ééééééé", 6), "éééééé…[+1 chars]");
        // Escapes count as shown: `\x1b` is four characters.
        assert_eq!(one_line("ab\u{1b}cd", 5), "ab…[+3 chars]");
        assert_eq!(one_line("ab\u{1b}cd", 6), "ab\\x1b…[+2 chars]");
        let long = "x".repeat(100_000);
        let shown = name(&long);
        assert_eq!(shown.matches('x').count(), NAME_MAX_CHARS);
        assert!(shown.ends_with("…[+99744 chars]"), "{}", &shown[200..]);
        assert_eq!(message(&long).matches('x').count(), MESSAGE_MAX_CHARS);
    }

    #[test]
    fn names_are_cleaned_in_place() {
        let mut s = "pod\u{1b}[2J".to_string();
        clean_name(&mut s);
        assert_eq!(s, "pod\\x1b[2J");
        let mut o = Some("\u{202e}x".to_string());
        clean_opt_name(&mut o);
        assert_eq!(o.as_deref(), Some("\\u{202e}x"));
    }

    #[test]
    fn urls_lose_their_user_information_wherever_they_are() {
        for (given, shown) in [
            (
                "https://u:secret@otlp.example:4318/v1",
                "https://otlp.example:4318/v1",
            ),
            ("http://host:4318", "http://host:4318"),
            ("http://host?a=b@c", "http://host?a=b@c"),
            ("not a url", "not a url"),
            ("http://alice:s3cr3t@", "http://"),
            ("http://alice:pa/ss@host:9090/x", "http://host:9090/x"),
            ("http://alice:p@ss@host/", "http://host/"),
            ("http://[::1]:9090/", "http://[::1]:9090/"),
            (
                "error sending request for url (http://u:pw@h:1/api/v1/query?query=up): refused",
                "error sending request for url (http://h:1/api/v1/query?query=up): refused",
            ),
            (
                "from http://a:b@one/ to https://c:d@two:2",
                "from http://one/ to https://two:2",
            ),
            (
                "http://u:p@h/?orgId=7&token=X&API_Key=Y&x-auth=&tenant=t#f",
                "http://h/?orgId=7&token=<redacted>&API_Key=<redacted>&x-auth=&tenant=t#f",
            ),
            (
                "http://h/api/v1/query?query=up&access%5Ftoken=abc&password=p&sig=1 done",
                "http://h/api/v1/query?query=up&access%5Ftoken=<redacted>&password=<redacted>&sig=1 done",
            ),
        ] {
            assert_eq!(redact_url(given), shown, "{given}");
        }
    }

    #[test]
    fn log_lines_keep_their_newline_and_colours_and_lose_the_rest() {
        use std::io::Write as _;
        let mut out = Vec::new();
        {
            let mut w = SafeLines::new(&mut out, true);
            w.write_all(b"\x1b[33mWARN\x1b[0m job=a\rb\x1b]0;x\x07 \xe2\x80\xae\n")
                .expect("write");
        }
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "\x1b[33mWARN\x1b[0m job=a\\rb\\x1b]0;x\\x07 \\u{202e}\n"
        );
        let mut out = Vec::new();
        SafeLines::new(&mut out, false)
            .write_all(b"\x1b[33mWARN\x1b[0m two\nlines\n")
            .expect("write");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "\\x1b[33mWARN\\x1b[0m two\\nlines\n"
        );
    }
}
