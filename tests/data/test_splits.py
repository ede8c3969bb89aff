"""Split names from other toolkits and the carved (seeded, per-system) validation split."""

import csv
import json
import logging
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.corpus import CorpusError, count_labels
from sqa.data.readers import read_csv_manifest, read_singmos_pro
from sqa.data.valid_split import carve_test, carve_valid, read_valid_split, write_valid_split
from sqa.reports import results
from sqa.training.datamodule import MOSDataModule
from sqa.training.evaluation import evaluate
from sqa.training.run import run
from tests.data.test_corpus import make_singmos_pro
from tests.training.test_eval import assert_same, compose_eval
from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus


def write_manifest(root: Path, clips_per_system: dict[str, int], splits=("train",), seconds=0.1) -> Path:
    """Write one short wav per clip and a CSV manifest; clip k of a system gets splits[k % len].

    splits=None writes no split column (one table of ratings).
    """
    rows = ["wav_path,score,system_id,sample_id" + (",split" if splits else "")]
    t = np.arange(int(16000 * seconds)) / 16000
    for s, (system, n) in enumerate(clips_per_system.items()):
        for k in range(n):
            name = f"{system}-u{k:02d}"
            sf.write(root / f"{name}.wav", 0.1 * np.sin(2 * np.pi * (200 + 30 * s + k) * t), 16000)
            split = f",{splits[k % len(splits)]}" if splits else ""
            rows.append(f"{name}.wav,{1 + (s + k) % 5},{system},{name}{split}")
    (root / "m.csv").write_text("\n".join(rows) + "\n")
    return root / "m.csv"


def test_csv_and_split_json_accept_the_split_names_of_other_toolkits(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 4, "B": 4}, splits=("train", "dev", "Validation", "eval"))
    corpus = read_csv_manifest(manifest)
    assert Counter(c.split for c in corpus.clips) == {"train": 2, "valid": 4, "test": 2}
    assert list(corpus.test_sets()) == ["test"]
    root = make_singmos_pro(tmp_path / "pro")
    split = json.loads((root / "info" / "split.json").read_text())
    split["singmospro-p1"]["val"] = split["singmospro-p1"].pop("valid")
    split["singmospro-p2"]["eval"] = split["singmospro-p2"].pop("test")
    (root / "info" / "split.json").write_text(json.dumps(split))
    pro = read_singmos_pro(root, ["singmospro-p1", "singmospro-p2"])
    assert [c.sample_id for c in pro.split("valid")] == ["s1-u2", "s3-u2"]
    assert [c.sample_id for c in pro.test_sets()["test2"]] == ["s3-u3"]


def test_an_unknown_split_name_is_an_error_listing_the_accepted_names(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 2}, splits=("train", "holdout"))
    with pytest.raises(
        CorpusError, match=r"m.csv:3: unknown split 'holdout'; accepted: train, valid \(or dev"
    ):
        read_csv_manifest(manifest)
    root = make_singmos_pro(tmp_path / "pro")
    split = json.loads((root / "info" / "split.json").read_text())
    split["singmospro-p2"]["heldout"] = []
    (root / "info" / "split.json").write_text(json.dumps(split))
    with pytest.raises(
        CorpusError, match=r"split.json \['singmospro-p2'\]: unknown split 'heldout'.*test \(or eval\)"
    ):
        read_singmos_pro(root, ["singmospro-p1"])


def test_a_singmos_pro_batch_without_valid_is_read(tmp_path):
    root = make_singmos_pro(tmp_path)
    split = json.loads((root / "info" / "split.json").read_text())
    del split["singmospro-p1"]["valid"]
    (root / "info" / "split.json").write_text(json.dumps(split))
    corpus = read_singmos_pro(root, ["singmospro-p1"])
    assert list(corpus.valid_sets()) == ["singmospro-p2"]
    assert "s1-u2" not in {c.sample_id for c in corpus.clips}


