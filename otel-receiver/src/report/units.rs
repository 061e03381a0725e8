//! Units and layout for people, shared by the report's parts: a duration as people write it,
//! and text wrapped at a terminal's width. Below both the full report and its first screen, so
//! that neither imports from the other.

/// "45 s", "3 min 20 s", "2 h 05 min".
pub fn duration(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// Wraps `text` at `width` columns, indenting continuation lines by `indent` spaces.
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut col = indent;
    for word in text.split_whitespace() {
        if col > indent && col + 1 + word.chars().count() > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else if col > indent {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += word.chars().count();
    }
    out
}
