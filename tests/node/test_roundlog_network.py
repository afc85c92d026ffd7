"""Rounding-log jobs through the network: a torch model class these tests define (in
`roundlog_test_model`, shipped with no gavel package) goes client -> provider -> auditor, its
code and the client's own data files travelling in the job's bundle and bound into the terms; a
provider that perturbs a weight, or trains on other data, is caught. Real libp2p hosts, the
embedded EVM."""
from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import numpy as np
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
from .test_byo_images_network import IMAGE_JOB, write_image_job
from .test_byo_network import TEXT
from .test_roles_inprocess import context_key
from .test_roles_support import (
    advance_embedded_chain, audits_of, in_a_thread, submitted_with_a_cheater, wait_for, write_job,
)

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


# -- the client's own data ---------------------------------------------------------------

# the graph-mode images job's own [data] table: a rounding-log job reads it by the same rules
IMAGES_DATA = "[data]\n" + IMAGE_JOB.split("[data]\n")[1].split("\n[")[0]
TEXT_DATA = """\
[data]
kind = "text"
path = "my-text.txt"
context = 8
tokenizer = "my-tokenizer.json"
vocab_size = 300
"""


def _with_data(data: str, model: str) -> str:
    """ROUNDLOG_JOB with another [data] table and [model.args]."""
    head, _, rest = ROUNDLOG_JOB.partition("[model.args]\n")
    return head + "[model.args]\n" + model + "\n" + data + "\n[optimizer]\n" + rest.partition("[optimizer]\n")[2]


def images_job(directory: Path) -> Path:
    """A rounding-log job on the client's (24, 2, 8, 8) uint8 images and 3 classes of labels
    (the graph-mode images test's files)."""
    write_image_job(directory)
    return write_job(directory, _with_data(IMAGES_DATA, "in_features = 128\nhidden = 16\nnum_classes = 3\n"), "rl.toml")


def text_job(directory: Path) -> Path:
    """A rounding-log language model on the client's text and its BPE tokenizer file."""
    from repops_cupy.tokenizer import train_bpe

    (directory / "my-text.txt").write_text(TEXT, encoding="utf-8")
    (directory / "my-tokenizer.json").write_bytes(train_bpe(TEXT, 300))
    model = 'vocab = 300\nd = 8\n'
    return write_job(directory, _with_data(TEXT_DATA, model).replace("TinyTanhNet", "TinyTokenNet"), "rl.toml")


def _flip_a_label(directory: Path) -> None:
    labels = np.load(directory / "my-labels.npy")
    labels[0] = (labels[0] + 1) % 3
    np.save(directory / "my-labels.npy", labels)


def _another_tokenizer(directory: Path) -> None:
    from repops_cupy.tokenizer import train_bpe

    (directory / "my-tokenizer.json").write_bytes(train_bpe(TEXT + " Rough winds do shake the buds of May.", 300))


@pytest.mark.parametrize("job, names, change", [
    (images_job, {"data.npy": "my-images.npy", "labels.npy": "my-labels.npy"}, _flip_a_label),
    (text_job, {"data.txt": "my-text.txt", "tokenizer.json": "my-tokenizer.json"}, _another_tokenizer),
])
def test_the_bundle_carries_the_client_data_and_the_identity_binds_its_content(tmp_path, job, names, change):
    from node.training_oracle import job_terms
    from repops_cupy.checkpoint import state_hash

    client = tmp_path / "client"
    client.mkdir()
    job_file = job(client)
    toml_text, files = bundle_of_file(job_file)
    assert sorted(files) == sorted([MODEL_FILE, *names])
    bundled = tomllib.loads(toml_text)["data"]
    assert {bundled.get("path"), bundled.get("labels", bundled.get("tokenizer"))} == set(names)
    installed = install_job(tmp_path / "provider", toml_text, files)
    for name, mine in names.items():
        assert (installed.parent / name).read_bytes() == (client / mine).read_bytes()
    mine, theirs = load_training(job_file), load_training(installed)
    assert theirs.identity() == mine.identity() and theirs.dataset.root() == mine.dataset.root()
    state = mine.initial_state()
    assert state_hash(theirs.run_step(state).state) == state_hash(mine.run_step(state).state)

    change(client)  # one label, or the tokenizer: another data set, another job
    other = load_training(job_file)
    assert other.dataset.root() != mine.dataset.root() and other.identity() != mine.identity()
    signed = job_terms(mine, Identity.generate(), rules=DisputeRules(move_timeout_ms=30_000, clock_ms=120_000))
    with pytest.raises(BundleError, match="config_hash"):
        check_terms(signed, other)