def test_carved_split_is_seeded_and_stratified_by_system(tmp_path):
    corpus = read_csv_manifest(write_manifest(tmp_path, {"A": 20, "B": 10, "C": 3, "D": 2, "E": 1}))
    carved = carve_valid(corpus, 0.2, seed=0)
    valid = Counter(c.system_id for c in carved.split("valid"))
    # round(0.2 n), at least one, and every system keeps a training clip; E cannot give one.
    assert valid == {"A": 4, "B": 2, "C": 1, "D": 1}
    assert Counter(c.system_id for c in carved.split("train")) == {"A": 16, "B": 8, "C": 2, "D": 1, "E": 1}
    ids = lambda c: sorted(x.sample_id for x in c.split("valid"))  # noqa: E731
    assert ids(carve_valid(corpus, 0.2, seed=0)) == ids(carved)
    assert ids(carve_valid(corpus, 0.2, seed=1)) != ids(carved)
    # A system's draw does not depend on the other systems.
    fewer = read_csv_manifest(write_manifest(tmp_path, {"A": 20}))
    assert [i for i in ids(carved) if i.startswith("A")] == ids(carve_valid(fewer, 0.2, seed=0))
    assert len(carved.clips) == len(corpus.clips)


def test_datamodule_carves_where_there_is_no_validation_split_and_reuses_it_from_csv(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 10, "B": 10, "C": 10}, splits=("train", "train", "test"))
    dm = MOSDataModule(read_csv_manifest(manifest), valid_share=0.25, seed=3)
    assert sorted(dm.valid_names) == ["default"]
    assert {c.system_id for c in dm.corpus.split("valid")} == {"A", "B", "C"}
    assert sorted(c.sample_id for c in dm.carved_valid) == sorted(
        c.sample_id for c in dm.corpus.split("valid")
    )
    original = {c.sample_id: c.split for c in read_csv_manifest(manifest).clips}
    assert {original[c.sample_id] for c in dm.carved_valid} == {"train"}
    write_valid_split(dm.carved_valid, tmp_path / "valid_split.csv")
    with (tmp_path / "valid_split.csv").open() as fh:
        assert next(csv.reader(fh)) == ["sample_id", "system_id", "domain"]
    # Another seed, but the split read back from the CSV: the same validation clips.
    again = MOSDataModule(
        read_csv_manifest(manifest), seed=9, valid_split_csv=str(tmp_path / "valid_split.csv")
    )
    assert sorted(c.sample_id for c in again.corpus.split("valid")) == sorted(
        read_valid_split(tmp_path / "valid_split.csv")
    )
    assert again.corpus.fingerprint() == dm.corpus.fingerprint()
    assert MOSDataModule(read_csv_manifest(manifest), seed=9).corpus.fingerprint() != dm.corpus.fingerprint()


def test_a_corpus_with_validation_clips_is_not_carved_and_no_share_is_an_error(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 6, "B": 6}, splits=("train", "valid", "test"))
    dm = MOSDataModule(read_csv_manifest(manifest))
    assert dm.carved_valid == [] and len(dm.corpus.split("valid")) == 4
    bare = write_manifest(tmp_path, {"A": 6, "B": 6}, splits=("train", "test"))
    with pytest.raises(CorpusError, match="no validation clips; set data.valid_share > 0"):
        MOSDataModule(read_csv_manifest(bare), valid_share=0)


def test_a_reused_split_naming_a_test_clip_is_an_error(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 4}, splits=("train", "test"))
    (tmp_path / "v.csv").write_text("sample_id\nA-u01\n")
    with pytest.raises(CorpusError, match=r"v.csv: 1 listed validation clip.*'A-u01'"):
        MOSDataModule(read_csv_manifest(manifest), valid_split_csv=str(tmp_path / "v.csv"))


def test_label_counts_and_worker_cap(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 3, "B": 3}, splits=("train", "valid", "test"))
    counts = count_labels(read_csv_manifest(manifest).clips)
    # Scores 1 + (s + k) % 5: A gets 1, 2, 3 and B 2, 3, 4; system means 2 and 3.
    assert (counts.clips, counts.systems, counts.labels, counts.system_labels) == (6, 2, 4, 2)
    dm = MOSDataModule(read_csv_manifest(manifest), num_workers=10_000)
    assert 1 <= dm.num_workers <= 10_000 and dm.num_workers == len(__import__("os").sched_getaffinity(0))
    assert list(dm.label_counts()) == ["train", "valid/default", "test/test"]


