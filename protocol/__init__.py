"""Pure protocol logic: identities, wire messages, Merkle commitments, the dispute game. No I/O.

Everything a node needs is re-exported here; the modules are small and private in
spirit. None touches the file system (a node's key file is `node.keyfile`).

Settlement v2's modules (`economics`, `listtree`, `statements`, `claims`; docs/economics.md)
are imported by their own path: they load the eth libraries (about 0.6 s), which no
command of today's node needs.
"""
from .actions import Action, GameOver, Outbox, Received, Send
from .commitments import (
    ROOT_KINDS, CommitmentStore, EquivocationProof, SignedRoot, commit_trace, equivocation_proof, hash_tree,
    state_leaf, state_names, state_root, state_tree,
)
from .envelope import (
    MAX_MESSAGE_SIZE, MAX_TENSOR_MESSAGE_SIZE, MESSAGE_TYPES, NEVER, Envelope, Message, ReplayGuard,
    decode_envelope,
)
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .game_state import CHALLENGER, DEFENDER, REFEREE, TRANSITIONS, ChessClock, GameState
from .identity import (
    DOMAIN_ENVELOPE, DOMAIN_JOB_TERMS, DOMAIN_SIGNED_ROOT, Identity, short_id, signing_input, verify_signature,
)
from .jobs import CheckpointSchedule, DisputeRules, JobTerms, SignedJobTerms, job_id
from .merkle import ChildrenProof, Descent, InclusionProof, MerkleTree, leftmost_difference
from .messages import (
    CONTRADICTION, EQUIVOCATION, FAULT_REASONS, INVALID_MOVE, TIMEOUT, UNCOMPUTABLE, WRONG_RESULT, Commitment,
    EvidenceRequest, Fault, InputEvidence, IntervalCommit, IntervalRequest, JobOffer, NodeEvidence, OpenDispute,
    RevealChildren, RevealRequest, StepCommit, StepRequest, TensorPayload, Verdict, dispute_id_of,
)
from .oracle import BatchOracle, TraceOracle
from .party import DisputeParty
from .program import NodeSpec, Program, StateOutputs, decode_program_leaf, encode_program_leaf
from .referee import Referee, Transcript, max_rounds
from .sampling import (
    catch_probability, catch_probability_across_auditors, catch_probability_across_jobs, miss_probability,
    min_samples,
)

__all__ = [
    # errors
    "ProtocolError", "LocalProtocolError", "RemoteProtocolError",
    # identities
    "Identity", "verify_signature", "signing_input", "short_id",
    "DOMAIN_ENVELOPE", "DOMAIN_SIGNED_ROOT", "DOMAIN_JOB_TERMS",
    # envelopes and messages
    "Envelope", "Message", "MESSAGE_TYPES", "decode_envelope", "ReplayGuard", "NEVER",
    "MAX_MESSAGE_SIZE", "MAX_TENSOR_MESSAGE_SIZE",
    "JobOffer", "Commitment", "OpenDispute", "RevealRequest", "RevealChildren", "IntervalRequest",
    "IntervalCommit", "StepRequest", "StepCommit", "EvidenceRequest", "NodeEvidence", "InputEvidence",
    "TensorPayload", "Verdict", "Fault", "dispute_id_of",
    "FAULT_REASONS", "TIMEOUT", "INVALID_MOVE", "CONTRADICTION", "EQUIVOCATION", "WRONG_RESULT", "UNCOMPUTABLE",
    # Merkle trees
    "MerkleTree", "InclusionProof", "ChildrenProof", "Descent", "leftmost_difference",
    # commitments and jobs
    "SignedRoot", "EquivocationProof", "equivocation_proof", "CommitmentStore", "ROOT_KINDS", "commit_trace",
    "hash_tree", "state_leaf", "state_names", "state_root", "state_tree",
    "JobTerms", "SignedJobTerms", "DisputeRules", "job_id", "CheckpointSchedule",
    "NodeSpec", "StateOutputs", "Program", "encode_program_leaf", "decode_program_leaf",
    # the dispute game
    "TraceOracle", "BatchOracle", "DisputeParty", "Referee", "Transcript", "max_rounds",
    "GameState", "ChessClock", "TRANSITIONS", "CHALLENGER", "DEFENDER", "REFEREE",
    "Send", "GameOver", "Received", "Action", "Outbox",
    # audit sampling
    "catch_probability", "miss_probability", "catch_probability_across_auditors",
    "catch_probability_across_jobs", "min_samples",
]