def test_a_missing_or_damaged_data_file_is_refused_by_name(tmp_path):
    job_file = images_job(tmp_path)
    toml_text, files = bundle_of_file(job_file)
    # a bundle without its labels, or with a truncated image file: the provider refuses the job by name
    without = install_job(tmp_path / "no-labels", toml_text, {n: p for n, p in files.items() if n != "labels.npy"})
    with pytest.raises(BundleError, match=r"does not load: data\.labels: no such file"):
        load_training(without)
    (tmp_path / "cut.npy").write_bytes(files["data.npy"].read_bytes()[:200])
    damaged = install_job(tmp_path / "damaged", toml_text, {**files, "data.npy": tmp_path / "cut.npy"})
    with pytest.raises(BundleError, match=r"does not load: data\.path: data\.npy is not a readable \.npy file"):
        load_training(damaged)
    # the client's own file gone: the job cannot be bundled
    (tmp_path / "my-labels.npy").unlink()
    with pytest.raises(BundleError, match=r"data\.labels: .*my-labels\.npy is not a file \(to ship as labels\.npy\)"):
        bundle_of_file(job_file)


def test_a_model_that_does_not_fit_the_data_fails_the_run_by_name(tmp_path):
    from node.roles.runner import JobRun, RunFailed

    job_file = images_job(tmp_path)
    job_file.write_text(job_file.read_text().replace("in_features = 128", "in_features = 48"))
    run = JobRun(load_training(job_file), None, tmp_path / "run", job_id=bytes(32))
    with pytest.raises(RunFailed, match=r"rounding-log step 1: the model .*TinyTanhNet' fails on the job's data: "
                                        r"RuntimeError: mat1 and mat2 shapes cannot be multiplied"):
        in_a_thread(lambda: run.train_sync(threading.Event()))


def test_other_data_is_a_cheat_only_where_the_client_brought_data(tmp_path):
    import random

    from node.cheats import ROUNDLOG_STRATEGIES
    from node.training_oracle import CheatContext, StageTimer, TrainingOracle

    training = load_training(write_job(tmp_path, ROUNDLOG_JOB, "rl.toml"))
    context = CheatContext(training, TrainingOracle(training), random.Random(0), StageTimer())
    with pytest.raises(RuntimeError, match="synthetic: there is no client data to replace"):
        ROUNDLOG_STRATEGIES["roundlog-other-data"](context)


def _audit_states(auditor, job_id) -> dict:
    """Provider key -> audit state, whatever the job's row state (it moves on once a dispute runs)."""
    row = auditor.storage.get_job(job_id)
    audits = unpack(row.spec).get("audits", {}) if row is not None else {}
    return {key: audit["state"] for key, audit in audits.items()}


@pytest.mark.slow
@pytest.mark.parametrize("cheat", ["roundlog-perturb-weight", "roundlog-wrong-step", "roundlog-other-data"])
@trio_test(timeout=480)
async def test_roundlog_job_audited_over_the_network_and_a_cheater_caught(tmp_path, cheat):
    """perturb-weight: the cheater's step nodes are the job's, its state after the step is not (it
    loses at the state outputs); wrong-step: its step node claims the flipped weight (it loses when
    the referee reruns the step); other-data (on the client's images): its step node claims a step
    on other labels, and the referee reruns it on the job's data."""
    client_files = {"data.npy": "my-images.npy", "labels.npy": "my-labels.npy"} if cheat == "roundlog-other-data" else {}
    job_file = images_job(tmp_path) if client_files else write_job(tmp_path, ROUNDLOG_JOB, "rl.toml")
    async with trio.open_nursery() as nursery:
        client_role, honest, cheater, auditor, job_id, cj = await submitted_with_a_cheater(
            nursery, tmp_path, job_file, cheat)

        # the model's code and the client's data reached the providers in the bundle, and they train from them
        for name in ("honest", "cheater"):
            directory = tmp_path / name / "jobs" / job_id.hex()
            assert (directory / MODEL_FILE).read_bytes() == MODEL_SOURCE.read_bytes()
            for bundled, mine in client_files.items():
                assert (directory / bundled).read_bytes() == (tmp_path / mine).read_bytes()
        training, _ = context_of(honest).trainings[job_id]
        assert isinstance(training, RoundLogProgram)
        assert training.dataset.root() == cj.training.dataset.root()

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
