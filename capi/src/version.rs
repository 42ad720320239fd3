//! The ABI version: what an engine checks before it calls anything else.

/// ABI version: bumped on any incompatible change of a function, struct or rule code. 3:
/// `cuvk_last_error_rule` and `CuvkRule`. 4 (cuvk 0.5): rule constants named after cuvk's
/// rules (`CUVK_RULE_PEER_NO_PEER_ACCESS`, ...), the ipc placement rules retired for the
/// `LAYOUT_*` / `IMAGE_*` / `MEMORY_*` ones, `ARGUMENT_*` rules instead of `CUVK_RULE_OTHER`.
pub const CUVK_ABI_VERSION: u32 = 4;

/// The ABI version this library implements ([`CUVK_ABI_VERSION`]).
#[no_mangle]
pub extern "C" fn cuvk_abi_version() -> u32 {
    CUVK_ABI_VERSION
}
