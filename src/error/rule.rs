//! [`Rule`]: which rule a refusal broke, as data — a stable code and a name per rule, gathered
//! from the refusal tables ([`super::table`]: each rule is written once, in its refusal's row),
//! and used by every front end (the C ABI's `cuvk_last_error_rule`, Python's `rule`, Bevy's
//! `CuvkStatus`) instead of rebuilding it.
//!
//! Codes are grouped by the byte above the lowest (`code >> 8`): 1 ranges and alignment, 2
//! images, 3 textures, 4 PTX, 5 memory and buffers, 6 semaphores and frames, 7 kernel
//! launches, 8 what the device or driver lacks, 9 devices and what they enabled, 10 OS
//! handles, 11 wgpu, 12 processes (`ipc`), 13 several GPUs, 14 raw arguments only a
//! foreign-language front end (the C ABI) can get wrong. A code is never reused; a new rule
//! takes the next number of its group.
//! Names are the refusal's path in [`Error`] (`"Layout.OutOfBounds"`,
//! `"Image.Texture.LinearFilterNeedsFloatReads"`, `"WrongDevice"`), as Python has reported
//! them since 0.3. The C ABI's constant follows from the group and the name: `CUVK_RULE_`, the
//! group's word (Layout, Image, Texture, Ptx, Memory, Sync, Launch, Unsupported, Device,
//! OsHandle, Wgpu, Ipc, Peer, Argument), `_`, and the name's last part, in
//! SCREAMING_SNAKE_CASE, with words the two repeat where they meet written once
//! (`"Peer.NoPeerAccess"` → `CUVK_RULE_PEER_NO_PEER_ACCESS`, `"DeviceMismatch"` →
//! `CUVK_RULE_DEVICE_MISMATCH`); the C ABI's tests hold every rule to it.
//!
//! What holds by construction: every `Rule` is a row of a table, and every row a `Rule` (a row
//! of a table left out of the list below names a `Rule` variant that does not exist, which
//! does not compile); no two rules share a code (duplicate discriminants do not compile) or a
//! variant. That no two share a name is the tests' to check (two tables could be given the
//! same path).

use crate::error::table::Table;
use crate::error::Error;

/// Collects the tables' rules one table at a time (each table's rules macro hands its rows
/// back here, after those gathered so far), then defines [`Rule`] from them all.
macro_rules! gather {
    ([] $($tables:tt)*) => {
        define_rule! { $($tables)* }
    };
    ([$($next:ident)::+ $(, $($rest:ident)::+)*] $($tables:tt)*) => {
        $($next)::+! { crate::error::rule::gather [$($($rest)::+),*] $($tables)* }
    };
}
pub(crate) use gather;

