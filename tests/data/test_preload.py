"""`data.preload`: clips held in memory where they fit (auto), served by the main process, alike to files."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa.data import dataset
from sqa.data.audio import DecodedAudio
from sqa.data.dataset import ClipDataset
from sqa.data.readers import read_csv_manifest
from sqa.training import datamodule
from sqa.training.datamodule import MOSDataModule
from tests.data.test_audio import settled

# Three stereo clips of 0.1 s at 8 kHz: 1,600 samples each once downmixed and resampled to 16 kHz,
# 6,400 bytes as float32; 19,200 for the corpus. Counting the file's frames (3,200) or both
# channels (38,400) instead gives another total.
HELD = 3 * 1600 * 4


def write_corpus(root: Path, clips: int = 3, seconds: float = 0.1, rate: int = 8000) -> Path:
    """Stereo clips at `rate` under `root` and their manifest: one training, validation and test clip each."""
    rows = ["wav_path,score,system_id,sample_id,split"]
    t = np.arange(int(rate * seconds)) / rate
    for k in range(clips):
        tone = 0.1 * np.sin(2 * np.pi * (300 + 40 * k) * t)
        sf.write(root / f"c{k}.wav", np.stack([tone, 0.5 * tone], axis=1), rate)
        rows.append(f"c{k}.wav,{1 + k % 5},S{k % 2},c{k},{('train', 'valid', 'test')[k % 3]}")
    (root / "m.csv").write_text("\n".join(rows) + "\n")
    return root / "m.csv"


@pytest.mark.parametrize(("budget", "held"), [(HELD, True), (HELD - 1, False)])
def test_auto_holds_a_corpus_whose_decoded_clips_fit_the_budget_and_reads_a_larger_one_from_files(
    budget, held, tmp_path, monkeypatch
):
    monkeypatch.setattr(datamodule, "PRELOAD_AUTO_BYTES", budget)
    dm = MOSDataModule(read_csv_manifest(write_corpus(tmp_path)), preload="auto", num_workers=2)
    assert dm.preload is held
    # Held clips are served by this process; clips read from files by the workers configured.
    assert dm.train_dataloader().num_workers == (0 if held else min(2, datamodule.available_cpus()))


@pytest.mark.parametrize("preload", [True, False])
def test_an_explicit_preload_wins_over_the_budget(preload, tmp_path, monkeypatch):
    monkeypatch.setattr(datamodule, "PRELOAD_AUTO_BYTES", HELD if not preload else 0)
    dm = MOSDataModule(read_csv_manifest(write_corpus(tmp_path)), preload=preload)
    assert dm.preload is preload


def test_held_clips_give_the_batches_that_clips_read_from_files_give(tmp_path):
    # Longer clips cropped at random: the crops depend on the seed, the clip and the epoch alone.
    corpus = read_csv_manifest(write_corpus(tmp_path, clips=9, seconds=1.5))

    def batches(preload: bool) -> list[dict]:
        dm = MOSDataModule(
            corpus, preload=preload, num_workers=1, batch_size=2, max_train_seconds=0.5, seed=3
        )
        loader = dm.train_dataloader()
        out = []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            out.extend(loader)
        return out

    held, read = batches(True), batches(False)
    assert len(held) == len(read) == 4
    for a, b in zip(held, read, strict=True):
        assert a["sample_id"] == b["sample_id"]
        torch.testing.assert_close(a["wav"], b["wav"], atol=0, rtol=0)
        torch.testing.assert_close(a["lengths"], b["lengths"], atol=0, rtol=0)


def test_preload_is_true_false_or_auto(tmp_path):
    with pytest.raises(ValueError, match="preload must be true, false or 'auto', got 'yes'"):
        MOSDataModule(read_csv_manifest(write_corpus(tmp_path)), preload="yes")


def test_this_process_keeps_the_clips_it_reads_and_a_loader_worker_keeps_none(tmp_path, monkeypatch):
    corpus = read_csv_manifest(write_corpus(tmp_path))
    for clip in corpus.clips:
        settled(clip.path)
    kept = DecodedAudio(1 << 20)
    monkeypatch.setattr(dataset, "DECODED", kept)
    clips = ClipDataset(corpus.clips, corpus, 16000)
    clips[0]
    assert kept.bytes == 1600 * 4
    # The same read in a data loader's worker process decodes the file and keeps nothing of it.
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    worker = clips[1]["wav"]
    assert kept.bytes == 1600 * 4
    monkeypatch.undo()
    torch.testing.assert_close(worker, clips[1]["wav"], atol=0, rtol=0)
