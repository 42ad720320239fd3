//! The pure rules and books, with no GPU: ranges, alignment and granularity ([`layout`]), the
//! image format table and image shapes ([`image_format`]), PTX signatures ([`ptx`]), the
//! pool's range books ([`suballoc`]) and timeline ledgers ([`timeline`]). Crate-private: the
//! items users touch (errors, `AlignmentRule`, the format table, pool stats) are re-exported
//! from the crate root; everything else can change without breaking anyone.

pub(crate) mod composite;
pub(crate) mod fanout;
pub(crate) mod image_format;
pub(crate) mod layout;
pub(crate) mod ptx;
pub(crate) mod suballoc;
pub(crate) mod timeline;