def test_the_corpus_table_counts_the_listeners_of_each_group(tmp_path):
    from sqa.data.corpus import Clip, format_counts

    def rated(sample_id: str, *listeners: str) -> Clip:
        return Clip(
            sample_id, tmp_path / "x.wav", 3.0, "A", "d", "train", ratings=dict.fromkeys(listeners, 3.0)
        )

    counts = {
        "train": count_labels([rated("a", "l1", "l2"), rated("b", "l2", "l3")]),
        "test/t": count_labels([rated("c")]),
    }
    assert counts["train"].listeners == 3 and counts["test/t"].listeners == 0
    lines = format_counts(counts).splitlines()
    assert lines[0].split() == ["split", "clips", "systems", "labels", "sys-means", "listeners"]
    assert lines[1].split() == ["train", "2", "1", "1", "1", "3"]
    assert lines[2].split() == ["test/t", "1", "1", "1", "1", "0"]


def test_singmos_pro_without_valid_parts_gets_a_carved_split_per_batch(synthetic_root, tmp_path):
    (tmp_path / "info").mkdir()
    (tmp_path / "wav").symlink_to(synthetic_root / "wav")
    for name in ("score.json", "sys_info.json"):
        (tmp_path / "info" / name).write_text((synthetic_root / "info" / name).read_text())
    split = json.loads((synthetic_root / "info" / "split.json").read_text())
    for batch in split.values():
        del batch["valid"]
    (tmp_path / "info" / "split.json").write_text(json.dumps(split))
    corpus = read_singmos_pro(tmp_path, ["singmospro-p1", "singmospro-p2", "singmospro-p3"])
    assert not corpus.split("valid")
    dm = MOSDataModule(corpus, seed=0)
    # Every annotation batch gets a validation set, holding every one of its training systems.
    assert dm.valid_names == corpus.domains
    train_systems = {c.system_id for c in corpus.split("train")}
    assert {c.system_id for c in dm.corpus.split("valid")} == train_systems
    assert len(dm.carved_valid) == sum(
        max(1, round(0.1 * n)) for n in Counter(c.system_id for c in corpus.split("train")).values()
    )


def test_a_run_writes_its_carved_split_and_a_rerun_reuses_it(tmp_path):
    manifest = write_per_system_corpus(tmp_path / "corpus")
    manifest.write_text(manifest.read_text().replace(",valid\n", ",train\n"))
    short = ["trainer.max_steps=4", "trainer.val_check_interval=2", "bootstrap=0", "data.valid_share=0.25"]
    run(compose_train([*tiny_run_overrides(manifest), *short]), tmp_path / "a")
    carved = read_valid_split(tmp_path / "a" / "valid_split.csv")
    # One of each training system's 4 clips.
    assert sorted(i.split("-")[0] for i in carved) == [f"tr{i}" for i in range(6)] + ["va0", "va1"]
    reuse = [f"data.valid_split_csv={tmp_path / 'a' / 'valid_split.csv'}", "seed=5"]
    run(compose_train([*tiny_run_overrides(manifest), *short, *reuse]), tmp_path / "b")
    info = [json.loads((tmp_path / n / "run_info.json").read_text()) for n in ("a", "b")]
    assert info[0]["corpus_fingerprint"] == info[1]["corpus_fingerprint"]
    assert read_valid_split(tmp_path / "b" / "valid_split.csv") == carved


