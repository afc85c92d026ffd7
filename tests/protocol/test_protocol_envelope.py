"""Signed envelopes, the replay guard, and a decoding fuzz: only RemoteProtocolError ever escapes."""
from __future__ import annotations

import random

import msgpack
import pytest

from protocol import (
    MAX_MESSAGE_SIZE, MESSAGE_TYPES, Commitment, Envelope, Identity, JobOffer, LocalProtocolError, ReplayGuard,
    RemoteProtocolError, RevealRequest, commit_trace, decode_envelope,
)
from protocol.envelope import MAX_TENSOR_MESSAGE_SIZE
from protocol.wire import packb
from .protocol_world import (
    ALICE, BOB, CLIENT, Tamper, World, chain_program, make_game, make_terms, play,
)

PROGRAM = chain_program(4)
TERMS = make_terms(PROGRAM, 6, 2)
JOB = TERMS.job_id


def request(seq: int = 1, deadline: int = 5000, job: bytes = JOB, identity: Identity = CLIENT) -> Envelope:
    return Envelope.seal(RevealRequest(bytes(32), 1, 0, 4), identity=identity, job_id=job, seq=seq, deadline=deadline)


def corpus() -> list[bytes]:
    """One valid envelope of every message type, from a played dispute and two announcements."""
    honest = World(PROGRAM, 6, 2)
    cheat = World(PROGRAM, 6, 2, tamper=Tamper("node", 3, 5))
    game = make_game(PROGRAM, 6, 2, challenger_world=honest, defender_world=cheat)
    outcome = play(game)
    seen = {env.type: env.encode() for _, _, env in outcome.log}
    seen["job-offer"] = Envelope.seal(JobOffer(game.terms), identity=CLIENT, job_id=game.terms.job_id, seq=1,
                                      deadline=9).encode()
    root = commit_trace(BOB, job_id=game.terms.job_id, role="provider", checkpoint_states=cheat.checkpoint_states())
    seen["commitment"] = Envelope.seal(Commitment(root), identity=BOB, job_id=game.terms.job_id, seq=1,
                                       deadline=9).encode()
    return [seen[tag] for tag in sorted(seen)]


CORPUS = corpus()


def test_corpus_covers_every_message_type():
    assert sorted(decode_envelope(d, max_size=MAX_TENSOR_MESSAGE_SIZE).type for d in CORPUS) == \
        sorted(tag for tag, _ in MESSAGE_TYPES)


def test_round_trip_is_exact_and_deterministic():
    for data in CORPUS:
        env = decode_envelope(data, max_size=MAX_TENSOR_MESSAGE_SIZE)
        assert env.encode() == data
        again = Envelope.seal(env.body, identity={CLIENT.node_id: CLIENT, ALICE.node_id: ALICE,
                                                  BOB.node_id: BOB}[env.sender],
                              job_id=env.job_id, seq=env.seq, deadline=env.deadline)
        assert again == env and again.encode() == data  # Ed25519 signatures are deterministic


def test_signature_binds_every_field():
    env = request()
    raw = msgpack.unpackb(env.encode())
    for key, value in (("job", bytes(32)), ("from", ALICE.node_id), ("seq", 2), ("deadline", 5001),
                       ("sig", bytes(64)), ("body", {**raw["body"], "hi": 5})):
        forged = dict(raw, **{key: value})
        with pytest.raises(RemoteProtocolError):
            decode_envelope(packb(forged))


def test_unknown_types_versions_and_keys_are_refused():
    raw = msgpack.unpackb(request().encode())
    for forged in (dict(raw, type="nope"), dict(raw, v=2), {k: raw[k] for k in list(raw)[:-1]},
                   dict(raw, extra=1), dict(reversed(list(raw.items())))):
        with pytest.raises(RemoteProtocolError):
            decode_envelope(packb(forged))


def test_size_limits_per_type():
    evidence = next(d for d in CORPUS if decode_envelope(d, max_size=MAX_TENSOR_MESSAGE_SIZE).type == "node-evidence")
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        decode_envelope(evidence, max_size=len(evidence) - 1)
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        decode_envelope(b"\x00" * (MAX_MESSAGE_SIZE + 1))


