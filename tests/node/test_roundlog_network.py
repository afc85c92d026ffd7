"""Rounding-log jobs through the network: a torch model class these tests define (in
`roundlog_test_model`, shipped with no gavel package) goes client -> provider -> auditor, its
code travelling in the job's bundle and bound into the terms; a provider that perturbs a weight
is caught. Real libp2p hosts, the embedded EVM."""
from __future__ import annotations

from pathlib import Path

import pytest
import trio

from contracts import JobStatus
from node.framing import unpack
from node.roles.context import context_of
from node.roles.jobfiles import BundleError, bundle_of_file, check_terms, install_job, load_training
from node.roles.roundlog_jobs import MODEL_FILE, RoundLogProgram
from protocol import DisputeRules, Identity
from repops_cupy.roundlog.roundlog_job import train_job

from .conftest import trio_test
from .test_roles_inprocess import context_key
from .test_roles_support import advance_embedded_chain, audits_of, submitted_with_a_cheater, wait_for, write_job

MODEL_SOURCE = Path(__file__).with_name("roundlog_test_model.py")

ROUNDLOG_JOB = """\
[job]
name = "tiny-roundlog"
seed = 3
steps = 6
batch_size = 8
checkpoint_interval = 2

[model]
kind = "torch-roundlog"
module = "tests.node.roundlog_test_model:TinyTanhNet"

[model.args]
in_features = 48
hidden = 16
num_classes = 4

[data]
kind = "synthetic-images"
channels = 3
size = 4
num_classes = 4
noise = 0.8

[optimizer]
kind = "sgd"
lr = 0.05
"""


def _bundled(tmp_path: Path, job_text: str = ROUNDLOG_JOB, model_code: bytes | None = None) -> Path:
    """The job as a provider installs it from its bundle: job.toml and model.py."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    toml_text, files = bundle_of_file(write_job(tmp_path, job_text, "rl.toml"))
    directory = tmp_path / "bundle"
    if model_code is not None:
        directory.mkdir()
        (directory / MODEL_FILE).write_bytes(model_code)
        files = {}
    return install_job(directory, toml_text, files)


def test_the_bundle_carries_the_model_code_and_trains_as_the_roundlog_trainer(tmp_path):
    job_file = _bundled(tmp_path)
    assert (job_file.parent / MODEL_FILE).read_bytes() == MODEL_SOURCE.read_bytes()
    client_side = load_training(tmp_path / "rl.toml")
    provider_side = load_training(job_file)
    assert isinstance(provider_side, RoundLogProgram)
    assert client_side.identity() == provider_side.identity()
    state = provider_side.initial_state()
    hashes = []
    from repops_cupy.checkpoint import state_hash

    for _ in range(2):
        state = provider_side.run_step(state).state
        hashes.append(state_hash(state).hex())
    trace = train_job(job_file, tmp_path / "ref")  # the rounding-log trainer's own state hashes
    assert hashes[-1] == trace["checkpoints"][1]["state_hash"]
    assert hashes[0] == trace["steps"][0]["state_hash"]


def test_other_model_code_changes_the_commitments(tmp_path):
    from node.training_oracle import job_terms

    honest = load_training(_bundled(tmp_path / "a"))
    edited = MODEL_SOURCE.read_bytes().replace(b"nn.Tanh()", b"nn.Tanh(), nn.Identity()")
    other = load_training(_bundled(tmp_path / "b", model_code=edited))
    assert other.identity() != honest.identity()
    rules = DisputeRules(move_timeout_ms=30_000, clock_ms=120_000)
    signed = job_terms(honest, Identity.generate(), rules=rules)
    with pytest.raises(BundleError, match="config_hash"):
        check_terms(signed, other)


def test_a_class_the_bundled_file_does_not_define_is_refused(tmp_path):
    with pytest.raises(BundleError, match="cannot load .*TinyTanhNet.* from model.py"):
        load_training(_bundled(tmp_path, model_code=b"import torch.nn as nn\n\nclass Other(nn.Module):\n    pass\n"))
    with pytest.raises(BundleError, match="from model.py.*no_such_package"):
        load_training(_bundled(tmp_path / "c", model_code=b"import no_such_package\n"))


def test_a_module_with_no_file_to_ship_is_refused(tmp_path):
    text = ROUNDLOG_JOB.replace("tests.node.roundlog_test_model:TinyTanhNet", "no_such_pkg.models:Net")
    with pytest.raises(BundleError, match="no Python file for 'no_such_pkg.models'"):
        bundle_of_file(write_job(tmp_path, text, "rl.toml"))


def _audit_states(auditor, job_id) -> dict:
    """Provider key -> audit state, whatever the job's row state (it moves on once a dispute runs)."""
    row = auditor.storage.get_job(job_id)
    audits = unpack(row.spec).get("audits", {}) if row is not None else {}
    return {key: audit["state"] for key, audit in audits.items()}