def test_carved_test_split_by_clip_or_by_system(tmp_path):
    corpus = read_csv_manifest(write_manifest(tmp_path, {"A": 20, "B": 10, "C": 3, "D": 2, "E": 1}, None))
    by_clip = carve_test(corpus, 0.2, seed=0)
    assert Counter(c.system_id for c in by_clip.split("test")) == {"A": 4, "B": 2, "C": 1, "D": 1}
    assert {c.test_set for c in by_clip.split("test")} == {"test"}
    # The test draw is not the validation draw of the same seed.
    assert {c.sample_id for c in by_clip.split("test")} != {
        c.sample_id for c in carve_valid(corpus, 0.2, seed=0).split("valid")
    }
    by_system = carve_test(corpus, 0.4, seed=0, by="system")
    test_systems = {c.system_id for c in by_system.split("test")}
    # round(0.4 * 5) = 2 systems, with all their clips; no system on both sides.
    assert len(test_systems) == 2 and not test_systems & {c.system_id for c in by_system.split("train")}
    sizes = {"A": 20, "B": 10, "C": 3, "D": 2, "E": 1}
    assert len(by_system.split("test")) == sum(sizes[s] for s in test_systems)
    ids = lambda c: sorted(x.sample_id for x in c.split("test"))  # noqa: E731
    assert ids(carve_test(corpus, 0.4, seed=0, by="system")) == ids(by_system)
    assert any(ids(carve_test(corpus, 0.4, seed=s, by="system")) != ids(by_system) for s in range(1, 5))
    # One system: nothing to hold out by system (it must stay in training).
    one = read_csv_manifest(write_manifest(tmp_path, {"A": 8}, None))
    assert carve_test(one, 0.5, seed=0, by="system").split("test") == []


@pytest.mark.parametrize("split_by", ["clip", "system"])
def test_one_table_of_ratings_gets_test_and_validation_splits(tmp_path, split_by):
    manifest = write_manifest(tmp_path, {s: 6 for s in "ABCDEFGHIJ"}, None)
    dm = MOSDataModule(read_csv_manifest(manifest), seed=2, split_by=split_by)
    train, valid, test = ({c.system_id for c in dm.corpus.split(n)} for n in ("train", "valid", "test"))
    assert len(dm.carved_test) == len(dm.corpus.split("test")) > 0 and len(dm.carved_valid) > 0
    if split_by == "clip":
        assert train == valid == test == set("ABCDEFGHIJ")
        assert len(dm.carved_test) == 10 and len(dm.carved_valid) == 10
    else:
        assert not (train & valid or train & test or valid & test)
        assert (len(test), len(valid)) == (2, 1)
    # Written and read back, the test split is reused under another seed.
    write_valid_split(dm.carved_test, tmp_path / "test_split.csv")
    reuse = str(tmp_path / "test_split.csv")
    again = MOSDataModule(read_csv_manifest(manifest), seed=7, split_by=split_by, test_split_csv=reuse)
    reused = sorted(c.sample_id for c in again.corpus.split("test"))
    assert reused == sorted(c.sample_id for c in dm.carved_test)


def test_no_test_clips_and_no_share_is_an_error_whose_fix_works(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 6, "B": 6}, splits=("train", "valid"))
    with pytest.raises(CorpusError, match=r"no test clips; set data.test_share > 0"):
        MOSDataModule(read_csv_manifest(manifest), test_share=0)
    assert MOSDataModule(read_csv_manifest(manifest), test_share=0.2).corpus.split("test")
    bare = write_manifest(tmp_path, {"A": 6, "B": 6}, splits=("train", "test"))
    with pytest.raises(CorpusError, match="no validation clips; set data.valid_share > 0"):
        MOSDataModule(read_csv_manifest(bare), valid_share=0)
    assert MOSDataModule(read_csv_manifest(bare), valid_share=0.2).corpus.split("valid")


def test_a_one_table_manifest_trains_to_the_end_with_no_extra_option(tmp_path, caplog):
    manifest = write_per_system_corpus(tmp_path / "corpus")
    lines = manifest.read_text().splitlines()
    manifest.write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")
    assert "split" not in manifest.read_text()
    short = ["trainer.max_steps=4", "trainer.val_check_interval=2", "bootstrap=0"]
    run(compose_train([*tiny_run_overrides(manifest), *short]), tmp_path / "a")
    test = read_valid_split(tmp_path / "a" / "test_split.csv")
    assert read_valid_split(tmp_path / "a" / "valid_split.csv") and test
    assert (tmp_path / "a" / "export" / "config.yaml").is_file()
    info = json.loads((tmp_path / "a" / "run_info.json").read_text())
    assert info["splits"]["test/test"]["clips"] == len(test)
    # The export holds the carved test split, so eval.py scores the same test clips.
    assert read_valid_split(tmp_path / "a" / "export" / "test_split.csv") == test
    results = evaluate(compose_eval([f"export={tmp_path / 'a' / 'export'}"]), tmp_path / "eval")
    assert_same(results, json.loads((tmp_path / "a" / "metrics.json").read_text()))
    # The same manifest named on the command line has no split: every clip is evaluated, and a
    # line says so, naming the run's test split for its test clips only.
    named = [f"export={tmp_path / 'a' / 'export'}", "data=csv", f"data.corpus.path={manifest}"]
    caplog.set_level(logging.INFO, logger="sqa")
    clips = len(read_csv_manifest(manifest).clips)
    assert evaluate(compose_eval(named), tmp_path / "eval2")["test"]["utt"]["n"] == clips
    assert f"evaluating all of its {clips} clips as test set 'test'" in caplog.text
    assert "data.test_split_csv=<run dir>/test_split.csv" in caplog.text
    split = f"data.test_split_csv={tmp_path / 'a' / 'test_split.csv'}"
    assert_same(evaluate(compose_eval([*named, split]), tmp_path / "eval3"), results)


