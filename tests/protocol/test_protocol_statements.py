"""EIP-712 statements: signed and recovered to the signer, forgeries rejected, equivocation found."""
from __future__ import annotations

import pytest
from eth_account import Account
from eth_utils import keccak

from protocol.statements import (
    NODES, STEPS, TRACE, SeatStatement, SignedStatement, StatementDomain, VerdictStatement, contradicts,
    find_equivocation, recover_signer, sign_statement,
)
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.statements import digest, typed_data

SEAT_KEY = keccak(b"seat key")
OTHER_KEY = keccak(b"other key")
SEAT = Account.from_key(SEAT_KEY).address
OTHER = Account.from_key(OTHER_KEY).address
DOMAIN = StatementDomain(chain_id=1337, contract="0x" + "ab" * 20)
JOB = keccak(b"job")


def statement(kind=STEPS, index=3, value=b"\x01" * 32, seat=SEAT, job=JOB) -> SeatStatement:
    return SeatStatement(job, seat, kind, index, value)


def test_a_statement_recovers_to_its_seat():
    signed = sign_statement(statement(), SEAT_KEY, DOMAIN)
    assert signed.signer(DOMAIN) == SEAT and signed.verify(DOMAIN)
    assert recover_signer(signed.statement, signed.signature, DOMAIN) == SEAT
    assert signed.signature[64] in (27, 28)


def test_the_digest_is_eip712_of_the_documented_types():
    # hashStruct by hand: keccak(typeHash ‖ abi.encode(fields)), the domain separator likewise
    s = statement(kind=NODES, index=77)
    type_hash = keccak(b"SeatStatement(bytes32 jobId,address seat,uint8 kind,uint64 index,bytes32 value)")
    word = lambda n: n.to_bytes(32, "big")  # noqa: E731
    struct_hash = keccak(type_hash + s.job_id + bytes(12) + bytes.fromhex(SEAT[2:]) + word(2) + word(77) + s.value)
    domain_hash = keccak(keccak(b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)")
                         + keccak(b"gavel") + keccak(b"2") + word(1337) + bytes(12) + b"\xab" * 20)
    assert digest(s, DOMAIN) == keccak(b"\x19\x01" + domain_hash + struct_hash)
    verdict_type = keccak(b"Verdict(bytes32 claimId,bool defenderRight,bytes32 outputHash)")
    v = VerdictStatement(keccak(b"claim"), True, keccak(b"out"))
    assert digest(v, DOMAIN) == keccak(b"\x19\x01" + domain_hash + keccak(verdict_type + v.claim_id + word(1) + v.output_hash))


def test_forged_statements_are_rejected():
    signed = sign_statement(statement(), SEAT_KEY, DOMAIN)
    by_other = SignedStatement(statement(), sign_statement(statement(seat=OTHER), OTHER_KEY, DOMAIN).signature)
    assert not by_other.verify(DOMAIN) and by_other.signer(DOMAIN) != SEAT
    moved = SignedStatement(statement(value=b"\x02" * 32), signed.signature)  # the signature of another value
    assert not moved.verify(DOMAIN)
    other_chain = StatementDomain(chain_id=1, contract=DOMAIN.contract)
    assert not signed.verify(other_chain)  # a statement for one contract proves nothing at another
    flipped = bytearray(signed.signature)
    flipped[10] ^= 1
    assert not SignedStatement(signed.statement, bytes(flipped)).verify(DOMAIN)
    bad_v = signed.signature[:64] + b"\x05"
    with pytest.raises(RemoteProtocolError):
        recover_signer(signed.statement, bad_v, DOMAIN)
    assert not SignedStatement(signed.statement, bad_v).verify(DOMAIN)
    with pytest.raises(RemoteProtocolError):
        recover_signer(signed.statement, bytes(64) + b"\x1b", DOMAIN)  # r = s = 0 recovers to nobody
    with pytest.raises(LocalProtocolError, match="not the account"):
        sign_statement(statement(), OTHER_KEY, DOMAIN)


def test_a_verdict_recovers_to_its_referee():
    verdict = VerdictStatement(keccak(b"claim"), False, keccak(b"output"))
    signed = sign_statement(verdict, OTHER_KEY, DOMAIN)
    assert signed.signer(DOMAIN) == OTHER and signed.is_by(OTHER, DOMAIN) and not signed.is_by(SEAT, DOMAIN)
    with pytest.raises(LocalProtocolError):
        signed.verify(DOMAIN)


