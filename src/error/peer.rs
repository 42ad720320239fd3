//! Refusals of work spread over several GPUs: peer access, and NCCL collectives on shared
//! memory (feature `nccl`).

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows peer_rules, path "Peer.";
    /// A rule of several GPUs broken, or a rank of a collective lost.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum PeerError {
        /// Peer access asked for between two GPUs that have none (`cuDeviceCanAccessPeer` = 0: no
        /// NVLink or PCIe peer path, or GPUs of different kinds).
        #[error(
            "GPU {peer} cannot reach GPU {owner}'s memory (cuDeviceCanAccessPeer = 0: no peer path \
             between them); copy through the host or give each GPU its own buffer"
        )]
        NoPeerAccess {
            /// The GPU that would read or write.
            peer: usize,
            /// The GPU whose memory it is.
            owner: usize,
        } => {
            /// Peer access asked for between GPUs that have no peer path.
            PeerNoAccess = 0x0D01
        },
        /// A shared buffer handed to something on another GPU (another GPU's bridge, order or NCCL
        /// communicator).
        #[error("the buffer lives on GPU {buffer}, but the {user} is on GPU {user_device}")]
        DeviceMismatch {
            /// The buffer's GPU (CUDA ordinal).
            buffer: usize,
            /// What it was handed to.
            user: &'static str,
            /// That user's GPU.
            user_device: usize,
        } => {
            /// A shared buffer handed to something on another GPU.
            PeerDeviceMismatch = 0x0D02
        },
        /// The ranks of a collective hold buffers of different sizes.
        #[error(
            "rank {rank} has a buffer of {len} elements, but the ranks' buffers range from {min} to \
             {max} elements: every rank must pass the same size"
        )]
        SizeMismatch {
            /// This rank.
            rank: usize,
            /// This rank's element count.
            len: u64,
            /// The smallest count of any rank.
            min: u64,
            /// The largest count of any rank.
            max: u64,
        } => {
            /// The ranks of a collective hold buffers of different sizes.
            PeerSizeMismatch = 0x0D03
        },
        /// A collective did not finish in time or NCCL reported a remote failure (a rank died or
        /// hung): the communicator was aborted, its pending work cancelled.
        #[error(
            "rank {rank}: {what} did not complete within {waited_ms} ms ({detail}); the communicator \
             was aborted"
        )]
        RankLost {
            /// This rank.
            rank: usize,
            /// What was waited for.
            what: &'static str,
            /// How long it was waited for.
            waited_ms: u64,
            /// NCCL's asynchronous error, or "timed out".
            detail: String,
        } => {
            /// A rank of a collective lost (died, hung): the communicator was aborted.
            PeerRankLost = 0x0D04
        },
        /// A communicator used after it was aborted.
        #[error("rank {rank}: the communicator was aborted earlier ({reason}); make a new one")]
        Aborted {
            /// This rank.
            rank: usize,
            /// Why it was aborted.
            reason: String,
        } => {
            /// A communicator used after it was aborted.
            PeerAborted = 0x0D05
        },
        /// A rank number outside the communicator.
        #[error("rank {rank} is outside a communicator of {world} ranks")]
        RankOutOfRange {
            /// The rank asked for.
            rank: usize,
            /// The number of ranks.
            world: usize,
        } => {
            /// A rank number outside the communicator.
            PeerRankOutOfRange = 0x0D06
        },
    }
}

impl PeerError {
    /// The [`ErrorKind`](crate::ErrorKind) callers act on.
    pub(crate) fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind as K;
        match self {
            PeerError::NoPeerAccess { .. } => K::Unsupported,
            PeerError::DeviceMismatch { .. } => K::WrongDevice,
            PeerError::SizeMismatch { .. } | PeerError::RankOutOfRange { .. } => K::InvalidInput,
            PeerError::RankLost { .. } => K::Timeout,
            PeerError::Aborted { .. } => K::Driver,
        }
    }
}