def test_carving_rounds_to_the_nearest_count_and_keeps_a_training_clip_at_any_share(tmp_path):
    corpus = read_csv_manifest(write_manifest(tmp_path, {"A": 9, "B": 7, "C": 3, "D": 2, "E": 1}))
    given = lambda share: Counter(c.system_id for c in carve_valid(corpus, share, 0).split("valid"))  # noqa: E731
    # 0.3 × 9 = 2.7 rounds up to 3, 0.3 × 7 = 2.1 down to 2; 0.3 × 3 and 0.3 × 2 still give one.
    assert given(0.3) == {"A": 3, "B": 2, "C": 1, "D": 1}
    # A share close to 1 still leaves every system one training clip.
    assert given(0.95) == {"A": 8, "B": 6, "C": 2, "D": 1}
    assert given(0.01) == {"A": 1, "B": 1, "C": 1, "D": 1}
    for share in (0, 1, -0.2, 1.5):
        with pytest.raises(ValueError, match=rf"the share to carve must be in \(0, 1\), got {share}"):
            carve_valid(corpus, share, 0)


def test_carving_by_system_needs_two_systems_and_keeps_one_in_training(tmp_path):
    systems = lambda corpus: {c.system_id for c in corpus.split("valid")}  # noqa: E731
    one = read_csv_manifest(write_manifest(tmp_path, {"A": 4}))
    assert systems(carve_valid(one, 0.5, 0, by="system")) == set()
    two = read_csv_manifest(write_manifest(tmp_path, {"A": 4, "B": 4}))
    assert len(systems(carve_valid(two, 0.5, 0, by="system"))) == 1
    # 0.9 x 3 rounds to 3 systems; one stays in training.
    three = read_csv_manifest(write_manifest(tmp_path, {"A": 4, "B": 4, "C": 4}))
    carved = carve_valid(three, 0.9, 0, by="system")
    assert len(systems(carved)) == 2 and len({c.system_id for c in carved.split("train")}) == 1
    # The default draws by clip: every system of two or more clips is on both sides.
    default = carve_valid(three, 0.5, 0)
    assert systems(default) == {c.system_id for c in default.split("train")} == {"A", "B", "C"}
    # A one-clip system read first gives nothing and the others still give theirs.
    first = read_csv_manifest(write_manifest(tmp_path, {"E": 1, "A": 4, "B": 2}))
    assert systems(carve_valid(first, 0.5, 0)) == {"A", "B"}
    with pytest.raises(
        ValueError, match=r"split_by must be one of \['auto', 'clip', 'system', 'song'\], got 'speaker'"
    ):
        carve_valid(three, 0.5, 0, by="speaker")


def test_a_split_csv_round_trips_sample_ids_with_commas_quotes_and_line_breaks(tmp_path):
    corpus = read_csv_manifest(write_manifest(tmp_path, {"A": 3}))
    odd = ["a,b", 'say "hi"', "two\r\nlines", "plain"]
    clips = [replace(corpus.clips[k % 3], sample_id=i) for k, i in enumerate(odd)]
    write_valid_split(clips, tmp_path / "odd.csv")
    assert read_valid_split(tmp_path / "odd.csv") == sorted(odd)
    (tmp_path / "huge.csv").write_text("sample_id\n" + "x" * 200_000 + "\n")
    with pytest.raises(CorpusError, match=r"huge.csv: not a CSV file \(field larger than field limit"):
        read_valid_split(tmp_path / "huge.csv")