def test_an_equivocation_is_found_and_consistent_statements_are_not_flagged():
    a = sign_statement(statement(value=b"\x01" * 32), SEAT_KEY, DOMAIN)
    b = sign_statement(statement(value=b"\x02" * 32), SEAT_KEY, DOMAIN)
    proof = find_equivocation(a, b, DOMAIN)
    assert proof is not None and proof.culprit == SEAT and (proof.first, proof.second) == (a, b)
    assert find_equivocation(a, sign_statement(statement(value=b"\x01" * 32), SEAT_KEY, DOMAIN), DOMAIN) is None
    assert find_equivocation(a, sign_statement(statement(index=4, value=b"\x02" * 32), SEAT_KEY, DOMAIN), DOMAIN) is None
    assert find_equivocation(a, sign_statement(statement(kind=NODES, value=b"\x02" * 32), SEAT_KEY, DOMAIN),
                             DOMAIN) is None
    other_job = sign_statement(statement(job=keccak(b"job 2"), value=b"\x02" * 32), SEAT_KEY, DOMAIN)
    assert find_equivocation(a, other_job, DOMAIN) is None
    # two seats may state different lists for one slot of theirs: no equivocation
    assert find_equivocation(a, sign_statement(statement(seat=OTHER, value=b"\x02" * 32), OTHER_KEY, DOMAIN),
                             DOMAIN) is None
    # a forged second statement proves nothing against the seat
    forged = SignedStatement(statement(value=b"\x02" * 32), sign_statement(
        statement(seat=OTHER, value=b"\x02" * 32), OTHER_KEY, DOMAIN).signature)
    assert find_equivocation(a, forged, DOMAIN) is None


def test_two_rulings_of_one_claim_by_one_referee_equivocate():
    claim = keccak(b"claim")
    yes = sign_statement(VerdictStatement(claim, True, keccak(b"o")), OTHER_KEY, DOMAIN)
    no = sign_statement(VerdictStatement(claim, False, keccak(b"o")), OTHER_KEY, DOMAIN)
    assert find_equivocation(yes, no, DOMAIN).culprit == OTHER
    assert find_equivocation(yes, sign_statement(VerdictStatement(claim, False, keccak(b"o")), SEAT_KEY, DOMAIN),
                             DOMAIN) is None  # two referees disagreeing is an appeal, not an equivocation
    assert find_equivocation(yes, sign_statement(VerdictStatement(keccak(b"c2"), False, keccak(b"o")), OTHER_KEY,
                                                 DOMAIN), DOMAIN) is None


def test_a_statement_contradicting_the_chain():
    root = keccak(b"revealed root")
    honest = sign_statement(statement(kind=TRACE, index=0, value=root), SEAT_KEY, DOMAIN)
    lying = sign_statement(statement(kind=TRACE, index=0, value=keccak(b"other root")), SEAT_KEY, DOMAIN)
    assert not contradicts(honest, root, DOMAIN) and contradicts(lying, root, DOMAIN)
    forged = SignedStatement(lying.statement, honest.signature)
    assert not contradicts(forged, root, DOMAIN)


@pytest.mark.parametrize("changes", [
    {"kind": 3}, {"kind": TRACE, "index": 1}, {"index": -1}, {"index": 1 << 64}, {"value": b"\x01" * 31},
    {"seat": "0x1234"}, {"job": "not bytes"},
])
def test_statements_validate_themselves(changes):
    with pytest.raises(LocalProtocolError):
        statement(**changes)


def test_addresses_are_checksummed_and_domains_validated():
    assert statement(seat=SEAT.lower()).seat == SEAT
    assert typed_data(statement(), DOMAIN)["domain"]["verifyingContract"] == DOMAIN.contract
    with pytest.raises(LocalProtocolError):
        StatementDomain(chain_id=0, contract=DOMAIN.contract)
    with pytest.raises(LocalProtocolError):
        VerdictStatement(keccak(b"c"), 1, keccak(b"o"))
    with pytest.raises(LocalProtocolError):
        SignedStatement(statement(), b"\x00" * 64)
