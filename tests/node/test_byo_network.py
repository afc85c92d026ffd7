"""Bring your own job through the network: the client's own text (a BPE tokenizer trained on it) and
its own initial weights (a GPT-2-layout safetensors file) travel to the providers and the auditor as
blobs, bound into the job's terms. An honest provider's run is audited and agreed with; a provider
that trains on other data loses the dispute and its stake. Real libp2p hosts, the embedded EVM."""
from __future__ import annotations

import pytest
import trio

from contracts import JobStatus
from node.roles.context import context_of
from repops_cupy.jobspec import file_hash, load_job
from repops_cupy.models import build_network, init_params
from repops_cupy.tokenizer import train_bpe
from repops_cupy.weights import save_weights

from .conftest import trio_test
from .test_roles_inprocess import context_key
from .test_roles_support import advance_embedded_chain, audits_of, submitted_with_a_cheater, wait_for, write_job

TEXT = ("Shall I compare thee to a summer's day? Thou art more lovely and more temperate: rough winds do shake "
        "the darling buds of May, and summer's lease hath all too short a date. ") * 12

BYO_JOB = """\
[job]
name = "byo-finetune"
seed = 5
steps = 6
batch_size = 4
checkpoint_interval = 2

[data]
kind = "text"
path = "my-text.txt"
context = 8
tokenizer = "bpe"
vocab_size = 300

[model]
kind = "gpt"
d_model = 16
n_layers = 1
n_heads = 2
d_ff = 32
tie_head = true
init = "pretrained.safetensors"

[optimizer]
kind = "adamw"
lr = 0.01
"""


def write_byo_job(directory):
    (directory / "my-text.txt").write_text(TEXT, encoding="utf-8")
    raw_spec = load_job(write_job(directory, BYO_JOB.replace('init = "pretrained.safetensors"\n', ""), "shape.toml"))
    net = build_network(raw_spec.model, vocab_size=raw_spec.data.vocab_size, context=raw_spec.data.context)
    save_weights(directory / "pretrained.safetensors", init_params(net, 1234), layout="gpt2")
    return write_job(directory, BYO_JOB, "byo.toml")


async def audited_and_settled(net):
    """The auditor's verdicts on ``net``'s job (the honest provider ok, the cheater challenged),
    then the job settled; returns (the client's result, honest key, cheater key)."""
    client_role, honest, cheater, auditor, job_id, cj = net
    await wait_for(lambda: audits_of(auditor, job_id) is not None, timeout=120)
    audits = audits_of(auditor, job_id)
    honest_key, cheater_key = context_key(honest), context_key(cheater)
    assert audits[honest_key]["state"] == "ok"  # the auditor's own run agrees with the honest provider's
    assert audits[cheater_key]["state"] == "challenged"
    await wait_for(lambda: all(s.recorded for s in cj.sessions), timeout=120)
    advance_embedded_chain(600)
    return await client_role.wait(job_id), honest_key, cheater_key


@pytest.mark.slow
@trio_test(timeout=480)
async def test_own_text_and_weights_audited_and_a_provider_on_other_data_loses(tmp_path):
    job_file = write_byo_job(tmp_path)
    async with trio.open_nursery() as nursery:
        net = await submitted_with_a_cheater(nursery, tmp_path, job_file, "other-data")
        await wait_for(lambda: net[5].state == "verified", timeout=240)
        _, honest, cheater, _, job_id, _ = net
        # the user's files reached every party as blobs and are what the job was built from
        for name in ("honest", "cheater"):
            job_dir = tmp_path / name / "jobs" / job_id.hex()
            assert (job_dir / "data.txt").read_bytes() == (tmp_path / "my-text.txt").read_bytes()
            assert (job_dir / "init.safetensors").read_bytes() == (tmp_path / "pretrained.safetensors").read_bytes()
        training, _ = context_of(honest).trainings[job_id]
        assert training.dataset.arrays["tokenizer"].tobytes() == train_bpe(TEXT, 300)
        assert training.spec.model.init_hash == file_hash(tmp_path / "pretrained.safetensors")

        result, honest_key, cheater_key = await audited_and_settled(net)
        assert result["status"] == JobStatus.FINALIZED.name
        assert result["providers"][honest_key]["outcome"] == "paid"
        assert result["providers"][cheater_key]["outcome"] == "slashed"
        assert result["verdicts"] and all(v["faults"][0]["party"] == cheater_key for v in result["verdicts"])
        assert all(v["faults"][0]["reason"] == "wrong-result" and v["recorded"] for v in result["verdicts"])
        assert result["result_from"] == honest_key
        weights = (tmp_path / "client" / "results" / job_id.hex() / "weights.safetensors").read_bytes()
        run_dir = tmp_path / "honest" / "jobs" / job_id.hex() / "run"
        assert weights == max(run_dir.glob("step-*.safetensors")).read_bytes()
        assert {d.status for d in cheater.storage.disputes(job_id=job_id)} == {"lost"}
        nursery.cancel_scope.cancel()