def test_the_valid_split_csv_lists_clips_sorted_and_reads_back_with_clear_errors(tmp_path):
    corpus = read_csv_manifest(write_manifest(tmp_path, {"B": 3, "A": 3}))
    clips = list(reversed(corpus.clips))
    write_valid_split(clips, tmp_path / "v.csv")
    with (tmp_path / "v.csv").open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["sample_id", "system_id", "domain"]
    assert rows[1:] == [
        [c.sample_id, c.system_id, str(c.domain)] for c in sorted(clips, key=lambda c: c.sample_id)
    ]
    assert read_valid_split(tmp_path / "v.csv") == sorted(c.sample_id for c in clips)
    (tmp_path / "other.csv").write_text("system_id,sample_id\nA,x1\nB,x2\n")
    assert read_valid_split(tmp_path / "other.csv") == ["x1", "x2"]
    with pytest.raises(CorpusError, match=r"missing.csv: file not found"):
        read_valid_split(tmp_path / "missing.csv")
    (tmp_path / "no_id.csv").write_text("id,system_id\nx1,A\n")
    with pytest.raises(CorpusError, match=r"no_id.csv: no 'sample_id' column; found \['id', 'system_id'\]"):
        read_valid_split(tmp_path / "no_id.csv")
    (tmp_path / "empty.csv").write_text("sample_id,system_id\n")
    with pytest.raises(CorpusError, match=r"empty.csv: lists no sample IDs"):
        read_valid_split(tmp_path / "empty.csv")
    (tmp_path / "blank.csv").write_text("")
    with pytest.raises(CorpusError, match=r"blank.csv: no 'sample_id' column; found None"):
        read_valid_split(tmp_path / "blank.csv")


def test_runs_of_several_seeds_test_on_one_carving_and_another_split_seed_carves_another(tmp_path, capsys):
    manifest = write_per_system_corpus(tmp_path / "corpus")
    # A table of training rows only: both the test and the validation split are carved.
    manifest.write_text(manifest.read_text().replace(",valid\n", ",train\n").replace(",test\n", ",train\n"))
    short = ["trainer.max_steps=2", "trainer.val_check_interval=2", "bootstrap=0"]
    jobs = {
        "sweep/0": ["seed=0"],
        "sweep/1": ["seed=1"],
        "sweep/2": ["seed=2"],
        "mixed/1": ["seed=1", "data.split_seed=1"],
    }
    for folder, seeds in jobs.items():
        run(compose_train([*tiny_run_overrides(manifest), *short, *seeds]), tmp_path / folder)
    shutil.copytree(tmp_path / "sweep" / "0", tmp_path / "mixed" / "0")

    def carved(folder: str) -> tuple[list[str], list[str]]:
        return tuple(
            sorted(read_valid_split(tmp_path / folder / f"{s}_split.csv")) for s in ("test", "valid")
        )

    assert carved("sweep/0") == carved("sweep/1") == carved("sweep/2") != carved("mixed/1")
    assert carved("sweep/0")[0] != carved("mixed/1")[0] and carved("sweep/0")[1] != carved("mixed/1")[1]
    info = {f: json.loads((tmp_path / f / "run_info.json").read_text()) for f in jobs}
    assert [(i["seed"], i["split_seed"]) for i in info.values()] == [(0, 0), (1, 0), (2, 0), (1, 1)]
    # The seeds trained apart (their own order and initialisation) on the one carving.
    predictions = {f: (tmp_path / f / "predictions.csv").read_text() for f in ("sweep/0", "sweep/1")}
    assert predictions["sweep/0"] != predictions["sweep/1"]
    # One glob joins a sweep's seeds into one unmarked cell; another split seed is marked.
    assert results.main(["--cell", f"S={tmp_path}/sweep/*", "--cell", f"M={tmp_path}/mixed/*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # (Two steps learn nothing: `!` marks each run's failed learning check, beside the point here.)
    assert [line.split()[:2] for line in lines[2:4]] == [["S", "3!"], ["M", "2*!"]]
