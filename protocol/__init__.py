"""Pure protocol logic: identities, wire messages, Merkle commitments, the dispute game. No I/O.

Everything a node needs is re-exported here; the modules are small and private in
spirit. None touches the file system (a node's key file is `node.keyfile`).
"""
from .actions import Action, GameOver, Outbox, Received, Send
from .claims import (
    CLAIM_TRANSITIONS, Appeal, Claim, ClaimGame, DrawReferee, Endorse, Join, Pick, PostEvidence, PostList,
    RecomputeQueue, Rule, Timeout, claim_id, game_id,
)
from .commitments import (
    ROOT_KINDS, CommitmentStore, EquivocationProof, SignedRoot, commit_trace, equivocation_proof, hash_tree,
    state_leaf, state_names, state_root, state_tree,
)
from .envelope import (
    MAX_MESSAGE_SIZE, MAX_TENSOR_MESSAGE_SIZE, MESSAGE_TYPES, NEVER, Envelope, Message, ReplayGuard,
    decode_envelope,
)
from .economics import (
    ESTIMATED_GAS, Allowances, Bonds, ChainSettings, EconomicTerms, GasFigures, JobDeadlines, allowances, bonds,
    check_open, client_samples, job_deadlines, job_min_stake, min_stake,
)
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .game_state import CHALLENGER, DEFENDER, REFEREE, TRANSITIONS, ChessClock, GameState
from .identity import (
    DOMAIN_ENVELOPE, DOMAIN_JOB_TERMS, DOMAIN_SIGNED_ROOT, Identity, short_id, signing_input, verify_signature,
)
from .jobs import CheckpointSchedule, DisputeRules, JobTerms, SignedJobTerms, job_id
from .listtree import ListProof, ListTree, list_root
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
from .statements import (
    NODES, STATEMENT_KINDS, STEPS, TRACE, Equivocation, SeatStatement, SignedStatement, StatementDomain,
    VerdictStatement, contradicts, find_equivocation, recover_signer, sign_statement,
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
    # economics (docs/economics.md): allowances, deadlines, bonds, stake
    "ChainSettings", "GasFigures", "ESTIMATED_GAS", "EconomicTerms", "Allowances", "Bonds", "JobDeadlines",
    "allowances", "bonds", "check_open", "client_samples", "job_deadlines", "job_min_stake", "min_stake",
    # keccak list commitments (the contract's LibList)
    "ListTree", "ListProof", "list_root",
    # EIP-712 statements signed by account keys
    "StatementDomain", "SeatStatement", "VerdictStatement", "SignedStatement", "Equivocation", "STATEMENT_KINDS",
    "TRACE", "STEPS", "NODES", "sign_statement", "recover_signer", "find_equivocation", "contradicts",
    # the claim game over commitments (docs/economics.md, section 8)
    "ClaimGame", "Claim", "CLAIM_TRANSITIONS", "RecomputeQueue", "game_id", "claim_id",
    "Join", "PostList", "Endorse", "Pick", "PostEvidence", "DrawReferee", "Rule", "Appeal", "Timeout",
]
