//! A refusal's numbers and an error's name, for front ends that report them as data (Python's
//! `numbers` and `rule` attributes): read from the error's derived `Debug` text, so every
//! variant, present and future, is covered with no table to keep.

use crate::error::Error;

impl Error {
    /// The integer fields of the error and of the errors it nests (`offset`, `size`,
    /// `alignment`, ...; an `Option` that holds one counts), by field name, first occurrence
    /// of each name: the numbers a refusal was checked with.
    pub fn numbers(&self) -> Vec<(String, i128)> {
        integer_fields(&format!("{self:?}"))
    }

    /// The refusal's rule name ([`crate::Rule::name`], `"Layout.OutOfBounds"`), or, for an
    /// error that is not a refusal (a driver call that failed), its variant path (`"Vulkan"`,
    /// `"Cuda"`, `"Timeout"`).
    pub fn name(&self) -> String {
        match self.rule() {
            Some(rule) => rule.name().to_owned(),
            None => variant_path(&format!("{self:?}")),
        }
    }
}

/// The enum path at the start of a derived `Debug` text: `Layout(OutOfBounds { .. })` →
/// `Layout.OutOfBounds`. Only variant-like names (an upper-case letter, then a lower-case
/// one) count, so a payload such as `NoQueueFamily(COMPUTE)` stops at the variant.
fn variant_path(debug: &str) -> String {
    let mut parts = Vec::new();
    let mut rest = debug;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        let mut chars = name.chars();
        let variant_like = matches!(
            (chars.next(), chars.next()),
            (Some(a), Some(b)) if a.is_ascii_uppercase() && b.is_ascii_lowercase()
        ) || (name.len() == 1
            && name.starts_with(|c: char| c.is_ascii_uppercase()));
        if !variant_like {
            break;
        }
        parts.push(name);
        match rest[end..].strip_prefix('(') {
            Some(inner) => rest = inner,
            None => break,
        }
    }
    parts.join(".")
}

/// The `name: integer` (or `name: Some(integer)`) fields of a derived `Debug` text, first
/// occurrence of each name.
fn integer_fields(debug: &str) -> Vec<(String, i128)> {
    let mut out: Vec<(String, i128)> = Vec::new();
    let bytes = debug.as_bytes();
    let mut i = 0;
    while let Some(pos) = debug[i..].find(": ") {
        let colon = i + pos;
        let start = debug[..colon]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let name = &debug[start..colon];
        let mut value = &debug[colon + 2..];
        if let Some(inner) = value.strip_prefix("Some(") {
            value = inner;
        }
        let len = value
            .char_indices()
            .take_while(|&(k, c)| c.is_ascii_digit() || (k == 0 && c == '-'))
            .count();
        let next = value.as_bytes().get(len).copied();
        let ends_number = matches!(next, None | Some(b',' | b' ' | b')' | b'}'));
        if !name.is_empty() && len > 0 && ends_number && !out.iter().any(|(n, _)| n == name) {
            if let Ok(v) = value[..len].parse::<i128>() {
                out.push((name.to_owned(), v));
            }
        }
        i = colon + 2;
        if i >= bytes.len() {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::layout::{AlignmentRule, LayoutError};

    #[test]
    fn rule_paths_follow_the_enum_nesting() {
        assert_eq!(
            variant_path("Layout(OutOfBounds { offset: 4096, size: 64, limit: 100 })"),
            "Layout.OutOfBounds"
        );
        assert_eq!(variant_path("NoQueueFamily(COMPUTE)"), "NoQueueFamily");
        assert_eq!(
            variant_path("VulkanLoader(\"no libvulkan\")"),
            "VulkanLoader"
        );
        assert_eq!(
            variant_path("Cuda { call: \"cuInit\", source: DriverError(X) }"),
            "Cuda"
        );
        assert_eq!(variant_path("CudaUnavailable"), "CudaUnavailable");
    }

    #[test]
    fn numbers_are_the_integer_fields() {
        let n = integer_fields("Layout(OutOfBounds { offset: 4096, size: 64, limit: Some(100), name: \"x\", neg: -3 })");
        assert_eq!(
            n,
            vec![
                ("offset".to_owned(), 4096),
                ("size".to_owned(), 64),
                ("limit".to_owned(), 100),
                ("neg".to_owned(), -3)
            ]
        );
        assert!(integer_fields("Cuda { call: \"cuInit: 5\", x: 1.5 }").is_empty());
    }

    #[test]
    fn a_refusal_reports_its_rule_name_and_numbers() {
        let e: Error = LayoutError::Misaligned {
            what: "offset",
            value: 4,
            alignment: 16,
            rule: AlignmentRule::CudaMappedBuffer,
        }
        .into();
        assert_eq!(e.name(), "Layout.Misaligned");
        let n = e.numbers();
        assert!(n.contains(&("value".to_owned(), 4)), "{n:?}");
        assert!(n.contains(&("alignment".to_owned(), 16)), "{n:?}");
        let t = Error::Timeout {
            what: "a test",
            timeout_ns: 5_000_000,
        };
        assert_eq!(t.name(), "Timeout");
        assert_eq!(t.numbers(), vec![("timeout_ns".to_owned(), 5_000_000)]);
    }
}
