//! [`IpcError`] lives beside the crate's other refusals (`src/error/ipc.rs`, its table of
//! rules); this re-export keeps its old path inside `ipc` for the transport's code.

pub use crate::error::IpcError;
