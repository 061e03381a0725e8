//! One self-contained HTML page: no script, no external style or font, so that it opens from a
//! mail attachment or a CI artifact as it was written. A builder of headings, paragraphs,
//! timelines and tables; `diagnose --html` fills it, and a fleet or job report can too.

use std::fmt::Write as _;

use super::timeline::{escape as escape_html, Timeline};
use crate::text;

/// Text as HTML: its control characters and bidi marks shown escaped first (a browser obeys a
/// right-to-left override as a terminal does), then `<`, `&` and quotes as entities.
fn escape(text: &str) -> String {
    escape_html(&text::lines(text, usize::MAX))
}

/// A page being built.
#[derive(Debug, Clone, Default)]
pub struct HtmlPage {
    title: String,
    body: String,
}

/// The page's style. It reads at a phone's width (420 px): text wraps, long names break, and a
/// table or a timeline wider than the screen scrolls in its own box, never the page; a timeline
/// shrinks with the page down to 600 px, under which it scrolls too.
const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:24px auto;padding:0 12px;color:#222;overflow-wrap:anywhere}\
div.scroll{overflow-x:auto;max-width:100%}svg.timeline{display:block;width:100%;min-width:600px;height:auto}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}\
p.bottom{font-size:15px;background:#fff6e0;padding:10px 14px;border-left:4px solid #e3672b}\
p.incident{font-size:15px;background:#fde8e8;padding:10px 14px;border-left:4px solid #6d0c0a}\
p.change{font-size:14px;margin:4px 0;padding:6px 14px;border-left:4px solid #3a91d4}\
table{border-collapse:collapse;margin:8px 0;font-size:13px}\
td,th{padding:3px 9px;border-bottom:1px solid #eee;text-align:left}\
td.n{text-align:right}p.note{color:#666;font-size:13px}pre{font-size:12px;background:#f6f6f6;padding:8px}";

impl HtmlPage {
    /// An empty page with its title (also its first heading).
    pub fn new(title: &str) -> Self {
        HtmlPage {
            title: title.to_string(),
            body: String::new(),
        }
    }

    /// A section heading.
    pub fn heading(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<h2>{}</h2>", escape(text));
        self
    }

    /// A paragraph; `class` styles it (`bottom` for the bottom line, `change` for a change to
    /// make, `note` for small print).
    pub fn paragraph(&mut self, class: &str, text: &str) -> &mut Self {
        let _ = write!(
            self.body,
            r#"<p class="{}">{}</p>"#,
            escape(class),
            escape(text)
        );
        self
    }

    /// A timeline, drawn inline as SVG.
    pub fn timeline(&mut self, timeline: &Timeline) -> &mut Self {
        self.body.push_str(r#"<div class="figure scroll">"#);
        self.body.push_str(&timeline.svg());
        self.body.push_str("</div>");
        self
    }

    /// A table; cells that parse as a number (after stripping a unit) are right-aligned.
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) -> &mut Self {
        self.body.push_str(r#"<div class="scroll"><table><tr>"#);
        for h in header {
            let _ = write!(self.body, "<th>{}</th>", escape(h));
        }
        self.body.push_str("</tr>");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let numeric = cell
                    .split_whitespace()
                    .next()
                    .is_some_and(|w| w.trim_end_matches('%').parse::<f64>().is_ok());
                let _ = write!(
                    self.body,
                    "<td{}>{}</td>",
                    if numeric { r#" class="n""# } else { "" },
                    escape(cell)
                );
            }
            self.body.push_str("</tr>");
        }
        self.body.push_str("</table></div>");
        self
    }

    /// Text shown as written (a report's detail).
    pub fn preformatted(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<pre>{}</pre>", escape(text));
        self
    }

    /// The whole page.
    pub fn finish(&self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1>{}</body></html>\n",
            self.body,
            t = escape(&self.title)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_self_contained_and_escaped() {
        let mut page = HtmlPage::new("a <b>");
        page.paragraph("bottom", "x & y")
            .table(&["a", "b"], &[vec!["12 W".into(), "idle".into()]]);
        let html = page.finish();
        assert!(html.contains("<title>a &lt;b&gt;</title>"));
        assert!(html.contains("x &amp; y"));
        assert!(html.contains(r#"<td class="n">12 W</td><td>idle</td>"#));
        assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("<link"));
    }

    #[test]
    fn control_characters_and_bidi_marks_are_neutralised_in_every_part() {
        let evil = "a\u{1b}[2J\u{202e}b\rc";
        let mut page = HtmlPage::new(evil);
        page.heading(evil)
            .paragraph("", evil)
            .table(&[evil], &[vec![evil.to_string()]])
            .preformatted(&format!("{evil}\nline two"));
        let html = page.finish();
        assert!(!html.contains('\u{1b}') && !html.contains('\u{202e}') && !html.contains('\r'));
        assert_eq!(html.matches("a\\x1b[2J\\u{202e}b\\rc").count(), 7, "{html}");
        assert!(html.contains("\nline two</pre>"));
    }
}