@pytest.mark.slow
@pytest.mark.parametrize("cheat", ["roundlog-perturb-weight", "roundlog-wrong-step"])
@trio_test(timeout=480)
async def test_roundlog_job_audited_over_the_network_and_a_perturbed_weight_caught(tmp_path, cheat):
    """perturb-weight: the cheater's step nodes are the job's, its state after the step is not (it
    loses at the state outputs); wrong-step: its step node claims the flipped weight (it loses when
    the referee reruns the step)."""
    job_file = write_job(tmp_path, ROUNDLOG_JOB, "rl.toml")
    async with trio.open_nursery() as nursery:
        client_role, honest, cheater, auditor, job_id, cj = await submitted_with_a_cheater(
            nursery, tmp_path, job_file, cheat)

        # the model's code reached the providers in the bundle, and they train from it
        for name in ("honest", "cheater"):
            assert (tmp_path / name / "jobs" / job_id.hex() / MODEL_FILE).read_bytes() == MODEL_SOURCE.read_bytes()
        training, _ = context_of(honest).trainings[job_id]
        assert isinstance(training, RoundLogProgram)

        await wait_for(lambda: audits_of(auditor, job_id) is not None, timeout=240)  # trained, committed, audited
        honest_key, cheater_key = context_key(honest), context_key(cheater)
        # both audits recorded, and the challenge of the mismatch sent
        settled = ("ok", "challenged", "failed")  # both audits done, the challenge of a mismatch sent
        await wait_for(lambda: all(_audit_states(auditor, job_id).get(k) in settled for k in (honest_key, cheater_key)),
                       timeout=120)
        audits = _audit_states(auditor, job_id)
        assert audits[honest_key] == "ok"  # the auditor's own run agrees with the honest provider's
        assert audits[cheater_key] == "challenged"
        await wait_for(lambda: all(s.recorded for s in cj.sessions), timeout=180)
        advance_embedded_chain(600)
        result = await client_role.wait(job_id)

        assert result["status"] == JobStatus.FINALIZED.name
        assert result["providers"][honest_key]["outcome"] == "paid"
        assert result["providers"][cheater_key]["outcome"] == "slashed"
        assert result["verdicts"] and all(v["faults"][0]["party"] == cheater_key for v in result["verdicts"])
        assert all(v["faults"][0]["reason"] == "wrong-result" and v["recorded"] for v in result["verdicts"])
        states_after = len(training.state_names())  # the step nodes follow a leaf per state tensor
        at_outputs = 2 * states_after
        for v in result["verdicts"]:
            assert v["node"] == at_outputs if cheat == "roundlog-perturb-weight" else states_after <= v["node"] < at_outputs
        assert result["result_from"] == honest_key
        assert {d.status for d in cheater.storage.disputes(job_id=job_id)} == {"lost"}
        nursery.cancel_scope.cancel()