def test_body_must_fit_its_envelope():
    other = Identity(bytes([7]) * 32)
    offer = JobOffer(TERMS)
    with pytest.raises(RemoteProtocolError, match="client"):
        decode_envelope(Envelope.seal(offer, identity=other, job_id=JOB, seq=1, deadline=9).encode())
    with pytest.raises(RemoteProtocolError, match="hash of the offered terms"):
        decode_envelope(Envelope.seal(offer, identity=CLIENT, job_id=bytes(32), seq=1, deadline=9).encode())
    root = commit_trace(BOB, job_id=JOB, role="provider", checkpoint_states=[bytes(32)] * 4)
    with pytest.raises(RemoteProtocolError, match="own signer"):
        decode_envelope(Envelope.seal(Commitment(root), identity=ALICE, job_id=JOB, seq=1, deadline=9).encode())


def test_seal_refuses_bad_arguments():
    with pytest.raises(LocalProtocolError):
        Envelope.seal(object(), identity=CLIENT, job_id=JOB, seq=1, deadline=1)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        request(job=b"short")
    with pytest.raises(LocalProtocolError):
        request(seq=-1)
    with pytest.raises(LocalProtocolError):
        request(deadline=1 << 64)


def test_replay_guard():
    guard = ReplayGuard()
    guard.accept(request(seq=3), now=10)
    assert guard.highest(CLIENT.node_id, JOB) == 3
    for stale in (request(seq=3), request(seq=2)):
        with pytest.raises(RemoteProtocolError, match="replays"):
            guard.check(stale, now=10)
    with pytest.raises(RemoteProtocolError, match="expired"):
        guard.check(request(seq=4, deadline=9), now=10)
    with pytest.raises(RemoteProtocolError, match="arrived in job"):
        guard.check(request(seq=4), now=10, job_id=bytes(32))
    guard.check(request(seq=4), now=10)  # check alone records nothing
    assert guard.highest(CLIENT.node_id, JOB) == 3
    guard.accept(request(seq=1, job=bytes([1]) * 32), now=10)  # another job has its own sequence
    guard.accept(request(seq=1, identity=ALICE), now=10)        # so has another sender
    guard.accept(request(seq=9, deadline=10), now=10)           # a deadline is inclusive
    assert guard.highest(CLIENT.node_id, JOB) == 9


# --- fuzz ---------------------------------------------------------------------------------------------


def mutations(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    choice = rng.randrange(6)
    if choice == 0:
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif choice == 1:
        b[rng.randrange(len(b))] = rng.randrange(256)
    elif choice == 2:
        del b[rng.randrange(len(b)):]
    elif choice == 3:
        i = rng.randrange(len(b) + 1)
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
    elif choice == 4:
        other = rng.choice(CORPUS)
        i, j = rng.randrange(len(b)), rng.randrange(len(other))
        b = b[:i] + bytearray(other[j:])
    else:
        i = rng.randrange(len(b))
        del b[i:i + rng.randrange(1, 9)]
    return bytes(b)


def decode_only_remote(data: bytes) -> Envelope | None:
    try:
        return decode_envelope(data, max_size=MAX_TENSOR_MESSAGE_SIZE)
    except RemoteProtocolError:
        return None
    # any other exception propagates and fails the test


def test_fuzz_random_bytes_raise_only_remote_errors():
    rng = random.Random(1)
    for _ in range(1500):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        if rng.random() < 0.5:  # start like a map so the parser gets further
            data = bytes([0x88]) + data
        assert decode_only_remote(data) is None


def test_fuzz_mutated_messages_raise_only_remote_errors_and_never_pass():
    rng = random.Random(2)
    for _ in range(3000):
        original = rng.choice(CORPUS)
        mutated = mutations(rng, original)
        decoded = decode_only_remote(mutated)
        # canonical encoding + signature: no other byte string decodes to a valid message
        assert decoded is None or mutated == original


def test_fuzz_through_the_machines_raises_only_remote_errors():
    rng = random.Random(3)
    honest, cheat = World(PROGRAM, 6, 2), World(PROGRAM, 6, 2, tamper=Tamper("node", 3, 5))
    game = make_game(PROGRAM, 6, 2, challenger_world=honest, defender_world=cheat)
    opening = game.challenger.open_dispute(game.defender.trace_root, now=100)
    requests = game.referee.receive(opening.envelope, now=101)
    game.defender.receive(requests[1].envelope, now=102)
    now = 103
    for _ in range(600):
        mutated = mutations(rng, rng.choice(CORPUS))
        for machine in (game.referee, game.challenger, game.defender):
            try:
                machine.receive_bytes(mutated, now=now)
            except RemoteProtocolError:
                pass
        now += 1
    assert game.referee.state == "CHECKPOINTS"  # nothing of the noise was taken for a move
