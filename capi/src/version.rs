//! The ABI version: what an engine checks before it calls anything else.

/// ABI version: bumped on any incompatible change of a function or struct. 3:
/// `cuvk_last_error_rule` and `CuvkRule`.
pub const CUVK_ABI_VERSION: u32 = 3;

/// The ABI version this library implements ([`CUVK_ABI_VERSION`]).
#[no_mangle]
pub extern "C" fn cuvk_abi_version() -> u32 {
    CUVK_ABI_VERSION
}