/// [`Rule`], [`Rule::ALL`] and [`Rule::name`] from every table's rows: `{ path variant
/// { rule } ... }`, the name being the table's path and the refusal's variant.
macro_rules! define_rule {
    ($({
        $prefix:literal
        $( $variant:ident { $(#[$doc:meta])* $rule:ident = $code:literal } )*
    })*) => {
        /// A rule a refusal broke: matched by callers, reported by the C ABI as its code and by
        /// Python as its name (see the module documentation for the groups).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        #[repr(u32)]
        pub enum Rule {
            $($( $(#[$doc])* $rule = $code, )*)*
        }

        impl Rule {
            /// Every rule, in code order.
            pub const ALL: &'static [Rule] = &in_code_order([$($(Rule::$rule,)*)*]);

            /// The refusal's path in [`Error`], e.g. `"Layout.OutOfBounds"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $($( Rule::$rule => concat!($prefix, stringify!($variant)), )*)*
                }
            }
        }
    };
}

// Every table, in any order (`ALL` is sorted by code): its rules macro, named in its
// `refusals!` header.
gather! {[
    crate::rules::layout::layout_rules,
    crate::rules::image_format::image_rules,
    crate::rules::image_format::texture_rules,
    crate::rules::ptx::ptx_rules,
    crate::error::refusal::memory_rules,
    crate::error::refusal::sync_rules,
    crate::error::refusal::launch_rules,
    crate::error::refusal::capability_rules,
    crate::error::error_rules,
    crate::error::wgpu::wgpu_rules,
    crate::error::ipc::ipc_rules,
    crate::error::peer::peer_rules
]}

/// `rules` sorted by code, at compile time (the tables list their rules in their enums'
/// order, which is not always the codes').
const fn in_code_order<const N: usize>(mut rules: [Rule; N]) -> [Rule; N] {
    let mut i = 1;
    while i < N {
        let mut j = i;
        while j > 0 && rules[j - 1].code() > rules[j].code() {
            let earlier = rules[j - 1];
            rules[j - 1] = rules[j];
            rules[j] = earlier;
            j -= 1;
        }
        i += 1;
    }
    rules
}

impl Rule {
    /// The stable code (the C ABI's `CuvkRule`).
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The rule with `code`, if there is one.
    pub fn from_code(code: u32) -> Option<Rule> {
        Self::ALL.iter().copied().find(|r| r.code() == code)
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// The rule this error says was broken, or `None` where no rule was: a driver, compiler or
    /// OS call that failed, a timeout, memory that ran out.
    pub fn rule(&self) -> Option<Rule> {
        Table::rule(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rules::image_format::{ImageError, TextureRule};
    use crate::rules::layout::LayoutError;
    use std::collections::HashSet;

    #[test]
    fn every_rule_has_a_distinct_code_and_name_and_round_trips() {
        let codes: HashSet<u32> = Rule::ALL.iter().map(|r| r.code()).collect();
        let names: HashSet<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(codes.len(), Rule::ALL.len());
        assert_eq!(names.len(), Rule::ALL.len());
        for &r in Rule::ALL {
            assert_eq!(Rule::from_code(r.code()), Some(r));
            assert!(r.code() >> 8 >= 1 && r.code() >> 8 <= 14, "{r:?}");
        }
        assert_eq!(Rule::from_code(0), None);
    }

    /// `ALL` is in code order (sorted at compile time), which is also `Rule`'s order; and every
    /// name is a path of `Error` (the table's path, then the variant), each part a name.
    #[test]
    fn all_is_in_code_order_and_names_are_paths() {
        assert!(Rule::ALL.windows(2).all(|w| w[0].code() < w[1].code()));
        assert!(Rule::ALL.windows(2).all(|w| w[0] < w[1]));
        for r in Rule::ALL {
            let name = r.name();
            assert!(
                name.split('.').all(|part| part
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
                    && part.chars().all(|c| c.is_ascii_alphanumeric())),
                "{name}"
            );
            assert_eq!(r.to_string(), name);
        }
    }

    #[test]
    fn refusals_report_their_rule_and_calls_report_none() {
        let e = Error::Layout(LayoutError::BadAlignment { alignment: 3 });
        assert_eq!(e.rule(), Some(Rule::LayoutBadAlignment));
        assert_eq!(e.rule().unwrap().name(), "Layout.BadAlignment");
        let e = Error::Image(ImageError::Texture(
            TextureRule::LinearFilterNeedsFloatReads,
        ));
        assert_eq!(
            e.rule().unwrap().name(),
            "Image.Texture.LinearFilterNeedsFloatReads"
        );
        let e = Error::Timeout {
            what: "x",
            timeout_ns: 1,
        };
        assert_eq!(e.rule(), None);
    }

    /// The raw arguments a foreign-language front end checks: each its own rule, its message
    /// naming the value, its numbers as data.
    #[test]
    fn argument_refusals_name_their_rule_and_value() {
        let cases = [
            (
                Error::UnknownImageFlags {
                    flags: 0x83,
                    known: 0x3,
                },
                Rule::ArgumentUnknownImageFlags,
                "unknown bits 0x80",
                ("flags", 0x83),
            ),
            (
                Error::UnknownAddressMode { mode: 7 },
                Rule::ArgumentUnknownAddressMode,
                "address mode 7",
                ("mode", 7),
            ),
            (
                Error::UnknownFilterMode { mode: 9 },
                Rule::ArgumentUnknownFilterMode,
                "filter mode 9",
                ("mode", 9),
            ),
            (
                Error::NotUtf8 {
                    what: "frame server name",
                    position: 2,
                    byte: 0xff,
                },
                Rule::ArgumentNotUtf8,
                "byte 0xff at 2",
                ("position", 2),
            ),
            (
                Error::BufferNotShared {
                    buffer: 0x10,
                    needed_for: "a frame server",
                },
                Rule::ArgumentBufferNotShared,
                "buffer 0x10",
                ("buffer", 16),
            ),
            (
                Error::NotBoolean {
                    what: "every_frame",
                    value: 7,
                },
                Rule::ArgumentNotBoolean,
                "0 or 1, not 7",
                ("value", 7),
            ),
        ];
        for (e, rule, text, (field, value)) in cases {
            assert_eq!(e.rule(), Some(rule));
            assert_eq!(e.name(), rule.name());
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(text), "{e}");
            assert!(
                e.numbers().contains(&(field.to_owned(), value)),
                "{:?}",
                e.numbers()
            );
        }
    }
}
