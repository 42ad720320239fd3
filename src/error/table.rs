//! The refusal tables: every refusal enum is written once, inside [`refusals!`], each variant
//! with its rule beside it. From that one list the macro emits the enum exactly as written
//! (docs, `#[error]` messages, fields), its [`Table`] impl (the rule of each variant, its path
//! in [`Error`](crate::Error), its integer fields), and a macro of the table's rules, which
//! [`super::rule`] gathers from every table into [`Rule`](crate::Rule). A new refusal is one
//! row; nothing else in this crate lists it.
//!
//! A table reads:
//!
//! ```text
//! refusals! {
//!     rows layout_rules, path "Layout.";        // its rules' macro; its path in `Error`
//!     /// A broken range or alignment rule.     // the enum, as it is emitted
//!     #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
//!     pub enum LayoutError {
//!         /// A range of zero bytes was requested.
//!         #[error("zero-size range at offset {offset}")]
//!         ZeroSize {
//!             /// Requested offset.
//!             offset: u64,
//!         } => {
//!             /// A range of zero bytes.          // the `Rule` variant, as it is emitted
//!             LayoutZeroSize = 0x0101
//!         },
//!         /// A driver call failed.
//!         #[error("{call} failed")]
//!         Call { call: &'static str } => _,      // no rule: a call that failed, a timeout
//!         /// A texture rule was broken.
//!         #[error(transparent)]
//!         Texture(TextureRule) => ..,            // the rules of the enum it wraps
//!     }
//! }
//! ```
//!
//! Every variant says which of the three it is (leaving it out does not parse), so a new
//! variant cannot silently lack a rule. The rule's name is the variant's path: the table's
//! `path` and the variant's name (`"Layout." + "ZeroSize"`), so a name cannot drift from its
//! refusal. A leading `#![cfg(...)]` (on the table or on a variant) is applied to the enum or
//! variant and to the code matching it, but not to the rules: [`Rule`](crate::Rule) is the same
//! with every feature. A tuple variant has one field (a wrapped enum or a payload).

use crate::error::numbers::Numbers;
use crate::error::Rule;

/// What a refusal table gives [`Error`](crate::Error): emitted by [`refusals!`] for each enum,
/// never written by hand.
pub(crate) trait Table {
    /// The rule the value broke, or `None` where none was (a call that failed, a timeout).
    fn rule(&self) -> Option<Rule>;
    /// The variant's path in [`Error`](crate::Error) (`"Layout.OutOfBounds"`, `"Vulkan"`):
    /// its rule's name where it has one.
    fn path(&self) -> &'static str;
    /// Adds the variant's integer fields, and those of what it nests, to `out`.
    fn numbers(&self, out: &mut Numbers);
}

/// A refusal enum and its rules, from one table (see the module documentation).
macro_rules! refusals {
    // The rule of a variant: its own, none, or the wrapped enum's.
    (@rule $self:ident, $variant:ident, { $(#[$doc:meta])* $rule:ident = $code:literal }) => {
        Some($crate::error::Rule::$rule)
    };
    (@rule $self:ident, $variant:ident, _) => {
        None
    };
    (@rule $self:ident, $variant:ident, ..) => {
        if let Self::$variant(inner) = $self {
            $crate::error::table::Table::rule(inner)
        } else {
            None
        }
    };

    // The path of a variant: the wrapped enum's, or the table's path and the variant's name.
    (@path $self:ident, $prefix:literal, $variant:ident, ..) => {
        if let Self::$variant(inner) = $self {
            $crate::error::table::Table::path(inner)
        } else {
            concat!($prefix, stringify!($variant))
        }
    };
    (@path $self:ident, $prefix:literal, $variant:ident, $kind:tt) => {
        concat!($prefix, stringify!($variant))
    };

    // The numbers of a wrapped enum (a variant's own fields are added where it is matched).
    (@nested $self:ident, $out:ident, $variant:ident, ..) => {
        if let Self::$variant(inner) = $self {
            $crate::error::table::Table::numbers(inner, $out);
        }
    };
    (@nested $self:ident, $out:ident, $variant:ident, $kind:tt) => {};

    // The table's rules macro: the rows that are rules, kept one at a time (a table has a few
    // dozen rows, well inside the recursion limit), then emitted as a macro that hands them,
    // with the table's path, to the macro `Rule` is gathered by. `$d` is a `$`, which the
    // emitted macro's own matchers need.
    (@rows ($d:tt) $rows:ident $prefix:literal [$($acc:tt)*]) => {
        /// This table's rules, handed to the callback after the tables gathered so far (see
        /// `error::rule`).
        macro_rules! $rows {
            ($d($d cb:ident)::+ [$d($d rest:tt)*] $d($d tables:tt)*) => {
                $d($d cb)::+! { [$d($d rest)*] $d($d tables)* { $prefix $($acc)* } }
            };
        }
        pub(crate) use $rows;
    };
    (@rows ($d:tt) $rows:ident $prefix:literal [$($acc:tt)*]
        $variant:ident { $($rule:tt)* } $($rest:tt)*) => {
        $crate::error::table::refusals! {
            @rows ($d) $rows $prefix [$($acc)* $variant { $($rule)* }] $($rest)*
        }
    };
    (@rows ($d:tt) $rows:ident $prefix:literal [$($acc:tt)*]
        $variant:ident $other:tt $($rest:tt)*) => {
        $crate::error::table::refusals! { @rows ($d) $rows $prefix [$($acc)*] $($rest)* }
    };

    // A table.
    (
        $(#![cfg($cfg:meta)])?
        rows $rows:ident, path $prefix:literal;
        $(#[$attr:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#![cfg($vcfg:meta)])?
                $(#[$vattr:meta])*
                $variant:ident
                $( { $( $(#[$fattr:meta])* $field:ident : $fty:ty ),* $(,)? } )?
                $( ( $(#[$tattr:meta])* $tty:ty ) )?
                => $kind:tt
            ),* $(,)?
        }
    ) => {
        $(#[cfg($cfg)])?
        $(#[$attr])*
        $vis enum $name {
            $(
                $(#[cfg($vcfg)])?
                $(#[$vattr])*
                $variant
                $( { $( $(#[$fattr])* $field : $fty ),* } )?
                $( ( $(#[$tattr])* $tty ) )?
            ),*
        }

        $(#[cfg($cfg)])?
        impl $crate::error::table::Table for $name {
            fn rule(&self) -> Option<$crate::error::Rule> {
                match self {
                    $(
                        $(#[cfg($vcfg)])?
                        Self::$variant { .. } => {
                            $crate::error::table::refusals!(@rule self, $variant, $kind)
                        }
                    )*
                }
            }

            fn path(&self) -> &'static str {
                match self {
                    $(
                        $(#[cfg($vcfg)])?
                        Self::$variant { .. } => {
                            $crate::error::table::refusals!(@path self, $prefix, $variant, $kind)
                        }
                    )*
                }
            }

            // A table of unit variants (`TextureRule`) has no field to add to `out`.
            #[allow(unused_variables)]
            fn numbers(&self, out: &mut $crate::error::numbers::Numbers) {
                match self {
                    $(
                        $(#[cfg($vcfg)])?
                        Self::$variant { $($($field,)*)? .. } => {
                            $($( out.field(stringify!($field), $field); )*)?
                            $crate::error::table::refusals!(@nested self, out, $variant, $kind);
                        }
                    )*
                }
            }
        }

        $crate::error::table::refusals! { @rows ($) $rows $prefix [] $( $variant $kind )* }
    };
}
pub(crate) use refusals;
