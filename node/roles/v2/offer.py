"""The signed offer of settlement version 2 (docs/economics.md §4) and the provider's checks of it.

The client signs, with its node identity (Ed25519), one statement binding: the protocol
terms (``spec``: version 1's `SignedJobTerms` encoding, whose program, data and config
roots a provider checks against the bundle), the on-chain `JobTerms` (every field;
``terms.spec_hash == keccak(spec)``), the chain id, the contract and the client's account.
The job id is the contract's ``jobIdOf(client, nonce)`` = keccak(chain id, contract,
client, nonce); `SignedOffer.job_id` computes it from the signed fields.

Before `accept`, a provider reads what the chain holds under that id (`ChainView`) and
`check_offer` refuses, with one of `REFUSALS` and a sentence, unless the id the contract
computes is the offer's (another chain, contract or account: a front-runner's job has
another id), the job is open and its stored ``termsHash`` is the signed terms' hash, the
client account's registered key signed the offer, the referee mode is the signed one,
the pay and stake suit the provider and its measured step time is at most σ·s·0.8.

It travels as version 1's `Offer` wire message (op ``offer``) with this statement's
encoding in its ``offer`` field; the bundle id and addresses stay unsigned hints.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_abi.exceptions import DecodingError
from eth_utils import keccak, to_checksum_address

from contracts.settlement_v2 import JobInfo, JobStatus, JobTerms
from contracts.settlement_v2 import _TERMS_TYPE as TERMS_ABI_TYPE
from protocol import RemoteProtocolError, SignedJobTerms
from protocol.economics import accepts_step_cost
from protocol.element_specs import element_spec_root
from protocol.errors import LocalProtocolError
from protocol.identity import DOMAIN_OFFER_V2, Identity, verify_signature
from protocol.wire import decode_struct

from ...errors import BadMessage
from ...framing import pack, unpack

# Signed under its own domain: no offer signature can be replayed as a v1 terms signature.
OFFER_DOMAIN = DOMAIN_OFFER_V2
OFFER_PREFIX = b"gavel/offer/v2\0"
MAX_SPEC = 64 << 10

# why an offer is refused, one code each (tests and logs match on them)
BAD_SIGNATURE = "signature"
BAD_SPEC = "spec"
OTHER_JOB_ID = "job id"
NOT_OPEN = "not open"
OTHER_TERMS = "terms hash"
OTHER_CLIENT = "client"
OTHER_KEY = "client key"
OTHER_REFEREE = "referee mode"
LOW_PRICE = "price"
HIGH_STAKE = "stake"
SLOW_STEP = "step time"
LATE = "accept window"
OTHER_SPECS = "element specs"
REFUSALS = (BAD_SIGNATURE, BAD_SPEC, OTHER_JOB_ID, NOT_OPEN, OTHER_TERMS, OTHER_CLIENT, OTHER_KEY, OTHER_REFEREE,
            LOW_PRICE, HIGH_STAKE, SLOW_STEP, LATE, OTHER_SPECS)


class OfferRefused(Exception):
    """The provider will not take the job; ``reason`` is one of `REFUSALS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def job_id_of(chain_id: int, contract: str, client_account: str, nonce: int) -> bytes:
    """keccak256(abi.encode(chainid, contract, client, nonce)): the contract's ``jobIdOf``."""
    return keccak(abi_encode(["uint256", "address", "address", "uint64"],
                             [chain_id, to_checksum_address(contract), to_checksum_address(client_account), nonce]))


def spec_hash(spec: bytes) -> bytes:
    return keccak(spec)


def terms_abi(terms: JobTerms) -> bytes:
    return abi_encode([TERMS_ABI_TYPE], [terms.as_abi()])


@dataclass(frozen=True)
class SignedOffer:
    spec: bytes  # version 1's SignedJobTerms, encoded
    terms: JobTerms
    chain_id: int
    contract: str
    client_account: str
    signature: bytes

    @staticmethod
    def _statement(spec: bytes, terms: JobTerms, chain_id: int, contract: str, client_account: str) -> bytes:
        return OFFER_PREFIX + abi_encode(["bytes", "bytes", "uint256", "address", "address"], [
            spec, terms_abi(terms), chain_id, to_checksum_address(contract), to_checksum_address(client_account)])

    @classmethod
    def sign(cls, identity: Identity, *, spec: bytes, terms: JobTerms, chain_id: int, contract: str,
             client_account: str) -> "SignedOffer":
        statement = cls._statement(spec, terms, chain_id, contract, client_account)
        return cls(spec, terms, chain_id, to_checksum_address(contract), to_checksum_address(client_account),
                   identity.sign(OFFER_DOMAIN, statement))

    def verify(self) -> bool:
        """The terms' client key signed every field."""
        statement = self._statement(self.spec, self.terms, self.chain_id, self.contract, self.client_account)
        return verify_signature(self.terms.client_key, OFFER_DOMAIN, statement, self.signature)

    @property
    def job_id(self) -> bytes:
        return job_id_of(self.chain_id, self.contract, self.client_account, self.terms.nonce)

    @property
    def signed_spec(self) -> SignedJobTerms:
        """The protocol terms (BadMessage when they do not decode)."""
        try:
            return decode_struct(SignedJobTerms, self.spec)
        except RemoteProtocolError as error:
            raise BadMessage(f"offer: the spec does not decode: {error}") from None

    def encode(self) -> bytes:
        return pack({"spec": self.spec, "terms": terms_abi(self.terms), "chain_id": self.chain_id,
                     "contract": self.contract, "client_account": self.client_account, "sig": self.signature})

    @classmethod
    def decode(cls, data: bytes, peer: object = None) -> "SignedOffer":
        """The offer in ``data``; BadMessage for anything malformed (the signature is `verify`'s)."""
        obj = unpack(data, peer=peer)
        if not isinstance(obj, dict):
            raise BadMessage("offer: not a map", peer=peer)
        spec, raw_terms, sig = obj.get("spec"), obj.get("terms"), obj.get("sig")
        chain_id, contract, account = obj.get("chain_id"), obj.get("contract"), obj.get("client_account")
        if not (isinstance(spec, bytes) and len(spec) <= MAX_SPEC and isinstance(raw_terms, bytes)
                and isinstance(sig, bytes) and type(chain_id) is int and chain_id >= 0
                and isinstance(contract, str) and isinstance(account, str)):
            raise BadMessage("offer: malformed fields", peer=peer)
        try:
            terms = JobTerms.from_abi(tuple(abi_decode([TERMS_ABI_TYPE], raw_terms)[0]))
            contract, account = to_checksum_address(contract), to_checksum_address(account)
        except (DecodingError, ValueError, TypeError, OverflowError) as error:
            raise BadMessage(f"offer: {type(error).__name__} in its terms or addresses", peer=peer) from None
        if terms_abi(terms) != raw_terms:  # one encoding per statement
            raise BadMessage("offer: the terms are not canonically encoded", peer=peer)
        return cls(spec, terms, chain_id, contract, account, sig)


@dataclass(frozen=True)
class ChainView:
    """What a provider read from the chain for an offer, just before deciding."""

    job_id: bytes  # jobIdOf(offer.client_account, offer.terms.nonce), as the contract computes it
    job: JobInfo  # getJob(job_id)
    client_key: bytes  # the Ed25519 key the offer's client account registered
    free_stake: int  # this provider's stake not yet locked
    now: int  # chain time


@dataclass(frozen=True)
class ProviderTerms:
    """What this provider asks: pay per step, the most stake it locks for one seat."""

    price_per_step: int
    max_stake: int | None = None


def check_spec(offer: SignedOffer) -> SignedJobTerms:
    """The protocol terms, checked against the signed on-chain terms (OfferRefused ``spec``)."""
    try:
        signed = offer.signed_spec
    except BadMessage as error:
        raise OfferRefused(BAD_SPEC, str(error)) from None
    t, p = offer.terms, signed.terms
    if spec_hash(offer.spec) != t.spec_hash:
        raise OfferRefused(BAD_SPEC, "the terms' spec hash is not keccak of the spec")
    if not signed.verify() or p.client != t.client_key:
        raise OfferRefused(BAD_SPEC, "the spec is not signed by the offer's client key")
    if (p.initial_state, p.steps, p.checkpoint_every, p.graph_nodes) != (
            t.initial_state, t.steps, t.checkpoint_every, t.graph_nodes):
        raise OfferRefused(BAD_SPEC, "the spec's initial state, steps, checkpoint interval or node count "
                                     "differ from the on-chain terms")
    return signed


def check_signed(offer: SignedOffer) -> SignedJobTerms:
    """What an offer says about itself, before any chain read: its signature, then its spec."""
    if not offer.verify():
        raise OfferRefused(BAD_SIGNATURE, "the offer is not signed by its terms' client key")
    return check_spec(offer)


def check_offer(offer: SignedOffer, view: ChainView, mine: ProviderTerms, measured_step_millis: int) -> None:
    """Refuse (OfferRefused) unless this provider should `accept` the job the offer names (§4)."""
    check_signed(offer)
    t, job = offer.terms, view.job
    if view.job_id != offer.job_id:
        raise OfferRefused(OTHER_JOB_ID, "the contract computes another job id for this client and nonce: the "
                                         "offer names another chain or contract")
    if job.status != JobStatus.OPEN:
        raise OfferRefused(NOT_OPEN, f"the job is {job.status.name} on chain, not OPEN")
    if job.client.lower() != offer.client_account.lower():
        raise OfferRefused(OTHER_CLIENT, "the job on chain was opened by another account")
    if job.terms_hash != t.terms_hash:
        raise OfferRefused(OTHER_TERMS, "the job on chain stores other terms than the signed ones")
    if view.client_key != t.client_key:
        raise OfferRefused(OTHER_KEY, "the client account's registered key did not sign the offer")
    if job.client_referees != t.client_referees:
        raise OfferRefused(OTHER_REFEREE, "the job on chain has another referee mode than the signed one")
    if view.now + 1 >= job.accept_by:
        raise OfferRefused(LATE, "the job's acceptance deadline has passed")
    pay = t.economic_terms().seat_pay
    if pay < mine.price_per_step * t.steps:
        raise OfferRefused(LOW_PRICE, f"a seat pays {pay} wei, below {mine.price_per_step} wei per step")
    if t.provider_stake > view.free_stake or (mine.max_stake is not None and t.provider_stake > mine.max_stake):
        raise OfferRefused(HIGH_STAKE, f"the seat's stake {t.provider_stake} wei is more than this provider locks "
                                       f"(free {view.free_stake})")
    if not accepts_step_cost(measured_step_millis, t.economic_terms()):
        raise OfferRefused(SLOW_STEP, f"a step takes {measured_step_millis} ms here; the terms allow "
                                      f"{t.step_millis} ms (this provider must be within σ·s·0.8)")


def element_specs_of(training: Any) -> bytes:
    """The elementSpecRoot of a job's step graph (`protocol.element_specs`): what the client puts in
    the terms to offer the fourth level, and what a provider checks before it takes a seat."""
    graph = getattr(training, "graph", None)
    if graph is None:  # a rounding-log job: no step graph, no element programs
        raise LocalProtocolError("this job has no step graph: its node claims cannot go on chain")
    return element_spec_root(graph)


def check_element_specs(terms: JobTerms, training: Any) -> None:
    """Refuse (OfferRefused ``element specs``) terms whose elementSpecRoot is neither zero (no fourth
    level) nor the root of the bundle's own step graph, checked against the program root already: a
    duel proves its program, shapes and layouts against that root, so a root of the client's making
    would let a setup of its choosing rule against an honest seat. Tracing the specs may take seconds."""
    if terms.element_spec_root == bytes(32):
        return
    try:
        root = element_specs_of(training)
    except LocalProtocolError as error:
        raise OfferRefused(OTHER_SPECS, str(error)) from None
    if root != terms.element_spec_root:
        raise OfferRefused(OTHER_SPECS, "the terms' elementSpecRoot is not the element specs of the job's step graph")


def read_view_sync(settlement: Any, offer: SignedOffer) -> ChainView:
    """The chain's side of an offer (blocking: run it in the chain's worker thread)."""
    job_id = settlement.job_id_of(offer.client_account, offer.terms.nonce)
    return ChainView(job_id, settlement.job(job_id), settlement.node(offer.client_account).ed25519_key,
                     settlement.node(settlement.account).free_stake, settlement.chain.now())


def chain_id_sync(chain: Any) -> int:
    """``block.chainid`` of ``chain``: an RPC chain's eth_chainId, the embedded EVM's own."""
    if hasattr(chain, "tester"):
        return int(chain.tester.backend.chain.chain_id)
    return int(chain.chain_id)


__all__ = ["ChainView", "OfferRefused", "ProviderTerms", "REFUSALS", "SignedOffer", "check_element_specs", "check_offer",
           "check_signed", "check_spec", "chain_id_sync", "element_specs_of", "job_id_of", "read_view_sync", "spec_hash"]
