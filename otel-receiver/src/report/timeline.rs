//! A GPU's run as a picture: verdicts as coloured bands along time, power and SM activity
//! beneath. One data type, [`Timeline`], and two renderers: SVG for a page ([`Timeline::svg`])
//! and a coloured strip of block characters for a terminal ([`Timeline::strip`]). Nothing here
//! knows about `diagnose`: a fleet or job report builds a `Timeline` from its own data and
//! draws it the same way.

use std::fmt::Write as _;

use crate::diagnosis::Class;

/// A stretch of time with one verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    /// Unix seconds.
    pub start: f64,
    /// Unix seconds.
    pub end: f64,
    /// The verdict over the stretch.
    pub class: Class,
}

/// One point of the curves beneath the bands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Unix seconds.
    pub t: f64,
    /// Mean power (W).
    pub power_w: Option<f64>,
    /// SM activity (GPM), 0–100; GPU-Util where the GPU has no GPM.
    pub activity_pct: Option<f64>,
}

/// What one timeline shows.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// "GPU 0 · NVIDIA H200".
    pub title: String,
    /// The verdicts along time, in order.
    pub bands: Vec<Band>,
    /// The curves' points, in time order.
    pub points: Vec<Point>,
    /// The power axis' top; the highest power drawn when unknown.
    pub power_max_w: Option<f64>,
    /// What `activity_pct` is: "SM active" or "GPU-Util".
    pub activity_label: &'static str,
}

/// A colour per verdict, each of its own hue and of its own lightness: CIE L* 96.5, 88, 79.5 …
/// 20, eight and a half apart, so that neighbouring bands part on a greyscale print or for a reader who cannot
/// tell the hues apart (a unit test holds the steps). Idle is near white, a held context grey,
/// waiting yellow and orange, healthy work blue and green, busy-not-fast teal between them, tiny
/// kernels magenta, copies purple,
/// a hang the darkest red.
pub fn class_colour(class: Class) -> &'static str {
    match class {
        Class::Idle => "#f5f5f5",
        Class::SyncWait => "#f6dc74",
        Class::InputStarved => "#ffb674",
        Class::IdleHeld => "#a8aeba",
        Class::MemoryBound => "#509dd9",
        Class::LatencyBound => "#259088",
        Class::LaunchBound => "#bc3681",
        Class::ComputeBound => "#0e651d",
        Class::TransferBound => "#562c8a",
        Class::Hung => "#640b09",
    }
}

/// The 256-colour terminal code nearest each [`class_colour`].
fn class_ansi(class: Class) -> u8 {
    match class {
        Class::Idle => 255,
        Class::IdleHeld => 247,
        Class::ComputeBound => 28,
        Class::MemoryBound => 68,
        Class::LatencyBound => 30,
        Class::LaunchBound => 162,
        Class::TransferBound => 55,
        Class::InputStarved => 215,
        Class::SyncWait => 221,
        Class::Hung => 88,
    }
}

/// Escapes text for HTML and SVG.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// SVG geometry, in px.
const WIDTH_PX: f64 = 960.0;
const LEFT_PX: f64 = 56.0;
const RIGHT_PX: f64 = 44.0;
const BAND_TOP_PX: f64 = 22.0;
const BAND_PX: f64 = 26.0;
const CURVE_TOP_PX: f64 = 58.0;
const CURVE_PX: f64 = 70.0;
const AXIS_PX: f64 = 18.0;

impl Timeline {
    fn span(&self) -> Option<(f64, f64)> {
        let start = self
            .bands
            .iter()
            .map(|b| b.start)
            .chain(self.points.iter().map(|p| p.t))
            .reduce(f64::min)?;
        let end = self
            .bands
            .iter()
            .map(|b| b.end)
            .chain(self.points.iter().map(|p| p.t))
            .reduce(f64::max)?;
        Some((start, end.max(start + 1e-3)))
    }

    /// Classes in the order they first appear: the legend.
    pub fn classes(&self) -> Vec<Class> {
        let mut seen = Vec::new();
        for b in &self.bands {
            if !seen.contains(&b.class) {
                seen.push(b.class);
            }
        }
        seen
    }

