//! Which table entry an NVML device name belongs to, if any. Names are compared whole, after a
//! normalisation that keeps every token that tells parts apart: `NVIDIA L40` is not the L4,
//! `NVIDIA RTX A1000` not the A100, `NVIDIA H100 NVL` not the H100 SXM5. A name in no entry is
//! [`SkuMatch::Unknown`], never its nearest neighbour: a wrong specification is worse than none.

use super::Sku;

/// How an NVML name was matched to an entry, for `gpuslack doctor` and the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct How {
    /// The entry's `match` form the name equals after normalisation, as the table writes it.
    pub form: String,
    /// The NVML name is that form verbatim (no case, separator, prefix or MIG difference).
    pub exact: bool,
    /// The MIG profile dropped from the name (`1g.10gb`), for a MIG instance.
    pub mig_profile: Option<String>,
}

/// What a device name resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum SkuMatch<'a> {
    /// The name is one of this entry's forms.
    Known { sku: &'a Sku, how: How },
    /// No entry names it: the GPU gets no figure from the table.
    Unknown {
        /// The name as NVML gave it.
        name: String,
        /// The form it was looked up by.
        normalised: String,
    },
}

impl<'a> SkuMatch<'a> {
    /// The entry, if the name has one.
    pub fn sku(&self) -> Option<&'a Sku> {
        match self {
            SkuMatch::Known { sku, .. } => Some(sku),
            SkuMatch::Unknown { .. } => None,
        }
    }
}

/// Brand words in front of a name that say nothing about the part (`NVIDIA A10`, `Tesla T4`).
/// `Quadro` and `GeForce` stay: they name product lines whose parts share numbers with others.
const BRANDS: [&str; 2] = ["NVIDIA", "TESLA"];

/// A name as compared: upper case, `-` and `_` as spaces, single spaces, the leading brand words
/// and a MIG suffix (`MIG 1g.10gb`, `MIG 3g.71gb`, the token `MIG` and all after it) dropped.
/// Returns the form and the MIG profile dropped, if any (lower case, as NVML writes it).
pub fn normalise(name: &str) -> (String, Option<String>) {
    let upper = name.to_uppercase().replace(['-', '_'], " ");
    let mut tokens: Vec<&str> = upper.split_whitespace().collect();
    let mut mig_profile = None;
    if let Some(at) = tokens
        .iter()
        .skip(1)
        .position(|t| *t == "MIG")
        .map(|i| i + 1)
    {
        let rest = tokens[at + 1..].join(" ").to_lowercase();
        mig_profile = Some(rest);
        tokens.truncate(at);
    }
    let brands = tokens
        .iter()
        .take_while(|t| BRANDS.contains(t))
        .count()
        .min(tokens.len().saturating_sub(1));
    (tokens[brands..].join(" "), mig_profile)
}

/// The entry whose `match` forms include `name` after normalisation, else
/// [`SkuMatch::Unknown`]. The table's check ([`super::table`]) makes sure no form is in two
/// entries, so at most one can match.
pub fn resolve_in<'a>(skus: &'a [Sku], name: &str) -> SkuMatch<'a> {
    let (normalised, mig_profile) = normalise(name);
    for sku in skus {
        for form in &sku.matches {
            if normalise(form).0 == normalised {
                return SkuMatch::Known {
                    sku,
                    how: How {
                        form: form.clone(),
                        exact: name.trim() == form,
                        mig_profile,
                    },
                };
            }
        }
    }
    SkuMatch::Unknown {
        name: name.to_string(),
        normalised,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_keeps_what_tells_parts_apart() {
        let n = |s: &str| normalise(s);
        assert_eq!(n("NVIDIA L40"), ("L40".into(), None));
        assert_eq!(n("Tesla V100-SXM2-16GB"), ("V100 SXM2 16GB".into(), None));
        assert_eq!(
            n("nvidia  a100_sxm4-80gb "),
            ("A100 SXM4 80GB".into(), None)
        );
        assert_eq!(n("Quadro RTX 6000"), ("QUADRO RTX 6000".into(), None));
        assert_eq!(
            n("NVIDIA H100 80GB HBM3 MIG 1g.10gb"),
            ("H100 80GB HBM3".into(), Some("1g.10gb".into()))
        );
        assert_eq!(
            n("NVIDIA H200 MIG 3g.71gb"),
            ("H200".into(), Some("3g.71gb".into()))
        );
        // A name of brand words only keeps its last one rather than becoming empty.
        assert_eq!(n("NVIDIA"), ("NVIDIA".into(), None));
        assert_eq!(n(""), (String::new(), None));
    }
}