    /// The timeline as one `<svg>` element: a `<rect class="band" data-class=…>` per band
    /// (a test counts them), a power curve (`class="power"`) and an activity curve
    /// (`class="activity"`) beneath, a time axis in UTC, a legend.
    pub fn svg(&self) -> String {
        let height = CURVE_TOP_PX + CURVE_PX + AXIS_PX + 22.0;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {WIDTH_PX} {height}" width="{WIDTH_PX}" height="{height}" font-family="sans-serif" font-size="11">"#
        );
        let _ = write!(
            s,
            r#"<text x="{LEFT_PX}" y="14" font-weight="bold">{}</text>"#,
            escape(&self.title)
        );
        let Some((start, end)) = self.span() else {
            s.push_str(r#"<text x="56" y="40">no samples</text></svg>"#);
            return s;
        };
        let plot = WIDTH_PX - LEFT_PX - RIGHT_PX;
        let x = |t: f64| LEFT_PX + plot * (t - start) / (end - start);
        let _ = write!(
            s,
            r#"<text x="4" y="{}">verdict</text>"#,
            BAND_TOP_PX + 17.0
        );
        for b in &self.bands {
            let (x0, x1) = (x(b.start), x(b.end));
            let _ = write!(
                s,
                r#"<rect class="band" data-class="{c}" x="{x0:.2}" y="{BAND_TOP_PX}" width="{w:.2}" height="{BAND_PX}" fill="{fill}"><title>{c} {t0}–{t1} UTC</title></rect>"#,
                c = b.class.as_str(),
                w = (x1 - x0).max(0.5),
                fill = class_colour(b.class),
                t0 = super::utc_hms(b.start),
                t1 = super::utc_hms(b.end),
            );
        }
        // Curves: power against its axis top, activity against 100%.
        let power_top = self
            .power_max_w
            .or_else(|| {
                self.points
                    .iter()
                    .filter_map(|p| p.power_w)
                    .reduce(f64::max)
            })
            .filter(|w| *w > 0.0);
        let y = |share: f64| CURVE_TOP_PX + CURVE_PX * (1.0 - share.clamp(0.0, 1.0));
        let _ = write!(
            s,
            "<rect x=\"{LEFT_PX}\" y=\"{CURVE_TOP_PX}\" width=\"{plot}\" height=\"{CURVE_PX}\" fill=\"#fafafa\" stroke=\"#ddd\"/>"
        );
        let mut curve = |class: &str, colour: &str, value: &dyn Fn(&Point) -> Option<f64>| {
            let mut d = String::new();
            let mut pen_down = false;
            for p in &self.points {
                match value(p) {
                    Some(v) => {
                        let _ = write!(
                            d,
                            "{}{:.1},{:.1} ",
                            if pen_down { "L" } else { "M" },
                            x(p.t),
                            y(v)
                        );
                        pen_down = true;
                    }
                    None => pen_down = false,
                }
            }
            let _ = write!(
                s,
                r#"<path class="{class}" d="{d}" fill="none" stroke="{colour}" stroke-width="1.4"/>"#
            );
        };
        if let Some(top) = power_top {
            curve("power", "#d62728", &|p: &Point| p.power_w.map(|w| w / top));
        }
        curve("activity", "#1f77b4", &|p: &Point| {
            p.activity_pct.map(|a| a / 100.0)
        });
        // Scales: power on the left (0, half, top), activity on the right (0, 50, 100%), a
        // dotted line at half of both.
        let right = WIDTH_PX - RIGHT_PX;
        let _ = write!(
            s,
            "<line x1=\"{LEFT_PX}\" y1=\"{mid}\" x2=\"{right}\" y2=\"{mid}\" stroke=\"#ccc\" stroke-dasharray=\"2,3\"/>",
            mid = y(0.5)
        );
        for share in [1.0, 0.5, 0.0] {
            let ty = y(share) + 4.0;
            if let Some(top) = power_top {
                let _ = write!(
                    s,
                    "<text x=\"{}\" y=\"{ty}\" text-anchor=\"end\" fill=\"#d62728\">{:.0} W</text>",
                    LEFT_PX - 4.0,
                    top * share
                );
            }
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{ty}\" fill=\"#1f77b4\">{:.0}%</text>",
                right + 4.0,
                100.0 * share
            );
        }
        // Time axis: five ticks.
        let axis_y = CURVE_TOP_PX + CURVE_PX + 13.0;
        for i in 0..=4 {
            let t = start + (end - start) * f64::from(i) / 4.0;
            let anchor = match i {
                0 => "start",
                4 => "end",
                _ => "middle",
            };
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{axis_y}" text-anchor="{anchor}">{}</text>"#,
                x(t),
                super::utc_hms(t)
            );
        }
        // Legend: each verdict in words, then what the curves are.
        let mut lx = LEFT_PX;
        let ly = axis_y + 16.0;
        for class in self.classes() {
            let name = super::words::label(class);
            let _ = write!(
                s,
                r##"<rect x="{lx}" y="{}" width="10" height="10" fill="{}" stroke="#888" stroke-width="0.5"/><text x="{}" y="{ly}">{}</text>"##,
                ly - 9.0,
                class_colour(class),
                lx + 13.0,
                escape(name)
            );
            lx += 20.0 + 6.0 * name.chars().count() as f64;
        }
        let _ = write!(
            s,
            "<text x=\"{right}\" y=\"{ly}\" text-anchor=\"end\"><tspan fill=\"#d62728\">— power (W, left axis)</tspan> <tspan fill=\"#1f77b4\">— {} (%, right axis)</tspan></text>",
            escape(self.activity_label)
        );
        s.push_str("</svg>");
        s
    }

    /// A strip of `width` cells for a terminal, each cell the verdict that held most of its
    /// slice of time, drawn as a block in that verdict's colour (a foreground colour, so that
    /// the strip has no spaces a wrapping pager could break at); with `colour` off, the first letter of
    /// the class instead (for tests and dumb terminals).
    pub fn strip(&self, width: usize, colour: bool) -> String {
        let Some((start, end)) = self.span() else {
            return String::new();
        };
        let slice = (end - start) / width.max(1) as f64;
        let mut out = String::new();
        let mut last: Option<Class> = None;
        for i in 0..width {
            let (a, b) = (start + slice * i as f64, start + slice * (i + 1) as f64);
            let mut best: Option<(Class, f64)> = None;
            for band in &self.bands {
                let overlap = band.end.min(b) - band.start.max(a);
                if overlap > 0.0 && best.is_none_or(|(_, o)| overlap > o) {
                    best = Some((band.class, overlap));
                }
            }
            match (best.map(|(c, _)| c), colour) {
                (None, _) => {
                    if colour && last.is_some() {
                        out.push_str("\x1b[0m");
                    }
                    last = None;
                    out.push(' ');
                }
                (Some(c), true) => {
                    if last != Some(c) {
                        let _ = write!(out, "\x1b[38;5;{}m", class_ansi(c));
                    }
                    last = Some(c);
                    out.push('█');
                }
                (Some(c), false) => out.push(letter(c)),
            }
        }
        if colour && last.is_some() {
            out.push_str("\x1b[0m");
        }
        out
    }

    /// The strip's key: each class seen, in its colour.
    pub fn strip_legend(&self, colour: bool) -> String {
        self.classes()
            .into_iter()
            .map(|c| {
                if colour {
                    format!("\x1b[38;5;{}m██\x1b[0m {c}", class_ansi(c))
                } else {
                    format!("{} {c}", letter(c))
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    }
}

/// One letter per class for a colourless strip.
fn letter(class: Class) -> char {
    match class {
        Class::Idle => '.',
        Class::IdleHeld => 'h',
        Class::ComputeBound => 'C',
        Class::MemoryBound => 'M',
        Class::LatencyBound => 'L',
        Class::LaunchBound => 'l',
        Class::TransferBound => 't',
        Class::InputStarved => 's',
        Class::SyncWait => 'w',
        Class::Hung => 'X',
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline() -> Timeline {
        Timeline {
            title: "GPU 0 <test>".into(),
            bands: vec![
                Band {
                    start: 0.0,
                    end: 10.0,
                    class: Class::Idle,
                },
                Band {
                    start: 10.0,
                    end: 30.0,
                    class: Class::ComputeBound,
                },
            ],
            points: vec![
                Point {
                    t: 5.0,
                    power_w: Some(80.0),
                    activity_pct: Some(0.0),
                },
                Point {
                    t: 20.0,
                    power_w: Some(690.0),
                    activity_pct: Some(97.0),
                },
            ],
            power_max_w: Some(700.0),
            activity_label: "SM active",
        }
    }

    #[test]
    fn svg_has_one_band_per_phase_and_escapes_the_title() {
        let svg = timeline().svg();
        assert_eq!(svg.matches(r#"class="band""#).count(), 2);
        assert!(svg.contains("GPU 0 &lt;test&gt;"));
        assert!(svg.contains(r#"class="power""#) && svg.contains(r#"class="activity""#));
    }

    #[test]
    fn strip_gives_each_cell_the_verdict_that_held_most_of_it() {
        assert_eq!(timeline().strip(6, false), "..CCCC");
        let coloured = timeline().strip(6, true);
        assert!(coloured.starts_with("\x1b[38;5;255m██") && coloured.ends_with("\x1b[0m"));
    }

    /// CIE L* of an `#rrggbb` colour: its lightness as a greyscale print shows it.
    fn lightness(hex: &str) -> f64 {
        let channel = |i: usize| {
            let c = f64::from(u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")) / 255.0;
            if c <= 0.04045 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        let y = 0.2126 * channel(1) + 0.7152 * channel(3) + 0.0722 * channel(5);
        116.0 * y.cbrt() - 16.0
    }

    #[test]
    fn every_class_has_a_lightness_of_its_own() {
        let mut all: Vec<(f64, Class)> = Class::ALL
            .iter()
            .map(|c| (lightness(class_colour(*c)), *c))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in all.windows(2) {
            assert!(
                pair[1].0 - pair[0].0 >= 8.0,
                "{} (L* {:.1}) and {} (L* {:.1}) read alike in greyscale",
                pair[0].1,
                pair[0].0,
                pair[1].1,
                pair[1].0
            );
        }
        // The pair the issue found alike: tiny kernels and starved input.
        let apart = lightness(class_colour(Class::InputStarved))
            - lightness(class_colour(Class::LaunchBound));
        assert!(apart > 20.0, "{apart}");
    }

    #[test]
    fn the_curves_have_scales() {
        let svg = timeline().svg();
        for tick in ["700 W", "350 W", "0 W", "100%", "50%", "0%"] {
            assert!(svg.contains(&format!(">{tick}</text>")), "{tick}: {svg}");
        }
        assert!(svg.contains("SM active (%, right axis)"), "{svg}");
        assert!(svg.contains("power (W, left axis)"), "{svg}");
    }
}
